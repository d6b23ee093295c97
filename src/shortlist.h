/* shortlist.h — a vocabulary shortlist for decoding (`tfm shortlist`,
 * `--shortlist FILE` on translate, eval and serve), as Marian's lexical
 * shortlists and CTranslate2's vocabulary map do it.
 *
 * Decoding a batch scores only the candidates of its sources instead of the
 * whole vocabulary V: the output projection (logits = x E^T) and the softmax
 * run over the C rows of E the candidates name, so
 *     p_sl(w | y_<t, x) = p(w) / sum_{c in C} p(c)    for w in C, 0 elsewhere,
 * the full softmax renormalised over the list (decode.c). The candidates of a
 * batch are the union of
 *   - the special tokens (PAD, UNK, BOS, EOS: ids 0..3),
 *   - the N most frequent target tokens of the training corpus,
 *   - for each source token s of the batch: s itself (the vocabulary is joint:
 *     names and numbers are copied) and its K lexical candidates,
 * in increasing id order, so that a column c < 4 is the special token c.
 * The output layer of a batch covers the union of its sentences'
 * candidates; each sentence's softmax runs over its own candidates only
 * (the others' columns are -inf for its rows), so that a translation does
 * not depend on the sentences that share its batch (decode.h).
 *
 * The lexical table, learned from a parallel corpus (the training data):
 * with c(s) the number of sentence pairs whose source holds s and c(s, t)
 * the number whose source holds s and whose target holds t (each token
 * counted once per sentence),
 *     p(t | s) = c(s, t) / c(s),
 * and s's candidates are the K targets with the highest p(t | s) among those
 * not already always in the list (the N frequent ones and the specials);
 * ties go to the rarer target (lower corpus frequency: the more specific
 * word), then to the lower id. The N frequent tokens are counted by
 * occurrences in the target side, ties to the lower id.
 *
 * File (UTF-8 text; tfm reads what it writes and refuses anything else):
 *   tfm-shortlist 1                 format and version
 *   vocab 8000 tokenizer 1a2b3c4d   the vocabulary size and the CRC-32C of the
 *                                   tokenizer (bpe_to_string) it was built with
 *   k 50 n 100                      the settings it was built with
 *   frequent 100                    then one line of 100 ids, most frequent first
 *   lexical 7421                    then 7421 lines "s t1 t2 ..." (s ascending,
 *                                   at most k targets, best first)
 *   crc32c 89abcdef                 of every byte before this line
 * A file that is truncated, fails its checksum, names ids outside the
 * vocabulary or was built with another tokenizer is an error naming the file
 * (and the line). */
#ifndef TFM_SHORTLIST_H
#define TFM_SHORTLIST_H

#include <stdint.h>

#include "bpe.h"

typedef struct Shortlist Shortlist;

enum { SHORTLIST_MAX_K = 100000 };

/* Learn the table from the parallel corpus src_path / tgt_path (plain or
 * .gz, the same number of lines), encoded with bpe. NULL + errorf. */
Shortlist *shortlist_build(const Bpe *bpe, const char *src_path, const char *tgt_path, int k, int n);
/* Write (atomically) / read a shortlist file; load checks it against the
 * tokenizer bpe. NULL or -1 + errorf naming the file. */
int shortlist_save(const Shortlist *sl, const char *path);
Shortlist *shortlist_load(const char *path, const Bpe *bpe);
Shortlist *shortlist_from_string(const char *text, size_t len, const char *name, const Bpe *bpe);
char *shortlist_to_string(const Shortlist *sl);   /* malloc'd file text */
void shortlist_free(Shortlist *sl);

int shortlist_vocab(const Shortlist *sl);
int shortlist_k(const Shortlist *sl);
int shortlist_n(const Shortlist *sl);
/* Set mark[t] = 1 for every candidate t of one source src [len]. */
void shortlist_mark(const Shortlist *sl, const int *src, int len, unsigned char *mark);
/* The candidates of a batch of nsent sources (src[s] of len[s] ids), the
 * union of theirs: their ids in increasing order into ids [vocab]; returns
 * their count C (>= 4: the specials come first). mark: scratch of vocab
 * bytes, all 0 (left all 0). */
int shortlist_candidates(const Shortlist *sl, int nsent, const int *const *src, const int *len, int *ids,
                         unsigned char *mark);

#endif
