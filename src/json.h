/* json.h — a small JSON (RFC 8259) reader and writer, enough for the
 * safetensors header: objects keep their keys in file order, strings are
 * decoded to UTF-8 (\uXXXX escapes and surrogate pairs included), numbers
 * keep their literal text so integers up to 2^64-1 convert exactly.
 *
 * The reader never crashes on bad input: invalid UTF-8, bad escapes, lone
 * surrogates, trailing garbage or nesting deeper than JSON_MAX_DEPTH are
 * errors naming the byte offset. Strings containing U+0000 are refused (tfm
 * keeps strings NUL-terminated).
 */
#ifndef TFM_JSON_H
#define TFM_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct Json {
    JsonType type;
    char *text;          /* STRING: decoded UTF-8 value; NUMBER: the literal as written */
    int n;               /* ARRAY / OBJECT: number of elements */
    struct Json *items;  /* ARRAY / OBJECT: the values, in file order */
    char **keys;         /* OBJECT: the keys (decoded), in file order */
} Json;

/* Parse text[0..len) as one JSON value (surrounding whitespace allowed).
 * Returns 0, or -1 + errorf("NAME: byte OFFSET: what was expected"). */
int json_parse(const char *text, size_t len, const char *name, Json *out);
void json_free(Json *j);
/* The value of `key` in an object (first match), or NULL. */
const Json *json_get(const Json *obj, const char *key);
/* A non-negative integer literal that fits in uint64: 0, else -1 (no errorf). */
int json_u64(const Json *j, uint64_t *out);
const char *json_type_name(JsonType t);

/* ---- writing ---------------------------------------------------------- */
typedef struct { char *s; size_t len, cap; } JsonBuf;   /* NUL-terminated, malloc'd */
void jb_raw(JsonBuf *b, const char *s);
void jb_printf(JsonBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s as a quoted JSON string: " \ and control characters escaped
 * (\n \t \r \b \f, others \u00XX); other UTF-8 bytes are written as they are. */
void jb_string(JsonBuf *b, const char *s);
void jb_free(JsonBuf *b);

#endif
