/* decode.c — tfm translate: translate stdin to stdout with beam search. */
#include "cli.h"
#include "util.h"

#include <stdio.h>

int cmd_translate(int argc, char **argv) {
    if (argc > 1 && is_help(argv[1])) {
        printf("usage: tfm translate [options]\n\ntranslate stdin to stdout with beam search (not implemented yet)\n\nexample: tfm translate -m run/best.safetensors < test.en > test.de\n");
        return 0;
    }
    return not_implemented("tfm translate");
}
