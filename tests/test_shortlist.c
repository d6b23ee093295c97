/* test_shortlist.c — the vocabulary shortlist (shortlist.h): what it learns
 * from a small parallel corpus (known answers for p(t|s), the frequent
 * tokens, the ties), the file's round trip, and every error path of the
 * reader (truncated, damaged, another vocabulary, bad lines). Decoding with
 * a shortlist is checked in test_decode.c. */
#include "test.h"

#include <inttypes.h>
#include <unistd.h>

#include "bpe.h"
#include "crc32c.h"
#include "shortlist.h"
#include "util.h"

static char *tmp_path(const char *name) {
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 600, "%s/test_shortlist_%d_%s", getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp", (int)getpid(), name);
    return p;
}

/* The corpus: "cat" always with "Katze", "dog" with "Hund"; "the"/"der" in
 * every pair (the most frequent), "big"/"gross" with both. */
static const char *SRC =
    "the cat\nthe cat\nthe cat big\nthe dog\nthe dog big\nthe dog\nthe cat dog\n";
static const char *TGT =
    "der Katze\nder Katze\nder Katze gross\nder Hund\nder Hund gross\nder Hund\nder Katze Hund\n";

static Bpe *corpus_bpe(void) {
    char *all = xmalloc(strlen(SRC) + strlen(TGT) + 1);
    strcpy(all, SRC);
    strcat(all, TGT);
    test_write_text(tmp_path("all.txt"), all);
    free(all);
    const char *files[] = {tmp_path("all.txt")};
    BpeLearnOptions o = {.vocab_size = 400, .normalization = "nfkc", .threads = 1, .quiet = 1};
    Bpe *b = bpe_learn(files, 1, &o);
    CHECK(b != NULL);
    return b;
}

/* The id of a word that BPE keeps whole ("▁cat"); -1 if it does not. */
static int word_id(const Bpe *b, const char *w) {
    int *ids = NULL, cap = 0, n = bpe_encode(b, w, strlen(w), &ids, &cap, NULL), id = n == 1 ? ids[0] : -1;
    free(ids);
    return id;
}

/* Candidates of one source as a set over the vocabulary. */
static int is_candidate(const Shortlist *sl, const int *src, int len, int t) {
    unsigned char *mark = xcalloc((size_t)shortlist_vocab(sl), 1);
    shortlist_mark(sl, src, len, mark);
    int r = mark[t];
    free(mark);
    return r;
}

static void test_learned_table(void) {
    Bpe *b = corpus_bpe();
    if (!b) return;
    test_write_text(tmp_path("src.txt"), SRC);
    test_write_text(tmp_path("tgt.txt"), TGT);
    int cat = word_id(b, "cat"), dog = word_id(b, "dog"), the = word_id(b, "the"), big = word_id(b, "big");
    int katze = word_id(b, "Katze"), hund = word_id(b, "Hund"), der = word_id(b, "der"), gross = word_id(b, "gross");
    CHECK(cat >= 4 && dog >= 4 && the >= 4 && big >= 4 && katze >= 4 && hund >= 4 && der >= 4 && gross >= 4);
    /* n = 1: "der" (7 occurrences) is the frequent token; k = 1: for "cat"
     * p(Katze|cat) = 4/4 beats p(Hund|cat) = 1/4 and p(gross|cat) = 1/4;
     * for "dog" p(Hund|dog) = 4/4; for "big" p(gross|big) = 2/2 beats
     * p(Katze|big) = p(Hund|big) = 1/2. */
    Shortlist *sl = shortlist_build(b, tmp_path("src.txt"), tmp_path("tgt.txt"), 1, 1);
    CHECK(sl != NULL);
    if (!sl) { bpe_free(b); return; }
    int s_cat[] = {cat}, s_dog[] = {dog}, s_big[] = {big}, s_the[] = {the};
    CHECK(is_candidate(sl, s_cat, 1, katze) && !is_candidate(sl, s_cat, 1, hund) && !is_candidate(sl, s_cat, 1, gross));
    CHECK(is_candidate(sl, s_dog, 1, hund) && !is_candidate(sl, s_dog, 1, katze));
    CHECK(is_candidate(sl, s_big, 1, gross) && !is_candidate(sl, s_big, 1, katze) && !is_candidate(sl, s_big, 1, hund));
    /* always: the specials, the frequent token; a source token itself */
    for (int t = 0; t < 4; t++) CHECK(is_candidate(sl, s_the, 1, t));
    CHECK(is_candidate(sl, s_the, 1, der) && is_candidate(sl, s_cat, 1, der));
    CHECK(is_candidate(sl, s_cat, 1, cat) && !is_candidate(sl, s_cat, 1, dog));
    /* the union of a batch, ascending */
    const int *srcs[] = {s_cat, s_dog};
    int len[] = {1, 1}, *ids = xmalloc((size_t)shortlist_vocab(sl) * sizeof(int));
    unsigned char *mark = xcalloc((size_t)shortlist_vocab(sl), 1);
    int C = shortlist_candidates(sl, 2, srcs, len, ids, mark);
    CHECK(C == 4 + 1 + 2 + 2);   /* specials, der, cat dog, Katze Hund */
    int asc = 1, clear = 1;
    for (int i = 1; i < C; i++) asc &= ids[i] > ids[i - 1];
    for (int t = 0; t < shortlist_vocab(sl); t++) clear &= mark[t] == 0;
    CHECK(asc && ids[0] == 0 && ids[3] == 3 && clear);
    /* k = 2 for "cat": Hund and gross tie at 1/4 and occur 4 and 2 times: gross */
    Shortlist *sl2 = shortlist_build(b, tmp_path("src.txt"), tmp_path("tgt.txt"), 2, 1);
    CHECK(sl2 && is_candidate(sl2, s_cat, 1, gross) && !is_candidate(sl2, s_cat, 1, hund));
    /* n >= V - 4: every token, whatever the corpus */
    Shortlist *all = shortlist_build(b, tmp_path("src.txt"), tmp_path("tgt.txt"), 0, bpe_vocab_size(b));
    CHECK(all && shortlist_candidates(all, 1, srcs, len, ids, mark) == bpe_vocab_size(b));
    /* errors: different line counts, missing files, bad settings */
    test_write_text(tmp_path("short.txt"), "der Katze\n");
    CHECK(!shortlist_build(b, tmp_path("src.txt"), tmp_path("short.txt"), 1, 1) && strstr(error_message(), "short.txt"));
    CHECK(!shortlist_build(b, tmp_path("nope.txt"), tmp_path("tgt.txt"), 1, 1) && strstr(error_message(), "nope.txt"));
    CHECK(!shortlist_build(b, tmp_path("src.txt"), tmp_path("tgt.txt"), -1, 1));
    free(ids); free(mark);
    shortlist_free(sl); shortlist_free(sl2); shortlist_free(all);
    bpe_free(b);
}

/* text with its checksum line appended (malloc'd). */
static char *with_crc(const char *body) {
    size_t n = strlen(body);
    char *s = xmalloc(n + 32);
    memcpy(s, body, n);
    snprintf(s + n, 32, "crc32c %08" PRIx32 "\n", crc32c(0, body, n));
    return s;
}

static uint32_t tok_crc(const Bpe *b) {
    char *s = bpe_to_string(b);
    uint32_t c = crc32c(0, s, strlen(s));
    free(s);
    return c;
}

/* from_string fails and the message holds `what`. */
static void expect_error(const char *text, size_t len, const Bpe *b, const char *what, int line) {
    Shortlist *sl = shortlist_from_string(text, len, "f.txt", b);
    CHECK_MSG(!sl && strstr(error_message(), what) && strstr(error_message(), "f.txt"), "line %d: expected an error with '%s', got %s",
              line, what, sl ? "a shortlist" : error_message());
    shortlist_free(sl);
}

static void test_file(void) {
    Bpe *b = corpus_bpe();
    if (!b) return;
    test_write_text(tmp_path("src.txt"), SRC);
    test_write_text(tmp_path("tgt.txt"), TGT);
    Shortlist *sl = shortlist_build(b, tmp_path("src.txt"), tmp_path("tgt.txt"), 2, 3);
    CHECK(sl != NULL);
    if (!sl) { bpe_free(b); return; }
    /* round trip, in memory and through a file */
    char *text = shortlist_to_string(sl);
    Shortlist *back = shortlist_from_string(text, strlen(text), "mem", b);
    CHECK(back != NULL);
    char *again = back ? shortlist_to_string(back) : xstrdup("");
    CHECK_STR(again, text);
    CHECK(back && shortlist_k(back) == 2 && shortlist_n(back) == 3 && shortlist_vocab(back) == bpe_vocab_size(b));
    CHECK(shortlist_save(sl, tmp_path("sl.txt")) == 0);
    Shortlist *loaded = shortlist_load(tmp_path("sl.txt"), b);
    char *third = loaded ? shortlist_to_string(loaded) : xstrdup("");
    CHECK_STR(third, text);
    CHECK(!shortlist_load(tmp_path("missing.txt"), b) && strstr(error_message(), "missing.txt"));
    size_t n = strlen(text);
    /* truncated anywhere: the checksum line is gone or incomplete */
    for (size_t cut = 0; cut < n; cut += 1 + n / 40) expect_error(text, cut, b, "truncated", __LINE__);
    expect_error(text, n - 1, b, "truncated", __LINE__);
    /* one byte changed: the checksum says so */
    char *bad = xstrdup(text);
    bad[n / 2] = bad[n / 2] == '1' ? '2' : '1';
    expect_error(bad, n, b, "checksum mismatch", __LINE__);
    /* another tokenizer (another vocabulary) */
    const char *files[] = {tmp_path("src.txt")};
    BpeLearnOptions o = {.vocab_size = 300, .normalization = "nfkc", .threads = 1, .quiet = 1};
    Bpe *other = bpe_learn(files, 1, &o);
    CHECK(other != NULL);
    if (other) expect_error(text, n, other, "another vocabulary", __LINE__);
    /* well-formed checksums around bad contents: each line is checked */
    int V = bpe_vocab_size(b);
    uint32_t tc = tok_crc(b);
    char body[4096];
    struct { const char *fmt, *what; } cases[] = {
        {"tfm-shortlist 2\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 0\n", "version '2'"},
        {"not-a-shortlist\n", "not a tfm shortlist"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n%d\nlexical 0\n", "token ids in [0"},   /* id V */
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 2\n5 6\nlexical 0\n", "frequent M"},   /* M > n */
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 2\n7 8\n", "file ends after 1 of 2"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 1\n7 8 9\n", "j <= k = 1"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 2\n7 8\n7 9\n", "above the previous"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 1\n7  8\n", "ids in [0"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk 1 n 1\nfrequent 1\n5\nlexical 0\nextra\n", "unexpected text"},
        {"tfm-shortlist 1\nvocab %d tokenizer %08x\nk -1 n 1\n", "expected 'k K n N'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, cases[i].fmt, V, tc, V);
        char *t = with_crc(body);
        expect_error(t, strlen(t), b, cases[i].what, (int)i);
        free(t);
    }
    /* and a good hand-written one reads */
    snprintf(body, sizeof body, "tfm-shortlist 1\nvocab %d tokenizer %08x\nk 2 n 1\nfrequent 1\n5\nlexical 2\n7 8 9\n10 11\n", V, tc);
    char *t = with_crc(body);
    Shortlist *hand = shortlist_from_string(t, strlen(t), "hand", b);
    CHECK(hand != NULL);
    if (hand) {
        int s7[] = {7}, s10[] = {10}, s12[] = {12};
        CHECK(is_candidate(hand, s7, 1, 8) && is_candidate(hand, s7, 1, 9) && !is_candidate(hand, s7, 1, 11));
        CHECK(is_candidate(hand, s10, 1, 11) && is_candidate(hand, s10, 1, 5) && !is_candidate(hand, s12, 1, 11));
    }
    free(t);
    shortlist_free(hand);
    free(bad); free(text); free(again); free(third);
    shortlist_free(sl); shortlist_free(back); shortlist_free(loaded);
    bpe_free(b); bpe_free(other);
}

int main(void) {
    RUN(test_learned_table);
    RUN(test_file);
    return test_summary();
}
