/* test_crc32c.c — CRC-32C: known answers, the SSE4.2 path (three streams
 * joined by shift tables) equal to the table at every length and alignment,
 * continuation, and what it must catch: every single-bit flip and the flipped
 * exponent bit of issue 28. Also the checksums of st_write/st_read end to
 * end: a flipped byte in a tensor or in the metadata, and a file without
 * checksums. */
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

int main(void) {
    RUN(test_known_answers);
    RUN(test_paths_agree);
    RUN(test_catches_flips);
    RUN(test_files);
    return test_summary();
}
