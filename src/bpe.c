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
 *      BPE-dropout (Provilkov et al. 2020, bpe_encode_dropout, for training
 *      only): at each step every candidate pair is left out with probability
 *      p, the earliest of the others is applied, and the word is done when
 *      all were left out; so one word gets different, finer segmentations
 *      from one epoch to the next (p = 0: the segmentation above).
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
 * The files: bpe_words.c steps 1-3 (check, normalize, words and symbols),
 * this file the model (steps 4-5, decoding, the model file), bpe_learn.c
 * learning; bpe_internal.h the Bpe struct they share, hashmap.h the maps.
 */
#include "bpe.h"
#include "bpe_internal.h"
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model ----------------------------------------------------------- */
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
Bpe *bpe_new(int norm) {
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

int bpe_add_char(Bpe *b, int32_t cp) {
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
int bpe_add_symbols(Bpe *b, const char *const *syms, int n) {
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
int bpe_add_merge(Bpe *b, int left, int right) {
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

static inline int32_t pair_rank(const Bpe *b, int32_t l, int32_t r) {
    if (l < FIRST_CHAR || r < FIRST_CHAR) return INT32_MAX;   /* bytes and specials never merge */
    int32_t k = u64map_get(&b->pair_rank, (uint64_t)l << 32 | (uint32_t)r);
    return k < 0 ? INT32_MAX : k;
}

/* Steps 4-5 for one word key: appends its ids to out, returns their count
 * (at most MAX_WORD_SYMS). With rng, BPE-dropout: each step leaves out each
 * candidate pair with probability p. */
static int encode_word_merges(const Bpe *b, const char *key, size_t klen, int *out, float p, Rng *rng) {
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
        int best = -1;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] != INT32_MAX && (best < 0 || rank[i] < rank[best]) && !(rng && rng_uniform(rng) < p)) best = i;
        if (best < 0) break;
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

static int encode_word(const Bpe *b, const char *key, size_t klen, int *out, float p, Rng *rng) {
    if (!rng) {   /* whole words: the shortcut gives what the merges give */
        StrEntry *e = strmap_find(&b->word_id, key, klen, hash_bytes(key, klen));
        if (e) { out[0] = (int)e->val; return 1; }
    }
    return encode_word_merges(b, key, klen, out, p, rng);
}

/* Build the lookups encode and decode use, once all pieces are in. */
void bpe_finish(Bpe *b) {
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
        if (encode_word_merges(b, key, kl, out, 0, NULL) == 1 && out[0] == id)
            strmap_add(&b->word_id, key, kl, hash_bytes(key, kl))->val = id;
    }
}

void bpe_lookups_free(Bpe *b) {
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
    bpe_lookups_free(b);
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
static int encode_line(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid, float p,
                       Rng *rng) {
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
        n += encode_word(b, key, kl, *ids + n, p, rng);
    }
    free(t.own);
    return n;
}

int bpe_encode(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid) {
    return encode_line(b, line, len, ids, cap, had_invalid, 0, NULL);
}

int bpe_encode_dropout(const Bpe *b, const char *line, size_t len, int **ids, int *cap, int *had_invalid, float p,
                       uint64_t seed) {
    if (!(p > 0)) return encode_line(b, line, len, ids, cap, had_invalid, 0, NULL);
    Rng rng;
    rng_seed(&rng, seed);
    return encode_line(b, line, len, ids, cap, had_invalid, p, &rng);
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
        bpe_add_char(b, (int32_t)cp);
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
        if (!bad && bpe_add_symbols(b, (const char *const *)syms, (int)nsym)) { error_wrap("%s:%d", name, ln); bad = 1; }
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
        if (is_symbol(b, bpe_add_merge(b, l, rt))) { errorf("%s:%d: this merge spells a user symbol", name, ln); goto fail; }
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
