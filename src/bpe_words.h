/* bpe_words.h — steps 1-3 of bpe.c's text pipeline, shared by applying
 * (bpe.c) and learning (bpe_learn.c): the UTF-8 check and normalization of a
 * line, character classes, words, user symbols. Private to the bpe*.c files;
 * the contract (what a word is, what normalize(x) means) is in bpe.c's header.
 */
#ifndef TFM_BPE_WORDS_H
#define TFM_BPE_WORDS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { MARKER = 0x2581 };                         /* ▁ LOWER ONE EIGHTH BLOCK */
enum { MAX_WORD_CHARS = 128 };                    /* longer words are cut */
enum { MAX_WORD_SYMS = 1 + 4 * MAX_WORD_CHARS };  /* marker + every char as 4 bytes */
enum { MAX_KEY = 1 + 4 * MAX_WORD_CHARS };        /* word key: marker flag byte + UTF-8 */

/* ---- normalizations (step 2) -------------------------------------------- */
enum { NORM_NONE, NORM_NFC, NORM_NFKC };
extern const char *const NORM_NAMES[3];   /* "none", "nfc", "nfkc": the model file's and the options' names */
int parse_norm(const char *s);            /* NORM_* of a name, or -1 */

/* ---- character classes (step 3) ----------------------------------------- */
/* K_JOIN: marks and format characters, which never start a word. */
enum { K_SPACE, K_LETTER, K_DIGIT, K_PUNCT, K_SYMBOL, K_CONTROL, K_OTHER, K_JOIN, K_NONE };
extern const unsigned char ASCII_CLASS[128];   /* the class of each ASCII code point */
int char_class_unicode(int32_t cp);            /* the class of any code point, by its Unicode category */
static inline int char_class(int32_t cp) {
    if (cp < 128) return ASCII_CLASS[cp];
    return char_class_unicode(cp);
}

/* ---- steps 1-2: check and normalize one line ---------------------------- */
typedef struct { const char *s; size_t n; char *own; } Text;   /* own: buffer to free */
/* Checks the UTF-8 of line and normalizes it into t. Returns -1 when valid,
 * else the offset of the first invalid byte: with fix = 0 it stops there
 * (t untouched); with fix = 1 each invalid subpart becomes U+FFFD. */
long text_prepare(int norm, const char *line, size_t len, int fix, Text *t);

/* ---- step 3: words, and user symbols ------------------------------------ */
typedef struct { const unsigned char *s; size_t n, pos; int after_space; } WordIter;
/* The key of a word in the maps: one flag byte (1: marked with ▁), then its UTF-8. */
static inline size_t word_key(char *key, const char *w, size_t n, int marked) {
    key[0] = (char)marked;
    memcpy(key + 1, w, n);
    return n + 1;
}

enum { MAX_SYMBOL_BYTES = 64 };
/* The symbols, longest first (so the first that matches is the longest). */
typedef struct {
    int n;
    char **s;                  /* [n] the symbol strings */
    size_t *len;               /* [n] their lengths */
    int *index;                /* [n] position in the user's list (and the model file) */
    unsigned char first[256];  /* 1: some symbol starts with this byte */
} Symbols;
/* Build the matcher from syms[0..n): -1 + errorf naming a symbol that
 * cannot be one under normalization `norm`, or one given twice. */
int symbols_init(Symbols *y, const char *const *syms, int n, int norm);
void symbols_free(Symbols *y);

/* Words and symbols of normalized text, in order: next_token returns 1 for a
 * word (as next_word), 2 for a symbol (*which: its matcher entry; *marked:
 * white space precedes it), 0 at the end. The words are those of the text
 * between the symbols, so none spans a symbol. */
typedef struct { WordIter w; size_t n; const Symbols *y; int sym; size_t sym_len; } TokenIter;
void token_iter_init(TokenIter *t, const char *s, size_t n, const Symbols *y);
int next_token(TokenIter *t, size_t *start, size_t *end, int *marked, int *which);

#endif
