/* test_crc32c.c — CRC-32C: known answers, the SSE4.2 path (three streams
 * joined by shift tables) equal to the table at every length and alignment,
 * continuation, joining checksums of pieces (crc32c_combine), and what it must catch: every single-bit flip and the flipped
 * exponent bit of issue 28. Also the checksums of st_write/st_read end to
 * end: a flipped byte in a tensor or in the metadata, and a file without
 * checksums; tensors written piece by piece (StFill), byte for byte as from
 * memory. */
#include "test.h"

#include "checkpoint.h"
#include "crc32c.h"
#include "util.h"

#include <stdint.h>
#include <unistd.h>

static void test_known_answers(void) {
    /* the check value of CRC-32C (RFC 3720 B.4 and every CRC catalogue) */
    CHECK(crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(crc32c_table(0, "123456789", 9) == 0xE3069283u);
    CHECK(crc32c(0, "", 0) == 0);
    /* RFC 3720 B.4: 32 bytes of zeros, of 0xFF, and 0..31 ascending */
    unsigned char b[32];
    memset(b, 0, 32);
    CHECK(crc32c(0, b, 32) == 0x8A9136AAu);
    memset(b, 0xFF, 32);
    CHECK(crc32c(0, b, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    CHECK(crc32c(0, b, 32) == 0x46DD794Eu);
}

/* crc32c_combine: the checksum of a ++ b from those of a and b, at every
 * split of a buffer (empty halves included), and of N pieces joined in
 * order, as the ranks' slices of the Adam moments are at resume. */
static void test_combine(void) {
    size_t n = 3 * 4096 * 3 + 100;
    unsigned char *buf = xmalloc(n);
    Rng r;
    rng_seed(&r, 11);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rng_u64(&r);
    int bad = 0, tried = 0;
    for (size_t len = 0; len <= n; len += len < 40 ? 1 : 977)
        for (size_t cut = 0; cut <= len; cut += cut < 20 ? 1 : 1 + len / 7, tried++)
            bad += crc32c_combine(crc32c(0, buf, cut), crc32c(0, buf + cut, len - cut), len - cut) != crc32c(0, buf, len);
    CHECK_MSG(bad == 0, "%d of %d splits joined wrong", bad, tried);
    uint32_t whole = crc32c(0, buf, n), joined = 0;
    size_t lo = 0;
    for (int k = 1; k <= 7; k++) {   /* 7 uneven pieces */
        size_t hi = k == 7 ? n : n * (size_t)(k * k) / 49;
        joined = crc32c_combine(joined, crc32c(0, buf + lo, hi - lo), hi - lo);
        lo = hi;
    }
    CHECK(joined == whole);
    buf[n / 2] ^= 0x10;   /* a flipped bit in one piece: the joined checksum differs */
    CHECK(crc32c_combine(crc32c(0, buf, n / 2), crc32c(0, buf + n / 2, n - n / 2), n - n / 2) != whole);
    free(buf);
}

static void test_paths_agree(void) {
    if (!crc32c_hardware()) SKIP("no SSE4.2: crc32c() is the table itself");
    size_t n = 3 * 4096 * 3 + 100;   /* several 3-stream blocks and a tail */
    unsigned char *buf = xmalloc(n + 8);
    Rng r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < n + 8; i++) buf[i] = (unsigned char)rng_u64(&r);
    int bad = 0;
    for (size_t len = 0; len <= n; len += len < 64 ? 1 : 1021)
        for (int off = 0; off < 8; off++)
            bad += crc32c(0, buf + off, len) != crc32c_table(0, buf + off, len);
    CHECK_MSG(bad == 0, "%d lengths/offsets differ", bad);
    /* continuation: a message in two pieces, cut anywhere */
    uint32_t whole = crc32c(0, buf, n);
    for (size_t cut = 0; cut <= n; cut += 4093) bad += crc32c(crc32c(0, buf, cut), buf + cut, n - cut) != whole;
    CHECK(bad == 0);
    free(buf);
}

static void test_catches_flips(void) {
    float w[3000];
    for (int i = 0; i < 3000; i++) w[i] = 0.01f * (float)((i % 17) - 8);
    uint32_t good = crc32c(0, w, sizeof w);
    unsigned char *p = (unsigned char *)w;
    int missed = 0;
    for (size_t i = 0; i < sizeof w; i += 7)
        for (int bit = 0; bit < 8; bit++) {
            p[i] ^= (unsigned char)(1 << bit);
            missed += crc32c(0, w, sizeof w) == good;
            p[i] ^= (unsigned char)(1 << bit);
        }
    CHECK_MSG(missed == 0, "%d single-bit flips not caught", missed);
    w[100] = 0.01f;
    good = crc32c(0, w, sizeof w);
    p[403] ^= 0x40;   /* the exponent's top bit: 0.01 -> about 3.4e36, finite */
    CHECK(isfinite(w[100]) && w[100] > 1e30f);
    CHECK(crc32c(0, w, sizeof w) != good);
}

static void test_files(void) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/tfm-crc-%ld.safetensors", (long)getpid());
    float w[6] = {1, 2, 3, 4, 5, 6}, out[6];
    StTensor t[2] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = w, .nbytes = 8},
                     {.name = "b", .dtype = ST_F32, .ndim = 2, .shape = {2, 2}, .data = w + 2, .nbytes = 16}};
    const char *mk[] = {"k", "crc32c"}, *mv[] = {"value", "stale"};   /* a copied crc32c pair is replaced */
    CHECK(st_write(path, t, 2, mk, mv, 2) == 0);
    SafeTensors st;
    CHECK_MSG(st_read(path, &st) == 0, "%s", error_message());
    CHECK(st.has_crc && st.tensors[0].has_crc && st.tensors[1].has_crc);
    CHECK(st.tensors[1].crc == crc32c(0, w + 2, 16));
    CHECK(st_tensor_copy(path, &st.tensors[1], out) == 0 && !memcmp(out, w + 2, 16));
    size_t data_at = st.blob_len - 24;
    st_free(&st);
    /* flip one bit of tensor b's bytes: st_read still parses (structure is fine),
     * the copy and the check fail naming the file and tensor */
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, (long)data_at + 8 + 5, SEEK_SET) == 0);
    unsigned char c = (unsigned char)fgetc(f);
    fseek(f, (long)data_at + 8 + 5, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    CHECK(st_read(path, &st) == 0);
    CHECK(st_tensor_verify(path, &st.tensors[0]) == 0);
    CHECK(st_tensor_copy(path, &st.tensors[1], out) == -1 && strstr(error_message(), "tensor 'b': checksum mismatch") &&
          strstr(error_message(), path));
    CHECK(st_tensor_verify(path, &st.tensors[1]) == -1);
    st_free(&st);
    /* the metadata: "value" -> "valuf" */
    CHECK(st_write(path, t, 2, mk, mv, 1) == 0);
    size_t len;
    char *blob = read_file(path, &len);
    char *at = blob ? memmem(blob, len, "value", 5) : NULL;
    CHECK(at != NULL);
    if (at) {
        at[4] = 'f';
        CHECK(write_file_atomic(path, blob, len) == 0);
        CHECK(st_read(path, &st) == -1 && strstr(error_message(), "the metadata fail their checksum"));
    }
    free(blob);
    unlink(path);
}

/* A tensor made piece by piece as it is written (StFill): the file is byte
 * for byte the one written from memory, whatever the pieces (the header
 * written again with the checksums); a failing fill makes no file. The
 * reading side: st_tensor_scan sees every byte in order, and a flipped one
 * fails its checksum after the last piece. */
typedef struct { const unsigned char *src; size_t calls, next; int fail_at; } Source;

static int fill_from(void *ctx, void *dst, size_t offset, size_t n) {
    Source *s = ctx;
    if (offset != s->next) return errorf("fill: offset %zu, expected %zu", offset, s->next);
    if ((int)s->calls++ == s->fail_at) return errorf("fill: the source failed (test)");
    memcpy(dst, s->src + offset, n);
    s->next = offset + n;
    return 0;
}

static int sum_bytes(void *ctx, const void *piece, size_t n) {
    Source *s = ctx;
    if (memcmp(piece, s->src + s->next, n)) return errorf("scan: piece at %zu differs", s->next);
    s->next += n;
    s->calls++;
    return 0;
}

static void test_streamed_tensors(void) {
    char a[256], b[256];
    snprintf(a, sizeof a, "/tmp/tfm-crc-%ld-a.safetensors", (long)getpid());
    snprintf(b, sizeof b, "/tmp/tfm-crc-%ld-b.safetensors", (long)getpid());
    float w[1000];
    for (int i = 0; i < 1000; i++) w[i] = (float)i * 0.5f - 7.0f;
    const char *mk[] = {"k"}, *mv[] = {"v"};
    StTensor mem[3] = {{.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {300}, .data = w, .nbytes = 1200},
                       {.name = "y", .dtype = ST_F32, .ndim = 2, .shape = {25, 27}, .data = w + 300, .nbytes = 2700},
                       {.name = "z", .dtype = ST_F32, .ndim = 1, .shape = {25}, .data = w + 975, .nbytes = 100}};
    CHECK(st_write(a, mem, 3, mk, mv, 1) == 0);
    size_t la, lb;
    char *fa = read_file(a, &la);
    static const char *pieces[] = {"4", "12", "1200", "4096", ""};   /* "": the default, 16 MB */
    for (int p = 0; p < 5; p++) {
        setenv("TFM_TEST_FILL_PIECE", pieces[p], 1);
        Source sx = {(const unsigned char *)w, 0, 0, -1}, sy = {(const unsigned char *)(w + 300), 0, 0, -1};
        StTensor st[3] = {mem[0], mem[1], mem[2]};
        st[0].data = st[1].data = NULL;   /* x and y streamed, z from memory */
        st[0].fill = st[1].fill = fill_from;
        st[0].fill_ctx = &sx;
        st[1].fill_ctx = &sy;
        CHECK_MSG(st_write(b, st, 3, mk, mv, 1) == 0, "%s", error_message());
        char *fb = read_file(b, &lb);
        CHECK_MSG(fa && fb && la == lb && !memcmp(fa, fb, la), "pieces of %s bytes: the file differs", pieces[p]);
        CHECK(sx.next == 1200 && sy.next == 2700);
        free(fb);
        if (p == 1) {   /* the read side, in 64 KB pieces: one here */
            SafeTensors r;
            CHECK(st_read(b, &r) == 0);
            Source sc = {(const unsigned char *)(w + 300), 0, 0, -1};
            CHECK_MSG(st_tensor_scan(b, &r.tensors[1], sum_bytes, &sc) == 0 && sc.next == 2700 && sc.calls == 1, "%s",
                      error_message());
            st_free(&r);
        }
    }
    /* a fill that fails: -1 with its message, and the old file stays */
    setenv("TFM_TEST_FILL_PIECE", "400", 1);
    Source bad = {(const unsigned char *)w, 0, 0, 2};
    StTensor st[1] = {mem[0]};
    st[0].data = NULL;
    st[0].fill = fill_from;
    st[0].fill_ctx = &bad;
    CHECK(st_write(b, st, 1, mk, mv, 1) == -1 && strstr(error_message(), "the source failed"));
    char *fb = read_file(b, &lb);
    CHECK(fb && la == lb && !memcmp(fa, fb, la));
    free(fb);
    unsetenv("TFM_TEST_FILL_PIECE");
    /* a flipped byte in a tensor read by st_tensor_scan: its checksum */
    FILE *f = fopen(a, "r+b");
    CHECK(f && fseek(f, -50, SEEK_END) == 0);
    int c = fgetc(f);
    fseek(f, -50, SEEK_END);
    fputc(c ^ 0x01, f);
    fclose(f);
    SafeTensors r;
    CHECK(st_read(a, &r) == 0);
    Source sc = {(const unsigned char *)(w + 975), 0, 0, -1};
    CHECK(st_tensor_scan(a, &r.tensors[2], NULL, &sc) == -1 && strstr(error_message(), "tensor 'z': checksum mismatch"));
    st_free(&r);
    free(fa);
    unlink(a);
    unlink(b);
}

int main(void) {
    RUN(test_known_answers);
    RUN(test_combine);
    RUN(test_paths_agree);
    RUN(test_catches_flips);
    RUN(test_files);
    RUN(test_streamed_tensors);
    return test_summary();
}
