/* test_config.c — defaults are the paper's, parsing, errors with file:line. */
#include "test.h"
#include "config.h"
#include "model.h"
#include "util.h"

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    const char *dir = getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp";
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static const char *write_ini(const char *name, const char *text) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

static void test_defaults_are_the_paper(void) {
    Config c;
    config_defaults(&c);
    CHECK(c.encoder_layers == 6 && c.decoder_layers == 6);
    CHECK(c.d_model == 512 && c.d_ff == 2048 && c.heads == 8);
    CHECK_NEAR(c.dropout, 0.1, 0);
    CHECK_NEAR(c.label_smoothing, 0.1, 0);
    CHECK_NEAR(c.beta1, 0.9, 0);
    CHECK_NEAR(c.beta2, 0.98, 0);
    CHECK_NEAR(c.eps, 1e-9, 0);
    CHECK(c.warmup == 4000);
    CHECK(c.batch_tokens == 50000);
    CHECK(c.beam == 4);
    CHECK_NEAR(c.alpha, 0.6, 0);
    CHECK_NEAR(c.max_len_a, 1, 0);
    CHECK(c.max_len_b == 50);
    CHECK(c.tie_embeddings == 1 && c.pre_norm == 0 && c.bf16 == 0);
    CHECK(c.vocab_size == 37000);
    CHECK(c.average_last == 5);
    CHECK(config_validate(&c) == 0);
    /* base model: ~63M parameters with a 37k vocabulary */
    ModelDims d = model_dims_from_config(&c, c.vocab_size);
    size_t n = model_param_count(&d);
    CHECK(n == 63082496);
    config_free(&c);
}

static void test_parse_and_relative_paths(void) {
    const char *p = write_ini("ok.ini",
        "; comment\n[model]\nd_model = 64 ; inline comment\nheads = 4\nnorm = pre\n"
        "[data]\ntrain_src = corpus/train.en\ntrain_tgt = /abs/train.de\n"
        "[train]\nmax_time = 2h\n[run]\nprecision = bf16\n");
    Config c;
    CHECK_MSG(config_load(&c, p) == 0, "%s", error_message());
    CHECK(c.d_model == 64 && c.heads == 4 && c.pre_norm == 1);
    CHECK_NEAR(c.max_time, 7200, 0);
    CHECK(c.bf16 == 1);
    char want[600];
    snprintf(want, sizeof want, "%s/corpus/train.en", getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp");
    CHECK_STR(c.train_src, want);
    CHECK_STR(c.train_tgt, "/abs/train.de");
    /* round trip through the written form */
    char *text = config_to_string(&c);
    Config d;
    CHECK_MSG(config_load_string(&d, text, "roundtrip") == 0, "%s", error_message());
    char *text2 = config_to_string(&d);
    CHECK_STR(text, text2);
    CHECK(d.bf16 == 1);   /* precision survives the written form */
    char why[200];
    CHECK(config_same_model(&c, &d, why, sizeof why) == 1);
    CHECK(config_set(&d, "run.precision=int8") == 0 && d.bf16 == PREC_INT8);   /* the one table: int8 too (tfm train refuses it) */
    char *text3 = config_to_string(&d);
    CHECK(strstr(text3, "precision = int8") != NULL);
    free(text3);
    d.d_ff = 99;
    CHECK(config_same_model(&c, &d, why, sizeof why) == 0);
    CHECK(strstr(why, "d_ff") != NULL);
    free(text); free(text2);
    config_free(&c); config_free(&d);
}

/* Each bad config must fail with "file:line:" and a reason. */
static void expect_error(const char *text, int line, const char *needle) {
    const char *p = write_ini("bad.ini", text);
    Config c;
    int r = config_load(&c, p);
    CHECK_MSG(r != 0, "config accepted: %s", text);
    if (r == 0) { config_free(&c); return; }
    char loc[600];
    snprintf(loc, sizeof loc, "%s:%d:", p, line);
    const char *msg = error_message();
    CHECK_MSG(line == 0 || strstr(msg, loc) != NULL, "'%s' lacks '%s'", msg, loc);
    CHECK_MSG(strstr(msg, needle) != NULL, "'%s' lacks '%s'", msg, needle);
    config_free(&c);
}

static void test_errors(void) {
    expect_error("[model]\nd_modle = 512\n", 2, "did you mean [model] d_model");
    expect_error("[modle]\nd_model = 512\n", 2, "did you mean [model]");
    expect_error("[model]\nd_model = abc\n", 2, "expects an integer");
    expect_error("[model]\n\nd_model = 12.5\n", 3, "expects an integer");
    expect_error("[model]\ndropout = -0.1\n", 2, "out of range");
    expect_error("[model]\nnorm = middle\n", 2, "post or pre");
    expect_error("[run]\nprecision = fp16\n", 2, "fp32, bf16 or int8");
    expect_error("[model]\nheads = 8\nheads = 4\n", 3, "duplicate key");
    expect_error("[train]\nmax_time = soon\n", 2, "duration");
    expect_error("[decode]\nbeam = 0\n", 2, "out of range");
    expect_error("[model]\ntie_embeddings = maybe\n", 2, "true or false");
    expect_error("d_model = 4\n", 1, "outside any [section]");
    expect_error("[model]\nthis line has no equals sign\n", 2, "syntax error");
    expect_error("[model]\nheads = 7\n", 0, "does not divide d_model");
    /* a line longer than inih's default 200 bytes is not truncated */
    char longline[1200];
    snprintf(longline, sizeof longline, "[data]\ntrain_src = %0900d\n[model]\nheadz = 1\n", 0);
    expect_error(longline, 4, "did you mean [model] heads");
    Config c;
    CHECK(config_load(&c, "/nonexistent/x.ini") != 0);
    CHECK(strstr(error_message(), "/nonexistent/x.ini") != NULL);
}

/* Durations: one number with a unit, or parts in falling units as the logs
 * print them (format_duration's "1h19m07s" reads back). */
static void test_durations(void) {
    static const struct { const char *v; double seconds; } ok[] = {
        {"90", 90}, {"90s", 90}, {"15m", 900}, {"2h", 7200}, {"1d", 86400}, {"10 h", 36000},
        {"2h30m", 9000}, {"1h19m07s", 4747}, {"1d12h", 129600}, {"1.5h", 5400}, {"0m30s", 30}, {"2h 30m", 9000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char ini[100];
        snprintf(ini, sizeof ini, "[train]\nmax_time = %s\n", ok[i].v);
        Config c;
        int r = config_load(&c, write_ini("dur.ini", ini));
        CHECK_MSG(r == 0, "max_time = %s: %s", ok[i].v, error_message());
        if (r == 0) { CHECK_MSG(c.max_time == ok[i].seconds, "max_time = %s: %g, not %g", ok[i].v, c.max_time, ok[i].seconds); config_free(&c); }
    }
    static const char *bad[] = {"1h30", "30m2h", "1h1h", "1h-5m", "h", "m30s", "2h 30m x", "nanh", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ini[100];
        snprintf(ini, sizeof ini, "[train]\nmax_time = %s\n", bad[i]);
        expect_error(ini, 2, "duration");
    }
}

static void test_set_overrides(void) {
    Config c;
    config_defaults(&c);
    CHECK(config_set(&c, "train.max_steps=100") == 0);
    CHECK(c.max_steps == 100);
    CHECK(config_set(&c, "model.heads=3") != 0);      /* 512 % 3 != 0 */
    CHECK(config_set(&c, "model.heads=16") == 0);
    CHECK(config_set(&c, "train.max_stepz=1") != 0);
    CHECK(strstr(error_message(), "did you mean [train] max_steps") != NULL);
    CHECK(config_set(&c, "nodot=1") != 0);
    config_free(&c);
}

static void test_train_paths(void) {
    const char *p = write_ini("paths.ini", "[data]\ntrain_src = missing.en\ntrain_tgt = missing.de\n");
    Config c;
    CHECK(config_load(&c, p) == 0);
    CHECK(config_check_train_paths(&c) != 0);
    CHECK(strstr(error_message(), "train_src") != NULL && strstr(error_message(), "not found") != NULL);
    config_free(&c);
}

int main(void) {
    RUN(test_defaults_are_the_paper);
    RUN(test_parse_and_relative_paths);
    RUN(test_errors);
    RUN(test_durations);
    RUN(test_set_overrides);
    RUN(test_train_paths);
    return test_summary();
}
