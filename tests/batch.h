/* batch.h — a synthetic padded batch for the model tests and the dev/ tools
 * (dev/bench_train.c, dev/dump_parity.c). */
#ifndef TFM_TESTS_BATCH_H
#define TFM_TESTS_BATCH_H

#include "data.h"
#include "util.h"

typedef struct { Batch b; int *buf; } OwnedBatch;

/* B sentences with the given lengths (incl. EOS); PAD after them. Source
 * x_1..x_n EOS; target input BOS y_1..y_m; target output y_1..y_m EOS. */
static inline OwnedBatch make_batch(int B, int S, int T, const int *src_len, const int *tgt_len, int V, Rng *r) {
    OwnedBatch o;
    o.buf = xcalloc((size_t)B * (S + 2 * T + 2), sizeof(int));
    Batch *b = &o.b;
    b->B = B; b->S = S; b->T = T;
    b->src = o.buf; b->tgt_in = b->src + B * S; b->tgt_out = b->tgt_in + B * T;
    b->src_len = b->tgt_out + B * T; b->tgt_len = b->src_len + B;
    b->src_tokens = b->tgt_tokens = 0;
    for (int i = 0; i < B; i++) {
        b->src_len[i] = src_len[i]; b->tgt_len[i] = tgt_len[i];
        b->src_tokens += src_len[i]; b->tgt_tokens += tgt_len[i];
        for (int t = 0; t < S; t++)
            b->src[i * S + t] = t < src_len[i] - 1 ? 4 + (int)(rng_u64(r) % (V - 4)) : t == src_len[i] - 1 ? TOK_EOS : TOK_PAD;
        for (int t = 0; t < T; t++) {
            int y = t < tgt_len[i] - 1 ? 4 + (int)(rng_u64(r) % (V - 4)) : t == tgt_len[i] - 1 ? TOK_EOS : TOK_PAD;
            b->tgt_out[i * T + t] = y;
        }
        for (int t = 0; t < T; t++)
            b->tgt_in[i * T + t] = t == 0 ? TOK_BOS : t < tgt_len[i] ? b->tgt_out[i * T + t - 1] : TOK_PAD;
    }
    return o;
}

#endif
