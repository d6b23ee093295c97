"""bench_train.py — PyTorch's side of scripts/bench-train.sh.

Times training steps (forward, backward, Adam) of the model of a tfm config
in PyTorch (tests/torch_model.py: the same architecture tfm computes, which
tests/torch_parity.py checks gradient for gradient) on a synthetic batch of
B sentences x S source / T target tokens, vocabulary V, with `threads`
intra-op threads. The loss is torch's fused F.cross_entropy with label
smoothing (its eps/V spread, the fastest built-in; the formula does not
change the cost). Prints key value lines that bench-train.sh reads.

usage: bench_train.py CONFIG B S T V STEPS THREADS
"""
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    if len(sys.argv) != 8:
        print(__doc__, file=sys.stderr)
        return 2
    config, B, S, T, V, steps, threads = sys.argv[1], *map(int, sys.argv[2:])
    import torch
    import torch.nn.functional as F
    import torch_model as tm
    rss0 = rss_mb()
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    with open(config) as f:
        d = tm.dims_from_config_text(f.read(), V)
    d.max_positions = max(d.max_positions, S, T)
    model = tm.Transformer(d)
    for n, p in model.named_parameters():          # tfm's initialisation
        if p.dim() == 2 and "embed" not in n:
            torch.nn.init.xavier_uniform_(p)
        elif "embed" in n:
            torch.nn.init.normal_(p, 0.0, d.d_model ** -0.5)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, foreach=True)
    src = torch.randint(4, V, (B, S))
    tgt_in = torch.randint(4, V, (B, T))
    tgt_out = torch.randint(4, V, (B, T))
    src_len = torch.full((B,), S, dtype=torch.long)
    nparams = sum(p.numel() for p in model.parameters())
    print("torch %s: %s, %d parameters, batch %d x (%d + %d) tokens, V %d, %d threads"
          % (torch.__version__, config, nparams, B, S, T, V, torch.get_num_threads()))
    total = cpu = 0.0
    best = 1e30
    for s in range(steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        logits = model(src, src_len, tgt_in)
        loss = F.cross_entropy(logits.view(-1, V), tgt_out.view(-1), label_smoothing=d.label_smoothing,
                               reduction="sum")
        (loss / (B * T)).backward()
        opt.step()
        t, tc = time.perf_counter() - t0, time.process_time() - c0
        print("  step %d: %.3f s (cpu %.3f s), loss/token %.4f%s"
              % (s, t, tc, float(loss) / (B * T), "" if s else " (warm-up)"), flush=True)
        if s:
            total += t
            cpu += tc
            best = min(best, t)
    mean = total / steps
    print("torch_step_seconds %.4f (best %.4f, cpu %.4f)" % (mean, best, cpu / steps))
    print("torch_tokens_per_s %.1f" % (B * (S + T) / mean))
    print("torch_peak_rss_mb %.0f (after import %.0f)" % (rss_mb(), rss0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
