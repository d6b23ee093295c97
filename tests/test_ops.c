/* test_ops.c — every kernel of ops.c: known answers, and its backward
 * against centered finite differences.
 *
 * Gradient checks (as ggml's test-grad0): the op's output is reduced to the
 * scalar L = sum_i out_i * R_i with fixed random weights R (accumulated in
 * double), so dL/d(out) = R is what the backward gets. Each input entry x is
 * nudged by +-h and dL/dx ~ (L(x+h) - L(x-h)) / 2h is compared with the
 * analytic gradient; at most MAX_CHECKS entries per tensor.
 *
 * Tolerance: |numeric - analytic| <= 1e-3 + 1e-2 * |numeric|. The forward
 * runs in float32 (relative rounding ~6e-8 per value); with h = 1e-2 and
 * L ~ 10, the rounding error of the difference quotient is ~1e-7 * 10 / 2e-2
 * = 5e-5, and the truncation error h^2 f'''/6 ~ 2e-5 for these smooth ops
 * with O(1) inputs; 1e-3 leaves a margin of 20x while any real bug (a
 * missing term, a wrong scale, a transposed index) is off by O(1). ReLU is
 * not differentiable at 0: entries within 2h of 0 are skipped. */
#include "cpu.h"
#include "dispatch.h"
#include "test.h"

#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "parallel.h"
#include "prof.h"
#include "util.h"
#include <omp.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <blis.h>   /* bli_arch_string: BLIS's names for its kernel sets */

#define MAX_CHECKS 60
#define H_STEP 1e-2f

static Rng rng;
static double max_rel_seen;

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * rng_uniform(&rng) - 1.0f) * scale;
}
static float *rnd(size_t n, float scale) { float *x = xmalloc(n * sizeof *x); fill(x, n, scale); return x; }
static float *zeros(size_t n) { return xcalloc(n, sizeof(float)); }
static uint32_t float_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static double dotR(const float *y, const float *R, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * R[i];
    return s;
}

/* Compare grad (analytic) with finite differences of loss() over x[0..n). */
typedef double (*LossFn)(void *ctx);
static void gradcheck(const char *name, LossFn loss, void *ctx, float *x, const float *grad, size_t n, int relu_kinks) {
    size_t step = n > MAX_CHECKS ? n / MAX_CHECKS : 1;
    int bad = 0, checked = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n && checked < MAX_CHECKS; i += step) {
        float x0 = x[i];
        if (relu_kinks && fabsf(x0) < 2 * H_STEP) continue;
        x[i] = x0 + H_STEP; double lp = loss(ctx);
        x[i] = x0 - H_STEP; double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2.0 * H_STEP), ana = grad[i];
        double err = fabs(num - ana), tol = 1e-3 + 1e-2 * fabs(num);
        double rel = err / (fabs(num) + 1e-3);
        if (rel > worst) worst = rel;
        checked++;
        if (err > tol && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: numeric %.6g analytic %.6g\n", name, i, num, ana);
    }
    if (worst > max_rel_seen) max_rel_seen = worst;
    CHECK_MSG(bad == 0 && checked > 0, "%s: %d of %d entries off (worst rel %.2g)", name, bad, checked, worst);
}

/* ---- linear ---------------------------------------------------------------- */
typedef struct { int n, in, out; float *x, *w, *b, *y, *R; } LinCtx;
static double lin_loss(void *p) {
    LinCtx *c = p;
    linear_forward(c->y, c->x, c->w, c->b, c->n, c->in, c->out, 0);
    return dotR(c->y, c->R, (size_t)c->n * c->out);
}
static void test_linear(void) {
    LinCtx c = {.n = 5, .in = 7, .out = 4};
    c.x = rnd(35, 1); c.w = rnd(28, 1); c.b = rnd(4, 1); c.y = zeros(20); c.R = rnd(20, 1);
    /* known answer: y = x W^T + b, by hand */
    lin_loss(&c);
    double worst = 0;
    for (int i = 0; i < 5; i++)
        for (int o = 0; o < 4; o++) {
            double s = c.b[o];
            for (int k = 0; k < 7; k++) s += (double)c.x[i * 7 + k] * c.w[o * 7 + k];
            worst = fmax(worst, fabs(s - c.y[i * 4 + o]));
        }
    CHECK(worst < 1e-5);
    float *dx = zeros(35), *dw = zeros(28), *db = zeros(4);
    for (int i = 0; i < 35; i++) dx[i] = 100.0f;   /* overwritten (accumulate 0) */
    linear_backward(dx, dw, db, c.R, c.x, c.w, 5, 7, 4, 0, 0);
    gradcheck("linear dx", lin_loss, &c, c.x, dx, 35, 0);
    gradcheck("linear dW", lin_loss, &c, c.w, dw, 28, 0);
    gradcheck("linear db", lin_loss, &c, c.b, db, 4, 0);
    /* accumulate: a second call adds the same again */
    float dx0 = dx[3], dw0 = dw[5], db0 = db[1];
    linear_backward(dx, dw, db, c.R, c.x, c.w, 5, 7, 4, 1, 0);
    CHECK_NEAR(dx[3], 2 * dx0, 1e-5); CHECK_NEAR(dw[5], 2 * dw0, 1e-5); CHECK_NEAR(db[1], 2 * db0, 1e-5);
    /* gemm with transposes and leading dimensions wider than the matrix:
     * C[2x3] (ld 5) = A^T (A stored [4x2], ld 3) * B^T (B stored [3x4], ld 6) */
    float A[12], Bm[18], C[10];
    fill(A, 12, 1); fill(Bm, 18, 1);
    for (int i = 0; i < 10; i++) C[i] = 7.0f;
    gemm(1, 1, 2, 3, 4, 1.0f, A, 3, Bm, 6, 0.0f, C, 5);
    worst = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += (double)A[k * 3 + i] * Bm[j * 6 + k];
            worst = fmax(worst, fabs(s - C[i * 5 + j]));
        }
    CHECK(worst < 1e-5);
    CHECK(C[3] == 7.0f && C[4] == 7.0f && C[8] == 7.0f);   /* outside the matrix: untouched */
    free(c.x); free(c.w); free(c.b); free(c.y); free(c.R); free(dx); free(dw); free(db);
}

/* LINEAR_ROUND_OUT: y (forward) and dx (backward) written rounded to bf16,
 * the same bits as the unrounded outputs rounded afterwards, on the routes
 * that read W as floats (bf16 values: the model's rounded copy); 40 x 96 x
 * 64, enough to be cut into pieces on two threads. */
static void test_linear_round_out(void) {
    enum { N = 40, IN = 96, OUT = 64 };
    float *x = rnd(N * IN, 1), *w = rnd(OUT * IN, 1), *b = rnd(OUT, 1), *dy = rnd(N * OUT, 1);
    for (int i = 0; i < OUT * IN; i++) w[i] = bf16_round(w[i]);
    for (int i = 0; i < N * OUT; i++) dy[i] = bf16_round(dy[i]);
    float *y[2] = {zeros(N * OUT), zeros(N * OUT)}, *dx[2] = {zeros(N * IN), zeros(N * IN)};
    float *dw = zeros(OUT * IN);
    Bf16Route saved = bf16_route();
    for (int r = BF16_EMULATED; r <= BF16_KERNEL; r++) {
        if (r == BF16_KERNEL && !bf16_native()) { SKIP("LINEAR_ROUND_OUT, kernel route: no AVX512_BF16 here"); continue; }
        bf16_route_set((Bf16Route)r);
        for (int round = 0; round < 2; round++) {
            int how = LINEAR_BF16 | (round ? LINEAR_ROUND_OUT : 0);
            linear_forward(y[round], x, w, b, N, IN, OUT, how);
            linear_backward(dx[round], dw, NULL, dy, x, w, N, IN, OUT, 0, how);
        }
        size_t bad = 0, rounded = 0;
        for (int i = 0; i < N * OUT; i++) { bad += y[1][i] != bf16_round(y[0][i]); rounded += y[0][i] != y[1][i]; }
        for (int i = 0; i < N * IN; i++) { bad += dx[1][i] != bf16_round(dx[0][i]); rounded += dx[0][i] != dx[1][i]; }
        CHECK_MSG(!bad && rounded, "LINEAR_ROUND_OUT, route %d: %zu entries not the unrounded ones rounded (%zu differ)", r,
                  bad, rounded);
    }
    bf16_route_set(saved);
    free(x); free(w); free(b); free(dy); free(y[0]); free(y[1]); free(dx[0]); free(dx[1]); free(dw);
}

/* The threaded paths of gemm: pieces of rows, of columns, slices of k;
 * every transpose combination, leading dimensions wider than the matrix,
 * alpha and beta; against a double-precision product. */
static void gemm_case(int ta, int tb, int m, int n, int k, float alpha, float beta) {
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float *a = rnd(na, 1), *b = rnd(nb, 1), *c = rnd(nc, 1), *c0 = xmalloc(nc * sizeof *c0);
    memcpy(c0, c, nc * sizeof *c);
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                     (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            worst = fmax(worst, fabs(alpha * s + beta * c0[(size_t)i * ldc + j] - c[(size_t)i * ldc + j]));
        }
    int pad_ok = 1;   /* the gap columns of C are not touched */
    for (int i = 0; i < m; i++) pad_ok &= c[(size_t)i * ldc + n] == c0[(size_t)i * ldc + n];
    CHECK_MSG(worst < 1e-4 && pad_ok, "gemm ta %d tb %d m %d n %d k %d alpha %g beta %g, %s: off by %.3g", ta, tb, m, n, k,
              alpha, beta, fp32_mode(), worst);
    free(a); free(b); free(c); free(c0);
}
/* The kernel set (dispatch.c): BLIS_ARCH_TYPE when the user sets it (a name or
 * BLIS's number for it), else what cpu_blis_kernels (cpu.h, its rules tested
 * on a table of CPUs in test_cpu.c) says for this CPU and BLIS's own choice;
 * on any CPU with AVX2 and FMA never the portable 'generic' kernels. */
static const char *user_arch;   /* BLIS_ARCH_TYPE as the user set it, read before threads_init */
static void test_blis_kernels(void) {
    const char *env = user_arch, *k = blis_kernels(), *own = blis_kernels_own();
    CHECK_MSG(strcmp(own, "?"), "BLIS's own choice could not be asked (a child process runs bli_arch_query_id)");
    if (env && *env >= '0' && *env <= '9')
        CHECK_MSG(!strcmp(k, bli_arch_string((arch_t)atoi(env))), "BLIS_ARCH_TYPE=%s but BLIS runs %s", env, k);
    else if (env && *env) CHECK_MSG(!strcmp(k, env), "BLIS_ARCH_TYPE=%s but BLIS runs %s", env, k);
    else {
        const char *want = cpu_blis_kernels(cpu_info(), own);
        CHECK_MSG(!strcmp(k, want), "BLIS runs %s; for this CPU and BLIS's own %s the rule says %s", k, own, want);
        if (cpu_has(CPU_AVX2) && cpu_has(CPU_FMA)) CHECK_MSG(strcmp(k, "generic"), "an AVX2+FMA CPU runs BLIS's generic kernels");
        if (strcmp(k, own)) CHECK_STR(blis_kernels_source(), "tfm");
    }
    /* the id names the same set, for a child process's BLIS_ARCH_TYPE */
    CHECK_STR(bli_arch_string((arch_t)blis_kernels_id()), k);
    printf("BLIS kernels: %s (arch id %d, source %s, BLIS's own choice %s)\n", k, blis_kernels_id(),
           blis_kernels_source(), own);
}

/* The choice of fp32 route (dispatch.c's fp32_rule), every branch on any CPU. */
static void test_fp32_rule(void) {
    const char *why;
    CHECK(fp32_rule(NULL, 1, &why) == FP32_ONEDNN);   /* AVX-512 brgemm: Intel, Zen 4, Zen 5 */
    CHECK(fp32_rule("", 1, &why) == FP32_ONEDNN);
    CHECK(fp32_rule(NULL, 0, &why) == FP32_BLIS);     /* no AVX-512, or built without oneDNN */
    CHECK(fp32_rule("blis", 1, &why) == FP32_BLIS);
    CHECK(fp32_rule("onednn", 0, &why) == (gemm_dnnl_runs() ? FP32_ONEDNN : -1));
    CHECK(gemm_dnnl_runs() || strstr(why, gemm_dnnl_built() ? "needs AVX-512" : "without oneDNN"));
    CHECK(fp32_rule("bogus", 1, &why) == -1 && strstr(why, "onednn or blis"));
    CHECK(fp32_onednn() == 0 || (gemm_dnnl_built() && cpu_has(CPU_AVX512F) && cpu_has(CPU_AVX512BW)));
    CHECK(fp32_route() == (Fp32Route)fp32_rule(getenv("TFM_FP32_PRODUCTS"), fp32_onednn(), &why));
    printf("fp32 products: %s\n", fp32_mode());
}

/* f once on each fp32 route this build runs (dispatch.h: BLIS, oneDNN),
 * then the route as it was. */
static void on_each_fp32_route(void (*f)(void)) {
    Fp32Route r0 = fp32_route();
    for (int route = 0; route < (gemm_dnnl_runs() ? 2 : 1); route++) {
        fp32_route_set((Fp32Route)route);
        f();
    }
    fp32_route_set(r0);
}

/* On oneDNN's route alpha 1 with beta 0 or 1 run there (oneDNN's pieces),
 * any other alpha or beta on BLIS; oneDNN made primitives for them
 * (gemm_dnnl_made), or it did not run. */
static void gemm_threads_route(void) {
    float ab[3][2] = {{0.7f, 0.5f}, {1.0f, 0.0f}, {1.0f, 1.0f}};
    long made0, made1;
    double s;
    gemm_dnnl_made(&made0, &s);
    for (int v = 0; v < 3; v++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_case(ta, tb, 2100, 40, 100, ab[v][0], ab[v][1]);   /* pieces of rows */
                gemm_case(ta, tb, 40, 2100, 100, ab[v][0], ab[v][1]);   /* pieces of columns */
                gemm_case(ta, tb, 40, 30, 7000, ab[v][0], ab[v][1]);    /* slices of k (BLIS) */
            }
    gemm_dnnl_made(&made1, &s);
    CHECK_MSG(fp32_route() == FP32_ONEDNN ? made1 > made0 : made1 == made0, "fp32 route %s: %ld oneDNN primitives made",
              fp32_mode(), made1 - made0);
}
static void test_gemm_threads(void) { on_each_fp32_route(gemm_threads_route); }

static void gemm_many_alone(void) {
    int n = 700, in = 96, out = 300;
    float *dy = rnd((size_t)n * out, 1), *x = rnd((size_t)n * in, 1), *w = rnd((size_t)out * in, 1);
    float *dw = rnd((size_t)out * in, 1), *dx = zeros((size_t)n * in);
    float *dw1 = xmalloc((size_t)out * in * sizeof(float)), *dx1 = zeros((size_t)n * in);
    memcpy(dw1, dw, (size_t)out * in * sizeof(float));
    Gemm g[2] = {{1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in, 0, NULL, 0},
                 {0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, 0, NULL, 0}};
    CHECK((double)n * in * out >= 1 << 23);   /* big enough to be threaded */
    gemm_many(g, 2);
    Gemm g1[2] = {g[0], g[1]};
    g1[0].c = dw1;
    g1[1].c = dx1;
    threads_init(1);
    gemm_many(&g1[0], 1);
    gemm_many(&g1[1], 1);
    threads_init(2);
    CHECK_MSG(!memcmp(dw, dw1, (size_t)out * in * sizeof(float)), "gemm_many, %s: dW differs from one thread's", fp32_mode());
    CHECK_MSG(!memcmp(dx, dx1, (size_t)n * in * sizeof(float)), "gemm_many, %s: dx differs from one thread's", fp32_mode());
    double s = 0;
    for (size_t i = 0; i < (size_t)n * in; i++) s += fabs(dx[i]);
    CHECK(s > 0);   /* something was computed */
    free(dy); free(x); free(w); free(dw); free(dx); free(dw1); free(dx1);
}

static void gemm_many_overlap(void) {
    int n = 700, in = 96, out = 300;
    float *dy = rnd((size_t)n * out, 1), *x = rnd((size_t)n * in, 1), *w = rnd((size_t)out * in, 1);
    float *dw = rnd((size_t)out * in, 1), *dx = zeros((size_t)n * in);
    Gemm g[2] = {{1, 0, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in, 0, NULL, 0},
                 {0, 0, n, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, 0, NULL, 0}};
    /* products that write what another reads are refused (an ASSERT: abort
     * with file:line), not raced */
    char errpath[512];
    snprintf(errpath, sizeof errpath, "%s/test_ops_%d.err", getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        if (!freopen(errpath, "w", stderr)) _exit(3);
        g[1].c = x;   /* dx = x: the other product reads x */
        gemm_many(g, 2);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "gemm_many ran products that overlap");
    char *err = read_file(errpath, NULL);
    CHECK_MSG(err && strstr(err, "internal error: src/ops.c:") && strstr(err, "one_writes_what_another_uses"),
              "the refusal names file, line and condition: %s", err ? err : "(no stderr)");
    free(err);
    remove(errpath);
    free(dy); free(x); free(w); free(dw); free(dx);
}

/* Two independent products side by side (linear_backward's dW and dx, with
 * dW accumulating): each C equal, bit for bit, to the product alone on one
 * thread, since every C entry is one call's sum in that library's order
 * (BLIS, or oneDNN: one call of the same shape), on each fp32 route. */
static void test_gemm_many(void) {
    on_each_fp32_route(gemm_many_alone);
    gemm_many_overlap();
}

/* prof.h's threads waiting inside the products: two products side by side
 * on two threads, each too narrow to be cut (fewer than 256 rows and
 * columns: one piece each), one 400x the other's work (200 x 200 x 8192
 * against 16 x 200 x 256: the small one packs only 256 rows of B, where with
 * k 8192 as well its packing of B alone took 0.4 of the big one's time on AMD
 * Zen 5 with BLIS skx, waiting 0.29 in ten tries, 2026-12-03), so the thread
 * with the small one waits nearly all of the wall time: waiting = threads x
 * wall - busy at least 0.3 of threads x wall (with 2 threads: about 0.5), and
 * busy never more than threads x wall. On each fp32 route (oneDNN's pieces
 * count their own busy time); up to ten tries, as a descheduled small
 * piece on a loaded machine can look busy (three were not always enough
 * under ASan beside other tests: 0.25 in all three once, 2026-12-02). */
static void gemm_waiting_route(void) {
    enum { M = 200, K = 8192, N = 200 };
    float *a = rnd((size_t)M * K, 1), *b = rnd((size_t)K * N, 1), *c = zeros((size_t)M * N), *d = zeros((size_t)16 * N);
    Gemm g[2] = {{0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N, 0, NULL, 0},
                 {0, 0, 16, N, 256, 1.0f, a, K, b, N, 0.0f, d, N, 0, NULL, 0}};
    double share = 0, over = 0;
    for (int t = 0; t < 10 && share < 0.3; t++) {
        prof_reset();
        prof_on = 1;
        gemm_many(g, 2);
        prof_on = 0;
        double all = prof.prod_threads * prof.prod_wall;
        share = all > 0 ? (all - prof.prod_busy) / all : 0;
        over = prof.prod_busy - all;
    }
    CHECK_MSG(share >= 0.3 && over <= 1e-9, "threads waiting %.2f of threads x wall (busy over it by %.3g s) (%s)", share,
              over, fp32_mode());
    free(a); free(b); free(c); free(d);
}
static void test_gemm_waiting(void) {
    if (threads_count() < 2) { SKIP("one thread: nothing waits"); return; }
    on_each_fp32_route(gemm_waiting_route);
}

/* prof.h's bf16 conversions: a bf16 product that rounds or converts its
 * operands counts that time (prod_convert) inside its busy time, on the
 * emulated route (rounded float copies) and on oneDNN's (16-bit copies,
 * shared, and A's rows converted piece by piece); a product whose operands
 * arrive converted (held floats on the emulated route; lent 16-bit twins,
 * gemm_dnnl_shadow, on oneDNN's) counts none. */
static void gemm_convert_case(Bf16Route route) {
    int m = 600, n = 300, k = 500;
    float *a = rnd((size_t)m * k, 1), *b = rnd((size_t)n * k, 1), *c = zeros((size_t)m * n);
    bf16_round_matrix(a, k, a, k, m, k);
    bf16_round_matrix(b, k, b, k, n, k);
    uint16_t *a16 = xmalloc((size_t)m * k * sizeof *a16), *b16 = xmalloc((size_t)n * k * sizeof *b16);
    for (size_t i = 0; i < (size_t)m * k; i++) a16[i] = bf16_from_float(a[i]);
    for (size_t i = 0; i < (size_t)n * k; i++) b16[i] = bf16_from_float(b[i]);
    Bf16Route r0 = bf16_route();
    bf16_route_set(route);
    for (int held = 0; held < 2; held++) {
        Gemm g = {0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n, held ? GEMM_BF16_HELD : GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
        if (held && route == BF16_ONEDNN) { gemm_dnnl_shadow(a, a16, (size_t)m * k); gemm_dnnl_shadow(b, b16, (size_t)n * k); }
        prof_reset();
        prof_on = 1;
        gemm_many(&g, 1);
        prof_on = 0;
        if (held && route == BF16_ONEDNN) { gemm_dnnl_shadow(a, NULL, 0); gemm_dnnl_shadow(b, NULL, 0); }
        const char *name = route == BF16_ONEDNN ? "oneDNN" : "emulated";
        if (held)
            CHECK_MSG(prof.prod_convert == 0.0, "%s: operands that came converted counted %g s of conversion", name,
                      prof.prod_convert);
        else
            CHECK_MSG(prof.prod_convert > 0.0 && prof.prod_convert <= prof.prod_busy, "%s: conversions %g s, busy %g s",
                      name, prof.prod_convert, prof.prod_busy);
    }
    bf16_route_set(r0);
    free(a); free(b); free(c); free(a16); free(b16);
}
static void test_gemm_convert(void) {
    gemm_convert_case(BF16_EMULATED);
    if (gemm_dnnl_runs()) gemm_convert_case(BF16_ONEDNN);
    else SKIP("no oneDNN bf16 matmul here (no AVX-512, or built without oneDNN): its conversions are not counted");
}

/* Gemm.bias: C = bias + op(A) op(B), each piece writing its block of the
 * bias (BLIS) or adding it in oneDNN's kernel (its bias argument: C is not
 * read); bit for bit the bias copied first and the product added with
 * beta 1 (BLIS: on one thread; oneDNN: cut the same way), whether cut by
 * rows, by columns, by slices of k, or not at all; on each fp32 route. */
static void gemm_bias_route(void) {
    int shapes[4][3] = {{900, 200, 100}, {150, 1200, 100}, {40, 30, 20000}, {20, 30, 40}};   /* m, n, k */
    for (int t = 0; t < 4; t++) {
        int m = shapes[t][0], n = shapes[t][1], k = shapes[t][2];
        float *a = rnd((size_t)m * k, 1), *b = rnd((size_t)n * k, 1), *bias = rnd(n, 1);
        float *c = rnd((size_t)m * n, 1), *c1 = xmalloc((size_t)m * n * sizeof(float));   /* garbage in C: overwritten */
        for (int i = 0; i < m; i++) memcpy(c1 + (size_t)i * n, bias, (size_t)n * sizeof(float));
        Gemm g = {0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n, 0, bias, 0};
        gemm_many(&g, 1);
        Gemm h = {0, 1, m, n, k, 1.0f, a, k, b, k, 1.0f, c1, n, 0, NULL, 0};
        if (t == 2 || fp32_route() == FP32_ONEDNN) gemm_many(&h, 1);   /* k slices: the same slices as with the bias */
        else gemm1(0, 1, m, n, k, 1.0f, a, k, b, k, 1.0f, c1, n);
        CHECK_MSG(!memcmp(c, c1, (size_t)m * n * sizeof(float)), "bias product %d x %d x %d differs (%s)", m, n, k,
                  fp32_mode());
        /* Gemm.round_c: the same C rounded to bf16 values, in pieces, by k slices (t 2) and on one thread
         * (t 3); fp32 and each bf16 route this host runs (a product oneDNN declines: the emulation) */
        Bf16Route r0 = bf16_route();
        for (int route = 0; route < 4; route++) {
            if ((route == 2 && !bf16_native()) || (route == 3 && !gemm_dnnl_runs())) continue;
            if (route) bf16_route_set(route == 1 ? BF16_EMULATED : route == 2 ? BF16_KERNEL : BF16_ONEDNN);
            int fl = route ? GEMM_BF16_A | GEMM_BF16_B : 0;
            float *c2 = rnd((size_t)m * n, 1), *c3 = rnd((size_t)m * n, 1);
            Gemm u = {0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n, fl, bias, 0}, r = u;
            r.c = c3;
            r.round_c = 1;
            gemm_many(&u, 1);
            gemm_many(&r, 1);
            size_t bad = 0;
            for (size_t i = 0; i < (size_t)m * n; i++) bad += c3[i] != bf16_round(c2[i]);
            CHECK_MSG(!bad, "round_c: %zu of %d x %d entries not the product rounded (k %d, route %d, %s)", bad, m, n, k,
                      route, fp32_mode());
            free(c2); free(c3);
        }
        bf16_route_set(r0);
        free(a); free(b); free(bias); free(c); free(c1);
    }
}
static void test_gemm_bias(void) { on_each_fp32_route(gemm_bias_route); }

/* ---- LayerNorm ---------------------------------------------------------- */
typedef struct { int n, D; float *x, *g, *b, *y, *mean, *rstd, *R; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    layernorm_forward(c->y, c->mean, c->rstd, c->x, c->g, c->b, c->n, c->D, 0, NULL);
    return dotR(c->y, c->R, (size_t)c->n * c->D);
}
static void test_layernorm(void) {
    LnCtx c = {.n = 4, .D = 9};
    size_t N = 36;
    c.x = rnd(N, 2); c.g = rnd(9, 1); c.b = rnd(9, 1); c.y = zeros(N); c.mean = zeros(4); c.rstd = zeros(4); c.R = rnd(N, 1);
    for (int j = 0; j < 9; j++) c.g[j] += 1.5f;
    /* known answer: with gamma 1, beta 0 each row has mean 0, variance 1 */
    float one[9], zero[9] = {0};
    for (int j = 0; j < 9; j++) one[j] = 1.0f;
    layernorm_forward(c.y, NULL, NULL, c.x, one, zero, 4, 9, 0, NULL);
    for (int i = 0; i < 4; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < 9; j++) m += c.y[i * 9 + j];
        for (int j = 0; j < 9; j++) v += (c.y[i * 9 + j] - m / 9) * (c.y[i * 9 + j] - m / 9);
        CHECK_NEAR(m / 9, 0.0, 1e-6);
        CHECK_NEAR(v / 9, 1.0, 1e-3);   /* eps 1e-5 against var ~1.3 */
    }
    ln_loss(&c);
    float *dx = zeros(N), *dg = zeros(9), *db = zeros(9);
    layernorm_backward(dx, dg, db, c.R, c.x, c.mean, c.rstd, c.g, 4, 9, 0);
    gradcheck("layernorm dx", ln_loss, &c, c.x, dx, N, 0);
    gradcheck("layernorm dgamma", ln_loss, &c, c.g, dg, 9, 0);
    gradcheck("layernorm dbeta", ln_loss, &c, c.b, db, 9, 0);
    /* in place (dx aliases dy) gives the same; accumulate adds */
    float *d2 = xmalloc(N * sizeof *d2), *dg2 = zeros(9), *db2 = zeros(9);
    memcpy(d2, c.R, N * sizeof *d2);
    layernorm_backward(d2, dg2, db2, d2, c.x, c.mean, c.rstd, c.g, 4, 9, 0);
    CHECK(!memcmp(d2, dx, N * sizeof *d2));
    layernorm_backward(d2, dg2, db2, c.R, c.x, c.mean, c.rstd, c.g, 4, 9, 1);
    CHECK_NEAR(d2[5], 2 * dx[5], 1e-5);
    free(c.x); free(c.g); free(c.b); free(c.y); free(c.mean); free(c.rstd); free(c.R);
    free(dx); free(dg); free(db); free(d2); free(dg2); free(db2);
}

/* ---- softmax ------------------------------------------------------------- */
typedef struct { int n, len; float *x, *y, *R; } SmCtx;
static double sm_loss(void *p) {
    SmCtx *c = p;
    memcpy(c->y, c->x, (size_t)c->n * c->len * sizeof(float));
    softmax_forward(c->y, c->n, c->len);
    return dotR(c->y, c->R, (size_t)c->n * c->len);
}
/* fast_expf against libm: a few ulp over the range softmax and the loss use,
 * the clamps at both ends, and NaN in, NaN out. */
static void test_fast_expf(void) {
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00731f)
        worst = fmax(worst, fabs((double)fast_expf(x) - exp((double)x)) / exp((double)x));
    CHECK_MSG(worst < 5e-7, "worst relative error %.3g", worst);
    CHECK(fast_expf(0.0f) == 1.0f);
    CHECK(fast_expf(-INFINITY) >= 0.0f && fast_expf(-INFINITY) < 1e-37f);
    CHECK(fast_expf(-1000.0f) < 1e-37f);
    CHECK(isfinite(fast_expf(1000.0f)) && fast_expf(1000.0f) > 1e38f);
    CHECK(isnan(fast_expf(NAN)));
}

static void test_softmax(void) {
    SmCtx c = {.n = 3, .len = 11};
    size_t N = 33;
    c.x = rnd(N, 3); c.y = zeros(N); c.R = rnd(N, 1);
    c.x[0] = 80.0f;   /* large logits must not overflow */
    sm_loss(&c);
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        double mx = -1e30, s = 0;
        for (int j = 0; j < 11; j++) mx = fmax(mx, c.x[i * 11 + j]);
        for (int j = 0; j < 11; j++) s += exp(c.x[i * 11 + j] - mx);
        for (int j = 0; j < 11; j++) worst = fmax(worst, fabs(exp(c.x[i * 11 + j] - mx) / s - c.y[i * 11 + j]));
    }
    CHECK(worst < 1e-6);
    /* log_softmax = log of softmax */
    float *l = xmalloc(N * sizeof *l);
    memcpy(l, c.x, N * sizeof *l);
    log_softmax(l, 3, 11);
    worst = 0;
    for (size_t i = 0; i < N; i++) if (c.y[i] > 1e-30f) worst = fmax(worst, fabs(expf(l[i]) - c.y[i]));
    CHECK(worst < 1e-6);
    float *dx = zeros(N);
    softmax_backward(dx, c.R, c.y, 3, 11);
    c.x[0] = 0.5f;
    sm_loss(&c);
    softmax_backward(dx, c.R, c.y, 3, 11);
    gradcheck("softmax dx", sm_loss, &c, c.x, dx, N, 0);
    /* the vectorised exp over the range the kernels use */
    double wr = 0;
    for (float t = -80.0f; t <= 0.0f; t += 0.37f) {
        float r[2] = {t, 0.0f};
        softmax_forward(r, 1, 2);   /* r[0] = e^t / (e^t + 1) */
        double ref = exp((double)t) / (exp((double)t) + 1.0);
        wr = fmax(wr, fabs(r[0] - ref) / ref);
    }
    CHECK_MSG(wr < 1e-6, "fast exp relative error %.3g", wr);
    free(c.x); free(c.y); free(c.R); free(dx); free(l);
}

/* ---- dropout / residual / ReLU ---------------------------------------------- */
typedef struct { size_t n; float *x, *s, *y, *R; float p; uint64_t seed; int kind; } ElCtx;
static double el_loss(void *p) {
    ElCtx *c = p;
    if (c->kind == 0) dropout(c->y, c->x, c->n, c->p, c->seed, 0, NULL);
    else if (c->kind == 1) residual_dropout(c->y, c->x, c->s, c->n, c->p, c->seed);
    else { memcpy(c->y, c->x, c->n * sizeof(float)); relu_dropout_forward(c->y, c->n, c->p, c->seed, 0, NULL); }
    return dotR(c->y, c->R, c->n);
}
static void test_dropout(void) {
    size_t N = 200000;
    float *x = xmalloc(N * sizeof *x), *y = xmalloc(N * sizeof *y), *y2 = xmalloc(N * sizeof *y2);
    for (size_t i = 0; i < N; i++) x[i] = 1.0f;
    dropout(y, x, N, 0.3f, 42, 0, NULL);
    size_t kept = 0;
    for (size_t i = 0; i < N; i++) kept += y[i] != 0.0f;
    double rate = 1.0 - (double)kept / N;
    CHECK_MSG(fabs(rate - 0.3) < 0.005, "drop rate %.4f", rate);   /* binomial sd ~0.001 */
    double mean = 0;
    for (size_t i = 0; i < N; i++) mean += y[i];
    CHECK_NEAR(mean / N, 1.0, 0.01);              /* inverted dropout keeps the mean */
    dropout(y2, x, N, 0.3f, 42, 0, NULL);
    CHECK(!memcmp(y, y2, N * sizeof *y));          /* same seed, same mask */
    dropout(y2, x, N, 0.3f, 43, 0, NULL);
    CHECK(memcmp(y, y2, N * sizeof *y) != 0);      /* another seed, another mask */
    dropout(y2, x, N, 0.0f, 43, 0, NULL);
    CHECK(!memcmp(x, y2, N * sizeof *y));          /* p = 0: identity */
    /* round_bf16 (bf16: a sublayer output's gradient): dropout's entries rounded, p > 0 and p = 0 */
    for (int q = 0; q < 2; q++) {
        for (size_t i = 0; i < N; i++) x[i] = 1.0f + (float)i * 1e-6f;
        dropout(y, x, N, q ? 0.0f : 0.3f, 44, 0, NULL);
        dropout(y2, x, N, q ? 0.0f : 0.3f, 44, 1, NULL);
        size_t off = 0;
        for (size_t i = 0; i < N; i++) off += y2[i] != bf16_round(y[i]);
        CHECK_MSG(!off && memcmp(y, y2, N * sizeof *y), "dropout rounded (p %s): %zu entries off", q ? "0" : "0.3", off);
        /* y16: the same floats, and their 16 bits beside them (the oneDNN route's twin) */
        float *y3 = xmalloc(N * sizeof *y3);
        uint16_t *h = xmalloc(N * sizeof *h);
        dropout(y3, x, N, q ? 0.0f : 0.3f, 44, 1, h);
        size_t wrong = 0;
        for (size_t i = 0; i < N; i++) wrong += h[i] != bf16_from_float(y2[i]);
        CHECK_MSG(!wrong && !memcmp(y3, y2, N * sizeof *y), "dropout with y16 (p %s): %zu 16-bit entries wrong, or the floats differ",
                  q ? "0" : "0.3", wrong);
        free(y3); free(h);
    }
    free(x); free(y); free(y2);

    size_t n = 50;
    ElCtx c = {n, rnd(n, 1), rnd(n, 1), zeros(n), rnd(n, 1), 0.4f, 7, 0};
    float *dx = zeros(n), *ds = zeros(n);
    dropout(dx, c.R, n, c.p, c.seed, 0, NULL);             /* backward = same mask on dy */
    gradcheck("dropout dx", el_loss, &c, c.x, dx, n, 0);
    c.kind = 1;
    for (size_t i = 0; i < n; i++) dx[i] = c.R[i];
    dropout(ds, c.R, n, c.p, c.seed, 0, NULL);
    gradcheck("residual dx", el_loss, &c, c.x, dx, n, 0);
    gradcheck("residual dsub", el_loss, &c, c.s, ds, n, 0);
    c.kind = 2;
    el_loss(&c);
    relu_dropout_backward(dx, c.R, c.y, n, c.p, 0, NULL);
    gradcheck("relu_dropout dx", el_loss, &c, c.x, dx, n, 1);
    /* round_bf16 (bf16: fc1's dy): the same entries rounded */
    float *dxr = zeros(n);
    relu_dropout_backward(dxr, c.R, c.y, n, c.p, 1, NULL);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += dxr[i] != bf16_round(dx[i]);
    CHECK_MSG(!off, "relu_dropout_backward rounded: %zu entries off", off);
    float *dxt = zeros(n);   /* with dx16: the same floats and their 16 bits */
    uint16_t *h16 = xmalloc(n * sizeof *h16);
    relu_dropout_backward(dxt, c.R, c.y, n, c.p, 1, h16);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += h16[i] != bf16_from_float(dxr[i]);
    CHECK_MSG(!wrong && !memcmp(dxt, dxr, n * sizeof *dxr), "relu_dropout_backward with dx16: %zu wrong", wrong);
    /* the forward with x16: the rounded floats as without it, and their 16 bits */
    float *yr = xmalloc(n * sizeof *yr), *yt = xmalloc(n * sizeof *yt);
    memcpy(yr, c.x, n * sizeof *yr);
    memcpy(yt, c.x, n * sizeof *yt);
    relu_dropout_forward(yr, n, c.p, c.seed, 1, NULL);
    memset(h16, 0xff, n * sizeof *h16);
    relu_dropout_forward(yt, n, c.p, c.seed, 1, h16);
    wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += h16[i] != bf16_from_float(yr[i]);
    CHECK_MSG(!wrong && !memcmp(yt, yr, n * sizeof *yr), "relu_dropout_forward with x16: %zu wrong", wrong);
    free(yr); free(yt);
    free(dxr); free(dxt); free(h16);
    c.p = 0.0f;
    el_loss(&c);
    relu_dropout_backward(dx, c.R, c.y, n, c.p, 0, NULL);
    gradcheck("relu dx", el_loss, &c, c.x, dx, n, 1);
    el_loss(&c);
    for (size_t i = 0; i < n; i++) CHECK(c.y[i] == (c.x[i] > 0 ? c.x[i] : 0.0f));
    free(c.x); free(c.s); free(c.y); free(c.R); free(dx); free(ds);
}

/* ---- embeddings --------------------------------------------------------------- */
typedef struct { int n, T, D, V; int *tok; float *E, *pe, *y, *R; } EmbCtx;
static double emb_loss(void *p) {
    EmbCtx *c = p;
    embedding_forward(c->y, c->tok, c->n, c->T, 0, c->E, c->pe, c->D);
    return dotR(c->y, c->R, (size_t)c->n * c->D);
}
/* The fused post-norm ops are bit for bit the unfused calls, forward and
 * backward, with and without dropout, threaded (n * D above PAR_MIN) and not;
 * layernorm_apply remakes layernorm_forward's output bit for bit. */
static void test_fused_residual_norm(void) {
    for (int t = 0; t < 4; t++) {
        int n = t < 2 ? 301 : 7, D = t < 2 ? 260 : 33;   /* 301: the row blocks (3 rows) end with a short one */
        float p = t % 2 ? 0.1f : 0.0f;
        uint64_t seed = 1234567 + t;
        size_t N = (size_t)n * D;
        float *x = rnd(N, 1), *sub = rnd(N, 1), *gamma = rnd(D, 1), *beta = rnd(D, 1), *dy = rnd(N, 1);
        float *res1 = xmalloc(N * 4), *ln1 = xmalloc(N * 4), *m1 = xmalloc(n * 4), *r1 = xmalloc(n * 4);
        float *res2 = xmalloc(N * 4), *ln2 = xmalloc(N * 4), *m2 = xmalloc(n * 4), *r2 = xmalloc(n * 4);
        residual_dropout(res1, x, sub, N, p, seed);
        layernorm_forward(ln1, m1, r1, res1, gamma, beta, n, D, 0, NULL);
        residual_dropout_layernorm(res2, ln2, m2, r2, x, sub, gamma, beta, n, D, p, seed, 0, NULL);
        CHECK_MSG(!memcmp(res1, res2, N * 4) && !memcmp(ln1, ln2, N * 4) && !memcmp(m1, m2, n * 4) && !memcmp(r1, r2, n * 4),
                  "fused residual + dropout + LayerNorm differs from the unfused calls (n %d, D %d, p %g)", n, D, p);
        /* the output remade from the input + saved mean/rstd, as the model's backward does: the same bits */
        layernorm_apply(ln2, res1, m1, r1, gamma, beta, n, D, 0, NULL);
        CHECK_MSG(!memcmp(ln1, ln2, N * 4), "layernorm_apply differs from layernorm_forward (n %d, D %d)", n, D);
        /* written rounded (pre-norm bf16): forward and remake agree, and each entry is the unrounded one rounded */
        float *ln4 = xmalloc(N * 4), *m4 = xmalloc(n * 4), *r4 = xmalloc(n * 4);
        layernorm_forward(ln4, m4, r4, res1, gamma, beta, n, D, 1, NULL);
        layernorm_apply(ln2, res1, m4, r4, gamma, beta, n, D, 1, NULL);
        size_t unrounded = 0;
        for (size_t i = 0; i < N; i++) unrounded += ln4[i] != bf16_round(ln1[i]);
        CHECK_MSG(!unrounded && !memcmp(ln4, ln2, N * 4) && !memcmp(m4, m1, n * 4) && !memcmp(r4, r1, n * 4),
                  "LayerNorm written rounded: %zu entries not the rounded output, or the remake differs (n %d, D %d)",
                  unrounded, n, D);
        /* and with the 16 bits beside them (y16): the same floats, and their bits, forward and remade */
        float *ln5 = xmalloc(N * 4), *ln6 = xmalloc(N * 4);
        uint16_t *h5 = xmalloc(N * 2), *h6 = xmalloc(N * 2);
        layernorm_forward(ln5, m4, r4, res1, gamma, beta, n, D, 1, h5);
        layernorm_apply(ln6, res1, m4, r4, gamma, beta, n, D, 1, h6);
        size_t wrong = 0;
        for (size_t i = 0; i < N; i++) wrong += h5[i] != bf16_from_float(ln4[i]);
        CHECK_MSG(!wrong && !memcmp(ln5, ln4, N * 4) && !memcmp(ln6, ln4, N * 4) && !memcmp(h5, h6, N * 2),
                  "LayerNorm with y16: %zu 16-bit entries wrong, or the floats or the remake differ (n %d, D %d)", wrong,
                  n, D);
        free(ln5); free(ln6); free(h5); free(h6);
        free(ln4); free(m4); free(r4);
        float *dx1 = xmalloc(N * 4), *dx2 = xmalloc(N * 4), *o1 = xmalloc(N * 4), *o2 = xmalloc(N * 4);
        float *dg1 = xcalloc(D, 4), *db1 = xcalloc(D, 4), *dg2 = xcalloc(D, 4), *db2 = xcalloc(D, 4);
        memcpy(dx1, dy, N * 4);
        memcpy(dx2, dy, N * 4);
        layernorm_backward(dx1, dg1, db1, dx1, res1, m1, r1, gamma, n, D, 0);   /* in place, as the model */
        dropout(o1, dx1, N, p, seed, 0, NULL);
        LayerNormRemake also = {ln2, x, m1, r1, beta, gamma, 0, NULL};   /* another LayerNorm's output remade in the pass */
        float *ln3 = xmalloc(N * 4);
        layernorm_apply(ln3, x, m1, r1, beta, gamma, n, D, 0, NULL);
        layernorm_backward_dropout(dx2, dg2, db2, dx2, res1, m1, r1, gamma, n, D, o2, p, seed, 0, NULL, t % 2 ? &also : NULL);
        CHECK_MSG(!memcmp(dx1, dx2, N * 4) && !memcmp(o1, o2, N * 4) && !memcmp(dg1, dg2, D * 4) && !memcmp(db1, db2, D * 4),
                  "fused LayerNorm backward + dropout differs from the unfused calls (n %d, D %d, p %g)", n, D, p);
        /* dout written rounded (bf16): each entry the unrounded one rounded, as dropout's own rounding */
        float *dx3 = xmalloc(N * 4), *o3 = xmalloc(N * 4), *o4 = xmalloc(N * 4), *dg3 = xcalloc(D, 4), *db3 = xcalloc(D, 4);
        memcpy(dx3, dy, N * 4);
        layernorm_backward_dropout(dx3, dg3, db3, dx3, res1, m1, r1, gamma, n, D, o3, p, seed, 1, NULL, NULL);
        dropout(o4, dx1, N, p, seed, 1, NULL);
        size_t off = 0;
        for (size_t i = 0; i < N; i++) off += o3[i] != bf16_round(o1[i]);
        CHECK_MSG(!off && !memcmp(o3, o4, N * 4) && !memcmp(dx3, dx1, N * 4),
                  "rounded dout: %zu entries not the unrounded ones rounded, or not dropout's (n %d, D %d, p %g)", off, n, D, p);
        CHECK(memcmp(o3, o1, N * 4) != 0);   /* it did round */
        /* with dout16: the same, and dout's 16 bits beside it */
        float *o5 = xmalloc(N * 4);
        uint16_t *h7 = xmalloc(N * 2);
        memcpy(dx3, dy, N * 4);
        layernorm_backward_dropout(dx3, dg3, db3, dx3, res1, m1, r1, gamma, n, D, o5, p, seed, 1, h7, NULL);
        size_t bits = 0;
        for (size_t i = 0; i < N; i++) bits += h7[i] != bf16_from_float(o4[i]);
        CHECK_MSG(!bits && !memcmp(o5, o4, N * 4) && !memcmp(dx3, dx1, N * 4),
                  "dout16: %zu 16-bit entries wrong, or dout / dx differ (n %d, D %d, p %g)", bits, n, D, p);
        free(o5); free(h7);
        free(dx3); free(o3); free(o4); free(dg3); free(db3);
        CHECK_MSG(t % 2 == 0 || !memcmp(ln2, ln3, N * 4), "the LayerNorm remade in the backward's pass differs (n %d, D %d)", n, D);
        free(ln3);
        {   /* written rounded with their 16 bits (post-norm bf16: the encoder output, and the stream the backward
             * remakes): the fused forward and the remake in the backward's pass, as layernorm_forward and
             * layernorm_apply rounded */
            float *la = xmalloc(N * 4), *lb = xmalloc(N * 4), *ra = xmalloc(N * 4), *ma = xmalloc(n * 4);
            float *sa = xmalloc(n * 4), *dxa = xmalloc(N * 4), *oa = xmalloc(N * 4), *dga = xcalloc(D, 4);
            float *dba = xcalloc(D, 4);
            uint16_t *ha = xmalloc(N * 2), *hb = xmalloc(N * 2);
            layernorm_forward(la, NULL, NULL, res1, gamma, beta, n, D, 1, ha);
            residual_dropout_layernorm(ra, lb, ma, sa, x, sub, gamma, beta, n, D, p, seed, 1, hb);
            CHECK_MSG(!memcmp(la, lb, N * 4) && !memcmp(ha, hb, N * 2) && !memcmp(ra, res1, N * 4) &&
                          !memcmp(ma, m1, n * 4) && !memcmp(sa, r1, n * 4),
                      "fused residual + dropout + LayerNorm written rounded differs from the unfused calls (n %d, D %d, p %g)",
                      n, D, p);
            layernorm_apply(la, x, m1, r1, beta, gamma, n, D, 1, ha);
            LayerNormRemake also16 = {lb, x, m1, r1, beta, gamma, 1, hb};
            memcpy(dxa, dy, N * 4);
            layernorm_backward_dropout(dxa, dga, dba, dxa, res1, m1, r1, gamma, n, D, oa, p, seed, 0, NULL, &also16);
            CHECK_MSG(!memcmp(la, lb, N * 4) && !memcmp(ha, hb, N * 2) && !memcmp(dxa, dx1, N * 4) && !memcmp(oa, o1, N * 4),
                      "the LayerNorm remade rounded in the backward's pass differs from layernorm_apply's (n %d, D %d)", n, D);
            size_t unr = 0;
            for (size_t i = 0; i < N; i++) unr += lb[i] != bf16_round(lb[i]);
            CHECK_MSG(!unr, "%zu entries of the rounded remake are not bf16 values", unr);
            free(la); free(lb); free(ra); free(ma); free(sa); free(dxa); free(oa); free(dga); free(dba); free(ha); free(hb);
        }
        if (p > 0) {   /* dropout is really on: some zeros, scaled survivors */
            size_t zeros = 0;
            for (size_t i = 0; i < N; i++) zeros += o2[i] == 0.0f;
            CHECK(zeros > N / 20 && zeros < N / 5);
        }
        free(x); free(sub); free(gamma); free(beta); free(dy); free(res1); free(ln1); free(m1); free(r1);
        free(res2); free(ln2); free(m2); free(r2); free(dx1); free(dx2); free(o1); free(o2);
        free(dg1); free(db1); free(dg2); free(db2);
    }
}

static void test_embedding(void) {
    int D = 6, P = 8;
    float pe[8 * 6];
    positional_encoding(pe, P, D);
    /* the paper's formula: PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(...) */
    CHECK_NEAR(pe[0 * D + 0], 0.0, 1e-7);
    CHECK_NEAR(pe[0 * D + 1], 1.0, 1e-7);
    CHECK_NEAR(pe[3 * D + 0], sin(3.0), 1e-6);
    CHECK_NEAR(pe[3 * D + 1], cos(3.0), 1e-6);
    CHECK_NEAR(pe[5 * D + 2], sin(5.0 / pow(10000.0, 2.0 / 6)), 1e-6);
    CHECK_NEAR(pe[5 * D + 5], cos(5.0 / pow(10000.0, 4.0 / 6)), 1e-6);
    int tok[6] = {3, 1, 3, 0, 2, 3};   /* 2 sentences of T = 3; token 3 repeats */
    EmbCtx c = {6, 3, D, 4, tok, rnd(24, 1), pe, zeros(36), rnd(36, 1)};
    emb_loss(&c);
    CHECK_NEAR(c.y[4 * D + 2], c.E[2 * D + 2] * sqrt(6.0) + pe[1 * D + 2], 1e-6);   /* row 4 = sentence 1, position 1 */
    /* incremental decoding: one row at position pos0 */
    float one[6];
    embedding_forward(one, &tok[5], 1, 1, 2, c.E, pe, D);
    CHECK(!memcmp(one, c.y + 5 * D, sizeof one));
    float *dE = zeros(24);
    embedding_backward(dE, c.R, tok, 6, D);
    gradcheck("embedding dE", emb_loss, &c, c.E, dE, 24, 0);
    free(c.E); free(c.y); free(c.R); free(dE);
}

/* ---- attention ----------------------------------------------------------------- */
typedef struct {
    AttnShape s;
    SeqView q, k, v, out;
    float *probs;
    size_t nout;    /* floats in out's buffer */
    float *R;
} AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    attention_forward(c->out, c->q, c->k, c->v, c->probs, &c->s);
    return dotR(c->out.data, c->R, c->nout);
}

/* Plain double-precision attention for one (b, h, i): the reference. */
static void att_reference(const AttCtx *c, int b, int h, int i, double *o) {
    const AttnShape *s = &c->s;
    int Dk = s->Dk, n = s->k_len ? s->k_len[b] : s->Tk;
    if (s->causal && s->q_pos0 + i + 1 < n) n = s->q_pos0 + i + 1;
    double sc[128], mx = -1e300, sum = 0;
    for (int j = 0; j < n; j++) {
        double d = 0;
        for (int t = 0; t < Dk; t++)
            d += (double)c->q.data[b * c->q.bs + i * c->q.rs + h * Dk + t] * c->k.data[b * c->k.bs + j * c->k.rs + h * Dk + t];
        sc[j] = d / sqrt((double)Dk);
        mx = fmax(mx, sc[j]);
    }
    for (int j = 0; j < n; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
    for (int t = 0; t < Dk; t++) {
        o[t] = 0;
        for (int j = 0; j < n; j++) o[t] += sc[j] / sum * c->v.data[b * c->v.bs + j * c->v.rs + h * Dk + t];
    }
}

/* q dense [B, Tq, D]; k, v in a cache layout (capacity L > Tk rows per
 * sentence); out with a row stride wider than D. B = H = 2; Tk <= 128. */
static void attention_shape(const char *name, int Tq, int Tk, int Dk, int causal, int q_pos0, const int *k_len,
                            float p_drop) {
    int B = 2, H = 2, D = H * Dk, L = Tk + 2, ldo = D + 2;
    AttCtx c = {.s = {B, H, Tq, Tk, Dk, k_len, causal, q_pos0, p_drop, 99}};
    size_t nq = (size_t)B * Tq * D, nk = (size_t)B * L * D;
    c.q = (SeqView){rnd(nq, 1.5f), (long)Tq * D, D};
    c.k = (SeqView){rnd(nk, 1.5f), (long)L * D, D};
    c.v = (SeqView){rnd(nk, 1.0f), (long)L * D, D};
    c.nout = (size_t)B * Tq * ldo;
    c.out = (SeqView){zeros(c.nout), (long)Tq * ldo, ldo};
    c.probs = zeros((size_t)B * H * Tq * Tk);
    c.R = rnd(c.nout, 1);
    for (int b = 0; b < B; b++)   /* the gap columns of out are not outputs */
        for (int i = 0; i < Tq; i++) c.R[b * c.out.bs + i * ldo + D] = c.R[b * c.out.bs + i * ldo + D + 1] = 0.0f;
    att_loss(&c);
    if (p_drop == 0.0f) {
        double worst = 0, o[64];
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < Tq; i++) {
                    att_reference(&c, b, h, i, o);
                    for (int t = 0; t < Dk; t++) worst = fmax(worst, fabs(o[t] - c.out.data[b * c.out.bs + i * ldo + h * Dk + t]));
                }
        CHECK_MSG(worst < 1e-5, "%s: forward off by %.3g", name, worst);
    }
    /* masked keys get probability exactly 0; rows sum to 1 */
    int masked_ok = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const float *P = c.probs + (((size_t)b * H + h) * Tq + i) * Tk;
                int n = k_len ? k_len[b] : Tk;
                if (causal && q_pos0 + i + 1 < n) n = q_pos0 + i + 1;
                double s = 0;
                for (int j = 0; j < Tk; j++) { if (j >= n && P[j] != 0.0f) masked_ok = 0; s += P[j]; }
                if (fabs(s - 1.0) > 1e-5) masked_ok = 0;
            }
    CHECK_MSG(masked_ok, "%s: masked probabilities", name);
    float *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk);
    SeqView dqv = {dq, c.q.bs, c.q.rs}, dkv = {dk, c.k.bs, c.k.rs}, dvv = {dv, c.v.bs, c.v.rs};
    SeqView dout = {c.R, c.out.bs, c.out.rs};
    attention_backward(dqv, dkv, dvv, dout, c.q, c.k, c.v, c.probs, &c.s);
    char n1[96];
    snprintf(n1, sizeof n1, "%s dq", name); gradcheck(n1, att_loss, &c, c.q.data, dq, nq, 0);
    snprintf(n1, sizeof n1, "%s dk", name); gradcheck(n1, att_loss, &c, c.k.data, dk, nk, 0);
    snprintf(n1, sizeof n1, "%s dv", name); gradcheck(n1, att_loss, &c, c.v.data, dv, nk, 0);
    /* padding keys and the cache rows beyond Tk get no gradient */
    int zero_ok = 1;
    for (int b = 0; b < B; b++)
        for (int j = k_len ? k_len[b] : Tk; j < L; j++)
            for (int t = 0; t < D; t++)
                if (dk[b * c.k.bs + j * D + t] != 0.0f || dv[b * c.v.bs + j * D + t] != 0.0f) zero_ok = 0;
    CHECK_MSG(zero_ok, "%s: padding keys have gradients", name);
    free(c.q.data); free(c.k.data); free(c.v.data); free(c.out.data); free(c.probs); free(c.R);
    free(dq); free(dk); free(dv);
}

static void attention_case(const char *name, int causal, int q_pos0, const int *k_len, float p_drop) {
    attention_shape(name, 3, 5, 3, causal, q_pos0, k_len, p_drop);
}

static void test_attention(void) {
    int k_len[2] = {5, 2}, k_len70[2] = {70, 37};
    attention_case("attention", 0, 0, NULL, 0.0f);
    attention_case("attention padded", 0, 0, k_len, 0.0f);
    attention_case("attention causal", 1, 0, NULL, 0.0f);
    attention_case("attention causal offset", 1, 2, k_len, 0.0f);   /* 3 new queries after 2 cached steps */
    attention_case("attention dropout", 1, 0, k_len, 0.3f);
    attention_case("attention cross dropout", 0, 0, k_len, 0.5f);
    /* more keys than one pass of the head loops' 64 columns, 4-row blocks and a
     * remainder row, head size a multiple of 16 (operands read in place) */
    attention_shape("attention 70 keys", 5, 70, 32, 1, 65, k_len70, 0.0f);
    attention_shape("attention 70 keys dropout", 5, 70, 16, 0, 0, k_len70, 0.2f);
}

/* ---- bf16 attention (AttnShape.bf16) -----------------------------------------------
 * Every route (dispatch.h: emulated, the kernel route, oneDNN) against the
 * fp32 path on the same inputs, element by element, within a bound derived
 * from the data (first order in u, with the (1 + u) factors kept where they
 * multiply an error):
 *   u = 2^-8 (bf16 rounding), a = 2u + u^2 (a product of two rounded
 *   operands against the exact one), g_k = (k + 2) 2^-24 (fp32 sums of k
 *   terms and a scaling), counted twice: both runs sum in fp32.
 *   S = scale Q K^T:    E_S = scale (a + 2 g_Dk) sum_t |q||k|;  E_i = max_j E_S
 *   P = softmax(S):     dP <= P (e^(2 E_i) - 1) + 1e-6 P  (a shift of S by at
 *                       most E_i per entry moves log P by at most 2 E_i; 1e-6:
 *                       fast_expf and the normalisation, a few ulps each run)
 *   P' = dropout(P):    |P'| <= d P, error d dP  (d = 1 / (1 - p); a dropped
 *                       entry adds 0 to both, so d for all is an upper bound)
 *   out = P' V:         sum_j (d dP (1+u)^2 + (a + 2 g_Tk) d P) |v|
 *   dV = P'^T dO:       sum_i (d dP (1+u)^2 + (a + 2 g_Tq) d P) |dO|
 *   dP' = dO V^T:       M = sum_t |dO||v|, error (a + 2 g_Dk) M; dP: d times
 *   c = sum_j dP P:     |c| <= C = sum_j d M P, error sum_j (d E_M P + d M dP) + 2 g_Tk C
 *   dS = scale P (dP - c): |dS| <= scale P (d M + C) = Z,
 *                       error scale (dP (d M + C) + P (d E_M + E_c)) + 4 2^-24 Z
 *   dQ = dS K, dK = dS^T Q: sum (E_dS (1+u)^2 + (a + 2 g) Z) |k| (|q|).
 *   out, dQ, dK, dV are written rounded to bf16: a bound E above becomes
 *                       E (1 + u) + u |x| (x the fp32 run's value).
 * Printed: the worst error as a fraction of its bound. The bf16 results
 * must also differ from fp32 somewhere (bf16 is on), hold bf16 values,
 * and padding keys get exactly 0. AttnShape.held: q, k, v, dout rounded
 * beforehand and read in place give the same bits as rounded inside. */
typedef struct { float *out, *probs, *dq, *dk, *dv; } AttOut;

static void att_run(AttOut *r, AttnShape s, SeqView q, SeqView k, SeqView v, SeqView dout, int ldo, size_t nq, size_t nk) {
    size_t nout = (size_t)s.B * s.Tq * ldo;
    r->out = zeros(nout); r->probs = zeros((size_t)s.B * s.H * s.Tq * s.Tk);
    r->dq = zeros(nq); r->dk = zeros(nk); r->dv = zeros(nk);
    SeqView o = {r->out, (long)s.Tq * ldo, ldo};
    attention_forward(o, q, k, v, r->probs, &s);
    SeqView dqv = {r->dq, q.bs, q.rs}, dkv = {r->dk, k.bs, k.rs}, dvv = {r->dv, v.bs, v.rs};
    attention_backward(dqv, dkv, dvv, dout, q, k, v, r->probs, &s);
}
static void att_free(AttOut *r) { free(r->out); free(r->probs); free(r->dq); free(r->dk); free(r->dv); }

static void attention_bf16_case(const char *name, int B, int H, int Tq, int Tk, int Dk, int causal, int q_pos0,
                                const int *k_len, float p_drop) {
    int D = H * Dk, L = Tk + 2, ldo = D + 3;
    AttnShape s = {.B = B, .H = H, .Tq = Tq, .Tk = Tk, .Dk = Dk, .k_len = k_len, .causal = causal, .q_pos0 = q_pos0,
                   .dropout = p_drop, .seed = 77};
    size_t nq = (size_t)B * Tq * D, nk = (size_t)B * L * D;
    SeqView q = {rnd(nq, 1.5f), (long)Tq * D, D}, k = {rnd(nk, 1.5f), (long)L * D, D}, v = {rnd(nk, 1.0f), (long)L * D, D};
    SeqView dout = {rnd((size_t)B * Tq * ldo, 1.0f), (long)Tq * ldo, ldo};
    AttOut f;
    att_run(&f, s, q, k, v, dout, ldo, nq, nk);
    /* the bounds, from the fp32 run's data */
    const double u = 1.0 / 256, a = 2 * u + u * u, e24 = 1.0 / (1 << 24), u2 = (1 + u) * (1 + u);
    const double gD = (Dk + 2) * e24, gTk = (Tk + 2) * e24, gTq = (Tq + 2) * e24;
    double dsc = p_drop > 0 ? 1.0 / (1.0 - p_drop) : 1.0, scale = 1.0 / sqrt((double)Dk);
    size_t nout = (size_t)B * Tq * ldo;
    double *bo = calloc(nout, sizeof(double)), *bq = calloc(nq, sizeof(double));
    double *bk = calloc(nk, sizeof(double)), *bv = calloc(nk, sizeof(double));
    double *dPb = malloc((size_t)Tq * Tk * sizeof(double)), *M = malloc((size_t)Tq * Tk * sizeof(double));
    double *EdS = malloc((size_t)Tq * Tk * sizeof(double)), *Z = malloc((size_t)Tq * Tk * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *P = f.probs + ((size_t)b * H + h) * Tq * Tk;
#define Q_(i, t) fabs(q.data[b * q.bs + (i) * q.rs + h * Dk + (t)])
#define K_(j, t) fabs(k.data[b * k.bs + (j) * k.rs + h * Dk + (t)])
#define V_(j, t) fabs(v.data[b * v.bs + (j) * v.rs + h * Dk + (t)])
#define O_(i, t) fabs(dout.data[b * dout.bs + (i) * dout.rs + h * Dk + (t)])
            for (int i = 0; i < Tq; i++) {
                double Ei = 0, C = 0, Ec = 0;
                for (int j = 0; j < Tk; j++) {
                    double sq = 0, m = 0;
                    for (int t = 0; t < Dk; t++) { sq += Q_(i, t) * K_(j, t); m += O_(i, t) * V_(j, t); }
                    Ei = fmax(Ei, scale * (a + 2 * gD) * sq);
                    M[i * Tk + j] = m;
                }
                for (int j = 0; j < Tk; j++) {
                    double p = P[i * Tk + j];
                    dPb[i * Tk + j] = p * (exp(2 * Ei) - 1) + 1e-6 * p;
                    C += dsc * M[i * Tk + j] * p;
                }
                for (int j = 0; j < Tk; j++)
                    Ec += dsc * (a + 2 * gD) * M[i * Tk + j] * P[i * Tk + j] + dsc * M[i * Tk + j] * dPb[i * Tk + j];
                Ec += 2 * gTk * C;
                for (int j = 0; j < Tk; j++) {
                    double p = P[i * Tk + j], z = scale * p * (dsc * M[i * Tk + j] + C);
                    Z[i * Tk + j] = z;
                    EdS[i * Tk + j] = scale * (dPb[i * Tk + j] * (dsc * M[i * Tk + j] + C) +
                                               p * (dsc * (a + 2 * gD) * M[i * Tk + j] + Ec)) + 4 * e24 * z;
                }
                for (int t = 0; t < Dk; t++) {
                    double eo = 0, eq = 0;
                    for (int j = 0; j < Tk; j++) {
                        eo += (dsc * dPb[i * Tk + j] * u2 + (a + 2 * gTk) * dsc * P[i * Tk + j]) * V_(j, t);
                        eq += (EdS[i * Tk + j] * u2 + (a + 2 * gTk) * Z[i * Tk + j]) * K_(j, t);
                    }
                    bo[b * (long)Tq * ldo + (long)i * ldo + h * Dk + t] = eo;
                    bq[b * q.bs + i * q.rs + h * Dk + t] = eq;
                }
            }
            for (int j = 0; j < Tk; j++)
                for (int t = 0; t < Dk; t++) {
                    double ev = 0, ek = 0;
                    for (int i = 0; i < Tq; i++) {
                        ev += (dsc * dPb[i * Tk + j] * u2 + (a + 2 * gTq) * dsc * P[i * Tk + j]) * O_(i, t);
                        ek += (EdS[i * Tk + j] * u2 + (a + 2 * gTq) * Z[i * Tk + j]) * Q_(i, t);
                    }
                    bv[b * v.bs + j * v.rs + h * Dk + t] = ev;
                    bk[b * k.bs + j * k.rs + h * Dk + t] = ek;
                }
#undef Q_
#undef K_
#undef V_
#undef O_
        }
    /* q, k, v, dout rounded to bf16 values (for AttnShape.held) */
    SeqView qr = {xmalloc(nq * sizeof(float)), q.bs, q.rs}, kr = {xmalloc(nk * sizeof(float)), k.bs, k.rs};
    SeqView vr = {xmalloc(nk * sizeof(float)), v.bs, v.rs}, dr = {xmalloc(nout * sizeof(float)), dout.bs, dout.rs};
    for (size_t x = 0; x < nq; x++) qr.data[x] = bf16_round(q.data[x]);
    for (size_t x = 0; x < nk; x++) { kr.data[x] = bf16_round(k.data[x]); vr.data[x] = bf16_round(v.data[x]); }
    for (size_t x = 0; x < nout; x++) dr.data[x] = bf16_round(dout.data[x]);
    Bf16Route saved = bf16_route();
    const char *names[3] = {"emulated", "kernel", "onednn"};
    for (int r = BF16_EMULATED; r <= BF16_ONEDNN; r++) {
        if (r == BF16_KERNEL && !bf16_native()) { printf("SKIP %s, kernel route: no AVX512_BF16 here\n", name); continue; }
        if (r == BF16_ONEDNN && !gemm_dnnl_runs()) {
            printf("SKIP %s, onednn route: no AVX-512 here, or built without oneDNN\n", name);
            continue;
        }
        bf16_route_set((Bf16Route)r);
        AttnShape sb = s;
        sb.bf16 = 1;
        AttOut g;
        att_run(&g, sb, q, k, v, dout, ldo, nq, nk);
        struct { const char *what; const float *x, *y; const double *bound; size_t n; } cmp[4] = {
            {"out", g.out, f.out, bo, nout}, {"dq", g.dq, f.dq, bq, nq}, {"dk", g.dk, f.dk, bk, nk}, {"dv", g.dv, f.dv, bv, nk}};
        int differs = 0;
        for (int c = 0; c < 4; c++) {
            double worst = 0;
            int ok = 1;
            size_t unrounded = 0;   /* written rounded to bf16 (AttnShape.bf16) */
            for (size_t x = 0; x < cmp[c].n; x++) {
                double e = fabs((double)cmp[c].x[x] - cmp[c].y[x]);
                double bound = cmp[c].bound[x] * (1 + u) + u * fabs((double)cmp[c].y[x]);
                unrounded += cmp[c].x[x] != bf16_round(cmp[c].x[x]);
                if (bound == 0) { ok &= e == 0; continue; }   /* gaps, padding keys: exactly 0 in both */
                ok &= e <= bound;
                worst = fmax(worst, e / bound);
                differs |= e > 0;
            }
            CHECK_MSG(ok, "%s, route %s: %s outside the bf16 bound (worst %.3g of it)", name, names[r], cmp[c].what, worst);
            CHECK_MSG(!unrounded, "%s, route %s: %zu entries of %s not rounded to bf16", name, names[r], unrounded,
                      cmp[c].what);
            printf("%s, route %s: %s worst error %.3f of its bound\n", name, names[r], cmp[c].what, worst);
        }
        CHECK_MSG(differs, "%s, route %s: bf16 gave the fp32 results bit for bit (is it on?)", name, names[r]);
        AttOut in, at;   /* AttnShape.held: the operands rounded beforehand, then inside (0) or read as they are (1) */
        att_run(&in, sb, qr, kr, vr, dr, ldo, nq, nk);
        sb.held = 1;
        att_run(&at, sb, qr, kr, vr, dr, ldo, nq, nk);
        CHECK_MSG(!memcmp(in.out, at.out, nout * sizeof(float)) && !memcmp(in.dq, at.dq, nq * sizeof(float)) &&
                  !memcmp(in.dk, at.dk, nk * sizeof(float)) && !memcmp(in.dv, at.dv, nk * sizeof(float)),
                  "%s, route %s: held operands read in place differ from the same rounded inside", name, names[r]);
        att_free(&g); att_free(&in); att_free(&at);
    }
    bf16_route_set(saved);
    att_free(&f);
    free(q.data); free(k.data); free(v.data); free(dout.data);
    free(qr.data); free(kr.data); free(vr.data); free(dr.data);
    free(bo); free(bq); free(bk); free(bv); free(dPb); free(M); free(EdS); free(Z);
}

static void test_attention_bf16(void) {
    int k_len[2] = {5, 2}, k_len13[13] = {11, 3, 11, 7, 1, 11, 9, 11, 2, 11, 11, 6, 10};
    attention_bf16_case("bf16 attention", 2, 2, 3, 5, 8, 0, 0, NULL, 0.0f);
    attention_bf16_case("bf16 attention padded", 2, 2, 3, 5, 8, 0, 0, k_len, 0.0f);
    attention_bf16_case("bf16 attention causal offset", 2, 2, 3, 5, 8, 1, 2, k_len, 0.0f);
    attention_bf16_case("bf16 attention dropout", 2, 2, 4, 5, 8, 1, 0, k_len, 0.3f);
    /* B H Tq Tk Dk = 82k >= PAR_MIN: groups of 3 sentences shared by the threads, the last of 1 */
    attention_bf16_case("bf16 attention threaded", 13, 4, 9, 11, 16, 0, 0, k_len13, 0.0f);
    attention_bf16_case("bf16 attention threaded causal dropout", 13, 4, 11, 11, 16, 1, 0, NULL, 0.1f);
}

/* The cases above on each code that can run them: oneDNN's batched
 * matmuls (where built) and the per-head loops (every build), each forced,
 * whatever attention_on_dnnl would choose at these small heads. */
static void test_attention_codes(void) {
    const char *names[3] = {"auto", "per-head loops", "oneDNN"};
    for (int c = ATTN_LOOPS; c <= ATTN_DNNL; c++) {
        if (c == ATTN_DNNL && !gemm_dnnl_built()) { SKIP("oneDNN: not built"); continue; }
        attention_code((AttnCode)c);
        printf("attention core on %s\n", names[c]);
        test_attention();
        test_attention_bf16();
    }
    attention_code(ATTN_AUTO);
}

/* AttnShape.d16: dq, dk, dv's 16 bits written beside the rounded floats, on
 * every code and bf16 route (threaded: groups of sentences), the floats as
 * without them. */
static void test_attention_twins(void) {
    int B = 13, H = 4, T = 11, Dk = 16, D = H * Dk;
    size_t n = (size_t)B * T * D;
    SeqView q = seq_view(rnd(n, 1.5f), T, D), k = seq_view(rnd(n, 1.5f), T, D), v = seq_view(rnd(n, 1.0f), T, D);
    SeqView dout = seq_view(rnd(n, 1.0f), T, D), out = seq_view(zeros(n), T, D);
    float *probs = zeros((size_t)B * H * T * T), *g[2][3];
    uint16_t *h[3];
    for (int o = 0; o < 3; o++) { g[0][o] = zeros(n); g[1][o] = zeros(n); h[o] = xmalloc(n * sizeof(uint16_t)); }
    Bf16Route saved = bf16_route();
    const char *rn[3] = {"emulated", "kernel", "onednn"}, *cn[3] = {"auto", "loops", "oneDNN"};
    for (int r = BF16_EMULATED; r <= BF16_ONEDNN; r += 2)
        for (int c = ATTN_LOOPS; c <= ATTN_DNNL; c++) {
            if ((r == BF16_ONEDNN && !gemm_dnnl_runs()) || (c == ATTN_DNNL && !gemm_dnnl_built())) continue;
            bf16_route_set((Bf16Route)r);
            attention_code((AttnCode)c);
            AttnShape s = {.B = B, .H = H, .Tq = T, .Tk = T, .Dk = Dk, .causal = 1, .dropout = 0.1f, .seed = 5, .bf16 = 1};
            attention_forward(out, q, k, v, probs, &s);
            for (int t = 0; t < 2; t++) {
                for (int o = 0; o < 3; o++) {
                    s.d16[o] = t ? h[o] : NULL;
                    memset(h[o], 0xff, n * sizeof(uint16_t));   /* a NaN pattern the run must overwrite */
                }
                attention_backward(seq_view(g[t][0], T, D), seq_view(g[t][1], T, D), seq_view(g[t][2], T, D), dout, q, k,
                                   v, probs, &s);
            }
            size_t wrong = 0, differ = 0;
            for (int o = 0; o < 3; o++)
                for (size_t i = 0; i < n; i++) {
                    wrong += h[o][i] != bf16_from_float(g[1][o][i]);
                    differ += g[0][o][i] != g[1][o][i];
                }
            CHECK_MSG(!wrong && !differ, "attention twins, route %s on %s: %zu 16-bit entries wrong, %zu floats differ",
                      rn[r], cn[c], wrong, differ);
        }
    attention_code(ATTN_AUTO);
    bf16_route_set(saved);
    for (int o = 0; o < 3; o++) { free(g[0][o]); free(g[1][o]); free(h[o]); }
    free(q.data); free(k.data); free(v.data); free(dout.data); free(out.data); free(probs);
}

/* Where ATTN_AUTO runs the core: oneDNN where built, except for float
 * operands in heads of up to ATTN_LOOPS_MAX_DK; the loops inside a region;
 * 16-bit operands (attention_core16) on the oneDNN and AMX routes. */
static void test_attention_choice(void) {
    Bf16Route saved = bf16_route();
    int dn = gemm_dnnl_built(), dn16 = gemm_dnnl_runs();   /* oneDNN; with its bf16 matmul */
    AttnShape s = {.B = 4, .H = 4, .Tq = 20, .Tk = 20, .Dk = ATTN_LOOPS_MAX_DK};
    CHECK_MSG(!attention_on_dnnl(&s), "fp32, Dk %d: the loops", s.Dk);
    s.Dk = ATTN_LOOPS_MAX_DK + 1;
    CHECK_MSG(attention_on_dnnl(&s) == dn, "fp32, Dk %d: oneDNN where built", s.Dk);
    s.bf16 = 1;
    bf16_route_set(BF16_EMULATED);
    CHECK_MSG(attention_on_dnnl(&s) == dn, "bf16 emulated, Dk %d: oneDNN where built", s.Dk);
    s.Dk = ATTN_LOOPS_MAX_DK;   /* 32 where the build has AVX-512, else 0: every head on oneDNN */
    CHECK_MSG(!attention_on_dnnl(&s) && !attention_core16(), "bf16 emulated, Dk %d: the loops (rounded floats)", s.Dk);
    if (!dn16) {
        bf16_route_set(BF16_AMX);   /* without oneDNN's bf16 matmul the AMX route's core is the loops' */
        CHECK_MSG(!attention_on_dnnl(&s) && !attention_core16(), "bf16 on the AMX route, no oneDNN bf16: the loops");
    }
    if (dn16) {
        bf16_route_set(BF16_ONEDNN);
        CHECK_MSG(attention_on_dnnl(&s) && attention_core16(), "bf16 on the oneDNN route, Dk %d: oneDNN (16-bit operands)", s.Dk);
        bf16_route_set(BF16_AMX);   /* tfm's tiles for the linear layers, the core as on the oneDNN route */
        CHECK_MSG(attention_on_dnnl(&s) && attention_core16(), "bf16 on the AMX route, Dk %d: oneDNN (16-bit operands)", s.Dk);
        bf16_route_set(BF16_ONEDNN);
        int inside = 1, active = 0;
        #pragma omp parallel num_threads(2)
        {
            #pragma omp single
            { inside = attention_on_dnnl(&s); active = omp_in_parallel(); }
        }
        if (active) CHECK_MSG(!inside, "inside a parallel region: the loops");
        else SKIP("one thread here: no active parallel region to call from");
        attention_code(ATTN_LOOPS);
        CHECK_MSG(!attention_on_dnnl(&s), "ATTN_LOOPS: the loops");
        attention_code(ATTN_DNNL);
        s.bf16 = 0;
        CHECK_MSG(attention_on_dnnl(&s), "ATTN_DNNL, fp32 Dk %d: oneDNN", s.Dk);
        attention_code(ATTN_AUTO);
    }
    bf16_route_set(saved);
}

/* ---- cross-entropy ------------------------------------------------------------ */
typedef struct { int n, V; float eps, *z, *tmp; const int *tgt; } CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    double l = 0, nl = 0;
    memcpy(c->tmp, c->z, (size_t)c->n * c->V * sizeof(float));
    cross_entropy_forward_backward(c->tmp, c->tgt, c->n, c->V, c->eps, 0.0f, &l, &nl, NULL, 0, NULL);
    return 0.7 * l;
}
static void test_cross_entropy(void) {
    int n = 4, V = 7, tgt[4] = {2, -1, 6, 0};
    CeCtx c = {n, V, 0.1f, rnd(28, 3), zeros(28), tgt};
    /* known answers in double: q_y = 1 - eps, q_j = eps / (V-1) */
    double l = 0, nl = 0, rl = 0, rn = 0;
    float logp[4];
    memcpy(c.tmp, c.z, sizeof(float) * 28);
    cross_entropy_forward_backward(c.tmp, tgt, n, V, 0.1f, 0.0f, &l, &nl, logp, 0, NULL);
    CHECK(!memcmp(c.tmp, c.z, sizeof(float) * 28));   /* grad_scale 0: logits untouched */
    for (int i = 0; i < n; i++) {
        if (tgt[i] < 0) { CHECK(logp[i] == 0.0f); continue; }
        double mx = -1e30, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, c.z[i * V + j]);
        for (int j = 0; j < V; j++) s += exp(c.z[i * V + j] - mx);
        double lse = mx + log(s);
        for (int j = 0; j < V; j++) rl -= (j == tgt[i] ? 0.9 : 0.1 / 6) * (c.z[i * V + j] - lse);
        rn -= c.z[i * V + tgt[i]] - lse;
        CHECK_NEAR(logp[i], c.z[i * V + tgt[i]] - lse, 1e-5);
    }
    CHECK_NEAR(l, rl, 1e-5);
    CHECK_NEAR(nl, rn, 1e-5);
    /* uniform logits: nll = log V per token */
    float u[14] = {0};
    int t2[2] = {1, 5};
    l = nl = 0;
    cross_entropy_forward_backward(u, t2, 2, 7, 0.0f, 0.0f, &l, &nl, NULL, 0, NULL);
    CHECK_NEAR(nl, 2 * log(7.0), 1e-6);
    CHECK_NEAR(l, 2 * log(7.0), 1e-6);
    /* gradient */
    float *g = xmalloc(28 * sizeof *g);
    memcpy(g, c.z, 28 * sizeof *g);
    l = nl = 0;
    cross_entropy_forward_backward(g, tgt, n, V, 0.1f, 0.7f, &l, &nl, NULL, 0, NULL);
    CHECK_NEAR(l, rl, 1e-5);
    for (int j = 0; j < V; j++) CHECK(g[1 * V + j] == 0.0f);   /* ignored row */
    gradcheck("cross-entropy dlogits", ce_loss, &c, c.z, g, 28, 0);
    free(c.z); free(c.tmp); free(g);
    /* bf16 (round_bf16): the same gradient rounded as it is written, and
     * with grad16 its 16 bits beside it (Gemm.a16; 0 at ignored rows); the
     * loss unchanged. Rows of 1,000: the vector loops and their tails. */
    n = 5; V = 1000;
    int t5[5] = {3, 999, -1, 0, 517};
    float *z = rnd((size_t)n * V, 4), *g0 = xmalloc((size_t)n * V * sizeof *g0), *g1 = xmalloc((size_t)n * V * sizeof *g1);
    float *g2 = xmalloc((size_t)n * V * sizeof *g2);
    uint16_t *h = xmalloc((size_t)n * V * sizeof *h);
    memset(h, 0xff, (size_t)n * V * sizeof *h);
    memcpy(g0, z, (size_t)n * V * sizeof *z); memcpy(g1, z, (size_t)n * V * sizeof *z); memcpy(g2, z, (size_t)n * V * sizeof *z);
    double l0 = 0, n0 = 0, l1 = 0, n1 = 0, l2 = 0, n2 = 0;
    cross_entropy_forward_backward(g0, t5, n, V, 0.1f, 0.3f, &l0, &n0, NULL, 0, NULL);
    cross_entropy_forward_backward(g1, t5, n, V, 0.1f, 0.3f, &l1, &n1, NULL, 1, NULL);
    cross_entropy_forward_backward(g2, t5, n, V, 0.1f, 0.3f, &l2, &n2, NULL, 1, h);
    int rounded = 1, same = 1, bits = 1;
    for (int i = 0; i < n * V; i++) {
        rounded &= float_bits(g1[i]) == float_bits(bf16_round(g0[i]));
        same &= float_bits(g2[i]) == float_bits(g1[i]);
        bits &= h[i] == bf16_from_float(g1[i]);
    }
    CHECK_MSG(rounded, "cross-entropy's bf16 gradient is not the fp32 one rounded");
    CHECK_MSG(same, "cross-entropy's bf16 gradient changed with its 16 bits written beside it");
    CHECK_MSG(bits, "cross-entropy's 16-bit gradient is not the float one's bits");
    CHECK(h[2 * V] == 0 && h[3 * V - 1] == 0 && g2[2 * V + 7] == 0.0f);   /* the ignored row */
    CHECK(l0 == l1 && l1 == l2 && n0 == n1 && n1 == n2);
    free(z); free(g0); free(g1); free(g2); free(h);
}

/* parallel.h: par_go says whether a loop goes to the team, and PAR_FOR's
 * serial branch runs every iteration once with no OpenMP region around it
 * (omp_get_level() stays the caller's: libgomp makes a team, and a futex
 * call, even for a region of one thread), its parallel one on the team. */
static void test_par_for(void) {
    enum { N = 1000 };
    int count[N], level[N];
    CHECK(par_go(PAR_MIN, PAR_MIN) == 1);        /* 2 threads (main), serial code, enough work */
    CHECK(par_go(PAR_MIN - 1, PAR_MIN) == 0);
    int inside = -1, team = 0;
    #pragma omp parallel num_threads(2)
    {
        #pragma omp single
        { inside = par_go(PAR_MIN, PAR_MIN); team = omp_get_num_threads(); }
    }
    if (team == 2) CHECK(inside == 0);           /* nested in a team: serial */
    else SKIP("no team of 2 threads here (%d)", team);
    for (int go = 0; go < 2; go++) {
        memset(count, 0, sizeof count);
        PAR_FOR(go, (int i = 0; i < N; i++), { count[i]++; level[i] = omp_get_level(); });
        int once = 1, lv = 1;
        for (int i = 0; i < N; i++) { once &= count[i] == 1; lv &= level[i] == go; }
        CHECK_MSG(once && lv, "PAR_FOR(%d): each iteration once, at level %d", go, go);
        memset(count, 0, sizeof count);
        PAR_FOR_SIMD(go, (int i = 0; i < N; i++), count[i] += 2;);
        PAR_FOR_DYNAMIC(go, (int i = 0; i < N; i++), { count[i]++; level[i] = omp_get_level(); });
        once = lv = 1;
        for (int i = 0; i < N; i++) { once &= count[i] == 3; lv &= level[i] == go; }
        CHECK_MSG(once && lv, "PAR_FOR_SIMD/DYNAMIC(%d): each iteration once, at level %d", go, go);
        /* PAR_PARTS: each part (par_t of par_nt) once, their shares covering every row once */
        int parts[8] = {0}, nts[8] = {0};
        memset(count, 0, sizeof count);
        PAR_PARTS(go, {
            int lo, hi;
            par_share(N, par_t, par_nt, &lo, &hi);
            for (int i = lo; i < hi; i++) { count[i]++; level[i] = omp_get_level(); }
            if (par_t < 8) { __atomic_fetch_add(&parts[par_t], 1, __ATOMIC_RELAXED); nts[par_t] = par_nt; }
        });
        int nt = go ? 2 : 1, ok = 1;
        for (int t = 0; t < 8; t++) ok &= parts[t] == (t < nt) && nts[t] == (t < nt ? nt : 0);
        once = lv = 1;
        for (int i = 0; i < N; i++) { once &= count[i] == 1; lv &= level[i] == go; }
        CHECK_MSG(ok && once && lv, "PAR_PARTS(%d): %d parts of %d, each row once, at level %d", go, nt, nt, go);
    }
    threads_init(1);
    CHECK(par_go(PAR_MIN * 100, PAR_MIN) == 0);   /* one thread: serial */
    threads_init(2);
}

int main(void) {
    user_arch = getenv("BLIS_ARCH_TYPE");
    threads_init(2);   /* gemm's threaded paths need 2 threads, even on 1 core */
    rng_seed(&rng, 1234);
    RUN(test_blis_kernels);
    RUN(test_linear);
    RUN(test_linear_round_out);
    RUN(test_par_for);
    RUN(test_fp32_rule);
    RUN(test_gemm_threads);
    RUN(test_gemm_many);
    RUN(test_gemm_waiting);
    RUN(test_gemm_convert);
    RUN(test_gemm_bias);
    RUN(test_layernorm);
    RUN(test_fast_expf);
    RUN(test_softmax);
    RUN(test_dropout);
    RUN(test_fused_residual_norm);
    RUN(test_embedding);
    RUN(test_attention);
    RUN(test_attention_bf16);
    RUN(test_attention_codes);
    RUN(test_attention_choice);
    RUN(test_attention_twins);
    RUN(test_cross_entropy);
    printf("worst relative gradient error seen: %.3g\n", max_rel_seen);
    return test_summary();
}
