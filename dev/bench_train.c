/* bench_train.c — a training step server for scripts/bench_train.py
 * (scripts/bench-train.sh):
 *   build/dev/bench_train CONFIG B S T V THREADS
 * training steps (forward, backward, Adam) of CONFIG's model on a synthetic
 * batch of B sentences x S / T tokens, vocabulary V, on command (below):
 * step, sgemm, sgemm1, bgemm, fp32, bf16, attn auto|loops|dnnl,
 * route onednn|kernel|emulated|amx (the bf16 route, forced), recompute 0|1
 * ([train] recompute for the following steps; the config's at the start),
 * quit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "dispatch.h"
#include "batch.h"
#include "gemm_amx.h"
#include "config.h"
#include "gemm_bf16.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "prof.h"
#include "util.h"

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* GFLOP/s of one fp32 product C[m,n] += A[m,k] B[k,n]^T as the model runs
 * it (gemm_many: BLIS sgemm, or oneDNN's f32 matmul on its route,
 * dispatch.h's fp32_route), best of reps (bf16: the bf16 product as the
 * model runs it, A rounded, B already bf16 values) */
static double sgemm_gflops(int m, int n, int k, int reps, int bf16) {
    float *a = xaligned((size_t)m * k * 4), *b = xaligned((size_t)n * k * 4), *c = xaligned((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = 0.001f * (float)(i % 97);
    for (size_t i = 0; i < (size_t)n * k; i++) b[i] = 0.001f * (float)(i % 89);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        Gemm g = {0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n, bf16 ? GEMM_BF16_A : 0, NULL, 0};
        gemm_many(&g, 1);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * m * n * k / best / 1e9;
}

/* Matrix-product FLOPs of one training step: each linear layer of n rows
 * costs 2 n in out forward and twice that backward (dX and dW); attention
 * two products forward (Q K^T, P V) and four backward; the output layer is
 * a linear of the target rows onto V. */
static double step_flops(const ModelDims *d, int B, int S, int T) {
    double D = d->d_model, F = d->d_ff, V = d->vocab, ns = (double)B * S, nt = (double)B * T;
    double enc = ns * (4 * D * D + 2 * D * F) * 2, att_e = 2.0 * 2 * B * (double)S * S * D;
    double dec = (nt * (6 * D * D + 2 * D * F) + ns * 2 * D * D) * 2;
    double att_d = 2.0 * 2 * B * ((double)T * T + (double)T * S) * D;
    double out = 2 * nt * D * V;
    return 3 * (d->enc_layers * (enc + att_e) + d->dec_layers * (dec + att_d) + out);
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A step server for scripts/bench_train.py, which interleaves tfm's steps
 * with PyTorch's so that both see the same machine load. Commands on stdin,
 * one per line; answers on stdout (after "ready ..." and "kinds NAME|NAME|...",
 * the names of the breakdown's kinds):
 *   step   -> "step WALL_S CPU_S LOSS_PER_TOKEN PAGE_FAULTS"  (zero_grad,
 *             forward + backward with dropout, gradient norm and clipping
 *             as tfm train does them, Adam), then the step's breakdown
 *             (prof.h): "prof KINDS" and per kind "SECONDS FLOPS BYTES",
 *             then "PROD_WALL PROD_BUSY PROD_THREADS PROD_CONVERT"
 *   sgemm  -> "sgemm GFLOPS" of BLIS at the FFN's shape [B*T, D] x [D, F]
 *             (wall clock, all threads)
 *   blis   -> "blis GFLOPS": the same product on BLIS sgemm, whatever the
 *             fp32 route (issue #25's bar: the fp32 step against BLIS sgemm)
 *   sgemm1 -> "sgemm1 GFLOPS" of the same on one thread per CPU second
 *             (the peak of one core, whatever else runs on the machine)
 *   bgemm  -> "bgemm GFLOPS": the same product with bf16 inputs (the
 *             AVX512_BF16 kernel, or emulated: rounding + sgemm)
 *   fp32 / bf16 -> "ok": the precision of the following steps
 *   quit / end of input -> "rss PEAK_MB" and exit */
int main(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "usage: bench_train CONFIG B S T V THREADS\n"); return 2; }
    Config c;
    if (config_load(&c, argv[1])) die_error();   /* defaults, then the file */
    int B = atoi(argv[2]), S = atoi(argv[3]), T = atoi(argv[4]), V = atoi(argv[5]);
    threads_init(atoi(argv[6]));
    ModelDims d = model_dims_from_config(&c, V);
    if (d.max_positions < S || d.max_positions < T) d.max_positions = S > T ? S : T;
    Model m;
    if (model_init(&m, &d, 1)) die_error();
    m.recompute = c.recompute;
    float *am = xaligned(m.num_params * 4), *av = xaligned(m.num_params * 4);
    Rng r;
    rng_seed(&r, 1);
    int *len_s = xmalloc(B * sizeof(int)), *len_t = xmalloc(B * sizeof(int));
    for (int i = 0; i < B; i++) { len_s[i] = S; len_t[i] = T; }
    OwnedBatch ob = make_batch(B, S, T, len_s, len_t, V, &r);
    printf("ready %zu %.6e %d %s %d %s\n", m.num_params, step_flops(&d, B, S, T), threads_count(),
           blis_kernels(), blis_kernels_id(), bf16_route() == BF16_ONEDNN ? "bf16-onednn" : bf16_route() == BF16_KERNEL ? "bf16-kernel" : bf16_route() == BF16_AMX ? "bf16-amx" : "bf16-emulated");
    for (int k = 0; k < PROF_KINDS; k++) printf("%s%s", k ? "|" : "kinds ", prof_name(k));
    printf("\n");
    fflush(stdout);
    char line[64];
    long step = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "step", 4)) {
            prof_reset();
            prof_on = 1;
            double t0 = now_seconds(), c0 = cpu_seconds();
            long f0 = minor_faults();
            LossStats st = {0};
            size_t np = m.num_params;
            model_zero_grad(&m);
            if (model_forward_backward(&m, &ob.b, &r, 1, 1.0f / (B * T), &st)) die_error();
            step++;
            double norm;
            PROF(PROF_GRAD_NORM, 0, 4.0 * np, norm = grad_norm(m.grads, np));
            float *rf;   /* as tfm train: clipping, Adam, bf16 copies in one pass */
            uint16_t *rh;
            model_bf16_copies(&m, &rf, &rh);
            PROF(PROF_ADAM, 0, (28.0 + (rf ? 4 : 0) + (rh ? 2 : 0)) * np,
                 adam_update_fused(m.params, m.grads, am, av, np, lr_schedule(step, d.d_model, c.warmup, c.lr_scale),
                                   c.beta1, c.beta2, c.eps, step, clip_factor(norm, c.clip_norm), rf, rh));
            prof_on = 0;
            printf("step %.4f %.4f %.4f %ld\n", now_seconds() - t0, cpu_seconds() - c0, st.loss / st.tokens,
                   minor_faults() - f0);
            printf("prof %d", PROF_KINDS);
            for (int k = 0; k < PROF_KINDS; k++) printf(" %.6f %.6e %.6e", prof.seconds[k], prof.flops[k], prof.bytes[k]);
            printf(" %.6f %.6f %d %.6f\n", prof.prod_wall, prof.prod_busy, prof.prod_threads, prof.prod_convert);
        } else if (!strncmp(line, "sgemm1", 6)) {
            int M = B * T, N = d.d_ff, K = d.d_model;
            float *x = xaligned((size_t)M * K * 4), *w = xaligned((size_t)N * K * 4), *y = xaligned((size_t)M * N * 4);
            double best = 1e30;
            for (int rep = 0; rep < 2; rep++) {
                double c0 = cpu_seconds();
                gemm1(0, 1, M, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
                double t = cpu_seconds() - c0;
                if (t < best) best = t;
            }
            printf("sgemm1 %.2f\n", 2.0 * M * N * K / best / 1e9);
            free(x); free(w); free(y);
        } else if (!strncmp(line, "blis", 4)) {
            Fp32Route was = fp32_route();
            fp32_route_set(FP32_BLIS);
            printf("blis %.2f\n", sgemm_gflops(B * T, d.d_ff, d.d_model, 2, 0));
            fp32_route_set(was);
        } else if (!strncmp(line, "sgemm", 5)) {
            printf("sgemm %.2f\n", sgemm_gflops(B * T, d.d_ff, d.d_model, 2, 0));
        } else if (!strncmp(line, "bgemm", 5)) {
            printf("bgemm %.2f\n", sgemm_gflops(B * T, d.d_ff, d.d_model, 2, 1));
        } else if (!strncmp(line, "route ", 6)) {   /* the bf16 route: onednn, kernel, emulated or amx (dispatch.h) */
            const char *why, *name = line + 6;
            char r[16];
            snprintf(r, sizeof r, "%.*s", (int)strcspn(name, " \r\n"), name);
            int route = bf16_rule(r, bf16_native(), 0, gemm_dnnl_built(), bf16_amx(), &why);
            if (route < 0) {
                printf("error %s\n", why);
            } else {
                int was = m.bf16;
                bf16_route_set((Bf16Route)route);
                model_set_precision(&m, PREC_FP32);   /* the weights' bf16 form is the route's (copy or twin) */
                if (was) model_set_precision(&m, PREC_BF16);
                printf("ok\n");
            }
        } else if (!strncmp(line, "recompute ", 10)) {   /* [train] recompute: the next step re-plans the
                                                            * activations in the buffer the larger plan sized */
            m.recompute = atoi(line + 10) != 0;
            printf("ok\n");
        } else if (!strncmp(line, "attn ", 5)) {   /* where the attention core runs: auto, loops or dnnl (ops.h) */
            attention_code(!strncmp(line + 5, "loops", 5) ? ATTN_LOOPS : !strncmp(line + 5, "dnnl", 4) ? ATTN_DNNL : ATTN_AUTO);
            printf("ok\n");
        } else if (!strncmp(line, "fp32", 4) || !strncmp(line, "bf16", 4)) {
            model_set_precision(&m, line[0] == 'b');
            if (m.bf16) {   /* the weights' bf16 form made here, untimed: in a bf16 run the update before
                             * wrote it (Adam's fused copies), and so does each bf16 step here; a step after
                             * an fp32 one (bench_ab.py's turns) would otherwise pay a whole rounding pass */
                float *rf;
                uint16_t *rh;
                model_bf16_copies(&m, &rf, &rh);
                model_bf16_round(&m, 0, m.num_params);
            }
            printf("ok\n");
        } else break;
        fflush(stdout);
    }
    printf("rss %.0f\n", peak_rss_mb());
    free(am); free(av); free(len_s); free(len_t); free(ob.buf);
    model_free(&m);
    config_free(&c);
    return 0;
}
