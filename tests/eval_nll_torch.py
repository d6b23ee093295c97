"""eval_nll_torch.py — the figures of `tfm eval --no-translate`, computed by
the independent PyTorch model of tests/torch_model.py (in float64), for
tests/eval.sh.

    python3 tests/eval_nll_torch.py MODEL.safetensors SRC.ids REF.ids

SRC.ids / REF.ids: one line of space-separated BPE ids per sentence (as
`tfm bpe encode --ids` writes them). Pairs are formed as tfm does: source
x EOS, decoder input BOS y, target y EOS; pairs longer than max_positions
are cut to max_positions - 1 tokens (+ EOS). Prints
    nll_per_token = X
    loss_per_token = L
    tokens = N
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model as tm  # noqa: E402

PAD, BOS, EOS = 0, 2, 3


def read_ids(path):
    with open(path) as f:
        return [[int(t) for t in line.split()] for line in f.read().split("\n")[:-1]]


def main():
    model_path, src_path, ref_path = sys.argv[1:4]
    model, dims, _ = tm.from_checkpoint(model_path, dtype=torch.float64)
    src, ref = read_ids(src_path), read_ids(ref_path)
    assert len(src) == len(ref), "line counts differ"
    cut = dims.max_positions - 1
    loss = nll = 0.0
    tokens = 0
    with torch.no_grad():
        for i in range(0, len(src), 16):
            xs = [x[:cut] + [EOS] for x in src[i:i + 16]]
            ys = [y[:cut] for y in ref[i:i + 16]]
            B, S, T = len(xs), max(map(len, xs)), max(len(y) for y in ys) + 1
            s = torch.full((B, S), PAD, dtype=torch.long)
            ti = torch.full((B, T), PAD, dtype=torch.long)
            to = torch.full((B, T), PAD, dtype=torch.long)
            for b, (x, y) in enumerate(zip(xs, ys)):
                s[b, :len(x)] = torch.tensor(x)
                ti[b, :len(y) + 1] = torch.tensor([BOS] + y)
                to[b, :len(y) + 1] = torch.tensor(y + [EOS])
            sl = torch.tensor([len(x) for x in xs])
            tl = torch.tensor([len(y) + 1 for y in ys])
            l, n, k = tm.batch_loss(model, s, sl, ti, to, tl)
            loss += float(l)
            nll += float(n)
            tokens += k
    print("nll_per_token = %.8f" % (nll / tokens))
    print("loss_per_token = %.8f" % (loss / tokens))
    print("tokens = %d" % tokens)


if __name__ == "__main__":
    main()
