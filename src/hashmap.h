/* hashmap.h — hashing and two small open-addressing hash maps, for bpe.c
 * and bpe_learn.c (a header of static inline functions: each user compiles
 * the ones it calls).
 *
 *   hash_bytes(p, n)   64-bit hash of a byte string (8 bytes a round, then
 *                      mix64, the finalizer of MurmurHash3)
 *   U64Map             uint64 key -> int32 value, linear probing, kept at most
 *                      half full; keys are code points or (left << 32 | right)
 *   StrMap             byte string -> int64 value; strings of up to 16 bytes
 *                      in the entry, longer ones in an arena; grows at 70%
 *
 * Neither map removes keys; strmap_next walks the entries in table order.
 */
#ifndef TFM_HASHMAP_H
#define TFM_HASHMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static inline uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, v;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    v = 0;
    memcpy(&v, p, n);
    return mix64(h ^ v);
}

/* uint64 key -> int32 value. Keys are code points or (left << 32 | right). */
typedef struct { uint64_t *key; int32_t *val; size_t cap, n; } U64Map;
#define U64_EMPTY UINT64_MAX

static inline void u64map_init(U64Map *m, size_t expect) {
    m->cap = 16;
    while (m->cap < 2 * expect) m->cap *= 2;
    m->key = xmalloc(m->cap * sizeof *m->key);
    memset(m->key, 0xff, m->cap * sizeof *m->key);
    m->val = xmalloc(m->cap * sizeof *m->val);
    m->n = 0;
}
static inline void u64map_free(U64Map *m) { free(m->key); free(m->val); memset(m, 0, sizeof *m); }

static inline int32_t u64map_get(const U64Map *m, uint64_t k) {
    size_t mask = m->cap - 1;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        if (m->key[i] == k) return m->val[i];
        if (m->key[i] == U64_EMPTY) return -1;
    }
}

/* The value slot of k; inserted with value -1 if absent. */
static inline int32_t *u64map_put(U64Map *m, uint64_t k) {
    if (2 * (m->n + 1) > m->cap) {
        U64Map g;
        u64map_init(&g, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->key[i] != U64_EMPTY) *u64map_put(&g, m->key[i]) = m->val[i];
        u64map_free(m);
        *m = g;
    }
    size_t mask = m->cap - 1, i = mix64(k) & mask;
    for (; m->key[i] != k; i = (i + 1) & mask)
        if (m->key[i] == U64_EMPTY) { m->key[i] = k; m->val[i] = -1; m->n++; break; }
    return &m->val[i];
}

/* byte string -> int64 value, open addressing over the entries themselves
 * (one cache line visit per lookup): strings of up to 16 bytes (most words)
 * sit in the entry, longer ones in an arena. */
enum { STR_INLINE = 16 };
#define STR_EMPTY UINT32_MAX
typedef struct {
    uint32_t tag, len;         /* tag: high half of the hash; len STR_EMPTY: free slot */
    int64_t val;
    union { char in[STR_INLINE]; size_t off; } key;
} StrEntry;
typedef struct { StrEntry *t; size_t cap, n; char *arena; size_t alen, acap; } StrMap;

static inline void strmap_alloc(StrMap *m, size_t cap) {
    m->cap = cap;
    m->t = xmalloc(cap * sizeof *m->t);
    for (size_t i = 0; i < cap; i++) m->t[i].len = STR_EMPTY;
}
static inline void strmap_init(StrMap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < 2 * expect) cap *= 2;
    strmap_alloc(m, cap);
}
static inline void strmap_free(StrMap *m) { free(m->t); free(m->arena); memset(m, 0, sizeof *m); }
static inline const char *strmap_key(const StrMap *m, const StrEntry *e) {
    return e->len <= STR_INLINE ? e->key.in : m->arena + e->key.off;
}
/* The used entries, in table order: for (i = 0; (e = strmap_next(m, &i));) */
static inline StrEntry *strmap_next(const StrMap *m, size_t *i) {
    for (; *i < m->cap; ++*i)
        if (m->t[*i].len != STR_EMPTY) return &m->t[(*i)++];
    return NULL;
}

static inline StrEntry *strmap_slot(const StrMap *m, const char *k, size_t len, uint64_t h) {
    size_t mask = m->cap - 1;
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        StrEntry *e = &m->t[i];
        if (e->len == STR_EMPTY) return e;
        if (e->tag == tag && e->len == len && !memcmp(strmap_key(m, e), k, len)) return e;
    }
}

static inline StrEntry *strmap_find(const StrMap *m, const char *k, size_t len, uint64_t h) {
    StrEntry *e = strmap_slot(m, k, len, h);
    return e->len == STR_EMPTY ? NULL : e;
}

/* Find k, or insert it with value 0. The pointer is valid until the next insert. */
static inline StrEntry *strmap_add(StrMap *m, const char *k, size_t len, uint64_t h) {
    StrEntry *e = strmap_slot(m, k, len, h);
    if (e->len != STR_EMPTY) return e;
    ASSERT(len < STR_EMPTY);   /* keys are short (bpe: words of at most MAX_KEY bytes) */
    if (10 * (m->n + 1) > 7 * m->cap) {   /* grow at 70% full */
        StrMap g = *m;
        strmap_alloc(&g, 2 * m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            StrEntry *o = &m->t[i];
            if (o->len == STR_EMPTY) continue;
            const char *ok = strmap_key(m, o);
            *strmap_slot(&g, ok, o->len, hash_bytes(ok, o->len)) = *o;
        }
        free(m->t);
        *m = g;
        e = strmap_slot(m, k, len, h);
    }
    e->tag = (uint32_t)(h >> 32);
    e->len = (uint32_t)len;
    e->val = 0;
    if (len <= STR_INLINE) memcpy(e->key.in, k, len);
    else {
        if (m->alen + len > m->acap) {
            while (m->alen + len > m->acap) m->acap = m->acap ? 2 * m->acap : 4096;
            m->arena = xrealloc(m->arena, m->acap);
        }
        memcpy(m->arena + m->alen, k, len);
        e->key.off = m->alen;
        m->alen += len;
    }
    m->n++;
    return e;
}

#endif
