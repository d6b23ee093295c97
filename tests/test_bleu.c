/* test_bleu.c — BLEU and chrF: tokenizers and Unicode handling on tricky
 * strings, tiny corpora scored by hand, error paths, and agreement with
 * sacreBLEU 2.6.0 on every case in tests/bleu-cases/expected.json. */
#include "test.h"
#include "bleu.h"
#include "json.h"
#include "util.h"

#include <unistd.h>

static void check_tok(const char *tok, const char *in, const char *want) {
    char *got = bleu_tokenize(tok, in);
    CHECK_MSG(got && !strcmp(got, want), "tok %s: \"%s\" -> \"%s\", want \"%s\"", tok, in, got ? got : "(null)", want);
    free(got);
}

/* Expected outputs were checked against Python's `re` running sacreBLEU's
 * own 13a patterns, and against the mteval rules by hand. */
static void test_tokenize_13a(void) {
    check_tok("13a", "Hello, world!", "Hello , world !");
    /* '.' and ',' stay inside numbers; '-' splits only after a digit */
    check_tok("13a", "It costs $3.50, i.e. 1,000-2,000 (approx.).",
              "It costs $ 3.50 , i . e . 1,000 - 2,000 ( approx . ) .");
    check_tok("13a", "1.5,2.5 a.b 3-4 x-5", "1.5,2.5 a . b 3 - 4 x-5");
    /* entities are unescaped in order quot, amp, lt, gt: &amp;lt; becomes '<' */
    check_tok("13a", "a &amp;lt; b &quot;c&quot; &amp;amp;", "a < b \" c \" & amp ;");
    check_tok("13a", "x<skipped>y", "xy");
    check_tok("13a", "don't re-enter", "don't re-enter");     /* ' and - are not split */
    check_tok("13a", "wait...", "wait . . .");
    check_tok("13a", "Year 2015.", "Year 2015 .");              /* padding splits the final dot */
    check_tok("13a", "U.S.A. 3.14.", "U . S . A . 3.14 .");
    check_tok("13a", "5 km/h (\"quoted\") [x]{y}|z~", "5 km / h ( \" quoted \" ) [ x ] { y } | z ~");
    check_tok("13a", "a\xc2\xa0" "b\xe2\x80\x89" "c", "a b c");  /* NBSP, thin space: Python whitespace */
    check_tok("13a", "a\xe2\x80\x8b" "b", "a\xe2\x80\x8b" "b");  /* zero-width space is not */
    check_tok("13a", "Schön.", "Schön .");                        /* multi-byte before the dot */
    check_tok("13a", "", "");
    check_tok("13a", "   ", "");
}

static void test_tokenize_others(void) {
    check_tok("intl", "Hello, world!", "Hello , world !");
    check_tok("intl", "Year 2015.", "Year 2015.");                /* mteval-v14's quirk, kept */
    check_tok("intl", "1.000,5 \xe2\x82\xac", "1.000,5 \xe2\x82\xac");  /* € (Sc) alone already */
    check_tok("intl", "a+b=c", "a + b = c");                      /* Sm symbols */
    check_tok("intl", "l'homme", "l ' homme");
    /* « (Pi) and » (Pf) are Unicode punctuation */
    check_tok("intl", "\xc2\xab" "Bonjour" "\xc2\xbb", "\xc2\xab Bonjour \xc2\xbb");
    check_tok("intl", "3,14", "3,14");
    check_tok("none", "a  b\xc2\xa0" "c, d.", "a b c, d.");
    check_tok("char", "ab c", "a b c");
    check_tok("char", "Sch\xc3\xb6n", "S c h \xc3\xb6 n");
    check_tok("char", "\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80 !");  /* astral code point is one token */
    CHECK(bleu_tokenize("zh", "x") == NULL);
    CHECK(strstr(error_message(), "zh") != NULL);
    CHECK(bleu_tokenize("13a", "bad \xff") == NULL);
}

static void check_clean(const char *in, int lc, const char *want) {
    char *got = bleu_clean_line(in, lc);
    CHECK_MSG(got && !strcmp(got, want), "clean(\"%s\", %d) -> \"%s\", want \"%s\"", in, lc, got ? got : "(null)", want);
    free(got);
}

/* Python: rstrip() strips Unicode whitespace at the end only; lower() maps
 * U+0130 to two characters and capital sigma to final sigma at word ends. */
static void test_clean_and_lowercase(void) {
    check_clean("abc \xe3\x80\x80\t\x1c\xc2\x85", 0, "abc");
    check_clean("  lead", 0, "  lead");
    check_clean("x\r", 0, "x");
    check_clean("\xc4\xb0stanbul", 1, "i\xcc\x87stanbul");
    /* ΟΔΟΣ ΣΟΦΟΣ Σ -> οδος σοφος σ */
    check_clean("\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3\xce\x9f\xce\xa6\xce\x9f\xce\xa3 \xce\xa3", 1,
                "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83\xce\xbf\xcf\x86\xce\xbf\xcf\x82 \xcf\x83");
    /* ΑΣ'Σ -> ασ'ς: the apostrophe is case-ignorable */
    check_clean("\xce\x91\xce\xa3'\xce\xa3", 1, "\xce\xb1\xcf\x83'\xcf\x82");
    check_clean("\xc3\x84\xc3\x96\xc3\x9c \xe1\xba\x9e ABC", 1, "\xc3\xa4\xc3\xb6\xc3\xbc \xc3\x9f abc");
    CHECK(bleu_clean_line("\xc0\xaf", 0) == NULL);
}

/* One pair scored by hand:
 *   hyp "the cat sat on the mat", ref "the cat is on the mat" (6 tokens each)
 *   1-grams: the x2, cat, on, mat match, sat not     -> 5/6
 *   2-grams: the cat, on the, the mat                -> 3/5
 *   3-grams: on the mat                              -> 1/4
 *   4-grams: none                                    -> 0/3
 *   exp smoothing: p4 = 1/(2*3); BP = 1
 *   BLEU = 100 * (5/6 * 3/5 * 1/4 * 1/6)^(1/4) = 100 * (1/48)^(1/4) = 37.9918... */
static void test_bleu_by_hand(void) {
    const char *hyp[] = {"the cat sat on the mat"}, *ref[] = {"the cat is on the mat"};
    const char *const *refs[] = {ref};
    BleuOptions o;
    bleu_options_default(&o);
    BleuResult r;
    CHECK(bleu_corpus(hyp, refs, 1, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100 * pow(1.0 / 48, 0.25), 1e-9);
    CHECK(r.correct[0] == 5 && r.correct[1] == 3 && r.correct[2] == 1 && r.correct[3] == 0);
    CHECK(r.total[0] == 6 && r.total[1] == 5 && r.total[2] == 4 && r.total[3] == 3);
    CHECK(r.hyp_len == 6 && r.ref_len == 6 && r.bp == 1.0 && r.nrefs == 1);
    char buf[256];
    bleu_format(&r, 2, buf, sizeof buf);
    CHECK_STR(buf, "BLEU = 37.99 83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
    bleu_signature(&o, r.nrefs, buf, sizeof buf);
    CHECK_STR(buf, "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0");

    o.smooth = "floor";   /* p4 = 0.1/3 */
    CHECK(bleu_corpus(hyp, refs, 1, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100 * pow(5.0 / 6 * 3.0 / 5 * 1.0 / 4 * (0.1 / 3), 0.25), 1e-9);
    bleu_signature(&o, 1, buf, sizeof buf);
    CHECK(strstr(buf, "|smooth:floor[0.10]|") != NULL);
    o.smooth = "add-k";   /* n > 1: (c+1)/(t+1) */
    CHECK(bleu_corpus(hyp, refs, 1, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100 * pow(5.0 / 6 * 4.0 / 6 * 2.0 / 5 * 1.0 / 4, 0.25), 1e-9);
    bleu_signature(&o, 1, buf, sizeof buf);
    CHECK(strstr(buf, "|smooth:add-k[1.00]|") != NULL);
    o.smooth_value = 0.5;
    bleu_signature(&o, 1, buf, sizeof buf);
    CHECK(strstr(buf, "|smooth:add-k[0.50]|") != NULL);
    o.smooth = "none";    /* log 0 -> BLEU 0 */
    CHECK(bleu_corpus(hyp, refs, 1, 1, &o, &r) == 0);
    CHECK(r.score == 0.0);
    CHECK_NEAR(r.precisions[0], 500.0 / 6, 1e-12);
    o.smooth = "bogus";
    CHECK(bleu_corpus(hyp, refs, 1, 1, &o, &r) == -1);
    CHECK(strstr(error_message(), "bogus") != NULL);
}

/* Clipping, closest reference length, brevity penalty, effective order. */
static void test_bleu_multi_ref(void) {
    BleuOptions o;
    bleu_options_default(&o);
    BleuResult r;
    /* "the" x4 is clipped to its max count in ONE reference (2), not the sum (3) */
    const char *h1[] = {"the the the the"}, *a1[] = {"the cat"}, *b1[] = {"the the dog"};
    const char *const *r1[] = {a1, b1};
    CHECK(bleu_corpus(h1, r1, 2, 1, &o, &r) == 0);
    CHECK(r.correct[0] == 2 && r.total[0] == 4);
    CHECK(r.ref_len == 3);   /* |4-2| = 2 vs |4-3| = 1 */
    /* 3 tokens vs references of 2 and 4: equally close, the shorter wins */
    const char *h2[] = {"a b c"}, *a2[] = {"a b c d"}, *b2[] = {"a b"};
    const char *const *r2[] = {a2, b2};
    CHECK(bleu_corpus(h2, r2, 2, 1, &o, &r) == 0);
    CHECK(r.ref_len == 2 && r.bp == 1.0);
    /* Short corpus: no 4-grams at all -> sacreBLEU's corpus BLEU is 0 (eff:no),
     * effective order keeps orders 1..3: BLEU = BP = exp(1 - 4/3). */
    const char *h3[] = {"the cat sat"}, *a3[] = {"the cat sat on the mat"}, *b3[] = {"the cat sat down"};
    const char *const *r3[] = {a3, b3};
    CHECK(bleu_corpus(h3, r3, 2, 1, &o, &r) == 0);
    CHECK(r.ref_len == 4);
    CHECK_NEAR(r.bp, exp(1 - 4.0 / 3), 1e-12);
    CHECK(r.score == 0.0);
    o.effective_order = 1;
    CHECK(bleu_corpus(h3, r3, 2, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100 * exp(1 - 4.0 / 3), 1e-9);
    char buf[256];
    bleu_signature(&o, 2, buf, sizeof buf);
    CHECK_STR(buf, "nrefs:2|case:mixed|eff:yes|tok:13a|smooth:exp|version:2.6.0");
    o.effective_order = 0;
    /* lowercasing: "The CAT" matches "the cat" only with -lc */
    const char *h4[] = {"The CAT sat on a mat"}, *a4[] = {"the cat sat on a mat"};
    const char *const *r4[] = {a4};
    CHECK(bleu_corpus(h4, r4, 1, 1, &o, &r) == 0);
    CHECK(r.correct[0] == 4);
    o.lowercase = 1;
    CHECK(bleu_corpus(h4, r4, 1, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100.0, 1e-9);
    bleu_signature(&o, 1, buf, sizeof buf);
    CHECK(strstr(buf, "case:lc") != NULL);
}

/* Empty input never crashes; empty references follow sacreBLEU. */
static void test_bleu_empty(void) {
    BleuOptions o;
    bleu_options_default(&o);
    BleuResult r;
    const char *none[] = {NULL};
    const char *const *r0[] = {none};
    CHECK(bleu_corpus(none, r0, 1, 0, &o, &r) == 0);   /* no lines */
    CHECK(r.score == 0.0 && r.hyp_len == 0 && r.ref_len == 0 && r.nrefs == 1);
    const char *h[] = {"", ""}, *a[] = {"a b c", "d e"};
    const char *const *r1[] = {a};
    CHECK(bleu_corpus(h, r1, 1, 2, &o, &r) == 0);      /* empty hypotheses */
    CHECK(r.score == 0.0 && r.bp == 0.0 && r.hyp_len == 0 && r.ref_len == 5);
    char buf[256];
    bleu_format(&r, 2, buf, sizeof buf);
    CHECK_STR(buf, "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 5)");
    /* an empty reference is a missing one: 2 refs on line 1, 1 on line 2 */
    const char *h2[] = {"x y", "x y"}, *a2[] = {"x y", "x y"}, *b2[] = {"x z", "  "};
    const char *const *r2[] = {a2, b2};
    CHECK(bleu_corpus(h2, r2, 2, 2, &o, &r) == 0);
    CHECK(r.nrefs == -1);
    bleu_signature(&o, r.nrefs, buf, sizeof buf);
    CHECK(!strncmp(buf, "nrefs:var|", 10));
    /* all references empty on a line: sacreBLEU refuses, so do we */
    const char *b3[] = {"x z", ""}, *a3[] = {"x y", ""};
    const char *const *r3[] = {a3, b3};
    CHECK(bleu_corpus(h2, r3, 2, 2, &o, &r) == -1);
    CHECK(strstr(error_message(), "line 2") != NULL);
    const char *bad[] = {"ok", "\xe2\x82"};
    CHECK(bleu_corpus(bad, r2, 2, 2, &o, &r) == -1);
    CHECK(strstr(error_message(), "hypothesis line 2") != NULL);
    CHECK(strstr(error_message(), "UTF-8") != NULL);
}

static double chrf1(const char *h, const char *ref, const ChrfOptions *o) {
    const char *hyp[] = {h}, *rr[] = {ref};
    const char *const *refs[] = {rr};
    ChrfResult r;
    if (chrf_corpus(hyp, refs, 1, 1, o, &r) < 0) return -1;
    return r.score;
}

/* chrF by hand (beta = 2: F = 5PR / (4P + R), P and R averaged over orders
 * where both sides have n-grams):
 *   "abc" vs "abd": n=1 P=R=2/3, n=2 P=R=1/2, n=3 P=R=0; F = P = 7/18
 *   "abcdefgh" vs "ab": n=1 P=2/8 R=1, n=2 P=1/7 R=1; n>=3: the reference has
 *   no n-grams, so sacreBLEU counts no hypothesis n-grams either.
 *   P = 11/56, R = 1 -> F = (55/56) / (100/56) = 0.55 */
static void test_chrf_by_hand(void) {
    ChrfOptions o;
    chrf_options_default(&o);
    CHECK_NEAR(chrf1("abc", "abd", &o), 100 * 7.0 / 18, 1e-9);
    CHECK_NEAR(chrf1("abcdefgh", "ab", &o), 55.0, 1e-9);
    /* ... which matters in a corpus: with line 2 = "abcdef" vs "abcdef" the
     * sums are n=1 (14, 8, 8), n=2 (12, 6, 6), n=3..6 (4,4,4) (3,3,3) (2,2,2) (1,1,1):
     * P = (4/7 + 1/2 + 4) / 6 = 71/84, R = 1, F = 5P / (4P + 1) = 355/368 */
    const char *h2[] = {"abcdefgh", "abcdef"}, *a2[] = {"ab", "abcdef"};
    const char *const *r2[] = {a2};
    ChrfResult c2;
    CHECK(chrf_corpus(h2, r2, 1, 2, &o, &c2) == 0);
    CHECK_NEAR(c2.score, 100 * 355.0 / 368, 1e-9);
    CHECK_NEAR(chrf1("a b", "ab", &o), 100.0, 1e-9);   /* whitespace removed */
    CHECK_NEAR(chrf1("xyz", "abc", &o), 0.0, 0);
    CHECK_NEAR(chrf1("", "abc", &o), 0.0, 0);
    o.whitespace = 1;
    CHECK(chrf1("a b", "ab", &o) < 100.0);
    o.whitespace = 0;
    o.lowercase = 1;
    CHECK_NEAR(chrf1("ABC", "abc", &o), 100.0, 1e-9);
    o.lowercase = 0;
    /* chrF++: words too; "cat." splits into "cat" "." */
    o.word_order = 2;
    CHECK_NEAR(chrf1("the cat.", "the cat.", &o), 100.0, 1e-9);
    CHECK(chrf1("the cat .", "the cat.", &o) == 100.0);  /* same words after splitting, same chars */
    /* the best reference per line wins */
    o.word_order = 0;
    const char *hyp[] = {"abc"}, *a[] = {"xyz"}, *b[] = {"abc"};
    const char *const *refs[] = {a, b};
    ChrfResult r;
    CHECK(chrf_corpus(hyp, refs, 2, 1, &o, &r) == 0);
    CHECK_NEAR(r.score, 100.0, 1e-9);
    char buf[256];
    chrf_format(&r, &o, 2, buf, sizeof buf);
    CHECK_STR(buf, "chrF2 = 100.00");
    chrf_signature(&o, r.nrefs, buf, sizeof buf);
    CHECK_STR(buf, "nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0");
    o.word_order = 2;
    chrf_format(&r, &o, 1, buf, sizeof buf);
    CHECK_STR(buf, "chrF2++ = 100.0");
    CHECK(chrf_corpus(hyp, refs, 2, 0, &o, &r) == 0 && r.score == 0.0);
}

static char *tmp_file(const char *name, const char *content, size_t len) {
    const char *dir = getenv("TFM_TMP");
    char *path = xmalloc(512);
    snprintf(path, 512, "%s/test_bleu_%d_%s", dir ? dir : "/tmp", (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    fwrite(content, 1, len, f);
    fclose(f);
    return path;
}

static void test_read_lines(void) {
    char **lines;
    char *p = tmp_file("a", "a\nb\n", 4);
    CHECK(bleu_read_lines(p, 0, &lines) == 2);
    CHECK_STR(lines[1], "b");
    bleu_free_lines(lines, 2);
    remove(p); free(p);
    p = tmp_file("b", "a\n\nc", 4);          /* no final newline; an empty line */
    long n = bleu_read_lines(p, 0, &lines);
    CHECK(n == 3);
    if (n == 3) { CHECK_STR(lines[1], ""); CHECK_STR(lines[2], "c"); }
    bleu_free_lines(lines, n);
    remove(p); free(p);
    p = tmp_file("c", "", 0);
    CHECK(bleu_read_lines(p, 0, &lines) == 0);
    bleu_free_lines(lines, 0);
    remove(p); free(p);
    /* invalid UTF-8: the file and line are named; or U+FFFD per invalid
     * sequence, as Python's errors='replace' (checked with Python) */
    const char bad[] = "ok\nx\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xf4\x90\x80\x80|\xe2\x82x\n";
    p = tmp_file("d", bad, sizeof bad - 1);
    CHECK(bleu_read_lines(p, 0, &lines) == -1);
    CHECK(strstr(error_message(), p) != NULL);
    CHECK(strstr(error_message(), ":2:") != NULL);
    CHECK(strstr(error_message(), "UTF-8") != NULL);
    log_quiet = 1;   /* (it warns that it replaced) */
    n = bleu_read_lines(p, 1, &lines);
    log_quiet = 0;
    CHECK(n == 2);
#define R "\xef\xbf\xbd"
    if (n == 2) CHECK_STR(lines[1], "x" R R "|" R R R "|" R "|" R R R R "|" R "x");
#undef R
    bleu_free_lines(lines, n);
    remove(p); free(p);
    p = tmp_file("e", "a\0b\n", 4);
    CHECK(bleu_read_lines(p, 0, &lines) == -1);
    CHECK(strstr(error_message(), "NUL") != NULL);
    remove(p); free(p);
    CHECK(bleu_read_lines("/nonexistent/ref.de", 0, &lines) == -1);
    CHECK(strstr(error_message(), "/nonexistent/ref.de") != NULL);
}

/* ---- agreement with sacreBLEU 2.6.0 on tests/bleu-cases ---------------- */
/* The 132 cases (tests/bleu-cases/README.md) ship with the tests; the suite
 * runs from the repository root. TFM_BLEU_DATA points at another copy. */
static const char *bleu_data_dir(void) {
    const char *env = getenv("TFM_BLEU_DATA");
    return env && *env ? env : "tests/bleu-cases";
}

static char **read_case_file(const char *dir, const char *sub, const char *name, long *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s", dir, sub, name);
    char **lines = NULL;
    *n = bleu_read_lines(path, 0, &lines);
    return lines;
}

static void test_sacrebleu_agreement(void) {
    const char *dir = bleu_data_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    size_t len;
    char *text = read_file(path, &len);
    CHECK_MSG(text != NULL, "%s (run from the repository root)", error_message());
    if (!text) return;
    Json cases;
    int parsed = json_parse(text, len, path, &cases) == 0;
    free(text);
    CHECK_MSG(parsed, "%s", error_message());
    if (!parsed) return;
    CHECK(cases.type == JSON_ARRAY && cases.n == 132);
    int ran = 0, agreed = 0;
    double worst = 0;
    for (int c = 0; c < cases.n; c++) {
        const Json *cs = &cases.items[c];
        const Json *jdir = json_get(cs, "dir"), *jrefs = json_get(cs, "refs"), *jargs = json_get(cs, "sacrebleu_args");
        const Json *jscore = json_get(cs, "score"), *jsig = json_get(cs, "signature"), *jverb = json_get(cs, "verbose");
        if (!jdir || !jrefs || !jargs || !jscore || !jsig) { CHECK_MSG(0, "case %d: missing fields", c); continue; }
        BleuOptions bo;
        ChrfOptions co;
        bleu_options_default(&bo);
        chrf_options_default(&co);
        int chrf = 0, ok_args = 1;
        char args[256] = "";
        for (int a = 0; a < jargs->n; a++)
            snprintf(args + strlen(args), sizeof args - strlen(args), " %s", jargs->items[a].text);
        for (int a = 0; a < jargs->n; a++) {   /* sacreBLEU's flags -> options */
            const char *s = jargs->items[a].text, *next = a + 1 < jargs->n ? jargs->items[a + 1].text : NULL;
            if (!strcmp(s, "-lc")) bo.lowercase = 1;
            else if (!strcmp(s, "-tok") && next) { bo.tokenize = next; a++; }
            else if (!strcmp(s, "-s") && next) { bo.smooth = next; a++; }
            else if (!strcmp(s, "-m") && next) { chrf = !strcmp(next, "chrf"); a++; }
            else if (!strcmp(s, "--chrf-word-order") && next) { co.word_order = atoi(next); a++; }
            else ok_args = 0;
        }
        CHECK_MSG(ok_args, "case %d (%s%s): an option this test does not know", c, jdir->text, args);
        long nh, nr[4];
        char **hyp = read_case_file(dir, jdir->text, "hyp", &nh);
        char **refs[4] = {0};
        int nrefs = jrefs->n < 4 ? jrefs->n : 4, ok = hyp != NULL;
        for (int r = 0; r < nrefs; r++) {
            refs[r] = read_case_file(dir, jdir->text, jrefs->items[r].text, &nr[r]);
            ok = ok && refs[r] && nr[r] == nh;
        }
        CHECK_MSG(ok, "case %d: cannot read %s/%s: %s", c, dir, jdir->text, error_message());
        if (ok) {
            const char *const *rp[4];
            for (int r = 0; r < nrefs; r++) rp[r] = (const char *const *)refs[r];
            double want = strtod(jscore->text, NULL), got = -1;
            char sig[256] = "", verbose[256] = "";
            if (chrf) {
                ChrfResult res;
                if (chrf_corpus((const char *const *)hyp, rp, nrefs, nh, &co, &res) == 0) {
                    got = res.score;
                    chrf_signature(&co, res.nrefs, sig, sizeof sig);
                }
            } else {
                BleuResult res;
                if (bleu_corpus((const char *const *)hyp, rp, nrefs, nh, &bo, &res) == 0) {
                    got = res.score;
                    bleu_signature(&bo, res.nrefs, sig, sizeof sig);
                    bleu_verbose(&res, verbose, sizeof verbose);
                }
            }
            int same_verbose = jverb && jverb->type == JSON_STRING ? !strcmp(verbose, jverb->text) : chrf;
            int good = fabs(got - want) <= 1e-4 && !strcmp(sig, jsig->text) && same_verbose;
            CHECK_MSG(good, "case %d (%s refs=%d%s): %.4f vs sacreBLEU %.4f; \"%s\" vs \"%s\"; \"%s\" vs \"%s\"",
                      c, jdir->text, nrefs, args, got, want, sig, jsig->text, verbose,
                      jverb && jverb->type == JSON_STRING ? jverb->text : "(none)");
            ran++;
            agreed += good;
            if (fabs(got - want) > worst) worst = fabs(got - want);
        }
        bleu_free_lines(hyp, nh);
        for (int r = 0; r < nrefs; r++) bleu_free_lines(refs[r], nr[r]);
    }
    CHECK(ran == cases.n);
    printf("sacreBLEU agreement: %d/%d cases from %s, largest score difference %.2g\n", agreed, ran, dir, worst);
    json_free(&cases);
}

int main(void) {
    RUN(test_tokenize_13a);
    RUN(test_tokenize_others);
    RUN(test_clean_and_lowercase);
    RUN(test_bleu_by_hand);
    RUN(test_bleu_multi_ref);
    RUN(test_bleu_empty);
    RUN(test_chrf_by_hand);
    RUN(test_read_lines);
    RUN(test_sacrebleu_agreement);
    return test_summary();
}
