/* decode.h — translation with beam search (paper section 6.1: "beam search
 * with a beam size of 4 and length penalty alpha = 0.6"), incremental.
 *
 * The search (beam_search) is written against an abstract step function, so
 * it can be tested on toy scorers; decode.c also provides the step function
 * of the Transformer: the encoder runs once per batch, the encoder-side keys
 * and values of every decoder layer are projected once per sentence, each
 * decoder layer caches its self-attention keys/values, and a step computes
 * one new position for all live hypotheses of the batch as one matrix
 * product per weight matrix.
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
 */
#ifndef TFM_DECODE_H
#define TFM_DECODE_H

#include "bpe.h"
#include "config.h"
#include "model.h"

typedef struct {
    int beam;            /* K: hypotheses kept per sentence; 1 = greedy */
    double alpha;        /* length penalty exponent (0: raw log-prob) */
    double max_len_a;    /* at most a * |x| + b output tokens (EOS excluded), */
    int max_len_b;       /*   |x| = source BPE tokens, capped by max_positions */
    int nbest;           /* finished hypotheses returned per sentence (<= beam) */
    int batch_size;      /* sentences decoded together */
} DecodeOptions;

/* beam, alpha, max_len_a/b, batch_size from the config's [decode]; nbest 1. */
void decode_options_from_config(DecodeOptions *o, const Config *c);

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

/* ---- the abstract search ------------------------------------------------
 * A step function computes, for the n hypotheses live at step t, the
 * log-probabilities of the next token: row i continues row parent[i] of
 * step t-1 (parent[i] = -1 at t = 0), belongs to sentence sent[i] and its
 * last token (position t of the decoder input) is tok[i] (BOS at t = 0).
 * It returns scores x [n, vocab] in a buffer of its own (valid until its
 * next call) and sets *lognorm to [n] normalisers, so that
 *     log p(w | row i) = x[i, w] - lognorm[i]
 * (the Transformer returns its logits and their logsumexp; a scorer whose
 * x are already log-probs sets *lognorm = NULL). NULL + errorf on error. */
typedef struct {
    int vocab;
    const float *(*step)(void *ctx, int t, int n, const int *sent, const int *parent, const int *tok,
                         const float **lognorm);
    void *ctx;
} StepFunction;

/* Search nsent sentences at once; max_len[s] bounds sentence s. out[s] gets
 * at least one and at most o->nbest hypotheses, best first. */
int beam_search(const StepFunction *f, int nsent, const int *max_len,
                const DecodeOptions *o, NBest *out);

/* ---- the Transformer --------------------------------------------------- */
/* Translate n token sequences (src[i] of src_len[i] BPE tokens, without EOS;
 * each must satisfy src_len + 1 <= max_positions): sorts them by length
 * into batches of o->batch_size, runs the encoder and the beam search, and
 * fills out[i] in input order. An empty source gives one empty hypothesis
 * without running the model. Returns 0 or -1 + errorf. */
int translate_ids(const Model *m, const DecodeOptions *o, int n,
                  const int *const *src, const int *src_len, NBest *out);   /* packs, then frees */

/* A model ready for fast decoding. With pack = 1 the decoder's weight
 * matrices (and the output layer's) are copied once into the layout of
 * BLIS's micro-kernel, so that no decoding step packs them again (memory:
 * those weights once more; results: bit for bit those of pack = 0, which
 * uses bli_sgemm). Read-only while translating: threads share it. The Model
 * must outlive it and not change while it exists. */
typedef struct Translator Translator;
Translator *translator_new(const Model *m, int pack);
void translator_free(Translator *t);
int translator_packed(const Translator *t);   /* 1: packed (the CPU's kernel allows it) */
/* translate_ids / translate_lines with a Translator made once. */
int translator_ids(const Translator *t, const DecodeOptions *o, int n,
                   const int *const *src, const int *src_len, NBest *out);
char **translator_lines(const Translator *t, const Bpe *bpe, const DecodeOptions *o,
                        const char *const *lines, int n);

/* Forced decoding with the incremental decoder: logp[i][t] = log p(y_t |
 * y_<t, x) for t = 0 .. tgt_len[i], where y_t = tgt[i][t] and the last one
 * is EOS (for tests: it must equal model_score's full recomputation). */
int decode_force(const Model *m, int n, const int *const *src, const int *src_len,
                 const int *const *tgt, const int *tgt_len, float *const *logp);

/* Translate lines of text with a loaded model and its tokenizer (for the
 * trainer's validation BLEU and for eval): BPE-encode, truncate lines too
 * long for the model (with a warning naming the line: index + 1),
 * translate, detokenize. Returns a malloc'd array of n
 * malloc'd 1-best strings (free with translate_free_lines), or NULL + errorf. */
char **translate_lines(const Model *m, const Bpe *bpe, const DecodeOptions *o,
                       const char *const *lines, int n);
void translate_free_lines(char **out, int n);

/* The text of an output: bpe_decode (which makes any byte sequence that is
 * not valid UTF-8 U+FFFD), then tabs/newlines/CR become spaces, so every
 * output is one well-formed line. malloc'd. */
char *decode_output_text(const Bpe *bpe, const int *ids, int n);

#endif
