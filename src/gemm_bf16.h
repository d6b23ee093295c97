/* gemm_bf16.h — matrix products with bf16 inputs and fp32 sums.
 *
 * bf16 ("brain float") is the top half of an IEEE float32: 1 sign bit, the
 * same 8 exponent bits, 7 fraction bits (8 significant bits, relative
 * spacing 2^-7, rounding error at most 2^-8 = 0.4%). A bf16 product here is
 *     C = beta C + alpha op(A) op(B),  op(A), op(B) rounded to bf16,
 * every a_ip * b_pj and every sum in fp32. The product of two bf16 values
 * has at most 16 significant bits, so it is exact in fp32: the only
 * difference between two correct bf16 products is the order of the sums.
 *
 * Two implementations of the same numbers:
 *   native:   our kernel on CPUs with AVX512_BF16 (VDPBF16PS: 16 lanes, each
 *             adds the products of one pair of bf16 values to an fp32 sum;
 *             AMD Zen 4, Intel Cooper Lake and Sapphire Rapids). Compiled
 *             for that target with a function attribute, chosen at run time,
 *             so the rest of the build stays generic;
 *   emulated: everywhere else: round the operands to bf16 values stored as
 *             floats (bf16_round_matrix) and run the fp32 product (BLIS).
 *             Same results up to the order of the sums, no speedup.
 * ops.c's gemm_many picks one (Gemm.bf16); this file is the kernel and the
 * rounding.
 *
 * Rounding: to nearest, ties to even (as VCVTNE2PS2BF16); NaN stays NaN;
 * inf stays inf; a finite value that rounds past the largest bf16 becomes
 * inf; fp32 subnormals (|x| < 2^-126) become 0 of the same sign, as the
 * instructions treat them.
 */
#ifndef TFM_GEMM_BF16_H
#define TFM_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

/* x rounded to bf16 (the 16 bits) and back (exact). Branch-free, so that
 * loops over it vectorise. */
static inline uint16_t bf16_from_float(float x) {
    union { float f; uint32_t u; } v = {x};
    uint32_t u = v.u;
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;   /* to nearest, ties to even; may carry into inf */
    r = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r;   /* NaN: quiet, sign kept */
    r = (u & 0x7f800000u) == 0 ? (u >> 16) & 0x8000u : r;           /* 0, subnormal: signed 0 */
    return (uint16_t)r;
}
static inline float bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }
/* bf16_round(x), its 16 bits stored at *h: the element of a rounded array
 * written with its 16-bit twin (bf16_round_twin; the producers in ops.c). */
static inline float bf16_round_put(float x, uint16_t *h) {
    uint16_t u = bf16_from_float(x);
    *h = u;
    return bf16_to_float(u);
}

/* Rounding a run of floats at once: VCVTNEPS2BF16 (AVX512_BF16) rounds 16
 * floats to their 16 bits in one instruction, to nearest even, subnormals to
 * zero of their sign, NaN quiet: bf16_from_float's bits exactly (test_bf16
 * compares the two on every special value and on random bit patterns), in
 * 3 instructions a vector instead of ~13 integer ones. dispatch.h's
 * bf16_round_cvt says which code rounds here: 1 where the CPU has AVX512F
 * and AVX512_BF16, 0 the integer code (before threads_init, and on every CPU
 * without the instruction: TFM_CPU_FEATURES=-avx512_bf16 runs it on one
 * with). The producers that write rounded values (ops.c, optim.c) compute a
 * block of at most BF16_RUN floats in fp32, then round it here while it is
 * in L1. */
enum { BF16_RUN = 1024 };
/* For i < n: the 16 bits of bf16_from_float(src[i]) into h[i] and the value
 * as a float into dst[i] (either NULL: not written; dst may be src). On one
 * thread. */
void bf16_round_run(float *dst, uint16_t *h, const float *src, size_t n);

/* dst[r, c] = bf16_round(src[r, c]) for a [rows, cols] matrix with row
 * strides ldd, lds; threaded (from serial code) when big. dst may be src. */
void bf16_round_matrix(float *dst, int ldd, const float *src, int lds, int rows, int cols);
/* dst[i] = bf16_round(src[i]) and h[i] = its 16 bits, for i < n (dense);
 * threaded like bf16_round_matrix. */
void bf16_round_twin(float *dst, uint16_t *h, const float *src, size_t n);

/* Which kernel runs here: bf16_native() and bf16_mode(), dispatch.h. */

/* The kernel, on one thread: C [m, n] = beta C + alpha op(A) op(B), shapes
 * and strides as ops.h's gemm (ta/tb: A stored [k, m] / B stored [n, k]).
 * B is packed (converted, pairs of k interleaved) block by block, A likewise.
 * BF16_NATIVE is the AVX512_BF16 micro-kernel (it dies without
 * bf16_native()); BF16_MODEL runs the same blocking and packing with a
 * scalar model of the instruction in its place: it checks the kernel's
 * loops on any CPU (tests), at a fraction of the speed. */
typedef enum { BF16_NATIVE, BF16_MODEL } Bf16Kernel;
void bf16_gemm(Bf16Kernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
               const float *b, int ldb, float beta, float *c, int ldc);

/* A weight matrix packed once for the kernel (op(B) [k, n] of a product
 * whose B never changes: a linear layer's W^T, packed at model load for
 * translation), and the product with it: C [m, n] = beta C + alpha op(A) B. */
typedef struct { uint16_t *data; int k, n; } Bf16Packed;
void bf16_pack(Bf16Packed *p, int tb, int k, int n, const float *b, int ldb);
void bf16_packed_free(Bf16Packed *p);
void bf16_gemm_packed(Bf16Kernel kern, int ta, int m, float alpha, const float *a, int lda, const Bf16Packed *b,
                      float beta, float *c, int ldc);

#endif
