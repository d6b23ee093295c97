/* decode.c — translation: incremental Transformer decoding and beam search
 * (paper section 6.1), and `tfm translate`. See decode.h for the search.
 *
 * Layout of one decoding batch (B sentences, D = d_model, H heads of Dk):
 *   encoder      the source tokens of all sentences packed end to end, no
 *                padding: sentence s is rows src_off[s] .. + src_n[s] (its
 *                tokens and EOS) of every [Ntok, D] matrix;
 *   cross K/V    per decoder layer, the encoder output projected by W^K, W^V
 *                of that layer's encoder-decoder attention: [Ntok, D] each,
 *                computed once per batch;
 *   self K/V     per step t, one [n_t, D] block of keys and one of values per
 *                decoder layer for the n_t hypotheses live at step t. A step
 *                never copies a cache: hypothesis i at step t reads the keys
 *                of its ancestors through anc[i][j] = its ancestor's row at
 *                step j (hypotheses that share a prefix share its keys).
 *
 * Determinism: the output of a sentence must not depend on which sentences
 * share its batch or on the thread count. The matrix products go to BLIS's
 * native gemm with "small/unpacked" (sup) handling disabled: the native
 * kernels sum each C element over k in the same order whatever m is and
 * whichever thread computes its tile, whereas BLIS switches between sup and
 * native kernels (which round differently) depending on m. Everything else
 * (attention, LayerNorm, logsumexp) runs row by row with a fixed summation
 * order and never looks at padding (there is none).
 *
 * Threads: with several batches to decode, each thread decodes whole
 * batches with single-threaded kernels (no synchronisation inside a step,
 * which matters on a busy machine); a single batch shares its matrix
 * products and row loops among the threads instead. */
#include "decode.h"

#include <blis.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cli.h"
#include "ops.h"
#include "util.h"

/* ---- options ------------------------------------------------------------ */
void decode_options_from_config(DecodeOptions *o, const Config *c) {
    o->beam = c->beam;
    o->alpha = c->alpha;
    o->max_len_a = c->max_len_a;
    o->max_len_b = c->max_len_b;
    o->nbest = 1;
    o->batch_size = c->batch_size;
}

double length_penalty(int len, double alpha) { return pow((5.0 + len) / 6.0, alpha); }

int decode_max_len(const DecodeOptions *o, int src_len, int max_positions) {
    double l = floor(o->max_len_a * src_len + o->max_len_b);
    /* The decoder input is BOS y_1 .. y_max_len: max_len + 1 positions. */
    if (l > max_positions - 1) l = max_positions - 1;
    return l < 0 ? 0 : (int)l;
}

void nbest_free(NBest *nb) {
    for (int i = 0; i < nb->n; i++) free(nb->hyps[i].tokens);
    free(nb->hyps);
    nb->hyps = NULL;
    nb->n = 0;
}

/* Open a thread team only when a loop has enough work (floats touched) to
 * pay for it: tiny models and single sentences stay fast, and results do not
 * depend on it (each row is computed the same way on any thread). */
#define PAR_MIN 65536
#define PAR_IF(work) if ((size_t)(work) >= PAR_MIN)

/* ======================================================================
 * Beam search over an abstract step function
 * ====================================================================== */

typedef struct { int tok; float logp; } TokLogp;
typedef struct { double score; int row, tok; } Candidate;   /* raw score, parent row, token */
typedef struct { int t, row; double logprob, score; } Finished;  /* row of step t + EOS */

/* The best k tokens of one row of scores (PAD and BOS excluded), best
 * first, ties to the lower token id; NaN never enters. Blocks of 16 whose
 * maximum cannot enter are skipped (after the first blocks, nearly all).
 * Returns the count. */
static int row_top_k(const float *x, int V, int k, TokLogp *top) {
    int n = 0;
    for (int w0 = 0; w0 < V; w0 += 16) {
        int w1 = w0 + 16 < V ? w0 + 16 : V;
        if (n == k) {
            float bm = -INFINITY;
            for (int w = w0; w < w1; w++) bm = x[w] > bm ? x[w] : bm;
            if (!(bm > top[n - 1].logp)) continue;
        }
        for (int w = w0; w < w1; w++) {
            float v = x[w];
            if (w == TOK_PAD || w == TOK_BOS || isnan(v)) continue;
            if (n == k && !(v > top[n - 1].logp)) continue;
            int i = n < k ? n++ : n - 1;
            while (i > 0 && v > top[i - 1].logp) { top[i] = top[i - 1]; i--; }
            top[i].tok = w;
            top[i].logp = v;
        }
    }
    return n;
}

static int cand_cmp(const void *a, const void *b) {   /* score desc, row asc, token asc */
    const Candidate *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

/* Keep the nbest best finished hypotheses of a sentence, best first (a tie
 * keeps the one found first). */
static void finished_add(Finished *fin, int *nfin, int cap, Finished f) {
    if (isnan(f.score)) return;
    if (*nfin == cap && !(f.score > fin[cap - 1].score)) return;
    int i = *nfin < cap ? (*nfin)++ : cap - 1;
    while (i > 0 && f.score > fin[i - 1].score) { fin[i] = fin[i - 1]; i--; }
    fin[i] = f;
}

/* The history of a search: per step, each row's parent, token and sentence. */
typedef struct {
    int **parent, **tok;
    int steps, cap;
} History;

static void history_push(History *h, int n, const int *parent, const int *tok) {
    if (h->steps == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->parent = xrealloc(h->parent, (size_t)h->cap * sizeof *h->parent);
        h->tok = xrealloc(h->tok, (size_t)h->cap * sizeof *h->tok);
    }
    h->parent[h->steps] = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    h->tok[h->steps] = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    memcpy(h->parent[h->steps], parent, (size_t)n * sizeof(int));
    memcpy(h->tok[h->steps], tok, (size_t)n * sizeof(int));
    h->steps++;
}

static void history_free(History *h) {
    for (int i = 0; i < h->steps; i++) { free(h->parent[i]); free(h->tok[i]); }
    free(h->parent);
    free(h->tok);
}

/* Tokens of the hypothesis ending at row `row` of step t: the input tokens
 * of its ancestors at steps 1..t (step 0's input is BOS). */
static Hypothesis hypothesis_from(const History *h, const Finished *f) {
    Hypothesis y = {.tokens = xmalloc((size_t)(f->t ? f->t : 1) * sizeof(int)), .len = f->t,
                    .logprob = f->logprob, .score = f->score};
    for (int t = f->t, r = f->row; t >= 1; t--) {
        y.tokens[t - 1] = h->tok[t][r];
        r = h->parent[t][r];
    }
    return y;
}

int beam_search(const StepFunction *f, int nsent, const int *max_len,
                const DecodeOptions *o, NBest *out) {
    const int K = o->beam < 1 ? 1 : o->beam, V = f->vocab;
    const int N = o->nbest < 1 ? 1 : (o->nbest > K ? K : o->nbest);
    if (nsent <= 0) return 0;
    /* Rows of the current step, grouped by sentence in sentence order. */
    size_t cap = (size_t)nsent * K;
    int *sent = xmalloc(cap * sizeof(int)), *parent = xmalloc(cap * sizeof(int)), *tok = xmalloc(cap * sizeof(int));
    int *nsent_rows = xcalloc((size_t)nsent, sizeof(int));    /* live rows per sentence */
    double *score = xmalloc(cap * sizeof(double));
    int *nsent2 = xmalloc(cap * sizeof(int)), *nparent = xmalloc(cap * sizeof(int)), *ntok = xmalloc(cap * sizeof(int));
    double *nscore = xmalloc(cap * sizeof(double));
    TokLogp *top = xmalloc(cap * (size_t)K * sizeof(TokLogp));
    int *ntop = xmalloc(cap * sizeof(int));
    float *eos = xmalloc(cap * sizeof(float));     /* log p(EOS) per row */
    Candidate *cand = xmalloc((size_t)K * K * sizeof(Candidate));
    Finished *fin = xmalloc((size_t)nsent * N * sizeof(Finished));
    int *nfin = xcalloc((size_t)nsent, sizeof(int));
    History hist = {0};
    int rc = 0;

    int n = nsent;
    for (int s = 0; s < nsent; s++) {
        sent[s] = s; parent[s] = -1; tok[s] = TOK_BOS; score[s] = 0.0; nsent_rows[s] = 1;
    }
    for (int t = 0; n > 0; t++) {
        history_push(&hist, n, parent, tok);
        const float *lognorm = NULL;
        const float *x = f->step(f->ctx, t, n, sent, parent, tok, &lognorm);
        if (!x) { rc = -1; break; }
        /* Each row's best K continuations (a sentence's K best extensions
         * are among the union of its rows' K best), as log-probs. */
        #pragma omp parallel for schedule(static) PAR_IF((size_t)n * V)
        for (int i = 0; i < n; i++) {
            TokLogp *ti = top + (size_t)i * K;
            ntop[i] = row_top_k(x + (size_t)i * V, V, K, ti);
            if (lognorm)
                for (int j = 0; j < ntop[i]; j++) ti[j].logp -= lognorm[i];
            eos[i] = x[(size_t)i * V + TOK_EOS] - (lognorm ? lognorm[i] : 0.0f);
        }

        int nn = 0;
        for (int r0 = 0; r0 < n;) {
            int s = sent[r0], r1 = r0 + nsent_rows[s];
            Finished *fs = fin + (size_t)s * N;
            int new_rows = 0;
            if (t >= max_len[s]) {   /* max length: every live hypothesis ends here */
                for (int r = r0; r < r1; r++) {
                    double lp = score[r] + eos[r];
                    finished_add(fs, &nfin[s], N, (Finished){t, r, lp, lp / length_penalty(t + 1, o->alpha)});
                }
            } else {
                int nc = 0;
                for (int r = r0; r < r1; r++)
                    for (int j = 0; j < ntop[r]; j++) {
                        const TokLogp *c = &top[(size_t)r * K + j];
                        cand[nc++] = (Candidate){score[r] + c->logp, r, c->tok};
                    }
                qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
                if (nc > K) nc = K;
                double best_live = -INFINITY;
                for (int j = 0; j < nc; j++) {
                    const Candidate *c = &cand[j];
                    if (c->tok == TOK_EOS) {
                        finished_add(fs, &nfin[s], N,
                                     (Finished){t, c->row, c->score, c->score / length_penalty(t + 1, o->alpha)});
                    } else if (c->score > -INFINITY) {
                        nsent2[nn] = s; nparent[nn] = c->row; ntok[nn] = c->tok; nscore[nn] = c->score;
                        if (c->score > best_live) best_live = c->score;
                        nn++; new_rows++;
                    }
                }
                /* Can a live hypothesis still beat the N-th finished one?
                 * Its raw score only falls, and lp grows with length, so
                 * the best it can reach is s / lp(max_len + 1). */
                if (new_rows && nfin[s] == N &&
                    best_live / length_penalty(max_len[s] + 1, o->alpha) <= fs[N - 1].score) {
                    nn -= new_rows;
                    new_rows = 0;
                }
            }
            nsent_rows[s] = new_rows;
            r0 = r1;
        }
        n = nn;
        memcpy(sent, nsent2, (size_t)n * sizeof(int));
        memcpy(parent, nparent, (size_t)n * sizeof(int));
        memcpy(tok, ntok, (size_t)n * sizeof(int));
        memcpy(score, nscore, (size_t)n * sizeof(double));
    }
    for (int s = 0; s < nsent; s++) {
        NBest *nb = &out[s];
        nb->n = rc < 0 ? 0 : nfin[s];
        nb->hyps = xcalloc((size_t)N, sizeof(Hypothesis));
        for (int j = 0; j < nb->n; j++) nb->hyps[j] = hypothesis_from(&hist, &fin[(size_t)s * N + j]);
        if (rc == 0 && nb->n == 0) {   /* every score was NaN or -inf: say so with an empty output */
            nb->hyps[0] = (Hypothesis){.tokens = xmalloc(sizeof(int)), .len = 0, .logprob = -INFINITY, .score = -INFINITY};
            nb->n = 1;
        }
    }
    history_free(&hist);
    free(sent); free(parent); free(tok); free(nsent_rows); free(score);
    free(nsent2); free(nparent); free(ntok); free(nscore);
    free(top); free(ntop); free(eos); free(cand); free(fin); free(nfin);
    return rc;
}

/* ======================================================================
 * Inference kernels
 * ====================================================================== */

/* y [n, out] = x [n, in] W^T (+ b), W [out, in]. Not ops.h's linear_forward:
 * that one lets BLIS pick its sup kernels for small n, whose rounding
 * depends on n; here the native kernels make every row's result the same
 * whatever the other rows are (see the top of the file). */
static void linear(float *y, const float *x, const float *w, const float *b, int n, int in, int out) {
    if (n <= 0) return;
    float one = 1.0f, zero = 0.0f;
    rntm_t r = BLIS_RNTM_INITIALIZER;
    /* inside our own parallel region (one batch per thread): one thread */
    bli_rntm_set_num_threads(!omp_in_parallel() && (double)n * in * out >= 1 << 20 ? threads_count() : 1, &r);
    bli_rntm_disable_l3_sup(&r);
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, n, out, in, &one, (float *)x, in, 1,
                 (float *)w, in, 1, &zero, y, out, 1, NULL, &r);
    if (b) {
        #pragma omp parallel for schedule(static) PAR_IF((size_t)n * out)
        for (int i = 0; i < n; i++) {
            float *yi = y + (size_t)i * out;
            for (int j = 0; j < out; j++) yi[j] += b[j];
        }
    }
}

/* ---- matrix products with pre-packed weights --------------------------
 * BLIS packs the weight matrix of every product again on every call (it
 * cannot know the weights do not change): for a decoding step, with few
 * rows, that copying costs as much as a quarter of the product. So the
 * decoder's weights are packed once, in the layout of BLIS's own micro-kernel
 * (panels of output columns by KC inputs), and the products run
 * BLIS's loops around that micro-kernel here: the same kernel, the same
 * k-blocking, hence bit for bit the results of bli_sgemm's native path
 * (test_decode checks it), without the packing of the weights.
 * A micro-kernel computes an MR x NR block of C from a micro-panel of A
 * (MR rows) and one of B (NR columns), and prefers C stored by rows (the
 * 6x16 haswell/zen kernels) or by columns (the 32x12 AVX-512 skx kernel).
 * For row-stored C, bli_sgemm runs y = x W^T as it is: x is A, W^T is B,
 * the weight panels are NR wide. For column-stored C it runs the transposed
 * product y^T = W x^T (C = y^T is column-stored when y is row-stored): W is
 * A, x^T is B, the weight panels are MR wide. Both panels have the same
 * layout (kc rows of `width` floats), so only the kernel call changes. */
typedef void (*MicroKernel)(dim_t m, dim_t n, dim_t k, float *alpha, float *a, float *b, float *beta,
                            float *c, inc_t rs_c, inc_t cs_c, auxinfo_t *data, cntx_t *cntx);
typedef struct {
    MicroKernel ukr;
    cntx_t *cntx;
    int rows;             /* the kernel prefers row-stored C: x is A; else W is A */
    int XW, WW;           /* micro-panel widths of x and of W: (MR, NR) or (NR, MR) */
    int KC, XB;           /* k block; rows of x packed at once (a multiple of XW) */
} Kernel;

static int kernel_query(Kernel *k) {
    k->cntx = bli_gks_query_cntx();
    k->ukr = (MicroKernel)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, k->cntx);
    int MR = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, k->cntx);
    int NR = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, k->cntx);
    k->KC = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, k->cntx);
    k->XB = (int)bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, k->cntx);
    k->rows = bli_cntx_l3_nat_ukr_prefers_rows_dt(BLIS_FLOAT, BLIS_GEMM_UKR, k->cntx);
    k->XW = k->rows ? MR : NR;
    k->WW = k->rows ? NR : MR;
    if (k->XW > 0) k->XB -= k->XB % k->XW;
    return k->ukr && MR > 0 && NR > 0 && k->KC > 0 && k->XB > 0;
}

/* A linear layer y = x W^T + b, W [out, in], with W also packed (pw): for
 * each block of KC inputs, for each panel of WW outputs, KC rows of WW
 * floats (zero beyond out). */
typedef struct {
    const float *w, *b;
    int in, out;
    float *pw;
} Linear;

static void linear_pack(Linear *L, const Kernel *k, const float *w, const float *b, int out, int in) {
    L->w = w; L->b = b; L->in = in; L->out = out; L->pw = NULL;
    if (!k) return;
    int WW = k->WW, np = (out + WW - 1) / WW;
    float *d = L->pw = xaligned((size_t)np * WW * in * sizeof(float));
    for (int pc = 0; pc < in; pc += k->KC) {
        int kc = in - pc < k->KC ? in - pc : k->KC;
        for (int jp = 0; jp < np; jp++)
            for (int p = 0; p < kc; p++)
                for (int j = 0; j < WW; j++) {
                    int o = jp * WW + j;
                    *d++ = o < out ? w[(size_t)o * in + pc + p] : 0.0f;
                }
    }
}

/* y [n, out] = x [n, in] W^T + b with the packed W: BLIS's five loops
 * (here: k blocks, blocks of rows of x, then panels of W by micro-panels of
 * x) around its micro-kernel. abuf: XB * KC floats for the packed rows of x. */
static void linear_packed(const Kernel *k, float *y, const float *x, const Linear *L, int n, float *abuf) {
    if (n <= 0) return;
    int in = L->in, out = L->out, XW = k->XW, WW = k->WW, np = (out + WW - 1) / WW;
    int team = !omp_in_parallel() && (double)n * in * out >= 1 << 20 ? threads_count() : 1;
    #pragma omp parallel num_threads(team) if (team > 1)
    for (int pc = 0; pc < in; pc += k->KC) {
        int kc = in - pc < k->KC ? in - pc : k->KC;
        const float *wblk = L->pw + (size_t)pc * np * WW;
        float one = 1.0f, zero = 0.0f, *beta = pc ? &one : &zero;   /* C = AB, then C += AB */
        for (int ic = 0; ic < n; ic += k->XB) {
            int mc = n - ic < k->XB ? n - ic : k->XB, na = (mc + XW - 1) / XW;
            #pragma omp for schedule(static)
            for (int ia = 0; ia < na; ia++) {   /* rows of x into XW-row micro-panels */
                float *a = abuf + (size_t)ia * XW * kc;
                for (int i = 0; i < XW; i++) {
                    int r = ic + ia * XW + i;
                    if (r < n) {
                        const float *xr = x + (size_t)r * in + pc;
                        for (int p = 0; p < kc; p++) a[p * XW + i] = xr[p];
                    } else {
                        for (int p = 0; p < kc; p++) a[p * XW + i] = 0.0f;
                    }
                }
            }
            #pragma omp for schedule(static)
            for (int jp = 0; jp < np; jp++) {
                float *w = (float *)wblk + (size_t)jp * kc * WW;
                int nw = out - jp * WW < WW ? out - jp * WW : WW;
                for (int ia = 0; ia < na; ia++) {
                    float *xp = abuf + (size_t)ia * XW * kc, *c;
                    int r = ic + ia * XW, nx = n - r < XW ? n - r : XW;
                    auxinfo_t aux;
                    memset(&aux, 0, sizeof aux);
                    c = y + (size_t)r * out + jp * WW;
                    if (k->rows) {   /* C = y block [nx, nw], row-stored: A = x, B = W^T */
                        bli_auxinfo_set_next_a(ia + 1 < na ? xp + (size_t)XW * kc : abuf, &aux);
                        bli_auxinfo_set_next_b(ia + 1 < na ? w : w + (size_t)kc * WW, &aux);
                        k->ukr(nx, nw, kc, &one, xp, w, beta, c, out, 1, &aux, k->cntx);
                    } else {         /* C = y block^T [nw, nx], column-stored: A = W, B = x^T */
                        bli_auxinfo_set_next_a(ia + 1 < na ? w : w + (size_t)kc * WW, &aux);
                        bli_auxinfo_set_next_b(ia + 1 < na ? xp + (size_t)XW * kc : abuf, &aux);
                        k->ukr(nw, nx, kc, &one, w, xp, beta, c, 1, out, &aux, k->cntx);
                    }
                }
            }
        }
    }
    if (L->b) {   /* the bias after the product, as linear() adds it */
        #pragma omp parallel for schedule(static) PAR_IF((size_t)n * out)
        for (int i = 0; i < n; i++) {
            float *yi = y + (size_t)i * out;
            for (int j = 0; j < out; j++) yi[j] += L->b[j];
        }
    }
}

/* Sum of 16 floats by a fixed tree (gcc vectorises it; the order never
 * changes, so neither does the result). */
static inline float hsum16(float *a) {
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) a[l] += a[l + w];
    return a[0];
}

/* 16 floats as one vector (gcc's vector extension: AVX-512 registers, or
 * pairs of AVX ones, or whatever the target has; element-wise IEEE
 * arithmetic, so the results are those of the scalar code). */
typedef float vf16 __attribute__((vector_size(64)));
static inline vf16 load16(const float *p) { vf16 v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, vf16 v) { memcpy(p, &v, sizeof v); }
static inline float vsum16(vf16 v) { float a[16]; store16(a, v); return hsum16(a); }

/* A dot product with a fixed summation order: 16 running sums, the tail,
 * then the tree. */
static inline float dot(const float *a, const float *b, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return hsum16(acc);
}

/* lse[i] = log sum_j exp(x[i, j]) per row of x [n, V] (so that log-softmax
 * is x - lse), with the max taken out first; 16 running sums. */
static void row_logsumexp(float *lse, const float *x, int n, int V) {
    #pragma omp parallel for schedule(static) PAR_IF((size_t)n * V)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * V;
        float m[16], acc[16] = {0}, mx = -INFINITY;
        for (int l = 0; l < 16; l++) m[l] = -INFINITY;
        int j = 0;
        for (; j + 16 <= V; j += 16)
            for (int l = 0; l < 16; l++) m[l] = xi[j + l] > m[l] ? xi[j + l] : m[l];
        for (int l = 0; l < 16; l++) mx = m[l] > mx ? m[l] : mx;
        for (; j < V; j++) mx = xi[j] > mx ? xi[j] : mx;
        for (j = 0; j + 16 <= V; j += 16)
            for (int l = 0; l < 16; l++) acc[l] += fast_expf(xi[j + l] - mx);
        for (int l = 0; j < V; j++, l++) acc[l] += fast_expf(xi[j] - mx);
        lse[i] = mx + logf(hsum16(acc));
    }
}

/* Multi-head scaled dot-product attention for one query row (sections
 * 3.2.1, 3.2.2): for each head h, out_h = sum_j softmax_j(q_h . k_jh /
 * sqrt(Dk)) v_jh over nk keys. Key and value j are the D-float rows keys[j]
 * and vals[j], which may lie anywhere (the cache blocks of several steps).
 * sc: H * nk floats of scratch. */
static void attend_row(float *out, const float *q, const float *const *keys, const float *const *vals,
                       int nk, int H, int Dk, float *sc) {
    float scale = 1.0f / sqrtf((float)Dk);
    int wide = Dk % 16 == 0;   /* 16 columns at a time in vector registers */
    for (int h = 0; h < H; h++) {
        const float *qh = q + h * Dk;
        float *s = sc + h * nk;
        int j = 0;
        if (wide)   /* scores of four keys at a time: independent running sums */
            for (; j + 4 <= nk; j += 4) {
                vf16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                const float *k0 = keys[j] + h * Dk, *k1 = keys[j + 1] + h * Dk;
                const float *k2 = keys[j + 2] + h * Dk, *k3 = keys[j + 3] + h * Dk;
                for (int d = 0; d < Dk; d += 16) {
                    vf16 qd = load16(qh + d);
                    a0 += qd * load16(k0 + d);
                    a1 += qd * load16(k1 + d);
                    a2 += qd * load16(k2 + d);
                    a3 += qd * load16(k3 + d);
                }
                s[j] = vsum16(a0) * scale;
                s[j + 1] = vsum16(a1) * scale;
                s[j + 2] = vsum16(a2) * scale;
                s[j + 3] = vsum16(a3) * scale;
            }
        for (; j < nk; j++) s[j] = dot(qh, keys[j] + h * Dk, Dk) * scale;
        float mx = -INFINITY, sum = 0.0f;
        for (j = 0; j < nk; j++) mx = s[j] > mx ? s[j] : mx;
        for (j = 0; j < nk; j++) { s[j] = fast_expf(s[j] - mx); sum += s[j]; }
        float inv = 1.0f / sum;
        for (j = 0; j < nk; j++) s[j] *= inv;
        /* out_h = sum_j p_j v_jh, j in order */
        float *oh = out + h * Dk;
        if (wide) {
            int d = 0;
            for (; d + 64 <= Dk; d += 64) {   /* four independent running sums */
                vf16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                for (j = 0; j < nk; j++) {
                    const float *v = vals[j] + h * Dk + d;
                    a0 += s[j] * load16(v);
                    a1 += s[j] * load16(v + 16);
                    a2 += s[j] * load16(v + 32);
                    a3 += s[j] * load16(v + 48);
                }
                store16(oh + d, a0);
                store16(oh + d + 16, a1);
                store16(oh + d + 32, a2);
                store16(oh + d + 48, a3);
            }
            for (; d < Dk; d += 16) {
                vf16 acc = {0};
                for (j = 0; j < nk; j++) acc += s[j] * load16(vals[j] + h * Dk + d);
                store16(oh + d, acc);
            }
        } else {
            for (int d = 0; d < Dk; d++) oh[d] = 0.0f;
            for (j = 0; j < nk; j++)
                for (int d = 0; d < Dk; d++) oh[d] += s[j] * vals[j][h * Dk + d];
        }
    }
}

/* y = LayerNorm(x) per row (eps as ops.h). Not ops.h's layernorm_forward:
 * that one always opens a thread team, which costs more than the whole row
 * loop for the few rows of a decoding step; the arithmetic is the same. */
static void layernorm(float *y, const float *x, const LayerNormParams *ln, int n, int D) {
    #pragma omp parallel for schedule(static) PAR_IF((size_t)n * D)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * D;
        float *yi = y + (size_t)i * D, s[16] = {0}, v[16] = {0};
        int j = 0;
        for (; j + 16 <= D; j += 16)
            for (int l = 0; l < 16; l++) s[l] += xi[j + l];
        for (int l = 0; j < D; j++, l++) s[l] += xi[j];
        float mu = hsum16(s) / D;
        for (j = 0; j + 16 <= D; j += 16)
            for (int l = 0; l < 16; l++) { float c = xi[j + l] - mu; v[l] += c * c; }
        for (int l = 0; j < D; j++, l++) { float c = xi[j] - mu; v[l] += c * c; }
        float r = 1.0f / sqrtf(hsum16(v) / D + LAYERNORM_EPS);
        for (j = 0; j < D; j++) yi[j] = (xi[j] - mu) * r * ln->w[j] + ln->b[j];
    }
}

/* x = LayerNorm(x + o) (post-norm, the paper) or x = x + o (pre-norm). */
static void residual(float *x, const float *o, const LayerNormParams *ln, int n, int D, int pre_norm) {
    #pragma omp parallel for schedule(static) PAR_IF((size_t)n * D)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < D; j++) x[(size_t)i * D + j] += o[(size_t)i * D + j];
    if (!pre_norm) layernorm(x, x, ln, n, D);
}

/* The sublayer input: LayerNorm(x) before the sublayer (pre-norm) or x. */
static const float *sublayer_input(float *y, const float *x, const LayerNormParams *ln, int n, int D, int pre_norm) {
    if (!pre_norm) return x;
    layernorm(y, x, ln, n, D);
    return y;
}

/* ======================================================================
 * The Transformer as a step function
 * ====================================================================== */

/* A float buffer that only grows (decoding reuses its buffers from batch to
 * batch: no allocation, and no page faults, in the steady state). */
static float *grow(float *p, size_t *cap, size_t need) {
    if (need <= *cap) return p;
    free(p);
    *cap = need + need / 4;
    return xaligned(*cap * sizeof(float));
}

/* The decoder's linear layers, packed (see linear_packed). The encoder runs
 * once per batch on all its tokens, where BLIS's own packing is cheap, and
 * uses linear(). */
typedef struct {
    Linear q, k, v, o;      /* self-attention */
    Linear cq, co;          /* encoder-decoder attention: query, output */
    Linear fc1, fc2;        /* FFN */
} DecoderLinears;

struct Translator {
    const Model *m;
    Kernel kernel;
    const Kernel *k;        /* &kernel when the weights are packed, else NULL */
    DecoderLinears *dec;    /* [dec_layers] */
    Linear out;             /* logits = x E^T, the shared embedding (section 3.4) */
};

Translator *translator_new(const Model *m, int pack) {
    Translator *t = xcalloc(1, sizeof *t);
    int D = m->dims.d_model, F = m->dims.d_ff, L = m->dims.dec_layers;
    t->m = m;
    if (pack && kernel_query(&t->kernel)) t->k = &t->kernel;
    t->dec = xcalloc((size_t)L, sizeof *t->dec);
    for (int l = 0; l < L; l++) {
        const DecoderLayerParams *P = &m->p.dec[l];
        DecoderLinears *q = &t->dec[l];
        linear_pack(&q->q, t->k, P->self_attn.q_w, P->self_attn.q_b, D, D);
        linear_pack(&q->k, t->k, P->self_attn.k_w, P->self_attn.k_b, D, D);
        linear_pack(&q->v, t->k, P->self_attn.v_w, P->self_attn.v_b, D, D);
        linear_pack(&q->o, t->k, P->self_attn.o_w, P->self_attn.o_b, D, D);
        linear_pack(&q->cq, t->k, P->encoder_attn.q_w, P->encoder_attn.q_b, D, D);
        linear_pack(&q->co, t->k, P->encoder_attn.o_w, P->encoder_attn.o_b, D, D);
        linear_pack(&q->fc1, t->k, P->ffn.fc1_w, P->ffn.fc1_b, F, D);
        linear_pack(&q->fc2, t->k, P->ffn.fc2_w, P->ffn.fc2_b, D, F);
    }
    linear_pack(&t->out, t->k, m->p.embed, NULL, m->dims.vocab, D);
    return t;
}

int translator_packed(const Translator *t) { return t->k != NULL; }

void translator_free(Translator *t) {
    if (!t) return;
    for (int l = 0; l < t->m->dims.dec_layers; l++) {
        DecoderLinears *q = &t->dec[l];
        Linear *all[] = {&q->q, &q->k, &q->v, &q->o, &q->cq, &q->co, &q->fc1, &q->fc2};
        for (int i = 0; i < 8; i++) free(all[i]->pw);
    }
    free(t->out.pw);
    free(t->dec);
    free(t);
}

typedef struct {
    const Translator *tr;
    const Model *m;
    int D, H, Dk, F, V, L;
    float *abuf;                   /* packed rows for linear_packed: XB * KC floats */
    /* encoder side of the batch */
    int nsent, ntok, maxn;         /* sentences, packed rows, longest source (with EOS) */
    int *src_off, *src_n;          /* [nsent]: first row and length (tokens + EOS) */
    float *enc_out;                /* [ntok, D] */
    float **ck, **cv;              /* [L] -> [ntok, D] cross-attention keys / values */
    size_t enc_cap, *ck_cap, *cv_cap;
    int sent_cap;
    /* self-attention caches: step t holds K then V of every layer, [L][2][n_t][D] */
    float **kv;
    size_t *kv_cap;
    int *kv_rows;                  /* n_t */
    int steps_cap;
    int *anc, *anc_prev;           /* [n_t, t+1] ancestor rows, this step and the last */
    size_t anc_cap, anc_cap_prev;
    /* scratch rows (encoder: ntok rows, step: n rows) */
    float *x, *y, *q, *k, *v, *att, *o, *h, *logp, *lse;   /* logp: the logits [n, V] */
    size_t x_cap, y_cap, q_cap, k_cap, v_cap, att_cap, o_cap, h_cap, logp_cap, lse_cap;
} Decoder;

static void decoder_init(Decoder *d, const Translator *tr) {
    const Model *m = tr->m;
    memset(d, 0, sizeof *d);
    d->tr = tr;
    d->m = m;
    if (tr->k) d->abuf = xaligned((size_t)tr->k->XB * tr->k->KC * sizeof(float));
    d->D = m->dims.d_model;
    d->H = m->dims.heads;
    d->Dk = d->D / d->H;
    d->F = m->dims.d_ff;
    d->V = m->dims.vocab;
    d->L = m->dims.dec_layers;
    d->ck = xcalloc((size_t)d->L, sizeof(float *));
    d->cv = xcalloc((size_t)d->L, sizeof(float *));
    d->ck_cap = xcalloc((size_t)d->L, sizeof(size_t));
    d->cv_cap = xcalloc((size_t)d->L, sizeof(size_t));
}

static void decoder_free(Decoder *d) {
    for (int i = 0; i < d->steps_cap; i++) free(d->kv[i]);
    free(d->kv); free(d->kv_cap); free(d->kv_rows);
    for (int l = 0; l < d->L; l++) { free(d->ck[l]); free(d->cv[l]); }
    free(d->ck); free(d->cv); free(d->ck_cap); free(d->cv_cap);
    free(d->src_off); free(d->src_n); free(d->enc_out);
    free(d->anc); free(d->anc_prev);
    free(d->x); free(d->y); free(d->q); free(d->k); free(d->v); free(d->att); free(d->o); free(d->h);
    free(d->logp); free(d->lse); free(d->abuf);
}

/* y = x W^T + b for a decoder layer: packed weights when there are some. */
static void apply(const Decoder *d, float *y, const float *x, const Linear *L, int n) {
    if (L->pw) linear_packed(d->tr->k, y, x, L, n, d->abuf);
    else linear(y, x, L->w, L->b, n, L->in, L->out);
}

/* FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3): o [n, D], h [n, F]. */
static void feed_forward(const Decoder *d, float *o, float *h, const float *x, const Linear *fc1,
                         const Linear *fc2, int n) {
    apply(d, h, x, fc1, n);
    #pragma omp parallel for schedule(static) PAR_IF((size_t)n * fc1->out)
    for (size_t i = 0; i < (size_t)n * fc1->out; i++) h[i] = h[i] > 0.0f ? h[i] : 0.0f;
    apply(d, o, h, fc2, n);
}

/* Scratch for `rows` rows. */
static void decoder_scratch(Decoder *d, int rows) {
    size_t nD = (size_t)rows * d->D;
    d->x = grow(d->x, &d->x_cap, nD);
    d->y = grow(d->y, &d->y_cap, nD);
    d->q = grow(d->q, &d->q_cap, nD);
    d->k = grow(d->k, &d->k_cap, nD);
    d->v = grow(d->v, &d->v_cap, nD);
    d->att = grow(d->att, &d->att_cap, nD);
    d->o = grow(d->o, &d->o_cap, nD);
    d->h = grow(d->h, &d->h_cap, (size_t)rows * d->F);
}

/* Self-attention inside each source sentence (packed rows). */
static void encoder_self_attention(Decoder *d, float *out, const float *q, const float *k, const float *v) {
    int D = d->D, H = d->H, Dk = d->Dk;
    #pragma omp parallel PAR_IF((size_t)d->ntok * d->maxn * D)
    {
        const float **keys = xmalloc((size_t)d->maxn * sizeof *keys), **vals = xmalloc((size_t)d->maxn * sizeof *vals);
        float *sc = xmalloc((size_t)H * d->maxn * sizeof *sc);
        #pragma omp for schedule(static)
        for (int s = 0; s < d->nsent; s++) {
            int off = d->src_off[s], nk = d->src_n[s];
            for (int j = 0; j < nk; j++) {
                keys[j] = k + (size_t)(off + j) * D;
                vals[j] = v + (size_t)(off + j) * D;
            }
            for (int i = off; i < off + nk; i++)
                attend_row(out + (size_t)i * D, q + (size_t)i * D, keys, vals, nk, H, Dk, sc);
        }
        free(keys); free(vals); free(sc);
    }
}

/* Run the encoder on nsent sources (src[s] of len[s] tokens, EOS appended
 * here) and project the cross-attention keys/values of every decoder layer. */
static void decoder_encode(Decoder *d, int nsent, const int *const *src, const int *len) {
    const Model *m = d->m;
    const ParameterTensors *p = &m->p;
    int D = d->D, F = d->F, pre = m->dims.pre_norm;
    if (nsent > d->sent_cap) {
        free(d->src_off); free(d->src_n);
        d->sent_cap = nsent;
        d->src_off = xmalloc((size_t)nsent * sizeof(int));
        d->src_n = xmalloc((size_t)nsent * sizeof(int));
    }
    d->nsent = nsent;
    int ntok = 0;
    d->maxn = 0;
    for (int s = 0; s < nsent; s++) {
        d->src_off[s] = ntok;
        d->src_n[s] = len[s] + 1;
        ntok += len[s] + 1;
        d->maxn = len[s] + 1 > d->maxn ? len[s] + 1 : d->maxn;
    }
    d->ntok = ntok;
    size_t nD = (size_t)ntok * D;
    decoder_scratch(d, ntok);
    d->enc_out = grow(d->enc_out, &d->enc_cap, nD);
    float *x = d->enc_out, *y = d->y, *q = d->q, *k = d->k, *v = d->v, *att = d->att, *o = d->o, *h = d->h;
    float sq = sqrtf((float)D);
    /* x = E[token] sqrt(D) + PE[position] (sections 3.4, 3.5) */
    #pragma omp parallel for schedule(static) PAR_IF(nD)
    for (int s = 0; s < nsent; s++)
        for (int j = 0; j <= len[s]; j++) {
            int tok = j < len[s] ? src[s][j] : TOK_EOS;
            const float *e = p->embed + (size_t)tok * D, *pe = m->pos_enc + (size_t)j * D;
            float *xi = x + (size_t)(d->src_off[s] + j) * D;
            for (int c = 0; c < D; c++) xi[c] = e[c] * sq + pe[c];
        }
    for (int l = 0; l < m->dims.enc_layers; l++) {
        const EncoderLayerParams *P = &p->enc[l];
        const float *a = sublayer_input(y, x, &P->self_attn_ln, ntok, D, pre);
        linear(q, a, P->self_attn.q_w, P->self_attn.q_b, ntok, D, D);
        linear(k, a, P->self_attn.k_w, P->self_attn.k_b, ntok, D, D);
        linear(v, a, P->self_attn.v_w, P->self_attn.v_b, ntok, D, D);
        encoder_self_attention(d, att, q, k, v);
        linear(o, att, P->self_attn.o_w, P->self_attn.o_b, ntok, D, D);
        residual(x, o, &P->self_attn_ln, ntok, D, pre);
        a = sublayer_input(y, x, &P->final_ln, ntok, D, pre);
        Linear fc1 = {P->ffn.fc1_w, P->ffn.fc1_b, D, F, NULL}, fc2 = {P->ffn.fc2_w, P->ffn.fc2_b, F, D, NULL};
        feed_forward(d, o, h, a, &fc1, &fc2, ntok);
        residual(x, o, &P->final_ln, ntok, D, pre);
    }
    if (pre) layernorm(x, x, &p->enc_ln, ntok, D);
    for (int l = 0; l < d->L; l++) {
        const AttentionParams *A = &p->dec[l].encoder_attn;
        d->ck[l] = grow(d->ck[l], &d->ck_cap[l], nD);
        d->cv[l] = grow(d->cv[l], &d->cv_cap[l], nD);
        linear(d->ck[l], x, A->k_w, A->k_b, ntok, D, D);
        linear(d->cv[l], x, A->v_w, A->v_b, ntok, D, D);
    }
}

/* The step function: one new position for the n live hypotheses. */
static const float *decoder_step(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                                 const float **lognorm) {
    Decoder *d = ctx;
    const Model *m = d->m;
    const ParameterTensors *p = &m->p;
    int D = d->D, H = d->H, Dk = d->Dk, V = d->V, L = d->L, pre = m->dims.pre_norm;
    if (t >= m->dims.max_positions) {
        errorf("decoder: step %d is beyond max_positions %d", t, m->dims.max_positions);
        return NULL;
    }
    decoder_scratch(d, n);
    d->logp = grow(d->logp, &d->logp_cap, (size_t)n * V);
    d->lse = grow(d->lse, &d->lse_cap, (size_t)n);
    /* this step's cache block */
    if (t >= d->steps_cap) {
        int c = d->steps_cap ? 2 * d->steps_cap : 64;
        while (c <= t) c *= 2;
        d->kv = xrealloc(d->kv, (size_t)c * sizeof *d->kv);
        d->kv_cap = xrealloc(d->kv_cap, (size_t)c * sizeof *d->kv_cap);
        d->kv_rows = xrealloc(d->kv_rows, (size_t)c * sizeof *d->kv_rows);
        for (int i = d->steps_cap; i < c; i++) { d->kv[i] = NULL; d->kv_cap[i] = 0; }
        d->steps_cap = c;
    }
    d->kv[t] = grow(d->kv[t], &d->kv_cap[t], (size_t)L * 2 * n * D);
    d->kv_rows[t] = n;
    /* ancestry: anc[i][j] = row at step j of hypothesis i's ancestor */
    size_t an = (size_t)n * (t + 1);
    { int *tmp = d->anc_prev; d->anc_prev = d->anc; d->anc = tmp; }
    { size_t c = d->anc_cap_prev; d->anc_cap_prev = d->anc_cap; d->anc_cap = c; }
    if (an > d->anc_cap) {   /* the previous step's table stays in anc_prev */
        free(d->anc);
        d->anc_cap = an * 2;
        d->anc = xmalloc(d->anc_cap * sizeof(int));
    }
    for (int i = 0; i < n; i++) {
        if (t > 0) memcpy(d->anc + (size_t)i * (t + 1), d->anc_prev + (size_t)parent[i] * t, (size_t)t * sizeof(int));
        d->anc[(size_t)i * (t + 1) + t] = i;
    }

    float *x = d->x, *y = d->y, *q = d->q, *att = d->att, *o = d->o, *h = d->h, *logp = d->logp;
    float sq = sqrtf((float)D);
    const float *pe = m->pos_enc + (size_t)t * D;
    #pragma omp parallel for schedule(static) PAR_IF((size_t)n * D)
    for (int i = 0; i < n; i++) {
        const float *e = p->embed + (size_t)tok[i] * D;
        for (int j = 0; j < D; j++) x[(size_t)i * D + j] = e[j] * sq + pe[j];
    }
    for (int l = 0; l < L; l++) {
        const DecoderLayerParams *P = &p->dec[l];
        const DecoderLinears *W = &d->tr->dec[l];
        float *K = d->kv[t] + (size_t)(2 * l) * n * D, *Vv = d->kv[t] + (size_t)(2 * l + 1) * n * D;
        /* masked self-attention: this position attends to itself and to
         * the hypothesis' earlier positions (the causal mask, for free) */
        const float *a = sublayer_input(y, x, &P->self_attn_ln, n, D, pre);
        apply(d, q, a, &W->q, n);
        apply(d, K, a, &W->k, n);
        apply(d, Vv, a, &W->v, n);
        #pragma omp parallel PAR_IF((size_t)n * (t + 1) * D)
        {
            const float **keys = xmalloc((size_t)(t + 1) * sizeof *keys), **vals = xmalloc((size_t)(t + 1) * sizeof *vals);
            float *sc = xmalloc((size_t)H * (t + 1) * sizeof *sc);
            #pragma omp for schedule(static)
            for (int i = 0; i < n; i++) {
                const int *an_i = d->anc + (size_t)i * (t + 1);
                for (int j = 0; j <= t; j++) {
                    size_t nj = (size_t)d->kv_rows[j];
                    const float *blk = d->kv[j] + (size_t)(2 * l) * nj * D;
                    keys[j] = blk + (size_t)an_i[j] * D;
                    vals[j] = blk + nj * D + (size_t)an_i[j] * D;
                }
                attend_row(att + (size_t)i * D, q + (size_t)i * D, keys, vals, t + 1, H, Dk, sc);
            }
            free(keys); free(vals); free(sc);
        }
        apply(d, o, att, &W->o, n);
        residual(x, o, &P->self_attn_ln, n, D, pre);

        /* encoder-decoder attention over the hypothesis' source sentence */
        a = sublayer_input(y, x, &P->encoder_attn_ln, n, D, pre);
        apply(d, q, a, &W->cq, n);
        #pragma omp parallel PAR_IF((size_t)n * d->maxn * D)
        {
            const float **keys = xmalloc((size_t)d->maxn * sizeof *keys), **vals = xmalloc((size_t)d->maxn * sizeof *vals);
            float *sc = xmalloc((size_t)H * d->maxn * sizeof *sc);
            #pragma omp for schedule(static)
            for (int i = 0; i < n; i++) {
                int off = d->src_off[sent[i]], nk = d->src_n[sent[i]];
                for (int j = 0; j < nk; j++) {
                    keys[j] = d->ck[l] + (size_t)(off + j) * D;
                    vals[j] = d->cv[l] + (size_t)(off + j) * D;
                }
                attend_row(att + (size_t)i * D, q + (size_t)i * D, keys, vals, nk, H, Dk, sc);
            }
            free(keys); free(vals); free(sc);
        }
        apply(d, o, att, &W->co, n);
        residual(x, o, &P->encoder_attn_ln, n, D, pre);

        a = sublayer_input(y, x, &P->final_ln, n, D, pre);
        feed_forward(d, o, h, a, &W->fc1, &W->fc2, n);
        residual(x, o, &P->final_ln, n, D, pre);
    }
    const float *fx = x;
    if (pre) { layernorm(y, x, &p->dec_ln, n, D); fx = y; }
    /* logits = x E^T with the shared embedding as pre-softmax weight (3.4) */
    apply(d, logp, fx, &d->tr->out, n);
    row_logsumexp(d->lse, logp, n, V);
    *lognorm = d->lse;
    return logp;
}

/* ======================================================================
 * Translating token sequences and lines
 * ====================================================================== */

typedef struct { int len, idx; } LenIdx;
static int lenidx_cmp(const void *a, const void *b) {
    const LenIdx *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* With several threads and several batches, each thread decodes whole
 * batches on its own (single-threaded kernels, no synchronisation inside a
 * step); with one batch, the threads share its matrix products instead.
 * Either way a sentence's arithmetic is the same. */
int translate_ids(const Model *m, const DecodeOptions *o, int n,
                  const int *const *src, const int *src_len, NBest *out) {
    Translator *t = translator_new(m, 1);
    int rc = translator_ids(t, o, n, src, src_len, out);
    translator_free(t);
    return rc;
}

int translator_ids(const Translator *tr, const DecodeOptions *o, int n,
                   const int *const *src, const int *src_len, NBest *out) {
    const Model *m = tr->m;
    int maxp = m->dims.max_positions, bs = o->batch_size < 1 ? 1 : o->batch_size;
    for (int i = 0; i < n; i++) {
        out[i].hyps = NULL;
        out[i].n = 0;
        if (src_len[i] + 1 > maxp)
            return errorf("translate: source %d has %d tokens, the model takes at most %d (with EOS)", i + 1, src_len[i], maxp);
    }
    LenIdx *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    int nz = 0;
    for (int i = 0; i < n; i++) {
        if (src_len[i] == 0) {   /* empty line -> empty output, no model run */
            out[i].hyps = xcalloc(1, sizeof(Hypothesis));
            out[i].hyps[0].tokens = xmalloc(sizeof(int));
            out[i].n = 1;
        } else {
            order[nz++] = (LenIdx){src_len[i], i};
        }
    }
    qsort(order, (size_t)nz, sizeof *order, lenidx_cmp);
    int nbatch = (nz + bs - 1) / bs, T = threads_count();
    int teams = T > 1 && nbatch > 1 ? (nbatch < T ? nbatch : T) : 1;
    int rc = 0;
    char err[1024] = "";
    #pragma omp parallel num_threads(teams) if (teams > 1)
    {
        Decoder d;
        decoder_init(&d, tr);
        StepFunction f = {.vocab = m->dims.vocab, .step = decoder_step, .ctx = &d};
        const int **bsrc = xmalloc((size_t)bs * sizeof *bsrc);
        int *blen = xmalloc((size_t)bs * sizeof(int)), *bmax = xmalloc((size_t)bs * sizeof(int));
        NBest *bout = xmalloc((size_t)bs * sizeof *bout);
        #pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < nbatch; b++) {
            int b0 = b * bs, nb = nz - b0 < bs ? nz - b0 : bs, failed;
            #pragma omp atomic read
            failed = rc;
            if (failed) continue;
            for (int j = 0; j < nb; j++) {
                int i = order[b0 + j].idx;
                bsrc[j] = src[i];
                blen[j] = src_len[i];
                bmax[j] = decode_max_len(o, src_len[i], maxp);
            }
            decoder_encode(&d, nb, bsrc, blen);
            if (beam_search(&f, nb, bmax, o, bout) < 0) {
                #pragma omp critical(translate_error)
                {
                    if (!rc) snprintf(err, sizeof err, "%s", error_message());
                    rc = -1;
                }
                for (int j = 0; j < nb; j++) nbest_free(&bout[j]);
                continue;
            }
            for (int j = 0; j < nb; j++) out[order[b0 + j].idx] = bout[j];
        }
        decoder_free(&d);
        free(bsrc); free(blen); free(bmax); free(bout);
    }
    free(order);
    if (rc < 0) {
        for (int i = 0; i < n; i++) nbest_free(&out[i]);
        return errorf("%s", err);
    }
    return 0;
}

int decode_force(const Model *m, int n, const int *const *src, const int *src_len,
                 const int *const *tgt, const int *tgt_len, float *const *logp) {
    int V = m->dims.vocab, T = 0, rc = 0;
    for (int s = 0; s < n; s++) {
        if (src_len[s] + 1 > m->dims.max_positions || tgt_len[s] + 1 > m->dims.max_positions)
            return errorf("decode_force: pair %d is longer than max_positions %d", s + 1, m->dims.max_positions);
        T = tgt_len[s] > T ? tgt_len[s] : T;
    }
    Translator *tr = translator_new(m, 1);
    Decoder d;
    decoder_init(&d, tr);
    decoder_encode(&d, n, src, src_len);
    int *sent = xmalloc((size_t)(n ? n : 1) * sizeof(int)), *parent = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    int *tok = xmalloc((size_t)(n ? n : 1) * sizeof(int)), *prev_row = xmalloc((size_t)(n ? n : 1) * sizeof(int));
    for (int t = 0; t <= T && rc == 0; t++) {
        int rows = 0;
        for (int s = 0; s < n; s++) {
            if (tgt_len[s] < t) continue;
            sent[rows] = s;
            parent[rows] = t ? prev_row[s] : -1;
            tok[rows] = t ? tgt[s][t - 1] : TOK_BOS;
            prev_row[s] = rows++;
        }
        const float *lse;
        const float *out = decoder_step(&d, t, rows, sent, parent, tok, &lse);
        if (!out) { rc = -1; break; }
        for (int r = 0; r < rows; r++) {
            int s = sent[r];
            logp[s][t] = out[(size_t)r * V + (t < tgt_len[s] ? tgt[s][t] : TOK_EOS)] - lse[r];
        }
    }
    decoder_free(&d);
    translator_free(tr);
    free(sent); free(parent); free(tok); free(prev_row);
    return rc;
}

char *decode_output_text(const Bpe *bpe, const int *ids, int n) {
    char *s = bpe_decode(bpe, ids, n);   /* valid UTF-8 already */
    if (!s) return xstrdup("");
    for (char *p = s; *p; p++)           /* ASCII: never inside a multi-byte character */
        if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
    return s;
}

/* Encode one input line for the model: BPE, truncated to what the model
 * accepts. *ids grows as needed. Warnings name the line (1-based). */
static int encode_source(const Bpe *bpe, const Model *m, const char *line, size_t len, long line_no,
                         int **ids, int *cap, int *warned_utf8) {
    int bad = 0;
    int n = bpe_encode(bpe, line, len, ids, cap, &bad);
    if (n < 0) return -1;
    if (bad && !*warned_utf8) {
        log_warn("line %ld: invalid UTF-8 replaced by U+FFFD (further such lines are not reported)", line_no);
        *warned_utf8 = 1;
    }
    int maxn = m->dims.max_positions - 1;   /* room for EOS */
    if (n > maxn) {
        log_warn("line %ld: %d tokens, longer than the model's %d positions: truncated to %d tokens",
                 line_no, n, m->dims.max_positions, maxn);
        n = maxn;
    }
    return n;
}

char **translate_lines(const Model *m, const Bpe *bpe, const DecodeOptions *o,
                       const char *const *lines, int n) {
    Translator *t = translator_new(m, 1);
    char **out = translator_lines(t, bpe, o, lines, n);
    translator_free(t);
    return out;
}

char **translator_lines(const Translator *t, const Bpe *bpe, const DecodeOptions *o,
                        const char *const *lines, int n) {
    const Model *m = t->m;
    int **src = xcalloc((size_t)(n ? n : 1), sizeof *src), *len = xcalloc((size_t)(n ? n : 1), sizeof(int));
    NBest *nb = xcalloc((size_t)(n ? n : 1), sizeof *nb);
    int warned = 0, ok = 1;
    for (int i = 0; i < n && ok; i++) {
        int cap = 0;
        len[i] = encode_source(bpe, m, lines[i], strlen(lines[i]), i + 1, &src[i], &cap, &warned);
        if (len[i] < 0) { ok = 0; len[i] = 0; }
    }
    char **out = NULL;
    if (ok && translator_ids(t, o, n, (const int *const *)src, len, nb) == 0) {
        out = xmalloc((size_t)(n ? n : 1) * sizeof *out);
        for (int i = 0; i < n; i++) {
            out[i] = decode_output_text(bpe, nb[i].hyps[0].tokens, nb[i].hyps[0].len);
            nbest_free(&nb[i]);
        }
    }
    for (int i = 0; i < n; i++) free(src[i]);
    free(src); free(len); free(nb);
    return out;
}

void translate_free_lines(char **out, int n) {
    if (!out) return;
    for (int i = 0; i < n; i++) free(out[i]);
    free(out);
}

/* ======================================================================
 * tfm translate
 * ====================================================================== */

/* Lines from a file descriptor, with a way to ask "is more input there
 * right now?" so that a chunk is translated as soon as the input pauses
 * (interactive use) and is full-sized when the input is a file. */
typedef struct {
    int fd, eof;
    char *buf;
    size_t len, pos, cap;
} Reader;

static int reader_fill(Reader *r) {   /* one read(); 0 at EOF, -1 on error */
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (r->cap - r->len < 65536) { r->cap = r->cap * 2 + 65536; r->buf = xrealloc(r->buf, r->cap); }
    ssize_t k;
    do k = read(r->fd, r->buf + r->len, r->cap - r->len - 1); while (k < 0 && errno == EINTR);
    if (k < 0) return errorf("reading the input: %s", strerror(errno));
    if (k == 0) r->eof = 1;
    r->len += (size_t)k;
    return (int)(k > 0);
}

/* 1 if a line can be returned without blocking. */
static int reader_ready(Reader *r) {
    if (r->eof || (r->pos < r->len && memchr(r->buf + r->pos, '\n', r->len - r->pos))) return 1;
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* Next line (without '\n'; the text stays valid until the next call): its
 * length, or -1 at end of input, -2 on a read error. */
static long reader_line(Reader *r, char **line) {
    for (;;) {
        char *nl = r->pos < r->len ? memchr(r->buf + r->pos, '\n', r->len - r->pos) : NULL;
        if (nl) {
            *line = r->buf + r->pos;
            long n = nl - *line;
            *nl = 0;
            r->pos += (size_t)n + 1;
            return n;
        }
        if (r->eof) {
            if (r->pos == r->len) return -1;
            *line = r->buf + r->pos;   /* last line without '\n' */
            long n = (long)(r->len - r->pos);
            (*line)[n] = 0;
            r->pos = r->len;
            return n;
        }
        if (reader_fill(r) < 0) return -2;
    }
}

static void translate_usage(FILE *f) {
    fprintf(f,
        "usage: tfm translate -m MODEL [options] < input.txt > output.txt\n"
        "\n"
        "Translates stdin to stdout, one output line per input line, in input order,\n"
        "with beam search (paper section 6.1). Output is written while input is read:\n"
        "lines are read in chunks, each chunk is sorted by length into batches,\n"
        "translated, and written back in input order. MODEL is any tfm checkpoint\n"
        "(training checkpoint, best or averaged model): it holds the tokenizer.\n"
        "Options override the checkpoint's [decode] settings.\n"
        "\n"
        "options:\n"
        "  -m, --model FILE     the model (required)\n"
        "  --beam K             beam size; 1 = greedy search (config: decode.beam)\n"
        "  --alpha A            length penalty lp(Y) = ((5+|Y|)/6)^A; hypotheses are\n"
        "                       ranked by log P(Y|X) / lp(Y), |Y| counting EOS\n"
        "  --max-len-a A        at most A*|x|+B output tokens, |x| = source BPE tokens\n"
        "  --max-len-b B        (default from the checkpoint: input + 50)\n"
        "  --nbest K            up to K best hypotheses per input (K <= beam), one per line:\n"
        "                       LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT\n"
        "                       LINE = input line number (from 1), RANK = 1..K,\n"
        "                       SCORE = LOGPROB / lp(Y), LOGPROB = log P(Y|X) incl. EOS\n"
        "  --scores             1-best mode: append <TAB>SCORE<TAB>LOGPROB to each line\n"
        "  --batch-size N       sentences decoded together (does not change the output)\n"
        "  --threads N          threads (0: all cores; does not change the output)\n"
        "  -q, --quiet          no progress on stderr\n"
        "\n"
        "Input: an empty line gives an empty line (score 0); invalid UTF-8 becomes\n"
        "U+FFFD with one warning; a line longer than the model's max_positions is\n"
        "truncated, with a warning naming the line.\n"
        "\n"
        "example: tfm translate -m runs/multi30k-en-de/average.safetensors --beam 4 < test.en > test.de\n");
}

/* Write the outputs of one chunk in input order. */
static void write_chunk(FILE *f, const Bpe *bpe, NBest *nb, int n, long first_line, int nbest, int scores) {
    for (int i = 0; i < n; i++) {
        int k = nbest ? nb[i].n : 1;
        for (int j = 0; j < k; j++) {
            const Hypothesis *y = &nb[i].hyps[j];
            char *text = decode_output_text(bpe, y->tokens, y->len);
            if (nbest) fprintf(f, "%ld\t%d\t%.6f\t%.6f\t%s\n", first_line + i, j + 1, y->score, y->logprob, text);
            else if (scores) fprintf(f, "%s\t%.6f\t%.6f\n", text, y->score, y->logprob);
            else fprintf(f, "%s\n", text);
            free(text);
        }
    }
    fflush(f);
}

int cmd_translate(int argc, char **argv) {
    const char *model_path = NULL;
    /* -1 / NAN: not given, the checkpoint's [decode] value applies */
    int beam = -1, nbest = 0, scores = 0, batch = -1, threads = -1, max_len_b = -1;
    double alpha = NAN, max_len_a = NAN;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (is_help(a)) { translate_usage(stdout); return 0; }
        else if (opt_value(argc, argv, &i, "-m", &v) || opt_value(argc, argv, &i, "--model", &v)) model_path = v;
        else if (opt_value(argc, argv, &i, "--beam", &v)) {
            if ((beam = opt_int("translate", "--beam", v)) < 1) usage_error("translate", "--beam must be at least 1");
        } else if (opt_value(argc, argv, &i, "--alpha", &v)) {
            if (!((alpha = opt_double("translate", "--alpha", v)) >= 0)) usage_error("translate", "--alpha must be >= 0");
        } else if (opt_value(argc, argv, &i, "--max-len-a", &v)) {
            if (!((max_len_a = opt_double("translate", "--max-len-a", v)) >= 0)) usage_error("translate", "--max-len-a must be >= 0");
        } else if (opt_value(argc, argv, &i, "--max-len-b", &v)) {
            if ((max_len_b = opt_int("translate", "--max-len-b", v)) < 0) usage_error("translate", "--max-len-b must be >= 0");
        } else if (opt_value(argc, argv, &i, "--nbest", &v)) {
            if ((nbest = opt_int("translate", "--nbest", v)) < 1) usage_error("translate", "--nbest must be at least 1");
        } else if (opt_value(argc, argv, &i, "--batch-size", &v)) {
            if ((batch = opt_int("translate", "--batch-size", v)) < 1) usage_error("translate", "--batch-size must be at least 1");
        } else if (opt_value(argc, argv, &i, "--threads", &v)) {
            if ((threads = opt_int("translate", "--threads", v)) < 0) usage_error("translate", "--threads must be >= 0");
        } else if (!strcmp(a, "--scores")) scores = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) log_quiet = 1;
        else usage_error("translate", "unknown option '%s'", a);
    }
    if (!model_path) usage_error("translate", "a model is required (-m MODEL)");

    /* The model first: a missing or bad file is an error before any input is read. */
    Config c = {0};   /* filled by checkpoint_load */
    Bpe *bpe = NULL;
    Model m;
    memset(&m, 0, sizeof m);
    if (checkpoint_load(model_path, &c, &bpe, &m, NULL) < 0) die_error();
    DecodeOptions o;
    decode_options_from_config(&o, &c);
    if (beam > 0) o.beam = beam;
    if (!isnan(alpha)) o.alpha = alpha;
    if (!isnan(max_len_a)) o.max_len_a = max_len_a;
    if (max_len_b >= 0) o.max_len_b = max_len_b;
    if (batch > 0) o.batch_size = batch;
    if (nbest > o.beam) usage_error("translate", "--nbest %d is larger than the beam (%d)", nbest, o.beam);
    o.nbest = nbest > 0 ? nbest : 1;
    threads_init(threads >= 0 ? threads : c.threads);
    Translator *tr = translator_new(&m, 1);
    log_info("translate: %s (d_model %d, %d+%d layers, vocab %d), beam %d, alpha %g, max length %g*|x|+%d, batch %d, %d threads%s",
             model_path, m.dims.d_model, m.dims.enc_layers, m.dims.dec_layers, m.dims.vocab, o.beam, o.alpha,
             o.max_len_a, o.max_len_b, o.batch_size, threads_count(), translator_packed(tr) ? "" : " (BLIS products)");

    /* Chunks of up to `chunk` lines: enough to sort into full batches. */
    int chunk = o.batch_size * 8 > 256 ? o.batch_size * 8 : 256;
    Reader r = {.fd = STDIN_FILENO};
    char **lines = xmalloc((size_t)chunk * sizeof *lines);
    size_t *lens = xmalloc((size_t)chunk * sizeof *lens);
    int **src = xcalloc((size_t)chunk, sizeof *src), *cap = xcalloc((size_t)chunk, sizeof(int));
    int *len = xmalloc((size_t)chunk * sizeof(int));
    NBest *nb = xcalloc((size_t)chunk, sizeof *nb);
    long line_no = 0, out_tokens = 0;
    int warned = 0, rc = 0, done = 0;
    double t0 = now_seconds(), last_log = t0;
    while (!done && rc == 0) {
        int n = 0;
        while (n < chunk) {
            if (n > 0 && !reader_ready(&r)) break;   /* input paused: translate what we have */
            char *line;
            long k = reader_line(&r, &line);
            if (k == -2) { rc = 1; break; }
            if (k < 0) { done = 1; break; }
            lines[n] = xmalloc((size_t)k + 1);
            memcpy(lines[n], line, (size_t)k + 1);
            lens[n++] = (size_t)k;
        }
        if (rc) { for (int i = 0; i < n; i++) free(lines[i]); break; }
        for (int i = 0; i < n && rc == 0; i++) {
            len[i] = encode_source(bpe, &m, lines[i], lens[i], line_no + i + 1, &src[i], &cap[i], &warned);
            if (len[i] < 0) rc = 1;
        }
        if (rc == 0 && translator_ids(tr, &o, n, (const int *const *)src, len, nb) < 0) rc = 1;
        if (rc == 0) {
            write_chunk(stdout, bpe, nb, n, line_no + 1, nbest > 0, scores);
            for (int i = 0; i < n; i++) { out_tokens += nb[i].hyps[0].len; nbest_free(&nb[i]); }
            if (stdout_flush()) rc = 1;   /* a full disk: stop now, not after the whole input */
        }
        for (int i = 0; i < n; i++) free(lines[i]);
        line_no += n;
        double now = now_seconds();
        if (now - last_log > 10 && !done) {
            log_info("translate: %ld lines, %.1f lines/s", line_no, line_no / (now - t0));
            last_log = now;
        }
    }
    double el = now_seconds() - t0;
    if (rc == 0)
        log_info("translate: %ld lines, %ld output tokens in %.2fs (%.1f lines/s, %.0f tokens/s)",
                 line_no, out_tokens, el, el > 0 ? line_no / el : 0.0, el > 0 ? out_tokens / el : 0.0);
    else
        fprintf(stderr, "tfm: error: %s\n", error_message());
    for (int i = 0; i < chunk; i++) free(src[i]);
    free(src); free(cap); free(len); free(nb); free(lines); free(lens); free(r.buf);
    translator_free(tr);
    model_free(&m);
    bpe_free(bpe);
    config_free(&c);
    return rc;
}
