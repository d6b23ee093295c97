/* bench_load.c — the cost of checking tensor checksums when a model loads
 * (scripts/bench-load.sh runs it):
 *   build/dev/bench_load MODEL.safetensors [REPS]
 * Loads MODEL (checkpoint_load: config, tokenizer, model) REPS times with the
 * CRC-32C checks and REPS times without (st_verify_crc = 0), alternating, from
 * the page cache (one untimed load first), and prints the best and the median
 * of each and their ratio, in wall-clock time and in CPU time (user + system
 * of this process: less disturbed by other jobs on a shared machine); then
 * the CRC-32C of the whole file alone, in cache (what the checks add). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static double last_cpu;

static double load_once(const char *path) {
    Config c = {0};
    Bpe *b = NULL;
    Model m;
    double t0 = now_seconds(), c0 = cpu_seconds();
    if (checkpoint_load(path, &c, &b, &m, NULL)) die_error();
    double t = now_seconds() - t0;
    last_cpu = cpu_seconds() - c0;
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
    double *cwith = xmalloc((size_t)reps * sizeof *cwith), *cwithout = xmalloc((size_t)reps * sizeof *cwithout);
    for (int i = 0; i < reps; i++) {
        st_verify_crc = i & 1;   /* alternate which goes first */
        (i & 1 ? with : without)[i] = load_once(argv[1]);
        (i & 1 ? cwith : cwithout)[i] = last_cpu;
        st_verify_crc = !(i & 1);
        (i & 1 ? without : with)[i] = load_once(argv[1]);
        (i & 1 ? cwithout : cwith)[i] = last_cpu;
    }
    qsort(with, (size_t)reps, sizeof *with, cmp_double);
    qsort(without, (size_t)reps, sizeof *without, cmp_double);
    qsort(cwith, (size_t)reps, sizeof *cwith, cmp_double);
    qsort(cwithout, (size_t)reps, sizeof *cwithout, cmp_double);
    printf("crc32c by %s\n", crc32c_hardware() ? "the SSE4.2 instruction (3 streams)" : "table");
    printf("load without checksums: best %.1f ms, median %.1f ms\n", 1e3 * without[0], 1e3 * without[reps / 2]);
    printf("load with checksums:    best %.1f ms, median %.1f ms\n", 1e3 * with[0], 1e3 * with[reps / 2]);
    printf("ratio with/without:     best %.3f, median %.3f\n", with[0] / without[0], with[reps / 2] / without[reps / 2]);
    printf("CPU time without:       best %.1f ms, median %.1f ms\n", 1e3 * cwithout[0], 1e3 * cwithout[reps / 2]);
    printf("CPU time with:          best %.1f ms, median %.1f ms\n", 1e3 * cwith[0], 1e3 * cwith[reps / 2]);
    printf("CPU ratio with/without: best %.3f, median %.3f\n", cwith[0] / cwithout[0], cwith[reps / 2] / cwithout[reps / 2]);
    size_t len;
    char *blob = read_file(argv[1], &len);
    if (!blob) die_error();
    double best = 1e30;
    uint32_t sink = 0;
    for (int i = 0; i < reps; i++) {
        double t0 = now_seconds();
        sink = crc32c(0, blob, len);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    printf("CRC-32C of the whole file (%.0f MB) in memory: best %.1f ms = %.1f GB/s (%08x)\n", len / 1e6, 1e3 * best,
           len / best / 1e9, sink);
    free(blob);
    free(with); free(without); free(cwith); free(cwithout);
    return 0;
}
