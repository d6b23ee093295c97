/* eval.h — how good a model is on a dev set (paper section 6): the one
 * scoring path of `tfm eval` and of validation during `tfm train`.
 *
 *   teacher-forced loss: dropout off, the label-smoothed loss the model is
 *     trained on and the NLL -log p(y_t | y_<t, x) summed over every target
 *     token y_1 .. y_m and EOS (padding excluded);
 *   translate and score: translate the sources with beam search (decode.h)
 *     and score the translations against the references with sacreBLEU's
 *     BLEU and chrF (bleu.h), default settings. */
#ifndef TFM_EVAL_H
#define TFM_EVAL_H

#include "bleu.h"
#include "bpe.h"
#include "data.h"
#include "decode.h"
#include "model.h"

/* Adds the loss sums over every pair of c to *total, in length-sorted
 * batches of about batch_tokens padded tokens. progress: a log prefix for a
 * progress line every 5 s, or NULL for none. 0, or -1 + errorf. */
int eval_loss(Model *m, const Corpus *c, int batch_tokens, const char *progress, LossStats *total);

typedef struct {
    BleuResult bleu;         /* over the lines with a reference */
    ChrfResult chrf;
    long scored;             /* lines scored */
    long empty;              /* lines left out: empty (white space only) reference */
    long first_empty;        /* the first of those (0-based), -1 if none */
} DevScores;

/* Translate the n lines src[i] with tr and o, and score them against ref[i]
 * (bleu/chrf_options_default). sacreBLEU refuses an empty reference, so the
 * lines whose reference is empty are translated but left out of both scores
 * (r->empty says how many; the caller warns). If hyps is not NULL it
 * receives the n translations (free with translate_free_lines), also when
 * only the scoring fails. progress as eval_loss (and a summary line at the
 * end). Returns 0, or -1 + errorf (translation failed: *hyps = NULL). */
int eval_translate(const Translator *tr, const Bpe *bpe, const DecodeOptions *o,
                   const char *const *src, const char *const *ref, long n, const char *progress,
                   char ***hyps, DevScores *r);

#endif
