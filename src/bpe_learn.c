/* bpe_learn.c — learning a joint BPE model (bpe_learn, bpe.h) from text
 * files; the model and what its pieces mean are bpe.c's.
 *
 * Learning (bpe_learn) counts words in parallel (one hash map per thread,
 * merged), then runs the classic incremental algorithm: pair counts in a hash
 * map, an index from each pair to the words holding it, and a lazy max-heap
 * ordered by (count desc, left id asc, right id asc) — the fixed tie rule
 * that makes the model the same whatever the thread count. Each merge only
 * touches the words that hold the pair and updates the counts of the pairs
 * around each occurrence.
 *
 * The alphabet: the most frequent characters up to CHAR_COVERAGE of all
 * occurrences (never a control character or a literal ▁); the rest of the
 * characters are byte tokens.
 */
#include "bpe.h"
#include "bpe_internal.h"
#include "dispatch.h"
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double CHAR_COVERAGE = 0.9999;

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
    bpe_add_char(b, MARKER);
    int64_t covered = 0;
    for (int i = 0; i < ncand && b->vocab_size + opt->nsymbols < opt->vocab_size; i++) {
        if ((double)covered >= CHAR_COVERAGE * (double)total) break;
        bpe_add_char(b, cand[i].cp);
        covered += cand[i].count;
    }
    free(cand);
    if (bpe_add_symbols(b, opt->symbols, opt->nsymbols)) {   /* cannot collide: no counted word holds a symbol */
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
        int z = bpe_add_merge(b, top.a, top.b);
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
    bpe_lookups_free(b);   /* rebuild them now that the merges are known */
    bpe_finish(b);
    if (!opt->quiet)
        log_info("bpe: learned %d merges, vocabulary %d, in %.1fs", b->nmerges, b->vocab_size, now_seconds() - t0);
    return b;
}
