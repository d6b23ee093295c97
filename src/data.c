/* data.c — corpora, filtering, the encoded-corpus cache, token batches.
 * See data.h for the layout and the batching rule. */
#include "data.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- hashing --------------------------------------------------------- */
uint64_t hash64(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    if (!h) h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}

/* Checksum of the cache payload, 4 bytes at a time so it can be computed
 * piece by piece while writing (FNV-1a per byte would take ~1 s on a
 * WMT-sized cache). */
static uint64_t checksum_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t w;
        memcpy(&w, p + i, 4);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    return h;
}
#define CHECKSUM_INIT 0x9E3779B97F4A7C15ULL

/* ---- the corpus ------------------------------------------------------ */
void corpus_free(Corpus *c) {
    free(c->src_len); free(c->tgt_len); free(c->off); free(c->ids); free(c->line);
    memset(c, 0, sizeof *c);
}

static void corpus_offsets(Corpus *c) {
    c->off = xmalloc((size_t)(c->n ? c->n : 1) * sizeof *c->off);
    long o = 0;
    for (long i = 0; i < c->n; i++) { c->off[i] = o; o += c->src_len[i] + c->tgt_len[i]; }
}

/* Encode lines src[line[i]], tgt[line[i]] (i < n; line NULL: every line)
 * with bpe, with BPE-dropout p (0: none) whose random numbers come from
 * (seed, line, side) alone. Lines are cut into chunks encoded in parallel,
 * each into its own buffer; the chunks are then joined in order, so the
 * result does not depend on the thread count. */
typedef struct { int *ids; long n, cap; long invalid; } Chunk;

static void chunk_push(Chunk *ch, const int *ids, int n) {
    if (n <= 0) return;   /* an empty line: ids may be NULL */
    if (ch->n + n > ch->cap) {
        ch->cap = (ch->n + n) * 2 + 1024;
        ch->ids = xrealloc(ch->ids, (size_t)ch->cap * sizeof *ch->ids);
    }
    memcpy(ch->ids + ch->n, ids, (size_t)n * sizeof *ids);
    ch->n += n;
}

/* one seed per (line, side); bpe_encode_dropout's rng_seed mixes it */
static uint64_t line_seed(uint64_t seed, long line, int side) {
    return seed + 0x9E3779B97F4A7C15ULL * (2 * (uint64_t)line + (uint64_t)side + 1);
}

static void corpus_encode(Corpus *c, const TextLines *src, const TextLines *tgt, const long *line, long n,
                          const Bpe *bpe, float p, uint64_t seed, long *invalid) {
    c->n = n;
    c->src_len = xmalloc((size_t)(n ? n : 1) * sizeof *c->src_len);
    c->tgt_len = xmalloc((size_t)(n ? n : 1) * sizeof *c->tgt_len);
    long nchunks = n / 2048 + 1;
    Chunk *chunks = xcalloc((size_t)nchunks, sizeof *chunks);
    #pragma omp parallel
    {
        int *ids = NULL, cap = 0;
        #pragma omp for schedule(dynamic, 1)
        for (long k = 0; k < nchunks; k++) {
            long lo = k * 2048, hi = lo + 2048 < n ? lo + 2048 : n;
            for (long i = lo; i < hi; i++)
                for (int side = 0; side < 2; side++) {
                    const TextLines *t = side ? tgt : src;
                    long at = line ? line[i] : i;
                    const char *text = t->text + t->start[at];
                    int bad = 0;
                    int m = bpe_encode_dropout(bpe, text, strlen(text), &ids, &cap, &bad, p, line_seed(seed, at, side));
                    if (m < 0) m = 0;
                    chunks[k].invalid += bad != 0;
                    chunk_push(&chunks[k], ids, m);
                    (side ? c->tgt_len : c->src_len)[i] = m;
                }
        }
        free(ids);
    }
    long total = 0, bad = 0;
    for (long k = 0; k < nchunks; k++) total += chunks[k].n, bad += chunks[k].invalid;
    c->num_ids = total;
    c->ids = xmalloc((size_t)(total ? total : 1) * sizeof *c->ids);
    long o = 0;
    for (long k = 0; k < nchunks; k++) {
        if (chunks[k].n) memcpy(c->ids + o, chunks[k].ids, (size_t)chunks[k].n * sizeof *c->ids);
        o += chunks[k].n;
        free(chunks[k].ids);
    }
    free(chunks);
    corpus_offsets(c);
    *invalid = bad;
}

/* ---- the cache file ------------------------------------------------------
 * Little-endian binary, written atomically (temp file + rename):
 *   "TFMCORP1"  u64 key  u64 pairs  u64 ids  u64 invalid_utf8
 *   i32 src_len[pairs]  i32 tgt_len[pairs]  i32 ids[ids]  u64 checksum
 * key = hash of the tokenizer's model text and each file's identity: its
 * resolved path, device, inode, size, mtime and ctime (nanoseconds). Another
 * file of the same size and mtime (unpacked from one archive, `touch -r`)
 * differs in inode or ctime, and any write to the file changes its ctime; the
 * same file named another way (relative, absolute, through a link) has the
 * same key. A content hash would also survive a copy, but costs a read of
 * the whole corpus at every start (doc/reliability.md has the figure);
 * checksum covers everything before it. A cache that fails any check is
 * re-made, never trusted. */
#define CACHE_MAGIC "TFMCORP1"

static int file_key(const char *path, uint64_t *h) {
    struct stat st;
    if (stat(path, &st)) return errorf("%s: cannot stat: %s", path, strerror(errno));
    char *real = realpath(path, NULL);
    if (!real) return errorf("%s: cannot resolve the path: %s", path, strerror(errno));
    *h = hash64(real, strlen(real) + 1, *h);
    free(real);
    int64_t v[7] = {(int64_t)st.st_dev, (int64_t)st.st_ino, (int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec,
                    (int64_t)st.st_mtim.tv_nsec, (int64_t)st.st_ctim.tv_sec, (int64_t)st.st_ctim.tv_nsec};
    *h = hash64(v, sizeof v, *h);
    return 0;
}

static int cache_key(const char *src, const char *tgt, const Bpe *bpe, uint64_t *key) {
    char *text = bpe_to_string(bpe);
    uint64_t h = hash64(CACHE_MAGIC, 8, 0);
    h = hash64(text, strlen(text), h);
    free(text);
    if (file_key(src, &h) || file_key(tgt, &h)) return -1;
    *key = h;
    return 0;
}

/* fread that also feeds the checksum */
static int read_sum(FILE *f, void *p, size_t n, uint64_t *sum) {
    if (fread(p, 1, n, f) != n) return -1;
    *sum = checksum_update(*sum, p, n);
    return 0;
}

/* Returns 1 if loaded, 0 if absent or stale (the reason in why). */
static int cache_read(Corpus *c, const char *path, uint64_t key, int vocab, long *invalid, char *why, size_t whylen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, whylen, "no cache yet"); return 0; }
    struct stat fs;
    uint64_t h[5], sum = CHECKSUM_INIT, stored;
    int ok = 0;
    if (fstat(fileno(f), &fs) || read_sum(f, h, sizeof h, &sum) || memcmp(h, CACHE_MAGIC, 8)) {
        snprintf(why, whylen, "%s is not a tfm corpus cache", path);
        goto done;
    }
    if (h[1] != key) { snprintf(why, whylen, "the input files or the tokenizer changed"); goto done; }
    uint64_t pairs = h[2], nids = h[3], len = (uint64_t)fs.st_size;
    if (pairs > len / 8 || nids > len / 4 || sizeof h + 8 * pairs + 4 * nids + 8 != len) {
        snprintf(why, whylen, "%s: size %llu does not match its header (truncated?)", path, (unsigned long long)len);
        goto done;
    }
    c->n = (long)pairs;
    c->num_ids = (long)nids;
    c->src_len = xmalloc((pairs ? pairs : 1) * sizeof(int));
    c->tgt_len = xmalloc((pairs ? pairs : 1) * sizeof(int));
    c->ids = xmalloc((nids ? nids : 1) * sizeof(int));
    if (read_sum(f, c->src_len, 4 * pairs, &sum) || read_sum(f, c->tgt_len, 4 * pairs, &sum) ||
        read_sum(f, c->ids, 4 * nids, &sum) || fread(&stored, 8, 1, f) != 1) {
        snprintf(why, whylen, "%s: read error", path);
        goto bad;
    }
    if (stored != sum) { snprintf(why, whylen, "%s: checksum mismatch (corrupted)", path); goto bad; }
    uint64_t total = 0;
    for (uint64_t i = 0; i < pairs; i++) {
        if (c->src_len[i] < 0 || c->tgt_len[i] < 0) { snprintf(why, whylen, "%s: negative length", path); goto bad; }
        total += (uint64_t)c->src_len[i] + (uint64_t)c->tgt_len[i];
    }
    if (total != nids) { snprintf(why, whylen, "%s: lengths do not add up to the ids", path); goto bad; }
    for (uint64_t i = 0; i < nids; i++)
        if (c->ids[i] < 0 || c->ids[i] >= vocab) { snprintf(why, whylen, "%s: token id %d out of range", path, c->ids[i]); goto bad; }
    corpus_offsets(c);
    *invalid = (long)h[4];
    ok = 1;
    goto done;
bad:
    corpus_free(c);
done:
    fclose(f);
    return ok;
}

/* fwrite that also feeds the checksum */
static int write_sum(FILE *f, const void *p, size_t n, uint64_t *sum) {
    if (!n) return 0;
    *sum = checksum_update(*sum, p, n);
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int cache_write(const Corpus *c, const char *path, uint64_t key, long invalid) {
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    if (!f) return error_wrap("cannot write the corpus cache");
    uint64_t h[5] = {0, key, (uint64_t)c->n, (uint64_t)c->num_ids, (uint64_t)invalid};
    memcpy(h, CACHE_MAGIC, 8);
    uint64_t sum = CHECKSUM_INIT;
    int bad = write_sum(f, h, sizeof h, &sum)
           || write_sum(f, c->src_len, 4 * (size_t)c->n, &sum)
           || write_sum(f, c->tgt_len, 4 * (size_t)c->n, &sum)
           || write_sum(f, c->ids, 4 * (size_t)c->num_ids, &sum);
    bad = bad || fwrite(&sum, 8, 1, f) != 1;
    (void)bad;   /* the stream's error flag is set; atomic_commit reports it */
    if (atomic_commit(&af)) return error_wrap("cannot write the corpus cache");
    return 0;
}

/* line[i] = i: every pair of the files, in order */
static void corpus_lines(Corpus *c) {
    c->line = xmalloc((size_t)(c->n ? c->n : 1) * sizeof *c->line);
    for (long i = 0; i < c->n; i++) c->line[i] = i;
}

int corpus_load(Corpus *c, const char *src_path, const char *tgt_path, const Bpe *bpe,
                const char *cache_path, CorpusStats *st) {
    memset(c, 0, sizeof *c);
    memset(st, 0, sizeof *st);
    uint64_t key = 0;
    char why[256] = "";
    if (cache_path) {
        if (cache_key(src_path, tgt_path, bpe, &key)) return -1;
        long invalid = 0;
        if (cache_read(c, cache_path, key, bpe_vocab_size(bpe), &invalid, why, sizeof why)) {
            corpus_lines(c);
            st->read = st->kept = c->n;
            st->invalid_utf8 = invalid;
            st->from_cache = 1;
            return 0;
        }
    }
    TextLines s, t;
    TextOptions to = TEXT_DEFAULT;
    to.stream = 0;   /* read again by bpe learn, cached by size and time: regular files only */
    if (text_lines_read_with(&s, src_path, &to)) return -1;
    if (text_lines_read_with(&t, tgt_path, &to)) { text_lines_free(&s); return -1; }
    if (s.n != t.n) {
        errorf("%s has %ld lines but %s has %ld: a parallel corpus needs one target line per source line",
               src_path, s.n, tgt_path, t.n);
        text_lines_free(&s); text_lines_free(&t);
        return -1;
    }
    if (cache_path) log_info("encoding %s + %s (%s)", src_path, tgt_path, why);
    long invalid = 0;
    corpus_encode(c, &s, &t, NULL, s.n, bpe, 0, 0, &invalid);
    invalid += s.invalid_lines + t.invalid_lines;   /* replaced by U+FFFD as they were read */
    text_lines_free(&s);
    text_lines_free(&t);
    corpus_lines(c);
    st->read = st->kept = c->n;
    st->invalid_utf8 = invalid;
    if (cache_path && cache_write(c, cache_path, key, invalid)) {
        log_warn("%s (training goes on without the cache)", error_message());
        error_clear();
    }
    return 0;
}

void corpus_filter(Corpus *c, int drop_empty, int max_src, int max_tgt, double max_ratio, CorpusStats *st) {
    long w = 0, o = 0;
    for (long i = 0; i < c->n; i++) {
        int s = c->src_len[i], t = c->tgt_len[i];
        const int *p = c->ids + c->off[i];
        int drop = 0;
        if (drop_empty && (s == 0 || t == 0)) { st->empty++; drop = 1; }
        else if (s > max_src || t > max_tgt) { st->too_long++; drop = 1; }
        else if (max_ratio > 0 && (double)((s > t ? s : t) + 1) / ((s < t ? s : t) + 1) > max_ratio) { st->ratio++; drop = 1; }
        if (drop) continue;
        memmove(c->ids + o, p, (size_t)(s + t) * sizeof *c->ids);
        c->src_len[w] = s;
        c->tgt_len[w] = t;
        c->off[w] = o;
        if (c->line) c->line[w] = c->line[i];
        o += s + t;
        w++;
    }
    c->n = w;
    c->num_ids = o;
    st->kept = w;
}

void corpus_resample(Corpus *c, const TextLines *src, const TextLines *tgt, const Bpe *bpe, float p, uint64_t seed) {
    long *line = c->line, n = c->n, invalid;
    c->line = NULL;
    corpus_free(c);
    corpus_encode(c, src, tgt, line, n, bpe, p, seed, &invalid);
    c->line = line;
}

long corpus_truncate(Corpus *c, int max_positions, long *first) {
    long o = 0, cut = 0;
    int mx = max_positions - 1;
    *first = -1;
    for (long i = 0; i < c->n; i++) {
        int s = c->src_len[i], t = c->tgt_len[i];
        const int *p = c->ids + c->off[i];
        int s2 = s < mx ? s : mx, t2 = t < mx ? t : mx;
        if (s2 != s || t2 != t) { if (!cut++) *first = i; }
        memmove(c->ids + o, p, (size_t)s2 * sizeof *c->ids);
        memmove(c->ids + o + s2, p + s, (size_t)t2 * sizeof *c->ids);
        c->off[i] = o;
        c->src_len[i] = s2;
        c->tgt_len[i] = t2;
        o += s2 + t2;
    }
    c->num_ids = o;
    return cut;
}

/* ---- batches --------------------------------------------------------- */
void epoch_free(Epoch *e) {
    free(e->order); free(e->first); free(e->S); free(e->T); free(e->tgt_tokens);
    memset(e, 0, sizeof *e);
}

double epoch_padding_waste(const Epoch *e) {
    return e->padded_tokens ? 1.0 - (double)e->real_tokens / (double)e->padded_tokens : 0.0;
}

static void shuffle(long *a, long n, Rng *r) {
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng_u64(r) % (uint64_t)(i + 1));
        long x = a[i]; a[i] = a[j]; a[j] = x;
    }
}

/* Stable counting sort of idx[0..n) by key[idx[i]] in [0, kmax]. */
static void counting_sort(long *idx, long n, const int *key, int kmax, long *tmp) {
    long *count = xcalloc((size_t)kmax + 2, sizeof *count);
    for (long i = 0; i < n; i++) count[key[idx[i]] + 1]++;
    for (int k = 0; k <= kmax; k++) count[k + 1] += count[k];
    for (long i = 0; i < n; i++) tmp[count[key[idx[i]]]++] = idx[i];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
    free(count);
}

void epoch_plan(Epoch *e, const Corpus *c, int batch_tokens, uint64_t seed, long epoch, int shuffle_on) {
    epoch_free(e);
    long n = c->n;
    Rng r;
    rng_seed(&r, seed ^ (0xD1B54A32D192ED03ULL * (uint64_t)(epoch + 1)));
    long *idx = xmalloc((size_t)(n ? n : 1) * sizeof *idx), *tmp = xmalloc((size_t)(n ? n : 1) * sizeof *tmp);
    for (long i = 0; i < n; i++) idx[i] = i;
    if (shuffle_on) shuffle(idx, n, &r);
    /* sort by source length, ties by target length (LSD: target first) */
    int ms = 0, mt = 0;
    for (long i = 0; i < n; i++) {
        if (c->src_len[i] > ms) ms = c->src_len[i];
        if (c->tgt_len[i] > mt) mt = c->tgt_len[i];
    }
    counting_sort(idx, n, c->tgt_len, mt, tmp);
    counting_sort(idx, n, c->src_len, ms, tmp);

    /* cut greedily: a pair joins the batch while (B+1) * (S + T) fits */
    long cap = 64, nb = 0;
    long *first = xmalloc((size_t)(cap + 1) * sizeof *first);
    int *S = xmalloc((size_t)cap * sizeof *S), *T = xmalloc((size_t)cap * sizeof *T);
    long *tt = xmalloc((size_t)cap * sizeof *tt);
    long i = 0;
    e->real_tokens = e->padded_tokens = 0;
    e->max_B = e->max_S = e->max_T = 0;
    e->max_cells = 0;
    while (i < n) {
        if (nb == cap) {
            cap *= 2;
            first = xrealloc(first, (size_t)(cap + 1) * sizeof *first);
            S = xrealloc(S, (size_t)cap * sizeof *S);
            T = xrealloc(T, (size_t)cap * sizeof *T);
            tt = xrealloc(tt, (size_t)cap * sizeof *tt);
        }
        long j = i;
        int s = 0, t = 0;
        long tgt = 0, real = 0;
        while (j < n) {
            int s1 = c->src_len[idx[j]] + 1, t1 = c->tgt_len[idx[j]] + 1;
            int s2 = s1 > s ? s1 : s, t2 = t1 > t ? t1 : t;
            if (j > i && (j - i + 1) * (long)(s2 + t2) > batch_tokens) break;
            s = s2; t = t2;
            tgt += t1;
            real += s1 + t1;
            j++;
        }
        long B = j - i;
        first[nb] = i; S[nb] = s; T[nb] = t; tt[nb] = tgt;
        e->real_tokens += real;
        e->padded_tokens += B * (s + t);
        if (B > e->max_B) e->max_B = (int)B;
        if (s > e->max_S) e->max_S = s;
        if (t > e->max_T) e->max_T = t;
        if (B * s > e->max_cells) e->max_cells = B * s;
        if (B * t > e->max_cells) e->max_cells = B * t;
        nb++;
        i = j;
    }
    first[nb] = n;

    /* shuffle the batch order: permute the batches, rebuilding `order` */
    long *perm = xmalloc((size_t)(nb ? nb : 1) * sizeof *perm);
    for (long k = 0; k < nb; k++) perm[k] = k;
    if (shuffle_on) shuffle(perm, nb, &r);
    e->n = nb;
    e->order = xmalloc((size_t)(n ? n : 1) * sizeof *e->order);
    e->first = xmalloc((size_t)(nb + 1) * sizeof *e->first);
    e->S = xmalloc((size_t)(nb ? nb : 1) * sizeof *e->S);
    e->T = xmalloc((size_t)(nb ? nb : 1) * sizeof *e->T);
    e->tgt_tokens = xmalloc((size_t)(nb ? nb : 1) * sizeof *e->tgt_tokens);
    long o = 0;
    for (long k = 0; k < nb; k++) {
        long b = perm[k], len = first[b + 1] - first[b];
        memcpy(e->order + o, idx + first[b], (size_t)len * sizeof *idx);
        e->first[k] = o;
        e->S[k] = S[b]; e->T[k] = T[b]; e->tgt_tokens[k] = tt[b];
        o += len;
    }
    e->first[nb] = o;
    free(perm); free(first); free(S); free(T); free(tt); free(idx); free(tmp);
}

void batch_alloc(Batch *b, int max_B, long max_cells) {
    batch_free(b);
    size_t cells = (size_t)(max_cells > 0 ? max_cells : 1), B = (size_t)(max_B > 0 ? max_B : 1);
    b->src = xmalloc(cells * sizeof *b->src);
    b->tgt_in = xmalloc(cells * sizeof *b->tgt_in);
    b->tgt_out = xmalloc(cells * sizeof *b->tgt_out);
    b->src_len = xmalloc(B * sizeof *b->src_len);
    b->tgt_len = xmalloc(B * sizeof *b->tgt_len);
}

void batch_free(Batch *b) {
    free(b->src); free(b->tgt_in); free(b->tgt_out); free(b->src_len); free(b->tgt_len);
    memset(b, 0, sizeof *b);
}

void batch_fill(Batch *b, const Corpus *c, const Epoch *e, long k) {
    long lo = e->first[k], hi = e->first[k + 1];
    int B = (int)(hi - lo), S = e->S[k], T = e->T[k];
    b->B = B; b->S = S; b->T = T;
    b->src_tokens = b->tgt_tokens = 0;
    for (int r = 0; r < B; r++) {
        long p = e->order[lo + r];
        int s = c->src_len[p], t = c->tgt_len[p];
        const int *x = c->ids + c->off[p], *y = x + s;
        int *src = b->src + (size_t)r * S, *ti = b->tgt_in + (size_t)r * T, *to = b->tgt_out + (size_t)r * T;
        memcpy(src, x, (size_t)s * sizeof *x);
        src[s] = TOK_EOS;
        for (int j = s + 1; j < S; j++) src[j] = TOK_PAD;
        ti[0] = TOK_BOS;
        memcpy(ti + 1, y, (size_t)t * sizeof *y);
        memcpy(to, y, (size_t)t * sizeof *y);
        to[t] = TOK_EOS;
        for (int j = t + 1; j < T; j++) ti[j] = to[j] = TOK_PAD;
        b->src_len[r] = s + 1;
        b->tgt_len[r] = t + 1;
        b->src_tokens += s + 1;
        b->tgt_tokens += t + 1;
    }
}
