"""bench_translate_torch.py — the PyTorch side of scripts/bench-translate.sh:
the same incremental beam search as tfm translate (src/decode.c), written
the usual PyTorch way (fairseq-style: batched tensors, key/value caches
reordered with index_select), on the same checkpoint and the same BPE ids.

    python3 scripts/bench_translate_torch.py MODEL SRC.ids --beam K --alpha A \
        --max-len-a A --max-len-b B --batch-size N --threads T [--out OUT.ids]

The search (see src/decode.h): per sentence, each step extends every live
hypothesis by every token except PAD/BOS, keeps the K best extensions by
raw log-prob, moves those ending in EOS to the finished list (ranked by
logprob / ((5+|Y|)/6)^alpha, |Y| counting EOS), stops when no live
hypothesis can beat the best finished one (s / lp(max_len + 1) bound), or at
max_len = a*|x|+b tokens (EOS forced). Sentences are sorted by length into
batches of --batch-size; a finished sentence leaves the batch.

Prints "sentences N tokens M seconds S" (decoding time only, model loading
excluded); --out writes the 1-best ids in input order.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch_model as tm  # noqa: E402

PAD, UNK, BOS, EOS = 0, 1, 2, 3


class Decoder:
    """Incremental decoding with a tfm checkpoint's weights (tests/torch_model.py)."""

    def __init__(self, model):
        self.m, self.d = model, model.dims
        self.H, self.Dk = self.d.heads, self.d.d_model // self.d.heads
        self.E = model.encoder.embed_tokens.weight

    def encode(self, src, src_len):
        enc, pad = self.m.encode(src, src_len)
        # encoder-side keys/values of every decoder layer, once per batch
        kv = []
        for layer in self.m.decoder.layers:
            a = layer.encoder_attn
            kv.append((self.heads(a.k_proj(enc)), self.heads(a.v_proj(enc))))
        return kv, pad

    def heads(self, x):  # [n, T, D] -> [n, H, T, Dk]
        n, T, _ = x.shape
        return x.view(n, T, self.H, self.Dk).transpose(1, 2)

    def attend(self, q, k, v, pad=None):  # q [n, H, 1, Dk], k/v [n, H, T, Dk]
        s = q @ k.transpose(-1, -2) / math.sqrt(self.Dk)
        if pad is not None:
            s = s.masked_fill(pad[:, None, None, :], float("-inf"))
        o = torch.softmax(s, dim=-1) @ v
        n = o.shape[0]
        return o.transpose(1, 2).reshape(n, 1, self.d.d_model)

    def step(self, tok, t, cache, cross, pad):
        """tok [n]: the last tokens; cache: per layer (K, V) [n, H, t, Dk] or
        None; cross/pad: encoder K/V and mask per row. Returns log-probs
        [n, V] and the new cache."""
        d, m = self.d, self.m
        x = self.E[tok][:, None, :] * math.sqrt(d.d_model) + m.pe[t]
        new_cache = []
        for i, layer in enumerate(m.decoder.layers):
            def self_attn(y, i=i, layer=layer):
                a = layer.self_attn
                k, v = self.heads(a.k_proj(y)), self.heads(a.v_proj(y))
                if cache is not None:
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                new_cache.append((k, v))
                return a.out_proj(self.attend(self.heads(a.q_proj(y)), k, v))

            def cross_attn(y, i=i, layer=layer):
                a = layer.encoder_attn
                return a.out_proj(self.attend(self.heads(a.q_proj(y)), cross[i][0], cross[i][1], pad))

            x = layer.residual(x, self_attn, layer.self_attn_layer_norm)
            x = layer.residual(x, cross_attn, layer.encoder_attn_layer_norm)
            x = layer.residual(x, layer.ffn, layer.final_layer_norm)
        if d.pre_norm:
            x = m.decoder.layer_norm(x)
        return F.log_softmax(x[:, 0] @ self.E.t(), dim=-1), new_cache


def lp(n, alpha):
    return ((5.0 + n) / 6.0) ** alpha


def beam_search(dec, src, src_len, max_len, K, alpha):
    """src [B, S] (x EOS PAD..), max_len [B]. Returns the 1-best token lists."""
    B = src.shape[0]
    cross, pad = dec.encode(src, src_len)
    V = dec.E.shape[0]
    # live rows: sentence, tokens so far, raw score
    sent = list(range(B))
    hyps = [[] for _ in range(B)]
    scores = torch.zeros(B, dtype=torch.float64)
    finished = [None] * B          # (score, logprob, tokens) of the best finished
    rows_of = {s: [s] for s in range(B)}
    tok = torch.full((B,), BOS, dtype=torch.long)
    cache, rows = None, torch.arange(B)
    t = 0
    while len(sent) > 0:
        logp, cache = dec.step(tok, t, cache, [(k[rows], v[rows]) for k, v in cross] if t else cross, pad[rows])
        logp[:, PAD] = float("-inf")
        logp[:, BOS] = float("-inf")
        lpd = logp.double()
        new_sent, new_hyps, new_scores, parents, new_tok = [], [], [], [], []
        for s, rs in rows_of.items():
            r = torch.tensor(rs)
            if t >= max_len[s]:  # max length: every live hypothesis ends
                for j in rs:
                    sc = float(scores[j] + lpd[j, EOS])
                    cand = (sc / lp(t + 1, alpha), sc, hyps[j])
                    if finished[s] is None or cand[0] > finished[s][0]:
                        finished[s] = cand
                continue
            total = (scores[r][:, None] + lpd[r]).view(-1)
            best, idx = total.topk(min(K, total.numel()))
            live = []
            for sc, ix in zip(best.tolist(), idx.tolist()):
                j, w = rs[ix // V], ix % V
                if w == EOS:
                    cand = (sc / lp(t + 1, alpha), sc, hyps[j])
                    if finished[s] is None or cand[0] > finished[s][0]:
                        finished[s] = cand
                elif sc > float("-inf"):
                    live.append((sc, j, w))
            if live and finished[s] is not None and max(c[0] for c in live) / lp(max_len[s] + 1, alpha) <= finished[s][0]:
                live = []
            for sc, j, w in live:
                new_sent.append(s)
                new_hyps.append(hyps[j] + [w])
                new_scores.append(sc)
                parents.append(j)
                new_tok.append(w)
        if not new_sent:
            break
        rows_of = {}
        for i, s in enumerate(new_sent):
            rows_of.setdefault(s, []).append(i)
        par = torch.tensor(parents)
        cache = [(k.index_select(0, par), v.index_select(0, par)) for k, v in cache]
        rows = torch.tensor(new_sent)
        sent, hyps = new_sent, new_hyps
        scores = torch.tensor(new_scores, dtype=torch.float64)
        tok = torch.tensor(new_tok)
        t += 1
    return [f[2] if f else [] for f in finished]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("src_ids")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=0.6)
    ap.add_argument("--max-len-a", type=float, default=1.0)
    ap.add_argument("--max-len-b", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, dims, _ = tm.from_checkpoint(a.model)
    dec = Decoder(model)
    with open(a.src_ids) as f:
        src = [[int(x) for x in line.split()][:dims.max_positions - 1] for line in f.read().split("\n")[:-1]]
    out = [[] for _ in src]
    order = sorted((i for i in range(len(src)) if src[i]), key=lambda i: (len(src[i]), i))
    t0 = time.time()
    with torch.inference_mode():
        for b0 in range(0, len(order), a.batch_size):
            idx = order[b0:b0 + a.batch_size]
            S = max(len(src[i]) for i in idx) + 1
            s = torch.full((len(idx), S), PAD, dtype=torch.long)
            for j, i in enumerate(idx):
                s[j, :len(src[i]) + 1] = torch.tensor(src[i] + [EOS])
            sl = torch.tensor([len(src[i]) + 1 for i in idx])
            ml = [min(int(math.floor(a.max_len_a * len(src[i]) + a.max_len_b)), dims.max_positions - 1) for i in idx]
            for i, y in zip(idx, beam_search(dec, s, sl, ml, a.beam, a.alpha)):
                out[i] = y
    el = time.time() - t0
    print("sentences %d tokens %d seconds %.3f" % (len(src), sum(map(len, out)), el))
    if a.out:
        with open(a.out, "w") as f:
            for y in out:
                f.write(" ".join(map(str, y)) + "\n")


if __name__ == "__main__":
    main()
