/* bench_amx.c — tfm's AMX-BF16 tile kernel (src/gemm_amx.c, the route
 * TFM_BF16_PRODUCTS=amx) against oneDNN 2.6.3's AMX matmul, at the twelve
 * products of a training step (the base model at the benchmark batch:
 * 4,096 rows, D 512, F 2,048, V 37,000, 906 output rows per chunk), each
 * side by side, taking turns, best of REPS (GFLOP/s):
 *   build/dev/bench_amx [THREADS [REPS]]   (defaults 2, 5)
 * oneDNN as tfm's step runs it (gemm_many on the oneDNN route: tfm's
 * pieces, both operands from 16-bit twins, nothing converted); tfm's
 * kernel converts and packs both operands inside the call, and ("B kept",
 * where B is a weight) with B's panels kept from the first call on, as a
 * step keeps a weight's (amx_weights); "panels out" the same (B kept where
 * it is a weight) with the kernel's loops in their other order
 * (amx_panels_outer: each panel of B against every row block of a task,
 * so B streams once a task). Where there
 * are no AMX-BF16 tiles it says so and stops; BENCH_AMX_MODEL=1 then runs
 * the same table on the kernel's scalar model of the tiles at a small
 * size (a check of the harness, not a timing: tests/bf16.sh runs it).
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

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (threads_init(nt)) die_error();
    nt = threads_count();
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
        if (gemm_dnnl_built()) bf16_route_set(BF16_ONEDNN);
        printf("%s%-24s %6s %6s %6s %9s %9s %9s %10s %11s\n", model ? "(the model, small sizes: not a timing)\n" : "",
               "product", "m", "n", "k", "oneDNN", "tfm AMX", "B kept", "panels out", "worst diff");
        double tot[4] = {0, 0, 0, 0};
        int bad = 0;
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
            double best[4] = {1e30, 1e30, 1e30, 1e30}, worst = 0;
            for (int r = 0; r <= reps; r++) {   /* round 0 warms up */
                if (gemm_dnnl_built()) {
                    memcpy(y0, c0, nc * 4);
                    gemm_dnnl_shadow(af, a, na);
                    gemm_dnnl_shadow(bf, b, nb);
                    Gemm g = {ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y0, n, GEMM_BF16_HELD, NULL, 0};
                    double t0 = now_seconds();
                    gemm_many(&g, 1);
                    if (r && now_seconds() - t0 < best[0]) best[0] = now_seconds() - t0;
                    gemm_dnnl_shadow(af, NULL, 0);
                    gemm_dnnl_shadow(bf, NULL, 0);
                }
                memcpy(y1, c0, nc * 4);
                double t0 = now_seconds();
                amx_bf16_gemm(model ? AMX_MODEL : AMX_TILES, ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y1, n);
                if (r && now_seconds() - t0 < best[1]) best[1] = now_seconds() - t0;
                for (size_t i = 0; r == reps && gemm_dnnl_built() && i < nc; i++) {
                    double d = fabs(y0[i] - y1[i]) / (fabs(y0[i]) + 1e-3);
                    if (d > worst || d != d) worst = d;
                }
            }
            /* B kept where it is a weight, from round 0 on (amx_weights), as a step keeps it: the default loop
             * order (weights only), then the other one (every product) */
            for (int po = !P[q].weight; po < 2; po++) {
                amx_panels_outer(po);
                if (P[q].weight) amx_weights(bf, nb);
                for (int r = 0; r <= reps; r++) {
                    memcpy(y1, c0, nc * 4);
                    double t0 = now_seconds();
                    amx_bf16_gemm(model ? AMX_MODEL : AMX_TILES, ta, tb, m, n, k, 1.0f, af, lda, bf, ldb, P[q].beta, y1, n);
                    if (r && now_seconds() - t0 < best[2 + po]) best[2 + po] = now_seconds() - t0;
                }
                amx_weights(NULL, 0);
            }
            amx_panels_outer(0);
            double gf = 2.0 * m * n * k / 1e9;
            char kept[16] = "-";
            if (P[q].weight) snprintf(kept, sizeof kept, "%.1f", gf / best[2]);
            printf("%-24s %6d %6d %6d %9.1f %9.1f %9s %10.1f %11.2e\n", P[q].name, m, n, k,
                   gemm_dnnl_built() ? gf / best[0] : 0.0, gf / best[1], kept, gf / best[3], worst);
            fflush(stdout);
            tot[0] += best[0];
            tot[1] += best[1];
            tot[2] += P[q].weight ? best[2] : best[1];   /* as a step runs it: a weight's panels kept */
            tot[3] += best[3];
            bad |= !(worst < 1e-3);
            free(af); free(bf); free(c0); free(y0); free(y1); free(a); free(b);
        }
        bf16_route_set(keep);
        if (gemm_dnnl_built())
            printf("the twelve, one of each: oneDNN %.3f s, tfm's AMX kernel %.3f s: %.2fx (oneDNN reads both operands' "
                   "16-bit twins; tfm's kernel converts and packs both inside the call); against oneDNN: %s\n", tot[0],
                   tot[1], tot[0] / tot[1], bad ? "WRONG" : "ok");
        else
            printf("the twelve, one of each: tfm's AMX kernel %.3f s (built without oneDNN: nothing to compare)\n", tot[1]);
        printf("tfm's AMX kernel as a step runs it (a weight's panels kept): rows outside %.3f s, panels outside %.3f s "
               "(%.2fx)\n", tot[2], tot[3], tot[2] / tot[3]);
    }
    return 0;
}
