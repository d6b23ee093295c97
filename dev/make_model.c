/* make_model.c — write a checkpoint with random weights (for tests/translate.sh,
 * tests/eval.sh and scripts/bench-translate.sh):
 *   build/dev/make_model OUT CONFIG.ini BPE_MODEL [SEED [train]] [--set S.K=V ...]
 * The model has CONFIG's shape and BPE_MODEL's vocabulary; with "train" it
 * is a training checkpoint (zero Adam moments, step 1). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "checkpoint.h"
#include "config.h"
#include "model.h"
#include "util.h"

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: make_model OUT CONFIG BPE [SEED [train]] [--set S.K=V ...]\n"); return 2; }
    Config c;
    if (config_load(&c, argv[2]) < 0) die_error();   /* defaults, then the file */
    long seed = 1;
    int train = 0;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) { if (config_set(&c, argv[++i]) < 0) die_error(); }
        else if (!strcmp(argv[i], "train")) train = 1;
        else seed = atol(argv[i]);
    }
    if (config_validate(&c) < 0) die_error();
    Bpe *bpe = tokenizer_load(argv[3]);
    if (!bpe) die_error();
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    Model m;
    if (model_init(&m, &d, (uint64_t)seed) < 0) die_error();
    TrainState ts = {.step = 1, .rng_state = 1};
    if (train) {
        ts.adam_m = xcalloc(m.num_params, sizeof(float));
        ts.adam_v = xcalloc(m.num_params, sizeof(float));
    }
    if (checkpoint_save(argv[1], &m, &c, bpe, train ? &ts : NULL) < 0) die_error();
    free(ts.adam_m);
    free(ts.adam_v);
    model_free(&m);
    bpe_free(bpe);
    config_free(&c);
    return 0;
}

