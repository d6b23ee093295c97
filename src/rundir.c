/* rundir.c — the run directory: checkpoint names, listing, checking,
 * pruning, temporary-file clean-up and the trainer's lock (see rundir.h). */
#include "rundir.h"
#include "checkpoint.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the run directory -------------------------------------------------- */
char *checkpoint_run_file(const char *run_dir, const char *name) {
    size_t n = strlen(run_dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    size_t dl = strlen(run_dir);
    snprintf(p, n, "%s%s%s", run_dir, dl && run_dir[dl - 1] == '/' ? "" : "/", name);
    return p;
}

char *checkpoint_path(const char *run_dir, long step) {
    char name[64];
    snprintf(name, sizeof name, "checkpoint-%08ld.safetensors", step);
    return checkpoint_run_file(run_dir, name);
}

long checkpoint_step(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    static const char prefix[] = "checkpoint-", suffix[] = ".safetensors";
    if (strncmp(base, prefix, sizeof prefix - 1)) return -1;
    const char *d = base + sizeof prefix - 1, *e = d;
    long step = 0;
    while (*e >= '0' && *e <= '9') step = step * 10 + (*e++ - '0');
    if (e == d || e - d > 15 || strcmp(e, suffix)) return -1;   /* 15 digits: no overflow */
    return step;
}

typedef struct { long step; char *path; } StepPath;

static int cmp_step(const void *a, const void *b) {
    const StepPath *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->path, y->path);
}

int checkpoint_list(const char *run_dir, char ***paths) {
    *paths = NULL;
    DIR *dir = opendir(run_dir);
    if (!dir) {
        if (errno == ENOENT) return 0;
        return errorf("%s: cannot read run directory: %s", run_dir, strerror(errno));
    }
    StepPath *v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        long step = checkpoint_step(de->d_name);
        if (step < 0) continue;
        if (n == cap) { cap = cap ? 2 * cap : 16; v = xrealloc(v, (size_t)cap * sizeof *v); }
        v[n++] = (StepPath){step, checkpoint_run_file(run_dir, de->d_name)};
    }
    closedir(dir);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_step);
    *paths = xmalloc((size_t)(n ? n : 1) * sizeof **paths);
    for (int i = 0; i < n; i++) (*paths)[i] = v[i].path;
    free(v);
    return n;
}

void checkpoint_list_free(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

/* NAME.tmp.<pid> whose process is gone: an interrupted atomic write of any
 * file (a checkpoint, the corpus cache, train.tsv, a BPE model). */
static int stale_temp(const char *name) {
    const char *t = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;   /* the last one */
    if (!t || t == name) return 0;
    double pid;
    if (parse_number(t + 5, 1, 1, 4194304, &pid) || !isdigit((unsigned char)t[5])) return 0;   /* pid_max */
    return (pid_t)pid != getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int run_dir_clean(const char *run_dir, const char *only) {
    DIR *dir = opendir(run_dir);
    if (!dir) return 0;
    int removed = 0;
    size_t ol = only ? strlen(only) : 0;
    struct dirent *de;
    while ((de = readdir(dir)))
        if ((!only || (!strncmp(de->d_name, only, ol) && !strncmp(de->d_name + ol, ".tmp.", 5))) && stale_temp(de->d_name)) {
            char *p = checkpoint_run_file(run_dir, de->d_name);
            if (unlink(p) == 0) log_info("removed %s, left by an interrupted write", p), removed++;
            free(p);
        }
    closedir(dir);
    return removed;
}

int run_dir_lock(const char *run_dir) {
    struct stat st;
    if (stat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return errorf("%s: the run directory is %s", run_dir,
                      lstat(run_dir, &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link to nothing" : "not a directory");
    char *path = checkpoint_run_file(run_dir, RUN_DIR_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || access(run_dir, W_OK) != 0) {
        errorf("%s: cannot write in the run directory (%s): checkpoints could not be saved", run_dir, strerror(errno));
        if (fd >= 0) close(fd);
        free(path);
        return -1;
    }
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &lk) != 0) {
        int e = errno;
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long)who.l_pid : -1;
        close(fd);
        free(path);
        if (e != EAGAIN && e != EACCES) return errorf("%s: cannot lock the run directory: %s", run_dir, strerror(e));
        if (pid > 0) return errorf("%s: another tfm train (PID %ld) is training in this run directory; stop it first "
                                   "or give another [train] dir", run_dir, pid);
        return errorf("%s: another process holds %s: one trainer per run directory", run_dir, RUN_DIR_LOCK);
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        errorf("%s: cannot write in the run directory (%s): checkpoints could not be saved", run_dir, strerror(errno));
        close(fd);
        free(path);
        return -1;
    }
    free(path);
    return fd;
}

/* Files this process has found whole, by identity: pruning after every
 * checkpoint does not load the same older ones again (a WMT base checkpoint
 * is 0.7 GB). A file changed since (size, mtime, ctime, inode) is checked anew. */
typedef struct { dev_t dev; ino_t ino; off_t size; struct timespec mtime, ctime; } FileId;
static FileId g_checked[64];
static int g_nchecked, g_next;   /* a ring of the last 64 */

static int file_id(const char *path, FileId *id) {
    struct stat st;
    if (stat(path, &st)) return -1;
    *id = (FileId){st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
    return 0;
}

static int same_id(const FileId *a, const FileId *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

int checkpoint_check(const char *path) {
    FileId id;
    int known = file_id(path, &id) == 0;
    for (int i = 0; known && i < g_nchecked; i++)
        if (same_id(&g_checked[i], &id)) return 0;
    int state = checkpoint_verify(path);
    if (state < 0) return -1;
    int rc = state ? 0 : errorf("%s: holds no training state (a model-only file named as a checkpoint)", path);
    if (rc == 0 && known) {
        g_checked[g_next] = id;
        g_next = (g_next + 1) % 64;
        if (g_nchecked < 64) g_nchecked++;
    }
    return rc;
}

int checkpoint_set_aside(const char *path, const char *why) {
    size_t n = strlen(path) + sizeof ".corrupt";
    char *to = xmalloc(n);
    snprintf(to, n, "%s.corrupt", path);
    int rc = 0;
    if (rename(path, to) == 0) log_warn("%s does not load (%s): moved aside to %s", path, why, to);
    else rc = errorf("%s does not load (%s), and cannot be moved aside to %s: %s", path, why, to, strerror(errno));
    free(to);
    return rc;
}

/* The newest checkpoints that load, newest first, until `want` are found
 * (want < 0: all); `current` (if not NULL) counts without a check. Those that
 * do not load are set aside. good[i] are indices into paths; returns the
 * count, or -1 + errorf when one cannot be set aside. */
static int newest_good(char **paths, int n, int want, const char *current, int *good) {
    int k = 0;
    for (int i = n - 1; i >= 0 && (want < 0 || k < want); i--) {
        if (!(current && !strcmp(paths[i], current)) && checkpoint_check(paths[i])) {
            char why[1024];
            const char *msg = error_message();
            size_t pl = strlen(paths[i]);   /* the message starts with the path: not twice */
            snprintf(why, sizeof why, "%s", !strncmp(msg, paths[i], pl) && msg[pl] == ':' ? msg + pl + 2 : msg);
            error_clear();
            if (checkpoint_set_aside(paths[i], why)) return -1;
            continue;
        }
        good[k++] = i;
    }
    return k;
}

int checkpoint_prune(const char *run_dir, int keep, const char *current) {
    char **paths;
    int n = checkpoint_list(run_dir, &paths);
    if (n < 0) return -1;
    if (keep < 1) keep = 1;
    int *good = xmalloc((size_t)(n ? n : 1) * sizeof *good);
    int k = newest_good(paths, n, keep, current, good), removed = 0, rc = 0;
    /* everything older than the last one kept goes (the newer ones that did not load are set aside) */
    for (int i = 0; k >= 0 && k == keep && i < good[k - 1]; i++) {
        if (unlink(paths[i]) != 0 && errno != ENOENT) { rc = errorf("%s: cannot delete: %s", paths[i], strerror(errno)); break; }
        removed++;
    }
    free(good);
    checkpoint_list_free(paths, n);
    return k < 0 || rc ? -1 : removed;
}

int checkpoint_list_good(const char *run_dir, int want, char ***out) {
    char **paths;
    *out = NULL;
    int n = checkpoint_list(run_dir, &paths);
    if (n < 0) return -1;
    int *good = xmalloc((size_t)(n ? n : 1) * sizeof *good);
    int k = newest_good(paths, n, want, NULL, good);
    if (k >= 0) {
        *out = xmalloc((size_t)(k ? k : 1) * sizeof **out);
        for (int i = 0; i < k; i++) (*out)[k - 1 - i] = xstrdup(paths[good[i]]);   /* oldest first */
    }
    free(good);
    checkpoint_list_free(paths, n);
    return k;
}
