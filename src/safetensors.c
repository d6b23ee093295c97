/* safetensors.c — safetensors files (see safetensors.h for the format).
 *
 * A safetensors file is
 *   [8 bytes: N, little-endian u64][N bytes: JSON header][data]
 * where the header maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (byte offsets into the data region) and
 * "__metadata__" to a {string: string} map. */
#include "safetensors.h"
#include "crc32c.h"
#include "json.h"
#include "utf8.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tfm writes tensors as they lie in memory: a little-endian machine is required"
#endif

/* ---- dtypes ------------------------------------------------------------ */
static const struct { const char *name; size_t size; } DTYPES[] = {
    [ST_F32] = {"F32", 4}, [ST_I64] = {"I64", 8}, [ST_U8] = {"U8", 1},
};
#define NDTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

const char *st_dtype_name(StDtype d) { return (unsigned)d < NDTYPES ? DTYPES[d].name : "?"; }
size_t st_dtype_size(StDtype d) { return (unsigned)d < NDTYPES ? DTYPES[d].size : 0; }

/* numel * element size, or 0 with *ok = 0 on overflow. */
static uint64_t tensor_bytes(const int64_t *shape, int ndim, size_t elsize, int *ok) {
    uint64_t n = elsize;
    *ok = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) { *ok = 0; return 0; }
    return n;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first duplicate among names[0..n), or NULL. */
static const char *find_duplicate(const char *const *names, int n) {
    if (n < 2) return NULL;
    const char **s = xmalloc((size_t)n * sizeof *s);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str_ptr);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (!strcmp(s[i - 1], s[i])) dup = s[i];
    free(s);
    return dup;
}

/* ---- checksums ---------------------------------------------------------- */
/* The CRC-32C of the metadata pairs other than ST_CRC_KEY: each key and
 * value followed by a NUL, keys in byte order (independent of the header's). */
static uint32_t meta_crc(const char *const *keys, const char *const *values, int n) {
    int *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], ST_CRC_KEY)) order[m++] = i;
    for (int i = 1; i < m; i++)   /* insertion sort: a few dozen keys */
        for (int j = i; j > 0 && strcmp(keys[order[j - 1]], keys[order[j]]) > 0; j--) {
            int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    uint32_t crc = 0;
    for (int i = 0; i < m; i++) {
        crc = crc32c(crc, keys[order[i]], strlen(keys[order[i]]) + 1);
        crc = crc32c(crc, values[order[i]], strlen(values[order[i]]) + 1);
    }
    free(order);
    return crc;
}

#define CRC_PIECE ((size_t)64 << 10)
#define RELEASE_PIECE ((size_t)1 << 20)

int st_verify_crc = 1;

/* Pages of a file's mapping (st_read) that a reader is done with, given back:
 * the mapping is private and never written, so they are read again from the
 * page cache if touched again. Without this a whole checkpoint read once
 * stays in the process's memory until st_free (a base-model training
 * checkpoint: 744 MB). [floor(p), floor(p + n)) to page boundaries: ranges of
 * consecutive calls meet, and a page is never given back before the bytes
 * past p in it are read (the last partial page of a tensor stays). Advice
 * only: a failure costs memory, nothing else. */
static void release_pages(const void *p, size_t n) {
    static uintptr_t page;
    if (!page) page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / page * page, hi = ((uintptr_t)p + n) / page * page;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* t's bytes [off, off + n) in CRC_PIECE pieces: copied to dst if not NULL,
 * else to a buffer of one piece, then given to each(ctx, piece, n) if not
 * NULL; their CRC-32C summed over the copies (while they are in cache: no
 * second pass over memory) and the mapped pages given back every
 * RELEASE_PIECE bytes. The whole tensor (crc_out NULL): the sum checked
 * against the file's; a range: the sum to *crc_out, unchecked. */
static int tensor_pieces(const char *path, const StTensor *t, size_t off, size_t n, void *dst,
                         int (*each)(void *, const void *, size_t), void *ctx, uint32_t *crc_out) {
    const unsigned char *src = (const unsigned char *)t->data + off;
    _Alignas(64) unsigned char buf[CRC_PIECE];
    int check = crc_out ? 1 : t->has_crc && st_verify_crc;
    uint32_t crc = 0;
    size_t released = 0;
    for (size_t i = 0; i < n; i += CRC_PIECE) {
        size_t k = n - i < CRC_PIECE ? n - i : CRC_PIECE;
        unsigned char *d = dst ? (unsigned char *)dst + i : buf;
        memcpy(d, src + i, k);
        if (check) crc = crc32c(crc, d, k);
        if (each && each(ctx, d, k)) return -1;
        if (i + k - released >= RELEASE_PIECE || i + k == n) {
            release_pages(src + released, i + k - released);
            released = i + k;
        }
    }
    if (crc_out) *crc_out = crc;
    else if (check && crc != t->crc)
        return errorf("%s: tensor '%s': checksum mismatch (CRC-32C %08x, the file records %08x): the file is corrupt",
                      path, t->name, crc, t->crc);
    return 0;
}

int st_tensor_copy(const char *path, const StTensor *t, void *dst) { return tensor_pieces(path, t, 0, t->nbytes, dst, NULL, NULL, NULL); }

uint32_t st_tensor_range(const StTensor *t, size_t offset, size_t n, void *dst) {
    uint32_t crc = 0;
    tensor_pieces(NULL, t, offset, n, dst, NULL, NULL, &crc);
    return crc;
}

int st_tensor_scan(const char *path, const StTensor *t, int (*each)(void *ctx, const void *piece, size_t n), void *ctx) {
    return tensor_pieces(path, t, 0, t->nbytes, NULL, each, ctx, NULL);
}

void st_tensor_piece(const StTensor *t, size_t offset, size_t n, void *dst) {
    const unsigned char *src = (const unsigned char *)t->data + offset;
    memcpy(dst, src, n);
    release_pages(src, n);
}

int st_tensor_verify(const char *path, const StTensor *t) {
    if (!t->has_crc || !st_verify_crc) return 0;
    return tensor_pieces(path, t, 0, t->nbytes, NULL, NULL, NULL, NULL);
}

/* 8 hex digits -> *out; -1 if s is anything else. */
static int parse_crc(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    if (s[8]) return -1;
    *out = v;
    return 0;
}

/* The metadata ST_CRC_KEY of a parsed file: each tensor's checksum into its
 * StTensor, and the metadata's own checked now. No such key: a notice. */
static int read_checksums(const char *path, SafeTensors *st) {
    const char *text = st_meta(st, ST_CRC_KEY);
    if (!text) {
        log_info("%s: no tensor checksums (metadata \"%s\"; written by another tool or an older tfm): "
                 "its data are not verified", path, ST_CRC_KEY);
        return 0;
    }
    char where[1200];
    snprintf(where, sizeof where, "%s: metadata %s", path, ST_CRC_KEY);
    Json j;
    if (json_parse(text, strlen(text), where, &j)) return -1;
    int rc = -1, have_meta = 0;
    if (j.type != JSON_OBJECT) { errorf("%s: is not a JSON object", where); goto done; }
    for (int i = 0; i < j.n; i++) {
        uint32_t v;
        if (j.items[i].type != JSON_STRING || parse_crc(j.items[i].text, &v)) {
            errorf("%s: the checksum of \"%s\" is not 8 lowercase hex digits", where, j.keys[i]);
            goto done;
        }
        if (!strcmp(j.keys[i], "__metadata__")) {
            uint32_t got = meta_crc((const char *const *)st->meta_keys, (const char *const *)st->meta_values, st->num_meta);
            if (got != v) {
                errorf("%s: the metadata fail their checksum (CRC-32C %08x, the file records %08x): the file is corrupt",
                       path, got, v);
                goto done;
            }
            have_meta = 1;
            continue;
        }
        StTensor *t = NULL;
        for (int k = 0; k < st->num_tensors && !t; k++)
            if (!strcmp(st->tensors[k].name, j.keys[i])) t = &st->tensors[k];
        if (!t) { errorf("%s: a checksum for tensor '%s', which the file does not hold", where, j.keys[i]); goto done; }
        if (t->has_crc) { errorf("%s: two checksums for tensor '%s'", where, j.keys[i]); goto done; }
        t->crc = v;
        t->has_crc = 1;
    }
    if (!have_meta) { errorf("%s: no checksum of the metadata (\"__metadata__\")", where); goto done; }
    for (int k = 0; k < st->num_tensors; k++)
        if (!st->tensors[k].has_crc) { errorf("%s: no checksum for tensor '%s'", where, st->tensors[k].name); goto done; }
    st->has_crc = 1;
    rc = 0;
done:
    json_free(&j);
    return rc;
}

/* ---- writing ----------------------------------------------------------- */
/* The JSON header, padded with spaces to a multiple of 8; -1 on bad input. */
static int build_header(const char *path, const StTensor *t, int n, const char *const *mk,
                        const char *const *mv, int nmeta, JsonBuf *h) {
    for (int i = 0; i < nmeta; i++) {
        if (!mk[i] || !mv[i]) return errorf("%s: metadata %d has a NULL key or value", path, i);
        if (!utf8_valid(mk[i], strlen(mk[i])) || !utf8_valid(mv[i], strlen(mv[i])))
            return errorf("%s: metadata '%s' is not valid UTF-8 (JSON headers must be)", path, mk[i]);
    }
    const char *dup = find_duplicate(mk, nmeta);
    if (dup) return errorf("%s: duplicate metadata key '%s'", path, dup);

    const char **names = xmalloc((size_t)(n ? n : 1) * sizeof *names);
    for (int i = 0; i < n; i++) names[i] = t[i].name ? t[i].name : "";
    dup = find_duplicate(names, n);
    free(names);
    if (dup) return errorf("%s: duplicate tensor name '%s'", path, dup);

    jb_raw(h, "{");
    if (nmeta > 0) {
        jb_raw(h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) jb_raw(h, ",");
            jb_string(h, mk[i]);
            jb_raw(h, ":");
            jb_string(h, mv[i]);
        }
        jb_raw(h, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *x = &t[i];
        if (!x->name || !x->name[0] || !strcmp(x->name, "__metadata__") || !utf8_valid(x->name, strlen(x->name)))
            return errorf("%s: tensor %d has an invalid name", path, i);
        if ((unsigned)x->dtype >= NDTYPES) return errorf("%s: tensor '%s': unknown dtype %d", path, x->name, (int)x->dtype);
        if (x->ndim < 0 || x->ndim > 4) return errorf("%s: tensor '%s': %d dimensions (at most 4)", path, x->name, x->ndim);
        int ok;
        uint64_t bytes = tensor_bytes(x->shape, x->ndim, DTYPES[x->dtype].size, &ok);
        if (!ok || bytes != x->nbytes)
            return errorf("%s: tensor '%s': nbytes = %zu does not match its shape and dtype", path, x->name, x->nbytes);
        if (bytes && !x->data && !x->fill) return errorf("%s: tensor '%s' has no data", path, x->name);
        jb_raw(h, (i || nmeta) ? "," : "");
        jb_string(h, x->name);
        jb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", DTYPES[x->dtype].name);
        for (int d = 0; d < x->ndim; d++) jb_printf(h, "%s%lld", d ? "," : "", (long long)x->shape[d]);
        jb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    jb_raw(h, "}");
    while (h->len % 8) jb_raw(h, " ");
    if (h->len > ST_MAX_HEADER)
        return errorf("%s: header of %zu bytes exceeds the safetensors limit of %d", path, h->len, ST_MAX_HEADER);
    return 0;
}

int st_write(const char *path, const StTensor *t, int n,
             const char *const *meta_keys, const char *const *meta_values, int nmeta) {
    AtomicFile af;
    if (!atomic_open(&af, path)) return -1;
    return st_write_to(&af, t, n, meta_keys, meta_values, nmeta);
}

/* The header with the checksums crc[0..n) of the tensors: the metadata
 * pairs (a caller's ST_CRC_KEY dropped), then ST_CRC_KEY. */
static int header_with_sums(const char *path, const StTensor *t, int n, const char *const *meta_keys,
                            const char *const *meta_values, int nmeta, const uint32_t *crc, JsonBuf *h) {
    JsonBuf sums = {0};
    const char **mk = xmalloc((size_t)(nmeta + 1) * sizeof *mk), **mv = xmalloc((size_t)(nmeta + 1) * sizeof *mv);
    int bad = 0, nm = 0;
    for (int i = 0; i < nmeta; i++) bad |= !meta_keys[i] || !meta_values[i];
    for (int i = 0; i < nmeta; i++)   /* the caller's copy of a file's checksums is replaced by new ones */
        if (bad || strcmp(meta_keys[i], ST_CRC_KEY)) mk[nm] = meta_keys[i], mv[nm++] = meta_values[i];
    if (!bad) {   /* build_header reports a NULL */
        jb_printf(&sums, "{\"__metadata__\":\"%08x\"", meta_crc(mk, mv, nm));
        for (int i = 0; i < n; i++) {
            jb_raw(&sums, ",");
            jb_string(&sums, t[i].name ? t[i].name : "");
            jb_printf(&sums, ":\"%08x\"", crc[i]);
        }
        jb_raw(&sums, "}");
        mk[nm] = ST_CRC_KEY;
        mv[nm++] = sums.s;
    }
    int rc = build_header(path, t, n, mk, mv, nm, h);
    free(mk);
    free(mv);
    jb_free(&sums);
    return rc;
}

size_t st_fill_piece(void) {
    const char *e = getenv("TFM_TEST_FILL_PIECE");
    long v = e ? atol(e) : 0;
    return v > 0 && v % 4 == 0 ? (size_t)v : (size_t)16 << 20;
}

int st_write_to(AtomicFile *af, const StTensor *t, int n,
                const char *const *meta_keys, const char *const *meta_values, int nmeta) {
    const char *path = af->path;
    /* the checksums of the tensors in memory now, and those given with a
     * fill; a fill's without one summed as it is written, into the header
     * written again at the end (the same length: 8 hex digits each) */
    uint32_t *crc = xcalloc((size_t)(n ? n : 1), sizeof *crc);
    int filled = 0, streamed = 0;   /* tensors with a fill; those of them without a checksum */
    for (int i = 0; i < n; i++) {
        if (t[i].nbytes && t[i].data) crc[i] = crc32c(0, t[i].data, t[i].nbytes);
        else if (t[i].nbytes && t[i].fill) {
            filled = 1;
            if (t[i].has_crc) crc[i] = t[i].crc;
            else streamed = 1;
        }
    }
    JsonBuf h = {0};
    if (header_with_sums(path, t, n, meta_keys, meta_values, nmeta, crc, &h)) {
        jb_free(&h);
        free(crc);
        atomic_abort(af);
        return -1;
    }
    FILE *f = af->f;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.s, 1, h.len, f) == h.len, failed = 0;
    size_t psize = st_fill_piece();
    unsigned char *piece = filled ? xaligned(psize) : NULL;
    for (int i = 0; i < n && ok && !failed; i++) {
        if (!t[i].nbytes) continue;
        if (t[i].data) { ok = fwrite(t[i].data, 1, t[i].nbytes, f) == t[i].nbytes; continue; }
        uint32_t sum = 0;
        for (size_t off = 0; off < t[i].nbytes && ok && !failed; off += psize) {
            size_t k = t[i].nbytes - off < psize ? t[i].nbytes - off : psize;
            failed = t[i].fill(t[i].fill_ctx, piece, off, k) != 0;
            if (failed) break;
            sum = crc32c(sum, piece, k);
            ok = fwrite(piece, 1, k, f) == k;
        }
        if (ok && !failed && t[i].has_crc && sum != t[i].crc)
            failed = errorf("%s: tensor '%s' was made with checksum %08x but written with %08x: its fill gave other "
                            "bytes the second time (a bug)", path, t[i].name, t[i].crc, sum);
        crc[i] = sum;
    }
    free(piece);
    if (streamed && ok && !failed) {   /* the header again, with the streamed tensors' checksums */
        JsonBuf h2 = {0};
        failed = header_with_sums(path, t, n, meta_keys, meta_values, nmeta, crc, &h2) != 0;
        if (!failed && h2.len != h.len)
            failed = errorf("%s: the header with the checksums is %zu bytes, not %zu as written (a bug)", path, h2.len, h.len);
        if (!failed && fseek(f, 8, SEEK_SET) != 0)
            failed = errorf("%s: cannot go back to write the checksums of tensors made as they were written: %s (a "
                            "checkpoint is written to a regular file)", path, strerror(errno));
        if (!failed) ok = fwrite(h2.s, 1, h2.len, f) == h2.len;
        jb_free(&h2);
    }
    jb_free(&h);
    free(crc);
    if (failed) { atomic_abort(af); return -1; }
    return atomic_commit(af);   /* reports a failed write; the previous file, if any, stays */
}

/* ---- reading ----------------------------------------------------------- */
static int dtype_from_name(const char *path, const char *tensor, const char *s, StDtype *out) {
    for (int i = 0; i < NDTYPES; i++)
        if (!strcmp(s, DTYPES[i].name)) { *out = (StDtype)i; return 0; }
    static const char *other[] = {"F64", "F16", "BF16", "I32", "I16", "I8", "U16", "U32", "U64",
                                  "BOOL", "F8_E4M3", "F8_E5M2", "C64"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        if (!strcmp(s, other[i]))
            return errorf("%s: tensor '%s': dtype %s is not supported (tfm reads F32, I64 and U8)", path, tensor, s);
    return errorf("%s: tensor '%s': unknown dtype \"%s\"", path, tensor, s);
}

/* One header entry {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static int parse_tensor(const char *path, const char *name, const Json *v, StTensor *t,
                        uint64_t *begin, uint64_t *end) {
    if (v->type != JSON_OBJECT)
        return errorf("%s: tensor '%s': expected an object, got %s", path, name, json_type_name(v->type));
    for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], "dtype") && strcmp(v->keys[k], "shape") && strcmp(v->keys[k], "data_offsets"))
            return errorf("%s: tensor '%s': unknown field \"%s\" (expected dtype, shape, data_offsets)", path, name, v->keys[k]);
    const Json *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *of = json_get(v, "data_offsets");
    if (!dt || dt->type != JSON_STRING) return errorf("%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    if (dtype_from_name(path, name, dt->text, &t->dtype)) return -1;
    if (!sh || sh->type != JSON_ARRAY) return errorf("%s: tensor '%s': missing or non-array \"shape\"", path, name);
    if (sh->n > 4) return errorf("%s: tensor '%s': %d dimensions (tfm reads at most 4)", path, name, sh->n);
    t->ndim = sh->n;
    for (int d = 0; d < sh->n; d++) {
        uint64_t x;
        if (json_u64(&sh->items[d], &x) || x > (uint64_t)INT64_MAX)
            return errorf("%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
        t->shape[d] = (int64_t)x;
    }
    if (!of || of->type != JSON_ARRAY || of->n != 2 || json_u64(&of->items[0], begin) || json_u64(&of->items[1], end))
        return errorf("%s: tensor '%s': \"data_offsets\" must be [begin, end] with non-negative integers", path, name);
    int ok;
    uint64_t bytes = tensor_bytes(t->shape, t->ndim, DTYPES[t->dtype].size, &ok);
    if (!ok) return errorf("%s: tensor '%s': shape is too large", path, name);
    if (*end < *begin) return errorf("%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path, name,
                                     (unsigned long long)*begin, (unsigned long long)*end);
    if (*end - *begin != bytes)
        return errorf("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape x %s needs %llu", path, name,
                      (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)(*end - *begin),
                      DTYPES[t->dtype].name, (unsigned long long)bytes);
    t->nbytes = (size_t)bytes;
    return 0;
}

typedef struct { uint64_t begin, end; int index; } Span;

static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Validate the header of blob[0..size) and fill `out` (names, metadata). */
static int st_parse(const char *path, const unsigned char *blob, size_t size, SafeTensors *out) {
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)blob[i] << (8 * i);
    if (hlen > size - 8)
        return errorf("%s: header length %llu exceeds the file size (%zu bytes): truncated or not a safetensors file",
                      path, (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return errorf("%s: header length %llu exceeds the %d-byte limit", path, (unsigned long long)hlen, ST_MAX_HEADER);
    if (hlen < 2 || blob[8] != '{')
        return errorf("%s: the JSON header does not start with '{': not a safetensors file", path);
    char where[1200];
    snprintf(where, sizeof where, "%s: header", path);
    Json root;
    if (json_parse((const char *)blob + 8, (size_t)hlen, where, &root)) return -1;
    int rc = -1;
    size_t data_len = size - 8 - (size_t)hlen;
    const unsigned char *data = blob + 8 + hlen;
    Span *spans = xmalloc((size_t)(root.n ? root.n : 1) * sizeof *spans);
    int ns = 0;
    const char *dup;
    if (root.type != JSON_OBJECT) { errorf("%s: header is not a JSON object", path); goto done; }
    if ((dup = find_duplicate((const char *const *)root.keys, root.n))) {
        errorf("%s: duplicate entry \"%s\" in the header", path, dup);
        goto done;
    }
    out->tensors = xcalloc((size_t)(root.n ? root.n : 1), sizeof *out->tensors);
    for (int i = 0; i < root.n; i++) {
        const char *key = root.keys[i];
        const Json *v = &root.items[i];
        if (!strcmp(key, "__metadata__")) {
            if (v->type != JSON_OBJECT) { errorf("%s: __metadata__ is not an object", path); goto done; }
            if ((dup = find_duplicate((const char *const *)v->keys, v->n))) {
                errorf("%s: duplicate metadata key \"%s\"", path, dup);
                goto done;
            }
            out->meta_keys = xcalloc((size_t)(v->n ? v->n : 1), sizeof(char *));
            out->meta_values = xcalloc((size_t)(v->n ? v->n : 1), sizeof(char *));
            for (int k = 0; k < v->n; k++) {
                if (v->items[k].type != JSON_STRING) {
                    errorf("%s: metadata \"%s\" is a %s, expected a string", path, v->keys[k], json_type_name(v->items[k].type));
                    goto done;
                }
                out->meta_keys[k] = xstrdup(v->keys[k]);
                out->meta_values[k] = xstrdup(v->items[k].text);
                out->num_meta++;
            }
            continue;
        }
        StTensor *t = &out->tensors[out->num_tensors];
        uint64_t b, e;
        if (parse_tensor(path, key, v, t, &b, &e)) goto done;
        if (e > data_len) {
            errorf("%s: tensor '%s': data_offsets [%llu, %llu] run past the data region (%zu bytes): truncated file?",
                   path, key, (unsigned long long)b, (unsigned long long)e, data_len);
            goto done;
        }
        t->name = xstrdup(key);
        t->data = (void *)(data + b);
        spans[ns++] = (Span){b, e, out->num_tensors};
        out->num_tensors++;
    }
    /* The tensors must tile the data region: sorted by offset, each begins
     * where the previous ended, and the last ends at the end of the file. */
    qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
    uint64_t at = 0;
    for (int i = 0; i < ns; i++) {
        const char *name = out->tensors[spans[i].index].name;
        if (spans[i].begin < at) {
            errorf("%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s'", path, name, (unsigned long long)spans[i].begin,
                   (unsigned long long)spans[i].end, out->tensors[spans[i - 1].index].name);
            goto done;
        }
        if (spans[i].begin > at) {
            errorf("%s: data bytes %llu..%llu belong to no tensor (gap before '%s')", path, (unsigned long long)at,
                   (unsigned long long)spans[i].begin, name);
            goto done;
        }
        at = spans[i].end;
    }
    if (at != data_len) {
        errorf("%s: data region is %zu bytes but the tensors cover %llu (trailing bytes or a wrong header)", path,
               data_len, (unsigned long long)at);
        goto done;
    }
    rc = 0;
done:
    free(spans);
    json_free(&root);
    return rc;
}

void st_free(SafeTensors *st) {
    if (!st) return;
    for (int i = 0; i < st->num_tensors; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->num_meta; i++) { free(st->meta_keys[i]); free(st->meta_values[i]); }
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    if (st->blob) munmap(st->blob, st->blob_len);
    memset(st, 0, sizeof *st);
}

int st_read(const char *path, SafeTensors *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO: refused below, never waited on */
    if (fd < 0) return errorf("%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) { int e = errno; close(fd); return errorf("%s: cannot stat: %s", path, strerror(e)); }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return errorf("%s: is a %s, not a regular file: a checkpoint is mapped into memory, so it must be a file", path,
                      file_kind(sb.st_mode));
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return errorf("%s: file is %zu bytes, too short for a safetensors file (8-byte header length + JSON header)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return errorf("%s: cannot map %zu bytes: %s", path, size, strerror(e));
    out->blob = map;
    out->blob_len = size;
    if (st_parse(path, map, size, out) || read_checksums(path, out)) { st_free(out); return -1; }
    return 0;
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int i = 0; i < st->num_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
    return NULL;
}

const char *st_meta(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->num_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}
