/* bleu.c — tfm bleu: corpus BLEU and chrF as sacreBLEU computes them. */
#include "cli.h"
#include "util.h"

#include <stdio.h>

int cmd_bleu(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm bleu [options]\n\ncorpus BLEU and chrF as sacreBLEU computes them (not implemented yet)\n\nexample: tfm bleu ref.de < hyp.de\n");
        return 0;
    }
    return not_implemented("tfm bleu");
}
