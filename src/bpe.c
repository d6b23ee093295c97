/* bpe.c — tfm bpe: learn, apply and invert a joint BPE model. */
#include "cli.h"
#include "util.h"

#include <stdio.h>

int cmd_bpe(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm bpe [options]\n\nlearn, apply and invert a joint BPE model (not implemented yet)\n\nexample: tfm bpe learn --vocab-size 8000 -o bpe.model train.en train.de\n");
        return 0;
    }
    return not_implemented("tfm bpe");
}
