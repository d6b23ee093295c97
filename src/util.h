/* util.h — errors, logging, memory, time, files, command-line helpers.
 *
 * Error convention (sqlite style): library functions never exit. On failure
 * they call errorf(...) which records a message naming the file, line and
 * what was expected, and return -1 (or NULL). The CLI prints error_message()
 * and exits 1. Usage errors (bad command/option) exit 2.
 */
#ifndef TFM_UTIL_H
#define TFM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define TFM_VERSION "0.1.0"

/* ---- errors ---------------------------------------------------------- */
/* Record an error message (printf format) and return -1. Thread-local. */
int errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefix the current error with more context: "context: old message". */
int error_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *error_message(void);
void error_clear(void);
/* Print "tfm: error: <msg>" to stderr and exit(1). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Print the recorded error and exit(1). */
void die_error(void) __attribute__((noreturn));
/* The one way a command reports a runtime error: prints "tfm: error: <msg>"
 * on stderr and returns 1 (the exit code). cli_error_recorded() prints the
 * recorded error_message(). */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_error_recorded(void);
/* An invariant of the code itself (never of the input, which gets errorf):
 * when it does not hold, print "tfm: internal error: FILE:LINE: COND" and
 * abort. Library code reports everything else to its caller. */
#define ASSERT(cond) do { if (!(cond)) assert_fail(__FILE__, __LINE__, #cond); } while (0)
void assert_fail(const char *file, int line, const char *cond) __attribute__((noreturn));

/* ---- numbers ---------------------------------------------------------
 * The one strict number parser, used by config keys, command-line options
 * and checkpoint metadata alike: the whole text is one decimal number (as
 * strtod reads it: "42", "-0.5", "1e-9"; decimal only: no spaces, no hex, no
 * inf or nan, nothing after it), finite,
 * and with `integer` a whole number of at most 2^53 in magnitude (exact in a
 * double). Returns 0 and *out; NUM_SYNTAX if the text is not such a number;
 * NUM_RANGE if it is one outside [lo, hi] (*out is then the number). No
 * message: each caller names the key or option. */
enum { NUM_SYNTAX = -1, NUM_RANGE = -2 };
int parse_number(const char *text, int integer, double lo, double hi, double *out);
/* The same for an unsigned 64-bit integer (all 64 bits: RNG states): decimal
 * digits only. 0 or NUM_SYNTAX. */
int parse_u64(const char *text, uint64_t *out);

/* ---- logging (always stderr) ----------------------------------------- */
extern int log_quiet;   /* 1: suppress info logs */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- memory: abort with a message on out-of-memory ------------------- */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* open_memstream, out of memory handled as xmalloc does. */
FILE *xmemstream(char **buf, size_t *len);
/* 64-byte aligned allocation (for SIMD), zero-filled; free with free(). */
void *xaligned(size_t n);

/* ---- time ------------------------------------------------------------ */
double now_seconds(void);               /* monotonic clock */
double resident_mb(void);               /* the process's resident memory now (/proc/self/statm), 0 if unknown */
void format_duration(double seconds, char *buf, size_t n); /* "1h02m03s" */

/* ---- files ----------------------------------------------------------- */
/* The bytes of a file, as they are, in a NUL-terminated buffer; NULL +
 * errorf on failure. For binary files and tests: text (lines, gzip, the
 * NUL/UTF-8/CRLF policy, limits) is read through text.h. */
char *read_file(const char *path, size_t *len_out);
int file_exists(const char *path);
/* Join dir and a relative path ("a/b.ini" + "x" -> "a/x"); absolute paths
 * are returned unchanged. Returns a malloc'd string. */
char *path_relative_to(const char *base_file, const char *path);

/* Atomic replacement of an output file (every file tfm writes goes through
 * these). atomic_open returns a stream to write; atomic_commit makes it the
 * file at `path`, or leaves what was there unchanged:
 *   - path absent or a regular file: the data go to PATH.tmp.<pid> in the
 *     same directory, which is fsync'ed, renamed over PATH, and the directory
 *     fsync'ed. A crash at any point leaves the old file or the new one, whole.
 *     An existing file's permissions are kept.
 *   - path a symbolic link: followed; the file it names is replaced as above
 *     (the link stays a link). A dangling link is refused.
 *   - path a character device or a FIFO (/dev/stdout, /dev/null, a pipe): written
 *     in place, never renamed over (not atomic: it is a stream).
 *   - anything else (a directory, a block device, a socket): refused.
 * Errors name the path and the cause (errorf) and return NULL / -1; on any
 * error the temporary file is removed. */
typedef struct {
    FILE *f;
    char *path;   /* the file written: `path`, or the file a link names */
    char *tmp;    /* the temporary file; NULL when written in place */
} AtomicFile;
FILE *atomic_open(AtomicFile *a, const char *path);
int atomic_commit(AtomicFile *a);   /* flush, fsync, close, rename, fsync the directory */
void atomic_abort(AtomicFile *a);   /* close and remove the temporary file */
/* The whole of data[0..n) as the new file at path (atomic_open + commit). */
int write_file_atomic(const char *path, const void *data, size_t n);
/* The directory holding path ("." for a bare name); malloc'd. */
char *path_dirname(const char *path);
/* The kind of file a stat() mode names, for messages ("%s: is a %s, not a
 * regular file"): "regular file", "directory", "FIFO (named pipe)",
 * "character device", "block device", "socket", "symbolic link", or
 * "special file" for anything else. The one list of these names. */
const char *file_kind(mode_t mode);
/* Before any work: may `out` be written by a command that reads inputs[0..n)
 * (NULL entries skipped) and, if read_stdin, its standard input? Refuses an
 * output that is the same file as an input (device and inode, after every
 * link: a symbolic or hard link to an input is that input), which the atomic
 * rename would replace with the output, and an output that does not exist
 * in a directory that does not (the work would be lost at the end). Streams
 * (character devices, FIFOs) are never the same file: they are written in
 * place. -1 + errorf naming `what` (e.g. "-o"), the output and the input. */
int output_check(const char *what, const char *out, const char *const *inputs, int n, int read_stdin);

/* stdout: flush it and check that every write so far succeeded. -1 with
 * errorf("cannot write to stdout: <cause>") once any write failed (a full
 * disk, a closed stdout); long-running commands call it to stop early, and
 * cli_main calls it (and fclose) after every command. */
int stdout_flush(void);
/* The errno of the first failed write to stdout (0: none). */
int stdout_errno(void);

/* ---- command-line helpers -------------------------------------------- */
/* For option parsing loops: if argv[*i] is `name` (e.g. "--beam"), stores the
 * next argument in *value, advances *i, and returns 1; also accepts
 * "--beam=4"; a name may list spellings of one option, "-i|--input". If the
 * value is missing, prints a usage error and exits 2; so
 * does a second use of the same option in argv (one value only: never a
 * silent override). argv[0] names the command in those messages. */
int opt_value(int argc, char **argv, int *i, const char *name, const char **value);
/* For option loops: 0 if a is an option to parse; 1 if it is an operand
 * (it does not start with '-', is "-", or comes after "--"); 2 for the "--"
 * that ends the options (skip it). *ended keeps the state (start at 0). */
int opt_kind(const char *a, int *ended);
/* The command line tfm was started with, as a shell would read it back
 * (arguments quoted where needed): "tfm train a.ini --set 'x.y=a b'".
 * cli_main records it; NULL before. */
void command_line_set(int argc, char **argv);
const char *command_line(void);
/* The same for an option that may be given several times (--set, -m of an ensemble). */
int opt_values(int argc, char **argv, int *i, const char *name, const char **value);
/* 1 if argv[i] is the flag `name` (remembered for opt_unknown's suggestions). */
int opt_flag(char **argv, int i, const char *name);
/* argv[i] is no option of cmd: a usage error (exit 2) suggesting the closest
 * option name that opt_value, opt_values or opt_flag were asked about. */
void opt_unknown(const char *cmd, char **argv, int i) __attribute__((noreturn));
/* Levenshtein distance (for "did you mean"). */
int edit_distance(const char *a, const char *b);
/* Parse numbers (parse_number) in [lo, hi] or exit 2 with "tfm <cmd>: option
 * NAME expects ..." / "... is out of range". Options that stand for a config
 * key ([run] threads, [decode] beam, ...) use config_option instead, so that
 * they accept exactly what the key does. */
int opt_int(const char *cmd, const char *name, const char *value, int lo, int hi);
double opt_double(const char *cmd, const char *name, const char *value, double lo, double hi);
/* Precision of the matrix products, the one table of names (options,
 * configs, logs): fp32, bf16 (gemm_bf16.h) and int8 (gemm_int8.h). int8 is
 * for translation only (tfm translate, tfm eval): tfm train refuses it. */
typedef enum { PREC_FP32, PREC_BF16, PREC_INT8 } Precision;
/* The Precision of a name, or -1 if it is none. */
int precision_from_name(const char *name);
const char *precision_name(int p);
/* "fp32, bf16 or int8", for messages. */
const char *precision_names(void);
/* Unknown option: one-line error + usage hint on stderr, exit 2. */
void usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* ---- small RNG (xorshift64*), state is one uint64 so it checkpoints ---- */
typedef struct { uint64_t s; } Rng;
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
float rng_uniform(Rng *r);        /* [0, 1) */
float rng_normal(Rng *r);         /* N(0, 1) */

#endif
