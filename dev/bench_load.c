/* bench_load.c — the cost of checking tensor checksums when a model loads
 * (scripts/bench-load.sh runs it):
 *   build/dev/bench_load MODEL.safetensors [REPS]
 * Loads MODEL (checkpoint_load: config, tokenizer, model) REPS times with the
 * CRC-32C checks and REPS times without (st_verify_crc = 0), alternating, from
 * the page cache (one untimed load first), and prints the best and the median
 * of each and their ratio. */
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double load_once(const char *path) {
    Config c = {0};
    Bpe *b = NULL;
    Model m;
    double t0 = now_seconds();
    if (checkpoint_load(path, &c, &b, &m, NULL)) die_error();
    double t = now_seconds() - t0;
    model_free(&m);
    bpe_free(b);
    config_free(&c);
    return t;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_load MODEL [REPS]\n"); return 2; }
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (reps < 1) reps = 1;
    log_quiet = 1;
    load_once(argv[1]);   /* into the page cache */
    double *with = xmalloc((size_t)reps * sizeof *with), *without = xmalloc((size_t)reps * sizeof *without);
    for (int i = 0; i < reps; i++) {
        st_verify_crc = i & 1;   /* alternate which goes first */
        (i & 1 ? with : without)[i] = load_once(argv[1]);
        st_verify_crc = !(i & 1);
        (i & 1 ? without : with)[i] = load_once(argv[1]);
    }
    qsort(with, (size_t)reps, sizeof *with, cmp_double);
    qsort(without, (size_t)reps, sizeof *without, cmp_double);
    printf("crc32c by %s\n", crc32c_hardware() ? "the SSE4.2 instruction (3 streams)" : "table");
    printf("load without checksums: best %.1f ms, median %.1f ms\n", 1e3 * without[0], 1e3 * without[reps / 2]);
    printf("load with checksums:    best %.1f ms, median %.1f ms\n", 1e3 * with[0], 1e3 * with[reps / 2]);
    printf("ratio with/without:     best %.3f, median %.3f\n", with[0] / without[0], with[reps / 2] / without[reps / 2]);
    free(with);
    free(without);
    return 0;
}
