/* utf8.h — the one UTF-8 decoder and encoder (bpe.c, bleu.c, json.c, and
 * through them everything that reads text).
 *
 * Validity is Unicode's (§3.9, Table 3-7): no overlong forms, no surrogates
 * (U+D800..DFFF), nothing above U+10FFFF. An ill-formed sequence is cut into
 * "maximal subparts" (§3.9, U+FFFD substitution): the longest prefix that
 * could still begin a valid sequence, or one byte. Replacing each subpart by
 * one U+FFFD is what Python's bytes.decode(errors='replace') does, and so
 * what sacreBLEU reads; tfm replaces the same way everywhere. */
#ifndef TFM_UTF8_H
#define TFM_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* One character of s[0..n), n >= 1: its length (1..4), with the code point
 * in *cp; or -k when s[0..k) is a maximal ill-formed subpart (k = 1..3).
 * NUL is a character here (callers that refuse it check for it). */
static inline int utf8_decode(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    int32_t v;
    if (c < 0x80) { *cp = (int32_t)c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { need = 1; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; v = c & 0x0F; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; v = c & 0x07; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return -1;   /* 80..C1 (continuation, overlong lead), F5..FF */
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n || s[i] < lo || s[i] > hi) return -i;
        lo = 0x80; hi = 0xBF;   /* only the second byte has a narrower range */
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return need + 1;
}

/* The same for text already known to be valid (no checks: the fast path). */
static inline int utf8_decode_valid(const unsigned char *s, int32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = (int32_t)c; return 1; }
    if (c < 0xE0) { *cp = (int32_t)(((c & 0x1F) << 6) | (s[1] & 0x3F)); return 2; }
    if (c < 0xF0) { *cp = (int32_t)(((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F)); return 3; }
    *cp = (int32_t)(((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F));
    return 4;
}

/* Writes cp (0..0x10FFFF) as 1..4 bytes at out; returns the count, 0 when cp
 * is out of range. Surrogates are written as they come (callers never
 * produce them from valid input). */
int utf8_encode(int32_t cp, char *out);

/* Offset of the first byte of the first ill-formed subpart of s[0..n), or
 * -1 when all of it is valid UTF-8. */
long utf8_check(const char *s, size_t n);
static inline int utf8_valid(const char *s, size_t n) { return utf8_check(s, n) < 0; }

/* s[0..n) with each maximal ill-formed subpart (and, with `nul`, each NUL
 * byte) replaced by U+FFFD: a malloc'd, NUL-terminated string; its length in
 * *out_n when out_n is not NULL. */
char *utf8_replace(const char *s, size_t n, int nul, size_t *out_n);

#endif
