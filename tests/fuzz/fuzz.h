/* fuzz.h — shared by the libFuzzer targets in tests/fuzz (make fuzz).
 *
 * Each target defines LLVMFuzzerTestOneInput and feeds the input to one of
 * tfm's readers the way the CLI does: from a file when the reader takes a
 * path (the bytes go to a per-process file under /dev/shm), or on stdin. A
 * reader may refuse the input (errorf, -1); it must never crash, leak, read
 * out of bounds, hang or take memory out of proportion to the input. */
#ifndef TFM_FUZZ_H
#define TFM_FUZZ_H

#include "util.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_paths[8][128];
static const char *fuzz_suffixes[8];
static inline void fuzz_cleanup(void) {
    for (int k = 0; k < 8 && fuzz_suffixes[k]; k++) unlink(fuzz_paths[k]);
}

/* A scratch file named ...<suffix> holding data[0..n); the same path for
 * every call with the same suffix (one process runs one input at a time). */
static inline const char *fuzz_file(const uint8_t *data, size_t n, const char *suffix) {
    int k = 0;
    while (k < 8 && fuzz_suffixes[k] && strcmp(fuzz_suffixes[k], suffix)) k++;
    if (k == 8) abort();
    if (!fuzz_suffixes[k]) {
        struct stat st;
        const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fuzz_paths[k], sizeof fuzz_paths[k], "%s/tfm-fuzz-%ld-%d%s", dir, (long)getpid(), k, suffix);
        if (k == 0) atexit(fuzz_cleanup);
        fuzz_suffixes[k] = suffix;
    }
    FILE *f = fopen(fuzz_paths[k], "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) abort();
    return fuzz_paths[k];
}

/* The bytes as a NUL-terminated string (malloc'd: ASan sees reads past it). */
static inline char *fuzz_string(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* stdin reads the file at path from its start (for the cmd_* readers). */
static inline void fuzz_stdin(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0 || dup2(fd, 0) < 0) abort();
    close(fd);
    clearerr(stdin);
    rewind(stdin);
}

/* Once per process: output to /dev/null, info logs off. */
static inline void fuzz_quiet(void) {
    if (!freopen("/dev/null", "w", stdout)) abort();
    log_quiet = 1;
}

#endif
