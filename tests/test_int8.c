/* test_int8.c — int8 quantization and products (gemm_int8.c).
 *
 * The kernel's sums are integers, so it is checked *exactly*: for every
 * shape (rows, outputs and inputs around the 6 x 64 tile and the 4-byte
 * groups: odd inputs, 1 input, partial panels; row strides wider than the
 * rows) each y_ij must equal, bit for bit,
 *     ((float) s_ij * dx_i) * dw_j + b_j,   s_ij = sum_k q_ik w_jk
 * with q, w, dx, dw from int8_quantize_row applied to x's and W's rows and
 * s summed here in int64 — independently of the packing, the zero point and
 * the compensation. The scalar model runs on every CPU; the VNNI kernel where
 * the CPU has AVX512_VNNI (else a visible SKIP), and must give the same bits;
 * so must the AMX loops, run with a scalar model of the tile instructions on
 * every CPU and with the tiles where the CPU has AMX-INT8 (else a SKIP), and
 * oneDNN's matmul under tfm's epilogue where oneDNN has VNNI or AMX-INT8
 * (else a SKIP), at row counts around its buckets and blocks too.
 * dispatch.c's rule is a pure function of the features: every branch is
 * checked on any CPU.
 *
 * Quantization error, against the fp64 product of the raw operands: with
 * ex_i = dx_i / 2, ew_j = dw_j / 2 (an element's rounding error at most half
 * a step; the clamp at 127 never bites: |x| s <= 127),
 *     |y_ij - sum_k x_ik W_jk| <= ew_j sum_k |x_ik| + ex_i sum_k |W^_jk| + float roundings,
 * since x W - x^ W^ = x (W - W^) + (x - x^) W^. The float part (the scale
 * products: a few ulp of |s| dx dw, plus the step of s * (127 / amax) * ...
 * on each element, ~2^-22 relative) is allowed as 1e-5 of sum |x| |W|. The
 * measured error must also be a sizeable fraction of the bound (a bound
 * that is never approached would not test much). */
#include "test.h"

#include <omp.h>
#include <stdint.h>

#include "dispatch.h"
#include "gemm_dnnl.h"
#include "gemm_int8.h"
#include "util.h"

static Rng rng;

static float *rnd(size_t n, float scale) {
    float *x = xmalloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * rng_uniform(&rng) - 1.0f) * scale;
    return x;
}

/* ---- quantization: known answers ------------------------------------------ */
static void test_quantize_row(void) {
    int8_t q[8];
    /* amax 127: scale 1, so q = round(x), ties to even */
    float x[8] = {127.0f, 62.5f, 63.5f, 0.5f, 1.5f, -2.5f, -126.4f, 0.0f};
    int8_t want[8] = {127, 62, 64, 0, 2, -2, -126, 0};
    float d = int8_quantize_row(q, x, 8);
    CHECK(d == 1.0f);
    CHECK(!memcmp(q, want, 8));
    /* amax 1: the step is 1/127; -1 gives -127 (symmetric: -128 is never used) */
    float y[4] = {1.0f, -1.0f, 0.5f, -0.25f};
    d = int8_quantize_row(q, y, 4);
    CHECK(d == 1.0f / 127.0f);
    CHECK(q[0] == 127 && q[1] == -127 && q[2] == 64 && q[3] == -32);   /* 63.5 -> 64, -31.75 -> -32 */
    /* a row of zeros: step 0, all 0 (no division by zero) */
    float z[3] = {0.0f, -0.0f, 0.0f};
    d = int8_quantize_row(q, z, 3);
    CHECK(d == 0.0f && q[0] == 0 && q[1] == 0 && q[2] == 0);
    /* random rows: every element within half a step (+ float rounding) */
    double worst = 0;
    for (int t = 0; t < 200; t++) {
        int n = 1 + t % 97;
        float *r = rnd((size_t)n, powf(2.0f, (float)(t % 20 - 10)));
        int8_t *qq = xmalloc((size_t)n);
        float dd = int8_quantize_row(qq, r, n);
        for (int k = 0; k < n; k++) worst = fmax(worst, fabs((double)qq[k] * dd - r[k]) / dd);
        free(r); free(qq);
    }
    CHECK_MSG(worst <= 0.5 + 1e-5 && worst > 0.45, "worst error %.6f steps, expected in (0.45, 0.5]", worst);
}

/* ---- the product, exactly ------------------------------------------------------ */
/* Reference y [n, out] (stride ldy) from x [n, in] (stride ldx), W [out, in]. */
static void reference(float *y, int ldy, const float *x, int ldx, int n, const float *w, int out, int in,
                      const float *b) {
    int8_t *qx = xmalloc((size_t)n * in), *qw = xmalloc((size_t)out * in);
    float *dx = xmalloc((size_t)n * sizeof(float)), *dw = xmalloc((size_t)out * sizeof(float));
    for (int i = 0; i < n; i++) dx[i] = int8_quantize_row(qx + (size_t)i * in, x + (size_t)i * ldx, in);
    for (int j = 0; j < out; j++) dw[j] = int8_quantize_row(qw + (size_t)j * in, w + (size_t)j * in, in);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < out; j++) {
            int64_t s = 0;
            for (int k = 0; k < in; k++) s += (int64_t)qx[(size_t)i * in + k] * qw[(size_t)j * in + k];
            float v = (float)s;
            v = v * dx[i];
            v = v * dw[j];
            if (b) v = v + b[j];
            y[(size_t)i * ldy + j] = v;
        }
    free(qx); free(qw); free(dx); free(dw);
}

/* Run `kern` on one shape; 1 if it matched the reference bit for bit and
 * wrote nothing outside y's rows. */
static int check_shape(Int8Kernel kern, int n, int out, int in, int pad, int bias) {
    int ldx = in + pad, ldy = out + pad;
    float *x = rnd((size_t)n * ldx, 3.0f), *w = rnd((size_t)out * in, 0.2f), *b = bias ? rnd((size_t)out, 1.0f) : NULL;
    float *want = xmalloc((size_t)n * ldy * sizeof(float)), *got = xmalloc((size_t)n * ldy * sizeof(float));
    for (size_t i = 0; i < (size_t)n * ldy; i++) want[i] = got[i] = -777.0f;   /* the gaps must stay */
    reference(want, ldy, x, ldx, n, w, out, in, b);
    Int8Matrix q;
    Int8Scratch s = {0};
    int ok = int8_quantize_weights(&q, w, out, in, in) == 0;
    if (ok) int8_linear(kern, got, ldy, x, ldx, n, &q, b, &s);
    ok = ok && !memcmp(want, got, (size_t)n * ldy * sizeof(float));
    int8_matrix_free(&q);
    int8_scratch_free(&s);
    free(x); free(w); free(b); free(want); free(got);
    return ok;
}

static void check_all_shapes(Int8Kernel kern, const char *name) {
    int ns[] = {1, 2, 5, 6, 7, 12, 13, 40};
    int outs[] = {1, 15, 16, 63, 64, 65, 130};
    int ins[] = {1, 2, 3, 4, 5, 7, 8, 63, 64, 257};
    int bad = 0, total = 0;
    for (int a = 0; a < 8; a++)
        for (int c = 0; c < 7; c++)
            for (int e = 0; e < 10; e++) {
                int pad = (a + c + e) % 3 == 0 ? 0 : 5, bias = (a + e) % 2;
                total++;
                if (!check_shape(kern, ns[a], outs[c], ins[e], pad, bias)) {
                    if (bad++ < 5) fprintf(stderr, "%s: n %d out %d in %d pad %d bias %d differs\n", name, ns[a], outs[c], ins[e], pad, bias);
                }
            }
    CHECK_MSG(bad == 0, "%s: %d of %d shapes differ from exact integer arithmetic", name, bad, total);
}

static void test_model_exact(void) { check_all_shapes(INT8_MODEL, "model"); }

static void test_vnni_exact(void) {
    if (!int8_vnni()) { SKIP("no AVX512_VNNI on this CPU: the VNNI kernel is not run (the model is)"); return; }
    check_all_shapes(INT8_VNNI, "vnni");
}

/* The AMX loops (32 x 32 blocks of 2 x 2 tiles, 64-input steps, rows padded
 * to 32) with the scalar model of the tile instructions: on every CPU. */
static void test_amx_model_exact(void) { check_all_shapes(INT8_AMX_MODEL, "amx-model"); }

/* oneDNN: the shapes above, and row counts around its buckets (8, 64) and
 * row blocks (512), on 1 and 2 threads (a product that large shares them:
 * pieces run on each thread). */
static void test_onednn_exact(void) {
    if (!int8_onednn()) { SKIP("no VNNI or AMX-INT8 for oneDNN here (as tfm sees the CPU, masks included), or no oneDNN in this build: its route is not run"); return; }
    check_all_shapes(INT8_ONEDNN, "onednn");
    int ns[] = {8, 9, 63, 64, 65, 97, 511, 512, 513, 1100};
    int bad = 0;
    for (int t = 1; t <= 2; t++) {
        threads_init(t);
        for (int a = 0; a < 10; a++)
            if (!check_shape(INT8_ONEDNN, ns[a], a % 2 ? 300 : 130, a % 3 ? 100 : 257, a % 2 ? 3 : 0, a % 2)) {
                fprintf(stderr, "onednn: n %d differs (%d threads)\n", ns[a], t);
                bad++;
            }
    }
    threads_init(1);
    CHECK_MSG(bad == 0, "onednn: %d row counts differ from exact integer arithmetic", bad);
}

/* oneDNN's primitive table (gemm_dnnl.c) is bounded: more shapes than it
 * keeps (one per output count), each exact, the table full and no larger;
 * a primitive in use survives the others' eviction; gemm_dnnl_release lets
 * go of every idle one, and products run on after it. */
static void test_onednn_bounded(void) {
    if (!int8_onednn()) { SKIP("no VNNI or AMX-INT8 for oneDNN here (as tfm sees the CPU, masks included), or no oneDNN in this build: its table is not run"); return; }
    threads_init(1);
    size_t sb;
    const void *held = gemm_dnnl_u8s8_get(8, 64, 4096, &sb);   /* a shape no product below has */
    CHECK(held != NULL);
    int bad = 0, shapes = GEMM_DNNL_I8_KEEP + 40;
    for (int out = 1; out <= shapes; out++)   /* n = 3 rows, 64 inputs: out is the only new dimension */
        if (!check_shape(INT8_ONEDNN, 3, out, 64, out % 3, out % 2)) {
            if (bad++ < 5) fprintf(stderr, "onednn: out %d differs after the table filled\n", out);
        }
    CHECK_MSG(bad == 0, "onednn: %d of %d shapes differ from exact integer arithmetic", bad, shapes);
    CHECK_MSG(gemm_dnnl_u8s8_kept() == GEMM_DNNL_I8_KEEP, "the int8 table holds %d shapes after %d, expected its bound %d",
              gemm_dnnl_u8s8_kept(), shapes + 1, GEMM_DNNL_I8_KEEP);
    const void *again = gemm_dnnl_u8s8_get(8, 64, 4096, &sb);
    CHECK_MSG(again == held, "a primitive in use was evicted");
    gemm_dnnl_u8s8_put(again);
    gemm_dnnl_u8s8_put(held);
    gemm_dnnl_release();
    CHECK_MSG(gemm_dnnl_u8s8_kept() == 0, "gemm_dnnl_release left %d idle int8 primitives", gemm_dnnl_u8s8_kept());
    CHECK(check_shape(INT8_ONEDNN, 13, 130, 257, 5, 1));
}

static void test_amx_exact(void) {
    if (!int8_amx()) { SKIP("no AMX-INT8 here (or Linux refused the tiles): the AMX kernel is not run (its model is)"); return; }
    check_all_shapes(INT8_AMX, "amx");
}

/* By rows (the default with AMX and oneDNN's AMX path): every shape, and
 * row counts on each side of the two switches (15/16, 64/65), exact. */
static void test_by_rows_exact(void) {
    if (!int8_runs(INT8_BY_ROWS)) { SKIP("no AMX-INT8 with oneDNN's AMX path here: the by-rows choice is not run"); return; }
    check_all_shapes(INT8_BY_ROWS, "by-rows");
    int ns[] = {INT8_VNNI_BELOW - 1, INT8_VNNI_BELOW, INT8_VNNI_BELOW + 1, INT8_AMX_UPTO - 1, INT8_AMX_UPTO,
                INT8_AMX_UPTO + 1, 130}, bad = 0;
    for (int a = 0; a < 7; a++)
        if (!check_shape(INT8_BY_ROWS, ns[a], a % 2 ? 300 : 130, a % 3 ? 100 : 257, a % 2 ? 3 : 0, a % 2)) {
            fprintf(stderr, "by-rows: n %d differs\n", ns[a]);
            bad++;
        }
    CHECK_MSG(bad == 0, "by-rows: %d row counts differ from exact integer arithmetic", bad);
}

/* The largest sums: every weight and input at the extreme (|q| = 127, the
 * zero-pointed u = 255 or 1), an odd number of inputs, so that s = ±127^2 in
 * = ±64.5M, beyond float's exact integers: the kernels must still agree with
 * the int64 reference (the conversion rounds once, the same way). */
static void test_extremes(void) {
    enum { IN = 4001 };
    for (int sign = -1; sign <= 1; sign += 2) {
        float *x = xmalloc(2 * IN * sizeof(float)), *w = xmalloc(3 * IN * sizeof(float));
        for (int k = 0; k < IN; k++) {
            x[k] = 1.0f; x[IN + k] = (float)sign;
            w[k] = 1.0f; w[IN + k] = -1.0f; w[2 * IN + k] = k % 2 ? 1.0f : -1.0f;
        }
        float want[6], got[6];
        reference(want, 3, x, IN, 2, w, 3, IN, NULL);
        CHECK_NEAR(want[0], IN, 1e-5 * IN);   /* s = 127^2 * IN, scaled back by 1/127 twice */
        CHECK_NEAR(want[3], sign * IN, 1e-5 * IN);
        Int8Matrix q;
        Int8Scratch s = {0};
        CHECK(int8_quantize_weights(&q, w, 3, IN, IN) == 0);
        for (int kern = 0; kern <= INT8_ONEDNN; kern++) {
            if (!int8_runs((Int8Kernel)kern)) continue;
            int8_linear((Int8Kernel)kern, got, 3, x, IN, 2, &q, NULL, &s);
            CHECK_MSG(!memcmp(want, got, sizeof want), "kernel %d, sign %d: %g %g %g / %g %g %g", kern, sign,
                      got[0], got[1], got[2], got[3], got[4], got[5]);
        }
        int8_matrix_free(&q);
        int8_scratch_free(&s);
        free(x); free(w);
    }
    /* the raw sums of u (zero point 128) pass 2^31 before c_j brings them
     * back: q = 127 (u = 255) against w = 127 over 70,000 inputs is
     * 255 * 127 * 70000 = 2.27e9 raw, s = 127^2 * 70000 = 1.13e9 < 2^31.
     * Kernels that start at 0 and add c_j last (AMX, oneDNN) must wrap as
     * VPDPBUSD does, not saturate or round through float. */
    {
        enum { BIG = 70000 };
        float *x = xmalloc(BIG * sizeof(float)), *w = xmalloc(2 * BIG * sizeof(float)), want[2], got[2];
        for (int k = 0; k < BIG; k++) { x[k] = 1.0f; w[k] = 1.0f; w[BIG + k] = k % 3 ? 1.0f : -1.0f; }
        reference(want, 2, x, BIG, 1, w, 2, BIG, NULL);
        Int8Matrix q;
        Int8Scratch s = {0};
        CHECK(int8_quantize_weights(&q, w, 2, BIG, BIG) == 0);
        for (int kern = 0; kern <= INT8_ONEDNN; kern++) {
            if (!int8_runs((Int8Kernel)kern)) continue;
            int8_linear((Int8Kernel)kern, got, 2, x, BIG, 1, &q, NULL, &s);
            CHECK_MSG(!memcmp(want, got, sizeof want), "kernel %d, raw sums past 2^31: %.9g %.9g, want %.9g %.9g", kern,
                      got[0], got[1], want[0], want[1]);
        }
        int8_matrix_free(&q);
        int8_scratch_free(&s);
        free(x); free(w);
    }
    /* too many inputs for exact int32 sums: an error, not a wrong answer */
    Int8Matrix q;
    float *w = xcalloc(131073, sizeof(float));
    CHECK(int8_quantize_weights(&q, w, 1, 131073, 131073) == -1);
    CHECK(strstr(error_message(), "131073") != NULL);
    free(w);
}

/* ---- quantization error against its bound ----------------------------------- */
static void test_error_bound(void) {
    double worst = 0;   /* largest error / bound seen */
    for (int t = 0; t < 12; t++) {
        int n = 3 + t, out = 20 + 7 * t, in = 16 + 45 * t;
        float *x = rnd((size_t)n * in, 2.0f), *w = rnd((size_t)out * in, 0.1f);
        if (t % 3 == 1) for (int k = 0; k < in; k += 7) x[k] *= 40.0f;   /* outliers: coarse steps */
        float *y = xmalloc((size_t)n * out * sizeof(float));
        Int8Matrix q;
        Int8Scratch s = {0};
        CHECK(int8_quantize_weights(&q, w, out, in, in) == 0);
        int8_linear(int8_kernel(), y, out, x, in, n, &q, NULL, &s);
        int8_t *qx = xmalloc((size_t)in);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            float dx = int8_quantize_row(qx, x + (size_t)i * in, in);
            for (int j = 0; j < out; j++) {
                double exact = 0, sx = 0, sw = 0, sxw = 0;
                for (int k = 0; k < in; k++) {
                    double xv = x[(size_t)i * in + k], wv = w[(size_t)j * in + k];
                    exact += xv * wv;
                    sx += fabs(xv);
                    sw += fabs((double)int8_weight(&q, j, k));
                    sxw += fabs(xv * wv);
                }
                double bound = 0.5 * q.scale[j] * sx + 0.5 * dx * sw + 1e-5 * sxw;
                double err = fabs((double)y[(size_t)i * out + j] - exact);
                ok &= err <= bound;
                worst = fmax(worst, err / bound);
            }
        }
        CHECK_MSG(ok, "t %d: an error beyond the bound (worst ratio %.3f)", t, worst);
        free(qx); free(x); free(w); free(y);
        int8_matrix_free(&q);
        int8_scratch_free(&s);
    }
    printf("int8 product error: at most %.3f of the bound\n", worst);
    CHECK_MSG(worst > 0.05, "the bound is never approached (%.4f): is it the right one?", worst);
}

/* ---- threads and batches ------------------------------------------------------ */
/* A product big enough to share the threads gives the bits of the same rows
 * computed one at a time on one thread (inside a parallel region). */
static void test_thread_and_row_invariance(void) {
    enum { N = 70, OUT = 300, IN = 256 };
    float *x = rnd((size_t)N * IN, 1.0f), *w = rnd((size_t)OUT * IN, 0.1f), *b = rnd(OUT, 0.5f);
    float *all = xmalloc((size_t)N * OUT * sizeof(float)), *one = xmalloc((size_t)N * OUT * sizeof(float));
    Int8Matrix q;
    CHECK(int8_quantize_weights(&q, w, OUT, IN, IN) == 0);
    threads_init(2);
    Int8Scratch s = {0};
    for (int kern = 0; kern <= INT8_BY_ROWS; kern++) {   /* every kernel this CPU runs (the chosen one among them) */
        Int8Kernel k = (Int8Kernel)kern;
        if (!int8_runs(k)) continue;
        memset(one, 0, (size_t)N * OUT * sizeof(float));
        int8_linear(k, all, OUT, x, IN, N, &q, b, &s);
        #pragma omp parallel num_threads(2)
        {
            Int8Scratch t = {0};
            #pragma omp for schedule(dynamic, 1)
            for (int i = 0; i < N; i++) int8_linear(k, one + (size_t)i * OUT, OUT, x + (size_t)i * IN, IN, 1, &q, b, &t);
            int8_scratch_free(&t);
        }
        CHECK_MSG(!memcmp(all, one, (size_t)N * OUT * sizeof(float)), "kernel %d: a batch of %d rows on 2 threads "
                  "differs from its rows one at a time", kern, N);
    }
    threads_init(1);
    int8_matrix_free(&q);
    int8_scratch_free(&s);
    free(x); free(w); free(b); free(all); free(one);
}

/* ---- the choice (dispatch.c's int8_rule), every branch on any CPU ----------- */
static void test_rule(void) {
    const char *why;
    /* defaults: AMX through oneDNN when oneDNN has it; else the VNNI kernel
     * (measured faster than oneDNN's VNNI path on Zen 4: doc/precision.md);
     * oneDNN for AVX_VNNI without AVX-512; the scalar model without either */
    CHECK(int8_rule(NULL, 1, 1, 2, &why) == INT8_BY_ROWS);   /* AMX with oneDNN's AMX path: by rows */
    CHECK(int8_rule("", 1, 1, 2, &why) == INT8_BY_ROWS);
    CHECK(int8_rule(NULL, 1, 1, 1, &why) == INT8_VNNI);     /* oneDNN without its AMX path (DNNL_MAX_CPU_ISA) */
    CHECK(int8_rule(NULL, 1, 1, 0, &why) == INT8_VNNI);     /* AMX, no oneDNN (make DNNL=0): the VNNI kernel */
    CHECK(int8_rule(NULL, 1, 0, 1, &why) == INT8_VNNI);
    CHECK(int8_rule(NULL, 1, 0, 0, &why) == INT8_VNNI);
    CHECK(int8_rule(NULL, 0, 0, 1, &why) == INT8_ONEDNN);
    CHECK(int8_rule(NULL, 0, 0, 0, &why) == INT8_MODEL);
    /* forced: each where it can run, an error with the reason where not */
    CHECK(int8_rule("model", 1, 1, 2, &why) == INT8_MODEL && int8_rule("model", 0, 0, 0, &why) == INT8_MODEL);
    CHECK(int8_rule("amx-model", 0, 0, 0, &why) == INT8_AMX_MODEL);
    CHECK(int8_rule("vnni", 1, 0, 0, &why) == INT8_VNNI);
    CHECK(int8_rule("vnni", 0, 0, 1, &why) == -1 && strstr(why, "AVX512_VNNI"));
    CHECK(int8_rule("amx", 1, 1, 2, &why) == INT8_AMX);
    CHECK(int8_rule("amx", 1, 0, 1, &why) == -1 && strstr(why, "AMX-INT8"));
    CHECK(int8_rule("onednn", 1, 0, 1, &why) == INT8_ONEDNN);
    CHECK(int8_rule("onednn", 1, 0, 0, &why) == -1 && *why);
    CHECK(int8_rule("bogus", 1, 1, 2, &why) == -1 && strstr(why, "onednn"));
    /* by rows: VNNI under 16, tfm's AMX kernel to 64, oneDNN above; each only where there */
    CHECK(int8_by_rows(1, 1, 1, 2) == INT8_VNNI && int8_by_rows(15, 1, 1, 2) == INT8_VNNI);
    CHECK(int8_by_rows(16, 1, 1, 2) == INT8_AMX && int8_by_rows(64, 1, 1, 2) == INT8_AMX);
    CHECK(int8_by_rows(65, 1, 1, 2) == INT8_ONEDNN && int8_by_rows(5000, 1, 1, 2) == INT8_ONEDNN);
    CHECK(int8_by_rows(4, 0, 1, 2) == INT8_AMX);      /* no VNNI: the tiles take the small ones too */
    CHECK(int8_by_rows(32, 1, 0, 1) == INT8_ONEDNN);  /* no AMX */
    CHECK(int8_by_rows(100, 1, 1, 0) == INT8_AMX && int8_by_rows(100, 1, 0, 0) == INT8_VNNI);
    CHECK(int8_by_rows(100, 0, 0, 0) == INT8_MODEL);
    /* and this CPU's choice is the rule's */
    const char *e = getenv("TFM_INT8_KERNEL");
    CHECK(int8_kernel() == (Int8Kernel)int8_rule(e, int8_vnni(), int8_amx(), int8_onednn(), &why));
}

/* The dequantized weights: int8_row and int8_weight agree, within half a step of W. */
static void test_dequantize(void) {
    enum { OUT = 70, IN = 13 };
    float *w = rnd(OUT * IN, 1.0f), row[IN];
    Int8Matrix q;
    CHECK(int8_quantize_weights(&q, w, OUT, IN, IN) == 0);
    int ok = 1;
    for (int j = 0; j < OUT; j++) {
        int8_row(row, &q, j);
        for (int k = 0; k < IN; k++) {
            ok &= row[k] == int8_weight(&q, j, k);
            ok &= fabsf(row[k] - w[j * IN + k]) <= 0.5f * q.scale[j] * (1 + 1e-5f);
        }
    }
    CHECK(ok);
    CHECK(int8_matrix_bytes(&q) == (size_t)2 * 64 * 64 + (size_t)2 * 64 * 8);   /* 2 panels: kp 64 bytes + scale + c */
    int8_matrix_free(&q);
    free(w);
}

int main(void) {
    rng_seed(&rng, 26);
    threads_init(1);
    printf("int8 products here: %s\n", int8_mode());
    RUN(test_quantize_row);
    RUN(test_model_exact);
    RUN(test_vnni_exact);
    RUN(test_amx_model_exact);
    RUN(test_amx_exact);
    RUN(test_by_rows_exact);
    RUN(test_onednn_exact);
    RUN(test_onednn_bounded);
    RUN(test_extremes);
    RUN(test_error_bound);
    RUN(test_thread_and_row_invariance);
    RUN(test_dequantize);
    RUN(test_rule);
    return test_summary();
}
