/* bpe.h — joint byte-pair encoding (Sennrich et al. 2016) on Unicode text.
 *
 * Text is normalized (utf8proc NFKC by default, whitespace collapsed), split
 * into words at Unicode category boundaries, and each word is marked with a
 * leading U+2581 "▁" (as sentencepiece does), so decode(encode(x)) gives back
 * normalize(x) byte for byte without a detokenizer. Characters never seen in
 * training fall back to byte tokens <0xNN>.
 *
 * Special token ids are fixed (TOK_PAD, TOK_UNK, TOK_BOS, TOK_EOS, and
 * BPE_MIN_VOCAB, the smallest vocabulary: modeldefs.h). */
#ifndef TFM_BPE_H
#define TFM_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "modeldefs.h"

typedef struct Bpe Bpe;

typedef struct {
    int vocab_size;              /* total, specials and byte tokens included */
    const char *normalization;   /* "nfkc" | "nfc" | "none" */
    int skip_invalid;            /* 1: skip (and count) lines with invalid UTF-8 or NUL */
    const char *invalid_hint;    /* what the invalid-UTF-8 error advises; NULL: "use --skip-invalid" (bpe learn's) */
    int threads;                 /* 0: threads_count() */
    int quiet;                   /* 1: no progress on stderr */
    const char *const *symbols;  /* user-defined symbols (tags like "<2de>"), kept whole: */
    int nsymbols;                /*   see bpe.c; ids right after the characters */
} BpeLearnOptions;

/* Learn one joint model from all files (plain or .gz). NULL + errorf. */
Bpe *bpe_learn(const char *const *files, int nfiles, const BpeLearnOptions *opt);

/* Load a BPE model file (tokenizer_load in checkpoint.h also reads the one
 * inside a checkpoint). */
Bpe *bpe_load(const char *path);
Bpe *bpe_from_string(const char *text, const char *name);   /* model text */
char *bpe_to_string(const Bpe *b);                          /* malloc'd model text */
int bpe_save(const Bpe *b, const char *path);
void bpe_free(Bpe *b);

int bpe_vocab_size(const Bpe *b);
const char *bpe_piece(const Bpe *b, int id);                 /* "▁the", "<0xE2>", "<pad>" */
const char *bpe_normalization(const Bpe *b);
int bpe_normalization_known(const char *name);             /* 1: "nfkc", "nfc" or "none" */

/* Encode one line (normalized first). Appends ids to *ids (grown as needed,
 * *cap tracks its capacity) and returns their count, no BOS/EOS added.
 * Invalid UTF-8 becomes U+FFFD and *had_invalid is set (may be NULL).
 * Thread-safe: many threads may encode with one Bpe at once. */
int bpe_encode(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid);
/* BPE-dropout (Provilkov et al. 2020), a regulariser for training: as
 * bpe_encode, but at each merge step every candidate pair is left out with
 * probability p (bpe.c, step 5), with random numbers from seed alone (so the
 * same line, p and seed give the same ids on any thread). p = 0 is
 * bpe_encode; p = 1 leaves every word as characters (and bytes). */
int bpe_encode_dropout(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid, float p,
                       uint64_t seed);
/* Inverse of encode: malloc'd, valid UTF-8 without NUL (byte tokens that do
 * not form UTF-8 become U+FFFD, utf8.h); special tokens are skipped. */
char *bpe_decode(const Bpe *b, const int *ids, int n);

/* (bpe_encode writes its ids from (*ids)[0].) */
/* normalize(x): what decode(encode(x)) gives back — the model's Unicode
 * normalization, invalid UTF-8 as U+FFFD, white space runs as one space, ends
 * trimmed. malloc'd. */
char *bpe_normalize(const Bpe *b, const char *line, size_t len, int *had_invalid);
/* Id of a piece string ("▁the", "<0xE2>", "</s>"), or -1. */
int bpe_piece_id(const Bpe *b, const char *piece);

/* User-defined symbols: never split, never merged with their neighbours,
 * one piece each (encode emits a lone ▁ before one that follows white space). */
int bpe_num_symbols(const Bpe *b);
const char *bpe_symbol(const Bpe *b, int i);   /* in the order they were given */
/* Split "<2de>,<bt>" at commas into malloc'd strings; returns the count ("" -> 0). */
int bpe_split_symbols(const char *list, char ***out);
void bpe_free_symbols(char **syms, int n);
/* 0 if the list "<2de>,<bt>" can be a model's user symbols under
 * `normalization` (each one valid, none twice), else -1 + errorf naming the
 * symbol: for options and settings, checked before any work. */
int bpe_symbols_check(const char *list, const char *normalization);
/* 0 if b's user symbols are exactly syms[0..n) in that order, else -1 +
 * errorf naming `name` (the tokenizer's file) and both lists. */
int bpe_check_symbols(const Bpe *b, const char *const *syms, int n, const char *name);

#endif
