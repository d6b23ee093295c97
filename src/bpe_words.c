/* bpe_words.c — steps 1-3 of the BPE text pipeline (bpe.c's header gives
 * the contract), shared by applying (bpe.c) and learning (bpe_learn.c):
 *   1-2. text_prepare: the UTF-8 check (NUL is invalid) and utf8proc's
 *        normalization, skipped for lines of ASCII and other characters that
 *        NFC and NFKC leave alone;
 *   3.   next_word: words, by white space and changes of character class;
 *        symbols_find: the user symbols, leftmost and longest first;
 *        next_token: both, in order.
 * Nothing here knows the vocabulary: step 4 (characters to ids) is bpe.c's.
 */
#include "bpe_words.h"
#include "utf8.h"
#include "util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- normalizations ----------------------------------------------------- */
const char *const NORM_NAMES[3] = {"none", "nfc", "nfkc"};

int parse_norm(const char *s) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, NORM_NAMES[i])) return i;
    return -1;
}

/* ---- UTF-8 and character classes --------------------------------------- */

int char_class_unicode(int32_t cp) {
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
const unsigned char ASCII_CLASS[128] = {
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

/* Checks the UTF-8 of line and normalizes it into t. Returns -1 when valid,
 * else the offset of the first invalid byte: with fix = 0 it stops there
 * (t untouched); with fix = 1 each invalid subpart becomes U+FFFD. */
long text_prepare(int norm, const char *line, size_t len, int fix, Text *t) {
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

/* ---- user-defined symbols ------------------------------------------------ */

void symbols_free(Symbols *y) {
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
int symbols_init(Symbols *y, const char *const *syms, int n, int norm) {
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

static void token_seek(TokenIter *t) {
    t->w.n = t->y && t->y->n ? symbols_find(t->y, (const char *)t->w.s, t->w.pos, t->n, &t->sym, &t->sym_len) : t->n;
}

void token_iter_init(TokenIter *t, const char *s, size_t n, const Symbols *y) {
    t->w = (WordIter){(const unsigned char *)s, n, 0, 1};
    t->n = n;
    t->y = y;
    t->sym = -1;
    token_seek(t);
}

int next_token(TokenIter *t, size_t *start, size_t *end, int *marked, int *which) {
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
