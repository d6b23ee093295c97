/* fuzz_config — the INI config path: config_load on the bytes as a file
 * (inih, then every key's parser and config_validate), and each line of the
 * bytes as a --set override. A config that loads must write out and load
 * back as the same model. Seeds: tests/fuzz/config/. */
#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int once;
    if (!once++) fuzz_quiet();
    Config c;
    if (config_load(&c, fuzz_file(data, n, ".ini")) == 0) {
        char *text = config_to_string(&c);
        Config d;
        if (config_load_string(&d, text, "fuzz[round trip]")) {
            fprintf(stderr, "written config does not read back: %s\n", error_message());
            abort();
        }
        char why[256];
        if (!config_same_model(&c, &d, why, sizeof why)) { fprintf(stderr, "round trip changed: %s\n", why); abort(); }
        config_free(&d);
        free(text);
    }
    config_free(&c);
    /* each line as `--set LINE` on the defaults */
    char *s = fuzz_string(data, n), *save = NULL;
    Config e;
    config_defaults(&e);
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) config_set(&e, line);
    config_free(&e);
    free(s);
    error_clear();
    return 0;
}
