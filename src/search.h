/* search.h — beam search with a length penalty (paper section 6.1: "beam
 * search with a beam size of 4 and length penalty alpha = 0.6"), written
 * against an abstract step function so that it can be tested on toy scorers.
 * decode.h provides the step function of the Transformer.
 *
 * Beam search, as done here (K = beam size):
 *   - every hypothesis starts as BOS with score 0; a step extends each live
 *     hypothesis by every token (PAD and BOS excluded) with its log-prob;
 *   - per sentence, the K best extensions by raw score (sum of log-probs)
 *     are kept; those ending in EOS are finished, the others stay live;
 *   - finished hypotheses compete by length-normalised score
 *         score(Y) = log P(Y|X) / lp(Y),  lp(Y) = ((5 + |Y|) / 6)^alpha
 *     (Wu et al. 2016, GNMT), |Y| counting the output tokens and EOS;
 *   - a sentence is done when it has no live hypothesis, when no live one
 *     can beat the nbest-th finished one (log-probs are <= 0, so a live
 *     hypothesis with raw score s can at best reach s / lp(max_len + 1)),
 *     or at max_len output tokens (then EOS is forced).
 * With K = 1 this is greedy search (argmax until EOS). Results do not depend
 * on the batch size or the thread count: every computation on a hypothesis
 * is done row by row in the same order whatever its neighbours are.
 *
 * Sampling (sample = 1, for back-translation): one hypothesis per sentence;
 * each step draws the next token w with probability
 *     p(w) ∝ exp(log p(w | y_<t, x) / T)     (T = temperature)
 * over the topk most probable tokens (topk = 0: all; PAD and BOS never),
 * until EOS or max_len (then EOS is forced). Sentence i of a call draws from
 * its own generator, seeded with (seed, index_base + i): a sentence's sample
 * depends on the seed and its index only, never on the batch or threads.
 * Its logprob is the model's (T = 1) log-probability of the sampled tokens.
 */
#ifndef TFM_SEARCH_H
#define TFM_SEARCH_H

typedef struct {
    int beam;            /* K: hypotheses kept per sentence; 1 = greedy */
    double alpha;        /* length penalty exponent (0: raw log-prob) */
    double max_len_a;    /* at most a * |x| + b output tokens (EOS excluded), */
    int max_len_b;       /*   |x| = source BPE tokens, capped by max_positions */
    int nbest;           /* finished hypotheses returned per sentence (<= beam) */
    int batch_size;      /* sentences decoded together */
    int sample;          /* 1: sample instead of beam search (beam, nbest ignored) */
    double temperature;  /* sampling: T > 0 */
    int topk;            /* sampling: from the topk most probable tokens (0: all) */
    unsigned long long seed;   /* sampling: with the sentence index, seeds its generator */
    long index_base;     /* sampling: index of the first sentence of a call */
} DecodeOptions;

/* Lengths and penalty as used by the search (exposed for tests). */
double length_penalty(int len, double alpha);            /* ((5+len)/6)^alpha */
int decode_max_len(const DecodeOptions *o, int src_len, int max_positions);

typedef struct {
    int *tokens;         /* output tokens, EOS excluded (malloc'd) */
    int len;
    double logprob;      /* sum of log p of the tokens and EOS */
    double score;        /* logprob / length_penalty(len + 1, alpha) */
} Hypothesis;

typedef struct {
    Hypothesis *hyps;    /* best first; n <= nbest */
    int n;
} NBest;

void nbest_free(NBest *nb);

/* A step function computes, for the n hypotheses live at step t, the
 * log-probabilities of the next token: row i continues row parent[i] of
 * step t-1 (parent[i] = -1 at t = 0), belongs to sentence sent[i] and its
 * last token (position t of the decoder input) is tok[i] (BOS at t = 0).
 * It returns scores x [n, vocab] in a buffer of its own (valid until its
 * next call) and sets *lognorm to [n] normalisers, so that
 *     log p(w | row i) = x[i, w] - lognorm[i]
 * (the Transformer returns its logits and their logsumexp; a scorer whose
 * x are already log-probs sets *lognorm = NULL). NULL + errorf on error.
 * With ids set (a vocabulary shortlist, shortlist.h) the scores cover only
 * `vocab` candidate tokens: column c of x scores token ids[c]. ids ascend
 * and hold the special tokens, so ids[c] = c for c <= TOK_EOS and ties still
 * go to the lower token id; the search hands the step function and returns
 * token ids, never columns. */
typedef struct {
    int vocab;           /* columns of x: the vocabulary, or the candidates */
    const float *(*step)(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                         const float **lognorm);
    void *ctx;
    const int *ids;      /* NULL: column c is token c */
} StepFunction;

/* Search nsent sentences at once; max_len[s] bounds sentence s. out[s] gets
 * at least one and at most o->nbest hypotheses, best first. */
int beam_search(const StepFunction *f, int nsent, const int *max_len,
                const DecodeOptions *o, NBest *out);
/* Sample one hypothesis for each of nsent sentences; sentence s has index
 * index[s] (its generator's seed with o->seed). out[s] gets one hypothesis. */
int sample_search(const StepFunction *f, int nsent, const int *max_len, const long *index,
                  const DecodeOptions *o, NBest *out);
/* Beam search or sampling, as o->sample says (index: as sample_search). */
int decode_search(const StepFunction *f, int nsent, const int *max_len, const long *index,
                  const DecodeOptions *o, NBest *out);

/* How many of the 16 scores x[0..15] have x - off > th (computed so, as the
 * scan itself computes them): one vector compare, by which a scan for a
 * row's best (row_top_k, decode.c's int8_rescore) skips a block of 16 with
 * nothing that could enter. */
static inline int scores_above16(const float *x, float off, float th) {
    int n = 0;
    #pragma omp simd reduction(+ : n)
    for (int l = 0; l < 16; l++) n += x[l] - off > th;
    return n;
}

#endif
