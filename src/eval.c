/* eval.c — tfm eval: NLL, perplexity and BLEU of a model on a dev set. */
#include "cli.h"
#include "util.h"

#include <stdio.h>

int cmd_eval(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm eval [options]\n\nNLL, perplexity and BLEU of a model on a dev set (not implemented yet)\n\nexample: tfm eval -m run/best.safetensors --src val.en --ref val.de\n");
        return 0;
    }
    return not_implemented("tfm eval");
}
