/* bpe.c — joint byte-pair encoding on Unicode text (paper §5.1).
 *
 * "Sentences were encoded using byte-pair encoding [Sennrich et al. 2016],
 * which has a shared source-target vocabulary of about 37000 tokens."
 * BPE starts from characters and, again and again, merges the most frequent
 * pair of adjacent symbols into a new symbol; the list of merges, in the
 * order learned, is the model. Encoding replays the merges on new text.
 *
 * One line of text, in learn and in encode alike:
 *   1. UTF-8 check. Invalid sequences (and NUL bytes) are an error when
 *      learning; when encoding each maximal invalid subpart becomes U+FFFD.
 *   2. Normalization with utf8proc: NFKC (default), NFC or none.
 *   3. Words. White space (Unicode White_Space: space, tab, NBSP, U+3000 ...)
 *      separates words. Inside, a new word starts where the character class
 *      changes: letters | digits | punctuation | symbols | controls | other.
 *      Marks and format characters (accents, ZWJ, variation selectors) never
 *      start a word, and the character after a ZWJ stays in its word, so
 *      "2,500" -> 2 , 500 and an emoji ZWJ sequence stays whole. Words are
 *      cut every 128 characters. A word after white space or at the start
 *      of the line begins with the marker ▁ (U+2581), as in sentencepiece.
 *   4. Symbols: the marker, then each character in the model's alphabet, or
 *      its UTF-8 bytes as byte tokens <0xNN> (byte fallback).
 *   5. Merges: while some adjacent pair has a merge, apply the pair with the
 *      earliest merge (its leftmost occurrence). Merges never cross words.
 * User-defined symbols (tags such as <2de> or <bt>, `--symbols`) are found
 * in the normalized text before step 3, leftmost and longest first, and
 * each becomes its own piece: the text around one is cut into words as if
 * the symbol were not there, so no word, character or merge spans a symbol.
 * White space before a symbol (not at the start of the line) becomes a lone
 * ▁ piece, as in sentencepiece, so "a <bt> b" -> ▁a ▁ <bt> ▁b and
 * "x<bt>y" -> ▁x <bt> y, and the round trip below still holds.
 * Decoding concatenates the pieces, byte tokens as raw bytes and ▁ as a
 * space, and drops the first space. So decode(encode(x)) == normalize(x),
 * byte for byte, where normalize(x) = steps 1-2, then every run of white
 * space becomes one space and the ends are trimmed. A literal U+2581 in the
 * text is never in the alphabet: it travels as bytes and comes back intact.
 *
 * Model file (UTF-8 text, one item per line, '#' lines are comments):
 *   tfm-bpe 2                 format and version (1: a file without symbols)
 *   normalization nfkc        nfkc | nfc | none
 *   vocab_size 8000           total, specials and byte tokens included
 *   chars 97                  then 97 lines "U+2581 ▁", "U+0065 e": the alphabet, ▁ first
 *   symbols 2                 version 2 only: then 2 lines, one user symbol each ("<bt>")
 *   merges 7650               then 7650 lines "left right", in the order learned
 * A model without user symbols is written as version 1 (no symbols line),
 * byte for byte as before symbols existed; both versions are read.
 * Ids: 0 <pad>, 1 <unk>, 2 <s>, 3 </s>, 4..259 the bytes <0x00>..<0xFF>,
 * 260.. the characters in file order, then the user symbols in file order,
 * then the result of each merge in
 * order, a new id only when that string is not already a piece (two merge
 * paths to one string share the id). Pieces never contain white space, so
 * the separating space is unambiguous. The alphabet holds the most frequent
 * characters of the training text up to 99.99% of all occurrences (control
 * characters and a literal ▁ never); the rest are byte tokens.
 *
 * Learning (bpe_learn) counts words in parallel (one hash map per thread,
 * merged), then runs the classic incremental algorithm: pair counts in a hash
 * map, an index from each pair to the words holding it, and a lazy max-heap
 * ordered by (count desc, left id asc, right id asc) — the fixed tie rule
 * that makes the model the same whatever the thread count. Each merge only
 * touches the words that hold the pair and updates the counts of the pairs
 * around each occurrence.
 *
 * Over 700 lines: learning and applying share the text pipeline above
 * (steps 1-4) and the private hash maps; the split into learning and
 * applying, with the hash map in its own header, is still to do (issue 24).
 */
#include "dispatch.h"
#include "bpe.h"
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>
#include <zlib.h>

enum { FIRST_CHAR = BPE_MIN_VOCAB - 1 };          /* id of the marker ▁, first character piece */
enum { MARKER = 0x2581 };                         /* ▁ LOWER ONE EIGHTH BLOCK */
enum { MAX_WORD_CHARS = 128 };                    /* longer words are cut */
enum { MAX_WORD_SYMS = 1 + 4 * MAX_WORD_CHARS };  /* marker + every char as 4 bytes */
enum { MAX_KEY = 1 + 4 * MAX_WORD_CHARS };        /* word key: marker flag byte + UTF-8 */
static const double CHAR_COVERAGE = 0.9999;
enum { NORM_NONE, NORM_NFC, NORM_NFKC };
static const char *const NORM_NAMES[] = {"none", "nfc", "nfkc"};

/* ---- hashing and two small open-addressing hash maps ------------------- */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, v;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    v = 0;
    memcpy(&v, p, n);
    return mix64(h ^ v);
}

/* uint64 key -> int32 value. Keys are code points or (left << 32 | right). */
typedef struct { uint64_t *key; int32_t *val; size_t cap, n; } U64Map;
#define U64_EMPTY UINT64_MAX

static void u64map_init(U64Map *m, size_t expect) {
    m->cap = 16;
    while (m->cap < 2 * expect) m->cap *= 2;
    m->key = xmalloc(m->cap * sizeof *m->key);
    memset(m->key, 0xff, m->cap * sizeof *m->key);
    m->val = xmalloc(m->cap * sizeof *m->val);
    m->n = 0;
}
static void u64map_free(U64Map *m) { free(m->key); free(m->val); memset(m, 0, sizeof *m); }

static int32_t u64map_get(const U64Map *m, uint64_t k) {
    size_t mask = m->cap - 1;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        if (m->key[i] == k) return m->val[i];
        if (m->key[i] == U64_EMPTY) return -1;
    }
}

/* The value slot of k; inserted with value -1 if absent. */
static int32_t *u64map_put(U64Map *m, uint64_t k) {
    if (2 * (m->n + 1) > m->cap) {
        U64Map g;
        u64map_init(&g, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->key[i] != U64_EMPTY) *u64map_put(&g, m->key[i]) = m->val[i];
        u64map_free(m);
        *m = g;
    }
    size_t mask = m->cap - 1, i = mix64(k) & mask;
    for (; m->key[i] != k; i = (i + 1) & mask)
        if (m->key[i] == U64_EMPTY) { m->key[i] = k; m->val[i] = -1; m->n++; break; }
    return &m->val[i];
}

/* byte string -> int64 value, open addressing over the entries themselves
 * (one cache line visit per lookup): strings of up to 16 bytes (most words)
 * sit in the entry, longer ones in an arena. */
enum { STR_INLINE = 16 };
#define STR_EMPTY UINT32_MAX
typedef struct {
    uint32_t tag, len;         /* tag: high half of the hash; len STR_EMPTY: free slot */
    int64_t val;
    union { char in[STR_INLINE]; size_t off; } key;
} StrEntry;
typedef struct { StrEntry *t; size_t cap, n; char *arena; size_t alen, acap; } StrMap;

static void strmap_alloc(StrMap *m, size_t cap) {
    m->cap = cap;
    m->t = xmalloc(cap * sizeof *m->t);
    for (size_t i = 0; i < cap; i++) m->t[i].len = STR_EMPTY;
}
static void strmap_init(StrMap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * expect) cap *= 2;
    strmap_alloc(m, cap);
}
static void strmap_free(StrMap *m) { free(m->t); free(m->arena); memset(m, 0, sizeof *m); }
static inline const char *strmap_key(const StrMap *m, const StrEntry *e) {
    return e->len <= STR_INLINE ? e->key.in : m->arena + e->key.off;
}
/* The used entries, in table order: for (i = 0; (e = strmap_next(m, &i));) */
static StrEntry *strmap_next(const StrMap *m, size_t *i) {
    for (; *i < m->cap; ++*i)
        if (m->t[*i].len != STR_EMPTY) return &m->t[(*i)++];
    return NULL;
}

static inline StrEntry *strmap_slot(const StrMap *m, const char *k, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        StrEntry *e = &m->t[i];
        if (e->len == STR_EMPTY) return e;
        if (e->tag == tag && e->len == len && !memcmp(strmap_key(m, e), k, len)) return e;
    }
}

static StrEntry *strmap_find(const StrMap *m, const char *k, size_t len, uint64_t h) {
    StrEntry *e = strmap_slot(m, k, len, h);
    return e->len == STR_EMPTY ? NULL : e;
}

/* Find k, or insert it with value 0. The pointer is valid until the next insert. */
static StrEntry *strmap_add(StrMap *m, const char *k, size_t len, uint64_t h) {
    StrEntry *e = strmap_slot(m, k, len, h);
    if (e->len != STR_EMPTY) return e;
    ASSERT(len < STR_EMPTY);   /* keys are words, at most MAX_KEY bytes */
    if (10 * (m->n + 1) > 7 * m->cap) {   /* grow at 70% full */
        StrMap g = *m;
        strmap_alloc(&g, 2 * m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            StrEntry *o = &m->t[i];
            if (o->len == STR_EMPTY) continue;
            const char *ok = strmap_key(m, o);
            *strmap_slot(&g, ok, o->len, hash_bytes(ok, o->len)) = *o;
        }
        free(m->t);
        *m = g;
        e = strmap_slot(m, k, len, h);
    }
    e->tag = (uint32_t)(h >> 32);
    e->len = (uint32_t)len;
    e->val = 0;
    if (len <= STR_INLINE) memcpy(e->key.in, k, len);
    else {
        if (m->alen + len > m->acap) {
            while (m->alen + len > m->acap) m->acap = m->acap ? 2 * m->acap : 4096;
            m->arena = xrealloc(m->arena, m->acap);
        }
        memcpy(m->arena + m->alen, k, len);
        e->key.off = m->alen;
        m->alen += len;
    }
    m->n++;
    return e;
}

/* ---- UTF-8 and character classes --------------------------------------- */

/* K_JOIN: marks and format characters, which never start a word. */
enum { K_SPACE, K_LETTER, K_DIGIT, K_PUNCT, K_SYMBOL, K_CONTROL, K_OTHER, K_JOIN, K_NONE };

static int char_class_unicode(int32_t cp) {
    if (cp == 0x85) return K_SPACE;   /* NEXT LINE is a control but White_Space */
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return K_LETTER;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF: return K_JOIN;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return K_DIGIT;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO: return K_PUNCT;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return K_SYMBOL;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: return K_SPACE;
    case UTF8PROC_CATEGORY_CC: return K_CONTROL;
    default: return K_OTHER;   /* private use, unassigned */
    }
}

/* ASCII by Unicode category: controls, white space, punctuation, the
 * symbols $ + < = > ^ ` | ~, digits, letters. */
#define C_ K_CONTROL
#define S_ K_SPACE
#define P_ K_PUNCT
#define Y_ K_SYMBOL
#define D_ K_DIGIT
#define L_ K_LETTER
static const unsigned char ASCII_CLASS[128] = {
    C_, C_, C_, C_, C_, C_, C_, C_, C_, S_, S_, S_, S_, S_, C_, C_,
    C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_, C_,
    S_, P_, P_, P_, Y_, P_, P_, P_, P_, P_, P_, Y_, P_, P_, P_, P_,   /*  !"#$%&'()*+,-./ */
    D_, D_, D_, D_, D_, D_, D_, D_, D_, D_, P_, P_, Y_, Y_, Y_, P_,   /* 0-9 :;<=>? */
    P_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_,   /* @A-O */
    L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, P_, P_, P_, Y_, P_,   /* P-Z[\]^_ */
    Y_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_,   /* `a-o */
    L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, L_, P_, Y_, P_, Y_, C_,   /* p-z{|}~ DEL */
};
#undef C_
#undef S_
#undef P_
#undef Y_
#undef D_
#undef L_

static inline int char_class(int32_t cp) {
    if (cp < 128) return ASCII_CLASS[cp];
    return char_class_unicode(cp);
}

/* ---- step 1-2: check and normalize one line ------------------------------ */
static int norm_flags(int norm) {
    return UTF8PROC_STABLE | UTF8PROC_COMPOSE | (norm == NORM_NFKC ? UTF8PROC_COMPAT : 0);
}

/* Characters below U+0300 that NFC / NFKC leave alone whatever surrounds them
 * (none of them composes with another character below U+0300): a line made
 * only of these (Latin-1, most of Latin Extended) skips utf8proc. */
static unsigned char stable_tab[0x300];
static pthread_once_t stable_once = PTHREAD_ONCE_INIT;
static void stable_init(void) {
    for (int32_t cp = 0; cp < 128; cp++)   /* the ASCII table agrees with utf8proc (tab..CR are Cc there) */
        ASSERT(ASCII_CLASS[cp] == char_class_unicode(cp) || (cp >= 9 && cp <= 13 && ASCII_CLASS[cp] == K_SPACE));
    for (int32_t cp = 1; cp < 0x300; cp++) {
        char buf[4];
        int k = utf8_encode(cp, buf);
        for (int norm = NORM_NFC; norm <= NORM_NFKC; norm++) {
            utf8proc_uint8_t *out = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)buf, k, &out, norm_flags(norm));
            if (m == k && !memcmp(out, buf, (size_t)k)) stable_tab[cp] |= (unsigned char)(1 << norm);
            free(out);
        }
    }
}

typedef struct { const char *s; size_t n; char *own; } Text;   /* own: buffer to free */

/* Checks the UTF-8 of line and normalizes it into t. Returns -1 when valid,
 * else the offset of the first invalid byte: with fix = 0 it stops there
 * (t untouched); with fix = 1 each invalid subpart becomes U+FFFD. */
static long text_prepare(int norm, const char *line, size_t len, int fix, Text *t) {
    const unsigned char *s = (const unsigned char *)line;
    size_t i = 0;
    int simple = 1;   /* only ASCII and stable characters: already normalized */
    long bad = -1;
    pthread_once(&stable_once, stable_init);
    const int bit = 1 << norm;
    while (i < len) {
        if (i + 8 <= len) {   /* eight bytes in 1..127 at once */
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (!((v | (v - 0x0101010101010101ULL)) & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        if (s[i] >= 1 && s[i] < 0x80) { i++; continue; }
        int32_t cp;
        int k = s[i] ? utf8_decode(s + i, len - i, &cp) : -1;   /* NUL is invalid in text */
        if (k < 0) { bad = (long)i; break; }
        if (cp >= 0x300 || !(stable_tab[cp] & bit)) simple = 0;
        i += (size_t)k;
    }
    t->s = line; t->n = len; t->own = NULL;
    if (bad >= 0) {
        if (!fix) return bad;
        t->s = t->own = utf8_replace(line, len, 1, &t->n);
        simple = 0;
    }
    if (simple || norm == NORM_NONE) return bad;
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)t->s, (utf8proc_ssize_t)t->n, &out, norm_flags(norm));
    if (m < 0) return bad;   /* cannot happen on checked text; keep it as it is */
    free(t->own);
    t->s = t->own = (char *)out;
    t->n = (size_t)m;
    return bad;
}

/* ---- step 3: words ------------------------------------------------------- */
typedef struct { const unsigned char *s; size_t n, pos; int after_space; } WordIter;

/* The next word of normalized text as [*start, *end); *marked: it follows
 * white space or starts the line (and so begins with ▁). 0 at the end. */
static int next_word(WordIter *it, size_t *start, size_t *end, int *marked) {
    const unsigned char *s = it->s;
    int32_t cp;
    while (it->pos < it->n) {   /* white space */
        int k = utf8_decode_valid(s + it->pos, &cp);
        if (char_class(cp) != K_SPACE) break;
        it->after_space = 1;
        it->pos += (size_t)k;
    }
    if (it->pos >= it->n) return 0;
    *start = it->pos;
    *marked = it->after_space;
    it->after_space = 0;
    int cls = K_NONE, joined = 0, nch = 0;
    while (it->pos < it->n && nch < MAX_WORD_CHARS) {
        int k = utf8_decode_valid(s + it->pos, &cp);
        int c = char_class(cp);
        if (c == K_SPACE) break;
        if (c != K_JOIN) {
            if (cls == K_NONE || joined) cls = c;
            else if (c != cls) break;
        }
        joined = cp == 0x200D;   /* ZERO WIDTH JOINER glues the next character */
        it->pos += (size_t)k;
        nch++;
    }
    *end = it->pos;
    return 1;
}

/* The key of a word in the maps: one flag byte (1: marked with ▁), then its UTF-8. */
static size_t word_key(char *key, const char *w, size_t n, int marked) {
    key[0] = (char)marked;
    memcpy(key + 1, w, n);
    return n + 1;
}

/* ---- user-defined symbols ------------------------------------------------ */
enum { MAX_SYMBOL_BYTES = 64 };
/* The symbols, longest first (so the first that matches is the longest). */
typedef struct {
    int n;
    char **s;                  /* [n] the symbol strings */
    size_t *len;               /* [n] their lengths */
    int *index;                /* [n] position in the user's list (and the model file) */
    unsigned char first[256];  /* 1: some symbol starts with this byte */
} Symbols;

static void symbols_free(Symbols *y) {
    for (int i = 0; i < y->n; i++) free(y->s[i]);
    free(y->s); free(y->len); free(y->index);
    memset(y, 0, sizeof *y);
}

/* Check one symbol: -1 + errorf naming it when it cannot be a symbol under
 * normalization `norm` (the text it must match is normalized first). */
static int symbol_check(const char *sym, int norm) {
    size_t n = strlen(sym);
    if (n == 0) return errorf("empty user symbol (two commas in a row?)");
    if (n > MAX_SYMBOL_BYTES) return errorf("user symbol '%s' is longer than %d bytes", sym, MAX_SYMBOL_BYTES);
    if (sym[0] == '#') return errorf("user symbol '%s' starts with '#' (a comment in the model file)", sym);
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = utf8_decode((const unsigned char *)sym + i, n - i, &cp);
        if (k < 0) return errorf("user symbol '%s' is not valid UTF-8", sym);
        int c = char_class(cp);
        if (c == K_SPACE || c == K_CONTROL || cp == MARKER)
            return errorf("user symbol '%s' holds white space, a control character or the word marker ▁", sym);
        i += (size_t)k;
    }
    Text t;
    text_prepare(norm, sym, n, 0, &t);
    int same = t.n == n && !memcmp(t.s, sym, n);
    free(t.own);
    if (!same) return errorf("user symbol '%s' changes under %s normalization, so text could never match it", sym, NORM_NAMES[norm]);
    return 0;
}

/* Build the matcher from syms[0..n) (checked, no duplicates). */
static int symbols_init(Symbols *y, const char *const *syms, int n, int norm) {
    memset(y, 0, sizeof *y);
    y->s = xcalloc((size_t)n + 1, sizeof *y->s);
    y->len = xcalloc((size_t)n + 1, sizeof *y->len);
    y->index = xcalloc((size_t)n + 1, sizeof *y->index);
    for (int i = 0; i < n; i++) {
        if (symbol_check(syms[i], norm)) { symbols_free(y); return -1; }
        for (int j = 0; j < i; j++)
            if (!strcmp(syms[i], syms[j])) { symbols_free(y); return errorf("user symbol '%s' given twice", syms[i]); }
        size_t len = strlen(syms[i]);
        int at = y->n++;   /* insertion sort, longest first, then list order */
        while (at > 0 && y->len[at - 1] < len) {
            y->s[at] = y->s[at - 1]; y->len[at] = y->len[at - 1]; y->index[at] = y->index[at - 1];
            at--;
        }
        y->s[at] = xstrdup(syms[i]); y->len[at] = len; y->index[at] = i;
        y->first[(unsigned char)syms[i][0]] = 1;
    }
    return 0;
}

/* The first symbol occurrence in s[from..n): its offset (n if none), the
 * matcher's entry in *which and its length in *len. */
static size_t symbols_find(const Symbols *y, const char *s, size_t from, size_t n, int *which, size_t *len) {
    for (size_t i = from; i < n; i++) {
        if (!y->first[(unsigned char)s[i]]) continue;
        for (int k = 0; k < y->n; k++)
            if (y->len[k] <= n - i && !memcmp(s + i, y->s[k], y->len[k])) { *which = k; *len = y->len[k]; return i; }
    }
    *which = -1;
    *len = 0;
    return n;
}

/* Words and symbols of normalized text, in order: next_token returns 1 for a
 * word (as next_word), 2 for a symbol (*which: its matcher entry; *marked:
 * white space precedes it), 0 at the end. The words are those of the text
 * between the symbols, so none spans a symbol. */
typedef struct { WordIter w; size_t n; const Symbols *y; int sym; size_t sym_len; } TokenIter;

static void token_seek(TokenIter *t) {
    t->w.n = t->y && t->y->n ? symbols_find(t->y, (const char *)t->w.s, t->w.pos, t->n, &t->sym, &t->sym_len) : t->n;
}

static void token_iter_init(TokenIter *t, const char *s, size_t n, const Symbols *y) {
    t->w = (WordIter){(const unsigned char *)s, n, 0, 1};
    t->n = n;
    t->y = y;
    t->sym = -1;
    token_seek(t);
}

static int next_token(TokenIter *t, size_t *start, size_t *end, int *marked, int *which) {
    if (next_word(&t->w, start, end, marked)) return 1;
    if (t->sym < 0) return 0;
    *start = t->w.n;
    *end = t->w.n + t->sym_len;
    *marked = t->w.after_space;
    *which = t->sym;
    t->w.pos = *end;
    t->w.after_space = 0;
    token_seek(t);
    return 2;
}

/* ---- the model ----------------------------------------------------------- */
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

static int add_piece(Bpe *b, const char *s, size_t n) {
    if (b->vocab_size == b->cap_pieces) {
        b->cap_pieces = b->cap_pieces ? 2 * b->cap_pieces : 1024;
        b->piece = xrealloc(b->piece, (size_t)b->cap_pieces * sizeof *b->piece);
    }
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    b->piece[b->vocab_size] = p;
    strmap_add(&b->piece_id, s, n, hash_bytes(s, n))->val = b->vocab_size;
    return b->vocab_size++;
}

static int piece_lookup(const Bpe *b, const char *s, size_t n) {
    StrEntry *e = strmap_find(&b->piece_id, s, n, hash_bytes(s, n));
    return e ? (int)e->val : -1;
}

/* A model with the special and byte tokens only. */
static Bpe *bpe_new(int norm) {
    Bpe *b = xcalloc(1, sizeof *b);
    b->norm = norm;
    strmap_init(&b->piece_id, 1024);
    static const char *const specials[] = {"<pad>", "<unk>", "<s>", "</s>"};
    for (int i = 0; i < 4; i++) add_piece(b, specials[i], strlen(specials[i]));
    for (int i = 0; i < 256; i++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", i);
        add_piece(b, s, 6);
    }
    return b;
}

static int add_char(Bpe *b, int32_t cp) {
    char s[4];
    int k = utf8_encode(cp, s);
    if (b->nchars == b->cap_chars) {
        b->cap_chars = b->cap_chars ? 2 * b->cap_chars : 256;
        b->chars = xrealloc(b->chars, (size_t)b->cap_chars * sizeof *b->chars);
    }
    b->chars[b->nchars++] = cp;
    return add_piece(b, s, (size_t)k);
}

/* Add the user symbols syms[0..n) as pieces right after the characters. */
static int add_symbols(Bpe *b, const char *const *syms, int n) {
    if (symbols_init(&b->sym, syms, n, b->norm)) return -1;
    b->first_symbol = b->vocab_size;
    for (int i = 0; i < n; i++) {
        if (piece_lookup(b, syms[i], strlen(syms[i])) >= 0)
            return errorf("user symbol '%s' is already a piece of the model (a special, byte or character token)", syms[i]);
        add_piece(b, syms[i], strlen(syms[i]));
    }
    return 0;
}

static inline int is_symbol(const Bpe *b, int id) { return b->sym.n && id >= b->first_symbol && id < b->first_symbol + b->sym.n; }

/* Record merge (left, right); returns the result id, new unless the
 * concatenated string is already a piece. */
static int add_merge(Bpe *b, int left, int right) {
    size_t nl = strlen(b->piece[left]), nr = strlen(b->piece[right]);
    char *s = xmalloc(nl + nr + 1);
    memcpy(s, b->piece[left], nl);
    memcpy(s + nl, b->piece[right], nr);
    int id = piece_lookup(b, s, nl + nr);
    if (id < 0) id = add_piece(b, s, nl + nr);
    free(s);
    if (b->nmerges == b->cap_merges) {
        b->cap_merges = b->cap_merges ? 2 * b->cap_merges : 1024;
        b->merge = xrealloc(b->merge, (size_t)b->cap_merges * sizeof *b->merge);
    }
    b->merge[b->nmerges][0] = left;
    b->merge[b->nmerges][1] = right;
    b->merge[b->nmerges][2] = id;
    b->nmerges++;
    return id;
}

static inline int char_id(const Bpe *b, int32_t cp) {
    return cp < 128 ? b->ascii_id[cp] : u64map_get(&b->char_id, (uint64_t)cp);
}

static inline int32_t pair_rank(const Bpe *b, int32_t l, int32_t r) {
    if (l < FIRST_CHAR || r < FIRST_CHAR) return INT32_MAX;   /* bytes and specials never merge */
    int32_t k = u64map_get(&b->pair_rank, (uint64_t)l << 32 | (uint32_t)r);
    return k < 0 ? INT32_MAX : k;
}

/* Steps 4-5 for one word key: appends its ids to out, returns their count
 * (at most MAX_WORD_SYMS). */
static int encode_word_merges(const Bpe *b, const char *key, size_t klen, int *out) {
    int32_t sym[MAX_WORD_SYMS], rank[MAX_WORD_SYMS];
    int n = 0;
    if (key[0]) sym[n++] = FIRST_CHAR;
    const unsigned char *s = (const unsigned char *)key + 1;
    for (size_t i = 0, len = klen - 1; i < len;) {
        int32_t cp;
        int k = utf8_decode_valid(s + i, &cp);
        int id = char_id(b, cp);
        if (id >= 0) sym[n++] = id;
        else for (int j = 0; j < k; j++) sym[n++] = 4 + s[i + j];   /* byte fallback */
        i += (size_t)k;
    }
    for (int i = 0; i + 1 < n; i++) rank[i] = pair_rank(b, sym[i], sym[i + 1]);
    while (n > 1) {
        int best = 0;
        for (int i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = b->merge[rank[best]][2];
        memmove(sym + best + 1, sym + best + 2, (size_t)(n - best - 2) * sizeof *sym);
        if (n - best - 3 > 0) memmove(rank + best + 1, rank + best + 2, (size_t)(n - best - 3) * sizeof *rank);
        n--;
        if (best > 0) rank[best - 1] = pair_rank(b, sym[best - 1], sym[best]);
        if (best + 1 < n) rank[best] = pair_rank(b, sym[best], sym[best + 1]);
    }
    memcpy(out, sym, (size_t)n * sizeof *sym);
    return n;
}

static int encode_word(const Bpe *b, const char *key, size_t klen, int *out) {
    StrEntry *e = strmap_find(&b->word_id, key, klen, hash_bytes(key, klen));
    if (e) { out[0] = (int)e->val; return 1; }
    return encode_word_merges(b, key, klen, out);
}

/* Build the lookups encode and decode use, once all pieces are in. */
static void bpe_finish(Bpe *b) {
    for (int i = 0; i < 128; i++) b->ascii_id[i] = -1;
    u64map_init(&b->char_id, (size_t)b->nchars);
    for (int i = 1; i < b->nchars; i++) {   /* not the marker: a literal ▁ in text travels as bytes */
        if (b->chars[i] < 128) b->ascii_id[b->chars[i]] = FIRST_CHAR + i;
        else *u64map_put(&b->char_id, (uint64_t)b->chars[i]) = FIRST_CHAR + i;
    }
    u64map_init(&b->pair_rank, (size_t)b->nmerges);
    for (int r = 0; r < b->nmerges; r++) {
        int32_t *slot = u64map_put(&b->pair_rank, (uint64_t)b->merge[r][0] << 32 | (uint32_t)b->merge[r][1]);
        if (*slot < 0) *slot = r;
    }
    size_t total = 0;
    for (int id = 0; id < b->vocab_size; id++) total += strlen(b->piece[id]);
    b->surface = xmalloc(total + 1);
    b->surface_off = xmalloc(((size_t)b->vocab_size + 1) * sizeof *b->surface_off);
    size_t at = 0;
    for (int id = 0; id < b->vocab_size; id++) {
        b->surface_off[id] = (uint32_t)at;
        const char *p = b->piece[id];
        if (id < 4) continue;
        if (id < FIRST_CHAR) { b->surface[at++] = (char)(id - 4); continue; }
        if (!strncmp(p, "\xE2\x96\x81", 3)) { b->surface[at++] = ' '; p += 3; }
        size_t n = strlen(p);
        memcpy(b->surface + at, p, n);
        at += n;
    }
    b->surface_off[b->vocab_size] = (uint32_t)at;
    /* Whole-word shortcut: a word equal to a piece string usually encodes to
     * that piece; keep exactly those for which the merges say so. */
    strmap_init(&b->word_id, (size_t)b->vocab_size);
    for (int id = FIRST_CHAR + 1; id < b->vocab_size; id++) {
        if (is_symbol(b, id)) continue;
        const char *p = b->piece[id];
        int marked = !strncmp(p, "\xE2\x96\x81", 3);
        if (marked) p += 3;
        size_t n = strlen(p);
        if (n == 0 || n > MAX_KEY - 1) continue;
        char key[MAX_KEY];
        int out[MAX_WORD_SYMS];
        size_t kl = word_key(key, p, n, marked);
        if (encode_word_merges(b, key, kl, out) == 1 && out[0] == id)
            strmap_add(&b->word_id, key, kl, hash_bytes(key, kl))->val = id;
    }
}

static void lookups_free(Bpe *b) {
    u64map_free(&b->char_id);
    u64map_free(&b->pair_rank);
    strmap_free(&b->word_id);
    free(b->surface);
    free(b->surface_off);
    b->surface = NULL;
    b->surface_off = NULL;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->vocab_size; i++) free(b->piece[i]);
    free(b->piece);
    free(b->chars);
    free(b->merge);
    symbols_free(&b->sym);
    strmap_free(&b->piece_id);
    lookups_free(b);
    free(b);
}

int bpe_vocab_size(const Bpe *b) { return b->vocab_size; }
const char *bpe_piece(const Bpe *b, int id) { return id >= 0 && id < b->vocab_size ? b->piece[id] : NULL; }
const char *bpe_normalization(const Bpe *b) { return NORM_NAMES[b->norm]; }
int bpe_piece_id(const Bpe *b, const char *piece) { return piece_lookup(b, piece, strlen(piece)); }
int bpe_num_symbols(const Bpe *b) { return b->sym.n; }
const char *bpe_symbol(const Bpe *b, int i) { return i >= 0 && i < b->sym.n ? b->piece[b->first_symbol + i] : NULL; }

int bpe_split_symbols(const char *list, char ***out) {
    int n = 0;
    *out = NULL;
    if (!list || !list[0]) return 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        *out = xrealloc(*out, (size_t)(n + 1) * sizeof **out);
        char *sym = xmalloc(len + 1);
        memcpy(sym, p, len);
        sym[len] = 0;
        (*out)[n++] = sym;
        if (!comma) return n;
        p = comma + 1;
    }
}

void bpe_free_symbols(char **syms, int n) {
    for (int i = 0; i < n; i++) free(syms[i]);
    free(syms);
}

int bpe_check_symbols(const Bpe *b, const char *const *syms, int n, const char *name) {
    int same = n == b->sym.n;
    for (int i = 0; same && i < n; i++) same = !strcmp(syms[i], bpe_symbol(b, i));
    if (same) return 0;
    char have[1024] = "no user symbols", want[1024] = "none";
    for (int i = 0, at = 0; i < b->sym.n && at < (int)sizeof have; i++)
        at += snprintf(have + at, sizeof have - (size_t)at, "%s%s%s%s", i ? "" : "the user symbols '", i ? "," : "",
                       bpe_symbol(b, i), i + 1 == b->sym.n ? "'" : "");
    for (int i = 0, at = 0; i < n && at < (int)sizeof want; i++)
        at += snprintf(want + at, sizeof want - (size_t)at, "%s%s%s%s", i ? "" : "'", i ? "," : "", syms[i], i + 1 == n ? "'" : "");
    return errorf("%s has %s but %s were asked for (a learned vocabulary's symbols cannot change)", name, have, want);
}

/* ---- encode / decode ----------------------------------------------------- */
int bpe_encode(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid) {
    Text t;
    long bad = text_prepare(b->norm, line, len, 1, &t);
    if (had_invalid) *had_invalid = bad >= 0;
    TokenIter it;
    token_iter_init(&it, t.s, t.n, &b->sym);
    size_t start, end;
    int marked, which, kind, n = 0;
    char key[MAX_KEY];
    while ((kind = next_token(&it, &start, &end, &marked, &which))) {
        if (n + MAX_WORD_SYMS > *cap) {
            *cap = 2 * *cap > n + MAX_WORD_SYMS ? 2 * *cap : n + MAX_WORD_SYMS + 64;
            *ids = xrealloc(*ids, (size_t)*cap * sizeof **ids);
        }
        if (kind == 2) {   /* a user symbol, after a lone ▁ if white space separates it from what came before */
            if (marked && n > 0) (*ids)[n++] = FIRST_CHAR;
            (*ids)[n++] = b->first_symbol + b->sym.index[which];
            continue;
        }
        size_t kl = word_key(key, t.s + start, end - start, marked);
        n += encode_word(b, key, kl, *ids + n);
    }
    free(t.own);
    return n;
}

/* Replace invalid UTF-8 (and NUL) in s[0..n) by U+FFFD; returns a malloc'd string. */
static char *utf8_repair(char *s, size_t n) {
    if (utf8_check(s, n) < 0 && !memchr(s, 0, n)) return s;
    char *f = utf8_replace(s, n, 1, NULL);
    free(s);
    return f;
}

char *bpe_decode(const Bpe *b, const int *ids, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < b->vocab_size) total += b->surface_off[ids[i] + 1] - b->surface_off[ids[i]];
    char *out = xmalloc(total + 1);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= b->vocab_size) continue;
        uint32_t o = b->surface_off[ids[i]], e = b->surface_off[ids[i] + 1];
        memcpy(out + at, b->surface + o, e - o);
        at += e - o;
    }
    size_t skip = at > 0 && out[0] == ' ';
    memmove(out, out + skip, at - skip);
    out[at - skip] = 0;
    return utf8_repair(out, at - skip);
}

char *bpe_normalize(const Bpe *b, const char *line, size_t len, int *had_invalid) {
    Text t;
    long bad = text_prepare(b->norm, line, len, 1, &t);
    if (had_invalid) *had_invalid = bad >= 0;
    char *out = xmalloc(t.n + 1);
    size_t m = 0;
    int space = 0;
    for (size_t i = 0; i < t.n;) {
        int32_t cp;
        int k = utf8_decode_valid((const unsigned char *)t.s + i, &cp);
        if (char_class(cp) == K_SPACE) space = 1;
        else {
            if (space && m) out[m++] = ' ';
            space = 0;
            memcpy(out + m, t.s + i, (size_t)k);
            m += (size_t)k;
        }
        i += (size_t)k;
    }
    out[m] = 0;
    free(t.own);
    return out;
}

/* ---- the model file ------------------------------------------------------ */
char *bpe_to_string(const Bpe *b) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = xmemstream(&buf, &len);
    fprintf(f, "tfm-bpe %d\n"
               "# tfm joint BPE model (format: see src/bpe.c). ids: 0 <pad>, 1 <unk>, 2 <s>, 3 </s>,\n"
               "# 4-259 byte tokens <0x00>-<0xFF>, 260- the chars below in order, then %s\n"
               "# of each merge in order (unless that string is already a piece). ▁ marks a word start.\n",
            b->sym.n ? 2 : 1, b->sym.n ? "the user symbols, then the result" : "the result");
    fprintf(f, "normalization %s\nvocab_size %d\nchars %d\n", NORM_NAMES[b->norm], b->vocab_size, b->nchars);
    for (int i = 0; i < b->nchars; i++) fprintf(f, "U+%04X %s\n", (unsigned)b->chars[i], b->piece[FIRST_CHAR + i]);
    if (b->sym.n) {
        fprintf(f, "symbols %d\n", b->sym.n);
        for (int i = 0; i < b->sym.n; i++) fprintf(f, "%s\n", bpe_symbol(b, i));
    }
    fprintf(f, "merges %d\n", b->nmerges);
    for (int r = 0; r < b->nmerges; r++) fprintf(f, "%s %s\n", b->piece[b->merge[r][0]], b->piece[b->merge[r][1]]);
    fclose(f);
    return buf;
}

static int parse_norm(const char *s) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, NORM_NAMES[i])) return i;
    return -1;
}
int bpe_normalization_known(const char *name) { return parse_norm(name) >= 0; }

int bpe_symbols_check(const char *list, const char *normalization) {
    int norm = parse_norm(normalization);
    if (norm < 0) return errorf("unknown normalization '%s'", normalization);
    char **syms;
    int n = bpe_split_symbols(list, &syms);
    Symbols y;
    int r = symbols_init(&y, (const char *const *)syms, n, norm);
    if (!r) symbols_free(&y);
    bpe_free_symbols(syms, n);
    return r;
}

/* The next non-comment line of text at *p (NUL-terminated in place, '\r'
 * dropped); NULL at the end. *lineno counts lines. */
static char *next_line(char **p, int *lineno) {
    while (**p) {
        char *s = *p, *nl = strchr(s, '\n');
        if (nl) { *nl = 0; *p = nl + 1; } else *p = s + strlen(s);
        ++*lineno;
        size_t n = strlen(s);
        if (n && s[n - 1] == '\r') s[--n] = 0;
        if (s[0] == '#') continue;
        return s;
    }
    return NULL;
}

/* "key N" -> N, or -1. */
static long header_int(const char *line, const char *key) {
    size_t k = strlen(key);
    if (strncmp(line, key, k) || line[k] != ' ') return -1;
    double v;
    return parse_number(line + k + 1, 1, 0, 100000000, &v) ? -1 : (long)v;
}

/* A count of lines that the rest of the text cannot hold (each takes at
 * least 2 bytes: a character and its newline): no allocation is sized by a
 * count before it is checked against the file. */
static int too_many(long count, const char *rest) { return count > 0 && (size_t)count > strlen(rest) / 2 + 1; }

Bpe *bpe_from_string(const char *text, const char *name) {
    char *copy = xstrdup(text), *p = copy, *s;
    int ln = 0;
    Bpe *b = NULL;
    U64Map seen = {0};
    long vocab = -1, nchars, nmerges;
    if (!(s = next_line(&p, &ln)) || strncmp(s, "tfm-bpe ", 8)) {
        errorf("%s:%d: expected 'tfm-bpe 1' (not a tfm BPE model)", name, ln); goto fail;
    }
    int version = !strcmp(s + 8, "1") ? 1 : !strcmp(s + 8, "2") ? 2 : 0;
    if (!version) { errorf("%s:%d: BPE model format version '%s' is not supported (this tfm reads 1 and 2)", name, ln, s + 8); goto fail; }
    if (!(s = next_line(&p, &ln)) || strncmp(s, "normalization ", 14) || parse_norm(s + 14) < 0) {
        errorf("%s:%d: expected 'normalization nfkc|nfc|none'", name, ln); goto fail;
    }
    b = bpe_new(parse_norm(s + 14));
    if (!(s = next_line(&p, &ln)) || (vocab = header_int(s, "vocab_size")) < 0) {
        errorf("%s:%d: expected 'vocab_size N'", name, ln); goto fail;
    }
    if (!(s = next_line(&p, &ln)) || (nchars = header_int(s, "chars")) < 1) {
        errorf("%s:%d: expected 'chars N' with N >= 1", name, ln); goto fail;
    }
    if (too_many(nchars, p)) {
        errorf("%s:%d: 'chars %ld' but the %zu bytes left hold fewer character lines", name, ln, nchars, strlen(p)); goto fail;
    }
    for (long i = 0; i < nchars; i++) {
        char *end;
        if (!(s = next_line(&p, &ln))) { errorf("%s:%d: file ends after %ld of %ld chars", name, ln, i, nchars); goto fail; }
        long cp = strncmp(s, "U+", 2) ? -1 : strtol(s + 2, &end, 16);
        if (cp < 0 || (*end && *end != ' ')) { errorf("%s:%d: expected a character line 'U+XXXX c'", name, ln); goto fail; }
        if (i == 0 && cp != MARKER) { errorf("%s:%d: the first character must be U+2581 (the word marker)", name, ln); goto fail; }
        int k = cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) ? char_class((int32_t)cp) : K_SPACE;
        if (k == K_SPACE || k == K_CONTROL || (i > 0 && cp == MARKER)) {
            errorf("%s:%d: U+%04lX cannot be in the alphabet (white space, control, surrogate, out of range or a second ▁)", name, ln, cp);
            goto fail;
        }
        char u[4];
        if (piece_lookup(b, u, (size_t)utf8_encode((int32_t)cp, u)) >= 0) { errorf("%s:%d: U+%04lX listed twice", name, ln, cp); goto fail; }
        add_char(b, (int32_t)cp);
    }
    if (version == 2) {   /* user symbols */
        long nsym;
        if (!(s = next_line(&p, &ln)) || (nsym = header_int(s, "symbols")) < 0 || nsym > 100000) {
            errorf("%s:%d: expected 'symbols N' (format version 2)", name, ln); goto fail;
        }
        if (too_many(nsym, p)) {
            errorf("%s:%d: 'symbols %ld' but the %zu bytes left hold fewer symbol lines", name, ln, nsym, strlen(p)); goto fail;
        }
        char **syms = xcalloc((size_t)nsym + 1, sizeof *syms);
        int bad = 0;
        for (long i = 0; i < nsym && !bad; i++) {
            if (!(s = next_line(&p, &ln))) { errorf("%s:%d: file ends after %ld of %ld symbols", name, ln, i, nsym); bad = 1; }
            else syms[i] = s;
        }
        if (!bad && add_symbols(b, (const char *const *)syms, (int)nsym)) { error_wrap("%s:%d", name, ln); bad = 1; }
        free(syms);
        if (bad) goto fail;
    }
    if (!(s = next_line(&p, &ln)) || (nmerges = header_int(s, "merges")) < 0) {
        errorf("%s:%d: expected 'merges N'", name, ln); goto fail;
    }
    if (too_many(nmerges, p)) {   /* the table below is sized by the count: check it against the text */
        errorf("%s:%d: 'merges %ld' but the %zu bytes left hold fewer merge lines", name, ln, nmerges, strlen(p)); goto fail;
    }
    u64map_init(&seen, (size_t)nmerges);
    for (long r = 0; r < nmerges; r++) {
        if (!(s = next_line(&p, &ln))) { errorf("%s:%d: file ends after %ld of %ld merges", name, ln, r, nmerges); goto fail; }
        char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) { errorf("%s:%d: expected a merge 'left right' (two pieces, one space)", name, ln); goto fail; }
        int l = piece_lookup(b, s, (size_t)(sp - s)), rt = piece_lookup(b, sp + 1, strlen(sp + 1));
        if (l < FIRST_CHAR || rt < FIRST_CHAR) {
            *sp = 0;
            errorf("%s:%d: merge of '%s' which is not a learned piece or character so far", name, ln, l < FIRST_CHAR ? s : sp + 1);
            goto fail;
        }
        if (!strncmp(sp + 1, "\xE2\x96\x81", 3)) { errorf("%s:%d: the right side of a merge cannot start with the word marker", name, ln); goto fail; }
        if (is_symbol(b, l) || is_symbol(b, rt)) { errorf("%s:%d: a merge of a user symbol (symbols are never merged)", name, ln); goto fail; }
        int32_t *slot = u64map_put(&seen, (uint64_t)l << 32 | (uint32_t)rt);
        if (*slot >= 0) { errorf("%s:%d: merge listed twice (first on merge %d)", name, ln, *slot + 1); goto fail; }
        *slot = (int32_t)r;
        if (is_symbol(b, add_merge(b, l, rt))) { errorf("%s:%d: this merge spells a user symbol", name, ln); goto fail; }
    }
    if ((s = next_line(&p, &ln))) { errorf("%s:%d: unexpected line after the %ld merges", name, ln, nmerges); goto fail; }
    if (vocab != b->vocab_size) {
        errorf("%s: vocab_size says %ld but the file defines %d pieces", name, vocab, b->vocab_size); goto fail;
    }
    u64map_free(&seen);
    free(copy);
    bpe_finish(b);
    return b;
fail:
    if (seen.key) u64map_free(&seen);
    free(copy);
    bpe_free(b);
    return NULL;
}

int bpe_save(const Bpe *b, const char *path) {
    char *text = bpe_to_string(b);
    int rc = write_file_atomic(path, text, strlen(text));   /* /dev/stdout, a pipe: written in place */
    free(text);
    return rc;
}

Bpe *bpe_load(const char *path) {
    TextOptions o = TEXT_DEFAULT;   /* read once (a pipe works), NUL refused, bounded */
    o.invalid = TEXT_BYTES;
    o.max_bytes = TEXT_MAX_MODEL;
    char *text = text_read_all(path, &o, NULL);
    if (!text) return NULL;
    Bpe *b = bpe_from_string(text, path);
    free(text);
    return b;
}

/* ---- learning ------------------------------------------------------------ */

/* Count the words of every line in files into maps[0] (one map per thread,
 * merged at the end). The files are read through text.h: invalid UTF-8 or a
 * NUL byte is an error naming file and line (a vocabulary learned from
 * garbage is garbage), or with --skip-invalid a line left out and counted.
 * Lines are gathered in batches of ~8 MiB and counted in parallel. */
static int count_words(const char *const *files, int nfiles, const BpeLearnOptions *opt, int norm, const Symbols *y,
                       int nt, StrMap *maps, long *lines_out) {
    enum { BATCH_BYTES = 8 << 20 };
    size_t cap = BATCH_BYTES + (1 << 16);
    char *buf = xmalloc(cap);
    size_t *start = NULL, cap_start = 0;
    long total_lines = 0, skipped = 0;
    double t0 = now_seconds(), last_log = t0;
    int rc = 0;
    TextOptions to = TEXT_DEFAULT;
    to.invalid = opt->skip_invalid ? TEXT_SKIP : TEXT_STRICT;
    char hint[1400];
    snprintf(hint, sizeof hint, "; fix the file or %s", opt->invalid_hint ? opt->invalid_hint : "use --skip-invalid");
    to.hint = hint;
    for (int fi = 0; fi < nfiles && rc == 0; fi++) {
        TextReader *r = text_open(files[fi], &to);   /* read once: a pipe works */
        if (!r) { rc = -1; break; }
        for (int eof = 0; !eof && rc == 0;) {
            size_t used = 0, nlines = 0;   /* a batch: line i is buf[start[i] .. start[i+1] - 1), NUL-terminated */
            char *line;
            while (used < BATCH_BYTES) {
                long k = text_line(r, &line);
                if (k == -2) { rc = -1; break; }
                if (k < 0) { eof = 1; break; }
                if (used + (size_t)k + 1 > cap) { cap = 2 * (used + (size_t)k + 1); buf = xrealloc(buf, cap); }
                if (nlines + 2 > cap_start) { cap_start = cap_start ? 2 * cap_start : 1 << 16; start = xrealloc(start, cap_start * sizeof *start); }
                start[nlines++] = used;
                memcpy(buf + used, line, (size_t)k + 1);
                used += (size_t)k + 1;
            }
            if (rc || nlines == 0) break;
            start[nlines] = used;
            #pragma omp parallel num_threads(nt)
            {
                StrMap *m = &maps[omp_get_thread_num()];
                char key[MAX_KEY];
                #pragma omp for schedule(dynamic, 256)
                for (size_t i = 0; i < nlines; i++) {
                    Text t;
                    /* valid UTF-8 without NUL (text.h checked it): nothing to fix */
                    text_prepare(norm, buf + start[i], start[i + 1] - start[i] - 1, 1, &t);
                    TokenIter it;
                    token_iter_init(&it, t.s, t.n, y);
                    size_t ws, we;
                    int marked, which, kind;
                    while ((kind = next_token(&it, &ws, &we, &marked, &which))) {
                        if (kind == 2) continue;   /* user symbols are pieces of their own */
                        size_t kl = word_key(key, t.s + ws, we - ws, marked);
                        strmap_add(m, key, kl, hash_bytes(key, kl))->val++;
                    }
                    free(t.own);
                }
            }
            total_lines += (long)nlines;
            if (!opt->quiet && now_seconds() - last_log > 2) {
                last_log = now_seconds();
                log_info("bpe: read %ld lines (%.0f lines/s)", total_lines, total_lines / (last_log - t0));
            }
        }
        total_lines += text_invalid_lines(r);   /* skipped lines count as read */
        skipped += text_invalid_lines(r);
        text_close(r);
    }
    free(buf);
    free(start);
    if (rc) return rc;
    for (int t = 1; t < nt; t++) {   /* merge the per-thread counts */
        const StrEntry *e;
        for (size_t i = 0; (e = strmap_next(&maps[t], &i));) {
            const char *k = strmap_key(&maps[t], e);
            strmap_add(&maps[0], k, e->len, hash_bytes(k, e->len))->val += e->val;
        }
        strmap_free(&maps[t]);
    }
    if (skipped) log_warn("bpe: skipped %ld line%s with invalid UTF-8", skipped, skipped == 1 ? "" : "s");
    *lines_out = total_lines;
    return 0;
}

/* The merge loop's state: words as symbol arrays, pairs with counts and
 * the words that hold them, and a lazy max-heap of pairs.
 * All words live in one int32 pool; a word is known by its offset o there:
 *   ws[o] length, ws[o+1] stamp (last merge step that visited it),
 *   ws[o+2..o+3] count (int64), ws[o+4..] its symbols.
 * Visiting a word from a pair's list then touches one place in memory. */
enum { WORD_HEAD = 4 };
typedef struct {
    int32_t a, b;
    int64_t count;
    uint32_t *where; int32_t nwhere, cap_where;   /* words (offsets) holding the pair; may hold stale ones */
    uint32_t last_word;
    int32_t stamp;                                 /* last step it was put on the touched list */
} Pair;
typedef struct { int64_t count; int32_t a, b, pair; } HeapItem;

typedef struct {
    int32_t *ws; size_t nws;
    Pair *pair; int32_t npairs, cap_pairs;
    U64Map pair_index;
    HeapItem *heap; size_t nheap, cap_heap;
    int32_t *touched; int32_t ntouched, cap_touched;
    int32_t step;
} Learner;

static inline int64_t word_count(const int32_t *h) { int64_t c; memcpy(&c, h + 2, sizeof c); return c; }

static inline int heap_before(const HeapItem *x, const HeapItem *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static void heap_push(Learner *L, int32_t p) {
    if (L->nheap == L->cap_heap) { L->cap_heap = L->cap_heap ? 2 * L->cap_heap : 1 << 16; L->heap = xrealloc(L->heap, L->cap_heap * sizeof *L->heap); }
    HeapItem it = {L->pair[p].count, L->pair[p].a, L->pair[p].b, p};
    size_t i = L->nheap++;
    while (i > 0 && heap_before(&it, &L->heap[(i - 1) / 2])) { L->heap[i] = L->heap[(i - 1) / 2]; i = (i - 1) / 2; }
    L->heap[i] = it;
}

static HeapItem heap_pop(Learner *L) {
    HeapItem top = L->heap[0], last = L->heap[--L->nheap];
    size_t i = 0, n = L->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&L->heap[c + 1], &L->heap[c])) c++;
        if (!heap_before(&L->heap[c], &last)) break;
        L->heap[i] = L->heap[c];
        i = c;
    }
    if (n) L->heap[i] = last;
    return top;
}

static int32_t pair_get(Learner *L, int32_t a, int32_t b) {
    int32_t *slot = u64map_put(&L->pair_index, (uint64_t)a << 32 | (uint32_t)b);
    if (*slot < 0) {
        if (L->npairs == L->cap_pairs) { L->cap_pairs = L->cap_pairs ? 2 * L->cap_pairs : 1 << 16; L->pair = xrealloc(L->pair, (size_t)L->cap_pairs * sizeof *L->pair); }
        L->pair[L->npairs] = (Pair){a, b, 0, NULL, 0, 0, UINT32_MAX, -1};
        *slot = L->npairs++;
    }
    return *slot;
}

/* Occurrences of pair (a, b) in word w change by +c (c > 0: also index w). */
static void pair_add(Learner *L, int32_t a, int32_t b, int64_t c, uint32_t w) {
    if (a < FIRST_CHAR || b < FIRST_CHAR) return;   /* byte tokens never merge */
    if (c < 0) { L->pair[u64map_get(&L->pair_index, (uint64_t)a << 32 | (uint32_t)b)].count += c; return; }
    int32_t p = pair_get(L, a, b);
    Pair *P = &L->pair[p];
    P->count += c;
    if (P->last_word != w) {
        if (P->nwhere == P->cap_where) {
            P->cap_where = P->cap_where ? 2 * P->cap_where : 4;
            P->where = xrealloc(P->where, (size_t)P->cap_where * sizeof *P->where);
        }
        P->where[P->nwhere++] = w;
        P->last_word = w;
    }
    if (P->stamp != L->step) {
        P->stamp = L->step;
        if (L->ntouched == L->cap_touched) { L->cap_touched = L->cap_touched ? 2 * L->cap_touched : 1024; L->touched = xrealloc(L->touched, (size_t)L->cap_touched * sizeof *L->touched); }
        L->touched[L->ntouched++] = p;
    }
}

/* Replace every occurrence of pair p = (a, b) by z, left to right, in every
 * word that holds it, and update the counts of the neighbouring pairs:
 *   ... x a b y ...  ->  ... x z y ...   (x,a) -c  (b,y) -c  (x,z) +c  (z,y) +c
 * x is taken from the rewritten word, so "a b a b" -> "z z" counts (z,z). */
static void apply_merge(Learner *L, int32_t p, int32_t z) {
    const int32_t a = L->pair[p].a, b = L->pair[p].b;
    uint32_t *where = L->pair[p].where;   /* pair_add never appends to p's own list */
    int32_t nwhere = L->pair[p].nwhere;
    int64_t merged = 0;
    for (int32_t k = 0; k < nwhere; k++) {
        if (k + 8 < nwhere) __builtin_prefetch(L->ws + where[k + 8], 1);
        uint32_t w = where[k];
        int32_t *h = L->ws + w, *s = h + WORD_HEAD;
        if (h[1] == L->step) continue;   /* listed twice */
        h[1] = L->step;
        int n = h[0], j = 0;
        int64_t c = word_count(h);
        for (int i = 0; i < n;) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                merged += c;
                if (j > 0) { pair_add(L, s[j - 1], a, -c, w); pair_add(L, s[j - 1], z, c, w); }
                if (i + 2 < n) { pair_add(L, b, s[i + 2], -c, w); pair_add(L, z, s[i + 2], c, w); }
                s[j++] = z;
                i += 2;
            } else s[j++] = s[i++];
        }
        h[0] = j;
    }
    Pair *P = &L->pair[p];
    P->count -= merged;
    ASSERT(P->count == 0);
    free(P->where);
    P->where = NULL;
    P->nwhere = P->cap_where = 0;
}

static void learner_free(Learner *L) {
    for (int32_t p = 0; p < L->npairs; p++) free(L->pair[p].where);
    free(L->ws);
    free(L->pair); u64map_free(&L->pair_index);
    free(L->heap); free(L->touched);
}

typedef struct { int32_t cp; int64_t count; } CharCount;
static int char_count_cmp(const void *x, const void *y) {
    const CharCount *a = x, *b = y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return (a->cp > b->cp) - (a->cp < b->cp);
}

Bpe *bpe_learn(const char *const *files, int nfiles, const BpeLearnOptions *opt) {
    int norm = parse_norm(opt->normalization ? opt->normalization : "nfkc");
    if (norm < 0) { errorf("normalization '%s' is not one of nfkc, nfc, none", opt->normalization); return NULL; }
    if (opt->vocab_size < FIRST_CHAR + 1 + opt->nsymbols) {
        errorf("vocab size %d is too small: BPE needs at least %d (4 special tokens, 256 byte tokens, the word marker%s)",
               opt->vocab_size, FIRST_CHAR + 1 + opt->nsymbols, opt->nsymbols ? " and the user symbols" : "");
        return NULL;
    }
    if (nfiles < 1) { errorf("bpe: no training files"); return NULL; }
    int nt = opt->threads > 0 ? opt->threads : threads_count();
    double t0 = now_seconds();
    Symbols y;
    if (symbols_init(&y, opt->symbols, opt->nsymbols, norm)) return NULL;

    /* 1. word counts (of the text between user symbols) */
    StrMap *maps = xcalloc((size_t)nt, sizeof *maps);
    for (int t = 0; t < nt; t++) strmap_init(&maps[t], 1 << 16);
    long nlines = 0;
    int rc = count_words(files, nfiles, opt, norm, &y, nt, maps, &nlines);
    symbols_free(&y);
    if (rc) {
        for (int t = 0; t < nt; t++) strmap_free(&maps[t]);
        free(maps);
        return NULL;
    }
    StrMap *words = &maps[0];
    if (words->n == 0) { strmap_free(words); free(maps); errorf("bpe: the training files hold no text"); return NULL; }

    /* 2. the alphabet: most frequent characters up to CHAR_COVERAGE */
    int64_t *cc = xcalloc(0x110000, sizeof *cc), total = 0, nword_tokens = 0;
    const StrEntry *e;
    for (size_t j = 0; (e = strmap_next(words, &j));) {
        const unsigned char *s = (const unsigned char *)strmap_key(words, e);
        nword_tokens += e->val;
        for (size_t i = 1; i < e->len;) {
            int32_t cp;
            i += (size_t)utf8_decode_valid(s + i, &cp);
            cc[cp] += e->val;
        }
    }
    int ncand = 0;
    CharCount *cand = xmalloc(0x110000 * sizeof *cand);
    for (int32_t cp = 0; cp < 0x110000; cp++)
        if (cc[cp] && cp != MARKER && char_class(cp) != K_CONTROL) { cand[ncand++] = (CharCount){cp, cc[cp]}; total += cc[cp]; }
    free(cc);
    qsort(cand, (size_t)ncand, sizeof *cand, char_count_cmp);
    Bpe *b = bpe_new(norm);
    add_char(b, MARKER);
    int64_t covered = 0;
    for (int i = 0; i < ncand && b->vocab_size + opt->nsymbols < opt->vocab_size; i++) {
        if ((double)covered >= CHAR_COVERAGE * (double)total) break;
        add_char(b, cand[i].cp);
        covered += cand[i].count;
    }
    free(cand);
    if (add_symbols(b, opt->symbols, opt->nsymbols)) {   /* cannot collide: no counted word holds a symbol */
        strmap_free(words); free(maps); bpe_free(b);
        return NULL;
    }
    bpe_finish(b);   /* for char_id */
    if (!opt->quiet)
        log_info("bpe: %ld lines, %lld words, %zu distinct; %d characters in the alphabet (%d more as bytes) [%.1fs]",
                 nlines, (long long)nword_tokens, words->n, b->nchars, ncand + 1 - b->nchars, now_seconds() - t0);

    /* 3. words as symbol arrays, and the initial pair counts */
    Learner L = {0};
    size_t nws = 0, j = 0;
    /* key = flag + n bytes: at most n + 1 symbols (marker, one per byte); even sizes keep counts aligned */
    for (j = 0; (e = strmap_next(words, &j));) nws += (WORD_HEAD + e->len + 1) & ~(size_t)1;
    if (nws > UINT32_MAX) {
        errorf("bpe: corpus too large (%zu symbols in distinct words, at most 2^32)", nws);
        strmap_free(words); free(maps); bpe_free(b);
        return NULL;
    }
    L.ws = xmalloc(nws * sizeof *L.ws);
    u64map_init(&L.pair_index, 1 << 16);
    L.step = -1;
    size_t at = 0;
    for (j = 0; (e = strmap_next(words, &j));) {
        const unsigned char *s = (const unsigned char *)strmap_key(words, e);
        int32_t *h = L.ws + at, *out = h + WORD_HEAD;
        int n = 0;
        if (s[0]) out[n++] = FIRST_CHAR;
        for (size_t i = 1; i < e->len;) {
            int32_t cp;
            int k = utf8_decode_valid(s + i, &cp), id = char_id(b, cp);
            if (id >= 0) out[n++] = id;
            else for (int q = 0; q < k; q++) out[n++] = 4 + s[i + q];
            i += (size_t)k;
        }
        h[0] = n;
        h[1] = -1;
        memcpy(h + 2, &e->val, sizeof e->val);
        for (int i = 0; i + 1 < n; i++) pair_add(&L, out[i], out[i + 1], e->val, (uint32_t)at);
        at += (WORD_HEAD + e->len + 1) & ~(size_t)1;
    }
    strmap_free(words);
    free(maps);
    for (int32_t p = 0; p < L.npairs; p++)
        if (L.pair[p].count >= 2) heap_push(&L, p);

    /* 4. merges: always the most frequent pair, ties to the smaller ids */
    double last_log = now_seconds();
    int target = opt->vocab_size;
    while (b->vocab_size < target) {
        HeapItem top;
        int found = 0;
        while (L.nheap) {
            top = heap_pop(&L);
            int64_t cur = L.pair[top.pair].count;
            if (cur == top.count) { found = 1; break; }
            if (cur < top.count && cur >= 2) heap_push(&L, top.pair);   /* stale: reinsert with today's count */
        }
        if (!found || top.count < 2) break;
        L.step++;
        L.ntouched = 0;
        int z = add_merge(b, top.a, top.b);
        apply_merge(&L, top.pair, z);
        for (int32_t i = 0; i < L.ntouched; i++)
            if (L.pair[L.touched[i]].count >= 2) heap_push(&L, L.touched[i]);
        if (!opt->quiet && now_seconds() - last_log > 2) {
            last_log = now_seconds();
            log_info("bpe: merge %d, vocabulary %d/%d, '%s' x%lld [%.1fs]", b->nmerges, b->vocab_size, target,
                     b->piece[z], (long long)top.count, last_log - t0);
        }
    }
    learner_free(&L);
    if (b->vocab_size < target)
        log_warn("bpe: vocabulary stops at %d of the %d asked: no pair of symbols occurs twice any more", b->vocab_size, target);
    lookups_free(b);   /* rebuild them now that the merges are known */
    bpe_finish(b);
    if (!opt->quiet)
        log_info("bpe: learned %d merges, vocabulary %d, in %.1fs", b->nmerges, b->vocab_size, now_seconds() - t0);
    return b;
}
