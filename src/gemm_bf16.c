/* gemm_bf16.c — bf16 rounding and the AVX512_BF16 product kernel (see
 * gemm_bf16.h).
 *
 * The kernel is BLIS's scheme with bf16 operands (Goto & van de Geijn 2008):
 *   for each block of NC columns of op(B)
 *     for each block of KC values of k:   pack op(B) [KC, NC] as bf16
 *       for each block of MC rows of op(A): pack op(A) [MC, KC] as bf16
 *         for each panel of NR columns, each micro-panel of MR rows:
 *           micro-kernel: an MR x NR tile of sums over the KC block,
 *           then C = beta C + alpha tile (first k block) or C += alpha tile.
 * VDPBF16PS multiplies *pairs* along k: lane j of the accumulator gets
 *     acc_j += a_2q * b_2q,j + a_2q+1 * b_2q+1,j
 * from a 32-bit lane of A's register (the pair a_2q, a_2q+1, broadcast to all
 * lanes) and the 32-bit lane j of B's (b_2q,j, b_2q+1,j). So both are packed
 * by pairs of k, the even one in the low half (an odd k gets a zero pair
 * partner):
 *   A micro-panel: pa[q * MR + i]      = (a[i, 2q], a[i, 2q+1])  32 bits
 *   B panel:       pb[(q * NR + j) * 2 + e] = b[2q + e, j]        16 bits each
 * The micro-kernel keeps an MR x NR = 6 x 64 tile in 24 zmm registers
 * (4 vectors of 16 per row), loads 4 vectors of B and broadcasts 6 pairs of
 * A per pair of k: 24 VDPBF16PS per 10 loads. The tile (fp32) goes through
 * a small buffer to C, so edges (m % MR, n % NR) need no masked code: the
 * packed operands are zero past the edges and only the valid part of the
 * tile is written.
 *
 * Packing converts with bf16_from_float (to nearest even), in plain C for
 * both micro-kernels, so the native and the model kernel see the same bf16
 * numbers and differ only in the order of the sums within a lane (none: the
 * model does exactly what the pseudo-code of VDPBF16PS says). */
#include "gemm_bf16.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "kernel.h"
#include "parallel.h"
#include "util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

enum { MR = 6, NR = 64, KC = 512, MC = 120, NC = 1024, KP = KC / 2 };

/* ---- rounding ----------------------------------------------------------- */

#if HAVE_X86
/* bf16_round_run on VCVTNEPS2BF16: 32 floats a step, so that the 16 bits go
 * out as whole 64-byte lines (one 32-byte store a 16 floats ran 1.1x slower
 * than the integer code when h streams to memory: a 4,096 x 512 twin, Intel
 * model 0xcf); then 16 at a time; the tail through a vector on the stack
 * (AVX512F alone: no BW's 16-bit masked stores). */
__attribute__((target("avx512f,avx512bf16"))) static void round_run_cvt(float *dst, uint16_t *h, const float *src,
                                                                          size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i b0 = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        __m256i b1 = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i + 16));
        if (h) _mm512_storeu_si512(h + i, _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1));
        if (dst) {
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b0), 16)));
            _mm512_storeu_ps(dst + i + 16, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b1), 16)));
        }
    }
    for (; i + 16 <= n; i += 16) {
        __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        if (h) _mm256_storeu_si256((__m256i *)(h + i), b);
        if (dst) _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
    if (i < n) {
        float f[16] = {0};
        uint16_t b16[16];
        memcpy(f, src + i, (n - i) * sizeof *f);
        round_run_cvt(f, b16, f, 16);
        if (h) memcpy(h + i, b16, (n - i) * sizeof *h);
        if (dst) memcpy(dst + i, f, (n - i) * sizeof *dst);
    }
}
#endif

void bf16_round_run(float *dst, uint16_t *h, const float *src, size_t n) {
#if HAVE_X86
    if (bf16_round_cvt) { round_run_cvt(dst, h, src, n); return; }
#endif
    if (dst && h) {
        #pragma omp simd
        for (size_t i = 0; i < n; i++) dst[i] = bf16_round_put(src[i], h + i);
    } else if (dst) {
        #pragma omp simd
        for (size_t i = 0; i < n; i++) dst[i] = bf16_round(src[i]);
    } else if (h) {
        #pragma omp simd
        for (size_t i = 0; i < n; i++) h[i] = bf16_from_float(src[i]);
    }
}

void bf16_round_matrix(float *dst, int ldd, const float *src, int lds, int rows, int cols) {
    PAR_FOR(par_go((size_t)rows * cols, STREAM_PAR_MIN), (int i = 0; i < rows; i++),
            bf16_round_run(dst + (size_t)i * ldd, NULL, src + (size_t)i * lds, (size_t)cols););
}

void bf16_round_twin(float *dst, uint16_t *h, const float *src, size_t n) {
    size_t nb = (n + BF16_RUN - 1) / BF16_RUN;
    PAR_FOR(par_go(n, STREAM_PAR_MIN), (size_t b = 0; b < nb; b++), {
        size_t e0 = b * BF16_RUN, len = n - e0 < BF16_RUN ? n - e0 : BF16_RUN;
        bf16_round_run(dst + e0, h + e0, src + e0, len);
    });
}

/* ---- packing ------------------------------------------------------------------ */
/* op(A) rows i0 .. i0+mc, k range p0 .. p0+kc into micro-panels of MR rows
 * (pa[(ia * kp + q) * MR + i]), zero past row mc and past k. */
static void pack_a(uint32_t *pa, int ta, const float *a, int lda, int i0, int mc, int p0, int kc) {
    int kp = (kc + 1) / 2, na = (mc + MR - 1) / MR;
    for (int ia = 0; ia < na; ia++)
        for (int i = 0; i < MR; i++) {
            int r = ia * MR + i;
            uint32_t *d = pa + (size_t)ia * kp * MR + i;
            if (r >= mc) {
                for (int q = 0; q < kp; q++) d[(size_t)q * MR] = 0;
                continue;
            }
            for (int q = 0; q < kp; q++) {
                int p = p0 + 2 * q;
                float lo, hi;
                if (ta) {   /* A stored [k, m]: op(A)[r, p] = a[p, r] */
                    lo = a[(size_t)p * lda + i0 + r];
                    hi = 2 * q + 1 < kc ? a[(size_t)(p + 1) * lda + i0 + r] : 0.0f;
                } else {
                    const float *ar = a + (size_t)(i0 + r) * lda;
                    lo = ar[p];
                    hi = 2 * q + 1 < kc ? ar[p + 1] : 0.0f;
                }
                d[(size_t)q * MR] = bf16_from_float(lo) | (uint32_t)bf16_from_float(hi) << 16;
            }
        }
}

/* op(B) k range p0 .. p0+kc, columns j0 .. j0+nc into panels of NR columns
 * (pb[((jp * kp + q) * NR + j) * 2 + e]), zero past column nc and past k. */
static void pack_b(uint16_t *pb, int tb, const float *b, int ldb, int p0, int kc, int j0, int nc) {
    int kp = (kc + 1) / 2, np = (nc + NR - 1) / NR;
    for (int jp = 0; jp < np; jp++)
        for (int q = 0; q < kp; q++) {
            uint16_t *d = pb + ((size_t)jp * kp + q) * NR * 2;
            for (int e = 0; e < 2; e++) {
                int p = 2 * q + e;
                for (int j = 0; j < NR; j++) {
                    int col = jp * NR + j;
                    float v = 0.0f;
                    if (p < kc && col < nc)   /* tb: B stored [n, k] */
                        v = tb ? b[(size_t)(j0 + col) * ldb + p0 + p] : b[(size_t)(p0 + p) * ldb + j0 + col];
                    d[j * 2 + e] = bf16_from_float(v);
                }
            }
        }
}

/* ---- micro-kernels: tile [MR, NR] = sum over kp pairs ------------------------- */
typedef void (*MicroKernel)(int kp, const uint32_t *pa, const uint16_t *pb, float *tile);

/* What VDPBF16PS does to lane j (Intel SDM pseudo-code): the odd element's
 * product first, then the even one's, each rounded to fp32 on adding. */
static void micro_model(int kp, const uint32_t *pa, const uint16_t *pb, float *tile) {
    float acc[MR][NR] = {{0}};
    for (int q = 0; q < kp; q++, pa += MR, pb += NR * 2)
        for (int i = 0; i < MR; i++) {
            float alo = bf16_to_float((uint16_t)pa[i]), ahi = bf16_to_float((uint16_t)(pa[i] >> 16));
            for (int j = 0; j < NR; j++) {
                acc[i][j] += ahi * bf16_to_float(pb[j * 2 + 1]);
                acc[i][j] += alo * bf16_to_float(pb[j * 2]);
            }
        }
    memcpy(tile, acc, sizeof acc);
}

#if HAVE_X86
__attribute__((target("avx512f,avx512bf16")))
static void micro_avx512(int kp, const uint32_t *pa, const uint16_t *pb, float *tile) {
    __m512 c[MR][4];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 4; v++) c[i][v] = _mm512_setzero_ps();
    for (int q = 0; q < kp; q++, pa += MR, pb += NR * 2) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb), b1 = (__m512bh)_mm512_loadu_si512(pb + 32);
        __m512bh b2 = (__m512bh)_mm512_loadu_si512(pb + 64), b3 = (__m512bh)_mm512_loadu_si512(pb + 96);
        for (int i = 0; i < MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)pa[i]);
            c[i][0] = _mm512_dpbf16_ps(c[i][0], ai, b0);
            c[i][1] = _mm512_dpbf16_ps(c[i][1], ai, b1);
            c[i][2] = _mm512_dpbf16_ps(c[i][2], ai, b2);
            c[i][3] = _mm512_dpbf16_ps(c[i][3], ai, b3);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(tile + i * NR + v * 16, c[i][v]);
}
#endif

/* ---- the loops around the micro-kernel ------------------------------------------- */
/* C [mr, nr] block: beta C + alpha tile (first k block) or C + alpha tile. */
static void tile_update(float *c, int ldc, const float *tile, int mr, int nr, float alpha, float beta, int first) {
    for (int i = 0; i < mr; i++) {
        float *ci = c + (size_t)i * ldc;
        const float *t = tile + i * NR;
        if (!first) for (int j = 0; j < nr; j++) ci[j] += alpha * t[j];
        else if (beta == 0.0f) for (int j = 0; j < nr; j++) ci[j] = alpha * t[j];   /* C may be garbage */
        else for (int j = 0; j < nr; j++) ci[j] = beta * ci[j] + alpha * t[j];
    }
}

/* Where block (jc, pc) of a whole pre-packed B starts: the column blocks
 * before it hold jc columns (NC is a multiple of NR) of all kpt pairs, and
 * the k blocks before it in this column block pc / 2 pairs of its panels. */
static size_t packed_offset(int k, int n, int jc, int pc) {
    size_t kpt = (size_t)(k / KC) * KP + (size_t)((k % KC) + 1) / 2;
    int nc = n - jc < NC ? n - jc : NC, np = (nc + NR - 1) / NR;
    return (size_t)jc * kpt * 2 + (size_t)np * NR * (size_t)(pc / 2) * 2;
}

/* pre: op(B) packed whole (bf16_pack), or NULL: packed here block by block. */
static void gemm_blocked(MicroKernel micro, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, const uint16_t *pre,
                         float beta, float *c, int ldc) {
    if (gemm_trivial(ta, pre ? 1 : tb, m, n, k, lda, pre ? k : ldb, beta, c, ldc)) return;   /* pre: as B [n, k] */
    /* the packing buffers sized to this product's blocks, not to the largest
     * ones (xaligned zeroes them: for an attention head's 32 x 32 x 64
     * product the full-size blocks cost more than the product) */
    int ncb = n < NC ? n : NC, mcb = m < MC ? m : MC, kpb = ((k < KC ? k : KC) + 1) / 2;
    uint16_t *pb = pre ? NULL : xaligned((size_t)((ncb + NR - 1) / NR) * NR * kpb * 2 * sizeof *pb);
    uint32_t *pa = xaligned((size_t)((mcb + MR - 1) / MR) * MR * kpb * sizeof *pa);
    float tile[MR * NR] __attribute__((aligned(64)));
    for (int jc = 0; jc < n; jc += NC) {
        int nc = n - jc < NC ? n - jc : NC, np = (nc + NR - 1) / NR;
        for (int pc = 0; pc < k; pc += KC) {
            int kc = k - pc < KC ? k - pc : KC, kp = (kc + 1) / 2;
            const uint16_t *bblk = pre ? pre + packed_offset(k, n, jc, pc) : pb;
            if (!pre) pack_b(pb, tb, b, ldb, pc, kc, jc, nc);
            for (int ic = 0; ic < m; ic += MC) {
                int mc = m - ic < MC ? m - ic : MC, na = (mc + MR - 1) / MR;
                pack_a(pa, ta, a, lda, ic, mc, pc, kc);
                for (int jp = 0; jp < np; jp++) {
                    int nr = nc - jp * NR < NR ? nc - jp * NR : NR;
                    for (int ia = 0; ia < na; ia++) {
                        int mr = mc - ia * MR < MR ? mc - ia * MR : MR;
                        micro(kp, pa + (size_t)ia * kp * MR, bblk + (size_t)jp * kp * NR * 2, tile);
                        tile_update(c + (size_t)(ic + ia * MR) * ldc + jc + jp * NR, ldc, tile, mr, nr, alpha, beta, pc == 0);
                    }
                }
            }
        }
    }
    free(pa);
    free(pb);
}

static MicroKernel micro_of(Bf16Kernel kern) {
    if (kern == BF16_MODEL) return micro_model;
#if HAVE_X86
    if (bf16_native()) return micro_avx512;
#endif
    ASSERT(!"BF16_NATIVE needs AVX512_BF16: callers check bf16_native()");
    return micro_model;
}

void bf16_gemm(Bf16Kernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
               const float *b, int ldb, float beta, float *c, int ldc) {
    gemm_blocked(micro_of(kern), ta, tb, m, n, k, alpha, a, lda, b, ldb, NULL, beta, c, ldc);
}

void bf16_pack(Bf16Packed *p, int tb, int k, int n, const float *b, int ldb) {
    size_t kpt = (size_t)(k / KC) * KP + (size_t)((k % KC) + 1) / 2;
    p->k = k;
    p->n = n;
    p->data = xaligned(((size_t)(n + NR - 1) / NR * NR * kpt * 2 + 1) * sizeof *p->data);
    for (int jc = 0; jc < n; jc += NC)
        for (int pc = 0; pc < k; pc += KC) {
            int nc = n - jc < NC ? n - jc : NC, kc = k - pc < KC ? k - pc : KC;
            pack_b(p->data + packed_offset(k, n, jc, pc), tb, b, ldb, pc, kc, jc, nc);
        }
}

void bf16_packed_free(Bf16Packed *p) {
    free(p->data);
    p->data = NULL;
}

void bf16_gemm_packed(Bf16Kernel kern, int ta, int m, float alpha, const float *a, int lda, const Bf16Packed *b,
                      float beta, float *c, int ldc) {
    gemm_blocked(micro_of(kern), ta, 0, m, b->n, b->k, alpha, a, lda, NULL, b->k, b->data, beta, c, ldc);
}
