/* bench_int8.c — int8 products at decoding shapes, side by side in one run
 * (a benchmark: scripts/bench-int8.sh builds and runs it).
 *
 * For each shape y [M, N] = x [M, K] W^T + b, M = the rows of a decoding
 * step (beam x batch hypotheses: 4, 32, 256), K and N those of a decoder
 * layer of the 3+3 x 256 Multi30k model (configs/multi30k.ini until
 * 2026-11-27: d_model 256, d_ff 1024, vocabulary 8,000)
 * and configs/base.ini (512, 2048, 37,000), times per call, best of REPS
 * rounds, the kernels taking turns within each round:
 *   fp32      tfm's fp32 decoding product (ops.h packed_linear_forward: W
 *             pre-packed for BLIS's micro-kernel);
 *   vnni      int8_linear with tfm's AVX512_VNNI kernel (where the CPU has it);
 *   onednn    int8_linear with oneDNN's matmul (where int8_onednn(): a build
 *             with oneDNN, which has VNNI or AMX-INT8 here);
 *   amx       int8_linear with tfm's own AMX-INT8 kernel (where int8_amx();
 *             a "-" elsewhere);
 *   model     int8_linear with the scalar model (what a CPU without VNNI
 *             runs; MODEL=0 leaves it out).
 * Every int8 column does the whole work: quantizing x's rows, the product,
 * the compensation, the scales and the bias; and they give the same bits
 * (checked here too). Then, per model and M, a decoder step: the products
 * of one step weighted by how often they run (per layer the self-attention
 * q, k, v, o and the cross-attention q, o: 6 of d x d; fc1; fc2; once the
 * output layer; the encoder side is left out).
 * Times are CPU time (the machine may be shared), per call; GOP/s count 2 M
 * N K operations. One thread (the decoder runs a batch per thread, its
 * products on that thread) unless THREADS is set. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/dispatch.h"
#include "../src/gemm_dnnl.h"
#include "../src/gemm_int8.h"
#include "../src/ops.h"
#include "../src/util.h"

/* CPU time of the process (all threads): on a shared machine, wall time
 * counts the time other jobs hold the core. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    int M, N, K;
    float *x, *y, *b, *scratch;
    PackedLinear pl;
    Int8Matrix q;
    Int8Scratch s;
    Int8Kernel kern;
} Case;

static void run_fp32(Case *c) { packed_linear_forward(c->y, c->x, &c->pl, c->M, c->scratch); }
static void run_int8(Case *c) { int8_linear(c->kern, c->y, c->N, c->x, c->K, c->M, &c->q, c->b, &c->s); }

enum { FP32, VNNI, ONEDNN, AMX, MODEL, NCOL };
static const char *const NAMES[NCOL] = {"fp32", "vnni", "onednn", "amx", "model"};

static void run(Case *c, int col) {
    if (col == FP32) { run_fp32(c); return; }
    c->kern = col == VNNI ? INT8_VNNI : col == ONEDNN ? INT8_ONEDNN : col == AMX ? INT8_AMX : INT8_MODEL;
    run_int8(c);
}

/* Times [NCOL] (seconds per call, -1: not run) for one shape. */
static void bench_shape(int M, int N, int K, int reps, const int *on, Rng *r, double *t) {
    Case c = {.M = M, .N = N, .K = K};
    float *w = xmalloc((size_t)N * K * sizeof(float));
    c.x = xmalloc((size_t)M * K * sizeof(float));
    c.y = xmalloc((size_t)M * N * sizeof(float));
    c.b = xmalloc((size_t)N * sizeof(float));
    for (size_t j = 0; j < (size_t)N * K; j++) w[j] = rng_normal(r) * 0.05f;
    for (size_t j = 0; j < (size_t)M * K; j++) c.x[j] = rng_normal(r);
    for (int j = 0; j < N; j++) c.b[j] = rng_normal(r);
    packed_linear_init(&c.pl, w, c.b, N, K, 1, 0);
    c.scratch = xaligned(packed_scratch_floats() * sizeof(float) + 64);
    if (int8_quantize_weights(&c.q, w, N, K, K)) die_error();
    double ops = 2.0 * M * N * K;
    int calls = (int)(1e9 / ops) + 1;   /* ~10 ms of fp32 per round at 100 GFLOP/s */
    float *first = NULL;
    for (int k = 0; k < NCOL; k++) {
        t[k] = -1;
        if (!on[k]) continue;
        run(&c, k);   /* warm-up (and oneDNN's primitives made) */
        if (k == FP32) continue;
        if (!first) {
            first = xmalloc((size_t)M * N * sizeof(float));
            memcpy(first, c.y, (size_t)M * N * sizeof(float));
        } else if (memcmp(first, c.y, (size_t)M * N * sizeof(float))) {
            die("%d x %d x %d: the %s kernel's bits differ from the first int8 kernel's", M, N, K, NAMES[k]);
        }
    }
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < NCOL; k++) {
            if (!on[k]) continue;
            int n = k == MODEL ? (calls + 3) / 4 : calls;   /* the model is ~10x slower */
            double t0 = cpu_seconds();
            for (int i = 0; i < n; i++) run(&c, k);
            double dt = (cpu_seconds() - t0) / n;
            if (t[k] < 0 || dt < t[k]) t[k] = dt;
        }
    packed_linear_free(&c.pl);
    int8_matrix_free(&c.q);
    int8_scratch_free(&c.s);
    free(first); free(w); free(c.x); free(c.y); free(c.b); free(c.scratch);
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    const char *th = getenv("THREADS"), *rp = getenv("REPS"), *mo = getenv("MODEL");
    if (threads_init(th ? atoi(th) : 1)) die_error();
    int reps = rp ? atoi(rp) : 5;
    int on[NCOL] = {1, int8_vnni(), int8_onednn() != 0, int8_amx(), !mo || strcmp(mo, "0")};
    struct { const char *name; int D, F, V, L; } models[] = {{"multi30k", 256, 1024, 8000, 3}, {"base", 512, 2048, 37000, 6}};
    int Ms[] = {4, 32, 256};
    printf("%d threads; int8 kernel tfm chooses here: %s; oneDNN's int8 implementation: %s; best of %d\n",
           threads_count(), int8_mode(), gemm_dnnl_built() ? gemm_dnnl_int8_impl() : "not built", reps);
    printf("%-9s %4s %6s %5s | %9s %9s %9s %9s %9s | %s\n", "model", "M", "N", "K", "fp32 us", "vnni us", "oneDNN us",
           "amx us", "model us", "speed vs fp32: vnni oneDNN amx model; oneDNN/vnni; GOP/s fp32 vnni oneDNN");
    Rng r;
    rng_seed(&r, 1);
    for (int mi = 0; mi < 2; mi++)
        for (int a = 0; a < 3; a++) {
            int D = models[mi].D, F = models[mi].F, V = models[mi].V, M = Ms[a];
            int shapes[4][3] = {{M, D, D}, {M, F, D}, {M, D, F}, {M, V, D}};
            double weight[4] = {6.0 * models[mi].L, models[mi].L, models[mi].L, 1};   /* runs per decoder step */
            double step[NCOL] = {0};
            for (int s = 0; s < 4; s++) {
                double t[NCOL];
                bench_shape(shapes[s][0], shapes[s][1], shapes[s][2], reps, on, &r, t);
                double ops = 2.0 * shapes[s][0] * shapes[s][1] * shapes[s][2];
                printf("%-9s %4d %6d %5d |", models[mi].name, shapes[s][0], shapes[s][1], shapes[s][2]);
                for (int k = 0; k < NCOL; k++) {
                    if (t[k] < 0) printf(" %9s", "-");
                    else printf(" %9.1f", t[k] * 1e6);
                    step[k] += t[k] < 0 ? 0 : weight[s] * t[k];
                }
                printf(" | x%.2f x%.2f x%.2f x%.2f; x%.2f; %.0f %.0f %.0f\n", t[VNNI] > 0 ? t[FP32] / t[VNNI] : 0,
                       t[ONEDNN] > 0 ? t[FP32] / t[ONEDNN] : 0, t[AMX] > 0 ? t[FP32] / t[AMX] : 0,
                       t[MODEL] > 0 ? t[FP32] / t[MODEL] : 0,
                       t[ONEDNN] > 0 && t[VNNI] > 0 ? t[VNNI] / t[ONEDNN] : 0, ops / t[FP32] / 1e9,
                       t[VNNI] > 0 ? ops / t[VNNI] / 1e9 : 0, t[ONEDNN] > 0 ? ops / t[ONEDNN] / 1e9 : 0);
            }
            printf("%-9s %4d %12s |", models[mi].name, M, "step");
            for (int k = 0; k < NCOL; k++) {
                if (step[k] > 0) printf(" %9.1f", step[k] * 1e6);
                else printf(" %9s", "-");
            }
            printf(" | decoder step: x%.2f x%.2f x%.2f x%.2f; oneDNN/vnni x%.2f\n",
                   step[VNNI] > 0 ? step[FP32] / step[VNNI] : 0, step[ONEDNN] > 0 ? step[FP32] / step[ONEDNN] : 0,
                   step[AMX] > 0 ? step[FP32] / step[AMX] : 0, step[MODEL] > 0 ? step[FP32] / step[MODEL] : 0,
                   step[ONEDNN] > 0 && step[VNNI] > 0 ? step[VNNI] / step[ONEDNN] : 0);
        }
    return 0;
}
