/* text.h — the one way in for text: every file of lines tfm reads (corpora,
 * dev sets, hypotheses and references, stdin of translate and bpe, configs,
 * BPE models, train.tsv) is read here, with one policy:
 *
 *   Sources   a path, or "-" for stdin. A regular file always; stdin, a FIFO
 *             or a character device only where the caller streams (o.stream):
 *             such input is read once, front to back, never reopened. A
 *             directory, socket or block device is an error naming the path.
 *   gzip      detected by its magic bytes (1f 8b), whatever the name;
 *             concatenated members are read as one stream. A truncated or
 *             corrupt stream is an error naming the file and line (never a
 *             shorter file); bytes after the last member are ignored with a
 *             warning naming the file (gzip -t: "trailing garbage").
 *   Lines     end at '\n'; a '\r' before it is dropped (CRLF files read as LF
 *             files); a last line without '\n' is a line; an empty file has
 *             no lines. A line longer than o.max_line bytes (default
 *             TEXT_MAX_LINE) is an error naming file and line, and so is a
 *             file longer than o.max_bytes: no input grows memory unbounded.
 *   BOM       a UTF-8 byte order mark (EF BB BF) at the start of the first
 *             line is dropped with a one-line notice. It is an encoding
 *             mark, never text (Notepad writes it); refusing would make the
 *             user re-save the file for nothing, and keeping it would make
 *             the first word a different token.
 *   NUL and   a NUL byte is not text: it is one more ill-formed byte, so
 *   invalid   NUL and invalid UTF-8 follow one rule, chosen by o.invalid:
 *   UTF-8       TEXT_REPLACE (the default, every reader of sentences): each
 *               maximal ill-formed subpart and each NUL becomes U+FFFD, as
 *               Python's errors='replace' does; one warning per file names
 *               the first such line.
 *               TEXT_STRICT: an error naming file, line and byte. Used by
 *               `tfm bleu` (sacreBLEU's strict decoding; --replace-invalid
 *               gives REPLACE) and `tfm bpe learn` (a vocabulary learned from
 *               garbage is garbage; --skip-invalid gives SKIP).
 *               TEXT_SKIP: the line is left out and counted.
 *               TEXT_BYTES: configs and BPE models. NUL is an error; other
 *               bytes are handed on as they are (their parsers check them,
 *               and config values are paths, which are bytes).
 *   Errors    read errors are errors, never end of input; every message
 *             names the file (and the line where there is one); out of
 *             memory names the file too.
 */
#ifndef TFM_TEXT_H
#define TFM_TEXT_H

#include <stddef.h>
#include <stdint.h>

#define TEXT_MAX_LINE ((size_t)16 << 20)        /* 16 MiB: no sentence is longer */
#define TEXT_MAX_CONFIG_LINE ((size_t)65534)    /* inih's line buffer (64 KiB) less '\n' and NUL */
#define TEXT_MAX_CONFIG ((uint64_t)1 << 20)      /* a config: 1 MiB */
#define TEXT_MAX_MODEL ((uint64_t)1 << 30)       /* a BPE model: 1 GiB */
#define TEXT_MAX_LOG ((uint64_t)1 << 30)         /* train.tsv, valid.tsv: 1 GiB */

typedef enum { TEXT_REPLACE, TEXT_STRICT, TEXT_SKIP, TEXT_BYTES } TextInvalid;

typedef struct {
    TextInvalid invalid;    /* what NUL and invalid UTF-8 become (above) */
    int stream;             /* 1: stdin, FIFOs and character devices too (read once) */
    size_t max_line;        /* longest line in bytes; 0: TEXT_MAX_LINE */
    uint64_t max_bytes;     /* most bytes (decompressed) in the file; 0: no limit */
    const char *hint;       /* appended to TEXT_STRICT errors (e.g. "; use --skip-invalid") */
    int quiet;              /* 1: no warnings (replaced lines, BOM, trailing bytes): a file
                             * read a second time, warned about the first time */
} TextOptions;

/* The defaults: TEXT_REPLACE, regular files or streams, TEXT_MAX_LINE. */
extern const TextOptions TEXT_DEFAULT;

/* ---- line by line ------------------------------------------------------ */
typedef struct TextReader TextReader;
/* Opens path ("-": stdin). NULL + errorf naming the path on failure. */
TextReader *text_open(const char *path, const TextOptions *o);
/* The next line, without its end ('\n', "\r\n"), NUL-terminated, valid until
 * the next call: its length; -1 at the end of the input; -2 on an error
 * (errorf names file and line). After the end or an error it stays there. */
long text_line(TextReader *r, char **line);
/* 1 if text_line can return without waiting for more input (a line is
 * buffered, the input has ended, or a read would not block). */
int text_ready(TextReader *r);
long text_lineno(const TextReader *r);          /* lines returned so far */
long text_invalid_lines(const TextReader *r);   /* lines replaced (REPLACE) or left out (SKIP) */
const char *text_name(const TextReader *r);     /* the path, or "stdin" */
void text_close(TextReader *r);

/* ---- whole files ------------------------------------------------------- */
/* Lines split and null-terminated in one buffer: line i is text + start[i]. */
typedef struct {
    char *text;
    long *start;
    long n;
    long invalid_lines;     /* lines with NUL or invalid UTF-8 (replaced or left out) */
} TextLines;
/* Every line of path with TEXT_DEFAULT, or with o. 0, or -1 + errorf. */
int text_lines_read(TextLines *t, const char *path);
int text_lines_read_with(TextLines *t, const char *path, const TextOptions *o);
void text_lines_free(TextLines *t);

/* The whole file as text: its lines, each ended by '\n' (so CRLF is LF and a
 * BOM is gone), NUL-terminated; its length in *len. NULL + errorf. */
char *text_read_all(const char *path, const TextOptions *o, size_t *len);

#endif
