/* test_settings.c — issue 30: one validation path for every setting. Over
 * the whole settings table (config.c), every key at its bounds, just past
 * them, and every string key with hostile characters, is either refused
 * with a message naming the key, or survives write -> load unchanged (the
 * INI text a checkpoint records), and a checkpoint holding such a config
 * loads back with the same settings (what resume reads). */
#include "test.h"
#include "bpe.h"
#include "checkpoint.h"
#include "config.h"
#include "model.h"
#include "util.h"

#include <math.h>

static const char *tmp_path(const char *name) {
    static char buf[4][600];
    static int k;
    const char *dir = getenv("TFM_TMP") ? getenv("TFM_TMP") : "/tmp";
    char *p = buf[k++ % 4];
    snprintf(p, 600, "%s/%s", dir, name);
    return p;
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* Set key = value on a copy of *base. 1: accepted and it round-trips through
 * the INI text unchanged; 0: refused, naming the key; -1: a defect (refused
 * without naming the key, or changed by the round trip). */
static int try_value(const Config *base, const ConfigKeyInfo *k, const char *value, const char *why) {
    Config c, back;
    config_copy(&c, base);
    char assign[8192], key[128];
    snprintf(key, sizeof key, "%s.%s", k->section, k->name);
    snprintf(assign, sizeof assign, "%s=%s", key, value);
    int rc;
    if (config_set(&c, assign)) {
        rc = has(error_message(), k->name) ? 0 : -1;
        CHECK_MSG(rc == 0, "%s = '%s' (%s): refused without naming the key: %s", key, value, why, error_message());
        config_free(&c);
        return rc;
    }
    char *text = config_to_string(&c);
    rc = config_load_string(&back, text, "round trip");
    CHECK_MSG(rc == 0, "%s = '%s' (%s) was accepted but its config text does not load: %s", key, value, why,
              error_message());
    if (rc == 0) {
        char *again = config_to_string(&back);
        char got[CONFIG_MAX_STRING + 64], want[CONFIG_MAX_STRING + 64];
        config_get(&c, key, want, sizeof want);
        config_get(&back, key, got, sizeof got);
        CHECK_MSG(!strcmp(text, again) && !strcmp(got, want), "%s = '%s' (%s) changed in the round trip: '%s' -> '%s'",
                  key, value, why, want, got);
        rc = !strcmp(text, again) && !strcmp(got, want) ? 1 : -1;
        free(again);
        config_free(&back);
    } else rc = -1;
    free(text);
    config_free(&c);
    return rc;
}

static void fmt_num(char *buf, size_t n, double x) { snprintf(buf, n, "%.17g", x); }

static void test_every_key_at_its_bounds(void) {
    Config base;
    config_defaults(&base);
    int nkeys = config_num_keys(), accepted = 0, refused = 0;
    CHECK(nkeys > 50);
    for (int i = 0; i < nkeys; i++) {
        ConfigKeyInfo k;
        CHECK(config_key_info(i, &k) == 0);
        if (!k.is_number) continue;
        char v[64];
        /* the bounds themselves: accepted (and round-trip), or refused by a rule across keys that names it */
        double in[2] = {k.min, k.max};
        for (int j = 0; j < 2; j++) {
            fmt_num(v, sizeof v, in[j]);
            int r = try_value(&base, &k, v, j ? "max" : "min");
            accepted += r == 1, refused += r == 0;
        }
        /* just past them: always refused, the key named */
        double out[2] = {k.is_integer ? k.min - 1 : k.min - (fabs(k.min) + 1) * 1e-6,
                         k.is_integer ? k.max + 1 : k.max + (fabs(k.max) + 1) * 1e-6};
        for (int j = 0; j < 2; j++) {
            fmt_num(v, sizeof v, out[j]);
            CHECK_MSG(try_value(&base, &k, v, "out of range") == 0, "[%s] %s = %s accepted", k.section, k.name, v);
        }
        /* not numbers, or not whole ones */
        const char *bad[] = {"", " 1", "1 ", "nan", "inf", "1e999", "0x10", "1,5", k.is_integer ? "1.5" : "1.5.5"};
        for (size_t j = 0; j < sizeof bad / sizeof *bad; j++)
            CHECK_MSG(try_value(&base, &k, bad[j], "syntax") == 0, "[%s] %s = '%s' accepted", k.section, k.name, bad[j]);
    }
    CHECK(accepted > 60);   /* most bounds are usable on their own */
    CHECK(refused > 0);     /* e.g. max_src_len = 2^20 needs max_positions too: named */
    config_free(&base);
}

/* The table marks the keys that change the model: a different value of one
 * of them (and of no other key) is another model for resume, averaging and
 * fine-tuning (config_same_model). */
static void test_model_keys_marked_in_the_table(void) {
    Config base;
    config_defaults(&base);
    int model = 0, other = 0;
    for (int i = 0; i < config_num_keys(); i++) {
        ConfigKeyInfo k;
        config_key_info(i, &k);
        Config c;
        config_copy(&c, &base);
        char assign[256], why[256];
        const char *values[] = {"post", "pre", "false", "true", "fp32", "bf16", "nfc", "none", "x.txt", NULL, NULL};
        char lo[64], hi[64];
        snprintf(lo, sizeof lo, "%.17g", k.min);
        snprintf(hi, sizeof hi, "%.17g", k.max);
        values[9] = k.is_number ? lo : NULL;
        values[10] = k.is_number ? hi : NULL;
        int changed = 0;
        for (int j = 0; j < 11 && !changed; j++) {
            if (!values[j]) continue;
            char before[CONFIG_MAX_STRING + 1], after[CONFIG_MAX_STRING + 1], key[128];
            snprintf(key, sizeof key, "%s.%s", k.section, k.name);
            snprintf(assign, sizeof assign, "%s=%s", key, values[j]);
            config_get(&c, key, before, sizeof before);
            if (config_set(&c, assign)) { error_clear(); continue; }
            config_get(&c, key, after, sizeof after);
            changed = strcmp(before, after) != 0;
        }
        if (!changed) {   /* heads: only values that divide d_model */
            CHECK_MSG(!strcmp(k.name, "heads") || !strcmp(k.name, "tie_embeddings"), "[%s] %s: no other value tried", k.section, k.name);
            config_free(&c);
            continue;
        }
        int same = config_same_model(&base, &c, why, sizeof why);
        CHECK_MSG(same == !k.changes_model, "[%s] %s: config_same_model %d, the table says changes_model %d", k.section,
                  k.name, same, k.changes_model);
        if (!same) CHECK(has(why, k.name));
        model += k.changes_model;
        other += !k.changes_model;
        config_free(&c);
    }
    CHECK(model >= 7 && other > 40);   /* layers, d_model, d_ff, norm, max_positions, vocab_size, ...; dropout is not */
    config_free(&base);
}

/* Characters a string value may not hold (the INI text could not give it
 * back), and odd ones it may. */
static const char *const HOSTILE[] = {"a\nb", "a\rb", "a\tb", "\x01", "a\x7f", " a", "a ", "a ;b", ";a", "\xff\xfe",
                                      "caf\xc3", "a\xe2\x96"};
static const char *const ODD[] = {"a;b", "x \xc3\xbc=#1", "[s]", "k = v", "#a", "a  b", "\"q\"", "\xe2\x96\x81", "=",
                                  "a:b", "$HOME", "%s%n", "a\\nb", "\xf0\x9f\x98\x80"};

static void test_every_string_key_with_hostile_characters(void) {
    Config base;
    config_defaults(&base);
    int strings = 0;
    char *long_ok = xmalloc(CONFIG_MAX_STRING + 2);
    memset(long_ok, 'x', CONFIG_MAX_STRING + 1);
    long_ok[CONFIG_MAX_STRING + 1] = 0;
    for (int i = 0; i < config_num_keys(); i++) {
        ConfigKeyInfo k;
        config_key_info(i, &k);
        if (!k.is_string) continue;
        strings++;
        for (size_t j = 0; j < sizeof HOSTILE / sizeof *HOSTILE; j++)
            CHECK_MSG(try_value(&base, &k, HOSTILE[j], "hostile") == 0, "[%s] %s: hostile value #%zu accepted", k.section,
                      k.name, j);
        for (size_t j = 0; j < sizeof ODD / sizeof *ODD; j++)
            CHECK_MSG(try_value(&base, &k, ODD[j], "odd") == 1, "[%s] %s = '%s' not accepted", k.section, k.name, ODD[j]);
        CHECK(try_value(&base, &k, long_ok, "too long") == 0);
        long_ok[CONFIG_MAX_STRING] = 0;
        CHECK(try_value(&base, &k, long_ok, "longest") == 1);
        long_ok[CONFIG_MAX_STRING] = 'x';
    }
    CHECK(strings >= 10);
    free(long_ok);
    config_free(&base);
}

/* The same rules for a value in a config file, naming the file and line. */
static void test_file_values_same_rules(void) {
    const char *p = tmp_path("hostile.ini");
    FILE *f = fopen(p, "w");
    fputs("[data]\nsrc_lang = a\x01x\n", f);
    fclose(f);
    Config c;
    CHECK(config_load(&c, p) == -1 && has(error_message(), ":2: [data] src_lang"));
    f = fopen(p, "w");
    fputs("[run]\nthreads = 4097\n", f);
    fclose(f);
    CHECK(config_load(&c, p) == -1 && has(error_message(), ":2: [run] threads = 4097 is out of range"));
}

static Bpe *tiny_bpe(void) {
    const char *p = tmp_path("settings-corpus.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < 200; i++) fprintf(f, "the cat sat on the mat %d ; die Katze auf der Matte\n", i % 17);
    fclose(f);
    BpeLearnOptions opt = {.vocab_size = 300, .normalization = "nfkc", .threads = 1, .quiet = 1};
    const char *files[] = {p};
    return bpe_learn(files, 1, &opt);
}

/* Every key that does not change the model at a bound, every string key at
 * an odd value: a checkpoint of that config loads back with it unchanged. */
static void test_checkpoint_holds_every_setting(void) {
    Bpe *bpe = tiny_bpe();
    if (!bpe) { CHECK(bpe != NULL); return; }
    Config c;
    config_defaults(&c);
    const char *model[] = {"model.d_model=16", "model.d_ff=24", "model.heads=4", "model.encoder_layers=1",
                           "model.decoder_layers=1", "data.max_src_len=30", "data.max_tgt_len=30",
                           "model.max_positions=40", "data.vocab_size=300"};
    for (size_t i = 0; i < sizeof model / sizeof *model; i++) CHECK_MSG(config_set(&c, model[i]) == 0, "%s", error_message());
    int set = 0;
    for (int i = 0; i < config_num_keys(); i++) {
        ConfigKeyInfo k;
        config_key_info(i, &k);
        if (k.changes_model || !strcmp(k.name, "max_src_len") || !strcmp(k.name, "max_tgt_len")) continue;
        char assign[256];
        if (k.is_string) {
            snprintf(assign, sizeof assign, "%s.%s=%s", k.section, k.name, ODD[(size_t)i % (sizeof ODD / sizeof *ODD)]);
            set += config_set(&c, assign) == 0;
        } else if (k.is_number) {
            snprintf(assign, sizeof assign, "%s.%s=%.17g", k.section, k.name, k.max);
            if (config_set(&c, assign) == 0) set++;
            else {
                snprintf(assign, sizeof assign, "%s.%s=%.17g", k.section, k.name, k.min);
                set += config_set(&c, assign) == 0;
            }
        }
    }
    CHECK(set > 35);
    ModelDims d = model_dims_from_config(&c, bpe_vocab_size(bpe));
    Model m;
    CHECK(model_init(&m, &d, 7) == 0);
    TrainState ts = {.step = 1, .rng_state = 1, .ranks = 1, .adam_m = xaligned(m.num_params * 4),
                     .adam_v = xaligned(m.num_params * 4)};
    const char *p = tmp_path("settings.safetensors");
    CHECK_MSG(checkpoint_save(p, &m, &c, bpe, &ts) == 0, "%s", error_message());
    Config back;
    TrainState ts2;
    CHECK_MSG(checkpoint_load(p, &back, NULL, NULL, &ts2) == 0, "%s", error_message());
    char *a = config_to_string(&c), *b = config_to_string(&back);
    CHECK_MSG(!strcmp(a, b), "the checkpoint's config differs:\n%s\n---\n%s", a, b);
    free(a); free(b);
    config_free(&back);
    free(ts2.adam_m); free(ts2.adam_v);
    free(ts.adam_m); free(ts.adam_v);
    model_free(&m);
    config_free(&c);
    bpe_free(bpe);
}

int main(void) {
    RUN(test_every_key_at_its_bounds);
    RUN(test_every_string_key_with_hostile_characters);
    RUN(test_file_values_same_rules);
    RUN(test_model_keys_marked_in_the_table);
    RUN(test_checkpoint_holds_every_setting);
    return test_summary();
}
