/* decode.h — translation with the Transformer (paper section 6.1):
 * incremental decoding as the step function of beam search (search.h).
 *
 * The encoder runs once per batch, the encoder-side keys and values of every
 * decoder layer are projected once per sentence, each decoder layer caches
 * its self-attention keys/values, and a step computes one new position for
 * all live hypotheses of the batch as one matrix product per weight matrix.
 * Results do not depend on the batch size or the thread count.
 */
#ifndef TFM_DECODE_H
#define TFM_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "config.h"
#include "model.h"
#include "search.h"
#include "shortlist.h"

/* beam, alpha, max_len_a/b, batch_size from the config's [decode]; nbest 1. */
void decode_options_from_config(DecodeOptions *o, const Config *c);

/* ---- translating ----------------------------------------------------------- */
/* Translate n token sequences (src[i] of src_len[i] BPE tokens, without EOS;
 * each must satisfy src_len + 1 <= max_positions): sorts them by length
 * into batches of o->batch_size, runs the encoder and the beam search, and
 * fills out[i] in input order. An empty source gives one empty hypothesis
 * without running the model. Returns 0 or -1 + errorf. */
int translate_ids(const Model *m, const DecodeOptions *o, int n,
                  const int *const *src, const int *src_len, NBest *out);   /* packs, then frees */

/* A model ready for fast decoding. With pack = 1 every weight matrix (the
 * encoder's, the decoder's and the output layer's) is copied once into the
 * layout of BLIS's micro-kernel, so that no product packs it again, and the
 * Translator keeps its own copy of the vectors (biases, LayerNorm) and of
 * the fp32 embedding (its lookups; a shortlist's rows): results bit for bit
 * those of pack = 0, which reads the Model's weights with linear_rows (see
 * ops.h). Read-only while translating: threads share it. The Model must
 * outlive it and not change while it exists.
 * int8 (m->int8, model_set_precision PREC_INT8): every linear layer of the
 * encoder and decoder and the output layer are quantized (gemm_int8.h), the
 * embedding rows read from the quantized output layer, and the Translator
 * keeps its own copy of the model's vectors.
 * bf16 (m->bf16) with pack = 1: as fp32, the layers packed rounded to bf16
 * (the AVX512_BF16 kernel's 16-bit panels, or rounded floats in BLIS's
 * layout).
 * Then (translator_owns_weights: packed, or int8) the model's parameters
 * may be released after translator_new (model_release_params; its dims and
 * positional encodings stay read). */
typedef struct Translator Translator;
Translator *translator_new(const Model *m, int pack);
/* An ensemble of n models that share the vocabulary (their tokenizer, which
 * the caller checks): each step scores a token by the mean of the models'
 * log-probabilities (decode.c, "ensembles"). NULL + errorf if the
 * vocabulary sizes differ. n = 1 is translator_new. */
Translator *translator_new_ensemble(const Model *const *m, int n, int pack);
void translator_free(Translator *t);
int translator_packed(const Translator *t);   /* 1: packed (the CPU's kernel allows it), or int8 */
/* 1: the Translator reads none of its Models' parameters (packed, or int8):
 * they may be released (model_release_params). */
int translator_owns_weights(const Translator *t);
/* Decode with a vocabulary shortlist (shortlist.h): each batch's output
 * layer and softmax cover only the candidates of its sources. t owns sl
 * from then on (freed here on an error). With int8 models the environment
 * variable TFM_SHORTLIST_OUT = int8 (default) | fp32 says how the
 * candidates' rows multiply (decode.c; fp32 keeps a copy of the fp32
 * embedding, so call this before model_release_params). -1 + errorf if the
 * vocabularies differ. */
int translator_set_shortlist(Translator *t, Shortlist *sl);
/* Tests: a shortlist's output layer runs per sentence while r x (the mean
 * of the sentences' lists) <= (rows per sentence) x (the batch's union),
 * else once over the union (decode.c; the same numbers either way). r = 0:
 * always per sentence; a huge r: always the union. Default 15. */
void decode_shortlist_union_ratio(double r);

/* int8 translation's output layer, scored twice. The int8 product
 * y = x E^T [n, cols] (column c: token ids[c], or c where ids is NULL) ranks
 * the vocabulary; the search reads only each row's `beam` best and EOS
 * (search.c), and they are nearly all of the softmax's normaliser. So the R
 * best columns of each row (ties: the lower column first) and EOS get
 *     y_c = x . E[w]   (x: the unquantized activations [n, D]; E in bf16,
 *                       e16 [V, D]; the sum in 16 lanes in a fixed order),
 * and close candidates are told apart at bf16's precision, not int8's
 * (quantizing x and E per row is most of the output layer's error). R x D
 * multiply-adds a row against the product's cols x D; each row on its own
 * (batch and thread invariant). Column TOK_EOS must be EOS (a shortlist's
 * columns start with the specials). */
void int8_rescore(const uint16_t *e16, float *y, int ldy, const float *x, int n, int cols, const int *ids, int D,
                  int R);

/* The R that translation uses: INT8_RESCORE, twice the default beam (a
 * wider beam reads past it: those candidates keep int8's score); tests set
 * it (0: none; < 0: the default again). */
#define INT8_RESCORE 8
void decode_int8_rescore(int r);
/* With a shortlist: the mean candidates of the batches translated so far
 * (the output layer's rows) and of their sentences (0 without one). */
void translator_shortlist_counts(const Translator *t, double *per_batch, double *per_sentence);
/* Bytes of weights the Translator reads: the Models' parameters (while they
 * have them) and its own copies (packed, rounded, quantized). */
size_t translator_bytes(const Translator *t);
/* translate_ids with a Translator made once. */
int translator_ids(const Translator *t, const DecodeOptions *o, int n,
                   const int *const *src, const int *src_len, NBest *out);

/* Forced decoding with the incremental decoder: logp[i][t] = log p(y_t |
 * y_<t, x) for t = 0 .. tgt_len[i], where y_t = tgt[i][t] and the last one
 * is EOS (for tests: it must equal model_score's full recomputation). With
 * a shortlist sl (else NULL), all n pairs are one batch and p is the
 * softmax over its candidates (-inf for a token that is not one). */
int decode_force(const Model *m, const Shortlist *sl, int n, const int *const *src, const int *src_len,
                 const int *const *tgt, const int *tgt_len, float *const *logp);

/* Translate lines of text (for eval.c): BPE-encode, truncate lines too
 * long for the model (with a warning naming the line: index + 1),
 * translate, detokenize. Returns a malloc'd array of n malloc'd 1-best
 * strings (free with translate_free_lines), or NULL + errorf. */
char **translator_lines(const Translator *t, const Bpe *bpe, const DecodeOptions *o,
                        const char *const *lines, int n);
void translate_free_lines(char **out, int n);

/* The text of an output: bpe_decode (which makes any byte sequence that is
 * not valid UTF-8 U+FFFD), then tabs/newlines/CR become spaces, so every
 * output is one well-formed line. malloc'd. */
char *decode_output_text(const Bpe *bpe, const int *ids, int n);

/* One input line for the model: BPE-encoded into *ids (grown as needed,
 * capacity *cap), truncated to max_positions - 1 tokens (room for EOS) with
 * a warning naming line_no (1-based); invalid UTF-8 is warned about once
 * (*warned_utf8). Returns the token count, or -1 + errorf. */
int encode_source_line(const Bpe *bpe, const Model *m, const char *line, size_t len, long line_no,
                       int **ids, int *cap, int *warned_utf8);

#endif
