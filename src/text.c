/* text.c — the one way in for text (see text.h for the policy).
 *
 * A reader is a file descriptor, a raw-input buffer (used for gzip), and a
 * buffer of decoded bytes buf[pos..len) from which lines are cut. gzip is
 * decoded with zlib's inflate directly (not gzread), so that a truncated
 * stream, a corrupt one, a second member and trailing bytes are each seen
 * and reported, and so that a pipe is decoded as its bytes arrive. */
#include "text.h"
#include "utf8.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const TextOptions TEXT_DEFAULT = {.invalid = TEXT_REPLACE, .stream = 1};

enum { IN_CAP = 1 << 17, MIN_FREE = 1 << 16 };

struct TextReader {
    char *name;                 /* the path, or "stdin" */
    int fd, own_fd;
    TextOptions o;
    size_t max_line;
    int sniffed, gz;            /* gz: the input is a gzip stream */
    unsigned char *in;          /* raw gzip bytes in[in_pos..in_len) */
    size_t in_pos, in_len;
    int in_eof;                 /* read() said end of file */
    z_stream z;
    int z_open, member_done;
    char *buf;                  /* decoded bytes; buf[pos..len) not yet returned */
    size_t pos, len, cap, scan; /* scan: buf[pos..scan) holds no '\n' */
    uint64_t dropped;           /* decoded bytes dropped from the front of buf */
    uint64_t line_off;          /* file offset (decoded) of the line returned last */
    int eof;                    /* no more decoded bytes will come */
    int state;                  /* 0 reading, 1 ended, 2 failed */
    uint64_t total;             /* decoded bytes so far */
    long lineno, invalid;
    int warned;
    char *fixed;                /* the last line with U+FFFD put in */
};

/* "16 MiB", "64 KiB" or "123 bytes", for limits in messages. */
static const char *size_str(uint64_t n, char *b, size_t bl) {
    if (n >= (1u << 20) && n % (1u << 20) == 0) snprintf(b, bl, "%llu MiB", (unsigned long long)(n >> 20));
    else if (n >= 1024 && n % 1024 == 0) snprintf(b, bl, "%llu KiB", (unsigned long long)(n >> 10));
    else snprintf(b, bl, "%llu bytes", (unsigned long long)n);
    return b;
}

/* The kinds of file a reader accepts: regular files, and streams where the
 * caller reads once; never a directory, a socket or a block device. */
static int check_type(const char *name, const struct stat *st, const TextOptions *o, int is_stdin) {
    if (S_ISREG(st->st_mode)) return 0;
    if (S_ISDIR(st->st_mode)) return errorf("%s: read error: %s (not a text file)", name, strerror(EISDIR));
    int streamy = S_ISFIFO(st->st_mode) || S_ISCHR(st->st_mode) || (is_stdin && S_ISSOCK(st->st_mode));
    if (streamy && o->stream) return 0;
    if (streamy)
        return errorf("%s: is a %s, not a regular file: this input is read more than once (or cached by its "
                      "size and time), so it must be a file", name, file_kind(st->st_mode));
    return errorf("%s: is a %s, not a text file", name, file_kind(st->st_mode));
}

TextReader *text_open(const char *path, const TextOptions *o) {
    if (!o) o = &TEXT_DEFAULT;
    int is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "stdin" : path;
    struct stat st;
    int fd = STDIN_FILENO;
    if (!is_stdin) {
        /* the type first: opening a FIFO this reader must not take would wait for a writer */
        if (stat(path, &st) != 0) { errorf("%s: cannot open: %s", path, strerror(errno)); return NULL; }
        if (check_type(name, &st, o, 0)) return NULL;
        do fd = open(path, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
        if (fd < 0) { errorf("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    }
    int bad = fstat(fd, &st) != 0 ? errorf("%s: cannot stat: %s", name, strerror(errno)) : check_type(name, &st, o, is_stdin);
    if (bad) {
        if (!is_stdin) close(fd);
        return NULL;
    }
    TextReader *r = xcalloc(1, sizeof *r);
    r->name = xstrdup(name);
    r->fd = fd;
    r->own_fd = !is_stdin;
    r->o = *o;
    r->max_line = o->max_line ? o->max_line : TEXT_MAX_LINE;
    return r;
}

void text_close(TextReader *r) {
    if (!r) return;
    if (r->own_fd) close(r->fd);
    if (r->z_open) inflateEnd(&r->z);
    free(r->in);
    free(r->buf);
    free(r->fixed);
    free(r->name);
    free(r);
}

long text_lineno(const TextReader *r) { return r->lineno; }
long text_invalid_lines(const TextReader *r) { return r->invalid; }
const char *text_name(const TextReader *r) { return r->name; }

/* read(2) into p[0..n), retrying on EINTR: bytes read, 0 at the end, -1 + errorf. */
static long raw_read(TextReader *r, void *p, size_t n) {
    ssize_t k;
    do k = read(r->fd, p, n); while (k < 0 && errno == EINTR);
    if (k < 0) return errorf("%s: read error after line %ld: %s", r->name, r->lineno, strerror(errno));
    return (long)k;
}

static int fail_oom(TextReader *r, size_t want) {
    return errorf("%s: out of memory reading line %ld (%zu bytes wanted)", r->name, r->lineno + 1, want);
}

/* Decoded bytes so far are within o.max_bytes. */
static int check_total(TextReader *r) {
    if (!r->o.max_bytes || r->total <= r->o.max_bytes) return 0;
    char b[32];
    return errorf("%s:%ld: more than %s of text, the limit for this file: is it the right file?", r->name,
                  r->lineno + 1, size_str(r->o.max_bytes, b, sizeof b));
}

/* Decide plain or gzip from the first two bytes (read into r->in). */
static int sniff(TextReader *r) {
    r->in = malloc(IN_CAP);
    if (!r->in) return fail_oom(r, IN_CAP);
    while (r->in_len < 2 && !r->in_eof) {
        long k = raw_read(r, r->in + r->in_len, IN_CAP - r->in_len);
        if (k < 0) return -1;
        if (k == 0) r->in_eof = 1;
        r->in_len += (size_t)k;
    }
    r->sniffed = 1;
    if (r->in_len >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) {
        r->gz = 1;
        if (inflateInit2(&r->z, 15 + 16) != Z_OK) return fail_oom(r, sizeof r->z);   /* 16: gzip only */
        r->z_open = 1;
        return 0;
    }
    memcpy(r->buf + r->len, r->in, r->in_len);   /* plain: what was read is text */
    r->len += r->in_len;
    r->total += r->in_len;
    free(r->in);
    r->in = NULL;
    r->in_pos = r->in_len = 0;
    if (r->in_eof) r->eof = 1;
    return check_total(r);
}

/* One more step of gzip decoding into buf[len..cap-1): 1 if bytes came, 0 at
 * the end of the input, -1 + errorf. */
static int inflate_some(TextReader *r) {
    for (;;) {
        if (r->member_done) {   /* a gzip member ended: another, or the end */
            while (r->in_len - r->in_pos < 2 && !r->in_eof) {
                if (r->in_pos) { memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos); r->in_len -= r->in_pos; r->in_pos = 0; }
                long k = raw_read(r, r->in + r->in_len, IN_CAP - r->in_len);
                if (k < 0) return -1;
                if (k == 0) r->in_eof = 1;
                r->in_len += (size_t)k;
            }
            size_t left = r->in_len - r->in_pos;
            if (left == 0) { r->eof = 1; return 0; }
            if (left >= 2 && r->in[r->in_pos] == 0x1f && r->in[r->in_pos + 1] == 0x8b) {
                inflateReset(&r->z);   /* concatenated members read as one stream (gzip does the same) */
                r->member_done = 0;
            } else {
                if (!r->o.quiet) log_warn("%s: bytes after the end of the gzip data are ignored (trailing garbage: "
                         "not gzip, so not read as text)", r->name);
                r->eof = 1;
                return 0;
            }
        }
        size_t avail_in = r->in_len - r->in_pos, avail_out = r->cap - r->len - 1;
        r->z.next_in = r->in + r->in_pos;
        r->z.avail_in = (uInt)avail_in;
        r->z.next_out = (Bytef *)r->buf + r->len;
        r->z.avail_out = (uInt)(avail_out > (1u << 30) ? (1u << 30) : avail_out);
        uInt out0 = r->z.avail_out;
        int ret = inflate(&r->z, Z_NO_FLUSH);
        size_t used = avail_in - r->z.avail_in, made = out0 - r->z.avail_out;
        r->in_pos += used;
        r->len += made;
        r->total += made;
        if (ret == Z_STREAM_END) r->member_done = 1;
        else if (ret == Z_MEM_ERROR) return fail_oom(r, 0);
        else if (ret != Z_OK && ret != Z_BUF_ERROR)
            return errorf("%s: corrupt gzip data in line %ld: %s", r->name, r->lineno + 1, r->z.msg ? r->z.msg : "bad stream");
        if (made) return check_total(r) ? -1 : 1;
        if (r->member_done || (used && r->in_pos < r->in_len)) continue;
        /* nothing came out: more input is needed */
        if (r->in_pos) { memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos); r->in_len -= r->in_pos; r->in_pos = 0; }
        if (r->in_eof)
            return errorf("%s: the gzip stream ends early, in line %ld (unexpected end of file): the file is truncated",
                          r->name, r->lineno + 1);
        if (r->in_len == IN_CAP) return errorf("%s: corrupt gzip data in line %ld: no progress", r->name, r->lineno + 1);
        long k = raw_read(r, r->in + r->in_len, IN_CAP - r->in_len);
        if (k < 0) return -1;
        if (k == 0) r->in_eof = 1;
        r->in_len += (size_t)k;
    }
}

/* More decoded bytes at buf[len..): 1 if some came, 0 at the end, -1 + errorf. */
static int fill(TextReader *r) {
    if (r->pos) {   /* drop what was returned */
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->scan -= r->pos;
        r->dropped += r->pos;
        r->pos = 0;
    }
    if (r->cap - r->len < MIN_FREE + 1) {
        size_t cap = r->cap ? 2 * r->cap : (size_t)IN_CAP + MIN_FREE;
        char *b = realloc(r->buf, cap);
        if (!b) return fail_oom(r, cap);
        r->buf = b;
        r->cap = cap;
    }
    if (!r->sniffed) {
        size_t before = r->len;
        if (sniff(r)) return -1;
        if (r->len > before) return 1;
        if (r->eof) return 0;
    }
    if (r->gz) return inflate_some(r);
    long k = raw_read(r, r->buf + r->len, r->cap - r->len - 1);
    if (k < 0) return -1;
    if (k == 0) { r->eof = 1; return 0; }
    r->len += (size_t)k;
    r->total += (uint64_t)k;
    return check_total(r) ? -1 : 1;
}

static long too_long(TextReader *r, long line) {
    char b[32];
    return errorf("%s:%ld: a line longer than %s, the limit for a line here: is it a text file?", r->name, line,
                  size_str(r->max_line, b, sizeof b));
}

long text_line(TextReader *r, char **line) {
    for (;;) {
        if (r->state) return r->state == 1 ? -1 : -2;
        free(r->fixed);
        r->fixed = NULL;
        char *s;
        size_t n;
        for (;;) {   /* the next '\n', reading on as needed */
            char *nl = r->scan < r->len ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
            if (nl) {
                s = r->buf + r->pos;
                n = (size_t)(nl - s);
                r->pos = r->scan = (size_t)(nl - r->buf) + 1;
                break;
            }
            r->scan = r->len;
            if (r->len - r->pos > r->max_line + 1) { too_long(r, r->lineno + 1); r->state = 2; return -2; }
            if (r->eof) {
                if (r->pos == r->len) { r->state = 1; return -1; }
                s = r->buf + r->pos;   /* the last line, without '\n' */
                n = r->len - r->pos;
                r->pos = r->scan = r->len;
                break;
            }
            if (fill(r) < 0) { r->state = 2; return -2; }
        }
        r->lineno++;
        r->line_off = r->dropped + (uint64_t)(s - r->buf);
        if (n && s[n - 1] == '\r') n--;   /* CRLF */
        if (n > r->max_line) { too_long(r, r->lineno); r->state = 2; return -2; }
        s[n] = 0;   /* over the '\n' or '\r', or at buf[len] (fill keeps a byte free) */
        const char *line0 = s;   /* before a BOM is dropped: offsets count it */
        if (r->lineno == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
            s += 3;
            n -= 3;
            if (!r->o.quiet) log_warn("%s: a UTF-8 byte order mark (BOM) starts the file: dropped (it is not text)", r->name);
        }
        const char *nul = memchr(s, 0, n);
        if (r->o.invalid == TEXT_BYTES) {
            if (nul) {
                errorf("%s:%ld: a NUL byte (at byte %zu of the line): not text", r->name, r->lineno, (size_t)(nul - line0));
                r->state = 2;
                return -2;
            }
            *line = s;
            return (long)n;
        }
        long bad = utf8_check(s, n);
        if (bad < 0 && !nul) { *line = s; return (long)n; }
        size_t at = bad >= 0 && (!nul || (size_t)bad < (size_t)(nul - s)) ? (size_t)bad : (size_t)(nul - s);
        int is_nul = s[at] == 0;
        if (r->o.invalid == TEXT_STRICT) {   /* offsets from 0, as `cmp` and `od` count */
            unsigned long long off = (unsigned long long)(r->line_off + (uint64_t)(s - line0) + at);
            if (is_nul) errorf("%s:%ld: a NUL byte (not UTF-8 text) at byte %zu of the line, file offset %llu%s", r->name,
                               r->lineno, at + (size_t)(s - line0), off, r->o.hint ? r->o.hint : "");
            else errorf("%s:%ld: invalid UTF-8 (byte 0x%02X at byte %zu of the line, file offset %llu)%s", r->name, r->lineno,
                        (unsigned char)s[at], at + (size_t)(s - line0), off, r->o.hint ? r->o.hint : "");
            r->state = 2;
            return -2;
        }
        r->invalid++;
        if (r->o.invalid == TEXT_SKIP) continue;
        size_t m;
        r->fixed = utf8_replace(s, n, 1, &m);   /* each ill-formed subpart and each NUL: U+FFFD */
        if (!r->warned && !r->o.quiet)
            log_warn("%s line %ld: %s replaced by U+FFFD (further such lines are not reported)", r->name, r->lineno,
                     is_nul ? "a NUL byte (not text)" : "invalid UTF-8");
        r->warned = 1;
        *line = r->fixed;
        return (long)m;
    }
}

int text_ready(TextReader *r) {
    if (r->state || r->eof || r->gz || !r->sniffed) return 1;
    if (r->pos < r->len && memchr(r->buf + r->pos, '\n', r->len - r->pos)) return 1;
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* ---- whole files --------------------------------------------------------- */

/* Appends n bytes to a growing buffer; -1 + errorf naming the file when memory runs out. */
static int grow(TextReader *r, char **b, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1 << 16;
    while (c < need) c *= 2;
    char *p = realloc(*b, c);
    if (!p) return errorf("%s: out of memory after %ld lines (%zu bytes of text)", r->name, r->lineno, need);
    *b = p;
    *cap = c;
    return 0;
}

int text_lines_read(TextLines *t, const char *path) { return text_lines_read_with(t, path, &TEXT_DEFAULT); }

int text_lines_read_with(TextLines *t, const char *path, const TextOptions *o) {
    memset(t, 0, sizeof *t);
    TextReader *r = text_open(path, o);
    if (!r) return -1;
    char *text = NULL, *line;
    long *start = NULL;
    size_t len = 0, cap = 0, scap = 0;
    long n = 0, k;
    while ((k = text_line(r, &line)) >= 0) {
        if (grow(r, &text, &cap, len + (size_t)k + 1)) { k = -2; break; }
        if ((size_t)n == scap) {
            size_t c = scap ? 2 * scap : 1024;
            long *p = realloc(start, c * sizeof *start);
            if (!p) { errorf("%s: out of memory after %ld lines", r->name, n); k = -2; break; }
            start = p;
            scap = c;
        }
        memcpy(text + len, line, (size_t)k + 1);
        start[n++] = (long)len;
        len += (size_t)k + 1;
    }
    if (k == -2) { free(text); free(start); text_close(r); return -1; }
    t->text = text ? text : xcalloc(1, 1);
    t->start = start ? start : xmalloc(sizeof *start);
    t->n = n;
    t->invalid_lines = text_invalid_lines(r);
    text_close(r);
    return 0;
}

void text_lines_free(TextLines *t) {
    free(t->text);
    free(t->start);
    memset(t, 0, sizeof *t);
}

char *text_read_all(const char *path, const TextOptions *o, size_t *len_out) {
    TextReader *r = text_open(path, o);
    if (!r) return NULL;
    char *text = NULL, *line;
    size_t len = 0, cap = 0;
    long k;
    while ((k = text_line(r, &line)) >= 0) {
        if (grow(r, &text, &cap, len + (size_t)k + 2)) { k = -2; break; }
        memcpy(text + len, line, (size_t)k);
        len += (size_t)k;
        text[len++] = '\n';
    }
    text_close(r);
    if (k == -2) { free(text); return NULL; }
    if (!text) text = xcalloc(1, 1);
    text[len] = 0;
    if (len_out) *len_out = len;
    return text;
}
