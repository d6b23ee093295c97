/* test_reliability.c — issue 17 at the library level: the atomic writer,
 * corrupt and hostile inputs (truncated or corrupt .gz, NUL bytes, empty
 * lines, counts that claim more than the file holds). Each check failed
 * before its fix (the empty-line one under make asan). */
#include "test.h"

#include "bpe.h"
#include "data.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[512];

/* DIR/name in a buffer that lives as long as the enclosing block. */
static const char *in_tmpdir(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}
#define tmp_path(name) in_tmpdir((name), (char[640]){0}, 640)

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static char *gz_bytes(const char *text, size_t *n) {   /* gzip of text, in memory */
    const char *p = tmp_path("tmp.gz");
    gzFile g = gzopen(p, "wb");
    gzwrite(g, text, (unsigned)strlen(text));
    gzclose(g);
    FILE *f = fopen(p, "rb");   /* the compressed bytes (read_file would inflate them) */
    char *b = xmalloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* item 4: a .gz cut short or with a bad CRC is an error naming the file,
 * never a shorter corpus; a whole one and a plain file read as before. */
static void test_gz_truncated(void) {
    char text[20000];
    size_t o = 0;
    for (int i = 0; i < 1000; i++) o += (size_t)snprintf(text + o, sizeof text - o, "line %d\n", i);
    size_t n;
    char *gz = gz_bytes(text, &n);
    TextLines t;
    write_bytes(tmp_path("whole.gz"), gz, n);
    CHECK(text_lines_read(&t, tmp_path("whole.gz")) == 0 && t.n == 1000);
    text_lines_free(&t);
    size_t cuts[] = {n - 1, n - 8, n / 2, 11};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_bytes(tmp_path("cut.gz"), gz, cuts[i]);
        int r = text_lines_read(&t, tmp_path("cut.gz"));
        CHECK_MSG(r == -1, "cut at %zu of %zu bytes read as %ld lines", cuts[i], n, r ? 0L : t.n);
        CHECK_MSG(strstr(error_message(), "cut.gz") && strstr(error_message(), "truncated"), "%s", error_message());
        if (!r) text_lines_free(&t);
    }
    gz[n - 6] ^= 1;   /* the CRC-32 in the trailer */
    write_bytes(tmp_path("crc.gz"), gz, n);
    CHECK(text_lines_read(&t, tmp_path("crc.gz")) == -1);
    CHECK_MSG(strstr(error_message(), "crc.gz") && strstr(error_message(), "corrupt"), "%s", error_message());
    /* bpe learn reads .gz its own way: the same rule */
    write_bytes(tmp_path("cut.gz"), gz, n / 2);
    const char *files[1] = {tmp_path("cut.gz")};
    BpeLearnOptions lo = {.vocab_size = 300, .normalization = "nfkc", .quiet = 1};
    Bpe *b = bpe_learn(files, 1, &lo);
    CHECK(b == NULL);
    CHECK_MSG(strstr(error_message(), "cut.gz") && strstr(error_message(), "truncated"), "%s", error_message());
    bpe_free(b);
    free(gz);
}

/* item 5: a NUL byte reads as U+FFFD, the rest of the line kept, counted. */
static void test_nul_bytes(void) {
    write_bytes(tmp_path("nul.txt"), "ab\0cd\0\nok\n\0\n", 12);
    TextLines t;
    CHECK(text_lines_read(&t, tmp_path("nul.txt")) == 0);
    CHECK(t.n == 3);
    if (t.n == 3) {
        CHECK_STR(t.text + t.start[0], "ab\xEF\xBF\xBD" "cd\xEF\xBF\xBD");
        CHECK_STR(t.text + t.start[1], "ok");
        CHECK_STR(t.text + t.start[2], "\xEF\xBF\xBD");
    }
    CHECK(t.invalid_lines == 2);
    text_lines_free(&t);
}

/* item 7: a corpus whose first line is empty (memcpy from NULL under UBSan),
 * and NUL lines counted with the invalid ones. */
static void test_empty_first_line(void) {
    write_bytes(tmp_path("e.src"), "\nw1 w2\nw3\0w4\n", 13);
    write_bytes(tmp_path("e.tgt"), "\nv2 v1\nv4 v3\n", 13);
    const char *files[2] = {tmp_path("e.src"), tmp_path("e.tgt")};
    BpeLearnOptions lo = {.vocab_size = 270, .normalization = "nfkc", .quiet = 1, .skip_invalid = 1};
    Bpe *b = bpe_learn(files, 2, &lo);
    CHECK(b != NULL);
    if (!b) return;
    Corpus c;
    CorpusStats st;
    CHECK(corpus_load(&c, files[0], files[1], b, NULL, &st) == 0);
    CHECK(c.n == 3 && c.src_len[0] == 0 && c.tgt_len[0] == 0 && c.src_len[2] >= 3);
    CHECK(st.invalid_utf8 == 1);
    corpus_free(&c);
    bpe_free(b);
}

static long peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* item 9: no allocation is sized by a count the file cannot back. A 2 KB
 * BPE model claiming 100M merges (was: 2 GB before the error); a 600 KB
 * JSON header of short strings (was: the rest of the header per string,
 * ~400 MB). The peak memory of the process grows by less than 64 MB. */
static void test_untrusted_counts(void) {
    long before = peak_rss_mb();
    char model[2048];
    snprintf(model, sizeof model, "tfm-bpe 1\nnormalization nfkc\nvocab_size 261\nchars 1\nU+2581 \xe2\x96\x81\n"
                                  "merges 100000000\n\xe2\x96\x81 \xe2\x96\x81\n");
    Bpe *b = bpe_from_string(model, "huge.bpe");
    CHECK(b == NULL);
    CHECK_MSG(strstr(error_message(), "huge.bpe") && strstr(error_message(), "merges 100000000"), "%s", error_message());
    snprintf(model, sizeof model, "tfm-bpe 1\nnormalization nfkc\nvocab_size 261\nchars 2000000000\n");
    CHECK(bpe_from_string(model, "huge.bpe") == NULL);
    CHECK_MSG(strstr(error_message(), "huge.bpe:4"), "%s", error_message());
    size_t n = 150000, len = 0;
    char *json = xmalloc(4 * n + 8);
    json[len++] = '[';
    for (size_t i = 0; i < n; i++) { memcpy(json + len, "\"a\",", 4); len += 4; }
    json[len - 1] = ']';
    Json j;
    CHECK(json_parse(json, len, "big header", &j) == 0);
    json_free(&j);
    free(json);
    long grown = peak_rss_mb() - before;
    CHECK_MSG(grown < 64, "peak memory grew by %ld MB", grown);
}

/* item 1: the atomic writer, unit by unit (tests/reliability.sh drives it
 * through every command). */
static void test_atomic_write(void) {
    const char *p = tmp_path("out.txt");
    CHECK(write_file_atomic(p, "one\n", 4) == 0);
    chmod(p, 0600);
    CHECK(write_file_atomic(p, "two\n", 4) == 0);
    size_t n;
    char *s = read_file(p, &n);
    CHECK(s && !strcmp(s, "two\n"));
    free(s);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);   /* permissions kept */
    /* a failed write leaves the old file and no temporary */
    AtomicFile a;
    FILE *f = atomic_open(&a, p);
    CHECK(f != NULL);
    if (f) {
        fputs("partial", f);
        atomic_abort(&a);
    }
    s = read_file(p, &n);
    CHECK(s && !strcmp(s, "two\n"));
    free(s);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
    /* a symlink: the file it names is replaced */
    CHECK(symlink("out.txt", tmp_path("link")) == 0);
    CHECK(write_file_atomic(tmp_path("link"), "three\n", 6) == 0);
    struct stat ls;
    CHECK(lstat(tmp_path("link"), &ls) == 0 && S_ISLNK(ls.st_mode));
    s = read_file(p, &n);
    CHECK(s && !strcmp(s, "three\n"));
    free(s);
    /* a directory, a dangling link: refused */
    CHECK(write_file_atomic(tmpdir, "x", 1) == -1 && strstr(error_message(), "directory"));
    CHECK(symlink("no/such", tmp_path("dangling")) == 0);
    CHECK(write_file_atomic(tmp_path("dangling"), "x", 1) == -1);
    CHECK(lstat(tmp_path("dangling"), &ls) == 0 && S_ISLNK(ls.st_mode));
    /* a character device: written through (never renamed over) */
    CHECK(write_file_atomic("/dev/null", "x", 1) == 0);
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    /* a full device: the error is reported */
    CHECK(write_file_atomic("/dev/full", "x", 1) == -1 && strstr(error_message(), "No space left"));
}

/* file_kind, the one list of the names that messages give file types:
 * each kind made here and stat'ed (a block device: its mode bits alone). */
static void test_file_kind(void) {
    struct stat st;
    write_bytes(tmp_path("kind.reg"), "x", 1);
    CHECK(stat(tmp_path("kind.reg"), &st) == 0 && !strcmp(file_kind(st.st_mode), "regular file"));
    CHECK(stat(tmpdir, &st) == 0 && !strcmp(file_kind(st.st_mode), "directory"));
    CHECK(mkfifo(tmp_path("kind.fifo"), 0600) == 0);
    CHECK(stat(tmp_path("kind.fifo"), &st) == 0 && !strcmp(file_kind(st.st_mode), "FIFO (named pipe)"));
    CHECK(stat("/dev/null", &st) == 0 && !strcmp(file_kind(st.st_mode), "character device"));
    CHECK(symlink("kind.reg", tmp_path("kind.link")) == 0);
    CHECK(lstat(tmp_path("kind.link"), &st) == 0 && !strcmp(file_kind(st.st_mode), "symbolic link"));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", tmp_path("kind.sock"));
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(stat(tmp_path("kind.sock"), &st) == 0 && !strcmp(file_kind(st.st_mode), "socket"));
    /* atomic_open refuses it by that name */
    CHECK(write_file_atomic(tmp_path("kind.sock"), "x", 1) == -1 && strstr(error_message(), "sock: is a socket, not a regular file"));
    if (fd >= 0) close(fd);
    CHECK(!strcmp(file_kind(0), "special file"));   /* no type bits: none of the above */
    CHECK(!strcmp(file_kind(S_IFBLK | 0660), "block device"));   /* (no block device to stat in a container) */
}

static void remove_tmpdir(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
}

int main(void) {
    const char *base = getenv("TFM_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_reliability.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    atexit(remove_tmpdir);
    log_quiet = 1;
    RUN(test_atomic_write);
    RUN(test_file_kind);
    RUN(test_gz_truncated);
    RUN(test_nul_bytes);
    RUN(test_empty_first_line);
    RUN(test_untrusted_counts);
    return test_summary();
}
