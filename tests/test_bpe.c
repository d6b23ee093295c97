/* test_bpe.c — the BPE tokenizer: learned merge order on a corpus worked out
 * by hand, pre-tokenization, byte fallback, round trips (Multi30k val and a
 * Unicode torture file), invalid UTF-8, determinism across thread counts, a
 * reference encoder, the model file and checkpoints, 1 MB lines. */
#include "test.h"
#include "bpe.h"
#include "checkpoint.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <unistd.h>
#include <zlib.h>

static const char *tmp_dir(void) { return getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp"; }

static char *tmp_path(const char *name) {
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 600, "%s/test_bpe_%d_%s", tmp_dir(), (int)getpid(), name);
    return p;
}

static Bpe *learn(const char *const *files, int n, int vocab, const char *norm, int threads) {
    BpeLearnOptions o = {.vocab_size = vocab, .normalization = norm, .threads = threads, .quiet = 1};
    Bpe *b = bpe_learn(files, n, &o);
    if (!b) fprintf(stderr, "learn failed: %s\n", error_message());
    return b;
}

static Bpe *learn_text(const char *text, int vocab, const char *norm) {
    const char *p = tmp_path("corpus.txt");
    test_write_text(p, text);
    const char *files[] = {p};
    Bpe *b = learn(files, 1, vocab, norm, 1);
    remove(p);
    return b;
}

/* The pieces of encode(text), joined by spaces (static buffer). */
static const char *pieces(const Bpe *b, const char *text) {
    static char out[1 << 16];
    int *ids = NULL, cap = 0;
    int n = bpe_encode(b, text, strlen(text), &ids, &cap, NULL);
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n && at + 64 < sizeof out; i++)
        at += (size_t)snprintf(out + at, sizeof out - at, i ? " %s" : "%s", bpe_piece(b, ids[i]));
    free(ids);
    return out;
}

/* decode(encode(x)) == normalize(x); returns 1 if so (no CHECK: callers count). */
static int round_trips(const Bpe *b, const char *line, size_t len, int *n_tokens) {
    int *ids = NULL, cap = 0;
    int n = bpe_encode(b, line, len, &ids, &cap, NULL);
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= ids[i] >= 4 && ids[i] < bpe_vocab_size(b);   /* no specials, no <unk> */
    char *dec = bpe_decode(b, ids, n), *norm = bpe_normalize(b, line, len, NULL);
    ok &= !strcmp(dec, norm);
    if (!ok) fprintf(stderr, "  round trip: in  [%.*s]\n              out [%s]\n              norm[%s]\n", (int)len, line, dec, norm);
    if (n_tokens) *n_tokens += n;
    free(dec); free(norm); free(ids);
    return ok;
}

/* White space collapsed and trimmed, the normalization of ASCII text. */
static char *collapse_ascii(const char *s) {
    char *out = xmalloc(strlen(s) + 1);
    size_t m = 0;
    int space = 0;
    for (; *s; s++) {
        if (*s == ' ' || (*s >= 9 && *s <= 13)) space = 1;
        else { if (space && m) out[m++] = ' '; space = 0; out[m++] = *s; }
    }
    out[m] = 0;
    return out;
}

static char *model_text(const Bpe *b) { return bpe_to_string(b); }

static const char *after(const char *text, const char *marker) {
    const char *p = strstr(text, marker);
    return p ? p + strlen(marker) : "";
}

/* ---- merge order on Sennrich et al.'s example, worked out by hand ------- */
/* Corpus (normalization none): low x5, lower x2, newest x6, widest x3, i.e.
 * words ▁low 5, ▁lower 2, ▁newest 6, ▁widest 3.
 * Character counts: e 17, w 16, s 9, t 9, l 7, o 7, n 6, d 3, i 3, r 2, so
 * ids ▁ 260, e 261, w 262, s 263, t 264, l 265, o 266, n 267, d 268, i 269,
 * r 270 (count desc, then code point). Pair counts:
 *   (▁,l) 7 (l,o) 7 (o,w) 7 (w,e) 8 (e,r) 2 (▁,n) 6 (n,e) 6 (e,w) 6
 *   (e,s) 9 (s,t) 9 (▁,w) 3 (w,i) 3 (i,d) 3 (d,e) 3
 *  1. (e,s) 9 ties (s,t) 9: smaller left id e < s.  newest: (w,e) 8 -> 2.
 *  2. (es,t) 9.
 *  3. 7s: (▁,l) (l,o) (o,w): left ▁ is the smallest id.
 *  4. (o,w) 7 [o=266] before (▁l,o) 7 [273].
 *  5. (▁l,ow) 7.
 *  6. 6s: (▁,n) (n,e) (e,w) (w,est): ▁ first.
 *  7. (n,e) is gone (▁n took n); (e,w) [261] before (w,est) [262], (▁n,e).
 *  8. (▁n,ew) [276] before (ew,est) [277].   9. (▁new,est).
 * 10. 3s: (▁,w) (w,i) (i,d) (d,est): ▁ first.
 * 11. (d,est) [268] before (i,d) [269], (▁w,i) [280].  12. (i,dest).  13. (▁w,idest).
 * 14. 2s: (e,r) [261] before (▁low,e) [275].  15. (▁low,er).
 * Then every word is one piece: the vocabulary stops at 271 + 15 = 286. */
static const char *HAND_CORPUS =
    "low low low low low\nlower lower\nnewest newest newest newest newest newest\nwidest widest widest\n";
static const char *HAND_MERGES =
    "e s\nes t\n\xE2\x96\x81 l\no w\n\xE2\x96\x81l ow\n\xE2\x96\x81 n\ne w\n\xE2\x96\x81n ew\n\xE2\x96\x81new est\n"
    "\xE2\x96\x81 w\nd est\ni dest\n\xE2\x96\x81w idest\ne r\n\xE2\x96\x81low er\n";

static void test_hand_merges(void) {
    Bpe *b = learn_text(HAND_CORPUS, 1000, "none");
    CHECK(b != NULL);
    if (!b) return;
    CHECK(bpe_vocab_size(b) == 286);
    char *t = model_text(b);
    CHECK(strstr(t, "chars 11\nU+2581 \xE2\x96\x81\nU+0065 e\nU+0077 w\nU+0073 s\nU+0074 t\nU+006C l\nU+006F o\n"
                    "U+006E n\nU+0064 d\nU+0069 i\nU+0072 r\nmerges 15\n") != NULL);
    CHECK_STR(after(t, "merges 15\n"), HAND_MERGES);
    CHECK_STR(bpe_piece(b, 275), "\xE2\x96\x81low");
    CHECK_STR(bpe_piece(b, 283), "\xE2\x96\x81widest");
    /* encode replays the merges in rank order */
    CHECK_STR(pieces(b, "lowest"), "\xE2\x96\x81low est");
    CHECK_STR(pieces(b, "newer"), "\xE2\x96\x81new er");
    CHECK_STR(pieces(b, "  widest\tlow "), "\xE2\x96\x81widest \xE2\x96\x81low");
    free(t);
    bpe_free(b);
    /* a smaller vocabulary stops after the first merges, same order */
    b = learn_text(HAND_CORPUS, 276, "none");
    CHECK(b && bpe_vocab_size(b) == 276);
    if (b) {
        t = model_text(b);
        CHECK_STR(after(t, "merges 5\n"), "e s\nes t\n\xE2\x96\x81 l\no w\n\xE2\x96\x81l ow\n");
        free(t);
        bpe_free(b);
    }
}

/* ---- byte fallback, specials, empty lines ------------------------------- */
static void test_byte_fallback(void) {
    Bpe *b = learn_text(HAND_CORPUS, 1000, "none");
    if (!b) { CHECK(0); return; }
    CHECK(bpe_piece_id(b, "<pad>") == TOK_PAD && bpe_piece_id(b, "<unk>") == TOK_UNK);
    CHECK(bpe_piece_id(b, "<s>") == TOK_BOS && bpe_piece_id(b, "</s>") == TOK_EOS);
    CHECK(bpe_piece_id(b, "<0x00>") == 4 && bpe_piece_id(b, "<0xFF>") == 259);
    CHECK(bpe_piece_id(b, "\xE2\x96\x81") == 260);
    /* ß and x are not in the alphabet: bytes. A literal ▁ is never. */
    CHECK_STR(pieces(b, "low\xC3\x9F \xE2\x96\x81x"),
              "\xE2\x96\x81low <0xC3> <0x9F> \xE2\x96\x81 <0xE2> <0x96> <0x81> <0x78>");
    int n = 0;
    CHECK(round_trips(b, "low\xC3\x9F \xE2\x96\x81x", strlen("low\xC3\x9F \xE2\x96\x81x"), &n));
    CHECK(round_trips(b, "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80!", 12, &n));
    /* specials are dropped by decode; a lone byte token or NUL becomes U+FFFD */
    int ids[] = {TOK_BOS, 275, TOK_EOS, TOK_PAD, TOK_UNK};
    char *s = bpe_decode(b, ids, 5);
    CHECK_STR(s, "low");
    free(s);
    int lone[] = {275, 4 + 0xC3, 4 + 'a', 4 + 0};
    s = bpe_decode(b, lone, 4);
    CHECK_STR(s, "low\xEF\xBF\xBD" "a\xEF\xBF\xBD");
    free(s);
    /* empty and blank lines encode to nothing and decode to "" */
    int *v = NULL, cap = 0;
    CHECK(bpe_encode(b, "", 0, &v, &cap, NULL) == 0);
    CHECK(bpe_encode(b, " \t \r", 4, &v, &cap, NULL) == 0);
    s = bpe_decode(b, v, 0);
    CHECK_STR(s, "");
    free(s);
    free(v);
    bpe_free(b);
    /* the smallest vocabulary: only the marker is a character */
    b = learn_text(HAND_CORPUS, 261, "nfkc");
    CHECK(b && bpe_vocab_size(b) == 261);
    if (b) {
        CHECK_STR(pieces(b, "ab c"), "\xE2\x96\x81 <0x61> <0x62> \xE2\x96\x81 <0x63>");
        CHECK(round_trips(b, "ab c", 4, NULL));
        bpe_free(b);
    }
    BpeLearnOptions o = {.vocab_size = 260, .normalization = "nfkc", .threads = 1, .quiet = 1};
    const char *none[] = {"/nonexistent"};
    CHECK(bpe_learn(none, 1, &o) == NULL && strstr(error_message(), "261"));
}

/* ---- Unicode torture -------------------------------------------------- */
static const char *TORTURE[] = {
    "e\xCC\x81t\xC3\xA9 cafe\xCC\x81 na\xC3\xAFve",                                   /* combining acute vs precomposed */
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0\xE3\x80\x82",   /* 日本語の文章。 */
    "\xE4\xB8\xAD\xE6\x96\x87 \xE6\xB5\x8B\xE8\xAF\x95",                               /* 中文 测试 */
    "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD7\xA2\xD7\x95\xD7\x9C\xD7\x9D",               /* שלום עולם */
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE2\x80\x8F(RTL mark)",                 /* مرحبا, RLM */
    "family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 done",  /* ZWJ sequence */
    "thumbs \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD flag \xF0\x9F\x87\xA9\xF0\x9F\x87\xAA",     /* skin tone, flag */
    "nbsp\xC2\xA0here and\xE3\x80\x80ideographic space",
    "tab\there  \t  many   spaces  ",
    "ctrl\x01\x02 char \x7f del \x1b[0m",
    "soft\xC2\xADhyphen zero\xE2\x80\x8Bwidth bom\xEF\xBB\xBF",
    "\xEF\xAC\x81 ligature \xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3 fullwidth x\xC2\xB2 \xE2\x85\xAB",  /* ﬁ ＡＢＣ x² Ⅻ */
    "literal \xE2\x96\x81 marker \xE2\x96\x81\xE2\x96\x81 twice",
    "replacement \xEF\xBF\xBD char, private \xEE\x80\x80 use",
    "math \xF0\x9D\x94\x98\xF0\x9D\x94\xAB\xF0\x9D\x94\xA6 letters",                      /* 𝔘𝔫𝔦 */
    "2,500 U.S. $5.00 e-mail 3.14159 1\xEF\xB8\x8F\xE2\x83\xA3",                         /* keycap 1️⃣ */
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB",         /* 한국어, decomposed 한 */
    "",
    "   ",
    "Zalgo: Z\xCD\x91\xCD\x97" "a\xCC\x80\xCC\x81l\xCC\x82g\xCC\x83o",
    "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80",          /* हिन्दी */
    "\xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC \xC3\x9F\xE1\xBA\x9E",  /* Ελληνικά ßẞ */
};
#define NTORTURE ((int)(sizeof TORTURE / sizeof TORTURE[0]))

static const char *torture_file(int copies) {
    const char *p = tmp_path("torture.txt");
    FILE *f = fopen(p, "wb");
    for (int c = 0; c < copies; c++)
        for (int i = 0; i < NTORTURE; i++) fprintf(f, "%s\n", TORTURE[i]);
    fclose(f);
    return p;
}

static void test_torture(void) {
    const char *p = torture_file(3);
    const char *files[] = {p};
    static const char *norms[] = {"nfkc", "nfc", "none"};
    for (int k = 0; k < 3; k++) {
        /* thrice the file and room to spare: learning runs until every word is
         * one piece, so encode shows the word split itself */
        Bpe *b = learn(files, 1, 5000, norms[k], 2);
        CHECK(b != NULL);
        if (!b) continue;
        int ok = 1;
        for (int i = 0; i < NTORTURE; i++) ok &= round_trips(b, TORTURE[i], strlen(TORTURE[i]), NULL);
        CHECK_MSG(ok, "torture round trips (%s)", norms[k]);
        CHECK_STR(pieces(b, TORTURE[15]),
                  "\xE2\x96\x81" "2 , 500 \xE2\x96\x81U . S . \xE2\x96\x81$ 5 . 00 \xE2\x96\x81" "e - mail \xE2\x96\x81" "3 . 14159 "
                  "\xE2\x96\x81" "1\xEF\xB8\x8F\xE2\x83\xA3");
        CHECK_STR(pieces(b, TORTURE[5]), "\xE2\x96\x81" "family \xE2\x96\x81\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
                                         "\xF0\x9F\x91\xA7 \xE2\x96\x81" "done");
        CHECK_STR(pieces(b, TORTURE[6]), "\xE2\x96\x81thumbs \xE2\x96\x81\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xE2\x96\x81" "flag "
                                         "\xE2\x96\x81\xF0\x9F\x87\xA9\xF0\x9F\x87\xAA");
        CHECK_STR(pieces(b, TORTURE[1]), "\xE2\x96\x81\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0 \xE3\x80\x82");
        CHECK_STR(pieces(b, TORTURE[4]), "\xE2\x96\x81\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE2\x96\x81\xE2\x80\x8F( RTL \xE2\x96\x81mark )");
        CHECK_STR(pieces(b, TORTURE[12]), "\xE2\x96\x81literal \xE2\x96\x81 <0xE2> <0x96> <0x81> \xE2\x96\x81marker \xE2\x96\x81 <0xE2> <0x96> "
                                          "<0x81> <0xE2> <0x96> <0x81> \xE2\x96\x81twice");
        CHECK_STR(pieces(b, TORTURE[9]), "\xE2\x96\x81" "ctrl <0x01> <0x02> \xE2\x96\x81" "char \xE2\x96\x81 <0x7F> \xE2\x96\x81" "del "
                                         "\xE2\x96\x81 <0x1B> [ 0 m");
        CHECK_STR(pieces(b, TORTURE[10]), "\xE2\x96\x81soft\xC2\xADhyphen \xE2\x96\x81zero\xE2\x80\x8Bwidth \xE2\x96\x81" "bom\xEF\xBB\xBF");
        /* the normalizations themselves */
        char *s = bpe_normalize(b, TORTURE[11], strlen(TORTURE[11]), NULL);
        if (k == 0) CHECK_STR(s, "fi ligature ABC fullwidth x2 XII");
        else CHECK_STR(s, TORTURE[11]);
        free(s);
        s = bpe_normalize(b, TORTURE[0], strlen(TORTURE[0]), NULL);
        CHECK_STR(s, k < 2 ? "\xC3\xA9t\xC3\xA9 caf\xC3\xA9 na\xC3\xAFve" : TORTURE[0]);
        free(s);
        s = bpe_normalize(b, TORTURE[16], strlen(TORTURE[16]), NULL);
        if (k < 2) CHECK_STR(s, "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xED\x95\x9C");
        free(s);
        s = bpe_normalize(b, TORTURE[14], strlen(TORTURE[14]), NULL);
        if (k == 0) CHECK_STR(s, "math Uni letters");
        free(s);
        s = bpe_normalize(b, TORTURE[7], strlen(TORTURE[7]), NULL);   /* white space, whatever the normalization */
        CHECK_STR(s, "nbsp here and ideographic space");
        free(s);
        s = bpe_normalize(b, TORTURE[8], strlen(TORTURE[8]), NULL);
        CHECK_STR(s, "tab here many spaces");
        free(s);
        /* the model file keeps all these characters readable and exact */
        char *t = bpe_to_string(b);
        Bpe *b2 = bpe_from_string(t, "torture.model");
        CHECK(b2 != NULL);
        if (b2) {
            char *t2 = bpe_to_string(b2);
            CHECK_STR(t2, t);
            free(t2);
            bpe_free(b2);
        }
        free(t);
        bpe_free(b);
    }
    /* a model that never saw these scripts: everything round-trips by bytes */
    Bpe *b = learn_text(HAND_CORPUS, 300, "nfkc");
    int ok = 1;
    for (int i = 0; b && i < NTORTURE; i++) ok &= round_trips(b, TORTURE[i], strlen(TORTURE[i]), NULL);
    CHECK(b && ok);
    bpe_free(b);
    remove(p);
}

/* ---- invalid UTF-8 ------------------------------------------------------ */
static void check_invalid(const Bpe *b, const char *in, size_t len, const char *want) {
    int *ids = NULL, cap = 0, bad = 0;
    int n = bpe_encode(b, in, len, &ids, &cap, &bad);
    char *s = bpe_decode(b, ids, n);
    CHECK(bad == 1);
    CHECK_STR(s, want);
    free(s);
    free(ids);
}

static void test_invalid_utf8(void) {
    Bpe *b = learn_text(HAND_CORPUS, 1000, "nfkc");
    if (!b) { CHECK(0); return; }
    check_invalid(b, "low\xFFlow", 7, "low\xEF\xBF\xBDlow");
    check_invalid(b, "low \xE2\x96", 6, "low \xEF\xBF\xBD");                        /* truncated: one U+FFFD */
    check_invalid(b, "\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");     /* surrogate: three */
    check_invalid(b, "\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD");                      /* overlong */
    check_invalid(b, "\xF4\x90\x80\x80", 4, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); /* > U+10FFFF */
    check_invalid(b, "a\0b", 3, "a\xEF\xBF\xBD" "b");                                 /* NUL */
    int *ids = NULL, cap = 0, bad = 7;
    bpe_encode(b, "low \xC3\xA9", 6, &ids, &cap, &bad);
    CHECK(bad == 0);
    free(ids);
    bpe_free(b);

    /* learning: an error naming file, line, byte; or skip and count */
    const char *p = tmp_path("bad.txt");
    test_write_text(p, "good line\nsecond line\nbad \xC3\x28 here\nlast\n");
    const char *files[] = {p};
    BpeLearnOptions o = {.vocab_size = 300, .normalization = "nfkc", .threads = 2, .quiet = 1};
    b = bpe_learn(files, 1, &o);
    CHECK(b == NULL);
    char want[700];
    snprintf(want, sizeof want, "%s:3: invalid UTF-8 (byte 0xC3 at byte 4 of the line, file offset 26)", p);
    CHECK_MSG(strstr(error_message(), want) != NULL, "got: %s", error_message());
    o.skip_invalid = 1;
    b = bpe_learn(files, 1, &o);
    CHECK(b != NULL);
    if (b) CHECK(bpe_piece_id(b, "(") < 0);   /* the bad line's characters were not counted */
    bpe_free(b);
    remove(p);
    const char *missing[] = {"/nonexistent/corpus.txt"};
    CHECK(bpe_learn(missing, 1, &o) == NULL && strstr(error_message(), "/nonexistent/corpus.txt"));
}

/* ---- Multi30k val: round trips, determinism, reference encoder --------- */
static int read_lines(const char *path, char ***lines) {
    char *text = read_file(path, NULL);
    if (!text) return -1;
    int n = 0, cap = 0;
    *lines = NULL;
    for (char *s = text, *nl; *s; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl) nl = s + strlen(s);
        if (n == cap) { cap = cap ? 2 * cap : 1024; *lines = xrealloc(*lines, (size_t)cap * sizeof **lines); }
        (*lines)[n++] = strndup(s, (size_t)(nl - s));
        if (!*nl) break;
    }
    free(text);
    return n;
}

static void free_lines(char **l, int n) { for (int i = 0; i < n; i++) free(l[i]); free(l); }

/* A reference BPE for one word, on strings: symbols are the characters (the
 * marker first), then repeatedly the pair of adjacent symbols whose "left
 * right" line comes first in the model's merge list is joined. */
typedef struct { const char *pair; int rank; } RefMerge;
static int ref_cmp(const void *a, const void *b) { return strcmp(((const RefMerge *)a)->pair, ((const RefMerge *)b)->pair); }

static char *reference_encode_word(const RefMerge *sorted, int nmerges, const char *word) {
    char *sym[256];
    int n = 0;
    sym[n++] = xstrdup("\xE2\x96\x81");
    for (const char *s = word; *s; s++) sym[n++] = strndup(s, 1);   /* ASCII words only */
    for (;;) {
        int best = -1, bi = -1;
        for (int i = 0; i + 1 < n; i++) {
            char pair[512];
            snprintf(pair, sizeof pair, "%s %s", sym[i], sym[i + 1]);
            RefMerge key = {pair, 0}, *m = bsearch(&key, sorted, (size_t)nmerges, sizeof key, ref_cmp);
            if (m && (best < 0 || m->rank < best)) { best = m->rank; bi = i; }
        }
        if (best < 0) break;
        char *j = xmalloc(strlen(sym[bi]) + strlen(sym[bi + 1]) + 1);
        strcpy(j, sym[bi]);
        strcat(j, sym[bi + 1]);
        free(sym[bi]);
        free(sym[bi + 1]);
        sym[bi] = j;
        memmove(sym + bi + 1, sym + bi + 2, (size_t)(n - bi - 2) * sizeof *sym);
        n--;
    }
    size_t len = 0;
    for (int i = 0; i < n; i++) len += strlen(sym[i]) + 1;
    char *out = xmalloc(len + 1);
    out[0] = 0;
    for (int i = 0; i < n; i++) { if (i) strcat(out, " "); strcat(out, sym[i]); free(sym[i]); }
    return out;
}

/* BPE-dropout on the hand-worked model: the exact distribution of one word's
 * segmentations. "low" starts as ▁ l o w with candidates (▁,l) rank 2 and
 * (o,w) rank 3, then (▁l,ow) rank 4 once both are made. At each step every
 * candidate is left out with probability p and the earliest of the rest is
 * applied; none left: done. With q = 1 - p:
 *   ▁low   q·q·q + p·q·q·q          ▁l ow   q·q·p + p·q·q·p
 *   ▁l o w q·p                      ▁ l ow  p·q·p
 *   ▁ l o w  p·p
 * (at p = 0.5: 0.1875, 0.1875, 0.25, 0.125, 0.25). Counted over 20,000
 * seeds, each frequency is within 0.02 of its probability: the standard
 * error is at most sqrt(0.25/20000) = 0.0035, so 0.02 is over 5 of them. */
static void test_dropout(void) {
    Bpe *b = learn_text(HAND_CORPUS, 1000, "none");
    CHECK(b != NULL);
    if (!b) return;
    static const char *const seg[] = {"\xE2\x96\x81low", "\xE2\x96\x81l ow", "\xE2\x96\x81l o w",
                                      "\xE2\x96\x81 l ow", "\xE2\x96\x81 l o w"};
    for (int k = 0; k < 3; k++) {
        double p = k == 0 ? 0.5 : k == 1 ? 0.1 : 0.8, q = 1 - p;
        double want[5] = {q * q * q + p * q * q * q, q * q * p + p * q * q * p, q * p, p * q * p, p * p};
        long count[5] = {0}, other = 0;
        enum { SEEDS = 20000 };
        for (int seed = 0; seed < SEEDS; seed++) {
            int *ids = NULL, cap = 0, n = bpe_encode_dropout(b, "low", 3, &ids, &cap, NULL, (float)p, (uint64_t)seed);
            char got[64] = "";
            for (int i = 0, at = 0; i < n; i++) at += snprintf(got + at, sizeof got - (size_t)at, i ? " %s" : "%s", bpe_piece(b, ids[i]));
            int j = 0;
            while (j < 5 && strcmp(got, seg[j])) j++;
            if (j < 5) count[j]++;
            else other++;
            free(ids);
        }
        CHECK_MSG(other == 0, "p %.1f: %ld segmentations of 'low' that cannot happen", p, other);
        for (int j = 0; j < 5; j++)
            CHECK_MSG(fabs((double)count[j] / SEEDS - want[j]) < 0.02, "p %.1f: '%s' %.4f of the time, want %.4f", p,
                      seg[j], (double)count[j] / SEEDS, want[j]);
    }
    /* p = 0 is the plain encoding; p = 1 leaves characters; a seed gives
     * the same ids every time; decode gives the text back in every case */
    const char *line = "lowest newer  widest lower low newest";
    int *a = NULL, ca = 0, *d = NULL, cd = 0;
    int na = bpe_encode(b, line, strlen(line), &a, &ca, NULL);
    int nd = bpe_encode_dropout(b, line, strlen(line), &d, &cd, NULL, 0, 42);
    CHECK(na == nd && !memcmp(a, d, (size_t)na * sizeof *a));
    nd = bpe_encode_dropout(b, line, strlen(line), &d, &cd, NULL, 1, 42);
    CHECK(nd == (int)strlen("lowestnewerwidestlowerlownewest") + 6);
    int same = 1, differs = 0;
    for (int seed = 0; seed < 50; seed++) {
        int *x = NULL, cx = 0, *y = NULL, cy = 0;
        int nx = bpe_encode_dropout(b, line, strlen(line), &x, &cx, NULL, 0.3f, (uint64_t)seed);
        int ny = bpe_encode_dropout(b, line, strlen(line), &y, &cy, NULL, 0.3f, (uint64_t)seed);
        same &= nx == ny && !memcmp(x, y, (size_t)nx * sizeof *x);
        differs += nx != na || memcmp(x, a, (size_t)na * sizeof *a) != 0;
        char *dec = bpe_decode(b, x, nx);
        CHECK_STR(dec, "lowest newer widest lower low newest");
        free(dec); free(x); free(y);
    }
    CHECK(same);
    CHECK_MSG(differs > 40, "p 0.3 changed the segmentation of %d of 50 seeds", differs);
    free(a); free(d);
    bpe_free(b);
}

static void test_multi30k(void) {
    const char *dir = test_data_dir();
    if (!dir) { SKIP("Multi30k not found (../shared/data/multi30k): no round trips on real data"); return; }
    static const char *langs[] = {"en", "de", "fr"};
    char paths[3][600];
    const char *files[3];
    for (int i = 0; i < 3; i++) { snprintf(paths[i], 600, "%s/val.%s", dir, langs[i]); files[i] = paths[i]; }
    double t0 = now_seconds();
    Bpe *b1 = learn(files, 3, 2000, "nfkc", 1), *b2 = learn(files, 3, 2000, "nfkc", 2);
    double t_learn = now_seconds() - t0;
    CHECK(b1 && b2);
    if (!b1 || !b2) { bpe_free(b1); bpe_free(b2); return; }
    char *s1 = bpe_to_string(b1), *s2 = bpe_to_string(b2);
    CHECK_MSG(!strcmp(s1, s2), "model differs between 1 and 2 threads");
    CHECK(bpe_vocab_size(b1) == 2000);

    for (int f = 0; f < 3; f++) {
        char **lines;
        int n = read_lines(files[f], &lines), bad = 0, bad_ascii = 0, tokens = 0, words = 0;
        CHECK(n > 1000);
        for (int i = 0; i < n; i++) {
            if (!round_trips(b1, lines[i], strlen(lines[i]), &tokens)) bad++;
            int ascii = 1;
            for (const char *s = lines[i]; *s; s++) ascii &= (unsigned char)*s < 0x80;
            if (ascii) {   /* independent check: NFKC leaves ASCII alone */
                int *ids = NULL, cap = 0;
                int k = bpe_encode(b1, lines[i], strlen(lines[i]), &ids, &cap, NULL);
                char *dec = bpe_decode(b1, ids, k), *want = collapse_ascii(lines[i]);
                bad_ascii += strcmp(dec, want) != 0;
                free(dec); free(want); free(ids);
            }
            for (const char *s = lines[i]; *s; s++) words += (s == lines[i] || s[-1] == ' ') && *s != ' ';
        }
        CHECK_MSG(bad == 0, "val.%s: %d of %d lines do not round-trip", langs[f], bad, n);
        CHECK_MSG(bad_ascii == 0, "val.%s: %d ASCII lines differ from their collapsed input", langs[f], bad_ascii);
        CHECK_MSG(tokens < 2 * words, "val.%s: %d tokens for %d words", langs[f], tokens, words);

        /* the same ids from 8 threads at once */
        int **ids = xcalloc((size_t)n, sizeof *ids), *cnt = xcalloc((size_t)n, sizeof *cnt), diff = 0;
        #pragma omp parallel for num_threads(8) schedule(dynamic, 7)
        for (int i = 0; i < n; i++) {
            int cap = 0;
            cnt[i] = bpe_encode(b1, lines[i], strlen(lines[i]), &ids[i], &cap, NULL);
        }
        for (int i = 0; i < n; i++) {
            int *v = NULL, cap = 0, k = bpe_encode(b1, lines[i], strlen(lines[i]), &v, &cap, NULL);
            diff += k != cnt[i] || memcmp(v, ids[i], (size_t)k * sizeof *v) != 0;
            free(v);
            free(ids[i]);
        }
        free(ids); free(cnt);
        CHECK_MSG(diff == 0, "val.%s: %d lines encode differently in parallel", langs[f], diff);

        /* BPE-dropout 0.1 on real text: still decodes to the normalized
         * line, more tokens than the plain encoding, no special tokens */
        int dropped_tokens = 0, bad_dropout = 0;
        for (int i = 0; i < n; i++) {
            int *v = NULL, cap = 0, k = bpe_encode_dropout(b1, lines[i], strlen(lines[i]), &v, &cap, NULL, 0.1f, (uint64_t)i);
            char *dec = bpe_decode(b1, v, k), *norm = bpe_normalize(b1, lines[i], strlen(lines[i]), NULL);
            bad_dropout += strcmp(dec, norm) != 0;
            for (int j = 0; j < k; j++) bad_dropout += v[j] < 4;
            dropped_tokens += k;
            free(dec); free(norm); free(v);
        }
        CHECK_MSG(bad_dropout == 0, "val.%s: %d BPE-dropout lines do not decode to their text", langs[f], bad_dropout);
        CHECK_MSG(dropped_tokens > tokens, "val.%s: BPE-dropout 0.1 gave %d tokens, the plain encoding %d", langs[f],
                  dropped_tokens, tokens);
        free_lines(lines, n);
    }

    /* reference encoder on the words of val.en that are plain ASCII letters */
    RefMerge *merges = NULL;
    int nm = 0, cap = 0;
    char *m = strchr(strstr(s1, "\nmerges ") + 1, '\n') + 1;
    for (char *nl; (nl = strchr(m, '\n')); m = nl + 1) {
        if (nm == cap) { cap = cap ? 2 * cap : 1024; merges = xrealloc(merges, (size_t)cap * sizeof *merges); }
        merges[nm] = (RefMerge){strndup(m, (size_t)(nl - m)), nm};
        nm++;
    }
    qsort(merges, (size_t)nm, sizeof *merges, ref_cmp);
    CHECK(nm > 1000);
    char **lines;
    int n = read_lines(files[0], &lines), checked = 0, wrong = 0;
    for (int i = 0; i < n && checked < 1500; i++) {
        for (char *w = strtok(lines[i], " "); w && checked < 1500; w = strtok(NULL, " ")) {
            int letters = strlen(w) < 200;
            for (char *c = w; *c; c++) letters &= (*c | 32) >= 'a' && (*c | 32) <= 'z';
            if (!letters) continue;
            char *want = reference_encode_word(merges, nm, w);
            const char *got = pieces(b1, w);
            if (strcmp(want, got)) { if (wrong++ < 5) fprintf(stderr, "  %s: reference [%s] tfm [%s]\n", w, want, got); }
            free(want);
            checked++;
        }
    }
    CHECK(checked == 1500);
    CHECK_MSG(wrong == 0, "%d of %d words differ from the reference encoder", wrong, checked);
    free_lines(lines, n);
    for (int i = 0; i < nm; i++) free((char *)merges[i].pair);
    free(merges);
    free(s1); free(s2);
    bpe_free(b1); bpe_free(b2);
    if (t_learn > 10) fprintf(stderr, "note: learning on val took %.1fs\n", t_learn);
}

/* ---- the incremental learner against a naive one ------------------------ */
/* Recounts every pair at every step (what the incremental updates avoid);
 * same rules: ids ▁ 260, then characters by count desc / code point, then
 * new strings in merge order; the best pair is the most frequent, ties to the
 * smaller left id, then right id; merges applied left to right. Lines are
 * lowercase ASCII words separated by single spaces. Returns the merge lines. */
typedef struct { char *w; int count; int n; int sym[64]; } RefWord;
static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *reference_learn(char **lines, int nlines, int vocab) {
    int cap = 0, nall = 0;
    char **all = NULL;
    for (int i = 0; i < nlines; i++) {
        char *copy = xstrdup(lines[i]);
        for (char *w = strtok(copy, " "); w; w = strtok(NULL, " ")) {
            if (nall == cap) { cap = cap ? 2 * cap : 4096; all = xrealloc(all, (size_t)cap * sizeof *all); }
            all[nall++] = xstrdup(w);
        }
        free(copy);
    }
    qsort(all, (size_t)nall, sizeof *all, str_cmp);
    RefWord *words = xcalloc((size_t)nall, sizeof *words);
    int nw = 0;
    for (int i = 0; i < nall; i++) {
        if (nw && !strcmp(words[nw - 1].w, all[i])) { words[nw - 1].count++; free(all[i]); }
        else words[nw++] = (RefWord){all[i], 1, 0, {0}};
    }
    free(all);
    long cc[128] = {0};
    for (int i = 0; i < nw; i++) for (char *c = words[i].w; *c; c++) cc[(int)*c] += words[i].count;
    int K = vocab - 260, nsym = 1;
    char **str = xcalloc((size_t)K, sizeof *str);
    str[0] = xstrdup("\xE2\x96\x81");
    for (;;) {   /* characters: count desc, then code point */
        int best = -1;
        for (int c = 1; c < 128; c++) if (cc[c] && (best < 0 || cc[c] > cc[best])) best = c;
        if (best < 0) break;
        char s[2] = {(char)best, 0};
        str[nsym++] = xstrdup(s);
        cc[best] = 0;
    }
    for (int i = 0; i < nw; i++) {
        words[i].sym[words[i].n++] = 260;
        for (char *c = words[i].w; *c; c++)
            for (int id = 1; id < nsym; id++) if (str[id][0] == *c && !str[id][1]) words[i].sym[words[i].n++] = 260 + id;
    }
    long *pc = xmalloc((size_t)K * K * sizeof *pc);
    size_t olen = 0, ocap = 1 << 16;
    char *out = xmalloc(ocap);
    out[0] = 0;
    while (260 + nsym < vocab) {
        memset(pc, 0, (size_t)K * K * sizeof *pc);
        for (int i = 0; i < nw; i++)
            for (int j = 0; j + 1 < words[i].n; j++) pc[(words[i].sym[j] - 260) * K + words[i].sym[j + 1] - 260] += words[i].count;
        long best = 0;
        int ba = 0, bb = 0;
        for (int a = 0; a < nsym; a++)
            for (int b = 0; b < nsym; b++)
                if (pc[a * K + b] > best) { best = pc[a * K + b]; ba = a; bb = b; }
        if (best < 2) break;
        char *m = xmalloc(strlen(str[ba]) + strlen(str[bb]) + 1);
        strcpy(m, str[ba]);
        strcat(m, str[bb]);
        int z = -1;
        for (int id = 0; id < nsym; id++) if (!strcmp(str[id], m)) z = id;
        if (z < 0) { z = nsym; str[nsym++] = m; } else free(m);
        if (olen + strlen(str[ba]) + strlen(str[bb]) + 3 > ocap) { ocap *= 2; out = xrealloc(out, ocap); }
        olen += (size_t)sprintf(out + olen, "%s %s\n", str[ba], str[bb]);
        for (int i = 0; i < nw; i++) {
            int j = 0, *s = words[i].sym;
            for (int k = 0; k < words[i].n;) {
                if (k + 1 < words[i].n && s[k] == 260 + ba && s[k + 1] == 260 + bb) { s[j++] = 260 + z; k += 2; }
                else s[j++] = s[k++];
            }
            words[i].n = j;
        }
    }
    for (int i = 0; i < nw; i++) free(words[i].w);
    for (int i = 0; i < nsym; i++) free(str[i]);
    free(words); free(str); free(pc);
    return out;
}

static void test_reference_learner(void) {
    /* words built from a few syllables: many ties, overlapping pairs (aaa), and
     * merge results reached by two paths (k+ak vs ka+k) */
    static const char *syl[] = {"ka", "to", "ri", "a", "k", "aa", "n", "o", "e", "ki", "ak"};
    Rng r;
    rng_seed(&r, 11);
    int n = 3000;
    char **lines = xmalloc((size_t)n * sizeof *lines);
    const char *p = tmp_path("ref.txt");
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < n; i++) {
        char line[512];
        size_t at = 0;
        int words = 1 + (int)(rng_u64(&r) % 10);
        for (int w = 0; w < words; w++) {
            int k = 1 + (int)(rng_u64(&r) % 5);
            if (w) line[at++] = ' ';
            for (int j = 0; j < k; j++) at += (size_t)sprintf(line + at, "%s", syl[rng_u64(&r) % 11]);
        }
        line[at] = 0;
        lines[i] = xstrdup(line);
        fprintf(f, "%s\n", line);
    }
    fclose(f);
    const char *files[] = {p};
    int vocab = 800;
    Bpe *b = learn(files, 1, vocab, "nfkc", 2);
    char *want = reference_learn(lines, n, vocab);
    CHECK(b != NULL);
    if (b) {
        char *t = bpe_to_string(b);
        const char *got = strchr(strstr(t, "\nmerges ") + 1, '\n') + 1;
        CHECK_MSG(!strcmp(got, want), "incremental and naive learners disagree");
        CHECK(strlen(want) > 2000);
        free(t);
    }
    free(want);
    bpe_free(b);
    free_lines(lines, n);
    remove(p);
}

/* Determinism on generated text with many ties, and .gz input. */
static void test_determinism_and_gz(void) {
    const char *p = tmp_path("gen.txt"), *pz = tmp_path("gen.txt.gz");
    FILE *f = fopen(p, "wb");
    gzFile gz = gzopen(pz, "wb");
    Rng r;
    rng_seed(&r, 7);
    static const char *syl[] = {"ka", "to", "ri", "\xC3\xA9", "mu", "\xE6\x97\xA5", "se", "n", "9", ",", "o"};
    for (int i = 0; i < 6000; i++) {
        char line[256];
        size_t at = 0;
        int words = 1 + (int)(rng_u64(&r) % 12);
        for (int w = 0; w < words; w++) {
            int k = 1 + (int)(rng_u64(&r) % 4);
            for (int j = 0; j < k; j++) at += (size_t)snprintf(line + at, sizeof line - at, "%s", syl[rng_u64(&r) % 11]);
            line[at++] = ' ';
        }
        line[at - 1] = '\n';
        fwrite(line, 1, at, f);
        gzwrite(gz, line, (unsigned)at);
    }
    fclose(f);
    gzclose(gz);
    const char *files[] = {p}, *zfiles[] = {pz};
    Bpe *b1 = learn(files, 1, 700, "nfkc", 1), *b2 = learn(files, 1, 700, "nfkc", 2),
        *b3 = learn(zfiles, 1, 700, "nfkc", 3);
    CHECK(b1 && b2 && b3);
    if (b1 && b2 && b3) {
        char *s1 = bpe_to_string(b1), *s2 = bpe_to_string(b2), *s3 = bpe_to_string(b3);
        CHECK_MSG(!strcmp(s1, s2), "1 vs 2 threads");
        CHECK_MSG(!strcmp(s1, s3), "plain vs .gz, 3 threads");
        free(s1); free(s2); free(s3);
    }
    bpe_free(b1); bpe_free(b2); bpe_free(b3);
    remove(p);
    remove(pz);
}

/* ---- the model file and checkpoints ------------------------------------- */
static void expect_parse_error(const char *text, const char *want) {
    Bpe *b = bpe_from_string(text, "m.bpe");
    CHECK_MSG(b == NULL && strstr(error_message(), want), "want '%s', got '%s'", want, b ? "(parsed)" : error_message());
    bpe_free(b);
}

static void test_model_file(void) {
    Bpe *b = learn_text(HAND_CORPUS, 1000, "nfc");
    if (!b) { CHECK(0); return; }
    char *t = bpe_to_string(b);
    CHECK(!strncmp(t, "tfm-bpe 1\n", 10));
    CHECK(strstr(t, "\nnormalization nfc\nvocab_size 286\nchars 11\n") != NULL);
    const char *p = tmp_path("m.bpe");
    CHECK(bpe_save(b, p) == 0);
    Bpe *c = bpe_load(p);
    CHECK(c != NULL);
    if (c) {
        char *t2 = bpe_to_string(c);
        CHECK_STR(t2, t);
        CHECK_STR(bpe_normalization(c), "nfc");
        CHECK_STR(pieces(c, "lowest newer"), "\xE2\x96\x81low est \xE2\x96\x81new er");
        free(t2);
        bpe_free(c);
    }
    /* \r\n line ends and comments are accepted */
    size_t n = strlen(t);
    char *crlf = xmalloc(2 * n + 1), *q = crlf;
    for (const char *s = t; *s; s++) { if (*s == '\n') *q++ = '\r'; *q++ = *s; }
    *q = 0;
    c = bpe_from_string(crlf, "crlf");
    CHECK(c && bpe_vocab_size(c) == 286);
    bpe_free(c);
    free(crlf);

    expect_parse_error("hello\n", "m.bpe:1: expected 'tfm-bpe 1'");
    expect_parse_error("tfm-bpe 3\n", "m.bpe:1: BPE model format version '3'");
    expect_parse_error("tfm-bpe 1\nnormalization nfd\n", "m.bpe:2: expected 'normalization");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 262\nchars 2\nU+2581 x\n", "m.bpe:5: file ends after 1 of 2 chars");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 262\nchars 2\nU+0061 a\nU+2581\n", "m.bpe:5: the first character must be U+2581");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 262\nchars 2\nU+2581\nU+0020\n", "m.bpe:6: U+0020 cannot be in the alphabet");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 262\nchars 2\nU+2581\nhello\n", "m.bpe:6: expected a character line");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 263\nchars 2\nU+2581\nU+0061 a\nmerges 1\n\xE2\x96\x81 b\n",
                       "m.bpe:8: merge of 'b'");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 263\nchars 2\nU+2581\nU+0061 a\nmerges 1\na  a\n", "m.bpe:8: expected a merge");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 263\nchars 2\nU+2581\nU+0061 a\nmerges 2\na a\na a\n", "m.bpe:9: merge listed twice");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 999\nchars 2\nU+2581\nU+0061 a\nmerges 1\na a\n", "vocab_size says 999 but the file defines 263");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 263\nchars 2\nU+2581\nU+0061 a\nmerges 1\na a\nextra\n", "m.bpe:9: unexpected line");
    expect_parse_error("tfm-bpe 1\nnormalization nfc\nvocab_size 263\nchars 2\nU+2581\nU+0061 a\nmerges 1\na \xE2\x96\x81\n", "cannot start with the word marker");
    /* two merges that build one string share its id */
    c = bpe_from_string("tfm-bpe 1\nnormalization nfc\nvocab_size 267\nchars 4\nU+2581\nU+0061 a\nU+0062 b\nU+0063 c\n"
                        "merges 4\na b\nb c\nab c\na bc\n", "shared");
    CHECK(c && bpe_vocab_size(c) == 267);
    if (c) {
        CHECK_STR(bpe_piece(c, 266), "abc");
        CHECK_STR(pieces(c, "abc bca"), "\xE2\x96\x81 abc \xE2\x96\x81 bc a");
        bpe_free(c);
    }
    CHECK(bpe_load("/nonexistent/x.bpe") == NULL && strstr(error_message(), "/nonexistent/x.bpe"));
    const char *junk = tmp_path("junk.bpe");
    test_write_text(junk, "not a model at all\n");
    CHECK(bpe_load(junk) == NULL && strstr(error_message(), "not a tfm BPE model"));
    CHECK(tokenizer_load(junk) == NULL && strstr(error_message(), "neither a tfm BPE model"));
    CHECK(tokenizer_load("/nonexistent/x.bpe") == NULL && strstr(error_message(), "/nonexistent/x.bpe"));
    c = tokenizer_load(p);   /* a model file, through the same door */
    CHECK(c != NULL);
    bpe_free(c);

    /* a checkpoint carries its tokenizer in the metadata */
    const char *ck = tmp_path("m.safetensors");
    float w[3] = {1, 2, 3};
    StTensor tensor = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = w, .nbytes = sizeof w};
    const char *keys[] = {"tokenizer"}, *vals[] = {t};
    CHECK(st_write(ck, &tensor, 1, keys, vals, 1) == 0);
    CHECK(bpe_load(ck) == NULL);   /* bpe.c reads model files only */
    c = tokenizer_load(ck);
    CHECK(c != NULL);
    if (c) {
        char *t2 = bpe_to_string(c);
        CHECK_STR(t2, t);
        free(t2);
        bpe_free(c);
    }
    const char *other[] = {"config"};
    CHECK(st_write(ck, &tensor, 1, other, vals, 1) == 0);
    CHECK(tokenizer_load(ck) == NULL && strstr(error_message(), "no 'tokenizer'"));
    remove(ck);
    remove(p);
    remove(junk);
    free(t);
    bpe_free(b);
}

/* ---- user-defined symbols ------------------------------------------------ */
static Bpe *learn_symbols(const char *text, int vocab, const char *const *syms, int nsyms, int threads) {
    const char *p = tmp_path("sym.txt");
    test_write_text(p, text);
    const char *files[] = {p};
    BpeLearnOptions o = {.vocab_size = vocab, .normalization = "nfkc", .threads = threads, .quiet = 1,
                         .symbols = syms, .nsymbols = nsyms};
    Bpe *b = bpe_learn(files, 1, &o);
    remove(p);
    return b;
}

static void test_user_symbols(void) {
    /* tags glued to words and to each other: without symbols BPE would merge
     * "<bt" with its neighbours and cut "<2de>" into pieces */
    char text[1 << 15];
    size_t at = 0;
    for (int i = 0; i < 40; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "<2de> low lower<bt> newest%s\n<bt><2de>widest x y <b> z\n",
                               i % 2 ? " <b>" : "<bt>");
    const char *syms[] = {"<2de>", "<bt>", "<b>"};
    Bpe *b = learn_symbols(text, 1000, syms, 3, 1);
    CHECK(b != NULL);
    if (!b) { fprintf(stderr, "  %s\n", error_message()); return; }
    CHECK(bpe_num_symbols(b) == 3);
    CHECK_STR(bpe_symbol(b, 0), "<2de>");
    CHECK_STR(bpe_symbol(b, 2), "<b>");
    int s0 = bpe_piece_id(b, "<2de>");
    CHECK(s0 > 260 && bpe_piece_id(b, "<bt>") == s0 + 1 && bpe_piece_id(b, "<b>") == s0 + 2);
    /* no other piece holds a symbol, or spans one: no piece contains '<' or '>' at all here */
    int clean = 1;
    for (int id = 260; id < bpe_vocab_size(b); id++)
        if (id < s0 || id > s0 + 2) clean &= !strchr(bpe_piece(b, id), '<') && !strchr(bpe_piece(b, id), '>');
    CHECK(clean);
    /* one piece per symbol, longest match first; a lone ▁ for white space before one */
    CHECK_STR(pieces(b, "<2de> x<bt>y <b> <bt><2de>"), "<2de> \xE2\x96\x81x <bt> y \xE2\x96\x81 <b> \xE2\x96\x81 <bt> <2de>");
    CHECK_STR(pieces(b, "   <bt>   x  "), "<bt> \xE2\x96\x81x");
    /* '<' and 'b' only ever occurred inside symbols: they are not even characters of the alphabet */
    CHECK_STR(pieces(b, "<b <bt <b>t"), "\xE2\x96\x81 <0x3C> <0x62> \xE2\x96\x81 <0x3C> <0x62> t \xE2\x96\x81 <b> t");
    /* the ids themselves */
    int *ids = NULL, cap = 0;
    int n = bpe_encode(b, "<bt>", 4, &ids, &cap, NULL);
    CHECK(n == 1 && ids[0] == s0 + 1);
    free(ids);
    /* round trips, with symbols anywhere */
    static const char *lines[] = {"<2de> low <bt>", "  <bt>  ", "a<b>b<bt>c<2de>", "<b><b><b>", "lower <bt><bt> lower",
                                  "é<bt>é ✓ <2de>✓", "<bt", "bt>", "<2de", "x <b> y  <bt>  z", ""};
    int ok = 1;
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) ok &= round_trips(b, lines[i], strlen(lines[i]), NULL);
    for (int i = 0; i < NTORTURE; i++) ok &= round_trips(b, TORTURE[i], strlen(TORTURE[i]), NULL);
    CHECK(ok);
    /* the same model whatever the thread count */
    Bpe *b2 = learn_symbols(text, 1000, syms, 3, 2);
    char *t = bpe_to_string(b), *t2 = b2 ? bpe_to_string(b2) : NULL;
    CHECK(t2 && !strcmp(t, t2));
    free(t2);
    bpe_free(b2);

    /* the model file: version 2 with the symbols after the characters; loads back the same */
    CHECK(!strncmp(t, "tfm-bpe 2\n", 10));
    CHECK(strstr(t, "\nsymbols 3\n<2de>\n<bt>\n<b>\nmerges ") != NULL);
    const char *p = tmp_path("sym.bpe");
    CHECK(bpe_save(b, p) == 0);
    Bpe *c = bpe_load(p);
    CHECK(c != NULL);
    if (c) {
        char *tc = bpe_to_string(c);
        CHECK_STR(tc, t);
        CHECK_STR(pieces(c, "<2de> x<bt>y <b> <bt><2de>"), pieces(b, "<2de> x<bt>y <b> <bt><2de>"));
        free(tc);
        CHECK(bpe_check_symbols(c, syms, 3, "m") == 0);
        CHECK(bpe_check_symbols(c, syms, 2, "m") < 0 && strstr(error_message(), "m has the user symbols '<2de>,<bt>,<b>' but '<2de>,<bt>' were asked"));
        bpe_free(c);
    }
    remove(p);
    /* ... and inside a checkpoint's metadata */
    const char *ck = tmp_path("sym.safetensors");
    float w[1] = {1};
    StTensor tensor = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {1}, .data = w, .nbytes = sizeof w};
    const char *keys[] = {"tokenizer"}, *vals[] = {t};
    CHECK(st_write(ck, &tensor, 1, keys, vals, 1) == 0);
    c = tokenizer_load(ck);
    CHECK(c && bpe_num_symbols(c) == 3 && bpe_piece_id(c, "<bt>") == s0 + 1);
    bpe_free(c);
    remove(ck);
    free(t);
    bpe_free(b);

    /* a model without symbols is still written (and read) as version 1 */
    b = learn_symbols(text, 1000, NULL, 0, 1);
    t = b ? bpe_to_string(b) : NULL;
    CHECK(t && !strncmp(t, "tfm-bpe 1\n", 10) && !strstr(t, "\nsymbols "));
    free(t);
    bpe_free(b);

    /* splitting the command-line list */
    char **list;
    CHECK(bpe_split_symbols("<2de>,<bt>", &list) == 2 && !strcmp(list[0], "<2de>") && !strcmp(list[1], "<bt>"));
    bpe_free_symbols(list, 2);
    CHECK(bpe_split_symbols("", &list) == 0);

    /* symbols that cannot be: each error names the symbol */
    static const struct { const char *sym, *msg; } bad[] = {
        {"a b", "'a b' holds white space"}, {"", "empty user symbol"}, {"<s>", "'<s>' is already a piece"},
        {"<0x41>", "'<0x41>' is already a piece"}, {"\xEF\xBC\x9C" "bt>", "changes under nfkc normalization"},
        {"#x", "starts with '#'"}, {"\xE2\x96\x81x", "the word marker"}, {"a\xff", "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *one[] = {bad[i].sym};
        Bpe *x = learn_symbols(text, 1000, one, 1, 1);
        CHECK_MSG(!x && strstr(error_message(), bad[i].msg), "symbol '%s': %s", bad[i].sym, x ? "accepted" : error_message());
        bpe_free(x);
    }
    const char *twice[] = {"<bt>", "<bt>"};
    CHECK(!learn_symbols(text, 1000, twice, 2, 1) && strstr(error_message(), "'<bt>' given twice"));
    CHECK(!learn_symbols(text, 262, syms, 3, 1) && strstr(error_message(), "at least 264"));
    /* model files that break the rules */
    const char *head = "tfm-bpe 2\nnormalization nfc\nvocab_size 264\nchars 2\nU+2581\nU+0061 a\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%smerges 0\n", head);
    expect_parse_error(buf, "m.bpe:7: expected 'symbols N'");
    snprintf(buf, sizeof buf, "%ssymbols 2\n<x>\n", head);
    expect_parse_error(buf, "file ends after 1 of 2 symbols");
    snprintf(buf, sizeof buf, "%ssymbols 1\n<x>\nmerges 1\n<x> a\n", head);
    expect_parse_error(buf, "m.bpe:10: a merge of a user symbol");
    snprintf(buf, sizeof buf, "%ssymbols 1\naa\nmerges 1\na a\n", head);
    expect_parse_error(buf, "m.bpe:10: this merge spells a user symbol");
    snprintf(buf, sizeof buf, "%ssymbols 1\na\nmerges 0\n", head);
    expect_parse_error(buf, "'a' is already a piece");
}

/* ---- 1 MB lines --------------------------------------------------------- */
static void test_long_lines(void) {
    size_t n = 1 << 20;
    char *words = xmalloc(n + 1), *same = xmalloc(n + 1), *cjk = xmalloc(n + 3);
    static const char *vocab[] = {"low ", "lower ", "newest ", "widest ", "\xC3\xA9t\xC3\xA9 ", "2,500 ", "\xF0\x9F\x98\x80 "};
    size_t at = 0;
    for (int i = 0; at + 16 < n; i++) { size_t k = strlen(vocab[i % 7]); memcpy(words + at, vocab[i % 7], k); at += k; }
    words[at] = 0;
    memset(same, 'a', n);
    same[n] = 0;
    for (at = 0; at + 3 <= n; at += 3) memcpy(cjk + at, "\xE6\x97\xA5", 3);
    cjk[at] = 0;
    const char *p = tmp_path("long.txt");
    FILE *f = fopen(p, "wb");
    fprintf(f, "%s\n%s\n%s\nlow lower\n", words, same, cjk);
    fclose(f);
    const char *files[] = {p};
    double t0 = now_seconds();
    Bpe *b = learn(files, 1, 400, "nfkc", 2);
    CHECK(b != NULL);
    if (b) {
        int tokens = 0;
        CHECK(round_trips(b, words, strlen(words), NULL));
        CHECK(round_trips(b, same, strlen(same), &tokens));
        CHECK_MSG(tokens < (int)(n / 16), "1 MB of 'a': %d tokens", tokens);   /* words of 128 chars, merged */
        CHECK(round_trips(b, cjk, strlen(cjk), NULL));
        bpe_free(b);
    }
    CHECK_MSG(now_seconds() - t0 < 20, "1 MB lines took %.1fs", now_seconds() - t0);
    remove(p);
    free(words); free(same); free(cjk);
}

int main(void) {
    RUN(test_hand_merges);
    RUN(test_dropout);
    RUN(test_byte_fallback);
    RUN(test_torture);
    RUN(test_invalid_utf8);
    RUN(test_multi30k);
    RUN(test_reference_learner);
    RUN(test_determinism_and_gz);
    RUN(test_model_file);
    RUN(test_user_symbols);
    RUN(test_long_lines);
    return test_summary();
}
