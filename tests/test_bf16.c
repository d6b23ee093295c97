/* test_bf16.c — bf16 products (gemm_bf16.c and gemm_many's bf16 path).
 *
 * Bounds. With u = 2^-8 (bf16's unit roundoff: 8 significant bits, round to
 * nearest) a rounded operand is a (1 + d), |d| <= u, so a product term is
 * a b (1 + d1)(1 + d2) and
 *     |C_bf16 - C_exact| <= |alpha| (2u + u^2) sum_p |a_ip| |b_pj| + fp32 sums,
 * the fp32 sums adding at most k 2^-24 (1 + 2u)^2 sum_p |a_ip b_pj| more
 * (Higham's bound for recursive summation). That is the tolerance against
 * the fp64 product of the unrounded operands. Against the fp64 product of
 * the *rounded* operands only the fp32 sums remain (the products are exact),
 * so the kernel's loops (packing, edges, k blocks, odd k) are checked at
 * 2^-24 k relative: a wrong index is off by O(1), a lost k block by O(1/4).
 *
 * The AVX512_BF16 kernel only runs on a CPU that has it; elsewhere its tests
 * SKIP, and the same loops are checked here with BF16_MODEL (the scalar
 * model of the instruction in place of the AVX-512 micro-kernel). Where it
 * runs, it must agree with the model and with the emulated path (fp32 BLIS
 * on rounded copies) within fp32 summation tolerance. */
#include <omp.h>

#include "cpu.h"
#include "dispatch.h"
#include "test.h"

#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "gemm_dnnl.h"
#include "ops.h"
#include "util.h"
#include "vec16.h"

static Rng rng;

static float *rnd_from(Rng *r, size_t n, float scale) {
    float *x = xmalloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (2.0f * rng_uniform(r) - 1.0f) * scale;
    return x;
}
static float *rnd(size_t n, float scale) { return rnd_from(&rng, n, scale); }

static float bits_float(uint32_t u) { union { uint32_t u; float f; } v = {u}; return v.f; }

/* ---- rounding: known answers ------------------------------------------- */
static void test_round(void) {
    float one = 1.0f, ulp = 1.0f / 128;   /* bf16 spacing in [1, 2) */
    CHECK(bf16_round(one) == one);
    CHECK(bf16_round(one + ulp) == one + ulp);                   /* representable */
    CHECK(bf16_round(one + ulp / 2) == one);                     /* tie: to even (1.0) */
    CHECK(bf16_round(one + 3 * ulp / 2) == one + 2 * ulp);       /* tie: to even (1 + 2 ulp) */
    CHECK(bf16_round(one + ulp / 2 + ulp / 1024) == one + ulp);  /* just above the tie: up */
    CHECK(bf16_round(one + ulp / 2 - ulp / 1024) == one);        /* just below: down */
    CHECK(bf16_round(-3.0f) == -3.0f);
    CHECK(bf16_round(-(one + 3 * ulp / 2)) == -(one + 2 * ulp)); /* symmetric */
    CHECK(bf16_from_float(1.0f) == 0x3f80);
    CHECK(bf16_from_float(-2.0f) == 0xc000);
    CHECK(isinf(bf16_round(INFINITY)) && bf16_round(INFINITY) > 0);
    CHECK(isinf(bf16_round(-INFINITY)) && bf16_round(-INFINITY) < 0);
    CHECK(isnan(bf16_round(NAN)));
    CHECK(isnan(bf16_round(bits_float(0x7f800001u))));            /* a NaN whose top 16 bits are inf's */
    CHECK(isinf(bf16_round(3.4e38f)));                            /* rounds past the largest bf16 */
    CHECK(bf16_round(bits_float(0x00000001u)) == 0.0f);           /* subnormal: 0 */
    CHECK(bf16_from_float(-bits_float(0x00400000u)) == 0x8000);   /* -subnormal: -0 */
    CHECK(bf16_round(1.1754944e-38f) == 1.1754944e-38f);          /* smallest normal stays */
    /* random values: relative error at most 2^-8, and the result is a bf16 */
    double worst = 0;
    int exact = 1;
    for (int i = 0; i < 100000; i++) {
        float x = (2.0f * rng_uniform(&rng) - 1.0f) * powf(2.0f, (float)(i % 60 - 30));
        float r = bf16_round(x);
        union { float f; uint32_t u; } v = {r};
        exact &= (v.u & 0xffffu) == 0;
        if (x != 0) worst = fmax(worst, fabs((double)r - x) / fabs((double)x));
    }
    CHECK(exact);
    CHECK_MSG(worst <= 1.0 / 256 && worst > 1.0 / 512, "relative rounding error %.3g, expected in (2^-9, 2^-8]", worst);
    /* bf16_round_matrix: strides, and in place */
    float src[3 * 5], dst[3 * 7];
    for (int i = 0; i < 15; i++) src[i] = 1.0f + (float)i / 1000.0f;
    for (int i = 0; i < 21; i++) dst[i] = -1.0f;
    bf16_round_matrix(dst, 7, src, 5, 3, 4);
    int ok = 1;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 7; c++) ok &= dst[r * 7 + c] == (c < 4 ? bf16_round(src[r * 5 + c]) : -1.0f);
    CHECK(ok);
    bf16_round_matrix(src, 5, src, 5, 3, 5);
    CHECK(src[7] == bf16_round(1.007f));
    /* bf16_round_twin: the rounded floats and their 16 bits (threaded at this size; with NaN, inf, subnormals) */
    size_t n = (size_t)1 << 19;
    float *x = rnd(n, 100), *y = xmalloc(n * sizeof *y);
    uint16_t *h = xmalloc(n * sizeof *h);
    x[3] = NAN; x[4] = -INFINITY; x[5] = bits_float(0x00000123u); x[6] = 3.4e38f;
    bf16_round_twin(y, h, x, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        union { float f; uint32_t u; } a = {y[i]}, b = {bf16_round(x[i])};
        bad += a.u != b.u || h[i] != bf16_from_float(x[i]);
    }
    CHECK_MSG(!bad, "bf16_round_twin: %zu of %zu entries differ from bf16_round / bf16_from_float", bad, n);
    free(x); free(y); free(h);
    /* vec16.h's bf16_round16 (the attention loops' stores): bit for bit bf16_round on every sign, exponent
     * and upper mantissa (all 2^16 upper halves: NaN, inf, 0 and subnormals among them) with the lower
     * halves where rounding turns (ties, just below and above them) and some others */
    const uint32_t lows[8] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc3a5};
    bad = 0;
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (int l = 0; l < 8; l += 4) {
            vf16 v;
            for (int j = 0; j < 16; j++) v[j] = bits_float(hi << 16 | lows[(l + j) % 8]);
            vf16 r = bf16_round16(v);
            for (int j = 0; j < 16; j++) {
                union { float f; uint32_t u; } a = {r[j]}, b = {bf16_round(v[j])};
                bad += a.u != b.u;
            }
        }
    CHECK_MSG(!bad, "bf16_round16: %zu lanes differ from bf16_round", bad);
}

/* ---- rounding runs: VCVTNEPS2BF16 and the integer code ----------------- */
/* bf16_round_run and bf16_round16 under the code bf16_round_cvt picks,
 * bit for bit against bf16_from_float on every upper half (all signs,
 * exponents and upper mantissas: NaN, inf, 0 and subnormals among them) with
 * the lower halves where rounding turns; every combination of outputs, in
 * place, and lengths 1..40 (the tails). Returns the entries that differ. */
static size_t round_paths_differ(void) {
    const uint32_t lows[8] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc3a5};
    size_t n = (size_t)0x10000 * 8, bad = 0;
    float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
    uint16_t *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) x[i] = bits_float((uint32_t)(i >> 3) << 16 | lows[i & 7]);
    for (int outs = 1; outs <= 3; outs++) {   /* 1: floats, 2: 16 bits, 3: both */
        memset(y, 0x55, n * sizeof *y);
        memset(h, 0x55, n * sizeof *h);
        bf16_round_run(outs & 1 ? y : NULL, outs & 2 ? h : NULL, x, n - 5);   /* a tail of 11 */
        for (size_t i = 0; i < n; i++) {
            union { float f; uint32_t u; } a = {y[i]}, b = {bf16_round(x[i])};
            int in = i < n - 5;
            bad += outs & 1 ? (in ? a.u != b.u : a.u != 0x55555555u) : a.u != 0x55555555u;
            bad += outs & 2 ? (in ? h[i] != bf16_from_float(x[i]) : h[i] != 0x5555) : h[i] != 0x5555;
        }
    }
    for (size_t len = 1; len <= 40; len++) {   /* in place, from an odd offset */
        memcpy(y, x + 0x3f80 * 8 + 3, 48 * sizeof *y);
        bf16_round_run(y + 1, h, y + 1, len);
        for (size_t i = 0; i < 48; i++) {
            float want = i >= 1 && i <= len ? bf16_round(x[0x3f80 * 8 + 3 + i]) : x[0x3f80 * 8 + 3 + i];
            union { float f; uint32_t u; } a = {y[i]}, b = {want};
            bad += a.u != b.u || (i >= 1 && i <= len && h[i - 1] != bf16_from_float(x[0x3f80 * 8 + 3 + i]));
        }
    }
    for (size_t i = 0; i + 16 <= n; i += 16) {
        vf16 v = load16(x + i), r = bf16_round16(v);
        for (int j = 0; j < 16; j++) {
            union { float f; uint32_t u; } a = {r[j]}, b = {bf16_round(v[j])};
            bad += a.u != b.u;
        }
    }
    free(x); free(y); free(h);
    return bad;
}

static void test_round_cvt(void) {
    CHECK_MSG(bf16_round_cvt == bf16_native(), "bf16_round_cvt %d after threads_init, bf16_native() %d", bf16_round_cvt,
              bf16_native());
    int was = bf16_round_cvt;
    bf16_round_cvt = 0;
    size_t bad = round_paths_differ();
    CHECK_MSG(!bad, "the integer rounding code: %zu entries differ from bf16_from_float", bad);
    if (!bf16_native()) {
        SKIP("this CPU has no AVX512_BF16 (or TFM_CPU_FEATURES masks it): VCVTNEPS2BF16's rounding cannot run here");
    } else {
        bf16_round_cvt = 1;
        bad = round_paths_differ();
        CHECK_MSG(!bad, "VCVTNEPS2BF16 rounding: %zu entries differ from bf16_from_float", bad);
#if !(defined(__AVX512BF16__) && defined(__AVX512F__))
        SKIP("this build does not target AVX512_BF16 (ARCH): vec16.h's bf16_round16 ran the integer code both times");
#endif
    }
    bf16_round_cvt = was;
}

/* ---- products ---------------------------------------------------------- */
/* The ways a bf16 product is run: the kernel (model or native) packing B
 * itself, the kernel with B packed once (bf16_pack), and gemm_many with the
 * bf16 flag (threads shared; native or emulated as the CPU allows). */
typedef enum { KERNEL, PACKED, GEMM_MANY, ONEDNN, AMX } Way;
static AmxKernel g_amx = AMX_MODEL;   /* what the AMX way runs: tfm's tile kernel, or its model */

static void product(Way way, Bf16Kernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                    int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    if (way == KERNEL) {
        bf16_gemm(kern, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else if (way == AMX) {
        amx_bf16_gemm(g_amx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else if (way == PACKED) {
        Bf16Packed p;
        bf16_pack(&p, tb, k, n, b, ldb);
        bf16_gemm_packed(kern, ta, m, alpha, a, lda, &p, beta, c, ldc);
        bf16_packed_free(&p);
    } else if (way == ONEDNN) {   /* oneDNN directly (gemm_dnnl.h); k = 0 is declined */
        Gemm g = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
        int rc = gemm_dnnl_many(&g, 1);
        CHECK_MSG(rc == 0 || k == 0, "oneDNN declined a %d x %d x %d product", m, n, k);
        if (rc) gemm_many(&g, 1);
    } else {
        Gemm g = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
        gemm_many(&g, 1);
    }
}

/* One product against fp64 references: of the rounded operands (only
 * fp32 summation error allowed) and of the raw ones (the bf16 bound).
 * Leading dimensions wider than the matrices (unless g_plain); the gaps
 * must stay untouched. Returns C (malloc'd). */
static int g_plain;
static float *product_case(const char *name, Way way, Bf16Kernel kern, int ta, int tb, int m, int n, int k,
                           float alpha, float beta) {
    int pad = !g_plain, lda = (ta ? m : k) + 3 * pad, ldb = (tb ? k : n) + pad, ldc = n + 2 * pad;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    Rng r;   /* operands from the shape: every implementation gets the same */
    rng_seed(&r, (uint64_t)m * 1000003 + (uint64_t)n * 1009 + (uint64_t)k * 7 + (uint64_t)(ta * 2 + tb));
    float *a = rnd_from(&r, na, 1), *b = rnd_from(&r, nb, 2), *c = rnd_from(&r, nc, 1);
    float *c0 = xmalloc((nc ? nc : 1) * sizeof *c0);
    memcpy(c0, c, nc * sizeof *c);
    product(way, kern, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    double worst_r = 0, worst_x = 0;
    int gaps = 1, finite = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double sr = 0, sx = 0, sabs = 0;
            for (int p = 0; p < k; p++) {
                float x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                float y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                sr += (double)bf16_round(x) * bf16_round(y);
                sx += (double)x * y;
                sabs += fabs((double)x * y);
            }
            double got = c[(size_t)i * ldc + j], old = beta == 0.0f ? 0.0 : beta * (double)c0[(size_t)i * ldc + j];
            double fp32 = (k + 2) * ldexp(1.0, -24) * (fabs(alpha) * sabs * 1.02 + fabs(old)) + 1e-30;
            double bound = fabs(alpha) * (2.0 / 256 + 1.0 / 65536) * sabs + fp32;
            worst_r = fmax(worst_r, fabs(got - (alpha * sr + old)) / fp32);
            worst_x = fmax(worst_x, fabs(got - (alpha * sx + old)) / bound);
            finite &= isfinite(got);
        }
        for (int j = n; j < ldc; j++) gaps &= c[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j];
    }
    CHECK_MSG(finite && worst_r <= 1.0 && worst_x <= 1.0 && gaps,
              "%s ta %d tb %d m %d n %d k %d alpha %g beta %g: error %.3g of the fp32-sum bound (rounded operands), "
              "%.3g of the bf16 bound (raw), gaps %s", name, ta, tb, m, n, k, alpha, beta, worst_r, worst_x,
              gaps ? "untouched" : "WRITTEN");
    free(a); free(b); free(c0);
    return c;
}

/* Shapes at every edge of the kernel's blocking: MR = 6 rows, NR = 64
 * columns, KC = 512 (256 pairs), MC = 120 rows, NC = 1024 columns; odd k. */
static const int SHAPES[][3] = {
    {1, 1, 1}, {1, 1, 2}, {6, 64, 3}, {7, 65, 5}, {5, 63, 2}, {13, 130, 511}, {12, 128, 512},
    {11, 70, 513}, {121, 67, 33}, {3, 1030, 17}, {125, 1100, 9}, {9, 70, 1025}, {7, 1090, 600}, {2, 3, 0},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static void test_model_kernel(void) {
    for (int s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++) {
            float alpha = t == 3 ? -0.5f : 1.0f, beta = t == 0 ? 0.0f : (t == 1 ? 1.0f : 0.75f);
            free(product_case("model kernel", KERNEL, BF16_MODEL, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2],
                              alpha, beta));
            free(product_case("model kernel, B pre-packed", PACKED, BF16_MODEL, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1],
                              SHAPES[s][2], alpha, beta));
        }
    /* beta = 0 never reads C: NaN garbage there must not leak */
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
    bf16_gemm(BF16_MODEL, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    CHECK(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
}

/* ---- tfm's AMX kernel (gemm_amx.h) ----------------------------------------------
 * Against the references of product_case, at the edges of its blocking
 * (tiles of 16 rows, 32 x 32 blocks, 32 of k, passes of 256 of k, chunks
 * of 128 rows, panels of 32 columns), every transpose, alpha, beta (0 with NaN in C; whole
 * blocks straight between C and the tiles, or not), threaded
 * and from inside a parallel region: its model of the tiles on any CPU, the
 * tiles where there are. */
static const int AMX_SHAPES[][3] = {
    {1, 1, 1}, {2, 3, 0}, {16, 16, 32}, {17, 33, 31}, {32, 32, 64}, {33, 31, 65}, {128, 40, 20}, {129, 70, 100},
    {300, 45, 33}, {5, 300, 70}, {40, 33, 600}, {65, 64, 513},
};

static void test_amx_kernel(void) {
    int kinds = bf16_amx() ? 2 : 1;
    if (kinds == 1) SKIP("no AMX-BF16 tiles here (or Linux refused them): the AMX kernel's model runs, not the tiles");
    for (int kk = 0; kk < kinds; kk++) {
        g_amx = kk ? AMX_TILES : AMX_MODEL;
        const char *name = kk ? "AMX tiles" : "AMX model";
        for (size_t s = 0; s < sizeof AMX_SHAPES / sizeof AMX_SHAPES[0]; s++)
            for (int t = 0; t < 4; t++) {
                float alpha = t == 3 ? -0.5f : 1.0f, beta = t == 0 ? 0.0f : (t == 1 ? 1.0f : 0.75f);
                free(product_case(name, AMX, BF16_NATIVE, t & 1, t >> 1, AMX_SHAPES[s][0], AMX_SHAPES[s][1],
                                  AMX_SHAPES[s][2], alpha, beta));
            }
        /* alpha off 1 with beta 0 or 1: whole blocks through the buffer, not straight between C and the tiles */
        for (int t = 0; t < 4; t++)
            free(product_case(name, AMX, BF16_NATIVE, t & 1, t >> 1, 64, 96, 70, t & 1 ? -0.5f : 2.0f, t >> 1 ? 1.0f : 0.0f));
        float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
        amx_bf16_gemm(g_amx, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
        CHECK_MSG(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4, "%s: beta 0 read C's NaN", name);
        int inside = 0;
        #pragma omp parallel num_threads(2)
        {
            #pragma omp single
            {
                inside = omp_in_parallel();
                free(product_case(name, AMX, BF16_NATIVE, 1, 0, 70, 40, 130, 1.0f, 1.0f));
            }
        }
        if (!inside) SKIP("one thread here: the kernel was not called from inside an active parallel region");
    }
    g_amx = AMX_MODEL;
}

/* The AMX kernel's packing: whole 16 x 32 blocks in vectors (both rounding
 * codes of bf16_round16: VCVTNEPS2BF16 where the CPU has it, the integer
 * one), against element by element (amx_pack_scalar), C bit for bit on the
 * tiles' model: every transpose, blocks whole and at the edges, operands
 * with rounding ties, subnormals, signed zeros, infinities and NaNs. */
static void test_amx_packing(void) {
    static const int shapes[][3] = {{48, 64, 96}, {33, 47, 70}, {16, 32, 32}, {70, 96, 130}};
    static const uint32_t odd[] = {0x3f808000u, 0x3f818000u, 0xbf7f8000u, 0x00012345u, 0x80000001u, 0x80000000u,
                                   0x7f800000u, 0xff800000u, 0x7fc00001u, 0xff812345u, 0x7f7fffffu, 0x3f80ffffu};
    int cvt0 = bf16_round_cvt;
    for (int cvt = 0; cvt <= bf16_native(); cvt++) {
        bf16_round_cvt = cvt;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 4; t++) {
                int ta = t & 1, tb = t >> 1, m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                int lda = (ta ? m : k) + 5, ldb = (tb ? k : n) + 3;
                size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
                float *a = rnd(na, 1), *b = rnd(nb, 1), *c[2];
                for (size_t i = 0; i < na; i += 7) memcpy(&a[i], &odd[(i / 7) % 12], 4);
                for (size_t i = 3; i < nb; i += 11) memcpy(&b[i], &odd[(i / 11) % 12], 4);
                for (int w = 0; w < 2; w++) {
                    amx_pack_scalar(w);
                    c[w] = xmalloc((size_t)m * n * sizeof(float));
                    amx_bf16_gemm(AMX_MODEL, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c[w], n);
                }
                amx_pack_scalar(0);
                CHECK_MSG(!memcmp(c[0], c[1], (size_t)m * n * sizeof(float)),
                          "AMX packing in vectors differs from element by element: ta %d tb %d %d x %d x %d (rounding %s)",
                          ta, tb, m, n, k, cvt ? "VCVTNEPS2BF16" : "integer");
                free(a); free(b); free(c[0]); free(c[1]);
            }
    }
    bf16_round_cvt = cvt0;
    if (!bf16_native()) SKIP("no AVX512_BF16 here: the packing's VCVTNEPS2BF16 rounding is not run");
}

/* The AMX kernel's passes over k (amx_k_pass): C bit for bit the same
 * whatever k a pass takes (C holds fp32 between passes), on the tiles'
 * model: the default (256), one pass, 32 and 96 (k not a multiple of
 * either: the last pass shorter), every transpose, blocks whole (straight
 * between C and the tiles: later passes load C) and at the edges (all of k
 * in the first pass), alpha off 1 and beta 0, 1 and off, a product of many
 * tasks (threaded, several row chunks and panel groups) and one of a single
 * block. */
static void test_amx_passes(void) {
    static const int shapes[][3] = {{300, 200, 70}, {33, 47, 600}, {200, 130, 545}, {32, 32, 300}, {64, 64, 256}};
    static const int passes[] = {0, 1 << 20, 32, 96};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int ta = t & 1, tb = t >> 1, m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            int lda = ta ? m : k, ldb = tb ? k : n;
            float alpha = t == 3 ? -0.5f : 1.0f, beta = t == 0 ? 0.0f : (t == 1 ? 1.0f : 0.75f);
            float *a = rnd((size_t)m * k, 1), *b = rnd((size_t)n * k, 1), *c0 = rnd((size_t)m * n, 1), *c[4];
            for (int o = 0; o < 4; o++) {
                c[o] = xmalloc((size_t)m * n * sizeof(float));
                memcpy(c[o], c0, (size_t)m * n * sizeof(float));
                amx_k_pass(passes[o]);
                amx_bf16_gemm(AMX_MODEL, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c[o], n);
            }
            amx_k_pass(0);
            for (int o = 1; o < 4; o++)
                CHECK_MSG(!memcmp(c[0], c[o], (size_t)m * n * sizeof(float)),
                          "AMX passes of %d over k differ from the default's: ta %d tb %d %d x %d x %d, alpha %g beta %g",
                          passes[o], ta, tb, m, n, k, alpha, beta);
            free(a); free(b); free(c0);
            for (int o = 0; o < 4; o++) free(c[o]);
        }
}

/* The AMX kernel's bias (amx_bf16_gemm_bias: the tiles start from it):
 * C bit for bit as the bias written into C first and beta 1, on the tiles'
 * model and on the tiles where there are: every transpose, blocks whole
 * and at the edges, alpha off 1 (every block through the buffer), k in
 * several passes and k = 0. */
static void test_amx_bias(void) {
    static const int shapes[][3] = {{300, 200, 70}, {33, 47, 600}, {64, 96, 300}, {40, 64, 0}};
    for (int kk = 0; kk < 1 + bf16_amx(); kk++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int t = 0; t < 8; t++) {
                int ta = t & 1, tb = (t >> 1) & 1, m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                int lda = ta ? m : (k ? k : 1), ldb = tb ? (k ? k : 1) : n;
                float alpha = t >> 2 ? -0.5f : 1.0f;
                float *a = rnd((size_t)m * k + 1, 1), *b = rnd((size_t)n * k + 1, 1), *bias = rnd(n, 1), *c[2];
                for (int o = 0; o < 2; o++) {
                    c[o] = xmalloc((size_t)m * n * sizeof(float));
                    for (int i = 0; i < m * n; i++) c[o][i] = o ? bias[i % n] : NAN;
                }
                AmxKernel kern = kk ? AMX_TILES : AMX_MODEL;
                amx_bf16_gemm_bias(kern, ta, tb, m, n, k, alpha, a, lda, b, ldb, bias, 0.0f, c[0], n);
                amx_bf16_gemm(kern, ta, tb, m, n, k, alpha, a, lda, b, ldb, 1.0f, c[1], n);
                CHECK_MSG(!memcmp(c[0], c[1], (size_t)m * n * sizeof(float)),
                          "AMX %s: C from the bias differs from bias + C: ta %d tb %d %d x %d x %d, alpha %g",
                          kk ? "tiles" : "model", ta, tb, m, n, k, alpha);
                free(a); free(b); free(bias); free(c[0]); free(c[1]);
            }
    if (!bf16_amx()) SKIP("no AMX-BF16 tiles here: the bias checked on the tiles' model only");
}

/* Kept panels (amx_weights): a B inside the weights is packed once and
 * read so until amx_weights is called again (a change without the call is
 * not seen: the panels are kept), then packed again; a B outside them is
 * packed every call. Both ways of B, threaded; the tiles' model. */
static void test_amx_weights(void) {
    int m = 40, n = 70, k = 50;
    for (int tb = 0; tb < 2; tb++) {
        int ldb = tb ? k : n;
        float *a = rnd((size_t)m * k, 1), *w = rnd((size_t)n * k, 1), *c[4];
        for (int i = 0; i < 4; i++) c[i] = xmalloc((size_t)m * n * sizeof(float));
        amx_weights(w, (size_t)n * k);
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[0], n);
        w[3] += 1.0f;   /* changed, amx_weights not called: the kept panels are read */
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[1], n);
        CHECK_MSG(!memcmp(c[0], c[1], (size_t)m * n * sizeof(float)), "tb %d: the weights' panels were not kept", tb);
        amx_weights(w, (size_t)n * k);   /* now packed again */
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[2], n);
        amx_keep(0);
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[3], n);
        amx_keep(1);
        CHECK_MSG(!memcmp(c[2], c[3], (size_t)m * n * sizeof(float)) && memcmp(c[2], c[0], (size_t)m * n * sizeof(float)),
                  "tb %d: after amx_weights the product does not read the new weights", tb);
        amx_weights(w + 1, (size_t)n * k - 1);   /* B no longer inside the weights: packed each call */
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[0], n);
        w[3] -= 1.0f;
        amx_bf16_gemm(AMX_MODEL, 0, tb, m, n, k, 1.0f, a, k, w, ldb, 0.0f, c[1], n);
        CHECK_MSG(memcmp(c[0], c[1], (size_t)m * n * sizeof(float)), "tb %d: a B outside the weights was kept", tb);
        amx_weights(NULL, 0);
        free(a); free(w);
        for (int i = 0; i < 4; i++) free(c[i]);
    }
}

/* The BF16_AMX route (dispatch.h: forced only) through gemm_many: every
 * transpose; a product with a bias and C rounded beside an fp32 one, the
 * fp32 one bit for bit as on the emulated route and the bf16 one within a
 * rounding flip of it. On the model where there are no tiles. */
static void test_amx_route(void) {
    Bf16Route saved = bf16_route();
    gemm_amx_kernel(bf16_amx() ? AMX_TILES : AMX_MODEL);
    bf16_route_set(BF16_AMX);
    for (int t = 0; t < 4; t++)
        free(product_case("gemm_many on the AMX route", GEMM_MANY, BF16_NATIVE, t & 1, t >> 1, 300, 70, 90, 0.7f, 0.5f));
    int m = 90, n = 50, k = 70;
    float *x = rnd((size_t)m * k, 1), *w = rnd((size_t)n * k, 1), *bias = rnd(n, 1), *v = rnd((size_t)k * n, 1);
    float *y[2], *z[2];
    for (int r = 0; r < 2; r++) {
        y[r] = xcalloc((size_t)m * n, sizeof(float));
        z[r] = xcalloc((size_t)m * n, sizeof(float));
        bf16_route_set(r ? BF16_EMULATED : BF16_AMX);
        Gemm two[2] = {{0, 1, m, n, k, 1.0f, x, k, w, k, 0.0f, y[r], n, GEMM_BF16_A | GEMM_BF16_B, bias, 1},
                       {0, 0, m, n, k, 1.0f, x, k, v, n, 0.0f, z[r], n, 0, NULL, 0}};
        gemm_many(two, 2);
    }
    int flips = 0, bf16 = 1;
    for (int i = 0; i < m * n; i++) {
        bf16 &= bf16_round(y[0][i]) == y[0][i];
        flips += y[0][i] != y[1][i] && fabsf(y[0][i] - y[1][i]) > fabsf(y[1][i]) / 128;
    }
    CHECK_MSG(!memcmp(z[0], z[1], (size_t)m * n * sizeof(float)), "the fp32 product beside differs on the AMX route");
    CHECK_MSG(bf16 && !flips, "the AMX route's product with a bias, rounded: %s, %d entries beyond a rounding flip",
              bf16 ? "bf16 values" : "NOT bf16 values", flips);
    for (int r = 0; r < 2; r++) { free(y[r]); free(z[r]); }
    free(x); free(w); free(bias); free(v);
    bf16_route_set(saved);
    gemm_amx_kernel(AMX_TILES);
}

/* gemm_many's bf16 path (emulated here unless the CPU has AVX512_BF16),
 * big enough to be cut into pieces for threads (rows, columns, k slices). */
static void test_gemm_many_bf16(void) {
    printf("bf16 products: %s\n", bf16_mode());
    for (int t = 0; t < 4; t++) {
        free(product_case("gemm_many bf16", GEMM_MANY, BF16_NATIVE, t & 1, t >> 1, 1500, 70, 90, 0.7f, 0.5f));   /* rows */
        free(product_case("gemm_many bf16", GEMM_MANY, BF16_NATIVE, t & 1, t >> 1, 40, 1500, 150, 1.0f, 0.0f));  /* columns */
        free(product_case("gemm_many bf16", GEMM_MANY, BF16_NATIVE, t & 1, t >> 1, 20, 30, 14000, 1.0f, 1.0f)); /* k slices */
    }
    /* bf16 is really on: the result differs from the fp32 product (the
     * operands are not bf16 values), by about the bf16 rounding */
    int m = 64, n = 64, k = 256;
    float *a = rnd((size_t)m * k, 1), *b = rnd((size_t)k * n, 1);
    float *c16 = xcalloc((size_t)m * n, sizeof(float)), *c32 = xcalloc((size_t)m * n, sizeof(float));
    product(GEMM_MANY, BF16_NATIVE, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c16, n);
    gemm(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c32, n);
    double d = 0, s = 0;
    for (int i = 0; i < m * n; i++) { d += fabs((double)c16[i] - c32[i]); s += fabs((double)c32[i]); }
    CHECK_MSG(d / s > 1e-4 && d / s < 1e-2, "bf16 vs fp32 relative difference %.3g, expected ~1e-3", d / s);
    /* an operand without its flag is taken as it is (already bf16): with
     * pre-rounded B and only A flagged the result is the same as both flagged */
    float *br = xmalloc((size_t)k * n * sizeof(float)), *c1 = xcalloc((size_t)m * n, sizeof(float));
    bf16_round_matrix(br, n, b, n, k, n);
    Gemm g = {0, 0, m, n, k, 1.0f, a, k, br, n, 0.0f, c1, n, GEMM_BF16_A, NULL, 0};
    gemm_many(&g, 1);
    CHECK(!memcmp(c1, c16, (size_t)m * n * sizeof(float)));
    free(a); free(b); free(br); free(c16); free(c32); free(c1);
}

/* The AVX512_BF16 kernel, where the CPU has it: within fp32 summation
 * tolerance of the fp64 product of the rounded operands, like the model
 * kernel and the emulated path, hence of both (the same bf16 numbers;
 * only the order of the sums may differ). */
static void test_native_kernel(void) {
    if (!bf16_native()) {
        SKIP("this CPU has no AVX512_BF16: the native bf16 kernel cannot run here (its loops are checked "
             "by test_model_kernel; products run emulated)");
        return;
    }
    for (int s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++) {
            free(product_case("native kernel", KERNEL, BF16_NATIVE, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1],
                              SHAPES[s][2], t == 3 ? -0.5f : 1.0f, t == 0 ? 0.0f : 0.75f));
            free(product_case("native kernel, B pre-packed", PACKED, BF16_NATIVE, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1],
                              SHAPES[s][2], 1.0f, 0.5f));
        }
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
    bf16_gemm(BF16_NATIVE, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    CHECK(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
}

/* oneDNN's matmul (gemm_dnnl.c), on any AVX-512 CPU (oneDNN runs bf16 matmuls
 * without AVX512_BF16 too, slowly): the same bounds as the kernels at the
 * kernel's edge shapes and the model's, transposes as strides, beta 0 and 1
 * (alpha and other betas are declined, leaving C alone), two products
 * sharing an operand, and weights read from a registered 16-bit twin. */
static void test_onednn(void) {
    if (!gemm_dnnl_runs()) {
        SKIP(gemm_dnnl_built() ? "no AVX-512 here: oneDNN 2.6 has no bf16 matmul to check"
                               : "built without oneDNN (make DNNL=0): the oneDNN route is not compiled in");
        return;
    }
    for (int s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++)
            free(product_case("oneDNN", ONEDNN, BF16_NATIVE, t & 1, t >> 1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2],
                              1.0f, t == 0 ? 0.0f : 1.0f));
    free(product_case("oneDNN", ONEDNN, BF16_NATIVE, 0, 1, 300, 1000, 512, 1.0f, 1.0f));
    free(product_case("oneDNN", ONEDNN, BF16_NATIVE, 1, 0, 200, 64, 3000, 1.0f, 1.0f));
    /* by rows, A converted piece by piece (gemm_dnnl.c: read by no other product) */
    free(product_case("oneDNN", ONEDNN, BF16_NATIVE, 0, 1, 1000, 300, 512, 1.0f, 1.0f));
    free(product_case("oneDNN", ONEDNN, BF16_NATIVE, 0, 0, 1001, 129, 700, 1.0f, 0.0f));
    /* with a bias (Gemm.bias): C = bias + the product, in pieces and in one */
    for (int t = 0; t < 3; t++) {   /* by rows; one piece; by columns, so whole (below) */
        int m = t == 1 ? 7 : t ? 100 : 900, n = t == 1 ? 70 : t ? 1000 : 300, k = 256;
        float *x = rnd((size_t)m * k, 1), *w = rnd((size_t)n * k, 1), *bias = rnd(n, 1);
        float *c1 = rnd((size_t)m * n, 1), *c2 = xmalloc((size_t)m * n * sizeof(float));
        for (int i = 0; i < m; i++) memcpy(c2 + (size_t)i * n, bias, (size_t)n * sizeof(float));
        Gemm gb = {0, 1, m, n, k, 1.0f, x, k, w, k, 0.0f, c1, n, GEMM_BF16_A | GEMM_BF16_B, bias, 0};
        Gemm gc = {0, 1, m, n, k, 1.0f, x, k, w, k, 1.0f, c2, n, GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
        CHECK(gemm_dnnl_many(&gb, 1) == 0 && gemm_dnnl_many(&gc, 1) == 0);
        double dmax = 0; int at = -1;
        for (int i = 0; i < m * n; i++) if (fabs(c1[i] - c2[i]) > dmax) { dmax = fabs(c1[i] - c2[i]); at = i; }
        CHECK_MSG(!memcmp(c1, c2, (size_t)m * n * sizeof(float)), "oneDNN with a bias differs from bias + product (%d rows): %g at %d (%g vs %g)", m, dmax, at, at >= 0 ? c1[at] : 0, at >= 0 ? c2[at] : 0);
        free(x); free(w); free(bias); free(c1); free(c2);
    }
    /* repeatable: the pieces run one primitive on several threads at once,
     * each with its own scratchpad (a shared one raced: wrong sums, rarely) */
    {
        int m = 1200, n = 300, k = 512, same = 1;
        float *x = rnd((size_t)m * k, 1), *w = rnd((size_t)n * k, 1);
        float *c0 = xcalloc((size_t)m * n, sizeof(float)), *c1 = xcalloc((size_t)m * n, sizeof(float));
        Gemm g0 = {0, 1, m, n, k, 1.0f, x, k, w, k, 0.0f, c0, n, GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
        CHECK(gemm_dnnl_many(&g0, 1) == 0);
        for (int r = 0; r < 20; r++) {
            g0.c = c1;
            g0.beta = (float)(r % 2);   /* with and without the sum post-op */
            if (r % 2) memset(c1, 0, (size_t)m * n * sizeof(float));
            CHECK(gemm_dnnl_many(&g0, 1) == 0);
            same &= !memcmp(c0, c1, (size_t)m * n * sizeof(float));
        }
        CHECK_MSG(same, "oneDNN in pieces is not repeatable");
        free(x); free(w); free(c0); free(c1);
    }
    /* more shapes than the table of 64 primitives gemm_dnnl.c kept before
     * (now it keeps none: oneDNN's cache does), each within the bounds, and
     * one primitive asked of oneDNN per shape of a piece */
    {
        long made0, made1;
        double s0, s1;
        gemm_dnnl_made(&made0, &s0);
        for (int m = 1; m <= 80; m++) free(product_case("oneDNN, a new m each", ONEDNN, BF16_NATIVE, 0, 1, m, 24, 40, 1.0f, m % 2 ? 1.0f : 0.0f));
        gemm_dnnl_made(&made1, &s1);
        CHECK_MSG(made1 - made0 == 80, "80 one-piece products asked oneDNN for %ld primitives", made1 - made0);
    }
    /* Plain operands (no gaps between rows) that pieces would cut with gaps
     * (by columns: C's rows; by rows: a transposed A) run whole, on
     * oneDNN's threads: one primitive asked, where the pieces of these
     * shapes need two (the last piece is shorter); the same shapes with
     * gaps stay in pieces. Both within the bounds, beta 0 and 1. */
    if (threads_count() >= 2) {
        static const int WHOLE[][5] = {{0, 1, 100, 1000, 200}, {1, 0, 1000, 100, 200}, {1, 1, 1000, 90, 150}};
        for (int s = 0; s < 3; s++)
            for (int t = 0; t < 4; t++) {
                long made0, made1;
                double s0, s1;
                g_plain = t < 2;
                gemm_dnnl_made(&made0, &s0);
                free(product_case(g_plain ? "oneDNN, whole" : "oneDNN, in pieces", ONEDNN, BF16_NATIVE, WHOLE[s][0],
                                  WHOLE[s][1], WHOLE[s][2], WHOLE[s][3], WHOLE[s][4], 1.0f, (float)(t % 2)));
                gemm_dnnl_made(&made1, &s1);
                CHECK_MSG(made1 - made0 == (g_plain ? 1 : 2), "%s %d x %d x %d (ta %d): %ld primitives, expected %d",
                          g_plain ? "plain" : "with gaps", WHOLE[s][2], WHOLE[s][3], WHOLE[s][4], WHOLE[s][0],
                          made1 - made0, g_plain ? 1 : 2);
            }
        g_plain = 0;
    } else {
        SKIP("one thread: no pieces, so no whole products to tell apart from them");
    }
    gemm_dnnl_pieces(0);   /* one call on oneDNN's own threads instead of our pieces */
    free(product_case("oneDNN, its own threads", ONEDNN, BF16_NATIVE, 0, 1, 300, 1000, 512, 1.0f, 1.0f));
    free(product_case("oneDNN, its own threads", ONEDNN, BF16_NATIVE, 1, 1, 130, 700, 200, 1.0f, 0.0f));
    gemm_dnnl_pieces(1);
    /* declined: alpha != 1, beta 0.5; C untouched */
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {9, 9, 9, 9};
    Gemm g = {0, 0, 2, 2, 2, 0.5f, a, 2, b, 2, 0.0f, c, 2, GEMM_BF16_A | GEMM_BF16_B, NULL, 0};
    CHECK(gemm_dnnl_many(&g, 1) == -1);
    g.alpha = 1.0f; g.beta = 0.5f;
    CHECK(gemm_dnnl_many(&g, 1) == -1);
    CHECK(c[0] == 9 && c[1] == 9 && c[2] == 9 && c[3] == 9);
    /* two products sharing A (dy = dlogits E and dE += dlogits^T y) and the
     * twin: the same bits as converting the (bf16-valued) weights each time */
    int m = 70, n = 48, k = 300;
    float *x = rnd((size_t)m * k, 1), *w = rnd((size_t)k * n, 1), *y = rnd((size_t)m * n, 1);
    bf16_round_matrix(w, n, w, n, k, n);
    uint16_t *w16 = xmalloc((size_t)k * n * sizeof *w16);
    for (int i = 0; i < k * n; i++) w16[i] = bf16_from_float(w[i]);
    float *c1 = xcalloc((size_t)m * n, sizeof(float)), *c2 = xcalloc((size_t)m * n, sizeof(float));
    float *d1 = xcalloc((size_t)k * n, sizeof(float)), *d2 = xcalloc((size_t)k * n, sizeof(float));
    Gemm two[2] = {{0, 0, m, n, k, 1.0f, x, k, w, n, 0.0f, c1, n, GEMM_BF16_A, NULL, 0},
                   {1, 0, k, n, m, 1.0f, x, k, y, n, 0.0f, d1, n, GEMM_BF16_A | GEMM_BF16_B, NULL, 0}};
    CHECK(gemm_dnnl_many(two, 2) == 0);
    gemm_dnnl_shadow(w, w16, (size_t)k * n);
    two[0].c = c2; two[1].c = d2;
    CHECK(gemm_dnnl_many(two, 2) == 0);
    gemm_dnnl_shadow(w, NULL, 0);
    CHECK(!memcmp(c1, c2, (size_t)m * n * sizeof(float)) && !memcmp(d1, d2, (size_t)k * n * sizeof(float)));
    /* and what the twin says is what is read: a wrong twin shows */
    for (int i = 0; i < k * n; i++) w16[i] = bf16_from_float(2.0f * w[i]);
    gemm_dnnl_shadow(w, w16, (size_t)k * n);
    two[0].c = c2;
    CHECK(gemm_dnnl_many(two, 1) == 0);
    gemm_dnnl_shadow(w, NULL, 0);
    CHECK_NEAR(c2[5], 2.0f * c1[5], 1e-4 * fabs(c1[5]) + 1e-6);
    free(x); free(w); free(y); free(w16); free(c1); free(c2); free(d1); free(d2);
    /* A twin lent for an activation read as A, as the output layer lends the
     * dlogits' 16 bits (written by the loss) to its two products (dy =
     * dlogits E, dE += dlogits^T y; the rows threaded, in pieces, and the
     * transposed one whole): the same bits as converting A; what the twin
     * says is what oneDNN reads; and every other route reads the floats. */
    {
        int r = 300, V = 2000, D = 64;
        float *dl = rnd((size_t)r * V, 1), *e = rnd((size_t)V * D, 1), *yr = rnd((size_t)r * D, 1);
        bf16_round_matrix(dl, V, dl, V, r, V);
        bf16_round_matrix(e, D, e, D, V, D);
        bf16_round_matrix(yr, D, yr, D, r, D);
        uint16_t *dl16 = xmalloc((size_t)r * V * sizeof *dl16);
        for (size_t i = 0; i < (size_t)r * V; i++) dl16[i] = bf16_from_float(dl[i]);
        float *out[2][3];   /* [dy, dE][converted, twin, twin doubled] */
        for (int p = 0; p < 2; p++)
            for (int v = 0; v < 3; v++) out[p][v] = xcalloc(p ? (size_t)V * D : (size_t)r * D, sizeof(float));
        for (int v = 0; v < 3; v++) {
            if (v == 2)
                for (size_t i = 0; i < (size_t)r * V; i++) dl16[i] = bf16_from_float(2.0f * dl[i]);
            Gemm g2[2] = {{0, 0, r, D, V, 1.0f, dl, V, e, D, 0.0f, out[0][v], D, GEMM_BF16_HELD, NULL, 0},
                          {1, 0, V, D, r, 1.0f, dl, V, yr, D, 1.0f, out[1][v], D, GEMM_BF16_HELD, NULL, 0}};
            if (v) gemm_dnnl_shadow(dl, dl16, (size_t)r * V);
            CHECK(gemm_dnnl_many(g2, 1) == 0 && gemm_dnnl_many(g2 + 1, 1) == 0);
            if (v) gemm_dnnl_shadow(dl, NULL, 0);
        }
        for (int p = 0; p < 2; p++) {
            size_t cnt = p ? (size_t)V * D : (size_t)r * D;
            CHECK_MSG(!memcmp(out[p][0], out[p][1], cnt * sizeof(float)), "%s: A's twin differs from A converted",
                      p ? "dE += dlogits^T y" : "dy = dlogits E");
            int doubled = 1;
            for (size_t i = 0; i < cnt; i++) doubled &= out[p][2][i] == 2.0f * out[p][1][i];   /* exact: a power of 2 */
            CHECK_MSG(doubled, "%s: oneDNN did not read A's twin", p ? "dE" : "dy");
        }
        /* off the oneDNN route the floats are read, not the (doubled) twin */
        Bf16Route was = bf16_route();
        bf16_route_set(BF16_EMULATED);
        float *o1 = xcalloc((size_t)r * D, sizeof(float)), *o2 = xcalloc((size_t)r * D, sizeof(float));
        Gemm ge = {0, 0, r, D, V, 1.0f, dl, V, e, D, 0.0f, o1, D, GEMM_BF16_HELD, NULL, 0};
        gemm_dnnl_shadow(dl, dl16, (size_t)r * V);
        gemm_many(&ge, 1);
        gemm_dnnl_shadow(dl, NULL, 0);
        ge.c = o2;
        gemm_many(&ge, 1);
        bf16_route_set(was);
        CHECK_MSG(!memcmp(o1, o2, (size_t)r * D * sizeof(float)), "the emulated route read a twin");
        free(o1); free(o2);
        for (int p = 0; p < 2; p++)
            for (int v = 0; v < 3; v++) free(out[p][v]);
        free(dl); free(e); free(yr); free(dl16);
    }
    /* On the oneDNN route the model keeps its weights as fp32 masters with a
     * 16-bit twin and no rounded float copy (model.c alloc_bf16). A product
     * oneDNN declines (alpha 0.5 here) then runs elsewhere with the master
     * rounded: the same bits as with the rounded copy, not the master's. */
    if (bf16_route() != BF16_ONEDNN) {
        SKIP("bf16 route is not oneDNN (TFM_BF16_PRODUCTS, TFM_CPU_FEATURES): no declined-product fallback to check");
        return;
    }
    m = 9; n = 40; k = 70;
    x = rnd((size_t)m * k, 1); w = rnd((size_t)k * n, 1);
    float *wr = xmalloc((size_t)k * n * sizeof *wr), *o1 = xcalloc((size_t)m * n, 4), *o2 = xcalloc((size_t)m * n, 4);
    float *o3 = xcalloc((size_t)m * n, 4);
    bf16_round_matrix(wr, n, w, n, k, n);
    w16 = xmalloc((size_t)k * n * sizeof *w16);
    for (int i = 0; i < k * n; i++) w16[i] = bf16_from_float(w[i]);
    Gemm dm = {0, 0, m, n, k, 0.5f, x, k, w, n, 0.0f, o1, n, GEMM_BF16_A, NULL, 0};
    gemm_dnnl_shadow(w, w16, (size_t)k * n);
    CHECK(gemm_dnnl_many(&dm, 1) == -1);   /* declined */
    gemm_many(&dm, 1);
    gemm_dnnl_shadow(w, NULL, 0);
    Gemm dr = dm, du = dm;
    dr.b = wr; dr.c = o2;
    gemm_many(&dr, 1);
    CHECK_MSG(!memcmp(o1, o2, (size_t)m * n * 4), "a declined product read the fp32 master, not its bf16 value");
    float *xr = xmalloc((size_t)m * k * sizeof *xr);   /* and the master itself would have given other sums */
    bf16_round_matrix(xr, k, x, k, m, k);
    du.a = xr; du.c = o3; du.bf16 = 0;
    gemm_many(&du, 1);
    free(xr);
    CHECK(memcmp(o1, o3, (size_t)m * n * 4) != 0);
    free(x); free(w); free(wr); free(w16); free(o1); free(o2); free(o3);
}

/* ---- the choice of route (dispatch.c's bf16_rule), every branch on any CPU ---- */
static void test_rule(void) {
    const char *why;
    /* defaults: oneDNN where it has AMX-BF16 (Intel); on AMD with AVX512_BF16
     * oneDNN, or our kernel without it; the emulation on an Intel CPU with
     * AVX512_BF16 and no AMX (VDPBF16PS at half the FMA rate) and anywhere else */
    CHECK(bf16_rule(NULL, 1, 0, 2, 1, &why) == BF16_AMX);         /* Intel with AMX: tfm's tile kernel */
    CHECK(bf16_rule("", 1, 0, 2, 1, &why) == BF16_AMX);
    CHECK(bf16_rule(NULL, 1, 0, 0, 1, &why) == BF16_AMX);         /* the same without oneDNN */
    CHECK(bf16_rule(NULL, 1, 0, 2, 0, &why) == BF16_ONEDNN);      /* AMX, the tiles refused tfm: oneDNN's */
    CHECK(bf16_rule(NULL, 1, 0, 1, 0, &why) == BF16_EMULATED);    /* Intel, AVX512_BF16, no AMX (or -amx_bf16) */
    CHECK(bf16_rule(NULL, 1, 0, 0, 0, &why) == BF16_EMULATED);    /* the same without oneDNN */
    CHECK(bf16_rule(NULL, 1, 1, 1, 0, &why) == BF16_ONEDNN);      /* AMD Zen 4/5 */
    CHECK(bf16_rule(NULL, 1, 1, 0, 0, &why) == BF16_KERNEL);      /* AMD, built without oneDNN */
    CHECK(bf16_rule(NULL, 0, 1, 0, 0, &why) == BF16_EMULATED);    /* AMD without AVX512_BF16 (Zen 3) */
    CHECK(bf16_rule(NULL, 0, 0, 0, 0, &why) == BF16_EMULATED);
    /* forced: each where it can run, an error with the reason where not */
    CHECK(bf16_rule("emulated", 1, 1, 2, 0, &why) == BF16_EMULATED);
    CHECK(bf16_rule("kernel", 1, 0, 1, 0, &why) == BF16_KERNEL);
    CHECK(bf16_rule("kernel", 0, 1, 0, 0, &why) == -1 && strstr(why, "AVX512_BF16"));
    CHECK(bf16_rule("onednn", 0, 0, 0, 0, &why) == (gemm_dnnl_runs() ? BF16_ONEDNN : -1));
    CHECK(gemm_dnnl_runs() || bf16_rule("onednn", 1, 1, 1, 0, &why) == -1);   /* with the reason: */
    CHECK(gemm_dnnl_runs() || strstr(why, gemm_dnnl_built() ? "needs AVX-512" : "without oneDNN"));
    CHECK(bf16_rule("bogus", 1, 1, 2, 0, &why) == -1 && strstr(why, "onednn"));
    /* tfm's AMX kernel forced: only where the tiles are; oneDNN's forced on AMX */
    CHECK(bf16_rule("amx", 1, 0, 2, 1, &why) == BF16_AMX);
    CHECK(bf16_rule("amx", 1, 0, 2, 0, &why) == -1 && strstr(why, "AMX-BF16"));
    CHECK(bf16_rule("amx", 0, 1, 0, 0, &why) == -1 && strstr(why, "AMX-BF16"));
    CHECK(bf16_rule("onednn", 1, 0, 2, 1, &why) == (gemm_dnnl_runs() ? BF16_ONEDNN : -1));
    CHECK(bf16_amx() == 0 || (cpu_has(CPU_AMX_BF16) && cpu_has(CPU_AMX_TILE)));
    /* and this CPU's route is the rule's (unless a test set it) */
    const char *e = getenv("TFM_BF16_PRODUCTS");
    CHECK(bf16_route() == (Bf16Route)bf16_rule(e, bf16_native(), cpu_info()->vendor == CPU_VENDOR_AMD, bf16_onednn(),
                                                bf16_amx(), &why));
    CHECK(bf16_onednn() == 0 || gemm_dnnl_built());
    CHECK(bf16_onednn() < 2 || (cpu_has(CPU_AMX_BF16) && cpu_has(CPU_AMX_TILE)));
    CHECK(bf16_onednn() < 1 || bf16_native());
}

int main(void) {
    rng_seed(&rng, 16);
    threads_init(0);
    RUN(test_rule);
    RUN(test_round);
    RUN(test_round_cvt);
    RUN(test_model_kernel);
    RUN(test_amx_kernel);
    RUN(test_amx_packing);
    RUN(test_amx_passes);
    RUN(test_amx_bias);
    RUN(test_amx_weights);
    RUN(test_amx_route);
    RUN(test_gemm_many_bf16);
    RUN(test_native_kernel);
    RUN(test_onednn);
    return test_summary();
}
