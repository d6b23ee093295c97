/* fuzz_gz — the corpus reader (text_lines_read: plain or gzip, split into
 * lines) on any bytes as a .gz file, then the training-data path on it
 * (corpus_load: both sides, BPE-encoded with a small model). A gzip stream
 * that is cut short or fails its CRC must be an error, never a shorter
 * corpus. Seeds: tests/fuzz/gz/. */
#include "bpe.h"
#include "data.h"
#include "fuzz.h"

static Bpe *bpe;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int once;
    if (!once++) {
        fuzz_quiet();
        static const uint8_t text[] = "the cat sat on the mat\nDie Katze sa\xc3\x9f auf der Matte.\n";
        const char *files[1] = {fuzz_file(text, sizeof text - 1, ".learn.txt")};
        BpeLearnOptions o = {.vocab_size = 280, .normalization = "nfkc", .quiet = 1};
        if (!(bpe = bpe_learn(files, 1, &o))) abort();
    }
    const char *path = fuzz_file(data, n, ".gz");
    TextLines t;
    if (text_lines_read(&t, path) == 0) text_lines_free(&t);
    Corpus c;
    CorpusStats st;
    if (corpus_load(&c, path, path, bpe, NULL, &st) == 0) corpus_free(&c);
    error_clear();
    return 0;
}
