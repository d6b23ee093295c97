/* bench_amx.c — tfm's AMX-BF16 tile kernel (src/gemm_amx.c, the route
 * TFM_BF16_PRODUCTS=amx) against oneDNN 2.6.3's AMX matmul, at the twelve
 * products of a training step (the base model at the benchmark batch:
 * 4,096 rows, D 512, F 2,048, V 37,000, 906 output rows per chunk), each
 * side by side, taking turns, best of REPS (GFLOP/s):
 *   build/dev/bench_amx [THREADS [REPS]]   (defaults 2, 5)
 * oneDNN as tfm's step runs it (gemm_many on the oneDNN route: tfm's
 * pieces, both operands from 16-bit twins, nothing converted); tfm's
 * kernel as a step runs it: A converted and packed inside the call, B's
 * panels kept from the first call on where B is a weight (amx_weights);
 * then the same with k in one pass (amx_k_pass), and packing B every
 * call. BENCH_AMX_COLD=1 writes 256 MB before each call, so that no
 * operand starts in cache (as in a step, where each product's operands
 * were written long before); AMX_KC=N tries passes of N over k. Each
 * product's two results are checked against the bound of their sums'
 * roundings. Where there are no AMX-BF16 tiles it says so and stops;
 * BENCH_AMX_MODEL=1 then runs the same table on the kernel's scalar model
 * of the tiles at a small size (a check of the harness, not a timing:
 * tests/bf16.sh runs it).
 *
 * It began as a spike of the kernel alone, forward products only, in four
 * loop orders (at 9ca2591); those measurements, the reason the kernel
 * exists, are in doc/precision.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "dispatch.h"
#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "util.h"

static char *g_cold;
static void cold(void) {   /* caches flushed: a 256 MB pass */
    if (!getenv("BENCH_AMX_COLD")) return;
    if (!g_cold) g_cold = xaligned((size_t)256 << 20);
    memset(g_cold, 1, (size_t)256 << 20);
}
#define COLD() cold()
static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (threads_init(nt)) die_error();
    int kc = getenv("AMX_KC") ? atoi(getenv("AMX_KC")) : 0;   /* k per pass; 0: the kernel's own */
    amx_k_pass(kc);
    int amx = bf16_amx(), model = !amx;
    printf("bench_amx: %d threads; AMX-BF16 %s\n", nt, amx ? "yes" : "no");
    if (model && !getenv("BENCH_AMX_MODEL")) return 0;
    {
        int D = model ? 64 : 512, F = model ? 128 : 2048, N = model ? 256 : 4096, V = model ? 1000 : 37000;
        int C = model ? 60 : 906;
        struct { const char *name; int ta, tb, m, n, k; float beta; int weight; } P[] = {
            {"attn proj fwd  y=xW^T", 0, 1, N, D, D, 1, 1},   {"attn proj dx=dyW", 0, 0, N, D, D, 0, 1},
            {"attn proj dW+=dy^Tx", 1, 0, D, D, N, 1, 0},     {"fc1 fwd", 0, 1, N, F, D, 1, 1},
            {"fc1 dx=dyW", 0, 0, N, D, F, 1, 1},              {"fc1 dW+=dy^Tx", 1, 0, F, D, N, 1, 0},
            {"fc2 fwd", 0, 1, N, D, F, 1, 1},                 {"fc2 dx=dyW", 0, 0, N, F, D, 0, 1},
            {"fc2 dW+=dy^Tx", 1, 0, D, F, N, 1, 0},           {"logits=yE^T", 0, 1, C, V, D, 0, 1},
            {"dy=dlogitsE", 0, 0, C, D, V, 0, 1},             {"dE+=dlogits^Ty", 1, 0, V, D, C, 1, 0},
        };
        Bf16Route keep = bf16_route();
        if (gemm_dnnl_runs()) bf16_route_set(BF16_ONEDNN);
        printf("%s%-24s %6s %6s %6s %9s %9s %9s %10s %9s\n", model ? "(the model, small sizes: not a timing)\n" : "",
               "product", "m", "n", "k", "oneDNN", "tfm AMX", "one pass", "B packed", "err/bound");
        double tot[4] = {0, 0, 0, 0}, worst_all = 0;
        for (size_t q = 0; q < sizeof P / sizeof *P; q++) {
            int m = P[q].m, n = P[q].n, k = P[q].k, ta = P[q].ta, tb = P[q].tb;
            size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
            uint64_t s = 1000 + q;
            float *af = xaligned(na * 4), *bf = xaligned(nb * 4), *c0 = xaligned(nc * 4), *y0 = xaligned(nc * 4);
            float *y1 = xaligned(nc * 4);
            uint16_t *a = xaligned(na * 2), *b = xaligned(nb * 2);
            for (size_t i = 0; i < na; i++) { af[i] = bf16_round(frand(&s)); a[i] = bf16_from_float(af[i]); }
            for (size_t i = 0; i < nb; i++) { bf[i] = bf16_round(frand(&s)); b[i] = bf16_from_float(bf[i]); }
            for (size_t i = 0; i < nc; i++) c0[i] = frand(&s);
            int lda = ta ? m : k, ldb = tb ? k : n;
            /* best[0] oneDNN; [3] tfm's kernel packing B every call; [1], [2] B kept where it is a weight
             * (amx_weights, from round 0 on), as a step keeps it: k in passes (the default), k in one pass */
            double best[4] = {1e30, 1e30, 1e30, 1e30}, worst = 0;
            for (int r = 0; r <= reps; r++) {   /* round 0 warms up */
                if (gemm_dnnl_runs()) {
                    memcpy(y0, c0, nc * 4);
                    gemm_dnnl_shadow(af, a, na);
                    gemm_dnnl_shadow(bf, b, nb);
                    Gemm g = {ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y0, n, GEMM_BF16_HELD, NULL, 0};
                    COLD();
                    double t0 = now_seconds();
                    gemm_many(&g, 1);
                    if (r && now_seconds() - t0 < best[0]) best[0] = now_seconds() - t0;
                    gemm_dnnl_shadow(af, NULL, 0);
                    gemm_dnnl_shadow(bf, NULL, 0);
                }
                memcpy(y1, c0, nc * 4);
                COLD();
                double t0 = now_seconds();
                amx_bf16_gemm(model ? AMX_MODEL : AMX_TILES, ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y1, n);
                if (r && now_seconds() - t0 < best[3]) best[3] = now_seconds() - t0;
            }
            /* both sum the same exact products in fp32 in their own orders: each within k + 1 roundings of
             * 2^-24 of the sum of |terms| (|beta c| and every |a b|), so they differ by at most twice that;
             * checked at 4,096 elements */
            for (int e = 0; gemm_dnnl_runs() && e < 4096; e++) {
                size_t at = (size_t)((frand(&s) + 0.5f) * (nc - 1));
                int i = (int)(at / n), j = (int)(at % n);
                double sum = fabs(P[q].beta * c0[at]);
                for (int p = 0; p < k; p++)
                    sum += fabs((double)(ta ? af[(size_t)p * lda + i] : af[(size_t)i * lda + p]) *
                                (tb ? bf[(size_t)j * ldb + p] : bf[(size_t)p * ldb + j]));
                double d = fabs((double)y0[at] - y1[at]) / (2.0 * (k + 1) * ldexp(1.0, -24) * sum);
                if (d > worst || d != d) worst = d;
            }
            for (int o = 0; o < 2; o++) {
                amx_k_pass(o ? k : kc);
                if (P[q].weight) amx_weights(bf, nb);
                for (int r = 0; r <= reps; r++) {
                    memcpy(y1, c0, nc * 4);
                    COLD();
                    double t0 = now_seconds();
                    amx_bf16_gemm(model ? AMX_MODEL : AMX_TILES, ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y1, n);
                    if (r && now_seconds() - t0 < best[1 + o]) best[1 + o] = now_seconds() - t0;
                }
                amx_weights(NULL, 0);
            }
            amx_k_pass(kc);
            double gf = 2.0 * m * n * k / 1e9;
            printf("%-24s %6d %6d %6d %9.1f %9.1f %9.1f %10.1f %9.2e\n", P[q].name, m, n, k,
                   gemm_dnnl_runs() ? gf / best[0] : 0.0, gf / best[1], gf / best[2], gf / best[3], worst);
            fflush(stdout);
            for (int w = 0; w < 4; w++) tot[w] += best[w];
            if (worst > worst_all || worst != worst) worst_all = worst;
            free(af); free(bf); free(c0); free(y0); free(y1); free(a); free(b);
        }
        bf16_route_set(keep);
        if (gemm_dnnl_runs())
            printf("the twelve, one of each: oneDNN %.3f s, tfm's AMX kernel %.3f s as a step runs it: %.2fx oneDNN "
                   "(which reads both operands' 16-bit twins; tfm's kernel converts and packs A inside the call); "
                   "against oneDNN: %s (error %.2e of its bound)\n",
                   tot[0], tot[1], tot[0] / tot[1], worst_all <= 1 ? "ok" : "WRONG", worst_all);
        else
            printf("the twelve, one of each: tfm's AMX kernel %.3f s (no oneDNN bf16 matmul here: no AVX-512, or built without oneDNN; nothing to compare)\n", tot[1]);
        printf("tfm's kernel: k in one pass %.3f s (%.2fx), B packed every call %.3f s (%.2fx)\n", tot[2],
               tot[1] / tot[2], tot[3], tot[1] / tot[3]);
    }
    return 0;
}
