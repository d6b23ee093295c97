/* gemm_amx.h — bf16 products on Intel's AMX tiles, tfm's own kernel.
 *
 * C [m, n] = beta C + alpha op(A) op(B), op(A) and op(B) rounded to bf16 as
 * they are packed, the sums in fp32: the numbers of gemm_bf16.h's kernel up
 * to the order of the sums (and of the tiles' own rounding inside each
 * pair of products). Shapes and strides as ops.h's gemm (ta: A stored
 * [k, m]; tb: B stored [n, k]).
 *
 * TDPBF16PS takes a tile of 16 rows x 32 bf16 of A and one of 16 pair rows
 * x 16 columns x 2 bf16 of B and adds, to each of a 16 x 16 fp32 tile of C,
 * the sum over 16 pairs of a[2r] b[r].lo + a[2r+1] b[r].hi. The kernel keeps
 * a 32 x 32 block of C in four tiles, two of A and two of B beside them:
 * op(B) is packed once per call into panels of 32 columns in the pair
 * layout (a weight's kept until the weights change: amx_weights), op(A) a
 * chunk of rows at a time, tile after tile; both are padded
 * with zeros to multiples of 32 (the padding adds 0 x 0), and each block
 * goes through a 32 x 32 buffer into C (beta, alpha, the edges).
 *
 * AMX_TILES runs the tile instructions (Linux must have granted the tile
 * data: cpu_amx_request, which dispatch.c's route asks for); AMX_MODEL
 * runs the same loops with a scalar model of the tiles in their place, on
 * any CPU, so that the tests check the packing and the loops everywhere.
 * dev/bench_amx measured the kernel against oneDNN 2.6.3's AMX matmul
 * (doc/precision.md). */
#ifndef TFM_GEMM_AMX_H
#define TFM_GEMM_AMX_H

#include <stddef.h>

typedef enum { AMX_TILES, AMX_MODEL } AmxKernel;

/* Threaded from serial code (threads_count()), one thread inside a
 * parallel region. */
void amx_bf16_gemm(AmxKernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                   const float *b, int ldb, float beta, float *c, int ldc);
/* The same with C = bias [n] (every row) + alpha op(A) op(B) where bias is
 * not NULL (beta 0): the tiles start from the bias, no pass over C first. */
void amx_bf16_gemm_bias(AmxKernel kern, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                        const float *b, int ldb, const float *bias, float beta, float *c, int ldc);

/* The floats [w, w + n) hold weights (n = 0: none): an op(B) inside them,
 * read by a product from serial code, is packed once and its panels kept
 * for every later product that reads it the same way, until the next call,
 * which lets them all go. So call it each time the weights are written (the
 * model: whenever it writes its bf16 copy, model.c), or the products read
 * the weights as they were. amx_keep(0) keeps nothing (tests: the same bits
 * either way); amx_keep(1), the default, again. */
void amx_weights(const float *w, size_t n);
void amx_keep(int on);

/* Tests: 1 packs the operands element by element, as the blocks at the
 * edges are (0: whole blocks in vectors, the default); the same bits. */
void amx_pack_scalar(int on);

/* Tests and dev/bench_amx: k in passes of kc at a time (rounded up to a
 * multiple of 32; 0: the default, 256; a kc of k or more: one pass). The
 * same bits for every kc (gemm_amx.c, the loops). */
void amx_k_pass(int kc);

/* Lets go of the grow-only packing buffers (serial code). */
void amx_release(void);

#endif
