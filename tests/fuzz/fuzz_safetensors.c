/* fuzz_safetensors — the JSON parser, the safetensors reader (st_read) and
 * the checkpoint loader (config, tokenizer and tensors from one file), on
 * any bytes. Seeds: tests/fuzz/safetensors/. */
#include "checkpoint.h"
#include "fuzz.h"
#include "json.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int once;
    if (!once++) fuzz_quiet();
    Json j;   /* the header parser on its own, without the length prefix */
    if (n > 8 && json_parse((const char *)data + 8, n - 8, "fuzz", &j) == 0) json_free(&j);
    const char *path = fuzz_file(data, n, ".safetensors");
    SafeTensors st;
    if (st_read(path, &st) == 0) st_free(&st);
    Config c;
    Bpe *bpe = NULL;
    Model m;
    TrainState ts;
    memset(&c, 0, sizeof c);
    memset(&m, 0, sizeof m);
    memset(&ts, 0, sizeof ts);
    if (checkpoint_load(path, &c, &bpe, &m, &ts) == 0) {
        model_free(&m);
        bpe_free(bpe);
        free(ts.adam_m);
        free(ts.adam_v);
        config_free(&c);
    }
    error_clear();
    return 0;
}
