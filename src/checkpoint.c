/* checkpoint.c — tfm average: average the weights of checkpoints. */
#include "cli.h"
#include "util.h"

#include <stdio.h>

int cmd_average(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm average [options]\n\naverage the weights of checkpoints (not implemented yet)\n\nexample: tfm average --last 5 -o avg.safetensors run/\n");
        return 0;
    }
    return not_implemented("tfm average");
}
