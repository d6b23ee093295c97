/* test_checkpoint.c — safetensors files (round trips, every validation error,
 * truncation/corruption fuzz, atomic writes under kill -9, disk full), the
 * JSON reader, the run directory, averaging, readability by Python, and
 * tfm checkpoints (model + config + tokenizer + training state). */
#include "test.h"
#include "bpe.h"
#include "checkpoint.h"
#include "rundir.h"
#include "config.h"
#include "json.h"
#include "model.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *tmp_dir(void) { return getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp"; }

static char *tmp_path(const char *name) {
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 600, "%s/%s", tmp_dir(), name);
    return p;
}

/* Replaces the file by a new one (unlink first: rewriting a truncated file
 * makes ext4 flush it on close, which is slow in the fuzz loops). */
static int write_bytes(const char *path, const void *data, size_t n) {
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int has(const char *haystack, const char *needle) { return haystack && strstr(haystack, needle) != NULL; }

/* A raw safetensors file: 8-byte length, the header text as given, then
 * `data_len` bytes of data (0, 1, 2, ...). */
static const char *raw_file(const char *name, const char *header, size_t data_len) {
    const char *p = tmp_path(name);
    size_t hl = strlen(header);
    unsigned char *b = xmalloc(8 + hl + data_len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (unsigned char)i;
    write_bytes(p, b, 8 + hl + data_len);
    free(b);
    return p;
}

/* ---- JSON --------------------------------------------------------------- */
static void test_json_reader(void) {
    Json j;
    const char *txt = " {\"a\": [1, -2.5e3, true, false, null], \"s\": \"q\\\"b\\\\n\\n\\t\\u00e9\\ud83d\\ude00\\/\", \"\": {}} ";
    CHECK_MSG(json_parse(txt, strlen(txt), "t", &j) == 0, "%s", error_message());
    CHECK(j.type == JSON_OBJECT && j.n == 3);
    const Json *a = json_get(&j, "a");
    CHECK(a && a->type == JSON_ARRAY && a->n == 5);
    CHECK(a && a->items[2].type == JSON_TRUE && a->items[4].type == JSON_NULL);
    CHECK_STR(a ? a->items[1].text : NULL, "-2.5e3");
    CHECK_STR(json_get(&j, "s") ? json_get(&j, "s")->text : NULL, "q\"b\\n\n\t\xc3\xa9\xf0\x9f\x98\x80/");
    CHECK(json_get(&j, "") && json_get(&j, "")->type == JSON_OBJECT);
    json_free(&j);

    uint64_t u;
    char num[32] = "18446744073709551615";
    Json n = {.type = JSON_NUMBER, .text = num};
    CHECK(json_u64(&n, &u) == 0 && u == UINT64_MAX);
    strcpy(num, "18446744073709551616"); CHECK(json_u64(&n, &u) == -1);
    strcpy(num, "-1"); CHECK(json_u64(&n, &u) == -1);
    strcpy(num, "1.0"); CHECK(json_u64(&n, &u) == -1);
    strcpy(num, "1e3"); CHECK(json_u64(&n, &u) == -1);

    static const struct { const char *text, *error; } bad[] = {
        {"", "unexpected end"}, {"{", "expected a string key"}, {"{\"a\" 1}", "expected ':'"},
        {"{\"a\":1,}", "expected a string key"}, {"[1 2]", "expected ',' or ']'"}, {"01", "unexpected text"},
        {"-", "expected a digit"}, {"1.", "after '.'"}, {"1e", "exponent"}, {"tru", "expected a JSON value"},
        {"\"abc", "unterminated string"}, {"\"a\\x\"", "invalid escape"}, {"\"\\u12\"", "hex digits"},
        {"\"\\ud800\"", "high surrogate"}, {"\"\\ud800\\u0041\"", "low surrogate"}, {"\"\\udc00\"", "lone low surrogate"},
        {"\"\\u0000\"", "\\u0000"}, {"\"a\nb\"", "control character"}, {"\"\xff\"", "invalid UTF-8"},
        {"\"\xc0\xaf\"", "invalid UTF-8"}, {"\"\xed\xa0\x80\"", "invalid UTF-8"}, {"{} x", "unexpected text"},
        {"{}{}", "unexpected text"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = json_parse(bad[i].text, strlen(bad[i].text), "bad.json", &j);
        CHECK_MSG(rc == -1 && has(error_message(), bad[i].error) && has(error_message(), "bad.json: byte"),
                  "'%s' -> rc %d, '%s' (expected '%s')", bad[i].text, rc, error_message(), bad[i].error);
    }
    /* nesting bomb: refused, no stack overflow */
    size_t depth = 100000;
    char *bomb = xmalloc(depth + 1);
    memset(bomb, '[', depth);
    CHECK(json_parse(bomb, depth, "bomb", &j) == -1 && has(error_message(), "nesting too deep"));
    free(bomb);
}

/* Random edits of a JSON text: every parse either succeeds or fails with a
 * message; nothing crashes or leaks (run under ASan). */
static void test_json_fuzz(void) {
    const char *seed = "{\"__metadata__\":{\"k\":\"v\\n\\u00e9\\ud83d\\ude00\"},"
                       "\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},\"a\":[true,false,null,-1.5e+3]}";
    size_t n = strlen(seed);
    char *buf = xmalloc(n + 8);
    static const char alpha[] = "{}[],:\"\\0123456789-+.eEu dtrfaln\xc3\xa9\xff";
    Rng r;
    rng_seed(&r, 3);
    int ok = 0, failed = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, seed, n + 1);
        size_t len = n;
        int edits = 1 + (int)(rng_u64(&r) % 3);
        for (int e = 0; e < edits && len > 0; e++) {
            size_t pos = rng_u64(&r) % len;
            switch (rng_u64(&r) % 3) {
            case 0: buf[pos] = alpha[rng_u64(&r) % (sizeof alpha - 1)]; break;          /* replace */
            case 1: memmove(buf + pos, buf + pos + 1, len - pos); len--; break;       /* delete */
            default: len = pos + 1; break;                                            /* truncate */
            }
        }
        Json j;
        if (json_parse(buf, len, "fuzz", &j) == 0) { ok++; json_free(&j); }
        else failed += has(error_message(), "fuzz: byte");
    }
    CHECK(ok > 0);
    CHECK_MSG(ok + failed == 20000, "%d parsed, %d failed with a message", ok, failed);
    free(buf);
}

/* Every string survives writer -> reader: all ASCII bytes and multi-byte UTF-8. */
static void test_json_writer_round_trip(void) {
    char s[300];
    int k = 0;
    for (int c = 1; c < 128; c++) s[k++] = (char)c;
    const char *utf = "\xc3\xa9\xe2\x96\x81\xf0\x9f\x98\x80\xe2\x80\xa8\xef\xbf\xbf";  /* é ▁ 😀 U+2028 U+FFFF */
    memcpy(s + k, utf, strlen(utf) + 1);
    JsonBuf b = {0};
    jb_raw(&b, "[");
    jb_string(&b, s);
    jb_raw(&b, ",");
    jb_string(&b, "");
    jb_raw(&b, "]");
    Json j;
    CHECK_MSG(json_parse(b.s, b.len, "w", &j) == 0, "%s", error_message());
    CHECK(j.n == 2);
    CHECK(j.n == 2 && !strcmp(j.items[0].text, s) && !strcmp(j.items[1].text, ""));
    /* no raw control character reaches the output */
    int ctrl = 0;
    for (size_t i = 0; i < b.len; i++) ctrl += (unsigned char)b.s[i] < 0x20;
    CHECK(ctrl == 0);
    json_free(&j);
    jb_free(&b);
}

/* ---- safetensors --------------------------------------------------------- */
static const char *TRICKY = "line1\nline2\t\"quoted\" back\\slash \x01 caf\xc3\xa9 \xe2\x96\x81the \xf0\x9f\x98\x80 [x] = y";

static void test_st_round_trip(void) {
    float w[6] = {1.5f, -2.25f, 3e-38f, 1e38f, -0.0f, 7};
    int64_t ids[3] = {-1, 0, INT64_MAX};
    uint8_t flag = 0xAB;
    float none[1];
    StTensor t[4] = {
        {.name = "layer.weight", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = w, .nbytes = sizeof w},
        {.name = "ids", .dtype = ST_I64, .ndim = 1, .shape = {3}, .data = ids, .nbytes = sizeof ids},
        {.name = "flag", .dtype = ST_U8, .ndim = 0, .data = &flag, .nbytes = 1},
        {.name = "empty", .dtype = ST_F32, .ndim = 2, .shape = {0, 3}, .data = none, .nbytes = 0},
    };
    const char *mk[] = {"format", "tricky", "empty"};
    const char *mv[] = {"test", TRICKY, ""};
    const char *p = tmp_path("rt.safetensors");
    CHECK_MSG(st_write(p, t, 4, mk, mv, 3) == 0, "%s", error_message());
    SafeTensors st;
    CHECK_MSG(st_read(p, &st) == 0, "%s", error_message());
    CHECK(st.num_tensors == 4 && st.num_meta == 4 && st.has_crc);   /* the three, and st_write's checksums */
    for (int i = 0; i < 4 && i < st.num_tensors; i++) {
        const StTensor *x = &st.tensors[i];
        CHECK_STR(x->name, t[i].name);   /* file order kept */
        CHECK(x->dtype == t[i].dtype && x->ndim == t[i].ndim && x->nbytes == t[i].nbytes);
        CHECK(!memcmp(x->shape, t[i].shape, sizeof x->shape));
        CHECK(x->nbytes == 0 || !memcmp(x->data, t[i].data, x->nbytes));
    }
    CHECK_STR(st_meta(&st, "tricky"), TRICKY);
    CHECK_STR(st_meta(&st, "empty"), "");
    CHECK(st_meta(&st, "nope") == NULL);
    CHECK(st_find(&st, "ids") == &st.tensors[1]);
    CHECK(st_find(&st, "nope") == NULL);
    /* header padded so that the data starts 8-byte aligned */
    uint64_t hl;
    memcpy(&hl, st.blob, 8);
    CHECK(hl % 8 == 0);
    CHECK(((const char *)st.blob)[8] == '{');
    CHECK(st.blob_len == 8 + hl + sizeof w + sizeof ids + 1);
    st_free(&st);
    /* no temp file left behind */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(!file_exists(tmp));
    /* no metadata, no tensors: "{}" padded */
    p = tmp_path("empty.safetensors");
    CHECK(st_write(p, NULL, 0, NULL, NULL, 0) == 0);
    CHECK_MSG(st_read(p, &st) == 0 && st.num_tensors == 0 && st.num_meta == 1 && st.has_crc, "%s", error_message());
    st_free(&st);
}

/* Resident kilobytes of the mapping that holds p (its "Rss:" in
 * /proc/self/smaps); -1 where that cannot be read. */
static long mapping_rss_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

/* st_tensor_copy gives the file's pages back as it copies them (h3's release_pages): after
 * copying a 4 MiB tensor (and touching every page of it first) the mapping
 * of the file holds at most the header's page and the tensor's last one;
 * the tensor still reads the same bytes (its pages read again), and a
 * second copy checks the checksum again. */
static void test_st_copy_drops_pages(void) {
    enum { N = 1 << 20 };
    float *w = xmalloc(N * sizeof *w);
    for (int i = 0; i < N; i++) w[i] = (float)i * 0.5f;
    StTensor t = {.name = "big", .dtype = ST_F32, .ndim = 1, .shape = {N}, .data = w, .nbytes = N * sizeof *w};
    const char *p = tmp_path("big.safetensors");
    CHECK_MSG(st_write(p, &t, 1, NULL, NULL, 0) == 0, "%s", error_message());
    SafeTensors st;
    CHECK_MSG(st_read(p, &st) == 0, "%s", error_message());
    const StTensor *x = st_find(&st, "big");
    CHECK(x && x->has_crc && x->nbytes == t.nbytes);
    if (x) {
        CHECK(!memcmp(x->data, w, t.nbytes));   /* every page of the file mapped in */
        long before = mapping_rss_kb(x->data);
        float *copy = xmalloc(t.nbytes);
        CHECK_MSG(st_tensor_copy(p, x, copy) == 0, "%s", error_message());
        long after = mapping_rss_kb(x->data);
        long page_kb = sysconf(_SC_PAGESIZE) / 1024;
        if (before < 0) printf("SKIP the pages given back: no /proc/self/smaps here\n");
        else CHECK_MSG(before >= 4096 && after <= 2 * page_kb, "mapping resident %ld kB before the copy, %ld after", before, after);
        CHECK(!memcmp(copy, w, t.nbytes) && !memcmp(x->data, w, t.nbytes));
        CHECK_MSG(st_tensor_copy(p, x, copy) == 0, "%s", error_message());
        free(copy);
    }
    st_free(&st);
    free(w);
}

static void test_st_write_errors(void) {
    float w[2] = {1, 2};
    StTensor t[2] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = w, .nbytes = 8},
                     {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = w, .nbytes = 8}};
    const char *p = tmp_path("werr.safetensors");
    CHECK(st_write(p, t, 2, NULL, NULL, 0) == -1 && has(error_message(), "duplicate tensor name 'a'"));
    t[1].name = "b"; t[1].nbytes = 4;
    CHECK(st_write(p, t, 2, NULL, NULL, 0) == -1 && has(error_message(), "'b': nbytes = 4"));
    t[1].nbytes = 8; t[1].name = "__metadata__";
    CHECK(st_write(p, t, 2, NULL, NULL, 0) == -1 && has(error_message(), "invalid name"));
    t[1].name = "b";
    const char *mk[] = {"k", "k"}, *mv[] = {"v", "\xff"};
    CHECK(st_write(p, t, 2, mk, mv, 2) == -1 && has(error_message(), "not valid UTF-8"));
    mv[1] = "w";
    CHECK(st_write(p, t, 2, mk, mv, 2) == -1 && has(error_message(), "duplicate metadata key 'k'"));
    CHECK(!file_exists(p));
    const char *nodir = tmp_path("no/such/dir/x.safetensors");
    CHECK(st_write(nodir, t, 2, NULL, NULL, 0) == -1 && has(error_message(), nodir) && has(error_message(), "No such file"));
    CHECK(st_read(tmp_path("missing.safetensors"), &(SafeTensors){0}) == -1 && has(error_message(), "cannot open"));
}

/* A write that fails half-way (file size limit = disk full for this process)
 * reports the error, removes the temp file and leaves the old file intact. */
static void test_st_write_disk_full(void) {
    const char *p = tmp_path("full.safetensors");
    float small[4] = {1, 2, 3, 4};
    StTensor t = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = small, .nbytes = sizeof small};
    CHECK(st_write(p, &t, 1, NULL, NULL, 0) == 0);
    const char *msg = tmp_path("full.msg");
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64 * 1024, 64 * 1024};
        signal(SIGXFSZ, SIG_IGN);             /* write() then fails with EFBIG */
        setrlimit(RLIMIT_FSIZE, &rl);
        size_t n = 1 << 20;
        float *big = xcalloc(n, sizeof *big);
        StTensor b = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = big, .nbytes = n * 4};
        int rc = st_write(p, &b, 1, NULL, NULL, 0);
        FILE *f = fopen(msg, "w");
        if (f) { fputs(error_message(), f); fclose(f); }
        _exit(rc == -1 ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *m = read_file(msg, NULL);
    CHECK_MSG(has(m, p) && has(m, "File too large"), "%s", m ? m : "(no message)");
    free(m);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)pid);
    CHECK(!file_exists(tmp));
    SafeTensors st;
    CHECK(st_read(p, &st) == 0 && st.num_tensors == 1 && st.tensors[0].nbytes == sizeof small &&
          !memcmp(st.tensors[0].data, small, sizeof small));
    st_free(&st);
}

static void expect_read_error(const char *header, size_t data_len, const char *needle) {
    const char *p = raw_file("bad.safetensors", header, data_len);
    SafeTensors st;
    int rc = st_read(p, &st);
    CHECK_MSG(rc == -1 && has(error_message(), needle) && has(error_message(), p),
              "header %s: rc %d, '%s' (expected '%s')", header, rc, rc ? error_message() : "", needle);
    if (rc == 0) st_free(&st);
}

static void test_st_read_errors(void) {
    SafeTensors st;
    const char *p = tmp_path("short.safetensors");
    write_bytes(p, "", 0);
    CHECK(st_read(p, &st) == -1 && has(error_message(), "file is 0 bytes, too short"));
    write_bytes(p, "\x10\0\0\0\0\0\0", 7);
    CHECK(st_read(p, &st) == -1 && has(error_message(), "file is 7 bytes, too short"));
    write_bytes(p, "\x10\0\0\0\0\0\0\0{}", 10);
    CHECK(st_read(p, &st) == -1 && has(error_message(), "header length 16 exceeds the file size (10 bytes)"));
    write_bytes(p, "\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
    CHECK(st_read(p, &st) == -1 && has(error_message(), "exceeds the file size"));
    /* a header length within the file but above the limit (sparse file) */
    int fd = open(p, O_WRONLY | O_TRUNC);
    uint64_t big = ST_MAX_HEADER + 8;
    CHECK(write(fd, &big, 8) == 8 && ftruncate(fd, (off_t)big + 64) == 0);
    close(fd);
    CHECK(st_read(p, &st) == -1 && has(error_message(), "exceeds the 100000000-byte limit"));

    const char *T = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":";
    char h[512];
    expect_read_error("[]      ", 0, "does not start with '{'");
    expect_read_error("{\"t\":}  ", 0, "header: byte 5: expected a JSON value");
    expect_read_error("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "missing or non-string \"dtype\"");
    expect_read_error("{\"t\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"F33\"");
    expect_read_error("{\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "dtype F16 is not supported");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "non-array \"shape\"");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0] is not a non-negative integer");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "shape[0] is not");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "5 dimensions");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8, "shape is too large");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown field \"x\"");
    expect_read_error("{\"t\":5}", 0, "expected an object, got number");
    snprintf(h, sizeof h, "{%s[0]}}", T);           expect_read_error(h, 8, "must be [begin, end]");
    snprintf(h, sizeof h, "{%s[0,-8]}}", T);        expect_read_error(h, 8, "must be [begin, end]");
    snprintf(h, sizeof h, "{%s[8,0]}}", T);         expect_read_error(h, 8, "end before they begin");
    snprintf(h, sizeof h, "{%s[0,12]}}", T);        expect_read_error(h, 12, "hold 12 bytes but shape x F32 needs 8");
    snprintf(h, sizeof h, "{%s[8,16]}}", T);        expect_read_error(h, 12, "run past the data region (12 bytes)");
    snprintf(h, sizeof h, "{%s[0,8]}}", T);         expect_read_error(h, 12, "data region is 12 bytes but the tensors cover 8");
    snprintf(h, sizeof h, "{%s[4,12]}}", T);        expect_read_error(h, 12, "data bytes 0..4 belong to no tensor");
    snprintf(h, sizeof h, "{%s[0,8]},\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", T);
    expect_read_error(h, 12, "overlaps tensor 't'");
    snprintf(h, sizeof h, "{%s[0,8]},%s[0,8]}}", T, T);
    expect_read_error(h, 8, "duplicate entry \"t\"");
    expect_read_error("{\"__metadata__\":{\"a\":1}}", 0, "metadata \"a\" is a number, expected a string");
    expect_read_error("{\"__metadata__\":[]}", 0, "__metadata__ is not an object");
    expect_read_error("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "duplicate metadata key \"a\"");
    expect_read_error("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate entry \"__metadata__\"");
    expect_read_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551616]}}", 8, "must be [begin, end]");
    /* valid corner cases from other writers: no padding, unaligned data, offsets out of order */
    snprintf(h, sizeof h, "{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]},%s[0,8]}}", T);
    p = raw_file("ok.safetensors", h, 9);
    CHECK_MSG(st_read(p, &st) == 0, "%s", error_message());
    CHECK(st.num_tensors == 2 && st.tensors[0].nbytes == 1 && ((unsigned char *)st.tensors[0].data)[0] == 8);
    st_free(&st);
}

/* Truncating a valid file anywhere must fail; flipping or replacing bytes
 * must either fail with a message or give a self-consistent result. */
static int consistent(const SafeTensors *st) {
    const char *lo = st->blob, *hi = lo + st->blob_len;
    for (int i = 0; i < st->num_tensors; i++) {
        const StTensor *t = &st->tensors[i];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
        if (numel * st_dtype_size(t->dtype) != t->nbytes) return 0;
        if ((const char *)t->data < lo || (const char *)t->data + t->nbytes > hi) return 0;
    }
    for (int i = 0; i < st->num_meta; i++)
        if (!st->meta_keys[i] || !st->meta_values[i]) return 0;
    return 1;
}

static void test_fuzz_truncate_and_corrupt(void) {
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t b[2] = {42, -42};
    uint8_t c[3] = {1, 2, 3};
    StTensor t[3] = {{.name = "enc.w", .dtype = ST_F32, .ndim = 2, .shape = {2, 4}, .data = a, .nbytes = sizeof a},
                     {.name = "ids", .dtype = ST_I64, .ndim = 1, .shape = {2}, .data = b, .nbytes = sizeof b},
                     {.name = "mask", .dtype = ST_U8, .ndim = 1, .shape = {3}, .data = c, .nbytes = sizeof c}};
    const char *mk[] = {"format", "config"}, *mv[] = {"tfm-checkpoint-1", "[model]\nd_model = 8\n\xe2\x96\x81\\\"\n"};
    const char *p = tmp_path("fuzz.safetensors"), *q = tmp_path("fuzzed.safetensors");
    CHECK(st_write(p, t, 3, mk, mv, 2) == 0);
    size_t len;
    char *orig = read_file(p, &len);
    char *buf = xmalloc(len);
    SafeTensors st;
    int trunc_fail = 0;
    for (size_t L = 0; L < len; L++) {
        write_bytes(q, orig, L);
        if (st_read(q, &st) == -1 && has(error_message(), q)) trunc_fail++;
        else st_free(&st);
    }
    CHECK_MSG(trunc_fail == (int)len, "%d of %zu truncations rejected", trunc_fail, len);
    /* single-byte changes everywhere */
    static const unsigned char flips[] = {0x01, 0x02, 0x10, 0x20, 0x40, 0x80, 0xFF};
    int runs = 0, bad = 0, crashed_consistency = 0;
    for (size_t i = 0; i < len; i++)
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(buf, orig, len);
            buf[i] ^= (char)flips[f];
            write_bytes(q, buf, len);
            runs++;
            if (st_read(q, &st) == 0) { crashed_consistency += !consistent(&st); st_free(&st); }
            else bad += !has(error_message(), q);
        }
    /* random JSON-ish replacements inside the header, and random lengths */
    Rng r;
    rng_seed(&r, 7);
    static const char alpha[] = "{}[],:\"0123456789-.eE\\u ab";
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, orig, len);
        int k = 1 + (int)(rng_u64(&r) % 4);
        for (int j = 0; j < k; j++) {
            size_t pos = 8 + rng_u64(&r) % (len - 8);
            buf[pos] = alpha[rng_u64(&r) % (sizeof alpha - 1)];
        }
        if (it % 10 == 0) buf[rng_u64(&r) % 8] = (char)rng_u64(&r);
        write_bytes(q, buf, len);
        runs++;
        if (st_read(q, &st) == 0) { crashed_consistency += !consistent(&st); st_free(&st); }
        else bad += !has(error_message(), q);
    }
    CHECK(runs > 3000);
    CHECK_MSG(bad == 0, "%d errors did not name the file", bad);
    CHECK_MSG(crashed_consistency == 0, "%d accepted files were inconsistent", crashed_consistency);
    free(buf);
    free(orig);
}

/* kill -9 a process that keeps rewriting a big file: whatever lies under the
 * final name is always a complete file of one generation. */
static void test_atomic_under_kill9(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/atomic", tmp_dir());
    mkdir(dir, 0755);
    char *p = checkpoint_path(dir, 1);
    size_t n = 1 << 20;   /* 4 MB per generation */
    float *v = xmalloc(n * sizeof *v);
    int complete = 0, killed = 0;
    srand((unsigned)time(NULL));
    for (size_t i = 0; i < n; i++) v[i] = -1;   /* generation -1: the old file */
    StTensor t0 = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = v, .nbytes = n * 4};
    const char *k0[] = {"generation"}, *v0[] = {"-1"};
    CHECK(st_write(p, &t0, 1, k0, v0, 1) == 0);
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (long gen = 1;; gen++) {
                for (size_t i = 0; i < n; i++) v[i] = (float)(gen * 1000 + round);
                StTensor t = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n}, .data = v, .nbytes = n * 4};
                char g[32];
                snprintf(g, sizeof g, "%ld", gen * 1000 + round);
                const char *mk[] = {"generation"}, *mv[] = {g};
                if (st_write(p, &t, 1, mk, mv, 1)) _exit(3);
            }
        }
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        killed += WIFSIGNALED(status);
        SafeTensors st;
        int rc = st_read(p, &st);
        CHECK_MSG(rc == 0, "round %d: %s", round, error_message());
        if (rc) continue;
        const char *g = st_meta(&st, "generation");
        float want = g ? (float)atol(g) : -1;
        int same = st.num_tensors == 1 && st.tensors[0].nbytes == n * 4;
        for (size_t i = 0; same && i < n; i += 4099) same = ((float *)st.tensors[0].data)[i] == want;
        same = same && ((float *)st.tensors[0].data)[n - 1] == want;
        CHECK(same);
        complete += same;
        st_free(&st);
    }
    CHECK(killed == 12);
    CHECK(complete == 12);
    /* interrupted writes leave NAME.tmp.<pid>; run_dir_clean removes those of dead processes */
    CHECK(run_dir_clean(dir, NULL) >= 0);
    DIR *d = opendir(dir);
    int temps = 0, files = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        files++;
        temps += strstr(de->d_name, ".tmp.") != NULL;
    }
    if (d) closedir(d);
    CHECK(temps == 0);
    CHECK(files == 1);
    free(v);
    free(p);
}

/* ---- the run directory --------------------------------------------------- */
static void touch(const char *dir, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_bytes(p, "x", 1);
}

static void test_run_dir(void) {
    char *p = checkpoint_path("run", 1200);
    CHECK_STR(p, "run/checkpoint-00001200.safetensors");
    free(p);
    p = checkpoint_path("run/", 123456789);
    CHECK_STR(p, "run/checkpoint-123456789.safetensors");
    free(p);
    p = checkpoint_run_file("run", CHECKPOINT_BEST);
    CHECK_STR(p, "run/best.safetensors");
    free(p);
    CHECK(checkpoint_step("a/b/checkpoint-00001200.safetensors") == 1200);
    CHECK(checkpoint_step("checkpoint-0.safetensors") == 0);
    CHECK(checkpoint_step("checkpoint-.safetensors") == -1);
    CHECK(checkpoint_step("checkpoint-12a.safetensors") == -1);
    CHECK(checkpoint_step("checkpoint-00001200.safetensors.tmp.77") == -1);
    CHECK(checkpoint_step("best.safetensors") == -1);
    CHECK(checkpoint_step("checkpoint-1234567890123456789.safetensors") == -1);

    char dir[600];
    snprintf(dir, sizeof dir, "%s/rundir", tmp_dir());
    char **paths;
    CHECK(checkpoint_list(dir, &paths) == 0);   /* missing: no checkpoints */
    checkpoint_list_free(paths, 0);
    mkdir(dir, 0755);
    const char *names[] = {"checkpoint-00003000.safetensors", "checkpoint-00000020.safetensors", "best.safetensors",
                           "checkpoint-123456789.safetensors", "checkpoint-00000100.safetensors", "average.safetensors",
                           "checkpoint-00000100.safetensors.tmp.1", "checkpoint-x.safetensors", "notes.txt"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) touch(dir, names[i]);
    int n = checkpoint_list(dir, &paths);
    CHECK(n == 4);
    if (n == 4) {
        CHECK(checkpoint_step(paths[0]) == 20 && checkpoint_step(paths[1]) == 100);
        CHECK(checkpoint_step(paths[2]) == 3000 && checkpoint_step(paths[3]) == 123456789);
        CHECK(has(paths[0], dir));
    }
    checkpoint_list_free(paths, n);
    /* none of these one-byte files loads: pruning deletes none of them, it sets each aside */
    CHECK(checkpoint_prune(dir, 2, NULL) == 0);
    n = checkpoint_list(dir, &paths);
    CHECK(n == 0);
    checkpoint_list_free(paths, n);
    char keep[700];
    snprintf(keep, sizeof keep, "%s/checkpoint-00003000.safetensors.corrupt", dir);
    CHECK(file_exists(keep));
    snprintf(keep, sizeof keep, "%s/best.safetensors", dir);
    CHECK(file_exists(keep));
    CHECK(checkpoint_prune(dir, 5, NULL) == 0);
    snprintf(keep, sizeof keep, "%s/notexist", tmp_dir());
    CHECK(checkpoint_prune(keep, 1, NULL) == 0);
}

/* ---- averaging ----------------------------------------------------------- */
/* A tfm-format file with hand-made tensors (no model code needed). */
static const char *fake_checkpoint(const char *name, int d_model, int rows, const float *w, const float *b,
                                   long step, const char *tokenizer, const char *extra_tensor) {
    Config c;
    config_defaults(&c);
    c.d_model = d_model;
    c.heads = 2;
    char *ini = config_to_string(&c);
    config_free(&c);
    float adam[3] = {9, 9, 9};
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    StTensor t[4] = {
        {.name = "encoder.embed_tokens.weight", .dtype = ST_F32, .ndim = 2, .shape = {rows, 2}, .data = (void *)w, .nbytes = (size_t)rows * 8},
        {.name = "encoder.layers.0.fc1.bias", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = (void *)b, .nbytes = 12},
        {.name = "optimizer.adam_m", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = adam, .nbytes = 12},
        {.name = (char *)extra_tensor, .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = adam, .nbytes = 12},
    };
    const char *mk[] = {"format", "config", "tokenizer", "step", "rng_state", "note"};
    const char *mv[] = {"tfm-checkpoint-1", ini, tokenizer, stepbuf, "12345", name};
    const char *p = tmp_path(name);
    if (st_write(p, t, extra_tensor ? 4 : 3, mk, mv, 6)) fprintf(stderr, "%s\n", error_message());
    free(ini);
    return p;
}

static void test_average_known_mean(void) {
    /* 2^24, 1, 1: a float running sum loses both 1s; double keeps them */
    float w1[4] = {16777216.0f, 1, -3, 0.1f}, w2[4] = {1, 2, 5, 0.2f}, w3[4] = {1, 4, 1, 0.3f};
    float b1[3] = {1, 2, 3}, b2[3] = {4, 5, 6}, b3[3] = {7, 8, 10};
    char p1[600], p2[600], p3[600];
    snprintf(p1, sizeof p1, "%s", fake_checkpoint("avg1.safetensors", 8, 2, w1, b1, 100, "tok", NULL));
    snprintf(p2, sizeof p2, "%s", fake_checkpoint("avg2.safetensors", 8, 2, w2, b2, 200, "tok", NULL));
    snprintf(p3, sizeof p3, "%s", fake_checkpoint("avg3.safetensors", 8, 2, w3, b3, 300, "tok", NULL));
    const char *in[] = {p1, p2, p3};
    const char *out = tmp_path("avg.safetensors");
    CHECK_MSG(checkpoint_average(in, 3, out) == 0, "%s", error_message());
    SafeTensors st;
    CHECK_MSG(st_read(out, &st) == 0, "%s", error_message());
    const StTensor *w = st_find(&st, "encoder.embed_tokens.weight"), *b = st_find(&st, "encoder.layers.0.fc1.bias");
    CHECK(w && b && st.num_tensors == 2);   /* no optimizer tensors */
    if (w && b) {
        float *x = w->data, *y = b->data;
        CHECK(x[0] == 5592406.0f);           /* (2^24 + 2) / 3 exactly */
        CHECK(x[1] == (float)(7.0 / 3) && x[2] == 1.0f);
        CHECK(x[3] == (float)(((double)0.1f + (double)0.2f + (double)0.3f) / 3));
        CHECK(y[0] == 4 && y[1] == 5 && y[2] == (float)(19.0 / 3));
        CHECK(w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 2);
    }
    CHECK_STR(st_meta(&st, "note"), "avg3.safetensors");   /* the newest input's metadata */
    CHECK(st_meta(&st, "step") == NULL && st_meta(&st, "rng_state") == NULL);
    CHECK_STR(st_meta(&st, "format"), "tfm-checkpoint-1");
    const char *from = st_meta(&st, "averaged_from");
    Json j;
    CHECK(from && json_parse(from, strlen(from), "averaged_from", &j) == 0);
    if (from && j.type == JSON_ARRAY) {
        CHECK(j.n == 3 && !strcmp(j.items[0].text, p1) && !strcmp(j.items[2].text, p3));
        json_free(&j);
    }
    st_free(&st);
    /* averaging one file is a copy without training state */
    CHECK(checkpoint_average(in, 1, out) == 0);
    CHECK(st_read(out, &st) == 0 && ((float *)st_find(&st, "encoder.embed_tokens.weight")->data)[0] == 16777216.0f);
    st_free(&st);
}

static void expect_average_error(const char *a, const char *b, const char *n1, const char *n2) {
    const char *in[] = {a, b};
    const char *out = tmp_path("refused.safetensors");
    unlink(out);
    int rc = checkpoint_average(in, 2, out);
    CHECK_MSG(rc == -1 && has(error_message(), n1) && has(error_message(), n2), "rc %d: %s", rc, error_message());
    CHECK(!file_exists(out));
}

static void test_average_refuses(void) {
    float w[6] = {1, 2, 3, 4, 5, 6}, b[3] = {1, 2, 3};
    char ok[600];
    snprintf(ok, sizeof ok, "%s", fake_checkpoint("ok.safetensors", 8, 2, w, b, 1, "tok", NULL));
    const char *p;
    p = fake_checkpoint("shape.safetensors", 8, 3, w, b, 2, "tok", NULL);
    expect_average_error(ok, p, "'encoder.embed_tokens.weight' is F32 [2, 2] in", "but F32 [3, 2] in");
    expect_average_error(ok, p, ok, p);
    p = fake_checkpoint("config.safetensors", 16, 2, w, b, 2, "tok", NULL);
    expect_average_error(ok, p, "different model configs: [model] d_model: 8 vs 16", p);
    p = fake_checkpoint("tok.safetensors", 8, 2, w, b, 2, "other", NULL);
    expect_average_error(ok, p, "different tokenizers", p);
    p = fake_checkpoint("extra.safetensors", 8, 2, w, b, 2, "tok", "decoder.layer_norm.bias");
    expect_average_error(ok, p, "'decoder.layer_norm.bias' is in", "but not in");
    expect_average_error(p, ok, "'decoder.layer_norm.bias' is in", "but not in");
    float nan[4] = {1, NAN, 3, 4};
    p = fake_checkpoint("nan.safetensors", 8, 2, nan, b, 2, "tok", NULL);
    expect_average_error(ok, p, "non-finite value", "index 1");
    StTensor t = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = w, .nbytes = 8};
    p = tmp_path("foreign.safetensors");
    st_write(p, &t, 1, NULL, NULL, 0);
    expect_average_error(ok, p, "not a tfm checkpoint", "\"format\" is missing");
}

/* ---- Python (json + numpy, no safetensors package) reads our files ------- */
static const char *PY_READER =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "data = b[8 + n:]\n"
    "out = {'metadata': h.pop('__metadata__', {}), 'tensors': {}}\n"
    "end = 0\n"
    "for name, info in h.items():\n"
    "    s, e = info['data_offsets']\n"
    "    dt = {'F32': '<f4', 'I64': '<i8', 'U8': 'u1'}[info['dtype']]\n"
    "    a = np.frombuffer(data[s:e], dtype=dt).reshape(info['shape'])\n"
    "    end = max(end, e)\n"
    "    out['tensors'][name] = {'shape': list(a.shape), 'values': [float(x) for x in a.ravel()]}\n"
    "assert end == len(data)\n"
    "print(json.dumps(out))\n";

static void test_python_reads_our_files(void) {
    if (access("/usr/bin/python3", X_OK) || system("/usr/bin/python3 -c 'import numpy' 2>/dev/null")) {
        SKIP("/usr/bin/python3 with numpy not available");
        return;
    }
    const char *py = tmp_path("read.py");
    write_bytes(py, PY_READER, strlen(PY_READER));
    enum { R = 3, C = 5 };
    float w[R * C], bias[C];
    for (int i = 0; i < R * C; i++) w[i] = (float)sin(i * 1.7) * 1e3f / (float)(i + 1);
    for (int i = 0; i < C; i++) bias[i] = -1.0f / (float)(i + 3);
    StTensor t[2] = {{.name = "decoder.layers.0.fc2.weight", .dtype = ST_F32, .ndim = 2, .shape = {R, C}, .data = w, .nbytes = sizeof w},
                     {.name = "decoder.layers.0.fc2.bias", .dtype = ST_F32, .ndim = 1, .shape = {C}, .data = bias, .nbytes = sizeof bias}};
    const char *mk[] = {"format", "tokenizer"}, *mv[] = {"tfm-checkpoint-1", TRICKY};
    const char *p = tmp_path("py.safetensors"), *o = tmp_path("py.json");
    CHECK(st_write(p, t, 2, mk, mv, 2) == 0);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s > %s", py, p, o);
    CHECK(system(cmd) == 0);
    size_t len;
    char *text = read_file(o, &len);
    Json j;
    CHECK_MSG(text && json_parse(text, len, o, &j) == 0, "%s", error_message());   /* Python escapes non-ASCII as \uXXXX pairs */
    free(text);
    if (j.type != JSON_OBJECT) return;
    const Json *meta = json_get(&j, "metadata");
    CHECK_STR(json_get(meta, "tokenizer") ? json_get(meta, "tokenizer")->text : NULL, TRICKY);
    const Json *ts = json_get(&j, "tensors");
    for (int k = 0; k < 2; k++) {
        const Json *x = json_get(ts, t[k].name);
        const Json *vals = json_get(x, "values"), *shape = json_get(x, "shape");
        CHECK(x && vals && shape && shape->n == t[k].ndim);
        if (!vals) continue;
        size_t n = t[k].nbytes / 4;
        CHECK(vals->n == (int)n);
        int equal = vals->n == (int)n;
        for (size_t i = 0; equal && i < n; i++) equal = (float)strtod(vals->items[i].text, NULL) == ((float *)t[k].data)[i];
        CHECK_MSG(equal, "tensor %s differs in Python", t[k].name);
    }
    json_free(&j);
}

/* ---- tfm checkpoints: model + config + tokenizer + training state -------- */
static Bpe *tiny_bpe(void) {
    const char *p = tmp_path("corpus.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 200; i++)
        fprintf(f, "the cat sat on the mat %d ; die Katze sa\xc3\x9f auf der Matte \xe2\x80\x94 caf\xc3\xa9 \xf0\x9f\x98\x80\n", i % 17);
    fclose(f);
    BpeLearnOptions opt = {.vocab_size = 300, .normalization = "nfkc", .threads = 1, .quiet = 1};
    const char *files[] = {p};
    Bpe *b = bpe_learn(files, 1, &opt);
    if (!b) fprintf(stderr, "bpe_learn: %s\n", error_message());
    return b;
}

static void tiny_config(Config *c, int pre_norm) {
    config_defaults(c);
    c->d_model = 16; c->d_ff = 24; c->heads = 4;
    c->encoder_layers = 2; c->decoder_layers = 1;
    c->max_positions = 40; c->max_src_len = c->max_tgt_len = 30;
    c->vocab_size = 300; c->pre_norm = pre_norm;
    free(c->dir); c->dir = xstrdup("runs/tiny \xe2\x96\x81 \"x\"");
}

/* Save a model (seeded), load it back, compare everything. */
static void round_trip(int pre_norm, int with_state) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    tiny_config(&c, pre_norm);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    Model m;
    CHECK_MSG(model_init(&m, &d, 1234) == 0, "%s", error_message());
    TrainState ts = {.step = 123456, .epoch = 3, .batch_index = 77, .rng_state = UINT64_MAX - 5,
                     .best_valid = 1.0 / 3, .bad_valids = 2, .elapsed = 12345.678};
    ts.adam_m = xaligned(m.num_params * 4);
    ts.adam_v = xaligned(m.num_params * 4);
    Rng r;
    rng_seed(&r, 5);
    for (size_t i = 0; i < m.num_params; i++) { ts.adam_m[i] = rng_normal(&r); ts.adam_v[i] = rng_uniform(&r) * 1e-6f; }
    const char *p = tmp_path("model.safetensors");
    CHECK_MSG(checkpoint_save(p, &m, &c, bpe, with_state ? &ts : NULL) == 0, "%s", error_message());

    Config c2;
    Bpe *bpe2;
    Model m2;
    TrainState ts2;
    memset(&ts2, 0xAB, sizeof ts2);
    CHECK_MSG(checkpoint_load(p, &c2, &bpe2, &m2, &ts2) == 0, "%s", error_message());
    CHECK(m2.num_params == m.num_params && m2.num_tensors == m.num_tensors);
    CHECK(m2.dims.vocab == d.vocab && m2.dims.pre_norm == pre_norm && m2.dims.enc_layers == 2 && m2.dims.dec_layers == 1);
    CHECK(m2.num_params == m.num_params && !memcmp(m2.params, m.params, m.num_params * 4));   /* bit-identical */
    char *t1 = config_to_string(&c), *t2 = config_to_string(&c2);
    CHECK_STR(t2, t1);
    free(t1); free(t2);
    t1 = bpe_to_string(bpe); t2 = bpe_to_string(bpe2);
    CHECK_STR(t2, t1);
    free(t1); free(t2);
    if (with_state) {
        CHECK(ts2.step == 123456 && ts2.epoch == 3 && ts2.batch_index == 77 && ts2.rng_state == UINT64_MAX - 5);
        CHECK(ts2.best_valid == 1.0 / 3 && ts2.bad_valids == 2 && ts2.elapsed == 12345.678);
        CHECK(ts2.adam_m && !memcmp(ts2.adam_m, ts.adam_m, m.num_params * 4));
        CHECK(ts2.adam_v && !memcmp(ts2.adam_v, ts.adam_v, m.num_params * 4));
    } else {
        CHECK(ts2.adam_m == NULL && ts2.adam_v == NULL && ts2.step == 0);   /* model-only: zeroed */
    }
    free(ts2.adam_m); free(ts2.adam_v);
    model_free(&m2); bpe_free(bpe2); config_free(&c2);

    /* any of the outputs may be skipped */
    CHECK_MSG(checkpoint_load(p, NULL, &bpe2, NULL, NULL) == 0 && bpe_vocab_size(bpe2) == d.vocab, "%s", error_message());
    bpe_free(bpe2);
    CHECK(checkpoint_load(p, &c2, NULL, NULL, NULL) == 0 && c2.d_model == 16 && c2.pre_norm == pre_norm);
    config_free(&c2);
    CHECK(checkpoint_load(p, NULL, NULL, NULL, NULL) == 0);
    CHECK(checkpoint_load(p, NULL, NULL, NULL, &ts2) == 0 && (ts2.adam_m != NULL) == with_state);
    free(ts2.adam_m); free(ts2.adam_v);

    /* the metadata other tools need */
    SafeTensors st;
    CHECK(st_read(p, &st) == 0);
    CHECK_STR(st_meta(&st, "format"), "tfm-checkpoint-1");
    CHECK_STR(st_meta(&st, "norm"), pre_norm ? "pre" : "post");
    CHECK_STR(st_meta(&st, "decoder_input"), "BOS y_1 .. y_m");
    CHECK_STR(st_meta(&st, "eos_id"), "3");
    CHECK(st_find(&st, "encoder.embed_tokens.weight") && st_find(&st, "decoder.layers.0.encoder_attn.k_proj.bias"));
    CHECK((st_find(&st, "encoder.layer_norm.weight") != NULL) == pre_norm);
    CHECK((st_find(&st, "optimizer.adam_v") != NULL) == with_state);
    CHECK((st_meta(&st, "rng_state") != NULL) == with_state);
    st_free(&st);
    free(ts.adam_m); free(ts.adam_v);
    model_free(&m); bpe_free(bpe); config_free(&c);
}

static void test_checkpoint_round_trip(void) { round_trip(0, 0); }
static void test_checkpoint_round_trip_pre_norm(void) { round_trip(1, 0); }
static void test_training_state_round_trip(void) { round_trip(0, 1); }

/* Resume on N ranks (train.c): each rank reads its slice [lo, hi) of the
 * Adam moments alone (checkpoint_load_state) and the slices' checksums,
 * joined in order, must be the whole tensors'. Each slice bit-identical to
 * the whole moments' range, for 1, 2, 3 and 7 slices cut at the ranks'
 * 16-float boundaries (dist_slice_lo's rule) and at odd places, every
 * boundary inside a weight tensor's moments; slices out of order, short of
 * the end or outside the moments refused; a flipped bit in one slice's bytes
 * caught by the joined checksum though every slice reads fine alone. */
static void test_moment_slices(void) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    tiny_config(&c, 0);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    Model m;
    CHECK_MSG(model_init(&m, &d, 99) == 0, "%s", error_message());
    size_t np = m.num_params;
    TrainState ts = {.step = 10, .rng_state = 7, .best_valid = 2};
    ts.adam_m = xaligned(np * 4);
    ts.adam_v = xaligned(np * 4);
    Rng r;
    rng_seed(&r, 6);
    for (size_t i = 0; i < np; i++) { ts.adam_m[i] = rng_normal(&r); ts.adam_v[i] = rng_uniform(&r) * 1e-6f; }
    const char *p = tmp_path("slices.safetensors");
    CHECK_MSG(checkpoint_save(p, &m, &c, bpe, &ts) == 0, "%s", error_message());
    static const int counts[] = {1, 2, 3, 7};
    int bad = 0;
    MomentSlice parts[7];
    for (int k = 0; k < 4; k++)
        for (int odd = 0; odd < 2; odd++) {
            int n = counts[k];
            size_t blocks = (np + 15) / 16;
            for (int q = 0; q < n; q++) {
                size_t lo = odd ? np * (size_t)q / (size_t)n + (q > 0) : blocks * (size_t)q / (size_t)n * 16;
                size_t hi = odd ? (q == n - 1 ? np : np * (size_t)(q + 1) / (size_t)n + 1)
                                : q == n - 1 ? np : blocks * (size_t)(q + 1) / (size_t)n * 16;
                TrainState s;
                if (checkpoint_load_state(p, np, lo, hi, &s, &parts[q]) != 1) { bad++; continue; }
                bad += s.step != 10 || memcmp(s.adam_m, ts.adam_m + lo, (hi - lo) * 4) ||
                       memcmp(s.adam_v, ts.adam_v + lo, (hi - lo) * 4);
                free(s.adam_m);
                free(s.adam_v);
            }
            if (checkpoint_moments_check(p, parts, n)) { bad++; printf("  %d slices: %s\n", n, error_message()); }
            if (n > 1) {
                MomentSlice swap = parts[0];
                parts[0] = parts[1], parts[1] = swap;
                bad += checkpoint_moments_check(p, parts, n) == 0 || !strstr(error_message(), "do not follow each other");
                bad += checkpoint_moments_check(p, parts + 1, n - 1) == 0;   /* [lo_1, ...): not from 0 */
                parts[1] = parts[0], parts[0] = swap;
                bad += checkpoint_moments_check(p, parts, n - 1) == 0 || !strstr(error_message(), "not at their length");
            }
        }
    CHECK_MSG(bad == 0, "%d slicings wrong", bad);
    TrainState s;
    MomentSlice one;
    CHECK(checkpoint_load_state(p, np, 5, np + 1, &s, &one) == -1 && strstr(error_message(), "outside their") && !s.adam_m);
    CHECK(checkpoint_load_state(p, np + 16, 0, 16, &s, &one) == -1 && strstr(error_message(), "one moment per parameter"));

    /* a flipped bit in adam_v, inside the second of three slices */
    SafeTensors st;
    CHECK(st_read(p, &st) == 0);
    const StTensor *v = st_find(&st, "optimizer.adam_v");
    long at = v ? (long)((const char *)v->data - (const char *)st.blob) + (long)(np / 2) * 4 + 1 : -1;
    st_free(&st);
    FILE *f = fopen(p, "r+b");
    CHECK(f && at > 0 && fseek(f, at, SEEK_SET) == 0);
    int ch = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(ch ^ 0x04, f);
    fclose(f);
    for (int q = 0; q < 3; q++) {
        CHECK(checkpoint_load_state(p, np, np * (size_t)q / 3, np * (size_t)(q + 1) / 3, &s, &parts[q]) == 1);
        free(s.adam_m);
        free(s.adam_v);
    }
    CHECK(checkpoint_moments_check(p, parts, 3) == -1 && strstr(error_message(), "'optimizer.adam_v': checksum mismatch"));
    Model m2;
    CHECK(checkpoint_load(p, NULL, NULL, &m2, &s) == -1 && strstr(error_message(), "optimizer.adam_v"));
    CHECK(checkpoint_verify(p) == -1);
    free(ts.adam_m); free(ts.adam_v);
    model_free(&m); bpe_free(bpe); config_free(&c);
    unlink(p);
}

/* Copy a checkpoint with one change: drop a tensor, add one, reshape one,
 * or set a metadata key (value NULL: remove it). */
typedef struct { const char *drop, *add, *reshape, *key, *value; } Edit;

static const char *edited_copy(const char *src, const char *name, Edit e) {
    SafeTensors st;
    if (st_read(src, &st)) return NULL;
    StTensor *t = xcalloc((size_t)st.num_tensors + 1, sizeof *t);
    int n = 0;
    static float extra[4];
    for (int i = 0; i < st.num_tensors; i++) {
        if (e.drop && !strcmp(st.tensors[i].name, e.drop)) continue;
        t[n] = st.tensors[i];
        if (e.reshape && !strcmp(t[n].name, e.reshape)) {   /* same bytes, other shape */
            if (t[n].ndim == 2) { t[n].shape[0] *= 2; t[n].shape[1] /= 2; }
            else { t[n].ndim = 2; t[n].shape[1] = 1; }
        }
        n++;
    }
    if (e.add) t[n++] = (StTensor){.name = (char *)e.add, .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = extra, .nbytes = 16};
    const char **mk = xcalloc((size_t)st.num_meta + 1, sizeof *mk), **mv = xcalloc((size_t)st.num_meta + 1, sizeof *mv);
    int nm = 0, found = 0;
    for (int i = 0; i < st.num_meta; i++) {
        mk[nm] = st.meta_keys[i]; mv[nm] = st.meta_values[i];
        if (e.key && !strcmp(mk[nm], e.key)) { found = 1; if (!e.value) continue; mv[nm] = e.value; }
        nm++;
    }
    if (e.key && e.value && !found) { mk[nm] = e.key; mv[nm++] = e.value; }
    const char *p = tmp_path(name);
    if (st_write(p, t, n, mk, mv, nm)) p = NULL;
    free(mk); free(mv); free(t);
    st_free(&st);
    return p;
}

static void expect_load_error(const char *src, Edit e, const char *needle, int want_ts) {
    const char *p = edited_copy(src, "edited.safetensors", e);
    CHECK(p != NULL);
    if (!p) return;
    Config c; Bpe *b; Model m; TrainState ts;
    int rc = checkpoint_load(p, &c, &b, &m, want_ts ? &ts : NULL);
    CHECK_MSG(rc == -1 && has(error_message(), needle) && has(error_message(), p), "rc %d: %s (expected '%s')", rc,
              rc ? error_message() : "", needle);
    if (rc == 0) { model_free(&m); bpe_free(b); config_free(&c); }
    /* checkpoint_verify (a piece at a time, nothing kept) refuses it with the same words */
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", error_message());
    CHECK_MSG(checkpoint_verify(p) == -1 && !strcmp(error_message(), msg), "verify: '%s', load: '%s'", error_message(), msg);
}

/* checkpoint_verify == checkpoint_load with every part asked for: the same
 * verdict and message on file q. */
static int verify_agrees(const char *q) {
    Config c; Bpe *b; Model m; TrainState ts;
    int rc = checkpoint_load(q, &c, &b, &m, &ts);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", rc ? error_message() : "");
    int state = rc ? 0 : ts.adam_m != NULL;
    if (!rc) { model_free(&m); bpe_free(b); config_free(&c); free(ts.adam_m); free(ts.adam_v); }
    int v = checkpoint_verify(q);
    return rc ? v == -1 && !strcmp(error_message(), msg) : v == state;
}

static void test_checkpoint_load_errors(void) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    tiny_config(&c, 0);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    Model m;
    model_init(&m, &d, 1);
    TrainState ts = {.step = 10, .rng_state = 1, .adam_m = xaligned(m.num_params * 4), .adam_v = xaligned(m.num_params * 4)};
    char good[600];
    snprintf(good, sizeof good, "%s", tmp_path("good.safetensors"));
    CHECK(checkpoint_save(good, &m, &c, bpe, &ts) == 0);
    expect_load_error(good, (Edit){.drop = "decoder.layers.0.fc2.bias"}, "missing tensor decoder.layers.0.fc2.bias", 0);
    expect_load_error(good, (Edit){.add = "decoder.layers.7.fc2.bias"}, "unknown tensor decoder.layers.7.fc2.bias", 0);
    expect_load_error(good, (Edit){.reshape = "encoder.layers.1.fc1.weight"}, "tensor encoder.layers.1.fc1.weight is F32 [48, 8], expected F32 [24, 16]", 0);
    expect_load_error(good, (Edit){.reshape = "encoder.embed_tokens.weight"}, "the tokenizer has", 0);
    expect_load_error(good, (Edit){.key = "format", .value = "other-1"}, "not a tfm checkpoint", 0);
    expect_load_error(good, (Edit){.key = "config", .value = "[model]\nd_model = 15\n"}, "[config]", 0);
    expect_load_error(good, (Edit){.key = "config", .value = NULL}, "no \"config\"", 0);
    expect_load_error(good, (Edit){.key = "tokenizer", .value = NULL}, "no \"tokenizer\"", 0);
    expect_load_error(good, (Edit){.key = "tokenizer", .value = "garbage"}, "[tokenizer]", 0);
    expect_load_error(good, (Edit){.key = "pad_id", .value = "5"}, "pad_id = 5", 0);
    expect_load_error(good, (Edit){.key = "rng_state", .value = "-1"}, "training state rng_state = -1 is not an unsigned", 1);
    /* issue 30: every field of the training state in its range, the key named (the table in checkpoint.c) */
    expect_load_error(good, (Edit){.key = "rng_state", .value = "0"}, "training state rng_state = 0 is not valid", 1);
    expect_load_error(good, (Edit){.key = "elapsed", .value = "1e308"}, "training state elapsed = 1e308 is out of range", 1);
    expect_load_error(good, (Edit){.key = "best_valid", .value = "nan"}, "training state best_valid = nan is not a number", 1);
    expect_load_error(good, (Edit){.key = "best_valid", .value = "-1"}, "training state best_valid = -1 is out of range", 1);
    expect_load_error(good, (Edit){.key = "bad_valids", .value = "-1"}, "training state bad_valids = -1 is out of range", 1);
    expect_load_error(good, (Edit){.key = "epoch", .value = "2147483648"}, "training state epoch = 2147483648 is out of range", 1);
    expect_load_error(good, (Edit){.key = "step", .value = "2000000000000000"}, "training state step = 2000000000000000 is out of range", 1);
    expect_load_error(good, (Edit){.key = "batch_index", .value = "1.5"}, "training state batch_index = 1.5 is not an integer", 1);
    expect_load_error(good, (Edit){.key = "ranks", .value = "0"}, "training state ranks = 0 is out of range", 1);
    expect_load_error(good, (Edit){.key = "step", .value = "12x"}, "training state step = 12x is not an integer", 1);
    expect_load_error(good, (Edit){.key = "elapsed", .value = NULL}, "without metadata \"elapsed\"", 1);
    expect_load_error(good, (Edit){.drop = "optimizer.adam_v"}, "without tensor optimizer.adam_v", 1);
    expect_load_error(good, (Edit){.reshape = "optimizer.adam_m"}, "optimizer.adam_m must be F32", 1);
    /* the same files load when the training state is not asked for */
    const char *p = edited_copy(good, "nostate.safetensors", (Edit){.drop = "optimizer.adam_v"});
    Model m2;
    CHECK_MSG(checkpoint_load(p, NULL, NULL, &m2, NULL) == 0, "%s", error_message());
    model_free(&m2);

    /* random damage to a real checkpoint: an error or a clean load, never a crash */
    size_t len;
    char *orig = read_file(good, &len);
    uint64_t hl;
    memcpy(&hl, orig, 8);
    Rng r;
    rng_seed(&r, 11);
    const char *q = tmp_path("damaged.safetensors");
    int errors = 0, disagree = 0;
    for (int it = 0; it < 300; it++) {
        char *buf = xmalloc(len);
        memcpy(buf, orig, len);
        size_t pos = 8 + rng_u64(&r) % hl;   /* in the header: config, tokenizer, shapes */
        buf[pos] = it % 3 ? (char)rng_u64(&r) : (char)(buf[pos] ^ 1);
        write_bytes(q, buf, len);
        free(buf);
        Config c2; Bpe *b2; Model m3; TrainState ts3;
        if (checkpoint_load(q, &c2, &b2, &m3, &ts3) == 0) {
            model_free(&m3); bpe_free(b2); config_free(&c2); free(ts3.adam_m); free(ts3.adam_v);
        } else errors += has(error_message(), q);
        disagree += !verify_agrees(q);
    }
    CHECK(errors > 0);
    /* damage in the tensors' bytes (weights, moments): a checksum each time, from both */
    int caught = 0;
    for (int it = 0; it < 40; it++) {
        char *buf = xmalloc(len);
        memcpy(buf, orig, len);
        size_t pos = 8 + hl + rng_u64(&r) % (len - 8 - hl);
        buf[pos] ^= (char)(1 << (it % 8));
        write_bytes(q, buf, len);
        free(buf);
        disagree += !verify_agrees(q);
        caught += checkpoint_verify(q) == -1 && has(error_message(), "checksum mismatch");
    }
    CHECK_MSG(disagree == 0, "checkpoint_verify and checkpoint_load disagree on %d damaged files", disagree);
    CHECK(caught == 40);
    const char *model_only = tmp_path("modelonly.safetensors");
    CHECK(checkpoint_save(model_only, &m, &c, bpe, NULL) == 0);
    CHECK(checkpoint_verify(good) == 1 && checkpoint_verify(model_only) == 0);   /* a training state; none */
    CHECK(checkpoint_verify(p) == -1 && has(error_message(), "without tensor optimizer.adam_v"));
    free(orig);

    /* saving refuses a poisoned model, and a config that does not describe it */
    const char *bad = tmp_path("poisoned.safetensors");
    m.params[17] = NAN;
    CHECK(checkpoint_save(bad, &m, &c, bpe, NULL) == -1 && has(error_message(), "poisoned") && !file_exists(bad));
    m.params[17] = 0;
    c.d_ff = 32;
    CHECK(checkpoint_save(bad, &m, &c, bpe, NULL) == -1 && has(error_message(), "config does not describe"));
    c.d_ff = 24;
    free(ts.adam_m); free(ts.adam_v);
    model_free(&m); bpe_free(bpe); config_free(&c);
}

/* Issue 30: pruning and the list to average count only checkpoints that
 * load. A truncated newest checkpoint (a disk fault) is set aside as
 * .corrupt, the one just written is kept, and the good ones are what `keep`
 * counts (before: pruning by name left only the corrupt file). */
static void test_prune_counts_loadable(void) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    tiny_config(&c, 0);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/prunerun", tmp_dir());
    mkdir(dir, 0755);
    Model m;
    model_init(&m, &d, 5);
    TrainState ts = {.rng_state = 1, .adam_m = xaligned(m.num_params * 4), .adam_v = xaligned(m.num_params * 4)};
    for (int k = 1; k <= 4; k++) {
        ts.step = 10 * k;
        char *p = checkpoint_path(dir, ts.step);
        CHECK_MSG(checkpoint_save(p, &m, &c, bpe, &ts) == 0, "%s", error_message());
        free(p);
    }
    char *newest = checkpoint_path(dir, 40), *current = checkpoint_path(dir, 30);
    CHECK(checkpoint_check(newest) == 0);
    CHECK(truncate(newest, 1000) == 0);
    CHECK(checkpoint_check(newest) == -1 && has(error_message(), newest));
    /* the list to average: the good ones only, the damaged one set aside */
    char **paths;
    int n = checkpoint_list_good(dir, 2, &paths);
    CHECK(n == 2 && checkpoint_step(paths[0]) == 20 && checkpoint_step(paths[1]) == 30);
    checkpoint_list_free(paths, n > 0 ? n : 0);
    char corrupt[700];
    snprintf(corrupt, sizeof corrupt, "%s.corrupt", newest);
    CHECK(!file_exists(newest) && file_exists(corrupt));
    /* pruning to one keeps the checkpoint just written, whatever is newer */
    CHECK(rename(corrupt, newest) == 0);
    CHECK(checkpoint_prune(dir, 1, current) == 2);
    n = checkpoint_list(dir, &paths);
    CHECK(n == 1 && checkpoint_step(paths[0]) == 30);
    checkpoint_list_free(paths, n);
    CHECK(file_exists(corrupt) && file_exists(current));
    free(newest); free(current);
    free(ts.adam_m); free(ts.adam_v);
    model_free(&m); bpe_free(bpe); config_free(&c);
}

/* Averaging real checkpoints gives a loadable model-only checkpoint. */
static void test_average_real_checkpoints(void) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    tiny_config(&c, 0);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/avgrun", tmp_dir());
    mkdir(dir, 0755);
    Model m[3];
    TrainState ts = {.rng_state = 1};
    for (int k = 0; k < 3; k++) {
        model_init(&m[k], &d, (uint64_t)(100 + k));
        ts.step = 1000 * (k + 1);
        ts.adam_m = xaligned(m[k].num_params * 4);
        ts.adam_v = xaligned(m[k].num_params * 4);
        char *p = checkpoint_path(dir, ts.step);
        CHECK_MSG(checkpoint_save(p, &m[k], &c, bpe, &ts) == 0, "%s", error_message());
        free(p); free(ts.adam_m); free(ts.adam_v);
    }
    char **paths;
    int n = checkpoint_list(dir, &paths);
    CHECK(n == 3);
    char *out = checkpoint_run_file(dir, CHECKPOINT_AVERAGE);
    CHECK_MSG(checkpoint_average((const char *const *)paths + 1, 2, out) == 0, "%s", error_message());
    checkpoint_list_free(paths, n);
    Model avg;
    TrainState ts2;
    CHECK_MSG(checkpoint_load(out, NULL, NULL, &avg, &ts2) == 0, "%s", error_message());
    CHECK(ts2.adam_m == NULL);
    int exact = 1;
    for (size_t i = 0; i < avg.num_params; i++)
        exact &= avg.params[i] == (float)(((double)m[1].params[i] + m[2].params[i]) / 2);
    CHECK(exact);
    model_free(&avg);
    for (int k = 0; k < 3; k++) model_free(&m[k]);
    free(out);
    bpe_free(bpe);
    config_free(&c);
}

int main(void) {
    log_quiet = 1;
    RUN(test_json_reader);
    RUN(test_json_fuzz);
    RUN(test_json_writer_round_trip);
    RUN(test_st_round_trip);
    RUN(test_st_copy_drops_pages);
    RUN(test_st_write_errors);
    RUN(test_st_write_disk_full);
    RUN(test_st_read_errors);
    RUN(test_fuzz_truncate_and_corrupt);
    RUN(test_atomic_under_kill9);
    RUN(test_run_dir);
    RUN(test_average_known_mean);
    RUN(test_average_refuses);
    RUN(test_python_reads_our_files);
    RUN(test_checkpoint_round_trip);
    RUN(test_checkpoint_round_trip_pre_norm);
    RUN(test_training_state_round_trip);
    RUN(test_moment_slices);
    RUN(test_checkpoint_load_errors);
    RUN(test_average_real_checkpoints);
    RUN(test_prune_counts_loadable);
    return test_summary();
}
