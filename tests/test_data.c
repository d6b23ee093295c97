/* test_data.c — corpora (plain and .gz, long lines, line counts), the
 * encoded-corpus cache (reuse, invalidation, corruption), filtering counts,
 * token batches (coverage, budget, padding, determinism) and batch format. */
#include "test.h"

#include "bpe.h"
#include "data.h"
#include "util.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[512];

static const char *tmp_path(const char *name) {
    static char buf[8][640];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void write_gz(const char *path, const char *text) {
    gzFile f = gzopen(path, "wb");
    gzwrite(f, text, (unsigned)strlen(text));
    gzclose(f);
}

/* A synthetic parallel corpus: the target is the source reversed, with
 * words from a 40-word vocabulary; lengths 1..max_len; deterministic. */
static void make_corpus(const char *src, const char *tgt, int n, int max_len, uint64_t seed) {
    FILE *fs = fopen(src, "w"), *ft = fopen(tgt, "w");
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int len = 1 + (int)(rng_u64(&r) % (uint64_t)max_len), w[256];
        for (int j = 0; j < len; j++) w[j] = (int)(rng_u64(&r) % 40);
        for (int j = 0; j < len; j++) fprintf(fs, "%sw%d", j ? " " : "", w[j]);
        for (int j = len - 1; j >= 0; j--) fprintf(ft, "%sv%d", j < len - 1 ? " " : "", w[j]);
        fputc('\n', fs);
        fputc('\n', ft);
    }
    fclose(fs);
    fclose(ft);
}

static Bpe *learn(const char *src, const char *tgt) {
    const char *files[2] = {src, tgt};
    BpeLearnOptions o = {.vocab_size = 400, .normalization = "nfkc", .quiet = 1};
    Bpe *b = bpe_learn(files, 2, &o);
    if (!b) fprintf(stderr, "bpe_learn: %s\n", error_message());
    return b;
}

static void test_text_lines(void) {
    TextLines t;
    test_write_text(tmp_path("a.txt"), "one\r\ntwo\n\nlast without newline");
    CHECK(text_lines_read(&t, tmp_path("a.txt")) == 0);
    CHECK(t.n == 4);
    if (t.n == 4) {
        CHECK_STR(t.text + t.start[0], "one");
        CHECK_STR(t.text + t.start[1], "two");
        CHECK_STR(t.text + t.start[2], "");
        CHECK_STR(t.text + t.start[3], "last without newline");
    }
    text_lines_free(&t);

    test_write_text(tmp_path("empty.txt"), "");
    CHECK(text_lines_read(&t, tmp_path("empty.txt")) == 0);
    CHECK(t.n == 0);
    text_lines_free(&t);

    test_write_text(tmp_path("blank.txt"), "\n");
    CHECK(text_lines_read(&t, tmp_path("blank.txt")) == 0);
    CHECK(t.n == 1);
    text_lines_free(&t);

    /* a 3 MB line, gzipped: no truncation */
    size_t big = 3 << 20;
    char *s = xmalloc(big + 16);
    for (size_t i = 0; i < big; i++) s[i] = "abc "[i % 4];
    strcpy(s + big, "\nz\n");
    write_gz(tmp_path("big.gz"), s);
    CHECK(text_lines_read(&t, tmp_path("big.gz")) == 0);
    CHECK(t.n == 2);
    if (t.n == 2) {
        CHECK(strlen(t.text + t.start[0]) == big);
        CHECK_STR(t.text + t.start[1], "z");
    }
    text_lines_free(&t);
    free(s);

    CHECK(text_lines_read(&t, tmp_path("missing.txt")) == -1);
    CHECK(strstr(error_message(), "missing.txt") != NULL);
}

static void test_mismatch_and_missing(void) {
    test_write_text(tmp_path("m.src"), "a\nb\nc\n");
    test_write_text(tmp_path("m.tgt"), "a\nb\n");
    Bpe *b = learn(tmp_path("m.src"), tmp_path("m.src"));
    if (!b) { CHECK(b != NULL); return; }
    Corpus c;
    CorpusStats st;
    CHECK(corpus_load(&c, tmp_path("m.src"), tmp_path("m.tgt"), b, NULL, &st) == -1);
    const char *msg = error_message();
    CHECK_MSG(strstr(msg, "m.src") && strstr(msg, "m.tgt") && strstr(msg, " 3") && strstr(msg, " 2"), "%s", msg);
    CHECK(corpus_load(&c, tmp_path("nope.src"), tmp_path("m.tgt"), b, tmp_path("m.cache"), &st) == -1);
    CHECK(strstr(error_message(), "nope.src") != NULL);
    bpe_free(b);
}

static int corpus_equal(const Corpus *a, const Corpus *b) {
    if (a->n != b->n || a->num_ids != b->num_ids) return 0;
    return !memcmp(a->src_len, b->src_len, a->n * sizeof(int)) && !memcmp(a->tgt_len, b->tgt_len, a->n * sizeof(int)) &&
           !memcmp(a->ids, b->ids, a->num_ids * sizeof(int)) && !memcmp(a->off, b->off, a->n * sizeof(long));
}

/* .gz input gives the same ids as plain; the cache is reused when nothing
 * changed, remade when a file's mtime or the tokenizer changes, and a
 * corrupted or truncated cache is detected and remade. */
static void test_gz_and_cache(void) {
    const char *src = tmp_path("c.src"), *tgt = tmp_path("c.tgt"), *cache = tmp_path("c.cache");
    make_corpus(src, tgt, 300, 12, 1);
    Bpe *b = learn(src, tgt);
    if (!b) { CHECK(b != NULL); return; }
    Corpus plain, gz, again;
    CorpusStats st;
    CHECK(corpus_load(&plain, src, tgt, b, NULL, &st) == 0);
    CHECK(st.read == 300 && !st.from_cache);
    /* gz copies */
    char *s = read_file(src, NULL), *t = read_file(tgt, NULL);
    write_gz(tmp_path("c.src.gz"), s);
    write_gz(tmp_path("c.tgt.gz"), t);
    free(s); free(t);
    CHECK(corpus_load(&gz, tmp_path("c.src.gz"), tmp_path("c.tgt.gz"), b, NULL, &st) == 0);
    CHECK(corpus_equal(&plain, &gz));
    corpus_free(&gz);

    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(!st.from_cache);
    CHECK(file_exists(cache));
    corpus_free(&again);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(st.from_cache);
    CHECK(corpus_equal(&plain, &again));
    corpus_free(&again);

    /* touching an input (new mtime) invalidates */
    struct timespec ts[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    utimensat(AT_FDCWD, tgt, ts, 0);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(!st.from_cache);
    CHECK(corpus_equal(&plain, &again));
    corpus_free(&again);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(st.from_cache);
    corpus_free(&again);

    /* another tokenizer invalidates */
    Bpe *b2 = learn(src, src);
    CHECK(corpus_load(&again, src, tgt, b2, cache, &st) == 0);
    CHECK(!st.from_cache);
    corpus_free(&again);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(!st.from_cache);
    corpus_free(&again);

    /* flip one byte in the middle of the ids: detected by the checksum */
    struct stat sb;
    stat(cache, &sb);
    FILE *f = fopen(cache, "r+b");
    fseek(f, sb.st_size / 2, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, sb.st_size / 2, SEEK_SET);
    fputc(ch ^ 0x01, f);
    fclose(f);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(!st.from_cache);
    CHECK(corpus_equal(&plain, &again));
    corpus_free(&again);

    /* truncate: detected by the size check */
    stat(cache, &sb);
    CHECK(truncate(cache, sb.st_size - 10) == 0);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(!st.from_cache);
    CHECK(corpus_equal(&plain, &again));
    corpus_free(&again);
    CHECK(corpus_load(&again, src, tgt, b, cache, &st) == 0);
    CHECK(st.from_cache);
    corpus_free(&again);

    corpus_free(&plain);
    bpe_free(b);
    bpe_free(b2);
}

/* A corpus built by hand: lengths given, ids = 100 + pair index. */
static void corpus_by_hand(Corpus *c, const int *sl, const int *tl, int n) {
    memset(c, 0, sizeof *c);
    c->n = n;
    c->src_len = xmalloc(n * sizeof(int));
    c->tgt_len = xmalloc(n * sizeof(int));
    c->off = xmalloc(n * sizeof(long));
    c->line = xmalloc(n * sizeof(long));
    for (int i = 0; i < n; i++) c->line[i] = i;
    long total = 0;
    for (int i = 0; i < n; i++) total += sl[i] + tl[i];
    c->ids = xmalloc((total + 1) * sizeof(int));
    long o = 0;
    for (int i = 0; i < n; i++) {
        c->src_len[i] = sl[i];
        c->tgt_len[i] = tl[i];
        c->off[i] = o;
        for (int j = 0; j < sl[i] + tl[i]; j++) c->ids[o + j] = 100 + i;
        o += sl[i] + tl[i];
    }
    c->num_ids = o;
}

static void test_filter(void) {
    /* pairs: ok, empty src, empty tgt, src too long, tgt too long, ratio, ok */
    int sl[] = {3, 0, 4, 11, 5, 1, 10};
    int tl[] = {4, 2, 0, 5, 11, 9, 10};
    Corpus c;
    corpus_by_hand(&c, sl, tl, 7);
    CorpusStats st = {.read = 7};
    corpus_filter(&c, 1, 10, 10, 4.0, &st);
    CHECK(st.empty == 2);
    CHECK(st.too_long == 2);
    CHECK(st.ratio == 1);          /* (9+1)/(1+1) = 5 > 4 */
    CHECK(st.kept == 2 && c.n == 2);
    CHECK(c.src_len[0] == 3 && c.tgt_len[0] == 4 && c.src_len[1] == 10 && c.tgt_len[1] == 10);
    CHECK(c.ids[c.off[0]] == 100 && c.ids[c.off[1]] == 106 && c.ids[c.off[1] + 19] == 106);
    CHECK(c.num_ids == 27);
    CHECK(c.line[0] == 0 && c.line[1] == 6);   /* the kept pairs' lines in the files */
    corpus_free(&c);

    /* ratio filter off, empty allowed (validation) */
    corpus_by_hand(&c, sl, tl, 7);
    CorpusStats st2 = {.read = 7};
    corpus_filter(&c, 0, 100, 100, 0, &st2);
    CHECK(st2.kept == 7 && st2.empty == 0 && st2.ratio == 0);
    corpus_free(&c);
}

/* BPE-dropout's corpus (corpus_resample): the filtered pairs encoded again
 * from their lines. p = 0 gives the ids the corpus was loaded with; a seed
 * gives the same ids on 1 and 3 threads and again; another seed or epoch
 * other ids; every pair still decodes to its own line (so the pairs stayed
 * with their lines through the filter); dropout makes more, shorter tokens. */
static void test_resample(void) {
    const char *src = tmp_path("r.src"), *tgt = tmp_path("r.tgt");
    make_corpus(src, tgt, 5000, 30, 3);
    Bpe *b = learn(src, tgt);
    if (!b) { CHECK(b != NULL); return; }
    Corpus c, ref;
    CorpusStats st;
    TextLines ts, tt;
    CHECK(corpus_load(&c, src, tgt, b, NULL, &st) == 0);
    CHECK(text_lines_read(&ts, src) == 0 && text_lines_read(&tt, tgt) == 0);
    corpus_filter(&c, 1, 20, 20, 0, &st);   /* drops the longer pairs: the kept lines are not 0..n-1 */
    CHECK(st.too_long > 500 && c.n > 1000);
    long plain_ids = c.num_ids, n = c.n;
    corpus_load(&ref, src, tgt, b, NULL, &st);
    corpus_filter(&ref, 1, 20, 20, 0, &st);
    corpus_resample(&c, &ts, &tt, b, 0, 7);
    CHECK(c.n == n && !memcmp(c.line, ref.line, (size_t)n * sizeof *c.line));
    CHECK(corpus_equal(&c, &ref));

    Corpus d[4];
    int threads[4] = {1, 3, 2, 2};
    uint64_t seed[4] = {11, 11, 11, 12};
    for (int k = 0; k < 4; k++) {
        corpus_load(&d[k], src, tgt, b, NULL, &st);
        corpus_filter(&d[k], 1, 20, 20, 0, &st);
        omp_set_num_threads(threads[k]);
        corpus_resample(&d[k], &ts, &tt, b, 0.2f, seed[k]);
    }
    omp_set_num_threads(2);
    CHECK_MSG(corpus_equal(&d[0], &d[1]) && corpus_equal(&d[0], &d[2]), "one seed, other ids on other thread counts");
    CHECK(!corpus_equal(&d[0], &d[3]));
    CHECK_MSG(d[0].num_ids > plain_ids * 11 / 10, "dropout 0.2: %ld ids, plain %ld", d[0].num_ids, plain_ids);
    long wrong = 0;
    for (long i = 0; i < n; i++)
        for (int side = 0; side < 2; side++) {
            const TextLines *t = side ? &tt : &ts;
            const int *ids = d[0].ids + d[0].off[i] + (side ? d[0].src_len[i] : 0);
            char *dec = bpe_decode(b, ids, side ? d[0].tgt_len[i] : d[0].src_len[i]);
            wrong += strcmp(dec, t->text + t->start[d[0].line[i]]) != 0;
            free(dec);
        }
    CHECK_MSG(wrong == 0, "%ld resampled sides do not decode to their line", wrong);
    for (int k = 0; k < 4; k++) corpus_free(&d[k]);
    corpus_free(&c); corpus_free(&ref);
    text_lines_free(&ts); text_lines_free(&tt);
    bpe_free(b);
}

static void test_batches(void) {
    enum { N = 2000 };
    int sl[N], tl[N];
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < N; i++) { sl[i] = 1 + (int)(rng_u64(&r) % 40); tl[i] = 1 + (int)(rng_u64(&r) % 40); }
    Corpus c;
    corpus_by_hand(&c, sl, tl, N);
    int budget = 600;
    Epoch e = {0}, e2 = {0}, e3 = {0};
    epoch_plan(&e, &c, budget, 1, 0, 1);
    /* every pair exactly once, budget kept, S/T are the padded maxima */
    int *seen = xcalloc(N, sizeof(int));
    long real = 0, padded = 0, tgt_total = 0;
    int over = 0, badST = 0;
    for (long k = 0; k < e.n; k++) {
        long B = e.first[k + 1] - e.first[k];
        int S = 0, T = 0;
        long tt = 0;
        for (long j = e.first[k]; j < e.first[k + 1]; j++) {
            long p = e.order[j];
            seen[p]++;
            if (sl[p] + 1 > S) S = sl[p] + 1;
            if (tl[p] + 1 > T) T = tl[p] + 1;
            real += sl[p] + tl[p] + 2;
            tt += tl[p] + 1;
        }
        if (B * (S + T) > budget) over++;
        if (S != e.S[k] || T != e.T[k] || tt != e.tgt_tokens[k]) badST++;
        padded += B * (S + T);
        tgt_total += tt;
    }
    int once = 1;
    for (int i = 0; i < N; i++) once &= seen[i] == 1;
    CHECK(once);
    CHECK(over == 0);
    CHECK(badST == 0);
    CHECK(real == e.real_tokens && padded == e.padded_tokens);
    /* sorting keeps padding small: here, well under 25% (random order: ~45%) */
    CHECK_MSG(epoch_padding_waste(&e) < 0.25, "waste %.3f", epoch_padding_waste(&e));
    /* batches are full: the mean batch uses most of the budget */
    CHECK_MSG((double)padded / e.n > 0.8 * budget, "mean padded %.1f", (double)padded / e.n);

    /* deterministic given (seed, epoch); another epoch or seed reorders */
    epoch_plan(&e2, &c, budget, 1, 0, 1);
    CHECK(e2.n == e.n && !memcmp(e2.order, e.order, N * sizeof(long)) && !memcmp(e2.first, e.first, (e.n + 1) * sizeof(long)));
    epoch_plan(&e3, &c, budget, 1, 1, 1);
    CHECK(memcmp(e3.order, e.order, N * sizeof(long)) != 0);
    epoch_plan(&e3, &c, budget, 2, 0, 1);
    CHECK(memcmp(e3.order, e.order, N * sizeof(long)) != 0);
    /* no shuffle: the batches come in length order */
    epoch_plan(&e3, &c, budget, 1, 0, 0);
    int sorted = 1;
    for (long j = 1; j < N; j++) {
        long a = e3.order[j - 1], b = e3.order[j];
        if (sl[a] > sl[b] || (sl[a] == sl[b] && tl[a] > tl[b])) sorted = 0;
    }
    CHECK(sorted);

    /* batch format */
    Batch b = {0};
    batch_alloc(&b, e.max_B, e.max_cells);
    int bad = 0;
    long tokens = 0;
    for (long k = 0; k < e.n; k++) {
        batch_fill(&b, &c, &e, k);
        tokens += b.tgt_tokens;
        if (b.tgt_tokens != e.tgt_tokens[k]) bad++;
        for (int i = 0; i < b.B; i++) {
            long p = e.order[e.first[k] + i];
            int s = sl[p], t = tl[p];
            const int *x = b.src + (size_t)i * b.S, *ti = b.tgt_in + (size_t)i * b.T, *to = b.tgt_out + (size_t)i * b.T;
            if (b.src_len[i] != s + 1 || b.tgt_len[i] != t + 1) bad++;
            for (int j = 0; j < b.S; j++) if (x[j] != (j < s ? 100 + p : j == s ? TOK_EOS : TOK_PAD)) bad++;
            for (int j = 0; j < b.T; j++) {
                if (ti[j] != (j == 0 ? TOK_BOS : j <= t ? 100 + p : TOK_PAD)) bad++;
                if (to[j] != (j < t ? 100 + p : j == t ? TOK_EOS : TOK_PAD)) bad++;
            }
        }
    }
    CHECK(bad == 0);
    CHECK(tokens == tgt_total);
    batch_free(&b);

    /* a pair longer than the budget still gets a batch of its own */
    int sl2[] = {5, 300, 5}, tl2[] = {5, 300, 5};
    Corpus c2;
    corpus_by_hand(&c2, sl2, tl2, 3);
    epoch_plan(&e3, &c2, 100, 1, 0, 1);
    CHECK(e3.n == 2);
    CHECK(e3.max_B == 2 && e3.max_S == 301);
    corpus_free(&c2);

    free(seen);
    epoch_free(&e); epoch_free(&e2); epoch_free(&e3);
    corpus_free(&c);
}

int main(void) {
    const char *base = getenv("TFM_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_data.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    log_quiet = 1;
    RUN(test_text_lines);
    RUN(test_mismatch_and_missing);
    RUN(test_gz_and_cache);
    RUN(test_filter);
    RUN(test_resample);
    RUN(test_batches);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
    return test_summary();
}
