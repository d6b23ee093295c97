/* utf8.c — UTF-8 encoding, checking and repair (see utf8.h). */
#include "utf8.h"
#include "util.h"

#include <string.h>

int utf8_encode(int32_t cp, char *out) {
    unsigned u = (unsigned)cp;
    if (cp < 0) return 0;
    if (u < 0x80) { out[0] = (char)u; return 1; }
    if (u < 0x800) { out[0] = (char)(0xC0 | u >> 6); out[1] = (char)(0x80 | (u & 0x3F)); return 2; }
    if (u < 0x10000) {
        out[0] = (char)(0xE0 | u >> 12); out[1] = (char)(0x80 | (u >> 6 & 0x3F));
        out[2] = (char)(0x80 | (u & 0x3F));
        return 3;
    }
    if (u > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | u >> 18); out[1] = (char)(0x80 | (u >> 12 & 0x3F));
    out[2] = (char)(0x80 | (u >> 6 & 0x3F)); out[3] = (char)(0x80 | (u & 0x3F));
    return 4;
}

long utf8_check(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    int32_t cp;
    for (size_t i = 0; i < n;) {
        if (i + 8 <= n) {   /* eight ASCII bytes at once: the common case */
            uint64_t v;
            memcpy(&v, p + i, 8);
            if (!(v & 0x8080808080808080ULL)) { i += 8; continue; }
        }
        int k = utf8_decode(p + i, n - i, &cp);
        if (k < 0) return (long)i;
        i += (size_t)k;
    }
    return -1;
}

char *utf8_replace(const char *s, size_t n, int nul, size_t *out_n) {
    const unsigned char *p = (const unsigned char *)s;
    char *f = xmalloc(3 * n + 1);   /* a bad byte becomes at most 3 bytes */
    size_t m = 0;
    int32_t cp;
    for (size_t i = 0; i < n;) {
        int k = utf8_decode(p + i, n - i, &cp);
        if (k > 0 && !(nul && cp == 0)) { memcpy(f + m, s + i, (size_t)k); m += (size_t)k; i += (size_t)k; }
        else { memcpy(f + m, "\xEF\xBF\xBD", 3); m += 3; i += (size_t)(k > 0 ? k : -k); }
    }
    f[m] = 0;
    if (out_n) *out_n = m;
    return f;
}
