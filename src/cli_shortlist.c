/* cli_shortlist.c — `tfm shortlist`: learn a vocabulary shortlist from a
 * parallel corpus (shortlist.c) for `--shortlist` on translate, eval, serve. */
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "cli.h"
#include "dispatch.h"
#include "shortlist.h"
#include "util.h"

static void shortlist_help(void) {
    printf(
        "usage: tfm shortlist -m MODEL --src SRC --tgt TGT [-k K] [-n N] -o FILE\n"
        "\n"
        "Learn a vocabulary shortlist for decoding from a parallel corpus (the training\n"
        "data): with --shortlist FILE, translate, eval and serve compute the output\n"
        "layer and its softmax only over the candidates of each batch's sources:\n"
        "the special tokens, the N most frequent target tokens, and for each source\n"
        "token itself and its K lexical candidates, the target tokens t with the\n"
        "highest p(t|s) = c(s,t) / c(s) (c: sentence pairs holding s, and s and t;\n"
        "ties to the rarer t) that are not among the N frequent ones. The file is\n"
        "text with a version, the tokenizer's checksum and its own (doc/translate.md).\n"
        "\n"
        "options:\n"
        "  -m, --model FILE   a checkpoint or a BPE model file: the tokenizer (required)\n"
        "  --src FILE         source side of the corpus (plain or .gz; required)\n"
        "  --tgt FILE         target side, one line per source line (required)\n"
        "  -k K               lexical candidates per source token (default 50)\n"
        "  -n N               most frequent target tokens always in the list (default 100)\n"
        "  -o, --output FILE  the shortlist to write (required; atomically)\n"
        "  --threads N        threads (0: all cores; does not change the file)\n"
        "  -q, --quiet        no progress on stderr\n"
        "\n"
        "example: tfm shortlist -m run/average.safetensors --src train.en --tgt train.de -o run/shortlist.txt\n"
        "         tfm translate -m run/average.safetensors --shortlist run/shortlist.txt < test.en\n");
}

int cmd_shortlist(int argc, char **argv) {
    const char *model = NULL, *src = NULL, *tgt = NULL, *out = NULL, *v;
    int k = 50, n = 100, threads = 0, ended = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int kind = opt_kind(a, &ended);
        if (kind == 2) continue;
        if (kind == 1) usage_error("shortlist", "unexpected argument '%s'", a);
        if (is_help(a)) { shortlist_help(); return 0; }
        if (opt_value(argc, argv, &i, "-m|--model", &model) || opt_value(argc, argv, &i, "--src", &src) ||
            opt_value(argc, argv, &i, "--tgt", &tgt) || opt_value(argc, argv, &i, "-o|--output", &out))
            continue;
        if (opt_value(argc, argv, &i, "-k", &v)) k = opt_int("shortlist", "-k", v, 0, SHORTLIST_MAX_K);
        else if (opt_value(argc, argv, &i, "-n", &v)) n = opt_int("shortlist", "-n", v, 0, 1 << 30);
        else if (opt_value(argc, argv, &i, "--threads", &v)) threads = opt_int("shortlist", "--threads", v, 0, 4096);
        else if (opt_flag(argv, i, "-q|--quiet")) log_quiet = 1;
        else opt_unknown("shortlist", argv, i);
    }
    if (!model || !src || !tgt || !out) usage_error("shortlist", "-m MODEL, --src, --tgt and -o are required");
    const char *inputs[] = {model, src, tgt};
    if (output_check("shortlist -o", out, inputs, 3, 0)) die_error();
    if (threads_init(threads)) die_error();
    Bpe *bpe = tokenizer_load(model);
    if (!bpe) die_error();
    double t0 = now_seconds();
    Shortlist *sl = shortlist_build(bpe, src, tgt, k, n);
    if (!sl) die_error();
    if (shortlist_save(sl, out)) die_error();
    log_info("shortlist: %s (vocab %d, k %d, n %d) from %s and %s in %.1fs", out, shortlist_vocab(sl), k, n, src, tgt,
             now_seconds() - t0);
    shortlist_free(sl);
    bpe_free(bpe);
    return 0;
}
