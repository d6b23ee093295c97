/* bpe_internal.h — what bpe.c (the model, applying it, its file) and
 * bpe_learn.c (learning it) share, and nothing else includes: the Bpe
 * struct and the functions that build one. The ids are bpe.c's (its header):
 * 0-3 specials, 4-259 byte tokens, FIRST_CHAR the marker ▁ and then the
 * other characters, the user symbols, the merges' results.
 */
#ifndef TFM_BPE_INTERNAL_H
#define TFM_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "bpe_words.h"
#include "hashmap.h"
#include "modeldefs.h"

enum { FIRST_CHAR = BPE_MIN_VOCAB - 1 };          /* id of the marker ▁, first character piece */

typedef struct Bpe Bpe;   /* as in bpe.h, which this header does not include (bpe.c includes both) */
struct Bpe {
    int norm;
    int vocab_size, nchars, nmerges, cap_pieces, cap_chars, cap_merges;
    char **piece;              /* [vocab_size] "<pad>", "<0xE2>", "▁the" */
    int32_t *chars;            /* [nchars] code point of id FIRST_CHAR + i */
    int first_symbol;          /* user symbol i is id first_symbol + i (after the chars) */
    Symbols sym;               /* the matcher over them (sym.n of them) */
    int32_t (*merge)[3];       /* [nmerges] left, right, result id */
    StrMap piece_id;           /* piece string -> id */
    /* built by bpe_finish, read-only after: */
    int32_t ascii_id[128];     /* char id of an ASCII code point, -1 if none */
    U64Map char_id;            /* code point -> id (non-ASCII) */
    U64Map pair_rank;          /* left << 32 | right -> merge rank */
    StrMap word_id;            /* word key -> id, for words that encode to that one piece */
    char *surface;             /* decoded text of each id, concatenated */
    uint32_t *surface_off;     /* [vocab_size + 1] */
};

Bpe *bpe_new(int norm);                       /* a model with the special and byte tokens only */
int bpe_add_char(Bpe *b, int32_t cp);         /* the next character piece; returns its id */
/* The user symbols syms[0..n) as pieces right after the characters: -1 +
 * errorf for a bad symbol or one that is already a piece. */
int bpe_add_symbols(Bpe *b, const char *const *syms, int n);
/* Record merge (left, right); returns the result id, new unless the
 * concatenated string is already a piece. */
int bpe_add_merge(Bpe *b, int left, int right);
void bpe_finish(Bpe *b);          /* build the lookups below "built by bpe_finish", once all pieces are in */
void bpe_lookups_free(Bpe *b);    /* drop them (to add pieces, then bpe_finish again) */

/* The character piece of code point cp, or -1 (then its bytes are byte tokens). */
static inline int char_id(const Bpe *b, int32_t cp) {
    return cp < 128 ? b->ascii_id[cp] : u64map_get(&b->char_id, (uint64_t)cp);
}

#endif
