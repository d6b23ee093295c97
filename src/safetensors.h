/* safetensors.h — safetensors files: the format, atomic writes, checked reads.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * header length N, N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the raw little-endian tensor bytes. Writes are atomic (temp file,
 * fsync, rename). Reads check everything and never crash on a bad file.
 *
 * Integrity: st_write adds the metadata "crc32c", a JSON object (as a string,
 * metadata values are strings) mapping every tensor name to the CRC-32C of
 * its bytes (crc32c.h), and "__metadata__" to the CRC-32C of the other
 * metadata (each key and value with a NUL after it, keys in byte order),
 * as 8 lowercase hex digits:
 *   "crc32c": "{\"__metadata__\":\"1c291ca3\",\"encoder.embed_tokens.weight\":\"e3069283\",...}"
 * st_read checks the metadata's; a tensor's bytes are checked where they are
 * used (st_tensor_copy, st_tensor_verify), so a corrupt byte is an error that
 * names the file and the tensor. A file without "crc32c" (another tool, a tfm
 * before it) loads with a one-line notice that its data cannot be verified.
 *
 * This module knows nothing of models: checkpoint.h builds tfm's checkpoints
 * on it.
 */
#ifndef TFM_SAFETENSORS_H
#define TFM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"   /* AtomicFile */

/* ---- generic safetensors --------------------------------------------- */
typedef enum { ST_F32, ST_I64, ST_U8 } StDtype;

/* A tensor written without being in memory whole (st_write: data NULL):
 * fill(ctx, dst, offset, n) puts its bytes [offset, offset + n) in dst;
 * called over the tensor in order, in pieces of st_fill_piece() bytes (the
 * last one shorter). 0, or -1 + errorf, which stops the write (the file is
 * not made). With has_crc set, crc is the checksum of those bytes, known
 * beforehand: the header is written once (a stream output works; the bytes
 * are checked against it as they are written); without, the header is
 * written again at the end (a file that can seek). */
typedef int (*StFill)(void *ctx, void *dst, size_t offset, size_t n);
/* 16 MB; test hook: TFM_TEST_FILL_PIECE=BYTES (a positive multiple of 4),
 * so that tests cut small tensors into many pieces, at odd places. */
size_t st_fill_piece(void);

typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[4];
    void *data;        /* points into the file's blob when read */
    size_t nbytes;
    uint32_t crc;      /* read: the CRC-32C the file records for it, if has_crc */
    int has_crc;
    StFill fill;       /* written with data NULL: its bytes made piece by piece */
    void *fill_ctx;
} StTensor;

typedef struct {
    StTensor *tensors; int num_tensors;
    char **meta_keys, **meta_values; int num_meta;
    int has_crc;       /* the file records checksums (then every tensor has one) */
    void *blob;        /* whole file */
    size_t blob_len;
} SafeTensors;

/* Write tensors t[0..n) (in that order, packed) and the metadata pairs.
 * Atomic: writes PATH.tmp.<pid> in the same directory, fsyncs it, renames it
 * over PATH and fsyncs the directory, so PATH is always either the old or the
 * new complete file (a crash leaves at most a stale .tmp.<pid> file beside
 * it). Every write is checked: on failure (disk full, ...) the temp file is
 * removed and -1 + errorf names PATH and the reason. Names and metadata must
 * be valid UTF-8; the header is padded with spaces to a multiple of 8 so the
 * data starts 8-byte aligned. A tensor with a fill function (StFill) is
 * written a piece at a time (one buffer of st_fill_piece() bytes): the same
 * bytes as the tensor in memory would give. */
int st_write(const char *path, const StTensor *t, int n,
             const char *const *meta_keys, const char *const *meta_values, int nmeta);
/* The same into an output the caller opened already (atomic_open, util.h:
 * before long work, so that a signal then removes its temporary file);
 * commits it, or aborts it on any failure. */
int st_write_to(AtomicFile *af, const StTensor *t, int n,
                const char *const *meta_keys, const char *const *meta_values, int nmeta);
/* Read and validate a whole file (mapped read-only). Checks: length, header
 * size (at most ST_MAX_HEADER), JSON syntax, dtypes, shapes, offsets in range
 * and matching shape x dtype size, tensors covering the data region exactly
 * (no overlap, no gap, no trailing bytes), unique names, string metadata.
 * -1 + errorf("PATH: ...") naming the problem; never crashes on bad input.
 * Tensors keep the header's order. t->data may be unaligned for files written
 * by other tools: copy with memcpy. The file must be a regular file: a FIFO,
 * a device or a directory is refused, named, without waiting for a writer
 * (opened O_NONBLOCK, then fstat) or reading a byte. */
int st_read(const char *path, SafeTensors *out);
const StTensor *st_find(const SafeTensors *st, const char *name);
/* Copy t's bytes to dst (t->nbytes), checking their CRC-32C on the way (in
 * 64 KB pieces, while they are in cache: the check costs no second pass over
 * memory). -1 + errorf("PATH: tensor 'NAME': ...checksum...") on a mismatch.
 * These three give the file's mapped pages back as they go (every 1 MB): a
 * file read through them is never in memory whole (t from st_read). */
int st_tensor_copy(const char *path, const StTensor *t, void *dst);
/* Bytes [offset, offset + n) of t to dst, as st_tensor_copy copies (64 KB
 * pieces, the mapped pages given back every 1 MB), returning their CRC-32C,
 * unchecked: a reader of part of a tensor checks it with the others' parts
 * (crc32c_combine; a rank's slice of the Adam moments, checkpoint.h). */
uint32_t st_tensor_range(const StTensor *t, size_t offset, size_t n, void *dst);
/* The same check without a copy. */
int st_tensor_verify(const char *path, const StTensor *t);
/* Bytes [offset, offset + n) of t (from st_read) to dst, the file's pages
 * under them given back: a reader going through a tensor once, in order, in
 * pieces (no checksum: st_tensor_verify or st_tensor_scan first). */
void st_tensor_piece(const StTensor *t, size_t offset, size_t n, void *dst);
/* The same check, with each 64 KB piece of t's bytes (copied to a buffer,
 * aligned) given to each(ctx, piece, bytes) in order; its -1 stops the scan
 * and is returned (with its errorf). The check comes after the last piece. */
int st_tensor_scan(const char *path, const StTensor *t, int (*each)(void *ctx, const void *piece, size_t n), void *ctx);
/* 1 (always, in tfm): the two above check the checksums. 0 only for the
 * baseline of dev/bench_load.c (the cost of checking, side by side). */
extern int st_verify_crc;
/* st_write's metadata key for the checksums; a caller's pair of that name
 * (copied from a file read) is dropped: st_write writes new ones. */
#define ST_CRC_KEY "crc32c"
const char *st_meta(const SafeTensors *st, const char *key);
void st_free(SafeTensors *st);
const char *st_dtype_name(StDtype d);   /* "F32", "I64", "U8" */
size_t st_dtype_size(StDtype d);        /* 4, 8, 1 */
#define ST_MAX_HEADER 100000000         /* the safetensors library's limit */

#endif
