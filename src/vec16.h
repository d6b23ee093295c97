/* vec16.h — 16 floats as one vector, for the loops that gcc would not keep in
 * registers on its own (ops_infer.c's decoder attention, ops.c's attention
 * heads). gcc's vector extension: one AVX-512 register, or a pair of AVX
 * ones, or whatever the target has; element-wise IEEE arithmetic (no
 * contraction into FMAs under -std=c11), so the results are those of the
 * same scalar code. */
#ifndef TFM_VEC16_H
#define TFM_VEC16_H

#include <string.h>

typedef float vf16 __attribute__((vector_size(64)));
/* gcc warns that returning a 64-byte vector changes the ABI on targets
 * without AVX-512; these helpers are static inline, so no call ever crosses
 * an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"
static inline vf16 load16(const float *p) { vf16 v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, vf16 v) { memcpy(p, &v, sizeof v); }

/* Sum of 16 floats by a fixed tree: a[l] + a[l + 8], then + 4, + 2, + 1.
 * The order never changes, so neither does the result; as vector shuffles
 * (gcc's scalar loop over a[] stalled on its own stores). */
static inline float vsum16(vf16 v) {   /* __builtin_shufflevector: gcc >= 12 and clang */
    v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
    v += __builtin_shufflevector(v, v, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    v += __builtin_shufflevector(v, v, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    return v[0];
}
static inline float hsum16(const float *a) { return vsum16(load16(a)); }

/* Each of v rounded to a bf16 value: gemm_bf16.h's bf16_round on 16 lanes
 * at once, as integer vector operations (to nearest, ties to even; NaN
 * quiet with its sign; zeros and subnormals to zero of their sign), or by
 * VCVTNEPS2BF16 where the build targets AVX512_BF16 and the CPU has it
 * (dispatch.h's bf16_round_cvt, chosen at run time): the same bits. */
typedef unsigned vu16 __attribute__((vector_size(64)));
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
extern int bf16_round_cvt;   /* dispatch.h */
#endif
static inline vf16 bf16_round16(vf16 v) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    if (bf16_round_cvt) {
        __m512 x;
        memcpy(&x, &v, sizeof x);
        __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x)), 16);
        memcpy(&v, &w, sizeof v);
        return v;
    }
#endif
    vu16 u, nan, tiny;
    memcpy(&u, &v, sizeof u);
    vu16 r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    nan = (vu16)((u & 0x7fffffffu) > 0x7f800000u);   /* all ones where true */
    tiny = (vu16)((u & 0x7f800000u) == 0);
    r = (r & ~nan) | (((u & 0xffff0000u) | 0x400000u) & nan);
    r = (r & ~tiny) | (u & 0x80000000u & tiny);
    memcpy(&v, &r, sizeof v);
    return v;
}

/* r [16] as the rows of a 16 x 16 block, transposed in place (row i becomes
 * column i): four stages, stage h swapping the off-diagonal h x h blocks of
 * every 2h x 2h block, rows i and i + h at a time as two two-input shuffles
 * (vpermt2ps); 64 shuffles for 256 floats. */
static inline void transpose16(vf16 r[16]) {
#define T16_LIST(...) __VA_ARGS__
#define T16_STAGE(H, LO, HI)                                         \
    for (int i = 0; i < 16; i++)                                     \
        if (!(i & H)) {                                              \
            vf16 a = r[i], b = r[i + H];                             \
            r[i] = __builtin_shufflevector(a, b, T16_LIST LO);       \
            r[i + H] = __builtin_shufflevector(a, b, T16_LIST HI);   \
        }
    /* lane c of the pair's new top row: its own c below the block, the bottom row's c - h above it */
    T16_STAGE(8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
              (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
    T16_STAGE(4, (0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
              (4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
    T16_STAGE(2, (0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
              (2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
    T16_STAGE(1, (0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
              (1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
#undef T16_STAGE
#undef T16_LIST
}

#endif
