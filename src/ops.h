/* ops.h — the kernels of the Transformer, forward and backward.
 *
 * Everything is row-major float32. A "[n, D]" matrix is n rows of D floats.
 * Backward functions ADD into parameter gradients (dW, db, dgamma, ...), as
 * the caller zeroes them once per update; whether an input gradient (dx) is
 * overwritten or accumulated is said per function.
 *
 * Threads (dispatch.h): gemm() and gemm_many() are called from serial code and
 * share threads_count() threads out as independent single-threaded BLIS
 * calls (ops.c says how); gemm1() is the single-threaded variant for use
 * inside our own OpenMP loops. Every other kernel here opens its own
 * `#pragma omp parallel for` over rows / (sentence, head) pairs, so call them
 * from serial code too.
 *
 * Small work (below PAR_MIN = 64k elements, or m*n*k below 8M for a
 * product: parallel.h) runs on one thread: a parallel region costs a scheduler time
 * slice when another process holds the other core.
 *
 * The last section holds the inference kernels of incremental decoding
 * (decode.c): the same math as their training counterparts, computed so
 * that a row's result never depends on the other rows of the call. Decoding
 * also uses embedding_forward (T = 1, pos0 = step), residual_dropout and
 * relu_dropout_forward with p = 0. Everything here is reentrant except
 * attention_forward with dropout > 0 or bf16 and attention_backward, which
 * share grow-only workspaces (training only). ops.c is the only file that
 * calls BLIS's products; dispatch.c chooses its kernels and threads.
 */
#ifndef TFM_OPS_H
#define TFM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_amx.h"
#include "gemm_bf16.h"
#include "kernel.h"
#include "modeldefs.h"

/* ---- matrix products (BLIS) ------------------------------------------
 * C[m, n] = beta * C + alpha * op(A) op(B), row-major with leading
 * dimensions (row strides) lda, ldb, ldc; op(X) = X or X^T (ta/tb = 1).
 * A is stored [m, k] when ta == 0 and [k, m] when ta == 1; B likewise
 * [k, n] or [n, k]. Transposes are strides, never copies. */
void gemm(int ta, int tb, int m, int n, int k, float alpha,
          const float *a, int lda, const float *b, int ldb,
          float beta, float *c, int ldc);
/* Several independent products at once (threads shared among them),
 * each described by a Gemm (kernel.h).
 * bf16 != 0 makes a product a bf16 one (gemm_bf16.h: op(A), op(B) rounded to
 * bf16, sums in fp32): the AVX512_BF16 kernel where the CPU has it, else the
 * fp32 product of rounded copies (same numbers up to the order of the sums).
 * Its bits say which operands to round: GEMM_BF16_A, GEMM_BF16_B; an operand
 * without its bit must already hold bf16 values (weights rounded once per
 * update, as the model keeps them), so that both ways give the same numbers. */
void gemm_many(const Gemm *g, int count);
/* Registers [p, p + n) as fp32 master weights that a bf16 product on the
 * emulated route rounds into its copy whatever its bits say (model.c: the
 * emulated route keeps no rounded copy of the weights with recompute); p
 * with n 0 lets p's range go. A few models at once at most. */
void gemm_bf16_masters(const float *p, size_t n);
/* Whether the BF16_AMX route (dispatch.h) runs the tiles (AMX_TILES, the
 * default) or their scalar model (tests: the route on any CPU). */
void gemm_amx_kernel(AmxKernel k);

/* Lets go of the grow-only workspaces of this file (the threads' partial
 * sums of gemm_many, rounded copies of bf16 operands, the attention's
 * backward blocks and 16-bit copies) and of gemm_dnnl.c's (gemm_dnnl_release):
 * they keep the size of the largest training batch so far. From serial
 * code, with nothing of this file running; model_free calls it, the next
 * product makes what it needs again. */
void ops_release(void);
/* The same on one thread, for calls from inside an OpenMP region. */
void gemm1(int ta, int tb, int m, int n, int k, float alpha,
           const float *a, int lda, const float *b, int ldb,
           float beta, float *c, int ldc);


/* ---- linear layer: y = x W^T + b (torch.nn.Linear) --------------------
 * x [n, in], W [out, in], b [out] (or NULL), y [n, out].
 * bf16 = LINEAR_BF16: the products take x and dy rounded to bf16, and W as
 * it is, which must then hold bf16 values (the model's rounded copy) or, on
 * the oneDNN route, have a 16-bit twin (gemm_dnnl_shadow, which the model
 * keeps instead of the copy; the other routes then round W too);
 * LINEAR_BF16_X_HELD: the same with x already holding bf16 values (its
 * producer wrote them rounded: no pass rounds it again); 0: fp32.
 * Both also take | LINEAR_ROUND_OUT: the product's output (y forward, dx
 * backward) written rounded to bf16 values by its pieces (Gemm.round_c),
 * for a consumer that reads them as such. */
enum { LINEAR_BF16 = 1, LINEAR_BF16_X_HELD = 2, LINEAR_ROUND_OUT = 4 };
void linear_forward(float *y, const float *x, const float *w, const float *b,
                    int n, int in, int out, int bf16);
/* dW [out, in] += dy^T x; db [out] += column sums of dy (db may be NULL);
 * dx [n, in] = dy W (accumulate_dx = 0) or += dy W (1); dx may be NULL.
 * bf16: dy must hold bf16 values already, as its producer wrote them (the
 * backward of the output's dropout, of the ReLU, of the attention core:
 * their round_bf16): the products and db read it as it is. */
void linear_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int n, int in, int out,
                     int accumulate_dx, int bf16);

/* ---- LayerNorm (Ba et al. 2016) over the last dimension, eps LAYERNORM_EPS (modeldefs.h)
 * y = gamma * (x - mean) / sqrt(var + eps) + beta, per row of x [n, D].
 * mean, rstd [n] are saved for backward (both may be NULL at inference).
 * y may alias x. round: y written rounded to bf16 values (bf16_round), for
 * the bf16 products that read it (pre-norm: a sublayer's only input), in the
 * same pass; y16: NULL, or [n, D] given y's 16 bits too (round only: the
 * oneDNN route's products read those, lent by model.c, gemm_dnnl_shadow). */
void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
                       const float *gamma, const float *beta, int n, int D, int round, uint16_t *y16);
/* y = LayerNorm(x) again from the mean and rstd layernorm_forward saved:
 * bit for bit its y (and y16) with the same round (one expression,
 * test_ops), so the model keeps the inputs of its LayerNorms and remakes
 * the outputs in backward. */
void layernorm_apply(float *y, const float *x, const float *mean, const float *rstd,
                     const float *gamma, const float *beta, int n, int D, int round, uint16_t *y16);
/* dgamma, dbeta [D] +=; dx [n, D] = (accumulate 0) or += (1) the input
 * gradient. dx may alias dy when accumulate == 0. */
void layernorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                        const float *x, const float *mean, const float *rstd,
                        const float *gamma, int n, int D, int accumulate);

/* Fused, for the post-norm sublayer (section 3.1: LayerNorm(x + Sublayer(x))):
 *   forward:  res = residual_dropout(x, sub); ln = layernorm_forward(res)
 *             (round, ln16: as layernorm_forward's round, y16)
 *   backward: dx = layernorm_backward(dy) (accumulate 0); dout = dropout(dx);
 *             and with also (y not NULL) the sublayer below's output again,
 *             layernorm_apply(also->y, also->x, ..., also->round, also->y16)
 * in one pass over the rows each (one parallel region instead of two or
 * three, the intermediate read back from cache): bit for bit the unfused
 * calls (test_ops). res, ln [n, D], mean, rstd [n]; the same seed as the
 * unfused dropout (element r * D + c); round_bf16: dout written rounded to
 * bf16, and dout16 (or NULL) given its 16 bits, as dropout's y and y16. dx
 * may alias dy. */
typedef struct {
    float *y;
    const float *x, *mean, *rstd, *gamma, *beta;
    int round;      /* y written rounded to bf16 (what the bf16 products read), */
    uint16_t *y16;  /* and its 16 bits here where not NULL */
} LayerNormRemake;
void residual_dropout_layernorm(float *res, float *ln, float *mean, float *rstd, const float *x, const float *sub,
                                const float *gamma, const float *beta, int n, int D, float p, uint64_t seed, int round,
                                uint16_t *ln16);
void layernorm_backward_dropout(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *mean, const float *rstd,
                                const float *gamma, int n, int D, float *dout, float p, uint64_t seed,
                                int round_bf16, uint16_t *dout16, const LayerNormRemake *also);

/* ---- softmax over rows ------------------------------------------------
 * In place over x [n, len]: x = softmax(x) / log_softmax(x) per row. */
void softmax_forward(float *x, int n, int len);
void log_softmax(float *x, int n, int len);
/* dx [n, len] = y * (dy - sum_j dy_j y_j) with y = softmax output.
 * dx may alias dy. */
void softmax_backward(float *dx, const float *dy, const float *y, int n, int len);

/* ---- elementwise ------------------------------------------------------ */
/* Inverted dropout with a counter-based mask: element i of a call with
 * `seed` is kept iff hash(seed, i) >= p * 2^32, kept elements are scaled by
 * 1 / (1 - p). The mask is never stored: backward calls the same function
 * with the same seed (d_in = dropout(d_out)). Deterministic whatever the
 * thread count. p == 0 is a copy (or nothing when y == x). y may alias x.
 * round_bf16: y written rounded to bf16 (a sublayer's output gradient, for
 * bf16 products and bias sums that read it as it is: linear_backward);
 * y16: NULL, or [n] given y's 16 bits too (round_bf16 only: for the oneDNN
 * route's products, lent by model.c, gemm_dnnl_shadow). */
void dropout(float *y, const float *x, size_t n, float p, uint64_t seed, int round_bf16, uint16_t *y16);
/* out = x + dropout(sub): the residual connection of section 3.1 with the
 * residual dropout of section 5.4. out may alias x or sub. */
void residual_dropout(float *out, const float *x, const float *sub, size_t n,
                      float p, uint64_t seed);
/* In place: x = dropout(max(0, x)) (the FFN's ReLU and optional ReLU
 * dropout), rounded to bf16 if round_bf16 (the bf16 products read it as it
 * is: linear's LINEAR_BF16_X_HELD; a positive value below bf16's smallest
 * normal, 2^-126, becomes 0, the one change of the mask below); x16: NULL,
 * or [n] given x's 16 bits too (round_bf16 only, as dropout's y16). */
void relu_dropout_forward(float *x, size_t n, float p, uint64_t seed, int round_bf16, uint16_t *x16);
/* Given h = relu_dropout_forward's output, dx = dh where h > 0 (scaled by
 * 1/(1-p)), else 0: a kept positive unit is the only one with a gradient,
 * so the mask of both ReLU and dropout is read from h itself. dx may alias dh.
 * round_bf16: dx written rounded to bf16 (fc1's dy, as linear_backward takes it),
 * and its 16 bits into dx16 where not NULL (as dropout's y16). */
void relu_dropout_backward(float *dx, const float *dh, const float *h, size_t n, float p, int round_bf16,
                           uint16_t *dx16);

/* ---- embeddings, section 3.4 and 3.5 ----------------------------------
 * pe [max_pos, D]: PE(pos, 2i) = sin(pos / 10000^(2i/D)),
 *                  PE(pos, 2i+1) = cos(pos / 10000^(2i/D)). */
void positional_encoding(float *pe, int max_pos, int D);
/* x [n, D]: row r = E[tok[r]] * sqrt(D) + pe[pos0 + r % T]; rows are n/T
 * sentences of T positions (incremental decoding: T = 1, pos0 = step). */
void embedding_forward(float *x, const int *tok, int n, int T, int pos0,
                       const float *E, const float *pe, int D);
/* dE [V, D] += sqrt(D) * dx[r] at row tok[r]. */
void embedding_backward(float *dE, const float *dx, const int *tok, int n, int D);

/* ---- multi-head scaled dot-product attention, section 3.2 --------------
 * A SeqView is a batch of sequences of D = H * Dk floats: row t of sentence
 * b starts at data + b * bs + t * rs, head h owns columns h*Dk .. h*Dk+Dk-1.
 * Dense [B, T, D]: seq_view(p, T, D). A key/value cache of capacity L per
 * sentence: (SeqView){cache, L * D, D}. */
typedef struct { float *data; long bs, rs; } SeqView;
static inline SeqView seq_view(float *p, int T, int D) { SeqView s = {p, (long)T * D, D}; return s; }

typedef struct {
    int B, H, Tq, Tk, Dk;    /* sentences, heads, query rows, key rows, head size */
    const int *k_len;        /* [B]: keys j >= k_len[b] are padding, never attended; NULL: all */
    int causal;              /* 1: query row i sees only keys j <= q_pos0 + i */
    int q_pos0;              /* position of query row 0 (incremental decoding: step) */
    float dropout;           /* attention dropout on the weights (0 off) */
    uint64_t seed;           /* its mask (see dropout()) */
    int bf16;                /* 1: the six products (Q K^T, P V and the four of backward) take
                              * their operands rounded to bf16, sums in fp32 (gemm_bf16.h);
                              * softmax, its backward and dropout stay fp32; the forward
                              * writes out, the backward dq, dk, dv rounded to bf16 (W^O's and
                              * the projections' bf16 products and bias sums read them so:
                              * linear_forward, linear_backward). 0: fp32 */
    int held;                /* bf16: q, k, v and dout hold bf16 values already (their
                              * producers wrote them rounded): the float operands are read
                              * where they are instead of rounded copies, forward and backward */
    uint16_t *d16[3];        /* backward, bf16: NULL, or dense [B * Tq or B * Tk, D] given dq's,
                              * dk's, dv's 16 bits too (dq, dk, dv dense then), as the rounded
                              * floats are written (the twins model.c lends to the projections'
                              * products on the oneDNN route, gemm_dnnl_shadow) */
} AttnShape;

/* out_i = sum_j P_ij v_j with P = softmax(q_i k_j^T / sqrt(Dk) over visible
 * j), per sentence and head; dropout on P if s->dropout > 0. probs
 * [B, H, Tq, Tk] receives P before dropout (masked entries are 0); it is
 * saved for backward, or a scratch at inference. A query row with no
 * visible key gets out = 0. */
void attention_forward(SeqView out, SeqView q, SeqView k, SeqView v,
                       float *probs, const AttnShape *s);
/* Gradients of attention_forward: dq, dk, dv are overwritten (padding keys
 * get 0). Same s (same seed) as the forward.
 * Both run either as oneDNN batched matmuls, one per group of sentences
 * (all heads) that our threads share: bf16 operands on the oneDNN route
 * (dispatch.h's bf16_route), else float ones (with s->bf16 rounded to bf16
 * values); or head by head in ops.c's loops, the products register-blocked
 * on the thread's copies of the head's operands (rounded with s->bf16).
 * attention_on_dnnl says which. Same numbers up to the order of the sums
 * (doc/precision.md). */
void attention_backward(SeqView dq, SeqView dk, SeqView dv, SeqView dout,
                        SeqView q, SeqView k, SeqView v, const float *probs,
                        const AttnShape *s);
/* Whether the core's bf16 products take 16-bit operands: oneDNN's batches
 * on the oneDNN and AMX routes (on AMX, its tiles: tfm's tile kernel runs
 * the linear layers, not the core's small batched products); else floats
 * rounded to bf16 values. */
int attention_core16(void);
/* Where the core runs. ATTN_AUTO (the default): on oneDNN where it is
 * built, except where the per-head loops are faster: float operands (fp32,
 * or bf16 without attention_core16) in heads of Dk <= ATTN_LOOPS_MAX_DK; and
 * in the loops from inside a parallel region. ATTN_LOOPS: the loops
 * always; ATTN_DNNL: oneDNN wherever it can (tests, dev/bench_attn). */
typedef enum { ATTN_AUTO, ATTN_LOOPS, ATTN_DNNL } AttnCode;
void attention_code(AttnCode c);
/* 1 where attention_forward and _backward run s on oneDNN, 0 in the loops. */
int attention_on_dnnl(const AttnShape *s);
/* At the Multi30k recipe's 20 x 20 x 32 heads the loops made the training
 * step 1.04x faster in fp32 (and the bf16 emulation's with its rounding
 * in their stores, 1.0x fp32); at the base model's 32 x 32 x 64 they run
 * 0.84-0.95x oneDNN's (AMD Zen 5, doc/training.md). On an Intel Xeon
 * (model 0xcf) and an AMD Zen 4 the recipe's step ran within +-1.3% either
 * way on 2 threads, the loops' core 1.3x faster on 16 (doc/precision.md).
 * Only where the build targets AVX-512: the loops' 16-float vectors
 * (vec16.h) are one register there; on an AMD EPYC Zen 3 (AVX2) they made
 * the recipe's core 6-7x slower than oneDNN's (0.21 against 0.029-0.034 s a
 * step; the step 1.6x slower), so there every head goes to oneDNN. */
#ifdef __AVX512F__
#define ATTN_LOOPS_MAX_DK 32
#else
#define ATTN_LOOPS_MAX_DK 0
#endif

/* ---- output layer: fused log-softmax + label-smoothed cross-entropy ----
 * logits [n, V]; target [n], rows with target < 0 are ignored (gradient 0).
 * Label smoothing as tensor2tensor (the paper's code) and today's fairseq:
 * the smoothed target puts q_y = 1 - eps on the truth and eps / (V - 1) on
 * every other token. Per row: loss = -sum_j q_j log p_j, nll = -log p_y.
 * Adds the sums over rows to *loss and *nll. If grad_scale != 0, overwrites
 * logits with d(grad_scale * loss)/d(logits) = grad_scale * (p - q) (0 for
 * ignored rows), rounded to bf16 if round_bf16 (it feeds the output
 * layer's bf16 products only: they read it as it is, GEMM_BF16_HELD); else
 * the logits are left as they are. grad16: NULL, or [n, V] given the same
 * gradient in 16 bits (round_bf16 and grad_scale != 0 only; the oneDNN
 * route's products read those: model.c lends them, gemm_dnnl_shadow). If logp != NULL, logp[r] = log
 * p(target[r]) (0 for ignored rows). */
void cross_entropy_forward_backward(float *logits, const int *target, int n, int V,
                                    float eps, float grad_scale,
                                    double *loss, double *nll, float *logp, int round_bf16, uint16_t *grad16);

/* ---- inference kernels (incremental decoding) ---------------------------
 * Every output row is computed by the same instructions in the same order
 * whatever the other rows of the call are (so a sentence's translation does
 * not depend on its batch or the thread count), and small calls open no
 * thread team. They may be called from inside an OpenMP region (decoding
 * runs one batch per thread); they then run on that one thread. */

/* y [n, out] = x [n, in] W^T (+ b), W [out, in], b [out] or NULL. Unlike
 * linear_forward, BLIS's native kernels only (its "sup" kernels for small n
 * round differently depending on n). */
void linear_rows(float *y, const float *x, const float *w, const float *b, int n, int in, int out, int bf16);

/* A linear layer whose W is also stored pre-packed in the layout of BLIS's
 * micro-kernel, so that no product packs it again (decoding steps have few
 * rows: packing W would cost up to a quarter of the product). The products
 * run BLIS's loops around its own micro-kernel with its own k-blocking:
 * bit for bit the results of linear_rows (test_decode checks it). */
typedef struct {
    const float *w, *b;      /* W [out, in] (NULL when packed: never read), b [out] or NULL (not owned) */
    int in, out;
    float *pw;               /* packed W (owned), or NULL: linear_rows is used */
    int bf16;                /* bf16 products: x and W rounded */
    Bf16Packed p16;          /* bf16 on an AVX512_BF16 CPU: W packed for its kernel (owned) */
} PackedLinear;
/* pack = 0, or a BLIS kernel that does not allow it: pw = NULL, and w is
 * read by every product (it must outlive L); packed, L keeps no pointer to
 * w. bf16 = 1: the products are bf16 ones (gemm_bf16.h; w may hold any
 * float values: they are rounded here): the bf16 kernel on W packed once
 * where the CPU has AVX512_BF16, else BLIS's as above on W rounded as it is
 * packed, the rows of x rounded as they are packed. linear_rows with bf16 =
 * 1 likewise (the kernel, or BLIS on rounded copies of x and, per call, W).
 * Each row's result stays independent of the other rows either way. */
void packed_linear_init(PackedLinear *L, const float *w, const float *b, int out, int in, int pack, int bf16);
/* Packed from chosen rows of a matrix: row o of W is w + rows[o] * in
 * (rows NULL: w + o * in), read where it lies, no copy of W made first (a
 * vocabulary shortlist's output layer: its candidates' rows of E). The same
 * panels as packed_linear_init of those rows copied out; only where
 * packed_linear_packs(1, bf16). */
void packed_linear_init_rows(PackedLinear *L, const float *w, const int *rows, const float *b, int out, int in, int bf16);
/* Whether packed_linear_init(..., pack, bf16) makes a packed copy of W
 * here (then the caller may free W after it). */
int packed_linear_packs(int pack, int bf16);
void packed_linear_free(PackedLinear *L);
/* Bytes of the copies L owns (packed weights). */
size_t packed_linear_bytes(const PackedLinear *L);
/* Floats of scratch packed_linear_forward needs for a packed layer (per
 * thread); 0 when no layer can be packed. */
size_t packed_scratch_floats(void);
/* y [n, out] = x [n, in] W^T + b. */
void packed_linear_forward(float *y, const float *x, const PackedLinear *L, int n, float *scratch);

/* y = LayerNorm(x) per row of x [n, D] (eps LAYERNORM_EPS); y may alias x. */
void layernorm_rows(float *y, const float *x, const float *gamma, const float *beta, int n, int D);

/* lse[i] = log sum_j exp(x[i, j]) per row of x [n, V], so that
 * log_softmax(x) = x - lse. */
void logsumexp_rows(float *lse, const float *x, int n, int V);

/* Multi-head scaled dot-product attention for one query row q [D = H * Dk]
 * (sections 3.2.1, 3.2.2): out_h = sum_j softmax_j(q_h . k_jh / sqrt(Dk))
 * v_jh over nk keys, per head h. Key and value j are the D-float rows
 * keys[j] and vals[j], which may lie anywhere (the cache blocks of several
 * decoding steps). scratch: H * nk floats. bf16 = 1: the two products take
 * bf16 operands, as attention_forward's with AttnShape.bf16 (so that
 * incremental decoding scores as the model does): q, the keys and the
 * values must already hold bf16 values (the caller rounds them once, as
 * they are made); the probabilities are rounded here. */
void attention_row(float *out, const float *q, const float *const *keys, const float *const *vals,
                   int nk, int H, int Dk, float *scratch, int bf16);

/* ---- exp that vectorises --------------------------------------------------
 * Cephes' expf: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-7
 * polynomial, 2^n by building the float's exponent bits. Relative error
 * ~2e-7 (a few ulp), for x in [-87, 88]; below -87 it returns ~1e-38 (not 0),
 * which no softmax here can tell from 0. libm's expf does not vectorise
 * without -ffast-math, and the output layer takes ~150M of these per step; decoding
 * normalises every vocabulary entry with it too (logsumexp_rows). */
static inline float fast_expf(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* round x / ln2 to the nearest integer by the 1.5 * 2^23 trick */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    union { float f; int32_t i; } u = {t};
    /* = n as an integer; unsigned so that a NaN input (garbage bits) cannot
     * overflow a signed int: the result is NaN anyway through p. */
    uint32_t e = (uint32_t)u.i - 0x4B400000u;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { uint32_t i; float f; } s = {(e + 127u) << 23};
    return p * s.f;
}

#endif
