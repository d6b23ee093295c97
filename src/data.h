/* data.h — parallel corpora for training (paper section 5.1): reading plain
 * or .gz text, BPE encoding with an on-disk cache, filtering, batches by
 * token count, per-epoch shuffling.
 *
 * A corpus is every pair's source and target ids laid end to end in one
 * buffer (no BOS/EOS stored): pair i is ids[off[i] .. off[i]+src_len[i]) then
 * ids[off[i]+src_len[i] .. off[i]+src_len[i]+tgt_len[i]).
 *
 * Batches (the paper: "sentence pairs were batched together by approximate
 * sequence length; each batch contained ~25000 source and 25000 target
 * tokens"): pairs are sorted by length and cut greedily so that the PADDED
 * size B * (S + T) stays within batch_tokens, where S = longest source + EOS
 * and T = longest target + BOS/EOS. Memory is bounded by batch_tokens, and
 * sorting keeps the padding small. Each epoch re-derives its batches and
 * their order from (seed, epoch) alone, so a resumed run can rebuild the
 * exact same epoch from the step it stopped at.
 */
#ifndef TFM_DATA_H
#define TFM_DATA_H

#include <stdint.h>

#include "bpe.h"
#include "text.h"
#include "model.h"

typedef struct {
    long n;                  /* pairs */
    int *src_len, *tgt_len;  /* [n] BPE tokens, without EOS/BOS */
    long *off;               /* [n] where pair i starts in ids */
    int *ids;                /* [num_ids] */
    long num_ids;
    long *line;              /* [n] pair i's line in the files (0-based) */
} Corpus;

/* What reading and filtering did, for the log (never silently). */
typedef struct {
    long read;               /* pairs in the files */
    long empty;              /* one side empty after normalization */
    long too_long;           /* source > max_src or target > max_tgt tokens */
    long ratio;              /* longer/shorter side > max_ratio */
    long kept;
    long invalid_utf8;       /* lines with invalid UTF-8 (kept, as U+FFFD) */
    int from_cache;          /* 1: ids came from the cache file */
} CorpusStats;

/* Read src/tgt (plain or .gz, any line length), check they have the same
 * number of lines, and encode both sides with bpe, in parallel. With a
 * cache_path, reuse the cache there when it was made from the same files
 * (size + mtime) and the same tokenizer, else encode and write it. */
int corpus_load(Corpus *c, const char *src_path, const char *tgt_path, const Bpe *bpe,
                const char *cache_path, CorpusStats *st);
/* Drop pairs with an empty side (if drop_empty), longer than max_src/max_tgt
 * tokens, or whose length ratio (longer+1)/(shorter+1) exceeds max_ratio (0:
 * off). Counts go into st. Keeps the order of the rest. */
void corpus_filter(Corpus *c, int drop_empty, int max_src, int max_tgt, double max_ratio, CorpusStats *st);
/* BPE-dropout (bpe_encode_dropout): encode c's pairs again from their lines
 * of src and tgt (the files c was read from, as TextLines), with each merge
 * left out with probability p; the random numbers come from (seed, line,
 * side) alone, so the result is the same on any thread count. The pairs and
 * their order stay; their ids and lengths change (longer: not filtered
 * again; corpus_truncate cuts any beyond the model's positions). */
void corpus_resample(Corpus *c, const TextLines *src, const TextLines *tgt, const Bpe *bpe, float p, uint64_t seed);
/* Cut the pairs longer than a model with max_positions can hold (source to
 * max_positions - 1 tokens + EOS, target to max_positions - 1 tokens + EOS),
 * in place. Returns the number of pairs cut; *first = the first one
 * (0-based, -1 if none). */
long corpus_truncate(Corpus *c, int max_positions, long *first);
void corpus_free(Corpus *c);

/* Text files are read as lines through text.h (TextLines, text_lines_read):
 * its policy (CRLF, BOM, NUL and invalid UTF-8 as U+FFFD, limits, gzip
 * errors) is the corpora's. Corpora must be regular files: they are read
 * more than once and cached by size and time. */

/* The batches of one epoch. Batch k holds the pairs order[first[k] ..
 * first[k+1]), and is the k-th batch of the epoch (already shuffled). */
typedef struct {
    long n;                  /* batches */
    long *order;             /* [pairs] pair indices, grouped by batch */
    long *first;             /* [n+1] */
    int *S, *T;              /* [n] padded source / target length */
    long *tgt_tokens;        /* [n] target tokens (y.. EOS), the loss's count */
    long real_tokens;        /* source + target tokens without padding, all batches */
    long padded_tokens;      /* sum over batches of B * (S + T) */
    int max_B, max_S, max_T; /* largest batch, for allocating once */
    long max_cells;          /* largest B*S or B*T */
} Epoch;

/* Build the batches for `epoch`: pairs shuffled with (seed, epoch), stably
 * sorted by (source, target) length, cut at batch_tokens padded tokens, and
 * the batch order shuffled with (seed, epoch). shuffle = 0 keeps the length
 * order (validation). Deterministic given its arguments. */
void epoch_plan(Epoch *e, const Corpus *c, int batch_tokens, uint64_t seed, long epoch, int shuffle);
void epoch_free(Epoch *e);
/* Padding waste: 1 - real / padded tokens. */
double epoch_padding_waste(const Epoch *e);

/* Allocate a Batch for up to max_B sentences and max_cells tokens per side
 * (an Epoch's max_B and max_cells), so filling allocates nothing. */
void batch_alloc(Batch *b, int max_B, long max_cells);
/* Fill b with batch k of e: src = x.. EOS, tgt_in = BOS y.., tgt_out = y..
 * EOS, PAD-padded. */
void batch_fill(Batch *b, const Corpus *c, const Epoch *e, long k);
void batch_free(Batch *b);

/* 64-bit FNV-1a of bytes (for cache keys). */
uint64_t hash64(const void *data, size_t n, uint64_t h);

#endif
