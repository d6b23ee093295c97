/* dump_parity.c — the input of tests/torch_parity.py (tests/parity.sh):
 *   build/dev/dump_parity DIR [pre] [bf16]
 * writes DIR/model.safetensors (a tfm checkpoint of a small random model),
 * DIR/batch.safetensors and DIR/grads.safetensors (loss and every parameter
 * gradient, dropout off), with fp32 or (bf16) bf16 matrix products. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "batch.h"
#include "checkpoint.h"
#include "config.h"
#include "model.h"
#include "util.h"

static int write_tensors(const char *path, const TensorInfo *ti, int n, const float *buf, const char *prefix,
                         const char *const *mk, const char *const *mv, int nm) {
    StTensor *t = xcalloc((size_t)n, sizeof *t);
    char **names = xcalloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(prefix) + strlen(ti[i].name) + 1;
        names[i] = xmalloc(len);
        snprintf(names[i], len, "%s%s", prefix, ti[i].name);
        t[i].name = names[i];
        t[i].dtype = ST_F32;
        t[i].ndim = ti[i].ndim;
        t[i].shape[0] = ti[i].shape[0];
        t[i].shape[1] = ti[i].shape[1];
        t[i].data = (void *)(buf + ti[i].offset);
        t[i].nbytes = ti[i].size * sizeof(float);
    }
    int rc = st_write(path, t, n, mk, mv, nm);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names); free(t);
    return rc;
}

static int dump(const char *dir, int pre_norm, int bf16) {
    threads_init(0);
    /* a small model of the real shape family: 2+2 layers, several heads, a
     * padded batch; LayerNorm parameters and biases randomised so that every
     * gradient is non-trivial */
    Config c;
    config_defaults(&c);
    c.encoder_layers = 2; c.decoder_layers = 2; c.d_model = 32; c.d_ff = 48; c.heads = 4;
    c.max_positions = 64; c.pre_norm = pre_norm; c.label_smoothing = 0.1;
    c.vocab_size = 50;
    ModelDims d = model_dims_from_config(&c, c.vocab_size);
    Model m;
    if (model_init(&m, &d, 42)) die_error();
    Rng r;
    rng_seed(&r, 4);
    for (int t = 0; t < m.num_tensors; t++)
        if (m.tensors[t].ndim == 1)
            for (size_t i = 0; i < m.tensors[t].size; i++) m.params[m.tensors[t].offset + i] += 0.2f * rng_normal(&r);
    int sl[4] = {11, 4, 9, 1}, tl[4] = {7, 12, 2, 5};
    OwnedBatch ob = make_batch(4, 11, 12, sl, tl, d.vocab, &r);
    LossStats st = {0};
    model_set_precision(&m, bf16);
    model_zero_grad(&m);
    if (model_forward_backward(&m, &ob.b, NULL, 0, 1.0f, &st)) die_error();

    char path[4096], loss[64], nll[64], tokens[32];
    char *cfg = config_to_string(&c);
    const char *mk[2] = {"format", "config"}, *mv[2] = {"tfm-checkpoint-1", cfg};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (write_tensors(path, m.tensors, m.num_tensors, m.params, "", mk, mv, 2)) die_error();
    snprintf(loss, sizeof loss, "%.17g", st.loss);
    snprintf(nll, sizeof nll, "%.17g", st.nll);
    snprintf(tokens, sizeof tokens, "%ld", st.tokens);
    const char *gk[4] = {"loss", "nll", "tokens", "precision"}, *gv[4] = {loss, nll, tokens, bf16 ? "bf16" : "fp32"};
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    if (write_tensors(path, m.tensors, m.num_tensors, m.grads, "grad.", gk, gv, 4)) die_error();
    /* the batch as I64 tensors */
    const Batch *b = &ob.b;
    struct { const char *name; const int *v; int rows, cols; } parts[] = {
        {"src", b->src, b->B, b->S}, {"tgt_in", b->tgt_in, b->B, b->T}, {"tgt_out", b->tgt_out, b->B, b->T},
        {"src_len", b->src_len, b->B, 0}, {"tgt_len", b->tgt_len, b->B, 0}};
    StTensor t[5];
    int64_t *data[5];
    for (int i = 0; i < 5; i++) {
        size_t n = (size_t)parts[i].rows * (parts[i].cols ? parts[i].cols : 1);
        data[i] = xmalloc(n * sizeof(int64_t));
        for (size_t k = 0; k < n; k++) data[i][k] = parts[i].v[k];
        t[i] = (StTensor){.name = (char *)parts[i].name, .dtype = ST_I64, .ndim = parts[i].cols ? 2 : 1,
                          .shape = {parts[i].rows, parts[i].cols}, .data = data[i], .nbytes = n * sizeof(int64_t)};
    }
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    if (st_write(path, t, 5, NULL, NULL, 0)) die_error();
    for (int i = 0; i < 5; i++) free(data[i]);
    printf("wrote %s/{model,batch,grads}.safetensors: %s-norm, %s products%s%s, loss %.6f over %ld tokens\n", dir,
           pre_norm ? "pre" : "post", bf16 ? "bf16" : "fp32", bf16 ? ": " : "", bf16 ? bf16_mode() : "", st.loss,
           st.tokens);
    free(cfg); free(ob.buf);
    model_free(&m);
    config_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: dump_parity DIR [pre] [bf16]\n"); return 2; }
    int pre = 0, bf16 = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "pre")) pre = 1;
        else if (!strcmp(argv[i], "bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "post") || !strcmp(argv[i], "fp32")) continue;   /* the defaults */
        else { fprintf(stderr, "dump_parity: unknown argument '%s' (pre, bf16)\n", argv[i]); return 2; }
    }
    return dump(argv[1], pre, bf16);
}
