/* json.c — a small JSON reader/writer (see json.h). Recursive descent over a
 * bounded depth; every error names the byte offset where parsing stopped. */
#include "json.h"
#include "utf8.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reader ----------------------------------------------------------- */
typedef struct {
    const char *s;
    size_t len, pos;
    const char *name;
} Parser;

static int fail(Parser *p, const char *what) {
    return errorf("%s: byte %zu: %s", p->name, p->pos, what);
}

static void skip_ws(Parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int hex4(Parser *p, unsigned *out) {
    if (p->len - p->pos < 4) return fail(p, "expected 4 hex digits after \\u");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos + i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "expected 4 hex digits after \\u");
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* At the opening quote. The decoded string is never longer than the quoted
 * source (an escape of k bytes decodes to at most k bytes of UTF-8), so the
 * buffer is the size of the source up to the closing quote (not of the rest
 * of the text: a header of many short strings would cost its size squared). */
static int parse_string(Parser *p, char **out) {
    p->pos++;
    size_t start = p->pos, end = start;
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    char *buf = xmalloc((end < p->len ? end : p->len) - start + 1);
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) { free(buf); p->pos = start - 1; return fail(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) { free(buf); return fail(p, "control character in string (must be escaped)"); }
        if (c != '\\') {
            int32_t cp;
            int k = utf8_decode((const unsigned char *)p->s + p->pos, p->len - p->pos, &cp);
            if (k < 0) { free(buf); return fail(p, "invalid UTF-8 in string"); }
            memcpy(buf + n, p->s + p->pos, (size_t)k);
            n += (size_t)k; p->pos += (size_t)k;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len) { free(buf); return fail(p, "unterminated escape"); }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) { free(buf); return -1; }
            if (cp >= 0xDC00 && cp <= 0xDFFF) { free(buf); return fail(p, "lone low surrogate in \\u escape"); }
            if (cp >= 0xD800 && cp <= 0xDBFF) {   /* UTF-16 pair: \uD83D\uDE00 */
                unsigned lo;
                if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(buf); return fail(p, "high surrogate not followed by a \\u low surrogate");
                }
                p->pos += 2;
                if (hex4(p, &lo)) { free(buf); return -1; }
                if (lo < 0xDC00 || lo > 0xDFFF) { free(buf); return fail(p, "high surrogate not followed by a low surrogate"); }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) { free(buf); return fail(p, "\\u0000 in string is not supported"); }
            n += (size_t)utf8_encode((int32_t)cp, buf + n);
            break;
        }
        default: free(buf); p->pos--; return fail(p, "invalid escape (expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
        }
    }
    buf[n] = 0;
    *out = buf;
    return 0;
}

static int json_parse_number(Parser *p, Json *out) {
    size_t start = p->pos;
    const char *s = p->s;
    #define DIGIT(i) ((i) < p->len && s[i] >= '0' && s[i] <= '9')
    if (p->pos < p->len && s[p->pos] == '-') p->pos++;
    if (!DIGIT(p->pos)) return fail(p, "expected a digit");
    if (s[p->pos] == '0') p->pos++;
    else while (DIGIT(p->pos)) p->pos++;
    if (p->pos < p->len && s[p->pos] == '.') {
        p->pos++;
        if (!DIGIT(p->pos)) return fail(p, "expected a digit after '.'");
        while (DIGIT(p->pos)) p->pos++;
    }
    if (p->pos < p->len && (s[p->pos] == 'e' || s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (s[p->pos] == '+' || s[p->pos] == '-')) p->pos++;
        if (!DIGIT(p->pos)) return fail(p, "expected a digit in exponent");
        while (DIGIT(p->pos)) p->pos++;
    }
    #undef DIGIT
    size_t n = p->pos - start;
    out->type = JSON_NUMBER;
    out->text = xmalloc(n + 1);
    memcpy(out->text, s + start, n);
    out->text[n] = 0;
    return 0;
}

static int parse_value(Parser *p, Json *out, int depth);

/* Arrays and objects: elements grow by doubling. */
static int parse_container(Parser *p, Json *out, int depth, int is_object) {
    char close = is_object ? '}' : ']';
    if (depth >= JSON_MAX_DEPTH) return fail(p, "nesting too deep");
    out->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    int cap = 0;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 0; }
    for (;;) {
        if (out->n == cap) {
            cap = cap ? 2 * cap : 8;
            out->items = xrealloc(out->items, (size_t)cap * sizeof *out->items);
            if (is_object) out->keys = xrealloc(out->keys, (size_t)cap * sizeof *out->keys);
        }
        skip_ws(p);
        if (is_object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a string key");
            char *key;
            if (parse_string(p, &key)) return -1;
            out->keys[out->n] = key;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') { out->n++; out->items[out->n - 1] = (Json){0}; return fail(p, "expected ':' after key"); }
            p->pos++;
        }
        Json *v = &out->items[out->n++];
        memset(v, 0, sizeof *v);
        if (parse_value(p, v, depth + 1)) return -1;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 0; }
        return fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(Parser *p, const char *word, JsonType t, Json *out) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return fail(p, "expected a JSON value");
    p->pos += n;
    out->type = t;
    return 0;
}

static int parse_value(Parser *p, Json *out, int depth) {
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input");
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, out, depth, 1);
    case '[': return parse_container(p, out, depth, 0);
    case '"': out->type = JSON_STRING; return parse_string(p, &out->text);
    case 't': return literal(p, "true", JSON_TRUE, out);
    case 'f': return literal(p, "false", JSON_FALSE, out);
    case 'n': return literal(p, "null", JSON_NULL, out);
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return json_parse_number(p, out);
    default: return fail(p, "expected a JSON value");
    }
}

int json_parse(const char *text, size_t len, const char *name, Json *out) {
    Parser p = {.s = text, .len = len, .name = name};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out, 0)) { json_free(out); return -1; }
    skip_ws(&p);
    if (p.pos != p.len) { json_free(out); return fail(&p, "unexpected text after the JSON value"); }
    return 0;
}

void json_free(Json *j) {
    if (!j) return;
    for (int i = 0; i < j->n; i++) {
        json_free(&j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->text);
    memset(j, 0, sizeof *j);
}

const Json *json_get(const Json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

int json_u64(const Json *j, uint64_t *out) {
    if (!j || j->type != JSON_NUMBER) return -1;
    uint64_t v = 0;
    for (const char *c = j->text; *c; c++) {
        if (*c < '0' || *c > '9') return -1;        /* sign, fraction or exponent */
        unsigned d = (unsigned)(*c - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;  /* overflow */
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

const char *json_type_name(JsonType t) {
    static const char *names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (unsigned)t < 7 ? names[t] : "?";
}

/* ---- writer ----------------------------------------------------------- */
static void jb_reserve(JsonBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}

static void jb_append(JsonBuf *b, const char *s, size_t n) {
    jb_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void jb_raw(JsonBuf *b, const char *s) { jb_append(b, s, strlen(s)); }

void jb_printf(JsonBuf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    jb_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void jb_string(JsonBuf *b, const char *s) {
    jb_append(b, "\"", 1);
    const char *run = s;   /* bytes copied as they are, in runs */
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        jb_append(b, run, (size_t)(s - run));
        char esc[8];
        switch (c) {
        case '"': jb_raw(b, "\\\""); break;
        case '\\': jb_raw(b, "\\\\"); break;
        case '\n': jb_raw(b, "\\n"); break;
        case '\t': jb_raw(b, "\\t"); break;
        case '\r': jb_raw(b, "\\r"); break;
        case '\b': jb_raw(b, "\\b"); break;
        case '\f': jb_raw(b, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); jb_raw(b, esc); break;
        }
        run = s + 1;
    }
    jb_append(b, run, (size_t)(s - run));
    jb_append(b, "\"", 1);
}

void jb_free(JsonBuf *b) { free(b->s); memset(b, 0, sizeof *b); }
