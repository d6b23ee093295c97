/* gemm_dnnl.h — bf16 and fp32 (and int8) products through oneDNN's matmul (Debian libdnnl 2.6).
 *
 * oneDNN picks the best bf16 unit of the CPU by itself: AMX tiles
 * (TDPBF16PS, Intel Sapphire Rapids and later), AVX512_BF16 (VDPBF16PS,
 * AMD Zen 4/5, Intel Cooper Lake), and it runs its own threads (OpenMP,
 * threads_count()). Measured side by side with our kernel (src/gemm_bf16.c)
 * at every product of a base-model training step (dev/bench_bf16.c, AMD
 * EPYC Zen 4, 2 threads): oneDNN 1.76x BLIS sgemm over the twelve products,
 * ours 1.34x; oneDNN won every training shape (doc/precision.md). So
 * ops.c's gemm_many sends bf16 products here on a CPU with AVX512_BF16
 * (or AMX) when tfm is built with oneDNN, from serial code; ours runs them
 * inside parallel regions (decoding) and where this file declines.
 *
 * fp32: where oneDNN has its AVX-512 brgemm kernels, its f32 matmul ran
 * 1.04-1.26x BLIS sgemm at every product of a training step as gemm_many
 * cuts it (one thread, AMD Zen 5), so ops.c sends fp32 products here too
 * (dispatch.h's fp32_route), cut into the same pieces; oneDNN reads the
 * floats where they are, with their strides.
 *
 * Numbers: the same as the other bf16 paths (gemm_bf16.h): the operands are
 * rounded to bf16 here, to nearest even by bf16_from_float, fp32 subnormals
 * to 0, so oneDNN sees exactly the values our kernel and the emulation see;
 * the products are exact in fp32 and summed in fp32 in oneDNN's order.
 *
 * Weights: an operand without its GEMM_BF16_* bit already holds bf16 values
 * (the model's rounded copy). Converting it to 16 bits on every product
 * would cost a pass over it (the 37000 x 512 embedding, for every chunk of
 * the output layer), so its owner may register a 16-bit twin of the
 * buffer (gemm_dnnl_shadow): operands inside a registered buffer are read
 * from the twin, with the same strides.
 *
 * int8 (the end of this file): oneDNN's u8 x s8 -> s32 matmul for
 * gemm_int8.c, on tfm's own packed weights, which need no copy: their
 * layout is one of oneDNN's (BA16a64b4a).
 */
#ifndef TFM_GEMM_DNNL_H
#define TFM_GEMM_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "kernel.h"

/* Whether tfm was built with oneDNN: gemm_dnnl_built(), dispatch.h (which
 * chooses the route from it). */
/* Runs the products g[0..count) with oneDNN (those with g->bf16 != 0 as
 * bf16 products, the others in fp32), in one schedule of pieces on all
 * threads; from serial code only. Gemm.round_c: each piece rounds its
 * block of C. Returns 0, or -1 when it cannot take them (not built with
 * oneDNN, alpha != 1, a beta other than 0 or 1, or oneDNN refused the
 * shape: the caller runs them otherwise; nothing has been written then). */
int gemm_dnnl_many(const Gemm *g, int count);

/* How the threads share a product: on (the default), cut into pieces that
 * our threads take dynamically, each one oneDNN call on one thread, as
 * ops.c's gemm_many does for BLIS (a descheduled thread holds up no
 * barrier: on a shared machine each of oneDNN's barriers can cost a time
 * slice), except a product whose pieces would not be plain (gemm_dnnl.c),
 * which runs whole on oneDNN's threads; off: every product one call,
 * oneDNN's own threads (for dev/bench_bf16.c). */
void gemm_dnnl_pieces(int on);

/* What this file holds between calls, let go (from serial code, with no
 * product of this file running on another thread): the 16-bit copies of
 * operands and the threads' scratchpads, which keep the size of the
 * largest product so far, and the idle int8 primitives. Their owners call
 * it when they go (model_free, translator_free); the next product makes
 * what it needs again. */
void gemm_dnnl_release(void);

/* The primitives asked of oneDNN so far (every path of this file) and the
 * seconds that took, for logs: a training run reports them against its
 * time. */
void gemm_dnnl_made(long *count, double *seconds);

/* ---- batches of small products: the attention core (ops.c) ----------------
 * One product per cell (s, h) of an nb x nh grid (sentences x heads):
 *     C_sh [m, n] = alpha op(A_sh) op(B_sh)      (C overwritten)
 * with X_sh = X + s * xs[0] + h * xs[1] (element offsets) and row stride
 * ldx inside each, transposes as kernel.h's (ta: A_sh stored [k, m]). A and
 * B are bf16, 16 bits each, or (f32) floats; C is fp32. One oneDNN matmul
 * with two batch dimensions does the whole grid (oneDNN's brgemm on
 * AVX512_BF16 or AMX, or its fp32 FMAs): at an attention head's 32 x 32 x 64
 * the bf16 one ran 3.5x BLIS's loop of per-head sgemm on one thread (AMD
 * Zen 4), where a loop of our kernel (which packs per call) ran 0.5x; the
 * f32 one 121 GFLOP/s on one core of an Intel Xeon (model 0xcf), where that
 * loop of sgemm made 15 (doc/precision.md). */
typedef struct {
    int ta, tb, m, n, k;
    float alpha;
    int nb, nh;
    long as[2], bs[2], cs[2];
    int lda, ldb, ldc;
    int f32;             /* A and B are floats (else bf16) */
} GemmBatch;
/* From serial code: the primitives of the batches g[0..count) (oneDNN's
 * cache answers a shape it has seen); prim[i] is g[i]'s, the caller's
 * until gemm_dnnl_batch_free. Also readies a scratchpad for each of our
 * threads, so that gemm_dnnl_batch_run may run inside a parallel region.
 * 0, or -1 (nothing made: not built with oneDNN, or oneDNN refused a
 * shape). */
int gemm_dnnl_batch_prepare(const GemmBatch *g, int count, const void **prim);
void gemm_dnnl_batch_free(const void **prim, int count);
/* Runs a prepared batch on the calling thread (one oneDNN call, on its one
 * thread inside our parallel regions) with its operands at a, b and c
 * (where the grid's cell (0, 0) starts). Dies if oneDNN fails to run it. */
void gemm_dnnl_batch_run(const void *prim, const void *a, const void *b, float *c);

/* The 16-bit twin h [n] of the float buffer f [n] (which must hold bf16
 * values: h[i] = bf16_from_float(f[i])); NULL h removes f's twin. At most
 * a few buffers (a model's parameters; the output layer's dlogits, lent by
 * model.c for its two products only); call with h = NULL before freeing
 * either, or writing f without h. */
void gemm_dnnl_shadow(const float *f, const uint16_t *h, size_t n);

/* int8 (gemm_int8.c's INT8_ONEDNN): c [m, n] (int32, row stride n) =
 * a [m, k] (u8, row stride k) b, the raw sums sum_p a_ip b_pj, no zero
 * point, no scales (the caller folds its compensation and scales in; the
 * sums wrap mod 2^32 as VPDPBUSD's do). b is tfm's packed int8 panels
 * (gemm_int8.h: [ceil(n / 64)][k / 4][64][4] bytes, zero past n), which is
 * oneDNN's blocked weights layout BA16a64b4a, so no weight is copied; k a
 * multiple of 64. Exact only where int8_onednn() (dispatch.h): the caller
 * checks.
 *
 * gemm_dnnl_u8s8_get: the primitive of (m, n, k), kept in a table shared by
 * every thread (at most GEMM_DNNL_I8_KEEP shapes, the least recently used
 * one out), made on first use; and the bytes of scratchpad each thread
 * running it must bring. NULL (scratch 0) when not built with oneDNN or
 * oneDNN refuses the shape or the layout (the caller runs its own kernel).
 * A primitive got stays in the table until put (gemm_dnnl_u8s8_put), once
 * for each get; any thread, from serial code or inside a parallel region.
 * gemm_dnnl_u8s8_run runs it on the calling thread alone with the operands
 * at c, a, b and the caller's scratchpad; dies if oneDNN fails to. */
enum { GEMM_DNNL_I8_KEEP = 128 };
/* oneDNN's primitive cache holds GEMM_DNNL_CACHE primitives (gemm_dnnl.c),
 * unless ONEDNN_PRIMITIVE_CACHE_CAPACITY or DNNL_PRIMITIVE_CACHE_CAPACITY is
 * set; gemm_dnnl_cache says how many it holds (-1 without oneDNN) and
 * whether the environment chose it, for `tfm info`. */
enum { GEMM_DNNL_CACHE = 16384 };
int gemm_dnnl_cache(int *from_env);
const void *gemm_dnnl_u8s8_get(int m, int k, int n, size_t *scratch_bytes);
void gemm_dnnl_u8s8_run(const void *prim, int32_t *c, const uint8_t *a, const int8_t *b, void *scratch);
void gemm_dnnl_u8s8_put(const void *prim);
/* The shapes the int8 table holds now (<= GEMM_DNNL_I8_KEEP), for tests. */
int gemm_dnnl_u8s8_kept(void);
/* The implementation oneDNN runs int8 products with here, e.g.
 * "brg:avx512_core_vnni" or "brg:avx512_core_amx": that of the first int8
 * primitive made (a 64 x 256 x 256 probe if none was), or a reason it has
 * none. For `tfm info` and logs. */
const char *gemm_dnnl_int8_impl(void);

#endif
