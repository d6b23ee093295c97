/* fuzz_bpe_model — the BPE model reader (bpe_load: the text format, or a
 * checkpoint's tokenizer), then the model in use: encode and decode a few
 * lines, and write it out and read it back (the text must be the same).
 * Seeds: tests/fuzz/bpe_model/. */
#include "bpe.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int once;
    if (!once++) fuzz_quiet();
    Bpe *b = bpe_load(fuzz_file(data, n, ".bpe"));
    if (!b) { error_clear(); return 0; }
    static const char *lines[] = {"w1 w2 v3", "", "  Hello,  WORLD! \xc3\xa9\xe2\x96\x81 ", "\xff\xfe bad \xe2\x82", "<unk> </s> <pad>"};
    int *ids = NULL, cap = 0, bad;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        int k = bpe_encode(b, lines[i], strlen(lines[i]), &ids, &cap, &bad);
        if (k < 0) abort();
        for (int t = 0; t < k; t++)
            if (ids[t] < 0 || ids[t] >= bpe_vocab_size(b)) abort();
        free(bpe_decode(b, ids, k));
    }
    free(ids);
    char *text = bpe_to_string(b);
    Bpe *b2 = bpe_from_string(text, "fuzz[round trip]");
    if (!b2) { fprintf(stderr, "written model does not read back: %s\n", error_message()); abort(); }
    char *text2 = bpe_to_string(b2);
    if (strcmp(text, text2)) { fprintf(stderr, "model text changed in a round trip\n"); abort(); }
    free(text);
    free(text2);
    bpe_free(b2);
    bpe_free(b);
    return 0;
}
