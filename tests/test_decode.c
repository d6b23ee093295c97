/* test_decode.c — beam search and incremental decoding.
 *
 *   - the search on a toy scorer (log-probs a hash of the prefix): with a
 *     beam wide enough to keep every candidate it finds exactly what
 *     exhaustive search finds (best and n-best order, length penalty), and
 *     with a beam of 1 it is greedy search;
 *   - the same on a tiny random Transformer, exhaustive scores from full
 *     recomputation (model_score);
 *   - incremental decoding == full recomputation: each hypothesis' log-prob
 *     from the search equals model_score's to 1e-5;
 *   - batch-size and thread-count invariance, bit for bit;
 *   - post-norm and pre-norm;
 *   - a vocabulary shortlist: the renormalised softmax (known answer), a
 *     whole-vocabulary list bit for bit as none, batch/thread invariance;
 *   - the last three again with bf16 products (model_set_precision): the
 *     invariances bit for bit as in fp32, incremental == full to a bf16
 *     tolerance (the two sum in different orders, and a difference in the
 *     last fp32 bit can move a value across a bf16 rounding boundary: one
 *     input off by 2^-8 relative; measured 1e-4 per token at most with
 *     fp32 attention: allowed 2e-3). Since the attention products are bf16
 *     too (roundings of q, k, v and the probabilities, at every key of every
 *     step), such flips reach the logits more often: one flip is a 2^-7
 *     relative change of one product input, which moves the logits by up to
 *     2^-7 of their range, and that range is at least |log p| of the token
 *     scored; allowed 2e-3 + 2^-7 |log p| per token (measured, post-norm:
 *     0.011 at log p = -5.3, 0.26 of the allowance; pre-norm 1e-6). */
#include "dispatch.h"
#include "test.h"

#include <stdint.h>

#include <unistd.h>

#include "bpe.h"
#include "checkpoint.h"
#include "config.h"
#include "crc32c.h"
#include "decode.h"
#include "gemm_bf16.h"
#include "gemm_int8.h"
#include "model.h"
#include "ops.h"
#include "util.h"

/* ---- toy scorer ---------------------------------------------------------
 * The log-probs after a prefix are a pseudo-random function of (sentence,
 * prefix): logits from a hash, then log-softmax (in double, then float). */
enum { TOY_V = 7 };   /* PAD UNK BOS EOS and tokens 4, 5, 6 */

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static void toy_logp(uint64_t h, float *logp, double eos_bias) {
    double z[TOY_V], mx = -1e30, s = 0;
    for (int w = 0; w < TOY_V; w++) {
        uint64_t r = mix(h, (uint64_t)w + 1000);
        z[w] = 3.0 * (double)(r >> 11) / 9007199254740992.0 + (w == TOK_EOS ? eos_bias : 0);
        mx = z[w] > mx ? z[w] : mx;
    }
    for (int w = 0; w < TOY_V; w++) s += exp(z[w] - mx);
    for (int w = 0; w < TOY_V; w++) logp[w] = (float)(z[w] - mx - log(s));
}

typedef struct {
    uint64_t *hash, *prev;   /* per row of the current / previous step */
    float *logp;
    int cap;
    double eos_bias;
    long calls, rows;
} Toy;

static const float *toy_step(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                             const float **lognorm) {
    Toy *T = ctx;
    *lognorm = NULL;   /* toy_logp gives log-probs already */
    if (n > T->cap) { errorf("toy: %d rows", n); return NULL; }
    uint64_t *tmp = T->prev; T->prev = T->hash; T->hash = tmp;
    for (int i = 0; i < n; i++) {
        uint64_t h = t == 0 ? mix(12345, (uint64_t)sent[i]) : mix(T->prev[parent[i]], (uint64_t)tok[i]);
        T->hash[i] = h;
        toy_logp(h, T->logp + (size_t)i * TOY_V, T->eos_bias);
    }
    T->calls++;
    T->rows += n;
    return T->logp;
}

static void toy_init(Toy *T, int cap, double eos_bias) {
    T->hash = xcalloc((size_t)cap, sizeof(uint64_t));
    T->prev = xcalloc((size_t)cap, sizeof(uint64_t));
    T->logp = xcalloc((size_t)cap * TOY_V, sizeof(float));
    T->cap = cap;
    T->eos_bias = eos_bias;
    T->calls = T->rows = 0;
}
static void toy_free(Toy *T) { free(T->hash); free(T->prev); free(T->logp); }

/* log P(y EOS | sentence s) under the toy, summed as the search sums (in double) */
static double toy_sequence_logprob(int s, const int *y, int len, double eos_bias) {
    float lp[TOY_V];
    double total = 0.0;
    uint64_t h = mix(12345, (uint64_t)s);
    for (int t = 0; t <= len; t++) {
        toy_logp(h, lp, eos_bias);
        int w = t < len ? y[t] : TOK_EOS;
        total += lp[w];
        if (t < len) h = mix(h, (uint64_t)w);
    }
    return total;
}

/* All finished hypotheses of up to max_len tokens (then EOS), by score. */
typedef struct { int y[64]; int len; double logprob, score; } Full;
static int full_cmp(const void *a, const void *b) {
    const Full *x = a, *y = b;
    return (x->score < y->score) - (x->score > y->score);
}

static int enumerate(int max_len, Full *out, int (*score)(void *, Full *), void *ctx) {
    static const int toks[] = {TOK_UNK, 4, 5, 6};
    int n = 0;
    for (int len = 0; len <= max_len; len++) {
        int total = 1;
        for (int i = 0; i < len; i++) total *= 4;
        for (int c = 0; c < total; c++) {
            Full *f = &out[n++];
            f->len = len;
            for (int i = 0, x = c; i < len; i++, x /= 4) f->y[i] = toks[x % 4];
            score(ctx, f);
        }
    }
    return n;
}

typedef struct { int s; double eos_bias, alpha; } ToyScoreCtx;
static int toy_full_score(void *ctx, Full *f) {
    ToyScoreCtx *c = ctx;
    f->logprob = toy_sequence_logprob(c->s, f->y, f->len, c->eos_bias);
    f->score = f->logprob / length_penalty(f->len + 1, c->alpha);
    return 0;
}

static int same_tokens(const Hypothesis *h, const Full *f) {
    if (h->len != f->len) return 0;
    for (int i = 0; i < h->len; i++) if (h->tokens[i] != f->y[i]) return 0;
    return 1;
}

/* A beam wide enough to hold every candidate (4^3 live x 5 tokens = 320 at
 * the last free step) makes beam search exhaustive: the best and the n-best
 * must be exactly those of the enumeration. */
static void test_toy_beam_equals_exhaustive(void) {
    enum { MAXLEN = 4, NS = 6 };
    static Full all[1 + 4 + 16 + 64 + 256];
    double alphas[] = {0.0, 0.6, 1.0, 2.0}, biases[] = {-1.0, 0.5};
    for (int ai = 0; ai < 4; ai++)
        for (int bi = 0; bi < 2; bi++) {
            DecodeOptions o = {.beam = 512, .alpha = alphas[ai], .max_len_a = 0, .max_len_b = MAXLEN, .nbest = 5, .batch_size = NS};
            Toy T;
            toy_init(&T, NS * 512, biases[bi]);
            StepFunction f = {TOY_V, toy_step, &T, NULL};
            int maxl[NS];
            for (int s = 0; s < NS; s++) maxl[s] = MAXLEN;
            NBest nb[NS];
            CHECK(beam_search(&f, NS, maxl, &o, nb) == 0);
            for (int s = 0; s < NS; s++) {
                ToyScoreCtx c = {s, biases[bi], alphas[ai]};
                int n = enumerate(MAXLEN, all, toy_full_score, &c);
                qsort(all, (size_t)n, sizeof *all, full_cmp);
                CHECK(nb[s].n == 5);
                for (int k = 0; k < nb[s].n; k++) {
                    CHECK_MSG(same_tokens(&nb[s].hyps[k], &all[k]), "alpha %g bias %g sentence %d rank %d: len %d vs %d",
                              alphas[ai], biases[bi], s, k, nb[s].hyps[k].len, all[k].len);
                    CHECK_NEAR(nb[s].hyps[k].score, all[k].score, 1e-6);
                    CHECK_NEAR(nb[s].hyps[k].logprob, all[k].logprob, 1e-6);
                    if (k) CHECK(nb[s].hyps[k].score <= nb[s].hyps[k - 1].score);
                }
                nbest_free(&nb[s]);
            }
            toy_free(&T);
        }
}

/* Early stopping: when EOS is likely, sentences stop long before the max
 * length (the search does not run to max_len), and what they return is
 * scored right. (That stopping never loses the best hypothesis is checked
 * by the exhaustive tests, whose short outputs also stop early.) */
static void test_toy_early_stop_saves_work(void) {
    enum { NS = 8 };
    DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 0, .max_len_b = 200, .nbest = 1, .batch_size = NS};
    Toy T;
    toy_init(&T, NS * 4, 2.0);   /* EOS likely: hypotheses finish early */
    StepFunction f = {TOY_V, toy_step, &T, NULL};
    int maxl[NS];
    for (int s = 0; s < NS; s++) maxl[s] = 200;
    NBest nb[NS];
    CHECK(beam_search(&f, NS, maxl, &o, nb) == 0);
    CHECK_MSG(T.calls < 200, "search ran %ld steps; it should stop long before max length 200", T.calls);
    for (int s = 0; s < NS; s++) {
        CHECK(nb[s].n == 1);
        CHECK_NEAR(nb[s].hyps[0].logprob, toy_sequence_logprob(s, nb[s].hyps[0].tokens, nb[s].hyps[0].len, 2.0), 1e-5);
        nbest_free(&nb[s]);
    }
    toy_free(&T);
}

/* Greedy search written out: argmax (lowest id on ties, PAD/BOS excluded)
 * until EOS or max length. Beam 1 must be exactly this. */
static void test_toy_greedy_is_beam1(void) {
    enum { NS = 10, MAXLEN = 12 };
    DecodeOptions o = {.beam = 1, .alpha = 0.6, .max_len_a = 0, .max_len_b = MAXLEN, .nbest = 1, .batch_size = NS};
    for (int bi = 0; bi < 2; bi++) {
        double bias = bi ? 0.3 : -0.5;
        Toy T;
        toy_init(&T, NS, bias);
        StepFunction f = {TOY_V, toy_step, &T, NULL};
        int maxl[NS];
        for (int s = 0; s < NS; s++) maxl[s] = MAXLEN;
        NBest nb[NS];
        CHECK(beam_search(&f, NS, maxl, &o, nb) == 0);
        for (int s = 0; s < NS; s++) {
            int y[MAXLEN], len = 0;
            float lp[TOY_V];
            double total = 0;
            uint64_t h = mix(12345, (uint64_t)s);
            for (;;) {
                toy_logp(h, lp, bias);
                int best = TOK_UNK;
                for (int w = 0; w < TOY_V; w++)
                    if (w != TOK_PAD && w != TOK_BOS && lp[w] > lp[best]) best = w;
                if (len == MAXLEN) best = TOK_EOS;
                total += lp[best];
                if (best == TOK_EOS) break;
                y[len++] = best;
                h = mix(h, (uint64_t)best);
            }
            CHECK(nb[s].n == 1);
            CHECK(nb[s].hyps[0].len == len);
            int same = nb[s].hyps[0].len == len;
            for (int i = 0; same && i < len; i++) same = nb[s].hyps[0].tokens[i] == y[i];
            CHECK_MSG(same, "sentence %d", s);
            CHECK_NEAR(nb[s].hyps[0].logprob, total, 1e-6);
            nbest_free(&nb[s]);
        }
        toy_free(&T);
    }
}

/* ---- a tiny random Transformer ------------------------------------------ */
static int g_prec;   /* the models' precision (model_set_precision: PREC_FP32, PREC_BF16, PREC_INT8) */

static void tiny_model(Model *m, int pre_norm, int vocab, uint64_t seed) {
    ModelDims d = {.vocab = vocab, .d_model = 16, .d_ff = 32, .heads = 2, .enc_layers = 2, .dec_layers = 2,
                   .max_positions = 64, .pre_norm = pre_norm};
    CHECK(model_init(m, &d, seed) == 0);
    /* Random weights give nearly uniform outputs; sharpen them (and make
     * LayerNorm's parameters non-trivial) so that search decisions matter. */
    Rng r;
    rng_seed(&r, seed + 1);
    for (size_t i = 0; i < m->num_params; i++) m->params[i] += 0.3f * rng_normal(&r);
    for (size_t i = 0; i < (size_t)vocab * d.d_model; i++) m->p.embed[i] *= 1.5f;
    model_set_precision(m, g_prec);
}

/* log P(y EOS | x) by full recomputation: one batch row per sequence. */
static void full_scores(Model *m, const int *x, int xlen, Full *fs, int n) {
    int T = 0;
    for (int i = 0; i < n; i++) T = fs[i].len + 1 > T ? fs[i].len + 1 : T;
    int S = xlen + 1;
    Batch b = {.B = n, .S = S, .T = T};
    b.src = xcalloc((size_t)n * S, sizeof(int));
    b.tgt_in = xcalloc((size_t)n * T, sizeof(int));
    b.tgt_out = xcalloc((size_t)n * T, sizeof(int));
    b.src_len = xmalloc((size_t)n * sizeof(int));
    b.tgt_len = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < xlen; j++) b.src[i * S + j] = x[j];
        b.src[i * S + xlen] = TOK_EOS;
        b.src_len[i] = S;
        b.tgt_in[i * T] = TOK_BOS;
        for (int j = 0; j < fs[i].len; j++) { b.tgt_in[i * T + j + 1] = fs[i].y[j]; b.tgt_out[i * T + j] = fs[i].y[j]; }
        b.tgt_out[i * T + fs[i].len] = TOK_EOS;
        b.tgt_len[i] = fs[i].len + 1;
        b.src_tokens += S;
        b.tgt_tokens += fs[i].len + 1;
    }
    float *lp = xmalloc((size_t)n * T * sizeof(float));
    CHECK_MSG(model_score(m, &b, lp) == 0, "%s", error_message());
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j <= fs[i].len; j++) s += lp[i * T + j];
        fs[i].logprob = s;
    }
    free(lp); free(b.src); free(b.tgt_in); free(b.tgt_out); free(b.src_len); free(b.tgt_len);
}

/* Beam search (incremental decoder) with a beam that keeps everything ==
 * exhaustive search by full recomputation: same n-best, same order, and the
 * same log-probs to 1e-5. Vocabulary: PAD UNK BOS EOS 4 5 6. */
static void test_model_beam_equals_exhaustive(void) {
    enum { MAXLEN = 3 };
    static Full all[1 + 4 + 16 + 64];
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, TOY_V, 7 + pre);
        int x0[] = {4, 5, 6, 5}, x1[] = {6}, x2[] = {5, 5, 4, 6, 6, 4, 1};
        const int *src[] = {x0, x1, x2};
        int len[] = {4, 1, 7};
        for (int ai = 0; ai < 3; ai++) {
            double alpha = ai * 0.8;
            DecodeOptions o = {.beam = 512, .alpha = alpha, .max_len_a = 0, .max_len_b = MAXLEN, .nbest = 4, .batch_size = 2};
            NBest nb[3];
            CHECK(translate_ids(&m, &o, 3, src, len, nb) == 0);
            for (int s = 0; s < 3; s++) {
                int n = 0;
                for (int l = 0; l <= MAXLEN; l++) {
                    int total = 1;
                    for (int i = 0; i < l; i++) total *= 4;
                    static const int toks[] = {TOK_UNK, 4, 5, 6};
                    for (int c = 0; c < total; c++, n++) {
                        all[n].len = l;
                        for (int i = 0, v = c; i < l; i++, v /= 4) all[n].y[i] = toks[v % 4];
                    }
                }
                full_scores(&m, src[s], len[s], all, n);
                for (int i = 0; i < n; i++) all[i].score = all[i].logprob / length_penalty(all[i].len + 1, alpha);
                qsort(all, (size_t)n, sizeof *all, full_cmp);
                CHECK(nb[s].n == 4);
                for (int k = 0; k < nb[s].n; k++) {
                    CHECK_MSG(same_tokens(&nb[s].hyps[k], &all[k]), "pre %d alpha %g sentence %d rank %d", pre, alpha, s, k);
                    CHECK_NEAR(nb[s].hyps[k].logprob, all[k].logprob, 1e-5);
                    CHECK_NEAR(nb[s].hyps[k].score, all[k].score, 1e-5);
                }
                nbest_free(&nb[s]);
            }
        }
        model_free(&m);
    }
}

/* Random source sentences over a larger vocabulary. */
static void random_sources(int n, int V, int maxlen, uint64_t seed, int **src, int *len) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        len[i] = (int)(rng_u64(&r) % (uint64_t)(maxlen + 1));
        if (i == 3) len[i] = 0;   /* an empty line among them */
        src[i] = xmalloc((size_t)(len[i] + 1) * sizeof(int));
        for (int j = 0; j < len[i]; j++) src[i][j] = 4 + (int)(rng_u64(&r) % (uint64_t)(V - 4));
    }
}

/* Incremental decoding computes the same function as full recomputation:
 * for every hypothesis the search returns, the per-token log-probs of
 * forced incremental decoding (decode_force, all hypotheses in one batch)
 * equal model_score's to 1e-5, and their sum is bit for bit the log-prob
 * the search reported (row results do not depend on the batch). */
/* int8 against fp32: per token log-prob, on the tiny sharpened random
 * models here (d_model 16: rows of 16 values, whose largest sets the step
 * of all; logits of size ~10): measured 0.33 post-norm and 0.12 pre-norm at
 * most. A gross error (a wrong scale, bias or zero point) moves log-probs by
 * whole nats. The kernel itself is checked exactly in test_int8.c. */
#define INT8_TOL 0.6
static void test_incremental_equals_full(void) {
    enum { N = 12, V = 40, K = 5 };
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, V, 31 + pre);
        int *src[N], len[N];
        random_sources(N, V, 9, 5, src, len);
        DecodeOptions o = {.beam = K, .alpha = 0.6, .max_len_a = 1.5, .max_len_b = 4, .nbest = K, .batch_size = 5};
        NBest nb[N];
        CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, nb) == 0);
        /* all hypotheses of non-empty sources, as forced-decoding pairs */
        const int *fs[N * K], *ft[N * K];
        int fsl[N * K], ftl[N * K], fh[N * K], n = 0;
        float *lp[N * K];
        for (int s = 0; s < N; s++) {
            if (len[s] == 0) {
                CHECK(nb[s].n == 1 && nb[s].hyps[0].len == 0 && nb[s].hyps[0].logprob == 0);
                continue;
            }
            CHECK(nb[s].n == K);
            for (int k = 0; k < nb[s].n; k++) {
                const Hypothesis *h = &nb[s].hyps[k];
                CHECK(h->len <= decode_max_len(&o, len[s], 64));
                if (k) CHECK(h->score <= nb[s].hyps[k - 1].score);
                fs[n] = src[s]; fsl[n] = len[s]; ft[n] = h->tokens; ftl[n] = h->len; fh[n] = s * K + k;
                lp[n++] = xmalloc((size_t)(h->len + 1) * sizeof(float));
            }
        }
        CHECK(decode_force(&m, NULL, n, fs, fsl, ft, ftl, lp) == 0);
        double maxdiff = 0, maxfrac = 0;   /* maxfrac: bf16, the worst |incremental - full| / its allowance */
        int exact = 1;
        for (int i = 0; i < n; i++) {
            const Hypothesis *h = &nb[fh[i] / K].hyps[fh[i] % K];
            double sum = 0;
            for (int t = 0; t <= h->len; t++) sum += lp[i][t];
            exact &= sum == h->logprob;
            /* full recomputation, one sequence per batch */
            Full f = {.len = h->len};
            memcpy(f.y, h->tokens, (size_t)h->len * sizeof(int));
            int T = h->len + 1, S = fsl[i] + 1;
            Batch b = {.B = 1, .S = S, .T = T, .src_tokens = S, .tgt_tokens = T};
            int sb[80], ti[80], to[80], sl = S, tl = T;
            memcpy(sb, fs[i], (size_t)fsl[i] * sizeof(int));
            sb[fsl[i]] = TOK_EOS;
            ti[0] = TOK_BOS;
            for (int t = 0; t < h->len; t++) { ti[t + 1] = h->tokens[t]; to[t] = h->tokens[t]; }
            to[h->len] = TOK_EOS;
            b.src = sb; b.tgt_in = ti; b.tgt_out = to; b.src_len = &sl; b.tgt_len = &tl;
            float full[80];
            CHECK_MSG(model_score(&m, &b, full) == 0, "%s", error_message());
            for (int t = 0; t <= h->len; t++) {
                double dd = fabs(full[t] - lp[i][t]);
                if (getenv("DBG") && dd > 5e-6) fprintf(stderr, "t %d full %.7f inc %.7f\n", t, full[t], lp[i][t]);
                maxdiff = dd > maxdiff ? dd : maxdiff;
                double allow = 2e-3 + fabs(full[t]) / 128;   /* bf16: see the header */
                maxfrac = dd / allow > maxfrac ? dd / allow : maxfrac;
            }
            free(lp[i]);
        }
        CHECK(n >= 40);
        CHECK_MSG(exact, "pre %d: forced decoding's log-probs do not sum to the search's bit for bit", pre);
        /* int8: incremental int8 against full recomputation in fp32 (model_score has no int8) */
        if (g_prec == PREC_BF16) {
            CHECK_MSG(maxfrac <= 1.0, "pre %d bf16: |incremental - full| per token up to %g of 2e-3 + 2^-7 |log p|", pre,
                      maxfrac);
            printf("bf16, pre %d: worst |incremental - full| per token %.3g of 2e-3 + 2^-7 |log p|\n", pre, maxfrac);
        } else {
            double tol = g_prec == PREC_INT8 ? INT8_TOL : 1e-5;
            CHECK_MSG(maxdiff <= tol, "pre %d %s: max |incremental - full| per token = %g", pre, precision_name(g_prec), maxdiff);
        }
        if (g_prec) printf("%s, pre %d: max |incremental - full| per token = %.3g\n", precision_name(g_prec), pre, maxdiff);
        if (g_prec == PREC_INT8) CHECK_MSG(maxdiff > 1e-5, "int8 decoding equals fp32's: is int8 on?");
        if (getenv("TFM_VERBOSE")) fprintf(stderr, "pre %d: %d hypotheses, max per-token difference %g\n", pre, n, maxdiff);
        for (int i = 0; i < N; i++) { nbest_free(&nb[i]); free(src[i]); }
        model_free(&m);
    }
}

/* attention_row (ops.h), decoding's attention for one query, against a
 * double-precision reference on every path through it: heads of 8 columns
 * (the scalar loops), 16, 32 and 64 (vector registers; the value product
 * runs over all heads at once, 128 columns a pass, then 16 at a time),
 * and 48, whose heads straddle those 128-column passes; 1 to 17 keys (the
 * scores go four keys at a time, then one); the keys and values lie
 * anywhere (rows of a pool, in shuffled order); bf16 on and off. Peaked
 * scores (q, k up to +-2) make the heads' probabilities differ, so a value
 * weighted by another head's probabilities is off by O(1).
 * Bound, per output element, from the data (u = 2^-24 for fp32's
 * roundings): a score is a sum of Dk products, off by at most
 * E = scale (Dk + 2) u max_j sum_t |q_t k_jt|; softmax moves log p by at most
 * 2E, fast_expf adds < 5e-7 (test_ops) to each exponential, the sum of nk
 * of them and the division (nk + 3) u, bf16 the probabilities' rounding
 * 2^-8: relative error r of each p. The output's sum of nk terms adds
 * (nk + 1) u. So |out - ref| <= A (r + (nk + 1) u), A = sum_j p_j |v_j|,
 * with a factor 2 for the second-order terms. */
static void test_attention_row(void) {
    static const int shapes[][2] = {{2, 8}, {2, 16}, {4, 32}, {8, 64}, {3, 48}};   /* heads, Dk */
    static const int nks[] = {1, 3, 4, 7, 17};
    Rng r;
    rng_seed(&r, 77);
    double worst = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++)
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                int H = shapes[si][0], Dk = shapes[si][1], D = H * Dk, nk = nks[ni], pool = nk + 3;
                float *q = xmalloc((size_t)D * sizeof(float)), *kv = xmalloc((size_t)2 * pool * D * sizeof(float));
                float *out = xmalloc((size_t)D * sizeof(float)), *sc = xmalloc((size_t)H * nk * sizeof(float));
                for (int i = 0; i < D; i++) q[i] = 4.0f * (float)rng_uniform(&r) - 2.0f;
                for (int i = 0; i < 2 * pool * D; i++) kv[i] = 4.0f * (float)rng_uniform(&r) - 2.0f;
                if (bf16) {   /* the caller's part: q, keys and values hold bf16 values */
                    for (int i = 0; i < D; i++) q[i] = bf16_round(q[i]);
                    for (int i = 0; i < 2 * pool * D; i++) kv[i] = bf16_round(kv[i]);
                }
                const float *keys[17], *vals[17];
                for (int j = 0; j < nk; j++) {   /* key j: pool row (5 j + 2) mod pool, values in the second half */
                    int row = (5 * j + 2) % pool;
                    keys[j] = kv + (size_t)row * D;
                    vals[j] = kv + (size_t)(pool + row) * D;
                }
                attention_row(out, q, keys, vals, nk, H, Dk, sc, bf16);
                double scale = 1.0 / sqrt((double)Dk), u = ldexp(1.0, -24);
                int bad = 0;
                for (int h = 0; h < H; h++) {
                    double s[17], mx = -INFINITY, sum = 0, E = 0;
                    for (int j = 0; j < nk; j++) {
                        double dot = 0, mag = 0;
                        for (int t = 0; t < Dk; t++) {
                            dot += (double)q[h * Dk + t] * keys[j][h * Dk + t];
                            mag += fabs((double)q[h * Dk + t] * keys[j][h * Dk + t]);
                        }
                        s[j] = dot * scale;
                        mx = fmax(mx, s[j]);
                        E = fmax(E, scale * (Dk + 2) * u * mag);
                    }
                    for (int j = 0; j < nk; j++) sum += s[j] = exp(s[j] - mx);
                    double rel = 2 * E + 1e-6 + (nk + 3) * u + (bf16 ? ldexp(1.0, -8) : 0);
                    for (int c = 0; c < Dk; c++) {
                        double ref = 0, A = 0;
                        for (int j = 0; j < nk; j++) {
                            ref += s[j] / sum * vals[j][h * Dk + c];
                            A += s[j] / sum * fabs((double)vals[j][h * Dk + c]);
                        }
                        double err = fabs(out[h * Dk + c] - ref), bound = 2 * A * (rel + (nk + 1) * u);
                        worst = fmax(worst, err / bound);
                        if (err > bound && bad++ < 3)
                            fprintf(stderr, "  H %d Dk %d nk %d bf16 %d: head %d column %d: %.7g, reference %.7g (bound %.3g)\n",
                                    H, Dk, nk, bf16, h, c, out[h * Dk + c], ref, bound);
                    }
                }
                CHECK_MSG(!bad, "attention_row, H %d Dk %d nk %d bf16 %d: %d elements beyond the bound", H, Dk, nk, bf16, bad);
                free(q); free(kv); free(out); free(sc);
            }
    printf("attention_row: worst error %.3g of its bound\n", worst);
}

/* int8_rescore (decode.h) on its own: random logits with ties, a width that
 * is not a multiple of 16, with and without a column-to-token map, R = 0 and
 * 8. The R best columns of a row (ties: the lower first) and EOS must hold
 * x . E[w] with E in bf16 (against a double sum: float's rounding of D
 * products is within D 2^-24 sum |x e|; 4x that allowed), every other
 * column its own bits. */
static void test_int8_rescore_rows(void) {
    enum { N = 6, C = 70, VV = 90, D = 37, R = 8 };
    Rng r;
    rng_seed(&r, 4242);
    float *y = xmalloc(N * C * sizeof(float)), *y0 = xmalloc(N * C * sizeof(float)), *x = xmalloc(N * D * sizeof(float));
    uint16_t *e = xmalloc((size_t)VV * D * sizeof(uint16_t));
    int ids[C];
    for (int c = 0; c < C; c++) ids[c] = c < 40 ? c : c + 20;   /* increasing, the specials first */
    for (int i = 0; i < VV * D; i++) e[i] = bf16_from_float(rng_normal(&r));
    for (int i = 0; i < N * D; i++) x[i] = rng_normal(&r);
    for (int use_ids = 0; use_ids <= 1; use_ids++)
        for (int rr = 0; rr <= R; rr += R) {
            for (int i = 0; i < N * C; i++) y0[i] = (float)(int)(8 * rng_normal(&r)) / 4;   /* many ties */
            y0[3 * C + TOK_EOS] = 50;   /* row 3: EOS among the best anyway */
            memcpy(y, y0, N * C * sizeof(float));
            int8_rescore(e, y, C, x, N, C, use_ids ? ids : NULL, D, rr);
            int ok_val = 1, ok_rest = 1, nres = 0;
            for (int i = 0; i < N; i++) {
                const float *a = y0 + (size_t)i * C, *b = y + (size_t)i * C;
                for (int c = 0; c < C; c++) {
                    int better = 0;   /* columns ranked above c */
                    for (int c2 = 0; c2 < C; c2++) better += a[c2] > a[c] || (a[c2] == a[c] && c2 < c);
                    if (!(rr > 0 && (better < rr || c == TOK_EOS))) { ok_rest &= !memcmp(&a[c], &b[c], sizeof(float)); continue; }
                    const uint16_t *ew = e + (size_t)(use_ids ? ids[c] : c) * D;
                    double dot = 0, mag = 0;
                    for (int k = 0; k < D; k++) {
                        double p = (double)x[i * D + k] * bf16_to_float(ew[k]);
                        dot += p;
                        mag += fabs(p);
                    }
                    ok_val &= fabs(b[c] - dot) <= 4 * D * 0x1p-24 * mag;
                    nres++;
                }
            }
            CHECK_MSG(ok_val, "ids %d, R %d: a rescored column is not x . E[w]", use_ids, rr);
            CHECK_MSG(ok_rest, "ids %d, R %d: a column outside the best and EOS changed", use_ids, rr);
            CHECK(nres >= N * rr);
        }
    free(y); free(y0); free(x); free(e);
}

/* ... and in decoding: forced decoding of random pairs on the tiny models
 * gives other log-probs with it than without (it is on), and with none, all
 * or the default few tokens rescored int8 stays within INT8_TOL of fp32.
 * (On these d_model 16 models the int8 hidden state's error is most of it;
 * on the demo model rescoring takes 15% off the sentences' mean error
 * against fp32: doc/precision.md.) */
static void test_int8_rescore(void) {
    enum { N = 12, V = 40, T = 6 };
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, V, 41 + pre);
        int *src[N], len[N], tgt[N][T], tl[N];
        const int *fs[N], *ft[N];
        float *lp[4][N];
        random_sources(N, V, 9, 7 + pre, src, len);
        Rng r;
        rng_seed(&r, 99 + pre);
        for (int i = 0; i < N; i++) {
            if (len[i] == 0) { src[i][0] = 4 + i; len[i] = 1; }
            tl[i] = 1 + i % T;
            for (int t = 0; t < tl[i]; t++) tgt[i][t] = 4 + (int)(rng_u64(&r) % (V - 4));
            fs[i] = src[i]; ft[i] = tgt[i];
            for (int k = 0; k < 4; k++) lp[k][i] = xmalloc((size_t)(tl[i] + 1) * sizeof(float));
        }
        model_set_precision(&m, PREC_FP32);
        CHECK(decode_force(&m, NULL, N, fs, len, ft, tl, lp[0]) == 0);
        model_set_precision(&m, PREC_INT8);
        int rs[3] = {0, V, -1};
        for (int k = 0; k < 3; k++) {
            decode_int8_rescore(rs[k]);
            CHECK(decode_force(&m, NULL, N, fs, len, ft, tl, lp[k + 1]) == 0);
        }
        double worst[3] = {0};
        int differ = 0;
        for (int i = 0; i < N; i++) {
            differ |= memcmp(lp[1][i], lp[3][i], (size_t)(tl[i] + 1) * sizeof(float)) != 0;
            for (int t = 0; t <= tl[i]; t++)
                for (int k = 0; k < 3; k++) {
                    double dd = fabs((double)lp[k + 1][i][t] - lp[0][i][t]);
                    worst[k] = dd > worst[k] ? dd : worst[k];
                }
        }
        CHECK_MSG(differ, "pre %d: int8 decoding with and without rescoring gives the same log-probs", pre);
        for (int k = 0; k < 3; k++)
            CHECK_MSG(worst[k] <= INT8_TOL, "pre %d, R %d: |int8 - fp32| per token up to %g", pre, rs[k], worst[k]);
        for (int i = 0; i < N; i++) { free(src[i]); for (int k = 0; k < 4; k++) free(lp[k][i]); }
        model_free(&m);
    }
}

static int same_nbest(const NBest *a, const NBest *b) {
    if (a->n != b->n) return 0;
    for (int k = 0; k < a->n; k++) {
        const Hypothesis *x = &a->hyps[k], *y = &b->hyps[k];
        if (x->len != y->len || memcmp(&x->logprob, &y->logprob, sizeof(double)) ||
            memcmp(&x->score, &y->score, sizeof(double)) ||
            memcmp(x->tokens, y->tokens, (size_t)x->len * sizeof(int)))
            return 0;
    }
    return 1;
}

/* translate_ids at batch sizes 3, 8, 23 and 1 or 2 threads gives ref (batch 1, one thread) bit for bit. */
static void check_batch_thread_invariance(const Model *m, DecodeOptions o, int n, int **src, const int *len,
                                          const NBest *ref, const char *what) {
    NBest *got = xmalloc((size_t)n * sizeof *got);
    int sizes[] = {3, 8, 23}, thr[] = {1, 2};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) {
            threads_init(thr[b]);
            o.batch_size = sizes[a];
            CHECK(translate_ids(m, &o, n, (const int *const *)src, len, got) == 0);
            int same = 1;
            for (int i = 0; i < n; i++) { same &= same_nbest(&ref[i], &got[i]); nbest_free(&got[i]); }
            CHECK_MSG(same, "%s: batch %d threads %d differs from batch 1 thread 1", what, sizes[a], thr[b]);
        }
    free(got);
}

/* Bit-identical results whatever the batch size and thread count. */
static void test_batch_and_thread_invariance(void) {
    enum { N = 23, V = 60 };
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, V, 77 + pre);
        int *src[N], len[N];
        random_sources(N, V, 14, 9 + pre, src, len);
        DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 1.2, .max_len_b = 5, .nbest = 3, .batch_size = 1};
        NBest ref[N];
        threads_init(1);
        CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, ref) == 0);
        check_batch_thread_invariance(&m, o, N, src, len, ref, pre ? "pre-norm" : "post-norm");
        /* greedy too (beam 1), and greedy == beam 1 through the model */
        o.beam = 1; o.nbest = 1; o.batch_size = 1;
        threads_init(1);
        NBest g1[N], g2[N];
        CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, g1) == 0);
        threads_init(2);
        o.batch_size = 7;
        CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, g2) == 0);
        for (int i = 0; i < N; i++) { CHECK(same_nbest(&g1[i], &g2[i])); nbest_free(&g1[i]); nbest_free(&g2[i]); }
        for (int i = 0; i < N; i++) { nbest_free(&ref[i]); free(src[i]); }
        model_free(&m);
    }
    threads_init(1);
}

/* The pre-packed products (translator_new(m, 1)) give bit for bit what
 * bli_sgemm gives (pack 0), on shapes that exercise every edge: d_model 40
 * (partial NR panels), d_ff 300 (two k blocks of KC = 256), vocabulary 70,
 * and up to 48 x 4 rows (two m blocks of MC = 144); one and two threads. */
static void test_packed_equals_blis(void) {
    enum { N = 48, V = 70 };
    ModelDims dm = {.vocab = V, .d_model = 40, .d_ff = 300, .heads = 5, .enc_layers = 1, .dec_layers = 2,
                    .max_positions = 64, .pre_norm = 0};
    Model m;
    CHECK(model_init(&m, &dm, 5) == 0);
    Rng r;
    rng_seed(&r, 6);
    for (size_t i = 0; i < m.num_params; i++) m.params[i] += 0.2f * rng_normal(&r);
    model_set_precision(&m, g_prec);
    int *src[N], len[N];
    random_sources(N, V, 12, 17, src, len);
    DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 1, .max_len_b = 3, .nbest = 2, .batch_size = N};
    Translator *packed = translator_new(&m, 1), *plain = translator_new(&m, 0);
#if defined(__x86_64__)
    CHECK_MSG(translator_packed(packed), "x86-64: the packed path should take BLIS's micro-kernel (%s)", blis_kernels());
#endif
    CHECK(!translator_packed(plain));
    for (int th = 1; th <= 2; th++) {
        threads_init(th);
        NBest a[N], b[N];
        CHECK(translator_ids(packed, &o, N, (const int *const *)src, len, a) == 0);
        CHECK(translator_ids(plain, &o, N, (const int *const *)src, len, b) == 0);
        int same = 1;
        for (int i = 0; i < N; i++) { same &= same_nbest(&a[i], &b[i]); nbest_free(&a[i]); nbest_free(&b[i]); }
        CHECK_MSG(same, "%d threads: packed weights and bli_sgemm disagree", th);
    }
    threads_init(1);
    if (g_prec == PREC_BF16) {   /* bf16 is on when decoding: the log-probs are not fp32's */
        model_set_precision(&m, 0);
        Translator *f32 = translator_new(&m, 1);
        NBest a[N], b[N];
        CHECK(translator_ids(packed, &o, N, (const int *const *)src, len, a) == 0);
        CHECK(translator_ids(f32, &o, N, (const int *const *)src, len, b) == 0);
        int differ = 0, nonempty = 0;
        for (int i = 0; i < N; i++) {
            nonempty += len[i] > 0;
            differ += len[i] > 0 && a[i].hyps[0].logprob != b[i].hyps[0].logprob;
            nbest_free(&a[i]); nbest_free(&b[i]);
        }
        CHECK_MSG(differ == nonempty, "bf16 and fp32 decoding agree on %d of %d log-probs", nonempty - differ, nonempty);
        translator_free(f32);
    }
    translator_free(packed);
    translator_free(plain);
    for (int i = 0; i < N; i++) free(src[i]);
    model_free(&m);
}

/* Greedy through the real model: at each step the argmax of full
 * recomputation (model_score with one batch row per candidate token w:
 * decoder input BOS y, target y w, read log p(w | y) at the last position)
 * until EOS. Beam 1 must be exactly this. */
static void test_model_greedy(void) {
    enum { V = 9, MAXLEN = 6 };
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, V, 99 + pre);
        int x[] = {4, 7, 8, 5, 6};
        const int *src[] = {x};
        int len[] = {5};
        DecodeOptions o = {.beam = 1, .alpha = 1.0, .max_len_a = 0, .max_len_b = MAXLEN, .nbest = 1, .batch_size = 1};
        NBest nb;
        CHECK(translate_ids(&m, &o, 1, src, len, &nb) == 0);
        int y[MAXLEN], ylen = 0;
        for (;;) {
            int T = ylen + 1, S = 6;
            Batch b = {.B = V, .S = S, .T = T};
            b.src = xcalloc((size_t)V * S, sizeof(int));
            b.tgt_in = xcalloc((size_t)V * T, sizeof(int));
            b.tgt_out = xcalloc((size_t)V * T, sizeof(int));
            b.src_len = xmalloc(V * sizeof(int));
            b.tgt_len = xmalloc(V * sizeof(int));
            for (int w = 0; w < V; w++) {
                memcpy(b.src + w * S, x, 5 * sizeof(int));
                b.src[w * S + 5] = TOK_EOS;
                b.tgt_in[w * T] = TOK_BOS;
                for (int j = 0; j < ylen; j++) { b.tgt_in[w * T + j + 1] = y[j]; b.tgt_out[w * T + j] = y[j]; }
                b.tgt_out[w * T + ylen] = w;
                b.src_len[w] = S;
                b.tgt_len[w] = T;
            }
            b.src_tokens = (long)V * S;
            b.tgt_tokens = (long)V * T;
            float lp[V * (MAXLEN + 1)];
            CHECK(model_score(&m, &b, lp) == 0);
            int best = TOK_UNK;
            for (int w = 0; w < V; w++)
                if (w != TOK_PAD && w != TOK_BOS && lp[w * T + ylen] > lp[best * T + ylen]) best = w;
            free(b.src); free(b.tgt_in); free(b.tgt_out); free(b.src_len); free(b.tgt_len);
            if (ylen == MAXLEN || best == TOK_EOS) break;
            y[ylen++] = best;
        }
        CHECK(nb.n == 1);
        int same = nb.hyps[0].len == ylen;
        for (int i = 0; same && i < ylen; i++) same = nb.hyps[0].tokens[i] == y[i];
        CHECK_MSG(same, "pre %d: beam 1 gave %d tokens, argmax of full recomputation %d", pre, nb.hyps[0].len, ylen);
        nbest_free(&nb);
        model_free(&m);
    }
}

/* ---- sampling ------------------------------------------------------------ */
/* A Markov scorer: log p(w | previous token) from a fixed table, known exactly. */
enum { MK_V = 8 };
static float mk_logp[MK_V][MK_V];
typedef struct { float *x; int cap; } Markov;
static const float *markov_step(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                                const float **lognorm) {
    (void)t; (void)sent; (void)parent;
    Markov *M = ctx;
    if (n > M->cap) { errorf("markov: %d rows", n); return NULL; }
    for (int i = 0; i < n; i++) memcpy(M->x + (size_t)i * MK_V, mk_logp[tok[i]], sizeof mk_logp[0]);
    *lognorm = NULL;
    return M->x;
}
static void markov_table(void) {
    Rng r;
    rng_seed(&r, 2024);
    for (int a = 0; a < MK_V; a++) {
        double z[MK_V], mx = -1e30, sum = 0;
        for (int w = 0; w < MK_V; w++) {
            z[w] = w == TOK_PAD || w == TOK_BOS ? -INFINITY : 2.0 * rng_uniform(&r);
            mx = z[w] > mx ? z[w] : mx;
        }
        for (int w = 0; w < MK_V; w++) sum += exp(z[w] - mx);
        for (int w = 0; w < MK_V; w++) mk_logp[a][w] = (float)(z[w] - mx - log(sum));
    }
}

/* Pearson's chi-square of counts against probabilities p (summing to 1 over
 * the categories used), categories with expected count < 5 pooled; *df. */
static double chi_square(const long *count, const double *p, int k, long total, int *df) {
    double chi = 0, pool_e = 0, pool_o = 0;
    int cats = 0;
    for (int j = 0; j < k; j++) {
        double e = p[j] * (double)total;
        if (e < 5) { pool_e += e; pool_o += (double)count[j]; continue; }
        chi += (count[j] - e) * (count[j] - e) / e;
        cats++;
    }
    if (pool_e > 0) { chi += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1 ? pool_e : 1); cats++; }
    *df = cats - 1;
    return chi;
}
/* A generous bound: chi-square at p ~ 1e-6 is below df + 7 sqrt(2 df) + 12. */
static double chi_bound(int df) { return df + 7 * sqrt(2.0 * df) + 12; }

/* Empirical frequencies of the first two sampled tokens against the
 * scorer's probabilities: p(w | BOS) and p(w | first = a), plain (T = 1,
 * all tokens) and tempered with top-k (T = 0.5, k = 3); the logprob the
 * search reports is the scorer's (T = 1) log-probability of the sample. */
static void test_sampling_distribution(void) {
    enum { N = 20000 };
    markov_table();
    Markov M = {xmalloc((size_t)N * MK_V * sizeof(float)), N};
    StepFunction f = {.vocab = MK_V, .step = markov_step, .ctx = &M};
    int *max_len = xmalloc(N * sizeof(int));
    long *index = xmalloc(N * sizeof(long));
    for (int i = 0; i < N; i++) { max_len[i] = 2; index[i] = i; }
    NBest *out = xmalloc(N * sizeof *out);
    struct { double temp; int topk; } cfg[] = {{1.0, 0}, {0.5, 3}};
    for (int c = 0; c < 2; c++) {
        DecodeOptions o = {.sample = 1, .temperature = cfg[c].temp, .topk = cfg[c].topk, .seed = 7, .alpha = 0.6};
        CHECK(sample_search(&f, N, max_len, index, &o, out) == 0);
        /* the distribution sampled from, after token a */
        double p[MK_V][MK_V];
        for (int a = 0; a < MK_V; a++) {
            int keep[MK_V], order[MK_V];
            for (int w = 0; w < MK_V; w++) order[w] = w;
            for (int i = 0; i < MK_V; i++)   /* by log-prob, desc, ties to lower id */
                for (int j = i + 1; j < MK_V; j++)
                    if (mk_logp[a][order[j]] > mk_logp[a][order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
            for (int w = 0; w < MK_V; w++) keep[w] = 0;
            int k = cfg[c].topk ? cfg[c].topk : MK_V;
            for (int j = 0; j < k; j++) keep[order[j]] = order[j] != TOK_PAD && order[j] != TOK_BOS;
            double z = 0;
            for (int w = 0; w < MK_V; w++) z += keep[w] ? exp(mk_logp[a][w] / cfg[c].temp) : 0;
            for (int w = 0; w < MK_V; w++) p[a][w] = keep[w] ? exp(mk_logp[a][w] / cfg[c].temp) / z : 0;
        }
        long first[MK_V] = {0}, second[MK_V][MK_V] = {{0}};
        int logprob_ok = 1, outside = 0;
        for (int i = 0; i < N; i++) {
            const Hypothesis *h = &out[i].hyps[0];
            int y0 = h->len > 0 ? h->tokens[0] : TOK_EOS;
            first[y0]++;
            if (h->len > 0) second[y0][h->len > 1 ? h->tokens[1] : TOK_EOS]++;
            double lp = 0;
            int prev = TOK_BOS;
            for (int t = 0; t <= h->len; t++) {
                int w = t < h->len ? h->tokens[t] : TOK_EOS;
                lp += mk_logp[prev][w];
                if (t < h->len && t >= 2) outside = 1;
                if (w != TOK_EOS && p[prev][w] == 0 && t < 2) outside = 1;
                prev = w;
            }
            logprob_ok &= fabs(lp - h->logprob) < 1e-9;
            nbest_free(&out[i]);
        }
        CHECK_MSG(!outside, "T %g topk %d: a token outside the top-k, or longer than max_len", cfg[c].temp, cfg[c].topk);
        CHECK(logprob_ok);
        int df;
        double chi = chi_square(first, p[TOK_BOS], MK_V, N, &df);
        CHECK_MSG(df >= 2 && chi < chi_bound(df), "T %g topk %d: first token chi-square %.1f, df %d", cfg[c].temp, cfg[c].topk, chi, df);
        int tested = 0;
        for (int a = 4; a < MK_V; a++) {
            long na = 0;
            for (int w = 0; w < MK_V; w++) na += second[a][w];
            if (na < 500) continue;
            chi = chi_square(second[a], p[a], MK_V, na, &df);
            CHECK_MSG(chi < chi_bound(df), "T %g topk %d: second token after %d: chi-square %.1f, df %d", cfg[c].temp, cfg[c].topk, a, chi, df);
            tested++;
        }
        CHECK(tested >= (cfg[c].topk ? 1 : 2));
        if (getenv("TFM_VERBOSE")) fprintf(stderr, "T %g topk %d: first-token chi-square %.2f (df %d)\n", cfg[c].temp, cfg[c].topk,
                                            chi_square(first, p[TOK_BOS], MK_V, N, &df), df);
    }
    /* a wrong distribution is caught: counts from p(. | BOS) against p(. | 4) */
    {
        long first[MK_V] = {0};
        DecodeOptions o = {.sample = 1, .temperature = 1, .seed = 7};
        CHECK(sample_search(&f, N, max_len, index, &o, out) == 0);
        for (int i = 0; i < N; i++) { first[out[i].hyps[0].len ? out[i].hyps[0].tokens[0] : TOK_EOS]++; nbest_free(&out[i]); }
        double p4[MK_V];
        for (int w = 0; w < MK_V; w++) p4[w] = exp(mk_logp[4][w]);
        int df;
        CHECK(chi_square(first, p4, MK_V, N, &df) > chi_bound(df));
    }
    DecodeOptions bad = {.sample = 1, .temperature = 0};
    CHECK(sample_search(&f, 1, max_len, index, &bad, out) < 0 && strstr(error_message(), "temperature"));
    free(M.x); free(max_len); free(index); free(out);
}

/* On a tiny Transformer: the first sampled token's frequencies against the
 * model's p(w | BOS, x) from forced decoding. */
static void test_sampling_model(void) {
    enum { N = 6000, V = 30 };
    Model m;
    tiny_model(&m, 1, V, 505);
    int x[4] = {5, 9, 17, 4}, *src[N], len[N];
    for (int i = 0; i < N; i++) { src[i] = x; len[i] = 4; }
    DecodeOptions o = {.sample = 1, .temperature = 1, .seed = 3, .max_len_a = 0, .max_len_b = 1, .batch_size = 64, .alpha = 0.6};
    NBest *out = xmalloc(N * sizeof *out);
    threads_init(2);
    CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, out) == 0);
    long count[V] = {0};
    for (int i = 0; i < N; i++) { count[out[i].hyps[0].len ? out[i].hyps[0].tokens[0] : TOK_EOS]++; nbest_free(&out[i]); }
    /* p(w | BOS, x) for every w: forced decoding of the one-token targets w */
    const int *fs[V], *ft[V];
    int fsl[V], ftl[V], w1[V];
    float lp0[V][2], *lp[V];
    for (int w = 0; w < V; w++) { fs[w] = x; fsl[w] = 4; w1[w] = w; ft[w] = &w1[w]; ftl[w] = 1; lp[w] = lp0[w]; }
    CHECK(decode_force(&m, NULL, V, fs, fsl, ft, ftl, lp) == 0);
    double p[V], total = 0;
    for (int w = 0; w < V; w++) { p[w] = w == TOK_PAD || w == TOK_BOS ? 0 : exp(lp[w][0]); total += p[w]; }
    for (int w = 0; w < V; w++) p[w] /= total;   /* PAD and BOS are never drawn */
    int df;
    double chi = chi_square(count, p, V, N, &df);
    CHECK_MSG(df >= 10 && chi < chi_bound(df), "first token: chi-square %.1f, df %d", chi, df);
    if (getenv("TFM_VERBOSE")) fprintf(stderr, "tiny model: first-token chi-square %.2f (df %d)\n", chi, df);
    free(out);
    model_free(&m);
    threads_init(1);
}

/* Samples depend on (seed, sentence index) only: the same whatever the
 * batch size, the thread count and how the input is cut into calls; another
 * seed gives other samples. */
static void test_sampling_invariance(void) {
    enum { N = 23, V = 60 };
    Model m;
    tiny_model(&m, 0, V, 78);
    int *src[N], len[N];
    random_sources(N, V, 14, 10, src, len);
    DecodeOptions o = {.sample = 1, .temperature = 0.8, .topk = 20, .seed = 11, .alpha = 0.6, .max_len_a = 1.2,
                       .max_len_b = 5, .batch_size = 1};
    NBest ref[N], got[N];
    threads_init(1);
    CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, ref) == 0);
    check_batch_thread_invariance(&m, o, N, src, len, ref, "sampling");
    /* the last 13 sentences alone, as sentences 10.. of the input */
    o.index_base = 10;
    CHECK(translate_ids(&m, &o, N - 10, (const int *const *)src + 10, len + 10, got + 10) == 0);
    int same = 1;
    for (int i = 10; i < N; i++) { same &= same_nbest(&ref[i], &got[i]); nbest_free(&got[i]); }
    CHECK_MSG(same, "sampling: a sentence's sample depends on how the input is cut");
    o.index_base = 0;
    o.seed = 12;
    CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, got) == 0);
    int differ = 0;
    for (int i = 0; i < N; i++) { differ += !same_nbest(&ref[i], &got[i]); nbest_free(&got[i]); }
    CHECK_MSG(differ >= N / 2, "another seed changed only %d of %d samples", differ, N);
    for (int i = 0; i < N; i++) { nbest_free(&ref[i]); free(src[i]); }
    model_free(&m);
    threads_init(1);
}

/* ---- ensembles ------------------------------------------------------------- */
/* A model ensembled with itself translates bit for bit as the model alone
 * (beam, n-best, greedy, sampling); an ensemble of two models scores each
 * hypothesis by the mean of their log-probs (against forced decoding). */
static void test_ensemble(void) {
    enum { N = 12, V = 40, K = 4 };
    Model a, b;
    tiny_model(&a, 1, V, 61);
    tiny_model(&b, 1, V, 62);
    int *src[N], len[N];
    random_sources(N, V, 9, 6, src, len);
    DecodeOptions opts[3] = {
        {.beam = K, .alpha = 0.6, .max_len_a = 1.5, .max_len_b = 4, .nbest = K, .batch_size = 5},
        {.beam = 1, .alpha = 0.6, .max_len_a = 1.5, .max_len_b = 4, .nbest = 1, .batch_size = 5},
        {.sample = 1, .temperature = 1, .seed = 5, .alpha = 0.6, .max_len_a = 1.5, .max_len_b = 4, .nbest = 1, .batch_size = 5},
    };
    const Model *self[2] = {&a, &a}, *two[2] = {&a, &b};
    Translator *one = translator_new(&a, 1), *twice = translator_new_ensemble(self, 2, 1), *ens = translator_new_ensemble(two, 2, 1);
    CHECK(one && twice && ens);
    for (int k = 0; k < 3; k++) {
        NBest r1[N], r2[N];
        CHECK(translator_ids(one, &opts[k], N, (const int *const *)src, len, r1) == 0);
        CHECK(translator_ids(twice, &opts[k], N, (const int *const *)src, len, r2) == 0);
        int same = 1;
        for (int i = 0; i < N; i++) { same &= same_nbest(&r1[i], &r2[i]); nbest_free(&r1[i]); nbest_free(&r2[i]); }
        CHECK_MSG(same, "options %d: the ensemble of a model with itself differs from the model", k);
    }
    NBest nb[N];
    CHECK(translator_ids(ens, &opts[0], N, (const int *const *)src, len, nb) == 0);
    const int *fs[N * K], *ft[N * K];
    int fsl[N * K], ftl[N * K], n = 0;
    const Hypothesis *hy[N * K];
    float *la[N * K], *lb[N * K];
    for (int s = 0; s < N; s++)
        for (int j = 0; len[s] && j < nb[s].n; j++) {
            hy[n] = &nb[s].hyps[j];
            fs[n] = src[s]; fsl[n] = len[s]; ft[n] = hy[n]->tokens; ftl[n] = hy[n]->len;
            la[n] = xmalloc((size_t)(hy[n]->len + 1) * sizeof(float));
            lb[n] = xmalloc((size_t)(hy[n]->len + 1) * sizeof(float));
            n++;
        }
    CHECK(decode_force(&a, NULL, n, fs, fsl, ft, ftl, la) == 0 && decode_force(&b, NULL, n, fs, fsl, ft, ftl, lb) == 0);
    double maxdiff = 0;
    for (int i = 0; i < n; i++) {
        double mean = 0;
        for (int t = 0; t <= hy[i]->len; t++) mean += 0.5 * ((double)la[i][t] + lb[i][t]);
        maxdiff = fmax(maxdiff, fabs(mean - hy[i]->logprob));
        free(la[i]); free(lb[i]);
    }
    CHECK(n >= 30);
    CHECK_MSG(maxdiff < 1e-4, "ensemble log-prob vs the mean of the models' forced log-probs: %g", maxdiff);
    for (int i = 0; i < N; i++) { nbest_free(&nb[i]); free(src[i]); }
    /* models with other vocabularies cannot be ensembled */
    Model c;
    tiny_model(&c, 1, V + 1, 63);
    const Model *bad[2] = {&a, &c};
    CHECK(translator_new_ensemble(bad, 2, 1) == NULL && strstr(error_message(), "model 2 has a vocabulary of 41, model 1 of 40"));
    translator_free(one); translator_free(twice); translator_free(ens);
    model_free(&a); model_free(&b); model_free(&c);
}

static void test_lengths(void) {
    DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 1, .max_len_b = 50, .nbest = 1, .batch_size = 1};
    CHECK(decode_max_len(&o, 10, 1024) == 60);
    CHECK(decode_max_len(&o, 10, 40) == 39);   /* BOS + 39 tokens fill 40 positions */
    o.max_len_a = 1.5; o.max_len_b = 0;
    CHECK(decode_max_len(&o, 3, 1024) == 4);
    CHECK_NEAR(length_penalty(1, 0.6), 1.0, 1e-12);
    CHECK_NEAR(length_penalty(7, 1.0), 2.0, 1e-12);
    CHECK_NEAR(length_penalty(25, 0.5), sqrt(5.0), 1e-12);
}

/* int8 decoding through the scalar model gives the VNNI kernel's, oneDNN's
 * and the AMX loops' translations bit for bit (same n-best, log-probs, scores), at
 * one and two threads; the model path is the one CPUs without VNNI take. */
static void test_int8_kernels_agree(void) {
    enum { N = 30, V = 70 };
    ModelDims dm = {.vocab = V, .d_model = 40, .d_ff = 130, .heads = 5, .enc_layers = 1, .dec_layers = 2,
                    .max_positions = 64, .pre_norm = 1};
    Model m;
    CHECK(model_init(&m, &dm, 8) == 0);
    Rng r;
    rng_seed(&r, 9);
    for (size_t i = 0; i < m.num_params; i++) m.params[i] += 0.2f * rng_normal(&r);
    model_set_precision(&m, PREC_INT8);
    int *src[N], len[N];
    random_sources(N, V, 12, 19, src, len);
    DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 1, .max_len_b = 3, .nbest = 2, .batch_size = 11};
    Int8Kernel was = int8_kernel();
    Int8Kernel kerns[] = {INT8_VNNI, INT8_AMX_MODEL, INT8_AMX, INT8_ONEDNN, INT8_BY_ROWS};
    const char *names[] = {"VNNI", "AMX model", "AMX", "oneDNN (with VNNI or AMX)", "by rows (AMX with oneDNN's AMX)"};
    for (int th = 1; th <= 2; th++) {
        threads_init(th);
        NBest a[N], b[N];
        int8_set_kernel(INT8_MODEL);
        CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, a) == 0);
        for (int k = 0; k < 5; k++) {
            if (!int8_runs(kerns[k])) {
                if (th == 1) SKIP("no %s on this CPU: not compared", names[k]);
                continue;
            }
            int8_set_kernel(kerns[k]);
            CHECK(translate_ids(&m, &o, N, (const int *const *)src, len, b) == 0);
            int same = 1;
            for (int i = 0; i < N; i++) { same &= same_nbest(&a[i], &b[i]); nbest_free(&b[i]); }
            CHECK_MSG(same, "%d threads: the int8 scalar model and the %s kernel translate differently", th, names[k]);
        }
        for (int i = 0; i < N; i++) nbest_free(&a[i]);
    }
    int8_set_kernel(was);
    threads_init(1);
    for (int i = 0; i < N; i++) free(src[i]);
    model_free(&m);
}

/* The weights a Translator holds once the model's fp32 parameters are
 * released (translator_owns_weights), at a realistic width (d_model 256,
 * vocabulary 4000); the released model still translates as before.
 * int8: at most 0.35x an fp32 Translator's (issue 26's goal). fp32 and
 * bf16: every weight matrix once, packed: e bytes per weight (fp32: 4, the
 * floats in BLIS's layout; bf16: 2, AVX512_BF16's 16-bit panels, or 4,
 * rounded floats for BLIS's kernel, emulated) plus the fp32 embedding (its
 * lookups, 4 V D bytes) and the vectors; 1% more for the panels' padding
 * (at most 63 rows of a matrix: here only the output layer's 4000 rows are
 * not a multiple of 64, 0.3%). A Translator of pack = 0 reads the model's
 * weights (linear_rows): it does not own them (int8 always quantizes). */
static void test_released_memory(void) {
    enum { N = 6, V = 4000 };
    ModelDims dm = {.vocab = V, .d_model = 256, .d_ff = 1024, .heads = 4, .enc_layers = 1, .dec_layers = 1,
                    .max_positions = 64, .pre_norm = 1};
    Model m;
    CHECK(model_init(&m, &dm, 3) == 0);
    Translator *f32 = translator_new(&m, 1);
    /* fp32's weights as translate holds them: its own copies once the parameters go (else the parameters) */
    size_t b32 = translator_bytes(f32) - (translator_owns_weights(f32) ? m.num_params * sizeof(float) : 0);
    CHECK(translator_owns_weights(f32) == packed_linear_packs(1, 0));
    translator_free(f32);
    model_set_precision(&m, g_prec);
    Translator *plain = translator_new(&m, 0);
    CHECK(translator_owns_weights(plain) == (g_prec == PREC_INT8));
    translator_free(plain);
    Translator *t = translator_new(&m, 1);
    if (!translator_owns_weights(t)) {   /* no BLIS kernel to pack for: fp32/bf16 read the model's weights */
        SKIP("%s: no packed layers here (BLIS kernel %s): the weights stay the model's", precision_name(g_prec), blis_kernels());
        translator_free(t);
        model_free(&m);
        return;
    }
    int *src[N], len[N];
    random_sources(N, V, 10, 23, src, len);
    DecodeOptions o = {.beam = 2, .alpha = 0.6, .max_len_a = 1, .max_len_b = 3, .nbest = 1, .batch_size = 4};
    NBest a[N], b[N];
    CHECK(translator_ids(t, &o, N, (const int *const *)src, len, a) == 0);
    size_t vectors = 0, matrices = 0;
    for (int i = 0; i < m.num_tensors; i++) *(m.tensors[i].ndim == 1 ? &vectors : &matrices) += m.tensors[i].size;
    model_release_params(&m);
    CHECK(m.params == NULL);
    size_t bt = translator_bytes(t);
    CHECK(translator_ids(t, &o, N, (const int *const *)src, len, b) == 0);
    int same = 1;
    for (int i = 0; i < N; i++) { same &= same_nbest(&a[i], &b[i]); nbest_free(&a[i]); nbest_free(&b[i]); free(src[i]); }
    CHECK(same);
    printf("%s weights %.2f MB, fp32 %.2f MB: %.3fx\n", precision_name(g_prec), bt / 1e6, b32 / 1e6, (double)bt / b32);
    if (g_prec == PREC_INT8) CHECK_MSG(bt <= 0.35 * b32, "int8 %zu bytes, fp32 %zu", bt, b32);
    if (g_prec != PREC_INT8) {
        double e = g_prec == PREC_BF16 && bf16_decode_kernel() ? 2 : 4, want = e * matrices + 4.0 * ((size_t)V * dm.d_model + vectors);
        CHECK_MSG(bt >= e * matrices && bt <= 1.01 * want, "%s %zu bytes, expected %.0f (+1%%)", precision_name(g_prec), bt, want);
    }
    translator_free(t);
    model_free(&m);
}

/* ---- the vocabulary shortlist (shortlist.h) -------------------------------
 * A tokenizer only for the shortlist's vocabulary check (its size sets the
 * tiny model's V), and a hand-written shortlist: frequent 10..14, lexical
 * 20 -> 50 51 52, 30 -> 60 61 62, 40 -> 70 71 72; whole = 1: every token. */
static Bpe *sl_bpe(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/test_decode_%d_bpe.txt", getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return NULL;
    fputs("a small corpus for a small vocabulary\nwith a few words\n", f);
    fclose(f);
    const char *files[] = {path};
    BpeLearnOptions o = {.vocab_size = 300, .normalization = "nfkc", .threads = 1, .quiet = 1};
    Bpe *b = bpe_learn(files, 1, &o);
    CHECK(b != NULL);
    remove(path);
    return b;
}

static Shortlist *sl_make(const Bpe *b, int whole) {
    int V = bpe_vocab_size(b);
    char *tok = bpe_to_string(b), *body = xmalloc((size_t)V * 8 + 512);
    int at = snprintf(body, 512, "tfm-shortlist 1\nvocab %d tokenizer %08x\nk 3 n %d\nfrequent %d\n", V,
                      (unsigned)crc32c(0, tok, strlen(tok)), whole ? V : 5, whole ? V - 4 : 5);
    for (int i = 0; i < (whole ? V - 4 : 5); i++) at += sprintf(body + at, i ? " %d" : "%d", whole ? 4 + i : 10 + i);
    at += sprintf(body + at, "\nlexical 3\n20 50 51 52\n30 60 61 62\n40 70 71 72\n");
    at += sprintf(body + at, "crc32c %08x\n", (unsigned)crc32c(0, body, (size_t)at));
    Shortlist *sl = shortlist_from_string(body, (size_t)at, "test", b);
    CHECK_MSG(sl != NULL, "%s", error_message());
    free(tok); free(body);
    return sl;
}

/* With a shortlist, the log-prob of a candidate w of the sentence is the
 * full softmax's renormalised over the candidates C:
 *     log p_sl(w) = log p(w) - log sum_{c in C} p(c),
 * and -inf for any other token; at the first step and after a prefix. Both
 * sides come from the same logits (the shortlist's output layer gathers the
 * same rows: the same products, bit for bit, in every precision); they
 * differ by the rounding of the two float log-sum-exps (|lse| < 32 here:
 * ulp 4e-6 each, and fast_expf's 2e-7 relative) and of the double
 * reference's sum of float log-probs: within 2e-5. */
#define SL_TOL 2e-5
static void test_shortlist_known_answer(void) {
    Bpe *b = sl_bpe();
    if (!b) return;
    int V = bpe_vocab_size(b);
    Shortlist *sl = sl_make(b, 0);
    for (int pre = 0; pre <= 1 && sl; pre++) {
        Model m;
        tiny_model(&m, pre, V, 606 + pre);
        int x[] = {20, 30, 99};
        unsigned char *cand = xcalloc((size_t)V, 1);
        shortlist_mark(sl, x, 3, cand);
        int nc = 0;
        for (int w = 0; w < V; w++) nc += cand[w];
        CHECK(nc == 4 + 5 + 3 + 6);
        for (int prefix = 0; prefix <= 1; prefix++) {   /* targets [w] and [50, w] */
            const int **fs = xmalloc((size_t)V * sizeof *fs), **ft = xmalloc((size_t)V * sizeof *ft);
            int *fsl = xmalloc((size_t)V * sizeof(int)), *ftl = xmalloc((size_t)V * sizeof(int)), *y = xmalloc((size_t)V * 2 * sizeof(int));
            float **lp = xmalloc((size_t)V * sizeof *lp), **ls = xmalloc((size_t)V * sizeof *ls);
            for (int w = 0; w < V; w++) {
                fs[w] = x; fsl[w] = 3;
                y[2 * w] = prefix ? 50 : w; y[2 * w + 1] = w;
                ft[w] = &y[2 * w]; ftl[w] = 1 + prefix;
                lp[w] = xmalloc(3 * sizeof(float)); ls[w] = xmalloc(3 * sizeof(float));
            }
            /* int8 rescores each row's best tokens among the columns it has (the
             * whole vocabulary or the list: two sets); every token, both the same */
            decode_int8_rescore(V);
            CHECK(decode_force(&m, NULL, V, fs, fsl, ft, ftl, lp) == 0);
            CHECK(decode_force(&m, sl, V, fs, fsl, ft, ftl, ls) == 0);
            /* the same with the products per sentence (decode_force's V sentences take the union by default) */
            float **l0 = xmalloc((size_t)V * sizeof *l0);
            for (int w = 0; w < V; w++) l0[w] = xmalloc(3 * sizeof(float));
            decode_shortlist_union_ratio(0);
            CHECK(decode_force(&m, sl, V, fs, fsl, ft, ftl, l0) == 0);
            decode_shortlist_union_ratio(15);
            decode_int8_rescore(-1);
            int same = 1;
            for (int w = 0; w < V; w++) { same &= !memcmp(l0[w], ls[w], (size_t)(1 + prefix) * sizeof(float)); free(l0[w]); }
            free(l0);
            CHECK_MSG(same, "pre %d prefix %d: per-sentence and union products differ", pre, prefix);
            double sum = 0, worst = 0;
            for (int w = 0; w < V; w++) if (cand[w]) sum += exp((double)lp[w][prefix]);
            int others_inf = 1;
            for (int w = 0; w < V; w++) {
                if (!cand[w]) { others_inf &= isinf(ls[w][prefix]) && ls[w][prefix] < 0; continue; }
                double want = (double)lp[w][prefix] - log(sum), d = fabs(ls[w][prefix] - want);
                worst = d > worst ? d : worst;
            }
            CHECK_MSG(worst <= SL_TOL, "pre %d prefix %d: renormalised log-probs off by %.3g", pre, prefix, worst);
            CHECK_MSG(others_inf, "pre %d prefix %d: a token outside the list has a finite log-prob", pre, prefix);
            if (prefix) CHECK(ls[0][0] == ls[V - 1][0]);   /* the same prefix token: the same first-step score */
            for (int w = 0; w < V; w++) { free(lp[w]); free(ls[w]); }
            free(fs); free(ft); free(fsl); free(ftl); free(y); free(lp); free(ls);
        }
        free(cand);
        model_free(&m);
    }
    shortlist_free(sl);
    bpe_free(b);
}

/* A shortlist that holds the whole vocabulary translates bit for bit as no
 * shortlist (n-best tokens, log-probs, scores), and a real one gives the
 * same results whatever the batch and thread count, every token of every
 * hypothesis a candidate of its sentence. */
static void test_shortlist_decoding(void) {
    enum { N = 17 };
    Bpe *b = sl_bpe();
    if (!b) return;
    int V = bpe_vocab_size(b);
    for (int pre = 0; pre <= 1; pre++) {
        Model m;
        tiny_model(&m, pre, V, 707 + pre);
        int *src[N], len[N];
        random_sources(N, 60, 9, 17 + pre, src, len);   /* ids 4..59: some hit the lexical table */
        src[5][0] = 20; src[6][0] = 30;
        DecodeOptions o = {.beam = 4, .alpha = 0.6, .max_len_a = 1.5, .max_len_b = 4, .nbest = 4, .batch_size = 5};
        NBest ref[N], got[N];
        threads_init(1);
        Translator *plain = translator_new(&m, 1), *whole = translator_new(&m, 1), *real = translator_new(&m, 1);
        CHECK(translator_set_shortlist(whole, sl_make(b, 1)) == 0);
        CHECK(translator_set_shortlist(real, sl_make(b, 0)) == 0);
        CHECK(translator_ids(plain, &o, N, (const int *const *)src, len, ref) == 0);
        CHECK(translator_ids(whole, &o, N, (const int *const *)src, len, got) == 0);
        int same = 1;
        for (int i = 0; i < N; i++) { same &= same_nbest(&ref[i], &got[i]); nbest_free(&ref[i]); nbest_free(&got[i]); }
        CHECK_MSG(same, "pre %d: a whole-vocabulary shortlist changed a translation", pre);
        /* the real one: batch 1 on one thread is the reference */
        o.batch_size = 1;
        CHECK(translator_ids(real, &o, N, (const int *const *)src, len, ref) == 0);
        Shortlist *check = sl_make(b, 0);
        unsigned char *mark = xcalloc((size_t)V, 1);
        int inside = 1;
        for (int i = 0; i < N && check; i++) {
            shortlist_mark(check, src[i], len[i], mark);
            for (int k = 0; k < ref[i].n; k++)
                for (int j = 0; j < ref[i].hyps[k].len; j++) inside &= mark[ref[i].hyps[k].tokens[j]];
            memset(mark, 0, (size_t)V);
        }
        CHECK_MSG(inside, "pre %d: a hypothesis holds a token outside its sentence's candidates", pre);
        int sizes[] = {3, 8, 17}, thr[] = {1, 2};
        double ratios[] = {0, 1e9};   /* products per sentence, and over the batch's union */
        for (int a = 0; a < 3; a++)
            for (int t = 0; t < 2; t++)
                for (int r = 0; r < 2; r++) {
                    threads_init(thr[t]);
                    decode_shortlist_union_ratio(ratios[r]);
                    o.batch_size = sizes[a];
                    CHECK(translator_ids(real, &o, N, (const int *const *)src, len, got) == 0);
                    same = 1;
                    for (int i = 0; i < N; i++) { same &= same_nbest(&ref[i], &got[i]); nbest_free(&got[i]); }
                    CHECK_MSG(same, "pre %d: shortlist, batch %d threads %d, %s products differ from batch 1", pre, sizes[a],
                              thr[t], r ? "union" : "per-sentence");
                }
        decode_shortlist_union_ratio(15);
        threads_init(1);
        for (int i = 0; i < N; i++) { nbest_free(&ref[i]); free(src[i]); }
        free(mark);
        shortlist_free(check);
        translator_free(plain); translator_free(whole); translator_free(real);
        model_free(&m);
    }
    /* a shortlist of another vocabulary is refused */
    Model m;
    tiny_model(&m, 0, 40, 9);
    Translator *t = translator_new(&m, 1);
    CHECK(translator_set_shortlist(t, sl_make(b, 0)) < 0 && strstr(error_message(), "vocabulary"));
    translator_free(t);
    model_free(&m);
    bpe_free(b);
}

int main(void) {
    threads_init(1);   /* the invariance test sets its own counts */
    RUN(test_lengths);
    RUN(test_attention_row);
    RUN(test_toy_beam_equals_exhaustive);
    RUN(test_toy_early_stop_saves_work);
    RUN(test_toy_greedy_is_beam1);
    RUN(test_model_beam_equals_exhaustive);
    RUN(test_incremental_equals_full);
    RUN(test_batch_and_thread_invariance);
    RUN(test_packed_equals_blis);
    RUN(test_model_greedy);
    RUN(test_sampling_distribution);
    RUN(test_sampling_model);
    RUN(test_sampling_invariance);
    RUN(test_ensemble);
    RUN(test_shortlist_known_answer);
    RUN(test_shortlist_decoding);
    RUN(test_released_memory);
    g_prec = PREC_BF16;   /* the same with bf16 products */
    printf("bf16 products: %s\n", bf16_decode_mode());   /* what decoding runs */
    RUN(test_incremental_equals_full);
    RUN(test_batch_and_thread_invariance);
    RUN(test_packed_equals_blis);
    RUN(test_released_memory);
    g_prec = PREC_INT8;   /* and with int8 ones, by the kernel this CPU has */
    printf("int8 products: %s\n", int8_mode());
    RUN(test_incremental_equals_full);
    RUN(test_batch_and_thread_invariance);
    RUN(test_int8_kernels_agree);
    RUN(test_int8_rescore);
    RUN(test_int8_rescore_rows);
    RUN(test_released_memory);
    RUN(test_shortlist_known_answer);
    RUN(test_shortlist_decoding);
    return test_summary();
}
