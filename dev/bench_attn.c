/* bench_attn.c — the attention core (ops.h attention_forward + backward) at
 * a model's shapes, fp32 against bf16 on each route this host can run,
 * side by side (the runs alternate per repetition, so all see the same
 * machine load):
 *   build/dev/bench_attn [THREADS [REPS [B H T DK [DROPOUT]]]]
 *   defaults: 2 threads, 5 repetitions (best kept), the base model at the
 *   benchmark batch: 128 sentences x 8 heads x 32 x 32 x 64, no dropout.
 * Where oneDNN is built, each on oneDNN's batched matmuls and on the
 * per-head loops (every build has those), each forced (ops.h attention_code);
 * the last lines say which of them the default (ATTN_AUTO) picks. One self-attention of T queries over T keys (no
 * padding), forward then backward. Prints per route the best wall time and the best CPU time of the
 * process (the steadier figure on a shared machine), the GFLOP/s of the six
 * products (12 B H T^2 Dk FLOP) and the ratio to fp32. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dispatch.h"
#include "gemm_bf16.h"
#include "ops.h"
#include "util.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    int B = argc > 6 ? atoi(argv[3]) : 128, H = argc > 6 ? atoi(argv[4]) : 8;
    int T = argc > 6 ? atoi(argv[5]) : 32, Dk = argc > 6 ? atoi(argv[6]) : 64;
    float p = argc > 7 ? (float)atof(argv[7]) : 0.0f;
    if (threads_init(nt)) die_error();
    int D = H * Dk;
    size_t n = (size_t)B * T * D;
    float *x[9];   /* q k v out dout dq dk dv, probs */
    for (int i = 0; i < 8; i++) x[i] = xaligned(n * sizeof(float));
    x[8] = xaligned((size_t)B * H * T * T * sizeof(float));
    Rng r;
    rng_seed(&r, 1);
    for (int i = 0; i < 5; i++)   /* bf16 values, so that the float routes may read them in place (held) */
        for (size_t j = 0; j < n; j++) x[i][j] = bf16_round((float)(rng_uniform(&r) * 2 - 1));
    /* the routes: fp32, then bf16 on each route this host and build can run */
    struct { const char *name; int bf16; Bf16Route route; AttnCode dnnl; } run[6] = {{"fp32 oneDNN", 0, BF16_EMULATED, ATTN_DNNL}};
    int nr = 1;
    run[nr].name = "bf16 emulated oneDNN (also kernel route)", run[nr].bf16 = 1, run[nr].dnnl = ATTN_DNNL, run[nr++].route = BF16_EMULATED;
    if (gemm_dnnl_built()) {
        if (gemm_dnnl_runs())
            run[nr].name = "bf16 oneDNN", run[nr].bf16 = 1, run[nr].dnnl = ATTN_DNNL, run[nr++].route = BF16_ONEDNN;
        run[nr].name = "fp32 per head", run[nr].bf16 = 0, run[nr].dnnl = ATTN_LOOPS, run[nr++].route = BF16_EMULATED;
        run[nr].name = "bf16 per head", run[nr].bf16 = 1, run[nr].dnnl = ATTN_LOOPS, run[nr++].route = BF16_EMULATED;
    }
    double best[6], best_cpu[6];
    for (int i = 0; i < nr; i++) best[i] = best_cpu[i] = 1e30;
    for (int rep = 0; rep <= reps; rep++)   /* rep 0: warm-up (oneDNN makes its primitives) */
        for (int i = 0; i < nr; i++) {
            if (run[i].bf16) bf16_route_set(run[i].route);
            attention_code(run[i].dnnl);
            /* held: q, k, v, dout read in place off the oneDNN route, as the model runs it (model.c core_held) */
            int held = run[i].bf16 && (run[i].dnnl == ATTN_LOOPS || run[i].route != BF16_ONEDNN);
            AttnShape s = {.B = B, .H = H, .Tq = T, .Tk = T, .Dk = Dk, .dropout = p, .seed = 42, .bf16 = run[i].bf16,
                           .held = held};
            double t0 = now_seconds(), c0 = cpu_now();
            attention_forward(seq_view(x[3], T, D), seq_view(x[0], T, D), seq_view(x[1], T, D), seq_view(x[2], T, D), x[8], &s);
            attention_backward(seq_view(x[5], T, D), seq_view(x[6], T, D), seq_view(x[7], T, D), seq_view(x[4], T, D),
                               seq_view(x[0], T, D), seq_view(x[1], T, D), seq_view(x[2], T, D), x[8], &s);
            double w = now_seconds() - t0, c = cpu_now() - c0;
            if (rep && w < best[i]) best[i] = w;
            if (rep && c < best_cpu[i]) best_cpu[i] = c;
        }
    double flop = 12.0 * B * H * T * T * Dk;
    printf("attention core, forward + backward: %d x %d heads x %d x %d x %d, dropout %g, %d threads, best of %d\n",
           B, H, T, T, Dk, p, nt, reps);
    for (int i = 0; i < nr; i++)
        printf("  %-40s wall %8.2f ms (%6.1f GFLOP/s, %.2fx fp32)   cpu %8.2f ms (%.2fx fp32)\n", run[i].name,
               1e3 * best[i], flop / best[i] * 1e-9, best[0] / best[i], 1e3 * best_cpu[i], best_cpu[0] / best_cpu[i]);
    attention_code(ATTN_AUTO);
    for (int i = 0; i < nr; i++) {   /* the default's choice for each precision and bf16 route */
        if (run[i].dnnl == ATTN_LOOPS) continue;
        if (run[i].bf16) bf16_route_set(run[i].route);
        AttnShape s = {.B = B, .H = H, .Tq = T, .Tk = T, .Dk = Dk, .dropout = p, .seed = 42, .bf16 = run[i].bf16};
        printf("  default for %-40s %s\n", run[i].name, attention_on_dnnl(&s) ? "oneDNN" : "per head");
    }
    for (int i = 0; i < 9; i++) free(x[i]);
    return 0;
}
