/* test_utf8.c — the one UTF-8 decoder (src/utf8.h): every code point round
 * trips, Unicode's Table 3-7 boundaries, maximal subparts as Python's
 * errors='replace' cuts them, and the fast path agrees with the checked one. */
#include "test.h"
#include "utf8.h"
#include "util.h"

static int dec(const char *s, size_t n, int32_t *cp) { return utf8_decode((const unsigned char *)s, n, cp); }

static void test_round_trip_every_code_point(void) {
    int bad = 0;
    for (int32_t c = 0; c <= 0x10FFFF; c++) {
        if (c >= 0xD800 && c <= 0xDFFF) continue;
        char b[4];
        int k = utf8_encode(c, b), want = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        int32_t d = -1, f = -1;
        int kd = dec(b, (size_t)k, &d), kf = utf8_decode_valid((const unsigned char *)b, &f);
        if (k != want || kd != k || kf != k || d != c || f != c || !utf8_valid(b, (size_t)k)) bad++;
    }
    CHECK_MSG(bad == 0, "%d code points do not round trip", bad);
    char b[4];
    CHECK(utf8_encode(0x110000, b) == 0);
    CHECK(utf8_encode(-1, b) == 0);
}

/* Table 3-7's boundaries: what is valid and the length of what is not */
static void test_boundaries(void) {
    int32_t cp;
    CHECK(dec("\xC2\x80", 2, &cp) == 2 && cp == 0x80);
    CHECK(dec("\xC1\xBF", 2, &cp) == -1);             /* overlong 2-byte */
    CHECK(dec("\xE0\xA0\x80", 3, &cp) == 3 && cp == 0x800);
    CHECK(dec("\xE0\x9F\xBF", 3, &cp) == -1);         /* overlong 3-byte: E0 needs A0..BF */
    CHECK(dec("\xED\x9F\xBF", 3, &cp) == 3 && cp == 0xD7FF);
    CHECK(dec("\xED\xA0\x80", 3, &cp) == -1);         /* surrogate U+D800 */
    CHECK(dec("\xF0\x90\x80\x80", 4, &cp) == 4 && cp == 0x10000);
    CHECK(dec("\xF0\x8F\xBF\xBF", 4, &cp) == -1);     /* overlong 4-byte */
    CHECK(dec("\xF4\x8F\xBF\xBF", 4, &cp) == 4 && cp == 0x10FFFF);
    CHECK(dec("\xF4\x90\x80\x80", 4, &cp) == -1);     /* above U+10FFFF */
    CHECK(dec("\xF5\x80\x80\x80", 4, &cp) == -1);
    CHECK(dec("\x80", 1, &cp) == -1);                 /* a lone continuation byte */
    CHECK(dec("\xE2\x82", 2, &cp) == -2);             /* truncated by the end */
    CHECK(dec("\xE2\x82x", 3, &cp) == -2);            /* truncated by another character */
    CHECK(dec("\xF0\x9F\x98", 3, &cp) == -3);
    CHECK(dec("\xE2\x82\xAC", 2, &cp) == -2);         /* n limits the read */
    CHECK(dec("", 1, &cp) == 1 && cp == 0);           /* NUL is a character */
    CHECK(utf8_check("ab\xE2\x82\xAC" "c\xFF", 7) == 6);
    CHECK(utf8_check("ab\xE2\x82\xAC", 5) == -1);
    CHECK(utf8_check("ab\xE2\x82\xAC", 4) == 2);
}

/* The same string as test_bleu's (the subparts checked with Python's
 * b.decode('utf-8', errors='replace')), and NUL with and without `nul`. */
static void test_replace(void) {
#define R "\xef\xbf\xbd"
    const char bad[] = "x\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xf4\x90\x80\x80|\xe2\x82x";
    size_t n;
    char *s = utf8_replace(bad, sizeof bad - 1, 0, &n);
    CHECK_STR(s, "x" R R "|" R R R "|" R "|" R R R R "|" R "x");
    CHECK(n == strlen(s) && utf8_valid(s, n));
    free(s);
    s = utf8_replace("a\0b", 3, 1, &n);
    CHECK(n == 5 && !memcmp(s, "a" R "b", 5));
    free(s);
    s = utf8_replace("a\0b", 3, 0, &n);
    CHECK(n == 3 && !memcmp(s, "a\0b", 3));
    free(s);
    s = utf8_replace("", 0, 1, &n);
    CHECK(n == 0 && s[0] == 0);
    free(s);
#undef R
}

int main(void) {
    RUN(test_round_trip_every_code_point);
    RUN(test_boundaries);
    RUN(test_replace);
    return test_summary();
}
