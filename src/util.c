/* util.c — errors, logging, memory, time, numbers (the one strict parser), files (atomic writes), options, RNG. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ---------------------------------------------------------- */
static _Thread_local char error_buf[2048];

int errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_buf, sizeof error_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int error_wrap(const char *fmt, ...) {
    char prefix[1024], old[sizeof error_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_buf, sizeof old);
    if (snprintf(error_buf, sizeof error_buf, "%s: %s", prefix, old) >= (int)sizeof error_buf)
        memcpy(error_buf + sizeof error_buf - 4, "...", 4); /* long messages end visibly */
    return -1;
}

const char *error_message(void) { return error_buf[0] ? error_buf : "unknown error"; }
void error_clear(void) { error_buf[0] = 0; }

void die(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    exit(cli_error("%s", msg));
}

void die_error(void) { die("%s", error_message()); }

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tfm: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_error_recorded(void) { return cli_error("%s", error_message()); }

/* ---- numbers --------------------------------------------------------- */
int parse_number(const char *text, int integer, double lo, double hi, double *out) {
    if (text[strspn(text, "0123456789+-.eE")]) return NUM_SYNTAX;   /* decimal only: no spaces, hex, inf or nan */
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end || !isfinite(x)) return NUM_SYNTAX;            /* also nan, inf, 1e999 */
    if (errno == ERANGE && x != 0) return NUM_SYNTAX;
    if (integer && (x != floor(x) || fabs(x) > 9007199254740992.0)) return NUM_SYNTAX;
    *out = x;
    return x >= lo && x <= hi ? 0 : NUM_RANGE;
}

int parse_u64(const char *text, uint64_t *out) {
    if (!text[0]) return NUM_SYNTAX;
    uint64_t v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return NUM_SYNTAX;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return 0;
}

void assert_fail(const char *file, int line, const char *cond) {
    fprintf(stderr, "tfm: internal error: %s:%d: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}

/* ---- logging --------------------------------------------------------- */
int log_quiet = 0;

void log_info(const char *fmt, ...) {
    if (log_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("tfm: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void log_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tfm: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- memory ---------------------------------------------------------- */
static void oom(size_t n) { exit(cli_error("out of memory allocating %zu bytes", n)); }
void *xmalloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) oom(n); return p; }
void *xcalloc(size_t c, size_t s) { void *p = calloc(c ? c : 1, s ? s : 1); if (!p) oom(c * s); return p; }
void *xrealloc(void *q, size_t n) { void *p = realloc(q, n ? n : 1); if (!p) oom(n); return p; }
char *xstrdup(const char *s) { size_t n = strlen(s) + 1; char *p = xmalloc(n); memcpy(p, s, n); return p; }
FILE *xmemstream(char **buf, size_t *len) { FILE *f = open_memstream(buf, len); if (!f) oom(0); return f; }
void *xaligned(size_t n) {
    size_t r = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, r ? r : 64);
    if (!p) oom(n);
    memset(p, 0, r ? r : 64);
    return p;
}

/* ---- time ------------------------------------------------------------ */
double resident_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size, rss;
    if (!f) return 0;
    int ok = fscanf(f, "%ld %ld", &size, &rss) == 2;
    fclose(f);
    return ok ? (double)rss * (double)sysconf(_SC_PAGESIZE) / 1e6 : 0;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void format_duration(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e9) { snprintf(buf, n, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

/* ---- files ----------------------------------------------------------- */
char *read_file(const char *path, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) { errorf("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, len = 0, got;
    char *buf = xmalloc(cap);
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0)
        if ((len += got) + 1 == cap) buf = xrealloc(buf, cap *= 2);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) { free(buf); errorf("%s: read error: %s", path, strerror(err)); return NULL; }
    buf[len] = 0;
    if (len_out) *len_out = len;
    return buf;
}

int file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

char *path_relative_to(const char *base_file, const char *path) {
    if (!path || path[0] == '/' || !base_file) return xstrdup(path ? path : "");
    const char *slash = strrchr(base_file, '/');
    if (!slash) return xstrdup(path);
    size_t dl = (size_t)(slash - base_file) + 1, pl = strlen(path);
    char *out = xmalloc(dl + pl + 1);
    memcpy(out, base_file, dl);
    memcpy(out + dl, path, pl + 1);
    return out;
}

char *path_dirname(const char *path) {
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    return dir;
}

const char *file_kind(mode_t mode) {
    return S_ISREG(mode) ? "regular file" : S_ISDIR(mode) ? "directory" : S_ISFIFO(mode) ? "FIFO (named pipe)"
         : S_ISCHR(mode) ? "character device" : S_ISBLK(mode) ? "block device" : S_ISSOCK(mode) ? "socket"
         : S_ISLNK(mode) ? "symbolic link" : "special file";
}

int output_check(const char *what, const char *out, const char *const *inputs, int n, int read_stdin) {
    struct stat so, si;
    if (stat(out, &so) != 0) {
        if (errno != ENOENT) return errorf("%s %s: cannot write: %s", what, out, strerror(errno));
        if (lstat(out, &so) == 0)   /* a link to nothing: atomic_open would refuse it after the work */
            return errorf("%s %s: a symbolic link to a missing file; not written", what, out);
        char *dir = path_dirname(out);
        struct stat sd;
        int bad = stat(dir, &sd) != 0 ? errorf("%s %s: the directory %s does not exist (%s): nothing would be written",
                                               what, out, dir, strerror(errno))
                  : !S_ISDIR(sd.st_mode) ? errorf("%s %s: %s is not a directory", what, out, dir)
                  : access(dir, W_OK | X_OK) != 0 ? errorf("%s %s: cannot create files in %s: %s", what, out, dir, strerror(errno))
                  : 0;
        free(dir);
        return bad;
    }
    if (!S_ISREG(so.st_mode)) return 0;   /* a stream is written in place; atomic_open refuses the rest */
    for (int i = 0; i < n + (read_stdin != 0); i++) {
        const char *in = i < n ? inputs[i] : NULL;
        if (i < n ? !in || stat(in, &si) != 0 : fstat(STDIN_FILENO, &si) != 0) continue;
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            return errorf("%s %s is the same file as %s%s: writing it would destroy what is read; give another output",
                          what, out, in ? "the input " : "standard input", in ? in : "");
    }
    return 0;
}

/* fsync the directory holding `path`, so that a rename into it is durable. */
static int fsync_parent(const char *path) {
    char *dir = path_dirname(path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        rc = errorf("%s: cannot sync directory %s: %s", path, dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

/* ---- temporary files removed on SIGINT, SIGTERM, SIGHUP and exit -------
 * Every temporary file of atomic_open is listed here while it exists. When
 * a signal that ends the process arrives and nobody else handles it (the
 * disposition was the default one: tfm train installs its own, which
 * finishes the step), the handler removes the listed files, says so, and
 * dies of the signal as before (exit status 128 + N to the shell). Only
 * async-signal-safe calls in the handler: unlink, write, sigaction, raise.
 * An exit with files still listed (die() between atomic_open and the
 * commit: the commands open their output before the work) removes them too. */
enum { TMP_SLOTS = 16, TMP_PATH = 4096 };
static char g_tmp_path[TMP_SLOTS][TMP_PATH];
static volatile sig_atomic_t g_tmp_used[TMP_SLOTS];
static const int CLEANUP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};

static void put(const char *s) { ssize_t r = write(2, s, strlen(s)); (void)r; }

static void on_fatal_signal(int sig) {
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (!g_tmp_used[i]) continue;
        g_tmp_used[i] = 0;
        if (unlink(g_tmp_path[i]) != 0) continue;
        put("tfm: interrupted by ");
        put(name);
        put(": removed the unfinished ");
        put(g_tmp_path[i]);
        put(" (the output it was for is unchanged)\n");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, NULL);
    raise(sig);   /* delivered when this handler returns: the process ends as the signal says */
}

/* Block the cleanup signals around changes of the list (returns the old mask). */
static sigset_t tmp_block(void) {
    sigset_t set, old;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof CLEANUP_SIGNALS / sizeof *CLEANUP_SIGNALS; i++) sigaddset(&set, CLEANUP_SIGNALS[i]);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    return old;
}

/* At exit: what is still listed was never committed. */
static void tmp_remove_at_exit(void) {
    sigset_t old = tmp_block();
    for (int i = 0; i < TMP_SLOTS; i++)
        if (g_tmp_used[i]) { g_tmp_used[i] = 0; unlink(g_tmp_path[i]); }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
static void tmp_at_exit_init(void) { atexit(tmp_remove_at_exit); }

static void tmp_register(const char *tmp) {
    if (strlen(tmp) >= TMP_PATH) return;   /* not listed: not removed on a signal */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tmp_at_exit_init);
    sigset_t old = tmp_block();
    for (size_t i = 0; i < sizeof CLEANUP_SIGNALS / sizeof *CLEANUP_SIGNALS; i++) {
        struct sigaction cur;
        if (sigaction(CLEANUP_SIGNALS[i], NULL, &cur) == 0 && cur.sa_handler == SIG_DFL && !(cur.sa_flags & SA_SIGINFO)) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_fatal_signal;
            sigfillset(&sa.sa_mask);   /* one signal's cleanup at a time */
            sigaction(CLEANUP_SIGNALS[i], &sa, NULL);
        }
    }
    for (int i = 0; i < TMP_SLOTS; i++)
        if (!g_tmp_used[i]) {
            memcpy(g_tmp_path[i], tmp, strlen(tmp) + 1);
            g_tmp_used[i] = 1;
            break;
        }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void tmp_unregister(const char *tmp) {
    sigset_t old = tmp_block();
    for (int i = 0; i < TMP_SLOTS; i++)
        if (g_tmp_used[i] && !strcmp(g_tmp_path[i], tmp)) { g_tmp_used[i] = 0; break; }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void atomic_free(AtomicFile *a) {
    if (a->tmp) tmp_unregister(a->tmp);
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->f = NULL;
}

FILE *atomic_open(AtomicFile *a, const char *path) {
    memset(a, 0, sizeof *a);
    struct stat st;
    int exists = 1;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) { errorf("%s: cannot write: %s", path, strerror(errno)); return NULL; }
        exists = 0;
    } else if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
        errorf("%s: a symbolic link to a missing file (%s); not written", path, strerror(errno));
        return NULL;
    }
    if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {   /* a stream: write in place */
        a->f = fopen(path, "wb");
        if (!a->f) { errorf("%s: cannot write: %s", path, strerror(errno)); return NULL; }
        a->path = xstrdup(path);
        return a->f;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        errorf("%s: is a %s, not a regular file; not written (give a file name)", path, file_kind(st.st_mode));
        return NULL;
    }
    if (exists) {   /* a regular file, perhaps through links: replace the file itself */
        a->path = realpath(path, NULL);
        if (!a->path) { errorf("%s: cannot resolve: %s", path, strerror(errno)); return NULL; }
    } else {
        a->path = xstrdup(path);
    }
    size_t tl = strlen(a->path) + 32;
    a->tmp = xmalloc(tl);
    snprintf(a->tmp, tl, "%s.tmp.%ld", a->path, (long)getpid());
    tmp_register(a->tmp);   /* listed before it exists: a signal now removes it */
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        errorf("%s: cannot create %s: %s", path, a->tmp, strerror(errno));
        atomic_free(a);
        return NULL;
    }
    if (exists) (void)!fchmod(fd, st.st_mode & 07777);   /* keep the file's permissions */
    a->f = fdopen(fd, "wb");
    if (!a->f) {
        errorf("%s: cannot write: %s", path, strerror(errno));
        close(fd);
        unlink(a->tmp);
        atomic_free(a);
        return NULL;
    }
    return a->f;
}

void atomic_abort(AtomicFile *a) {
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    atomic_free(a);
}

int atomic_commit(AtomicFile *a) {
    int err = errno;   /* the cause of an earlier failed write, if any */
    int bad = ferror(a->f);
    if (fflush(a->f) != 0) bad = 1, err = errno;
    if (!bad && a->tmp && fsync(fileno(a->f)) != 0) bad = 1, err = errno;   /* data on disk before the rename */
    if (fclose(a->f) != 0 && !bad) bad = 1, err = errno;
    a->f = NULL;
    if (bad) {
        errorf("%s: write failed: %s%s", a->path, strerror(err ? err : EIO),
               a->tmp ? " (nothing written; the previous file, if any, is unchanged)" : "");
        atomic_abort(a);
        return -1;
    }
    if (a->tmp && rename(a->tmp, a->path) != 0) {
        errorf("%s: cannot rename %s over it: %s", a->path, a->tmp, strerror(errno));
        atomic_abort(a);
        return -1;
    }
    int rc = a->tmp ? fsync_parent(a->path) : 0;
    atomic_free(a);
    return rc;
}

int write_file_atomic(const char *path, const void *data, size_t n) {
    AtomicFile a;
    FILE *f = atomic_open(&a, path);
    if (!f) return -1;
    if (n && fwrite(data, 1, n, f) != n) { /* atomic_commit reports it */ }
    return atomic_commit(&a);
}

static int g_stdout_err;

int stdout_flush(void) {
    if (!g_stdout_err) {
        int e = errno;   /* the cause of an earlier failed write, if any */
        if (fflush(stdout) != 0) g_stdout_err = errno ? errno : EIO;
        else if (ferror(stdout)) g_stdout_err = e ? e : EIO;
    }
    return g_stdout_err ? errorf("cannot write to stdout: %s", strerror(g_stdout_err)) : 0;
}

int stdout_errno(void) { return g_stdout_err; }

/* ---- command-line helpers -------------------------------------------- */
void usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tfm %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nusage: see 'tfm %s --help'\n", cmd);
    va_end(ap);
    exit(2);
}

/* The options of the command line being parsed: every name a command asked
 * about (for "did you mean"), and where each valued one was given (a
 * single-valued option given twice is an error, not a silent override). */
enum { OPT_NAMES = 128 };
static struct {
    char **argv;                    /* the command line these are about */
    const char *name[OPT_NAMES];
    int given_at[OPT_NAMES];        /* argv index of its first use, or -1 */
    const char *value[OPT_NAMES];   /* the value given there */
    int n;
} g_opts;

static int opt_note(char **argv, const char *name) {
    if (g_opts.argv != argv) { g_opts.argv = argv; g_opts.n = 0; }
    for (int k = 0; k < g_opts.n; k++)
        if (!strcmp(g_opts.name[k], name)) return k;
    if (g_opts.n == OPT_NAMES) return -1;
    g_opts.name[g_opts.n] = name;
    g_opts.given_at[g_opts.n] = -1;
    return g_opts.n++;
}

/* The length of argv word a's option part if it is one of name's spellings
 * ("-i|--input": either), a word ending there or at '='; 0 if none. */
static size_t opt_spelling(const char *a, const char *name) {
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "|");
        if (!strncmp(a, p, n) && (a[n] == 0 || a[n] == '=')) return n;
        p += n + (p[n] == '|');
    }
    return 0;
}

/* argv[*i] is a spelling of `name`, alone or as `SPELLING=VALUE`: its value,
 * and *i past it. */
static int opt_match(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = opt_spelling(a, name);
    if (!n) return 0;
    if (a[n] == '=') { *value = a + n + 1; return 1; }
    if (*i + 1 >= argc) usage_error(argv[0], "option %s expects a value", a);
    *value = argv[++*i];
    return 1;
}

static char *g_command_line;

void command_line_set(int argc, char **argv) {
    size_t cap = 64, n = 0;
    char *s = xmalloc(cap);
    for (int i = 0; i < argc; i++) {
        const char *a = i ? argv[i] : "tfm";   /* argv[0] may be a path: the user typed tfm */
        size_t need = 4 * strlen(a) + 4;
        if (n + need >= cap) { cap = 2 * (n + need); s = xrealloc(s, cap); }
        if (i) s[n++] = ' ';
        int plain = a[0] != 0;
        for (const char *p = a; *p && plain; p++) plain = isalnum((unsigned char)*p) || strchr("_./=:,+@%-", *p);
        if (plain) { memcpy(s + n, a, strlen(a)); n += strlen(a); continue; }
        s[n++] = '\'';
        for (const char *p = a; *p; p++) {
            if (*p == '\'') { memcpy(s + n, "'\\''", 4); n += 4; }
            else s[n++] = *p;
        }
        s[n++] = '\'';
    }
    s[n] = 0;
    free(g_command_line);
    g_command_line = s;
}

const char *command_line(void) { return g_command_line; }

int opt_kind(const char *a, int *ended) {
    if (*ended) return 1;
    if (!strcmp(a, "--")) { *ended = 1; return 2; }
    return a[0] == '-' && a[1] ? 0 : 1;
}

int opt_value(int argc, char **argv, int *i, const char *name, const char **value) {
    int k = opt_note(argv, name), at = *i;
    if (!opt_match(argc, argv, i, name, value)) return 0;
    if (k >= 0 && g_opts.given_at[k] >= 0 && g_opts.given_at[k] != at) {
        char both[128];   /* "-i|--input" is named "-i/--input" */
        snprintf(both, sizeof both, "%s", name);
        for (char *c = both; (c = strchr(c, '|'));) *c = '/';
        usage_error(argv[0], "option %s given twice ('%s' and '%s'); it takes one value", both, g_opts.value[k], *value);
    }
    if (k >= 0) { g_opts.given_at[k] = at; g_opts.value[k] = *value; }
    return 1;
}

int opt_values(int argc, char **argv, int *i, const char *name, const char **value) {
    opt_note(argv, name);
    return opt_match(argc, argv, i, name, value);
}

int opt_flag(char **argv, int i, const char *name) {
    opt_note(argv, name);
    size_t n = opt_spelling(argv[i], name);
    return n && argv[i][n] == 0;
}

void opt_unknown(const char *cmd, char **argv, int i) {
    const char *best = NULL;   /* the closest spelling: best_n bytes of a name */
    int bd = 3, best_n = 0;
    if (g_opts.argv == argv)
        for (int k = 0; k < g_opts.n; k++)
            for (const char *p = g_opts.name[k]; *p;) {   /* each spelling of "-i|--input" */
                char alt[65];
                int n = (int)strcspn(p, "|");
                snprintf(alt, sizeof alt, "%.*s", n, p);
                int d = edit_distance(argv[i], alt);
                if (strlen(argv[i]) >= 4 && !strncmp(alt, argv[i], strlen(argv[i]))) d = 1;   /* a prefix: --vocab */
                if (d < bd) bd = d, best = p, best_n = n;
                p += n + (p[n] == '|');
            }
    if (best) usage_error(cmd, "unknown option '%s' (did you mean %.*s?)", argv[i], best_n, best);
    usage_error(cmd, "unknown option '%s'", argv[i]);
}

int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int s = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
            d[i][j] = s < x ? (s < y ? s : y) : (x < y ? x : y);
        }
    return d[la][lb];
}

int opt_int(const char *cmd, const char *name, const char *value, int lo, int hi) {
    double v;
    int r = parse_number(value, 1, lo, hi, &v);
    if (r == NUM_SYNTAX) usage_error(cmd, "option %s expects an integer, got '%s'", name, value);
    if (r == NUM_RANGE) usage_error(cmd, "option %s = %s is out of range [%d, %d]", name, value, lo, hi);
    return (int)v;
}

double opt_double(const char *cmd, const char *name, const char *value, double lo, double hi) {
    double v;
    int r = parse_number(value, 0, lo, hi, &v);
    if (r == NUM_SYNTAX) usage_error(cmd, "option %s expects a number, got '%s'", name, value);
    if (r == NUM_RANGE) usage_error(cmd, "option %s = %s is out of range [%g, %g]", name, value, lo, hi);
    return v;
}

/* ---- precisions: the one table ---------------------------------------- */
static const char *const PRECISIONS[] = {"fp32", "bf16", "int8"};   /* indexed by Precision */

int precision_from_name(const char *name) {
    for (int p = 0; p <= PREC_INT8; p++)
        if (!strcmp(name, PRECISIONS[p])) return p;
    return -1;
}

const char *precision_name(int p) { return p >= 0 && p <= PREC_INT8 ? PRECISIONS[p] : "?"; }

const char *precision_names(void) { return "fp32, bf16 or int8"; }

/* ---- RNG: xorshift64* ------------------------------------------------ */
void rng_seed(Rng *r, uint64_t seed) {
    /* splitmix64 step so that small seeds give well-mixed states */
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    r->s = z ? z : 0x2545F4914F6CDD1DULL;
}

uint64_t rng_u64(Rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

float rng_uniform(Rng *r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(Rng *r) {
    /* Box-Muller; uses two uniforms, returns one normal */
    double u1 = ((rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
