/* shortlist.c — the vocabulary shortlist: learning the lexical table from a
 * parallel corpus, its file, and the candidates of a batch. See shortlist.h
 * for what it computes and the file format.
 *
 * Learning, for a corpus of P sentence pairs:
 *   1. encode every line (threads share the lines), keep each line's ids
 *      sorted and unique (the target side also counts every occurrence);
 *   2. an index from each source token s to the pairs whose source holds it
 *      (c(s) entries);
 *   3. per source token (threads share them): count c(s, t) over the
 *      targets of its pairs in a [V] array (only the touched entries are
 *      read back and cleared), sort the touched targets by
 *      (c(s, t) desc, target frequency asc, id asc), keep the first K that
 *      are not always in the list. Cost: sum over pairs of |src| * |tgt|
 *      unique ids (Multi30k train, 29,000 pairs: ~6 million increments).
 * The result depends only on the corpus, the tokenizer, K and N (not on the
 * thread count: each token's list is computed alone, in a fixed order). */
#include "shortlist.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "text.h"
#include "util.h"

struct Shortlist {
    int vocab, k, n;
    uint32_t tokenizer_crc;   /* CRC-32C of bpe_to_string */
    int nfreq, *freq;         /* the N most frequent target tokens, most frequent first */
    int *off, *lex;           /* source token s: lex[off[s] .. off[s + 1]), best first */
};

static uint32_t tokenizer_crc(const Bpe *bpe) {
    char *s = bpe_to_string(bpe);
    uint32_t c = crc32c(0, s, strlen(s));
    free(s);
    return c;
}

void shortlist_free(Shortlist *sl) {
    if (!sl) return;
    free(sl->freq); free(sl->off); free(sl->lex);
    free(sl);
}

int shortlist_vocab(const Shortlist *sl) { return sl->vocab; }
int shortlist_k(const Shortlist *sl) { return sl->k; }
int shortlist_n(const Shortlist *sl) { return sl->n; }

/* ---- learning ------------------------------------------------------------ */
static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The lines of one side, encoded: line i's ids sorted and unique in
 * ids[off[i] .. off[i + 1]); occ[t] += occurrences of t (occ may be NULL). */
typedef struct { int *off, *ids; } Side;

static int encode_side(const Bpe *bpe, const TextLines *t, const char *path, Side *out, long *occ, int V) {
    long n = t->n;
    int **line_ids = xcalloc((size_t)(n ? n : 1), sizeof *line_ids), *line_n = xcalloc((size_t)(n ? n : 1), sizeof(int));
    int bad = 0;
    #pragma omp parallel
    {
        int *ids = NULL, cap = 0;
        #pragma omp for schedule(dynamic, 256)
        for (long i = 0; i < n; i++) {
            const char *s = t->text + t->start[i];
            int k = bpe_encode(bpe, s, strlen(s), &ids, &cap, NULL);
            if (k < 0) {
                #pragma omp atomic write
                bad = 1;
                continue;
            }
            line_ids[i] = xmalloc((size_t)(k ? k : 1) * sizeof(int));
            memcpy(line_ids[i], ids, (size_t)k * sizeof(int));
            line_n[i] = k;
        }
        free(ids);
    }
    int rc = 0;
    if (bad) rc = error_wrap("%s: encoding the corpus", path);
    size_t total = 0;
    for (long i = 0; i < n && !rc; i++) {
        for (int j = 0; j < line_n[i]; j++) {
            int tok = line_ids[i][j];
            if (tok < 0 || tok >= V) { rc = errorf("%s:%ld: token id %d outside the vocabulary of %d", path, i + 1, tok, V); break; }
            if (occ) occ[tok]++;
        }
        qsort(line_ids[i], (size_t)line_n[i], sizeof(int), int_cmp);
        int u = 0;
        for (int j = 0; j < line_n[i]; j++)
            if (!u || line_ids[i][j] != line_ids[i][u - 1]) line_ids[i][u++] = line_ids[i][j];
        line_n[i] = u;
        total += (size_t)u;
    }
    if (!rc) {
        out->off = xmalloc((size_t)(n + 1) * sizeof(int));
        out->ids = xmalloc((total ? total : 1) * sizeof(int));
        if (total > 2147483647u) rc = errorf("%s: more than 2^31 distinct (line, token) entries: corpus too large", path);
        size_t at = 0;
        for (long i = 0; i < n && !rc; i++) {
            out->off[i] = (int)at;
            memcpy(out->ids + at, line_ids[i], (size_t)line_n[i] * sizeof(int));
            at += (size_t)line_n[i];
        }
        out->off[n] = (int)at;
    }
    for (long i = 0; i < n; i++) free(line_ids[i]);
    free(line_ids); free(line_n);
    return rc;
}

typedef struct { int t, c; long f; } Cand;   /* target, c(s, t), its corpus frequency */
static int cand_cmp(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->c != y->c) return x->c > y->c ? -1 : 1;
    if (x->f != y->f) return x->f < y->f ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

static const long *g_occ;   /* qsort has no context argument: only while sorting by frequency, on one thread */
static int freq_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_occ[x] != g_occ[y]) return g_occ[x] > g_occ[y] ? -1 : 1;
    return (x > y) - (x < y);
}

Shortlist *shortlist_build(const Bpe *bpe, const char *src_path, const char *tgt_path, int k, int n) {
    int V = bpe_vocab_size(bpe);
    if (k < 0 || k > SHORTLIST_MAX_K || n < 0) {
        errorf("shortlist: k must be in [0, %d] and n >= 0 (got k %d, n %d)", SHORTLIST_MAX_K, k, n);
        return NULL;
    }
    TextLines ts = {0}, tt = {0};
    if (text_lines_read(&ts, src_path) || text_lines_read(&tt, tgt_path)) {
        text_lines_free(&ts);
        return NULL;
    }
    if (ts.n != tt.n) {
        errorf("shortlist: %s has %ld lines, %s %ld: a parallel corpus has one target line per source line",
               src_path, ts.n, tgt_path, tt.n);
        text_lines_free(&ts); text_lines_free(&tt);
        return NULL;
    }
    long P = ts.n, *occ = xcalloc((size_t)V, sizeof(long));
    Side S = {0}, T = {0};
    Shortlist *sl = NULL;
    if (encode_side(bpe, &ts, src_path, &S, NULL, V) || encode_side(bpe, &tt, tgt_path, &T, occ, V)) goto done;
    sl = xcalloc(1, sizeof *sl);
    sl->vocab = V; sl->k = k; sl->n = n;
    sl->tokenizer_crc = tokenizer_crc(bpe);
    /* the N most frequent targets (zero counts too, by id: n >= V - 4 lists every token) */
    unsigned char *always = xcalloc((size_t)V, 1);
    for (int t = 0; t < 4 && t < V; t++) always[t] = 1;
    {
        int m = V > 4 ? V - 4 : 0, *all = xmalloc((size_t)(m ? m : 1) * sizeof(int));
        for (int i = 0; i < m; i++) all[i] = 4 + i;
        g_occ = occ;
        qsort(all, (size_t)m, sizeof(int), freq_cmp);
        sl->nfreq = n < m ? n : m;
        sl->freq = xmalloc((size_t)(sl->nfreq ? sl->nfreq : 1) * sizeof(int));
        for (int i = 0; i < sl->nfreq; i++) always[sl->freq[i] = all[i]] = 1;
        free(all);
    }
    /* source token -> the pairs that hold it */
    int *ioff = xcalloc((size_t)V + 1, sizeof(int)), *inv = xmalloc((size_t)(S.off[P] ? S.off[P] : 1) * sizeof(int));
    for (int j = 0; j < S.off[P]; j++) ioff[S.ids[j] + 1]++;
    for (int s = 0; s < V; s++) ioff[s + 1] += ioff[s];
    {
        int *fill = xmalloc((size_t)V * sizeof(int));
        memcpy(fill, ioff, (size_t)V * sizeof(int));
        for (long i = 0; i < P; i++)
            for (int j = S.off[i]; j < S.off[i + 1]; j++) inv[fill[S.ids[j]]++] = (int)i;
        free(fill);
    }
    /* per source token, its K best targets */
    int **best = xcalloc((size_t)V, sizeof *best), *nbest = xcalloc((size_t)V, sizeof(int));
    #pragma omp parallel
    {
        int *cnt = xcalloc((size_t)V, sizeof(int)), *touched = xmalloc((size_t)V * sizeof(int));
        Cand *cand = xmalloc((size_t)V * sizeof *cand);
        #pragma omp for schedule(dynamic, 16)
        for (int s = 0; s < V; s++) {
            if (ioff[s] == ioff[s + 1] || k == 0) continue;
            int nt = 0, nc = 0;
            for (int a = ioff[s]; a < ioff[s + 1]; a++) {
                long i = inv[a];
                for (int j = T.off[i]; j < T.off[i + 1]; j++) {
                    int t = T.ids[j];
                    if (!cnt[t]++) touched[nt++] = t;
                }
            }
            for (int j = 0; j < nt; j++) {
                int t = touched[j];
                if (!always[t]) cand[nc++] = (Cand){t, cnt[t], occ[t]};
                cnt[t] = 0;
            }
            qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
            nbest[s] = nc < k ? nc : k;
            best[s] = xmalloc((size_t)(nbest[s] ? nbest[s] : 1) * sizeof(int));
            for (int j = 0; j < nbest[s]; j++) best[s][j] = cand[j].t;
        }
        free(cnt); free(touched); free(cand);
    }
    sl->off = xmalloc(((size_t)V + 1) * sizeof(int));
    size_t total = 0;
    for (int s = 0; s < V; s++) total += (size_t)nbest[s];
    sl->lex = xmalloc((total ? total : 1) * sizeof(int));
    total = 0;
    for (int s = 0; s < V; s++) {
        sl->off[s] = (int)total;
        if (nbest[s]) memcpy(sl->lex + total, best[s], (size_t)nbest[s] * sizeof(int));
        total += (size_t)nbest[s];
        free(best[s]);
    }
    sl->off[V] = (int)total;
    free(best); free(nbest); free(ioff); free(inv); free(always);
done:
    free(occ);
    free(S.off); free(S.ids); free(T.off); free(T.ids);
    text_lines_free(&ts); text_lines_free(&tt);
    return sl;
}

/* ---- the file -------------------------------------------------------------- */
typedef struct { char *p; size_t n, cap; } Buf;
static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        b->cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        b->p = xrealloc(b->p, b->cap);
    }
}

char *shortlist_to_string(const Shortlist *sl) {
    Buf b = {.p = xmalloc(4096), .cap = 4096};
    b.p[0] = 0;
    put(&b, "tfm-shortlist 1\nvocab %d tokenizer %08" PRIx32 "\nk %d n %d\nfrequent %d\n", sl->vocab, sl->tokenizer_crc,
        sl->k, sl->n, sl->nfreq);
    for (int i = 0; i < sl->nfreq; i++) put(&b, i ? " %d" : "%d", sl->freq[i]);
    int rows = 0;
    for (int s = 0; s < sl->vocab; s++) rows += sl->off[s + 1] > sl->off[s];
    put(&b, "\nlexical %d\n", rows);
    for (int s = 0; s < sl->vocab; s++) {
        if (sl->off[s + 1] == sl->off[s]) continue;
        put(&b, "%d", s);
        for (int j = sl->off[s]; j < sl->off[s + 1]; j++) put(&b, " %d", sl->lex[j]);
        put(&b, "\n");
    }
    put(&b, "crc32c %08" PRIx32 "\n", crc32c(0, b.p, b.n));
    return b.p;
}

int shortlist_save(const Shortlist *sl, const char *path) {
    char *s = shortlist_to_string(sl);
    int rc = write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}

/* The next line of the text (NUL-terminated in place), or NULL at its end. */
static char *next_line(char **p, char *end, int *ln) {
    if (*p >= end) return NULL;
    char *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
    if (!nl) nl = end;
    *nl = 0;
    *p = nl + 1;
    ++*ln;
    return s;
}

/* Up to max ids in [0, V) separated by single spaces: their count, or -1. */
static int parse_ids(const char *s, int *out, int max, int V) {
    int n = 0;
    while (*s) {
        if (n == max || *s < '0' || *s > '9') return -1;
        errno = 0;
        char *e;
        long v = strtol(s, &e, 10);
        if (errno || v >= V) return -1;
        out[n++] = (int)v;
        if (*e == ' ' && e[1]) s = e + 1;
        else if (!*e) s = e;
        else return -1;
    }
    return n;
}

Shortlist *shortlist_from_string(const char *text, size_t len, const char *name, const Bpe *bpe) {
    /* the checksum first: a truncated or damaged file says so before anything it holds is read */
    if (len == 0 || text[len - 1] != '\n') {
        errorf("%s: does not end with a complete 'crc32c' line: truncated (or not a tfm shortlist)", name);
        return NULL;
    }
    size_t last = len - 1;
    while (last > 0 && text[last - 1] != '\n') last--;
    unsigned long want;
    char tail[32] = "";
    if (len - last > 20 || (memcpy(tail, text + last, len - last - 1), sscanf(tail, "crc32c %8lx", &want) != 1) ||
        strlen(tail) != 15) {
        errorf("%s: does not end with its 'crc32c' line: truncated (or not a tfm shortlist)", name);
        return NULL;
    }
    uint32_t got = crc32c(0, text, last);
    if (got != (uint32_t)want) {
        errorf("%s: checksum mismatch (the file says crc32c %08lx, its contents give %08" PRIx32 "): the file is damaged",
               name, want, got);
        return NULL;
    }
    char *copy = xmalloc(last + 1), *p = copy, *end = copy + last, *s;
    memcpy(copy, text, last);
    copy[last] = 0;
    if (memchr(copy, 0, last)) { free(copy); errorf("%s: holds a NUL byte (not a tfm shortlist)", name); return NULL; }
    int ln = 0, V = bpe_vocab_size(bpe), fv, fk, fn, nf, nrows;
    unsigned long fcrc;
    uint32_t mine = tokenizer_crc(bpe);
    char extra;
    Shortlist *sl = xcalloc(1, sizeof *sl);
    if (!(s = next_line(&p, end, &ln)) || strncmp(s, "tfm-shortlist ", 14)) {
        errorf("%s:%d: expected 'tfm-shortlist 1' (not a tfm shortlist)", name, ln); goto fail;
    }
    if (strcmp(s + 14, "1")) { errorf("%s:%d: shortlist format version '%s' is not supported (this tfm reads 1)", name, ln, s + 14); goto fail; }
    if (!(s = next_line(&p, end, &ln)) || sscanf(s, "vocab %d tokenizer %8lx%c", &fv, &fcrc, &extra) != 2) {
        errorf("%s:%d: expected 'vocab V tokenizer CRC'", name, ln); goto fail;
    }
    if (fv != V || (uint32_t)fcrc != mine) {
        errorf("%s:%d: built for another vocabulary (vocab %d, tokenizer crc32c %08lx); the model's has vocab %d, tokenizer "
               "%08" PRIx32 ": build it with this model's tokenizer (tfm shortlist -m MODEL)", name, ln, fv, fcrc, V, mine);
        goto fail;
    }
    sl->vocab = V;
    sl->tokenizer_crc = mine;
    if (!(s = next_line(&p, end, &ln)) || sscanf(s, "k %d n %d%c", &fk, &fn, &extra) != 2 || fk < 0 || fk > SHORTLIST_MAX_K || fn < 0) {
        errorf("%s:%d: expected 'k K n N' (0 <= K <= %d, N >= 0)", name, ln, SHORTLIST_MAX_K); goto fail;
    }
    sl->k = fk; sl->n = fn;
    if (!(s = next_line(&p, end, &ln)) || sscanf(s, "frequent %d%c", &nf, &extra) != 1 || nf < 0 || nf > fn || nf > V) {
        errorf("%s:%d: expected 'frequent M' (0 <= M <= n and the vocabulary)", name, ln); goto fail;
    }
    sl->nfreq = nf;
    sl->freq = xmalloc((size_t)(nf ? nf : 1) * sizeof(int));
    if (!(s = next_line(&p, end, &ln)) || parse_ids(s, sl->freq, nf, V) != nf) {
        errorf("%s:%d: expected %d token ids in [0, %d), one space apart", name, ln, nf, V); goto fail;
    }
    if (!(s = next_line(&p, end, &ln)) || sscanf(s, "lexical %d%c", &nrows, &extra) != 1 || nrows < 0 || nrows > V) {
        errorf("%s:%d: expected 'lexical R' (0 <= R <= the vocabulary)", name, ln); goto fail;
    }
    sl->off = xcalloc((size_t)V + 1, sizeof(int));
    size_t cap = 1024, total = 0;
    sl->lex = xmalloc(cap * sizeof(int));
    int *row = xmalloc(((size_t)fk + 1) * sizeof(int)), prev = -1;
    for (int r = 0; r < nrows; r++) {
        int m;
        if (!(s = next_line(&p, end, &ln))) { errorf("%s:%d: file ends after %d of %d lexical lines", name, ln, r, nrows); free(row); goto fail; }
        if ((m = parse_ids(s, row, fk + 1, V)) < 1 || row[0] <= prev) {
            errorf("%s:%d: expected 's t1 .. tj' (ids in [0, %d), j <= k = %d, s above the previous line's %d)", name, ln, V, fk, prev);
            free(row); goto fail;
        }
        for (int t = prev + 1; t <= row[0]; t++) sl->off[t] = (int)total;
        if (total + (size_t)m > cap) { cap = 2 * cap + (size_t)m; sl->lex = xrealloc(sl->lex, cap * sizeof(int)); }
        memcpy(sl->lex + total, row + 1, (size_t)(m - 1) * sizeof(int));
        total += (size_t)(m - 1);
        prev = row[0];
    }
    free(row);
    for (int t = prev + 1; t <= V; t++) sl->off[t] = (int)total;
    if (p < end) { errorf("%s:%d: unexpected text after the %d lexical lines", name, ln + 1, nrows); goto fail; }
    free(copy);
    return sl;
fail:
    free(copy);
    shortlist_free(sl);
    return NULL;
}

Shortlist *shortlist_load(const char *path, const Bpe *bpe) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return NULL;
    Shortlist *sl = shortlist_from_string(text, len, path, bpe);
    free(text);
    return sl;
}

/* ---- a batch's candidates ------------------------------------------------- */
void shortlist_mark(const Shortlist *sl, const int *src, int len, unsigned char *mark) {
    int V = sl->vocab;
    for (int t = 0; t < 4 && t < V; t++) mark[t] = 1;
    for (int i = 0; i < sl->nfreq; i++) mark[sl->freq[i]] = 1;
    for (int j = 0; j < len; j++) {
        int tok = src[j];
        if (tok < 0 || tok >= V) continue;   /* (the model refuses such ids before) */
        mark[tok] = 1;
        for (int a = sl->off[tok]; a < sl->off[tok + 1]; a++) mark[sl->lex[a]] = 1;
    }
}

int shortlist_candidates(const Shortlist *sl, int nsent, const int *const *src, const int *len, int *ids,
                         unsigned char *mark) {
    int c = 0;
    for (int s = 0; s < nsent; s++) shortlist_mark(sl, src[s], len[s], mark);
    for (int t = 0; t < sl->vocab; t++)
        if (mark[t]) { ids[c++] = t; mark[t] = 0; }
    return c;
}
