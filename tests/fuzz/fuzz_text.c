/* fuzz_text — the UTF-8 text readers, on any bytes: the first byte picks
 *   0: `tfm bpe encode` (pieces), 1: `tfm bpe encode --ids`, then decode,
 *   2: `tfm translate` (a 1+1-layer, d_model 8 model made at start-up),
 *   3: bleu_read_lines (as `tfm bleu` reads, with --replace-invalid and
 *      without), each tokenizer, BLEU and chrF of the text against itself;
 * the rest is the text (stdin, or a file). Seeds: tests/fuzz/text/. */
#include "bleu.h"
#include "bpe.h"
#include "checkpoint.h"
#include "cli.h"
#include "config.h"
#include "fuzz.h"
#include "model.h"

static char model_path[160], bpe_path[160];

/* A BPE model learned from a few lines, and an untrained tiny model. */
static void setup(void) {
    fuzz_quiet();
    static const uint8_t text[] = "the cat sat on the mat\nDie Katze saß auf der Matte.\n\xe2\x96\x81 caf\xc3\xa9 na\xc3\xafve\n";
    const char *files[1] = {fuzz_file(text, sizeof text - 1, ".learn.txt")};
    BpeLearnOptions o = {.vocab_size = 300, .normalization = "nfkc", .quiet = 1};
    Bpe *b = bpe_learn(files, 1, &o);
    if (!b) { fprintf(stderr, "%s\n", error_message()); abort(); }
    snprintf(bpe_path, sizeof bpe_path, "%s.bpe", files[0]);
    snprintf(model_path, sizeof model_path, "%s.safetensors", files[0]);
    Config c;
    if (config_load_string(&c,
                           "[model]\nencoder_layers = 1\ndecoder_layers = 1\nd_model = 8\nd_ff = 16\nheads = 2\n"
                           "max_positions = 64\n[data]\nmax_src_len = 40\nmax_tgt_len = 40\n[decode]\nbeam = 2\n",
                           "fuzz")) { fprintf(stderr, "%s\n", error_message()); abort(); }
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(b));
    Model m;
    memset(&m, 0, sizeof m);
    if (model_init(&m, &d, 1) || bpe_save(b, bpe_path) || checkpoint_save(model_path, &m, &c, b, NULL)) {
        fprintf(stderr, "%s\n", error_message());
        abort();
    }
    model_free(&m);
    bpe_free(b);
    config_free(&c);
}

static void cleanup(void) { unlink(model_path); unlink(bpe_path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int once;
    if (!once++) { setup(); atexit(cleanup); }
    if (n == 0) return 0;
    int which = data[0] % 4;
    const char *path = fuzz_file(data + 1, n - 1, ".txt");
    if (which <= 1) {
        fuzz_stdin(path);
        char *argv[] = {"bpe", "encode", "-m", bpe_path, which ? "--ids" : NULL, NULL};
        cmd_bpe(which ? 5 : 4, argv);
    } else if (which == 2) {
        fuzz_stdin(path);
        /* outputs of at most 3 tokens: the untrained model's search is not what is tested */
        char *argv[] = {"translate", "-q", "-m", model_path, "--threads", "1", "--max-len-a", "0", "--max-len-b", "3", NULL};
        cmd_translate(10, argv);
    } else {
        for (int replace = 0; replace <= 1; replace++) {
            char **lines = NULL;
            long k = bleu_read_lines(path, replace, &lines);
            if (k < 0) continue;
            static const char *toks[] = {"13a", "intl", "char", "none"};
            for (long i = 0; i < k && i < 64; i++)
                for (size_t t = 0; t < sizeof toks / sizeof *toks; t++) free(bleu_tokenize(toks[t], lines[i]));
            const char *const *refs[1] = {(const char *const *)lines};
            BleuOptions bo;
            bleu_options_default(&bo);
            BleuResult br;
            bleu_corpus((const char *const *)lines, refs, 1, k, &bo, &br);
            ChrfOptions co;
            chrf_options_default(&co);
            ChrfResult cr;
            chrf_corpus((const char *const *)lines, refs, 1, k, &co, &cr);
            bleu_free_lines(lines, k);
        }
    }
    error_clear();
    return 0;
}
