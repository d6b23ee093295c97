/* bench_int8.c — int8 products at decoding shapes, side by side in one run
 * (a benchmark: scripts/bench-int8.sh builds and runs it).
 *
 * For each shape y [M, N] = x [M, K] W^T, M = the rows of a decoding step
 * (beam x batch hypotheses), times per call, best of REPS rounds:
 *   fp32      tfm's fp32 decoding product (ops.h packed_linear_forward: W
 *             pre-packed for BLIS's micro-kernel);
 *   int8      int8_linear with the AVX512_VNNI kernel (where the CPU has it),
 *             everything included: quantizing x's rows, the product, the
 *             dequantization and the bias;
 *   model     int8_linear with the scalar model (what a CPU without VNNI runs);
 *   onednn    (built with -DTFM_DNNL) oneDNN's matmul, u8 x s8 -> s32, weights
 *             reordered once into the layout it chooses: the product alone
 *             (no quantization of x, no scales), so it is timed doing less
 *             than int8 does.
 * Times are CPU time (the machine may be shared), per call; GOP/s count 2 M
 * N K operations. One thread (the decoder runs a batch per
 * thread) unless THREADS is set. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/dispatch.h"
#include "../src/gemm_int8.h"
#include "../src/ops.h"
#include "../src/util.h"

#ifdef TFM_DNNL
#include <dnnl.h>
#define DN(call) do { dnnl_status_t st_ = (call); if (st_ != dnnl_success) die("oneDNN: %s failed (%d)", #call, (int)st_); } while (0)
#endif

/* CPU time of the process (all threads): on a shared machine, wall time
 * counts the time other jobs hold the core. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double best_of(int reps, int calls, void (*f)(void *), void *ctx) {
    double best = 1e30;
    f(ctx);   /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_seconds();
        for (int c = 0; c < calls; c++) f(ctx);
        double t = (cpu_seconds() - t0) / calls;
        best = t < best ? t : best;
    }
    return best;
}

typedef struct {
    int M, N, K;
    float *x, *y, *b, *scratch;
    PackedLinear pl;
    Int8Matrix q;
    Int8Scratch s;
    Int8Kernel kern;
#ifdef TFM_DNNL
    dnnl_primitive_t mm;
    dnnl_stream_t stream;
    dnnl_memory_t ma, mb, mc;
#endif
} Case;

static void run_fp32(void *p) { Case *c = p; packed_linear_forward(c->y, c->x, &c->pl, c->M, c->scratch); }
static void run_int8(void *p) { Case *c = p; int8_linear(c->kern, c->y, c->N, c->x, c->K, c->M, &c->q, c->b, &c->s); }
#ifdef TFM_DNNL
static void run_dnnl(void *p) {
    Case *c = p;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, c->ma}, {DNNL_ARG_WEIGHTS, c->mb}, {DNNL_ARG_DST, c->mc}};
    DN(dnnl_primitive_execute(c->mm, c->stream, 3, args));
    DN(dnnl_stream_wait(c->stream));
}

static void dnnl_setup(Case *c, dnnl_engine_t eng, dnnl_stream_t stream) {
    dnnl_memory_desc_t a_md, b_md, c_md, bu_md;
    dnnl_dims_t da = {c->M, c->K}, db = {c->K, c->N}, dc = {c->M, c->N};
    DN(dnnl_memory_desc_init_by_tag(&a_md, 2, da, dnnl_u8, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&b_md, 2, db, dnnl_s8, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&bu_md, 2, db, dnnl_s8, dnnl_ba));   /* W [N, K] row-major = B [K, N] "ba" */
    DN(dnnl_memory_desc_init_by_tag(&c_md, 2, dc, dnnl_s32, dnnl_ab));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &a_md, &b_md, NULL, &c_md));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
    const dnnl_memory_desc_t *bw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DN(dnnl_primitive_create(&c->mm, pd));
    DN(dnnl_memory_create(&c->ma, &a_md, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&c->mb, bw, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&c->mc, &c_md, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_memory_t mu;
    DN(dnnl_memory_create(&mu, &bu_md, eng, DNNL_MEMORY_ALLOCATE));
    void *h;
    DN(dnnl_memory_get_data_handle(mu, &h));
    for (size_t i = 0; i < (size_t)c->K * c->N; i++) ((int8_t *)h)[i] = (int8_t)(i * 7 % 255 - 127);
    DN(dnnl_memory_get_data_handle(c->ma, &h));
    for (size_t i = 0; i < (size_t)c->M * c->K; i++) ((uint8_t *)h)[i] = (uint8_t)(i * 13 % 256);
    dnnl_primitive_desc_t rpd;   /* the weights into oneDNN's layout, once (as at model load) */
    DN(dnnl_reorder_primitive_desc_create(&rpd, &bu_md, eng, bw, eng, NULL));
    dnnl_primitive_t rp;
    DN(dnnl_primitive_create(&rp, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, mu}, {DNNL_ARG_TO, c->mb}};
    DN(dnnl_primitive_execute(rp, stream, 2, args));
    DN(dnnl_stream_wait(stream));
    dnnl_primitive_destroy(rp);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(mu);
    dnnl_primitive_desc_destroy(pd);
    c->stream = stream;
}
#endif

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    const char *th = getenv("THREADS"), *rp = getenv("REPS");
    threads_init(th ? atoi(th) : 1);
    int reps = rp ? atoi(rp) : 5;
    /* (M, N, K): the multi30k/demo model (D 256, F 1024, V 5000) and the base model
     * (D 512, F 2048, V ~26k), at beam 4 x batch 64 = 256 rows and greedy batch 64 */
    int shapes[][3] = {{256, 256, 256}, {256, 1024, 256}, {256, 256, 1024}, {256, 5000, 256}, {64, 5000, 256},
                       {256, 512, 512}, {256, 2048, 512}, {256, 512, 2048}, {128, 26350, 512}, {64, 2048, 512}};
    int ns = (int)(sizeof shapes / sizeof shapes[0]);
    Rng r;
    rng_seed(&r, 1);
#ifdef TFM_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (its CPU ISA: %d), ", v->major, v->minor, v->patch, (int)dnnl_get_effective_cpu_isa());
#endif
    printf("%d threads, int8: %s, best of %d\n", threads_count(), int8_mode(), reps);
    printf("%5s %6s %5s | %9s %9s %9s %9s | %s\n", "M", "N", "K", "fp32 us", "int8 us", "model us", "oneDNN us",
           "int8/fp32 speed, oneDNN/int8 speed; GOP/s fp32 int8 oneDNN");
    for (int i = 0; i < ns; i++) {
        Case c = {.M = shapes[i][0], .N = shapes[i][1], .K = shapes[i][2]};
        float *w = xmalloc((size_t)c.N * c.K * sizeof(float));
        c.x = xmalloc((size_t)c.M * c.K * sizeof(float));
        c.y = xmalloc((size_t)c.M * c.N * sizeof(float));
        c.b = xmalloc((size_t)c.N * sizeof(float));
        for (size_t j = 0; j < (size_t)c.N * c.K; j++) w[j] = rng_normal(&r) * 0.05f;
        for (size_t j = 0; j < (size_t)c.M * c.K; j++) c.x[j] = rng_normal(&r);
        for (int j = 0; j < c.N; j++) c.b[j] = rng_normal(&r);
        packed_linear_init(&c.pl, w, c.b, c.N, c.K, 1, 0);
        c.scratch = xaligned(packed_scratch_floats() * sizeof(float) + 64);
        if (int8_quantize_weights(&c.q, w, c.N, c.K, c.K)) die_error();
        double ops = 2.0 * c.M * c.N * c.K;
        int calls = (int)(2e9 / ops) + 1;   /* ~20 ms of fp32 per round at 100 GFLOP/s */
        double t32 = best_of(reps, calls, run_fp32, &c), t8 = -1, tm, tdn = -1;
        if (int8_vnni()) { c.kern = INT8_VNNI; t8 = best_of(reps, calls, run_int8, &c); }
        c.kern = INT8_MODEL;
        tm = best_of(reps > 2 ? 2 : reps, calls > 3 ? calls / 3 : 1, run_int8, &c);
#ifdef TFM_DNNL
        dnnl_setup(&c, eng, stream);
        tdn = best_of(reps, calls, run_dnnl, &c);
        dnnl_primitive_destroy(c.mm);
        dnnl_memory_destroy(c.ma); dnnl_memory_destroy(c.mb); dnnl_memory_destroy(c.mc);
#endif
        double t8b = t8 > 0 ? t8 : tm;
        printf("%5d %6d %5d | %9.1f %9.1f %9.1f %9.1f | x%.2f, x%.2f; %.0f %.0f %.0f\n", c.M, c.N, c.K, t32 * 1e6,
               t8 * 1e6, tm * 1e6, tdn * 1e6, t32 / t8b, tdn > 0 ? t8b / tdn : 0, ops / t32 / 1e9, ops / t8b / 1e9,
               tdn > 0 ? ops / tdn / 1e9 : 0);
        packed_linear_free(&c.pl);
        int8_matrix_free(&c.q);
        int8_scratch_free(&c.s);
        free(w); free(c.x); free(c.y); free(c.b); free(c.scratch);
    }
#ifdef TFM_DNNL
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
#endif
    return 0;
}
