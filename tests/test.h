/* test.h — a tiny test runner: CHECK macros, a summary line, an exit code.
 *
 *   #include "test.h"
 *   static void test_something(void) { CHECK(1 + 1 == 2); CHECK_NEAR(x, y, 1e-6); }
 *   int main(void) { RUN(test_something); return test_summary(); }
 *
 * The closing line is "N passed, N failed"; the exit code is 1 if any failed.
 * A "pass" is one CHECK; a failing CHECK prints file:line and the expression.
 */
#ifndef TFM_TEST_H
#define TFM_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed;
static const char *test_current = "";

#define CHECK(cond) do { \
    if (cond) test_passed++; \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__, test_current, #cond); } \
} while (0)

#define CHECK_MSG(cond, ...) do { \
    if (cond) test_passed++; \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__, test_current, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

#define CHECK_NEAR(a, b, tol) do { \
    double _a = (double)(a), _b = (double)(b); \
    if (fabs(_a - _b) <= (tol)) test_passed++; \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s = %.9g vs %s = %.9g (tol %g)\n", \
                                  __FILE__, __LINE__, test_current, #a, _a, #b, _b, (double)(tol)); } \
} while (0)

#define CHECK_STR(a, b) do { \
    const char *_a = (a), *_b = (b); \
    if (_a && _b && !strcmp(_a, _b)) test_passed++; \
    else { test_failed++; fprintf(stderr, "FAIL %s:%d [%s]: %s = \"%s\" vs \"%s\"\n", \
                                  __FILE__, __LINE__, test_current, #a, _a ? _a : "(null)", _b ? _b : "(null)"); } \
} while (0)

#define RUN(fn) do { test_current = #fn; fn(); } while (0)

/* Print a visible skip (e.g. data or torch missing); counts as neither. */
#define SKIP(...) do { fprintf(stderr, "SKIP [%s]: ", test_current); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

/* Path of the shared Multi30k data (../shared/data/multi30k from the repo
 * root), or NULL if absent. Override with TFM_DATA. */
/* Writes text to path (a fixture file); a test that cannot write its fixture
 * stops at once rather than testing nothing. */
static inline void test_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) == EOF || fclose(f) != 0) { perror(path); exit(1); }
}

static inline const char *test_data_dir(void) {
    const char *env = getenv("TFM_DATA");
    static const char *cands[] = {"../shared/data/multi30k", "../../shared/data/multi30k"};
    if (env) return env;
    for (int i = 0; i < 2; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/val.en", cands[i]);
        FILE *f = fopen(p, "r");
        if (f) { fclose(f); return cands[i]; }
    }
    return NULL;
}

#endif
