/* bleu.c — corpus BLEU (Papineni et al. 2002) and chrF / chrF++ (Popović
 * 2015, 2017) computed exactly as sacreBLEU 2.6.0 computes them, and the
 * `tfm bleu` command.
 *
 * sacreBLEU is Python, so "a character" is a code point and "whitespace" is
 * str.isspace(). We decode each line once into code points (uint32) and
 * reproduce Python's rstrip(), lower(), split() and the tokenizers' regular
 * expressions on them. N-grams are compared symbol by symbol (never by hash
 * alone), so every count is exact and the scores follow sacreBLEU's formulas
 * operation for operation.
 *
 * BLEU = BP * exp( (1/4) sum_{n=1..4} log p_n ),  p_n = clipped n-gram matches
 * / hypothesis n-grams, both summed over the corpus; a hypothesis n-gram is
 * clipped to its largest count in any one reference; BP = exp(1 - r/c) if the
 * hypothesis length c is below r, the sum over lines of the reference length
 * closest to each hypothesis (ties to the shorter).
 *
 * chrF_beta = (1 + beta^2) P R / (beta^2 P + R), P and R averaged over
 * character n-gram orders 1..6 (plus word orders 1..2 for chrF++), from
 * corpus-summed counts; with several references each line keeps the stats of
 * the reference with the best sentence-level chrF.
 *
 * Over 700 lines: BLEU and chrF share the layer that reproduces Python's
 * strings and sacreBLEU's tokenizers operation for operation; kept private
 * here, it cannot drift from the one scorer it is exact for.
 */
#include "bleu.h"
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <utf8proc.h>

/* ---- a growable sequence of code points (or token ids) ---------------- */
typedef struct { uint32_t *p; size_t n, cap; } Seq;

static void seq_push(Seq *s, uint32_t c) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->p = xrealloc(s->p, s->cap * sizeof *s->p);
    }
    s->p[s->n++] = c;
}
static void seq_ascii(Seq *s, const char *a) { while (*a) seq_push(s, (unsigned char)*a++); }
static void seq_swap(Seq *a, Seq *b) { Seq t = *a; *a = *b; *b = t; }
static void seq_free(Seq *s) { free(s->p); s->p = NULL; s->n = s->cap = 0; }

/* ---- Python's view of Unicode text ------------------------------------- */

/* str.isspace(): bidi class WS/B/S or category Zs (CPython's table). */
static int py_isspace(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* bytes.decode('utf-8') into code points: returns the byte offset of the
 * first invalid sequence, or -1 when all is valid. (Lines read with
 * --replace-invalid were repaired by utf8_replace, errors='replace'.) */
static long decode_cps(const char *text, size_t n, Seq *out) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = utf8_decode(s + i, n - i, &cp);
        if (k < 0) return (long)i;
        seq_push(out, (uint32_t)cp);
        i += (size_t)k;
    }
    return -1;
}

static char *encode_cps(const uint32_t *p, size_t n) {
    char *s = xmalloc(4 * n + 1), *q = s;
    for (size_t i = 0; i < n; i++) q += utf8_encode((int32_t)p[i], q);
    *q = 0;
    return s;
}

/* Unicode "Cased" and "Case_Ignorable" for Python's final-sigma rule. */
static int is_cased(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           (uint32_t)utf8proc_tolower((utf8proc_int32_t)c) != c ||
           (uint32_t)utf8proc_toupper((utf8proc_int32_t)c) != c;
}
static int is_case_ignorable(uint32_t c) {
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK: return 1;
    default: break;
    }
    switch (c) {   /* Word_Break = MidLetter, MidNumLet or Single_Quote */
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4:
    case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52:
    case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A: return 1;
    default: return 0;
    }
}

/* str.lower(): the simple lowercase mapping, plus the two rules Python adds:
 * U+0130 -> "i\u0307", and capital sigma -> final sigma at the end of a word. */
static void py_lower(const Seq *in, Seq *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        uint32_t c = in->p[i];
        if (c < 0x80) { seq_push(out, c >= 'A' && c <= 'Z' ? c + 32 : c); continue; }
        if (c == 0x130) { seq_push(out, 0x69); seq_push(out, 0x307); continue; }
        if (c == 0x3A3) {
            /* final iff: cased (case-ignorable)* SIGMA not followed by (case-ignorable)* cased */
            size_t j = i;
            while (j > 0 && is_case_ignorable(in->p[j - 1])) j--;
            int final = j > 0 && is_cased(in->p[j - 1]);
            if (final) {
                j = i + 1;
                while (j < in->n && is_case_ignorable(in->p[j])) j++;
                final = j == in->n || !is_cased(in->p[j]);
            }
            seq_push(out, final ? 0x3C2 : 0x3C3);
            continue;
        }
        seq_push(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
    }
}

/* Decode, rstrip() and optionally lower() one line: sacreBLEU's cleanup.
 * Returns -1, or the byte offset of invalid UTF-8. */
static long clean_line(const char *s, int lowercase, Seq *out, Seq *tmp) {
    out->n = 0;
    long bad = decode_cps(s, strlen(s), out);
    if (bad >= 0) return bad;
    while (out->n && py_isspace(out->p[out->n - 1])) out->n--;
    if (lowercase) { py_lower(out, tmp); seq_swap(out, tmp); }
    return -1;
}

/* ---- tokenizers (sacrebleu/tokenizers) ---------------------------------
 * Each maps a line to a line whose whitespace-separated words are the
 * tokens; the final ' '.join(line.split()) happens when we split. */
enum { TOK_13A, TOK_INTL, TOK_NONE, TOK_CHAR };
static const char *const TOKENIZERS[] = {"13a", "intl", "none", "char"};

static int tokenizer_id(const char *name) {
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, TOKENIZERS[i])) return i;
    return -1;
}

static int has_ascii(const Seq *s, char c) {
    for (size_t i = 0; i < s->n; i++)
        if (s->p[i] == (uint32_t)c) return 1;
    return 0;
}

/* str.replace(from, to) with ASCII arguments. */
static void replace_ascii(const Seq *in, const char *from, const char *to, Seq *out) {
    size_t fl = strlen(from);
    out->n = 0;
    for (size_t i = 0; i < in->n;) {
        size_t k = 0;
        while (k < fl && i + k < in->n && in->p[i + k] == (uint32_t)(unsigned char)from[k]) k++;
        if (k == fl) { seq_ascii(out, to); i += fl; }
        else seq_push(out, in->p[i++]);
    }
}
static void replace_pass(Seq *s, Seq *tmp, const char *from, const char *to) {
    if (!has_ascii(s, from[0])) return;
    replace_ascii(s, from, to, tmp);
    seq_swap(s, tmp);
}

typedef int (*CharClass)(uint32_t);

/* re.sub('(A)', ' \1 ', s) for a one-character class A. */
static void pad_pass(Seq *s, Seq *tmp, CharClass a) {
    tmp->n = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (a(s->p[i])) { seq_push(tmp, ' '); seq_push(tmp, s->p[i]); seq_push(tmp, ' '); }
        else seq_push(tmp, s->p[i]);
    }
    seq_swap(s, tmp);
}

/* re.sub('(A)(B)', r'\1 \2 ', s) (lead = 0) or r' \1 \2' (lead = 1): the
 * regex scans left to right, and after a match resumes behind it. */
static void pair_pass(Seq *s, Seq *tmp, CharClass a, CharClass b, int lead) {
    tmp->n = 0;
    size_t i = 0;
    while (i < s->n) {
        if (i + 1 < s->n && a(s->p[i]) && b(s->p[i + 1])) {
            if (lead) seq_push(tmp, ' ');
            seq_push(tmp, s->p[i]);
            seq_push(tmp, ' ');
            seq_push(tmp, s->p[i + 1]);
            if (!lead) seq_push(tmp, ' ');
            i += 2;
        } else {
            seq_push(tmp, s->p[i++]);
        }
    }
    seq_swap(s, tmp);
}

/* 13a's first class [\{-\~\[-\` -\&\(-\+\:-\@\/]: all ASCII punctuation but
 * ' , - . (and the space itself). */
static int c13a_punct(uint32_t c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}
static int c_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int c_nondigit(uint32_t c) { return !c_digit(c); }
static int c_dotcomma(uint32_t c) { return c == '.' || c == ','; }
static int c_dash(uint32_t c) { return c == '-'; }

static int u_cat(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c); }
static int u_number(uint32_t c) {
    int k = u_cat(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static int u_nonnumber(uint32_t c) { return !u_number(c); }
static int u_punct(uint32_t c) {
    int k = u_cat(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}
static int u_symbol(uint32_t c) {
    int k = u_cat(c);
    return k >= UTF8PROC_CATEGORY_SM && k <= UTF8PROC_CATEGORY_SO;
}

/* In place: *s becomes the tokenized line; tmp is scratch. */
static void tokenize(int tok, Seq *s, Seq *tmp) {
    switch (tok) {
    case TOK_13A:   /* mteval-v13a: unescape, pad, split off punctuation */
        replace_pass(s, tmp, "<skipped>", "");
        replace_pass(s, tmp, "-\n", "");
        replace_pass(s, tmp, "\n", " ");
        if (has_ascii(s, '&')) {
            replace_pass(s, tmp, "&quot;", "\"");
            replace_pass(s, tmp, "&amp;", "&");
            replace_pass(s, tmp, "&lt;", "<");
            replace_pass(s, tmp, "&gt;", ">");
        }
        tmp->n = 0;
        seq_push(tmp, ' ');
        for (size_t i = 0; i < s->n; i++) seq_push(tmp, s->p[i]);
        seq_push(tmp, ' ');
        seq_swap(s, tmp);
        pad_pass(s, tmp, c13a_punct);
        pair_pass(s, tmp, c_nondigit, c_dotcomma, 0);  /* period/comma unless after a digit */
        pair_pass(s, tmp, c_dotcomma, c_nondigit, 1);  /* ... unless before a digit */
        pair_pass(s, tmp, c_digit, c_dash, 0);         /* dash after a digit */
        break;
    case TOK_INTL:  /* mteval-v14 international: Unicode punctuation and symbols */
        pair_pass(s, tmp, u_nonnumber, u_punct, 0);
        pair_pass(s, tmp, u_punct, u_nonnumber, 1);
        pad_pass(s, tmp, u_symbol);
        break;
    case TOK_CHAR:  /* every character is a token */
        tmp->n = 0;
        for (size_t i = 0; i < s->n; i++) { seq_push(tmp, s->p[i]); seq_push(tmp, ' '); }
        seq_swap(s, tmp);
        break;
    default:        /* none: split on whitespace only */
        break;
    }
}

/* ---- interning: each distinct word gets a small integer id ------------- */
typedef struct { uint32_t off, len, id, hash; } ISlot;
typedef struct { Seq arena; ISlot *slots; size_t cap, count; } Interner;

static uint32_t hash_syms(const uint32_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    for (size_t i = 0; i < n; i++) { h = (h ^ p[i]) * 0xFF51AFD7ED558CCDULL; h ^= h >> 32; }
    return (uint32_t)(h ^ (h >> 29));
}

static uint32_t intern(Interner *in, const uint32_t *p, size_t n) {
    if (2 * (in->count + 1) > in->cap) {  /* grow and rehash */
        size_t cap = in->cap ? 2 * in->cap : 4096;
        ISlot *slots = xcalloc(cap, sizeof *slots);
        for (size_t i = 0; i < in->cap; i++) {
            if (!in->slots[i].id) continue;
            size_t j = in->slots[i].hash & (cap - 1);
            while (slots[j].id) j = (j + 1) & (cap - 1);
            slots[j] = in->slots[i];
        }
        free(in->slots);
        in->slots = slots;
        in->cap = cap;
    }
    uint32_t h = hash_syms(p, n);
    for (size_t j = h & (in->cap - 1);; j = (j + 1) & (in->cap - 1)) {
        ISlot *s = &in->slots[j];
        if (!s->id) {
            s->off = (uint32_t)in->arena.n;
            s->len = (uint32_t)n;
            s->hash = h;
            s->id = (uint32_t)++in->count;
            for (size_t k = 0; k < n; k++) seq_push(&in->arena, p[k]);
            return s->id;
        }
        if (s->hash == h && s->len == n && !memcmp(in->arena.p + s->off, p, n * sizeof *p)) return s->id;
    }
}

/* Python's line.split() with each word interned: ids gets the word ids. */
static void split_words(Interner *in, const Seq *s, Seq *ids) {
    ids->n = 0;
    for (size_t i = 0; i < s->n;) {
        if (py_isspace(s->p[i])) { i++; continue; }
        size_t j = i;
        while (j < s->n && !py_isspace(s->p[j])) j++;
        seq_push(ids, intern(in, s->p + i, j - i));
        i = j;
    }
}

/* ---- n-gram counts of one line ------------------------------------------
 * An open-addressing table keyed by (order slot o, n symbols); entries point
 * into the line's sequences. A new generation empties it in O(1). */
typedef struct {
    const uint32_t *syms;
    uint32_t gen, hash;
    int o, n;
    int ref;        /* max count in any one reference (BLEU) / count in the reference (chrF) */
    int cur, cur_ref;
    int hyp;        /* hypothesis occurrences seen so far */
} NSlot;
typedef struct { NSlot *slots; size_t cap; uint32_t gen; } NgramTable;

static void table_reset(NgramTable *t, size_t entries) {
    size_t cap = t->cap ? t->cap : 1024;
    while (cap < 2 * entries + 2) cap *= 2;
    if (cap != t->cap || t->gen == UINT32_MAX) {
        free(t->slots);
        t->slots = xcalloc(cap, sizeof *t->slots);
        t->cap = cap;
        t->gen = 0;
    }
    t->gen++;
}

static NSlot *table_find(NgramTable *t, int o, const uint32_t *syms, int n, int insert) {
    uint32_t h = hash_syms(syms, (size_t)n) ^ ((uint32_t)o * 0x9E3779B9u);
    for (size_t j = h & (t->cap - 1);; j = (j + 1) & (t->cap - 1)) {
        NSlot *s = &t->slots[j];
        if (s->gen != t->gen) {
            if (!insert) return NULL;
            *s = (NSlot){.syms = syms, .gen = t->gen, .hash = h, .o = o, .n = n, .cur_ref = -1};
            return s;
        }
        if (s->hash == h && s->o == o && s->n == n && !memcmp(s->syms, syms, (size_t)n * sizeof *syms)) return s;
    }
}

static long ngrams_in(size_t len, int n) { return (long)len >= n ? (long)len - n + 1 : 0; }

/* Count reference r's n-grams of order n (slot o) into the table, keeping
 * each n-gram's maximum count over the references seen. */
static void add_ref_ngrams(NgramTable *t, const Seq *s, int o, int n, int r) {
    for (long i = 0; i < ngrams_in(s->n, n); i++) {
        NSlot *e = table_find(t, o, s->p + i, n, 1);
        if (e->cur_ref != r) { e->cur_ref = r; e->cur = 0; }
        if (++e->cur > e->ref) e->ref = e->cur;
    }
}

/* Clipped matches of the hypothesis's n-grams of order n (slot o):
 * sum over n-grams of min(hyp count, ref count), counted one at a time. */
static long match_ngrams(NgramTable *t, const Seq *s, int o, int n) {
    long matches = 0;
    for (long i = 0; i < ngrams_in(s->n, n); i++) {
        NSlot *e = table_find(t, o, s->p + i, n, 0);
        if (e && ++e->hyp <= e->ref) matches++;
    }
    return matches;
}

/* ---- the scorer: scratch shared by BLEU and chrF ------------------------ */
typedef struct {
    Interner words;
    NgramTable table;
    Seq tmp;
    Seq *text;   /* [1 + nrefs] cleaned lines: hypothesis, then references */
    Seq *ids;    /* [1 + nrefs] word ids */
    int *present; /* [nrefs] 1 if reference r is non-empty on this line */
    int nrefs;
    int var_refs, line_refs; /* counts of non-empty references per line */
} Scorer;

static void scorer_init(Scorer *sc, int nrefs) {
    memset(sc, 0, sizeof *sc);
    sc->nrefs = nrefs;
    sc->text = xcalloc((size_t)nrefs + 1, sizeof *sc->text);
    sc->ids = xcalloc((size_t)nrefs + 1, sizeof *sc->ids);
    sc->present = xcalloc((size_t)nrefs, sizeof *sc->present);
    sc->line_refs = -1;
}

static void scorer_free(Scorer *sc) {
    for (int r = 0; r <= sc->nrefs; r++) { seq_free(&sc->text[r]); seq_free(&sc->ids[r]); }
    free(sc->text); free(sc->ids); free(sc->present);
    seq_free(&sc->tmp);
    seq_free(&sc->words.arena);
    free(sc->words.slots);
    free(sc->table.slots);
}

/* Clean line i of the hypothesis and every reference into sc->text[]; mark
 * the references that are present (sacreBLEU drops empty ones, and refuses
 * a line where all are empty). */
static int scorer_load(Scorer *sc, const char *const *hyps, const char *const *const *refs,
                       long i, int lowercase) {
    long bad = clean_line(hyps[i], lowercase, &sc->text[0], &sc->tmp);
    if (bad >= 0) return errorf("hypothesis line %ld: invalid UTF-8 at byte %ld", i + 1, bad + 1);
    int present = 0;
    for (int r = 0; r < sc->nrefs; r++) {
        bad = clean_line(refs[r][i], lowercase, &sc->text[r + 1], &sc->tmp);
        if (bad >= 0) return errorf("reference %d line %ld: invalid UTF-8 at byte %ld", r + 1, i + 1, bad + 1);
        sc->present[r] = sc->text[r + 1].n > 0;
        present += sc->present[r];
    }
    if (!present)
        return errorf("line %ld: the reference%s empty; sacreBLEU 2.6.0 refuses to score it "
                      "(drop the line from hypothesis and references)", i + 1, sc->nrefs > 1 ? "s are all" : " is");
    if (sc->line_refs >= 0 && present != sc->line_refs) sc->var_refs = 1;
    sc->line_refs = present;
    return 0;
}

static int scorer_nrefs(const Scorer *sc) {
    if (sc->var_refs) return -1;
    return sc->line_refs >= 0 ? sc->line_refs : sc->nrefs;
}

/* ---- BLEU --------------------------------------------------------------- */
void bleu_options_default(BleuOptions *o) {
    *o = (BleuOptions){.tokenize = "13a", .smooth = "exp", .smooth_value = -1};
}

enum { SMOOTH_EXP, SMOOTH_FLOOR, SMOOTH_ADD_K, SMOOTH_NONE };

static int smooth_id(const char *name) {   /* sacreBLEU's SMOOTH_DEFAULTS */
    static const char *const names[] = {"exp", "floor", "add-k", "none"};
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, names[i])) return i;
    return -1;
}
static double smooth_value(const BleuOptions *o) {
    if (o->smooth_value >= 0) return o->smooth_value;
    return smooth_id(o->smooth) == SMOOTH_FLOOR ? 0.1 : 1.0;
}

/* sacreBLEU's BLEU.compute_bleu, from corpus sums. */
static void compute_bleu(const long correct[4], const long total[4], long sys_len, long ref_len,
                         const BleuOptions *o, BleuResult *r) {
    int smooth = smooth_id(o->smooth);
    double k = smooth_value(o);
    memset(r->precisions, 0, sizeof r->precisions);
    memcpy(r->correct, correct, sizeof r->correct);
    memcpy(r->total, total, sizeof r->total);
    r->hyp_len = sys_len;
    r->ref_len = ref_len;
    r->ratio = ref_len ? (double)sys_len / (double)ref_len : 0.0;
    r->bp = 1.0;
    if (sys_len < ref_len) r->bp = sys_len > 0 ? exp(1.0 - (double)ref_len / (double)sys_len) : 0.0;
    r->score = 0.0;
    int any = 0;
    for (int n = 0; n < BLEU_MAX_ORDER; n++) any |= correct[n] != 0;
    if (!any) return;   /* no matches at all: BLEU 0 (sacreBLEU #141) */

    double smooth_mteval = 1.0;
    int eff_order = BLEU_MAX_ORDER;
    for (int n = 1; n <= BLEU_MAX_ORDER; n++) {
        double c = (double)correct[n - 1], t = (double)total[n - 1];
        if (smooth == SMOOTH_ADD_K && n > 1) { c += k; t += k; }
        if (t == 0) break;
        if (o->effective_order) eff_order = n;
        if (c == 0) {
            if (smooth == SMOOTH_EXP) {           /* 1/2^k for the k-th order without matches (NIST) */
                smooth_mteval *= 2;
                r->precisions[n - 1] = 100.0 / (smooth_mteval * t);
            } else if (smooth == SMOOTH_FLOOR) {
                r->precisions[n - 1] = 100.0 * k / t;
            }
        } else {
            r->precisions[n - 1] = 100.0 * c / t;
        }
    }
    double sum = 0.0;
    for (int n = 0; n < eff_order; n++)
        sum += r->precisions[n] == 0.0 ? -9999999999.0 : log(r->precisions[n]);  /* my_log */
    r->score = r->bp * exp(sum / eff_order);
}

int bleu_corpus(const char *const *hyps, const char *const *const *refs, int nrefs, long nlines,
                const BleuOptions *o, BleuResult *out) {
    int tok = tokenizer_id(o->tokenize);
    if (tok < 0) return errorf("unknown BLEU tokenizer '%s' (expected 13a, intl, none or char)", o->tokenize ? o->tokenize : "(null)");
    if (smooth_id(o->smooth) < 0) return errorf("unknown BLEU smoothing '%s' (expected exp, floor, add-k or none)", o->smooth ? o->smooth : "(null)");
    if (nrefs < 1) return errorf("BLEU needs at least one reference");
    Scorer sc;
    scorer_init(&sc, nrefs);
    long correct[BLEU_MAX_ORDER] = {0}, total[BLEU_MAX_ORDER] = {0}, sys_len = 0, ref_len = 0;
    for (long i = 0; i < nlines; i++) {
        if (scorer_load(&sc, hyps, refs, i, o->lowercase) < 0) { scorer_free(&sc); return -1; }
        size_t entries = 0;
        for (int r = 0; r <= nrefs; r++) {
            if (r > 0 && !sc.present[r - 1]) continue;
            tokenize(tok, &sc.text[r], &sc.tmp);
            split_words(&sc.words, &sc.text[r], &sc.ids[r]);
            if (r > 0) entries += BLEU_MAX_ORDER * sc.ids[r].n;
        }
        /* reference n-grams with their max count over references */
        table_reset(&sc.table, entries);
        const Seq *hyp = &sc.ids[0];
        long closest = -1;
        for (int r = 1; r <= nrefs; r++) {
            if (!sc.present[r - 1]) continue;
            for (int n = 1; n <= BLEU_MAX_ORDER; n++) add_ref_ngrams(&sc.table, &sc.ids[r], n - 1, n, r);
            long len = (long)sc.ids[r].n, d = labs((long)hyp->n - len), dc = labs((long)hyp->n - closest);
            if (closest < 0 || d < dc || (d == dc && len < closest)) closest = len;
        }
        for (int n = 1; n <= BLEU_MAX_ORDER; n++) {
            total[n - 1] += ngrams_in(hyp->n, n);
            correct[n - 1] += match_ngrams(&sc.table, hyp, n - 1, n);
        }
        sys_len += (long)hyp->n;
        ref_len += closest;
    }
    compute_bleu(correct, total, sys_len, ref_len, o, out);
    out->nrefs = scorer_nrefs(&sc);
    scorer_free(&sc);
    return 0;
}

void bleu_verbose(const BleuResult *r, char *buf, size_t n) {
    snprintf(buf, n, "%.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %ld ref_len = %ld)",
             r->precisions[0], r->precisions[1], r->precisions[2], r->precisions[3],
             r->bp, r->ratio, r->hyp_len, r->ref_len);
}

void bleu_format(const BleuResult *r, int width, char *buf, size_t n) {
    char v[256];
    bleu_verbose(r, v, sizeof v);
    snprintf(buf, n, "BLEU = %.*f %s", width, r->score, v);
}

static void nrefs_str(int nrefs, char *buf, size_t n) {
    if (nrefs < 0) snprintf(buf, n, "var");
    else snprintf(buf, n, "%d", nrefs);
}

void bleu_signature(const BleuOptions *o, int nrefs, char *buf, size_t n) {
    char nr[16], smooth[64];
    nrefs_str(nrefs, nr, sizeof nr);
    int s = smooth_id(o->smooth);
    if (s == SMOOTH_FLOOR || s == SMOOTH_ADD_K) snprintf(smooth, sizeof smooth, "%s[%.2f]", o->smooth, smooth_value(o));
    else snprintf(smooth, sizeof smooth, "%s", o->smooth ? o->smooth : "?");
    snprintf(buf, n, "nrefs:%s|case:%s|eff:%s|tok:%s|smooth:%s|version:" SACREBLEU_VERSION,
             nr, o->lowercase ? "lc" : "mixed", o->effective_order ? "yes" : "no",
             o->tokenize ? o->tokenize : "?", smooth);
}

/* ---- chrF / chrF++ ------------------------------------------------------ */
void chrf_options_default(ChrfOptions *o) {
    *o = (ChrfOptions){.char_order = 6, .word_order = 0, .beta = 2};
}

/* sacreBLEU's CHRF._compute_f_score over `order` (hyp, ref, match) triples. */
static double chrf_f(const long *st, int order, int beta, int eps_smoothing) {
    const double eps = 1e-16;
    double factor = (double)(beta * beta), score = 0.0, avg_p = 0.0, avg_r = 0.0;
    int eff = 0;
    for (int i = 0; i < order; i++) {
        long nh = st[3 * i], nr = st[3 * i + 1], nm = st[3 * i + 2];
        double p = nh > 0 ? (double)nm / (double)nh : eps;
        double r = nr > 0 ? (double)nm / (double)nr : eps;
        double denom = factor * p + r;
        score += denom > 0 ? (1 + factor) * p * r / denom : eps;
        if (nh > 0 && nr > 0) { avg_p += p; avg_r += r; eff++; }
    }
    if (eps_smoothing) return 100 * score / order;
    if (eff == 0) avg_p = avg_r = 0.0;
    else { avg_p /= eff; avg_r /= eff; }
    if (avg_p + avg_r == 0) return 0.0;
    score = (1 + factor) * avg_p * avg_r;
    score /= factor * avg_p + avg_r;
    return 100 * score;
}

static int is_ascii_punct(uint32_t c) {   /* Python's string.punctuation */
    return c < 0x80 && c > ' ' && c != 0x7F && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
}

/* chrF++'s words: split(), then a punctuation mark at the end (else at the
 * start) of a word of 2+ characters becomes its own word. */
static void chrf_words(Interner *in, const Seq *s, Seq *ids) {
    ids->n = 0;
    for (size_t i = 0; i < s->n;) {
        if (py_isspace(s->p[i])) { i++; continue; }
        size_t j = i;
        while (j < s->n && !py_isspace(s->p[j])) j++;
        const uint32_t *w = s->p + i;
        size_t len = j - i;
        if (len > 1 && is_ascii_punct(w[len - 1])) {
            seq_push(ids, intern(in, w, len - 1));
            seq_push(ids, intern(in, w + len - 1, 1));
        } else if (len > 1 && is_ascii_punct(w[0])) {
            seq_push(ids, intern(in, w, 1));
            seq_push(ids, intern(in, w + 1, len - 1));
        } else {
            seq_push(ids, intern(in, w, len));
        }
        i = j;
    }
}

/* (hyp, ref, match) for each order of one hypothesis against reference r:
 * character orders 1..nc in slots 0..nc-1, word orders after them. */
static void chrf_stats(Scorer *sc, int r, const ChrfOptions *o, long *st) {
    const Seq *hc = &sc->text[0], *rc = &sc->text[r], *hw = &sc->ids[0], *rw = &sc->ids[r];
    table_reset(&sc->table, (size_t)o->char_order * rc->n + (size_t)o->word_order * rw->n);
    for (int k = 0; k < o->char_order + o->word_order; k++) {
        int word = k >= o->char_order, n = word ? k - o->char_order + 1 : k + 1;
        const Seq *h = word ? hw : hc, *ref = word ? rw : rc;
        add_ref_ngrams(&sc->table, ref, k, n, r);
        long nref = ngrams_in(ref->n, n);
        st[3 * k] = nref > 0 ? ngrams_in(h->n, n) : 0;  /* "hyp_count if ref_ngrams else 0" */
        st[3 * k + 1] = nref;
        st[3 * k + 2] = match_ngrams(&sc->table, h, k, n);
    }
}

static void drop_whitespace(Seq *s) {   /* ''.join(line.split()) */
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!py_isspace(s->p[i])) s->p[m++] = s->p[i];
    s->n = m;
}

int chrf_corpus(const char *const *hyps, const char *const *const *refs, int nrefs, long nlines,
                const ChrfOptions *o, ChrfResult *out) {
    if (o->char_order < 1 || o->word_order < 0 || o->char_order + o->word_order > 64)
        return errorf("chrF orders must be char >= 1, word >= 0 (got %d, %d)", o->char_order, o->word_order);
    if (nrefs < 1) return errorf("chrF needs at least one reference");
    int order = o->char_order + o->word_order;
    long *sum = xcalloc(3 * (size_t)order, sizeof *sum);
    long *st = xcalloc(3 * (size_t)order, sizeof *st), *best = xcalloc(3 * (size_t)order, sizeof *best);
    Scorer sc;
    scorer_init(&sc, nrefs);
    int rc = 0;
    for (long i = 0; i < nlines; i++) {
        if (scorer_load(&sc, hyps, refs, i, o->lowercase) < 0) { rc = -1; break; }
        for (int r = 0; r <= nrefs; r++) {
            if (r > 0 && !sc.present[r - 1]) continue;
            if (o->word_order > 0) chrf_words(&sc.words, &sc.text[r], &sc.ids[r]);
            else sc.ids[r].n = 0;
            if (!o->whitespace) drop_whitespace(&sc.text[r]);
        }
        /* the reference with the best sentence-level chrF (first on ties) */
        double best_f = -1.0;
        for (int r = 1; r <= nrefs; r++) {
            if (!sc.present[r - 1]) continue;
            chrf_stats(&sc, r, o, st);
            double f = chrf_f(st, order, o->beta, o->eps_smoothing);
            if (f > best_f) { best_f = f; memcpy(best, st, 3 * (size_t)order * sizeof *st); }
        }
        for (int k = 0; k < 3 * order; k++) sum[k] += best[k];
    }
    if (rc == 0) {
        out->score = chrf_f(sum, order, o->beta, o->eps_smoothing);
        out->nrefs = scorer_nrefs(&sc);
    }
    scorer_free(&sc);
    free(sum); free(st); free(best);
    return rc;
}

void chrf_format(const ChrfResult *r, const ChrfOptions *o, int width, char *buf, size_t n) {
    char plus[8] = "";
    for (int i = 0; i < o->word_order && i < 7; i++) plus[i] = '+';
    snprintf(buf, n, "chrF%d%s = %.*f", o->beta, plus, width, r->score);
}

void chrf_signature(const ChrfOptions *o, int nrefs, char *buf, size_t n) {
    char nr[16];
    nrefs_str(nrefs, nr, sizeof nr);
    snprintf(buf, n, "nrefs:%s|case:%s|eff:%s|nc:%d|nw:%d|space:%s|version:" SACREBLEU_VERSION,
             nr, o->lowercase ? "lc" : "mixed", o->eps_smoothing ? "no" : "yes",
             o->char_order, o->word_order, o->whitespace ? "yes" : "no");
}

/* ---- the pieces, one line at a time (for tests and callers) ------------- */
int bleu_tokenizer_known(const char *name) { return tokenizer_id(name) >= 0; }
int bleu_smoothing_known(const char *name) { return smooth_id(name) >= 0; }

char *bleu_tokenize(const char *name, const char *line) {
    int tok = tokenizer_id(name);
    if (tok < 0) { errorf("unknown BLEU tokenizer '%s' (expected 13a, intl, none or char)", name ? name : "(null)"); return NULL; }
    Seq s = {0}, tmp = {0}, out = {0};
    long bad = decode_cps(line, strlen(line), &s);
    if (bad >= 0) { errorf("invalid UTF-8 at byte %ld", bad + 1); seq_free(&s); return NULL; }
    tokenize(tok, &s, &tmp);
    for (size_t i = 0; i < s.n;) {   /* ' '.join(line.split()) */
        if (py_isspace(s.p[i])) { i++; continue; }
        if (out.n) seq_push(&out, ' ');
        while (i < s.n && !py_isspace(s.p[i])) seq_push(&out, s.p[i++]);
    }
    char *res = encode_cps(out.p, out.n);
    seq_free(&s); seq_free(&tmp); seq_free(&out);
    return res;
}

char *bleu_clean_line(const char *line, int lowercase) {
    Seq s = {0}, tmp = {0};
    long bad = clean_line(line, lowercase, &s, &tmp);
    char *res = NULL;
    if (bad >= 0) errorf("invalid UTF-8 at byte %ld", bad + 1);
    else res = encode_cps(s.p, s.n);
    seq_free(&s); seq_free(&tmp);
    return res;
}

/* ---- reading a text file as sacreBLEU does ------------------------------ */
/* Through text.h: strict UTF-8 (sacreBLEU's decoding), or U+FFFD with
 * `replace`; "-" is stdin. */
long bleu_read_lines(const char *path, int replace, char ***lines_out) {
    TextOptions o = TEXT_DEFAULT;
    o.invalid = replace ? TEXT_REPLACE : TEXT_STRICT;
    return bleu_read_lines_with(path, &o, lines_out);
}

long bleu_read_lines_with(const char *path, const TextOptions *o, char ***lines_out) {
    TextOptions q = *o;
    if (log_quiet) q.quiet = 1;   /* `tfm bleu -q`: no warnings on stderr */
    TextReader *r = text_open(path, &q);
    if (!r) return -1;
    long cap = 1024, n = 0, k;
    char **lines = xmalloc((size_t)cap * sizeof *lines), *line;
    while ((k = text_line(r, &line)) >= 0) {
        if (n == cap) { cap *= 2; lines = xrealloc(lines, (size_t)cap * sizeof *lines); }
        lines[n] = xmalloc((size_t)k + 1);
        memcpy(lines[n++], line, (size_t)k + 1);
    }
    text_close(r);
    if (k == -2) { bleu_free_lines(lines, n); return -1; }
    *lines_out = lines;
    return n;
}

void bleu_free_lines(char **lines, long n) {
    if (!lines) return;
    for (long i = 0; i < n; i++) free(lines[i]);
    free(lines);
}
