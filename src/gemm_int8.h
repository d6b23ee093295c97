/* gemm_int8.h — int8 linear layers for translation (`--precision int8`).
 *
 * y [n, out] = x [n, in] W^T + b with both operands quantized to 8 bits and
 * the products summed exactly in int32, as CTranslate2 and Marian do:
 *
 *   weights, per output row j, once at model load (symmetric, signed):
 *       dw_j = max_k |W_jk| / 127,   w_jk = round(W_jk / dw_j)  in [-127, 127]
 *   activations, per row i of x, at every call (the same rule):
 *       dx_i = max_k |x_ik| / 127,   q_ik = round(x_ik / dx_i)  in [-127, 127]
 *   y_ij = ((float) s_ij * dx_i) * dw_j + b_j,   s_ij = sum_k q_ik w_jk  (int32, exact)
 *
 * (round: to nearest, ties to even; a row of zeros has d = 0 and q = 0.)
 *
 * The kernel: VPDPBUSD (AVX512_VNNI) multiplies 4 *unsigned* bytes by 4
 * signed bytes and adds the 4 products to an int32 lane. So x goes in with a
 * zero point of 128, u_ik = q_ik + 128 in [1, 255], and
 *       sum_k u_ik w_jk = s_ij + 128 sum_k w_jk,
 * so the accumulator of column j starts at c_j = -128 sum_k w_jk (computed
 * once per weight matrix): the zero-point compensation folded into the
 * integer "bias", and s_ij comes out exact. No sum can overflow: |u w| <=
 * 255 * 127 and in <= 65,536 give |s| < 2^31 (int8_quantize_weights checks
 * in). Integer sums are exact in any order, so every kernel, blocking and
 * thread split gives bit for bit the same y: a row's result cannot depend on
 * the other rows of its batch (decode.h's invariance) and the scalar model
 * is the kernel's exact reference.
 *
 * Error (derived in doc/precision.md, checked by tests/test_int8.c): with
 * ex_i = dx_i / 2 and ew_j = dw_j / 2 the largest rounding errors of one
 * element of x_i and W_j,
 *   |y_ij - exact_ij| <= ew_j sum_k |x_ik| + ex_i sum_k |w^_jk| + (float rounding, ~3 ulp of y)
 * where w^ = w dw is the dequantized weight.
 *
 * Kernels, one set of numbers (all listed below; dispatch.c chooses):
 *   INT8_VNNI   AVX512_VNNI (AMD Zen 4/5, Intel Cascade Lake and later): a
 *               6 x 64 tile of int32 sums in 24 zmm registers, compiled with
 *               a function attribute, chosen at run time (int8_vnni());
 *   INT8_MODEL  the same blocking in plain C (what the instruction computes,
 *               lane by lane): the reference for the tests and the path on
 *               CPUs without VNNI (gcc vectorises it with what -march has);
 *   INT8_ONEDNN oneDNN's matmul on the same bytes (AMX-INT8 where the CPU
 *               has it: the default there), and tfm's AMX kernel and its
 *               model: see Int8Kernel below.
 * Attention, softmax and LayerNorm stay float (decode.c). */
#ifndef TFM_GEMM_INT8_H
#define TFM_GEMM_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "dispatch.h"   /* Int8Kernel */

/* A weight matrix W [out, in] quantized per row and packed for the kernel:
 * panels of 64 output columns; within a panel, for each group of 4 inputs,
 * 64 columns x 4 bytes (the layout VPDPBUSD reads: one zmm = 16 columns x
 * 4 inputs; an AMX B tile: 16 columns x 64 inputs, rows 256 bytes apart).
 * Inputs are padded to kp = in rounded up to 64 (an AMX tile row), columns
 * to np * 64, with zero weights. */
typedef struct {
    int8_t *data;      /* [np][kp / 4][64][4] */
    float *scale;      /* [np * 64] dw_j (0 past out) */
    int32_t *comp;     /* [np * 64] c_j = -128 sum_k w_jk */
    int out, in, kp, np;
} Int8Matrix;

enum { INT8_NR = 64, INT8_MR = 6 };

/* Quantize W [out, in] (row stride ldw). Returns 0, or -1 + errorf when in
 * is too large for exact int32 sums. */
int int8_quantize_weights(Int8Matrix *q, const float *w, int out, int in, int ldw);
void int8_matrix_free(Int8Matrix *q);
/* Bytes int8_quantize_weights allocated for q (resident model memory). */
size_t int8_matrix_bytes(const Int8Matrix *q);
/* dst = the rows rows[0..n) of src, in that order (a vocabulary shortlist's
 * output layer, decode.c): the same bytes, scales and compensations, so a
 * product with dst gives bit for bit the columns of src's. Rows must be in
 * [0, src->out). -1 + errorf. */
int int8_matrix_gather(Int8Matrix *dst, const Int8Matrix *src, const int *rows, int n);
/* The dequantized weight W^_jk = w_jk dw_j (tests, and the embedding rows
 * decode.c looks up when the output layer is quantized). */
float int8_weight(const Int8Matrix *q, int j, int k);
/* dst [in] = row j of W^ (the dequantized weights). */
void int8_row(float *dst, const Int8Matrix *q, int j);

/* One row x [in] -> q [in] (signed, as the formula above), returns dx. The
 * rule both operands use. */
float int8_quantize_row(int8_t *q, const float *x, int in);

/* The kernels (dispatch.h's Int8Kernel; int8_kernel() there says which
 * runs here, TFM_INT8_KERNEL forces one):
 *   INT8_VNNI, INT8_MODEL  above;
 *   INT8_AMX        AMX-INT8 tiles (Intel Sapphire Rapids and later): per
 *                   panel, a 32 x 32 block of y in 4 tiles of 16 x 16 int32
 *                   sums, TDPBUSD on 16 x 64 byte tiles of u and of the
 *                   panel. It has never run on hardware: not chosen by
 *                   default (TFM_INT8_KERNEL=amx asks for it);
 *   INT8_AMX_MODEL  the same loops with a scalar model of the tile
 *                   instructions (tests, on any CPU);
 *   INT8_ONEDNN     oneDNN's u8 x s8 -> s32 matmul (gemm_dnnl.h) on the same
 *                   u and the same packed weights (the panels above are
 *                   oneDNN's blocked layout BA16a64b4a), which uses AMX-INT8
 *                   or VNNI as it finds them; tfm adds c_j and applies the
 *                   same float epilogue, so the sums and the bits are the
 *                   same as every other kernel's. */
/* Scratch for the quantized rows of x: grows as needed, owned by the caller
 * (one per thread that calls int8_linear). */
typedef struct { uint8_t *buf; size_t cap; } Int8Scratch;
void int8_scratch_free(Int8Scratch *s);

/* y [n, out] (row stride ldy) = x [n, in] (row stride ldx) W^T + b (b
 * [out] or NULL), by `kern`. From serial code, big products share the
 * threads (threads_count()); inside a parallel region they run on the
 * calling thread. */
void int8_linear(Int8Kernel kern, float *y, int ldy, const float *x, int ldx, int n, const Int8Matrix *w,
                 const float *b, Int8Scratch *s);

#endif
