/* test_text.c — text.h, the one way in for text: line ends (LF, CRLF, none
 * at the end), the BOM, NUL and invalid UTF-8 under each policy (REPLACE
 * equal to utf8_replace, STRICT naming file/line/byte, SKIP counting, BYTES),
 * the line and file limits, gzip (members, trailing bytes, every truncation
 * of a stream is an error, corrupt data), file types (directory, FIFO where
 * streams are refused), streaming from a pipe (read once, text_ready), and
 * the removal of atomic outputs' temporary files on SIGTERM and SIGINT. */
#include "test.h"

#include "text.h"
#include "utf8.h"
#include "util.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[512];

static const char *tmp_path(const char *name) {
    static char buf[8][640];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* gzip of s[0..n) in memory (one member); its length in *out_n. */
static unsigned char *gz_bytes(const void *s, size_t n, size_t *out_n) {
    z_stream z = {0};
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    unsigned char *out = xmalloc(cap);
    z.next_in = (Bytef *)s;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    deflate(&z, Z_FINISH);
    *out_n = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

/* All lines of path under o, joined with '|' (NULL on error). */
static char *lines_of(const char *path, const TextOptions *o) {
    TextLines t;
    if (text_lines_read_with(&t, path, o)) return NULL;
    size_t cap = 16;
    for (long i = 0; i < t.n; i++) cap += strlen(t.text + t.start[i]) + 1;
    char *s = xcalloc(1, cap);
    for (long i = 0; i < t.n; i++) {
        if (i) strcat(s, "|");
        strcat(s, t.text + t.start[i]);
    }
    text_lines_free(&t);
    return s;
}

static TextOptions quiet(TextInvalid inv) {
    TextOptions o = TEXT_DEFAULT;
    o.invalid = inv;
    o.quiet = 1;
    return o;
}

static void test_line_ends(void) {
    TextOptions o = quiet(TEXT_REPLACE);
    struct { const char *bytes, *want; } cases[] = {
        {"a\nb\n", "a|b"},
        {"a\r\nb\r\n", "a|b"},         /* CRLF */
        {"a\nb", "a|b"},               /* no final newline */
        {"a\r\nb\r", "a|b"},           /* CR before the end of the file */
        {"a\rb\n", "a\rb"},            /* a lone CR is kept: it is not a line end */
        {"\n\n", "|"},                 /* two empty lines */
        {"\xEF\xBB\xBF" "a\n", "a"},   /* BOM dropped */
        {"a\n\xEF\xBB\xBF" "b\n", "a|\xEF\xBB\xBF" "b"},   /* only at the start of the file */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_bytes(tmp_path("ends.txt"), cases[i].bytes, strlen(cases[i].bytes));
        char *got = lines_of(tmp_path("ends.txt"), &o);
        CHECK_MSG(got && !strcmp(got, cases[i].want), "case %zu: got '%s'", i, got ? got : "(error)");
        free(got);
    }
    write_bytes(tmp_path("empty.txt"), "", 0);
    TextLines t;
    CHECK(text_lines_read_with(&t, tmp_path("empty.txt"), &o) == 0 && t.n == 0);
    text_lines_free(&t);
}

/* NUL and invalid UTF-8: one rule under each policy. */
static void test_invalid_policies(void) {
    static const char bytes[] = "ok\nw4\0w5\nx \xff\xfe y\n\xed\xa0\x80\nend\n";
    const size_t n = sizeof bytes - 1;
    write_bytes(tmp_path("bad.txt"), bytes, n);

    TextOptions o = quiet(TEXT_REPLACE);
    TextLines t;
    CHECK(text_lines_read_with(&t, tmp_path("bad.txt"), &o) == 0);
    CHECK(t.n == 5 && t.invalid_lines == 3);
    if (t.n == 5) {
        CHECK_STR(t.text + t.start[1], "w4\xEF\xBF\xBDw5");               /* NUL: one U+FFFD */
        char *want = utf8_replace("x \xff\xfe y", 6, 1, NULL);          /* as Python's errors='replace' */
        CHECK_STR(t.text + t.start[2], want);
        CHECK_STR(t.text + t.start[2], "x \xEF\xBF\xBD\xEF\xBF\xBD y");
        CHECK_STR(t.text + t.start[3], "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");   /* a surrogate: 3 subparts */
        free(want);
        CHECK_STR(t.text + t.start[4], "end");
    }
    text_lines_free(&t);

    o = quiet(TEXT_STRICT);
    o.hint = "; a hint";
    CHECK(text_lines_read_with(&t, tmp_path("bad.txt"), &o) == -1);
    char want[800];
    snprintf(want, sizeof want, "%s:2: a NUL byte (not UTF-8 text) at byte 2 of the line, file offset 5; a hint", tmp_path("bad.txt"));
    CHECK_STR(error_message(), want);

    static const char bad_only[] = "ok\nx \xff y\n";
    write_bytes(tmp_path("bad2.txt"), bad_only, sizeof bad_only - 1);
    CHECK(text_lines_read_with(&t, tmp_path("bad2.txt"), &o) == -1);
    snprintf(want, sizeof want, "%s:2: invalid UTF-8 (byte 0xFF at byte 2 of the line, file offset 5); a hint", tmp_path("bad2.txt"));
    CHECK_STR(error_message(), want);

    o = quiet(TEXT_SKIP);
    char *got = lines_of(tmp_path("bad.txt"), &o);
    CHECK_STR(got, "ok|end");
    free(got);

    o = quiet(TEXT_BYTES);   /* configs, models: NUL refused, other bytes kept */
    CHECK(text_lines_read_with(&t, tmp_path("bad.txt"), &o) == -1);
    CHECK(strstr(error_message(), "bad.txt:2: a NUL byte") != NULL);
    got = lines_of(tmp_path("bad2.txt"), &o);
    CHECK_STR(got, "ok|x \xff y");
    free(got);
}

static void test_limits(void) {
    TextOptions o = quiet(TEXT_REPLACE);
    o.max_line = 10;
    static const char ok[] = "0123456789\n0123456789\r\nshort\n";
    write_bytes(tmp_path("lim.txt"), ok, sizeof ok - 1);
    char *got = lines_of(tmp_path("lim.txt"), &o);   /* 10 bytes (and a CR) are within the limit */
    CHECK_STR(got, "0123456789|0123456789|short");
    free(got);
    write_bytes(tmp_path("lim.txt"), "ok\n01234567890\n", 16);
    CHECK(lines_of(tmp_path("lim.txt"), &o) == NULL);
    char want[700];
    snprintf(want, sizeof want, "%s:2: a line longer than 10 bytes, the limit for a line here: is it a text file?", tmp_path("lim.txt"));
    CHECK_STR(error_message(), want);
    /* a long line with no newline at all: refused once past the limit, not read to the end */
    size_t big = 1 << 20;
    char *s = xmalloc(big);
    memset(s, 'x', big);
    write_bytes(tmp_path("lim.txt"), s, big);
    CHECK(lines_of(tmp_path("lim.txt"), &o) == NULL);
    CHECK(strstr(error_message(), "lim.txt:1: a line longer than 10 bytes") != NULL);
    free(s);
    o.max_line = 0;
    o.max_bytes = 100;
    s = xmalloc(200);
    for (int i = 0; i < 200; i++) s[i] = i % 10 == 9 ? '\n' : 'a';
    write_bytes(tmp_path("lim.txt"), s, 100);
    got = lines_of(tmp_path("lim.txt"), &o);
    CHECK(got != NULL);
    free(got);
    write_bytes(tmp_path("lim.txt"), s, 101);
    CHECK(lines_of(tmp_path("lim.txt"), &o) == NULL);
    CHECK(strstr(error_message(), "more than 100 bytes of text") != NULL);
    free(s);
}

static void test_gzip(void) {
    TextOptions o = quiet(TEXT_REPLACE);
    const char *text = "one\ntwo\r\nthree";
    size_t n1, n2;
    unsigned char *a = gz_bytes("one\n", 4, &n1), *b = gz_bytes("two\r\nthree", 10, &n2);
    unsigned char *both = xmalloc(n1 + n2 + 32);
    memcpy(both, a, n1);
    memcpy(both + n1, b, n2);
    write_bytes(tmp_path("m.gz"), both, n1 + n2);   /* two members: one stream */
    char *got = lines_of(tmp_path("m.gz"), &o);
    CHECK_STR(got, "one|two|three");
    free(got);
    memcpy(both + n1 + n2, "junk", 4);   /* trailing bytes: ignored (with a warning) */
    write_bytes(tmp_path("t.gz"), both, n1 + n2 + 4);
    got = lines_of(tmp_path("t.gz"), &o);
    CHECK_STR(got, "one|two|three");
    free(got);
    free(a); free(b); free(both);

    /* every cut of a gzip stream is an error, never a shorter text */
    size_t n;
    unsigned char *g = gz_bytes(text, strlen(text), &n);
    int errors = 0, truncated = 0;
    for (size_t cut = 2; cut < n; cut++) {
        write_bytes(tmp_path("cut.gz"), g, cut);
        char *r = lines_of(tmp_path("cut.gz"), &o);
        errors += r == NULL;
        truncated += r == NULL && strstr(error_message(), "the gzip stream ends early") != NULL;
        free(r);
    }
    CHECK_MSG(errors == (int)n - 2, "%d of %zu cuts were errors", errors, n - 2);
    CHECK_MSG(truncated == (int)n - 2, "%d of %zu cuts said truncated", truncated, n - 2);
    /* a flipped byte in the deflate data or the CRC: corrupt, named */
    int corrupt = 0;
    for (size_t at = 10; at < n; at++) {
        g[at] ^= 0x55;
        write_bytes(tmp_path("bad.gz"), g, n);
        char *r = lines_of(tmp_path("bad.gz"), &o);
        corrupt += r == NULL && strstr(error_message(), "bad.gz") != NULL;
        free(r);
        g[at] ^= 0x55;
    }
    CHECK_MSG(corrupt == (int)n - 10, "%d of %zu flipped bytes were errors", corrupt, n - 10);
    free(g);
}

static void test_types(void) {
    TextOptions o = quiet(TEXT_REPLACE);
    CHECK(text_open(tmpdir, &o) == NULL);
    char want[700];
    snprintf(want, sizeof want, "%s: read error: Is a directory (not a text file)", tmpdir);
    CHECK_STR(error_message(), want);
    CHECK(text_open(tmp_path("nope.txt"), &o) == NULL);
    CHECK(strstr(error_message(), "nope.txt: cannot open: No such file") != NULL);
    mkfifo(tmp_path("fifo"), 0600);
    o.stream = 0;   /* refused before it is opened: no writer, and still no wait */
    CHECK(text_open(tmp_path("fifo"), &o) == NULL);
    CHECK(strstr(error_message(), "fifo: is a FIFO (named pipe), not a regular file") != NULL);
    o.stream = 0;
    CHECK(text_open("/dev/null", &o) == NULL);
    CHECK(strstr(error_message(), "/dev/null: is a character device") != NULL);
}

/* stdin from a pipe: read once, in order; text_ready says when a line waits */
static void test_stream(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    int saved = dup(STDIN_FILENO);
    dup2(p[0], STDIN_FILENO);
    close(p[0]);
    CHECK(write(p[1], "first\nsec", 9) == 9);
    TextReader *r = text_open("-", NULL);
    CHECK(r != NULL);
    if (r) {
        char *line;
        CHECK(text_line(r, &line) == 5 && !strcmp(line, "first"));
        CHECK(text_ready(r) == 0);   /* "sec" has no newline yet and the pipe is empty */
        CHECK(write(p[1], "ond\n", 4) == 4);
        CHECK(text_ready(r) == 1);
        CHECK(text_line(r, &line) == 6 && !strcmp(line, "second"));
        close(p[1]);
        CHECK(text_line(r, &line) == -1);
        CHECK(text_line(r, &line) == -1);   /* stays at the end */
        CHECK_STR(text_name(r), "stdin");
        CHECK(text_lineno(r) == 2);
        text_close(r);
    } else close(p[1]);
    dup2(saved, STDIN_FILENO);
    close(saved);
}

/* text_read_all: lines ended by '\n' (CRLF and the BOM gone). */
static void test_read_all(void) {
    static const char text[] = "\xEF\xBB\xBF[a]\r\nk = v\r\nlast";
    write_bytes(tmp_path("all.txt"), text, sizeof text - 1);
    TextOptions o = quiet(TEXT_BYTES);
    size_t len;
    char *s = text_read_all(tmp_path("all.txt"), &o, &len);
    CHECK_STR(s, "[a]\nk = v\nlast\n");
    CHECK(s && len == strlen(s));
    free(s);
}

/* A signal that ends the process removes the temporary file of an output
 * being written (translate -o, bpe learn -o, average -o, eval --out all
 * write through atomic_open), and the process still dies of the signal. */
static void test_signal_cleanup(void) {
    const int sigs[2] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        char tmp[700];
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            signal(sigs[k], SIG_DFL);
            AtomicFile af;
            FILE *f = atomic_open(&af, tmp_path("out.txt"));
            if (!f) _exit(3);
            fputs("partial", f);
            fflush(f);
            if (write(fds[1], af.tmp, strlen(af.tmp) + 1) < 0) _exit(4);
            pause();   /* until the signal */
            _exit(5);
        }
        close(fds[1]);
        ssize_t got = read(fds[0], tmp, sizeof tmp);
        close(fds[0]);
        CHECK(got > 0);
        struct stat st;
        CHECK(got > 0 && stat(tmp, &st) == 0);   /* the temporary file is there */
        kill(pid, sigs[k]);
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == sigs[k], "status %d", status);
        CHECK(got > 0 && stat(tmp, &st) != 0);   /* and now it is gone */
        CHECK(stat(tmp_path("out.txt"), &st) != 0);   /* the output was never made */
    }
}

int main(void) {
    log_quiet = 1;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tfm_test_text.XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    RUN(test_line_ends);
    RUN(test_invalid_policies);
    RUN(test_limits);
    RUN(test_gzip);
    RUN(test_types);
    RUN(test_stream);
    RUN(test_read_all);
    RUN(test_signal_cleanup);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_summary();
}
