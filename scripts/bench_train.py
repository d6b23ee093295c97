"""bench_train.py — the driver of scripts/bench-train.sh.

Times training steps (forward, backward, Adam) of a tfm config's model on a
synthetic batch of B sentences x S source / T target tokens, vocabulary V:
in tfm (build/dev/bench_train, a step server) and in PyTorch
(tests/torch_model.py: the same architecture, checked gradient for gradient
by tests/torch_parity.py; Adam with foreach; torch's fused cross_entropy with
label smoothing), with the same number of threads. The steps alternate, one
tfm step then one torch step, so that both see the same load on a shared
machine; after each tfm step tfm also times one fp32 product at the FFN's
shape as its step runs them (BLIS sgemm, or oneDNN's f32 matmul where `tfm
info` says so), the practical peak that the model FLOP utilisation is
relative to, and BLIS sgemm at the same shape, the bar issue #25 names (the
same product where tfm's fp32 runs on BLIS; the CPU-time figure below
stays BLIS's one-thread sgemm).
Step 0 of each is a warm-up and not counted.

Precision: each round also runs one tfm step with bf16 matrix products
([run] precision = bf16) and one bf16 product at the FFN's shape (its peak).
On a CPU without AVX512_BF16 those are emulated (rounding, then the same
fp32 sgemm): the same numbers, no speed-up, and the bf16 column says so.

On a machine shared with other work the wall-clock figures move with the
load (printed with the summary); the CPU-time MFU does not: matrix FLOPs per
CPU second of tfm's step over the FLOPs per CPU second of a one-thread sgemm
(the peak of one core), i.e. how much of the processor time tfm gets it
turns into useful products.

Breakdown: each tfm step also reports where its time went (src/prof.h):
products by layer type, attention core, softmax + loss, norms/residuals/
dropout, embeddings, gradient norm + clipping, Adam, bf16 rounding, the
rest, the thread-seconds the threads waited inside the products, and of
the products' time the part spent converting bf16 operands. Each
kind is rated against its own limit, from build/dev/peaks run first on the
same threads: products against the instruction peak of the unit that ran
them (VFMADD231PS for fp32, VDPBF16PS for native bf16), memory-bound kinds
against the measured copy bandwidth (their bytes are the least they must
read and write). The peaks are per CPU second of each thread; the step
times are wall clock, so on a loaded machine the rates fall below them.
TORCH=0 in the environment skips PyTorch (a faster run); TORCH_BF16=0 skips
its bf16 step (torch.autocast on the CPU, each round after its fp32 step).

usage: bench_train.py BINARY CONFIG B S T V STEPS THREADS
"""
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) != 9:
        print(__doc__, file=sys.stderr)
        return 2
    binary, config = sys.argv[1], sys.argv[2]
    B, S, T, V, steps, threads = map(int, sys.argv[3:])
    # BLIS (tfm's, and torch's BLAS on Debian) reads its thread count from the
    # environment once; set it before torch loads it
    os.environ["OMP_NUM_THREADS"] = os.environ["BLIS_NUM_THREADS"] = str(threads)
    tfm = subprocess.Popen([binary, config, str(B), str(S), str(T), str(V), str(threads)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def ask(cmd):
        tfm.stdin.write(cmd + "\n")
        tfm.stdin.flush()
        return tfm.stdout.readline().split()

    profs = {"fp32": [], "bf16": []}

    def ask_step(precision, count):
        r = ask("step")
        p = tfm.stdout.readline().split()
        if count:
            profs[precision].append((float(r[1]), [float(x) for x in p[2:]]))
        return r

    ready = tfm.stdout.readline().split()
    if not ready or ready[0] != "ready":
        print("tfm bench server did not start", file=sys.stderr)
        return 1
    kinds = tfm.stdout.readline().split(" ", 1)[1].strip().split("|")
    unit_peaks = read_peaks(os.path.join(os.path.dirname(binary), "peaks"), threads)
    if unit_peaks:
        print("peaks (build/dev/peaks, per CPU second, %d threads): fp32 FMA %.0f GFLOP/s, VDPBF16PS %s, AMX-BF16 %s, "
              "copy bandwidth %.1f GB/s" % (threads, unit_peaks["fp32-fma"],
                                            "%.0f" % unit_peaks["bf16-dp"] if "bf16-dp" in unit_peaks else "absent",
                                            "%.0f" % unit_peaks["amx-bf16"] if "amx-bf16" in unit_peaks else "absent",
                                            unit_peaks["mem-copy"]))
    nparams, flops, bf16_mode = int(ready[1]), float(ready[2]), ready[6]
    print("tfm: %d parameters, %.1f GFLOP of matrix products per step, %s threads, BLIS kernels %s, %s"
          % (nparams, flops / 1e9, ready[3], ready[4], bf16_mode))

    # The same BLIS kernel set for torch's BLAS as tfm chose (src/util.c:
    # BLIS's own detection falls back to AVX2 kernels on some AVX-512 VMs);
    # torch's BLIS reads the variable when it initialises, at its first sgemm.
    os.environ["BLIS_ARCH_TYPE"] = ready[5]   # BLIS 0.9 wants the number
    torch_step = None
    try:
        if os.environ.get("TORCH", "1") == "0":
            raise ImportError("TORCH=0")
        import torch
        import torch.nn.functional as F
        sys.path.insert(0, os.path.join(HERE, "..", "tests"))
        import torch_model as tm
    except ImportError:
        torch = None
        print("PyTorch: SKIPPED (TORCH=0, or python3-torch not installed)")
    if torch is not None:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        torch.set_num_threads(threads)
        torch.manual_seed(1)
        with open(config) as f:
            d = tm.dims_from_config_text(f.read(), V)
        d.max_positions = max(d.max_positions, S, T)
        model = tm.Transformer(d)
        for n, p in model.named_parameters():      # tfm's initialisation
            if "embed" in n:
                torch.nn.init.normal_(p, 0.0, d.d_model ** -0.5)
            elif p.dim() == 2:
                torch.nn.init.xavier_uniform_(p)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, foreach=True)
        src, tgt_in, tgt_out = (torch.randint(4, V, (B, n)) for n in (S, T, T))
        src_len = torch.full((B,), S, dtype=torch.long)
        print("torch %s: %d parameters, %d threads" % (torch.__version__, sum(p.numel() for p in model.parameters()),
                                                       torch.get_num_threads()))

        def torch_step(bf16=False):
            """One step; bf16: under torch.autocast("cpu", torch.bfloat16), PyTorch's
            own mixed precision (its matmuls in bf16 through oneDNN: AMX where the CPU has it)."""
            t0, c0 = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(src, src_len, tgt_in)
                loss = F.cross_entropy(logits.view(-1, V).float(), tgt_out.view(-1),
                                       label_smoothing=d.label_smoothing, reduction="sum")
            (loss / (B * T)).backward()
            opt.step()
            return time.perf_counter() - t0, time.process_time() - c0, float(loss) / (B * T)

    tt, pt, mfu, peaks, cmfu, peaks1, tc, pc = [], [], [], [], [], [], [], []
    bt, bpeaks, bmfu, pbt = [], [], [], []
    blas, mfu_blis = [], []   # BLIS sgemm at the same shape, and the step against it (issue #25's words)
    torch_bf16 = torch_step is not None and os.environ.get("TORCH_BF16", "1") != "0"
    for s in range(steps + 1):
        r = ask_step("fp32", s > 0)
        t, cpu, loss = float(r[1]), float(r[2]), float(r[3])
        peak = float(ask("sgemm")[1])
        peak1 = float(ask("sgemm1")[1])
        blis = float(ask("blis")[1])
        ask("bf16")
        r = ask_step("bf16", s > 0)
        ask("fp32")
        tb, lossb = float(r[1]), float(r[3])
        bpeak = float(ask("bgemm")[1])
        line = "step %d%s: tfm %.3f s (cpu %.3f s, loss %.3f), sgemm %.1f GFLOP/s (1 thread %.1f per cpu s); " \
               "tfm bf16 %.3f s (loss %.3f), bf16 product %.1f GFLOP/s" % (
                   s, " (warm-up)" if s == 0 else "", t, cpu, loss, peak, peak1, tb, lossb, bpeak)
        if torch_step:
            t2, cpu2, loss2 = torch_step()
            line += "; torch %.3f s (cpu %.3f s, loss %.3f); torch/tfm %.2f" % (t2, cpu2, loss2, t2 / t)
            if torch_bf16:
                t3, _, loss3 = torch_step(bf16=True)
                line += "; torch bf16 autocast %.3f s (loss %.3f)" % (t3, loss3)
        print(line, flush=True)
        if s:
            bt.append(tb)
            bpeaks.append(bpeak)
            bmfu.append(flops / tb / 1e9 / bpeak)
            tt.append(t)
            tc.append(cpu)
            mfu.append(flops / t / 1e9 / peak)
            peaks.append(peak)
            cmfu.append(flops / cpu / 1e9 / peak1)
            peaks1.append(peak1)
            blas.append(blis)
            mfu_blis.append(flops / t / 1e9 / blis)
            if torch_step:
                pt.append(t2)
                pc.append(cpu2)
                if torch_bf16:
                    pbt.append(t3)
    tfm_rss = float(ask("quit")[1])
    tfm.wait()

    tokens = B * (S + T)
    print("== summary: %s, batch %d x (%d + %d) tokens, V %d, %d threads, %d cores, load %s"
          % (config, B, S, T, V, threads, os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("%-36s %10.1f   (mean step %.3f s, best %.3f s)" % ("tfm tokens/s", tokens / statistics.mean(tt),
                                                              statistics.mean(tt), min(tt)))
    if pt:
        print("%-36s %10.1f   (mean step %.3f s, best %.3f s)" % ("PyTorch tokens/s", tokens / statistics.mean(pt),
                                                                  statistics.mean(pt), min(pt)))
        ratios = [b / a for a, b in zip(tt, pt)]
        print("%-36s %9.2fx   (ratio of mean step times; per step pair: median %.2fx, range %.2f-%.2f)"
              % ("speed-up over PyTorch (target 1.8)", statistics.mean(pt) / statistics.mean(tt),
                 statistics.median(ratios), min(ratios), max(ratios)))
    if pt:
        print("%-36s %9.2fx   (CPU seconds per step: tfm %.1f, torch %.1f; spinning threads count too)"
              % ("CPU time, torch / tfm", statistics.mean(pc) / statistics.mean(tc), statistics.mean(tc),
                 statistics.mean(pc)))
    print("%-36s %10.1f   (mean step %.3f s; %s)" % ("tfm bf16 tokens/s", tokens / statistics.mean(bt),
                                                      statistics.mean(bt), bf16_mode))
    if pbt:
        print("%-36s %10.1f   (mean step %.3f s; torch.autocast bf16)" % ("PyTorch bf16 autocast tokens/s",
                                                                          tokens / statistics.mean(pbt), statistics.mean(pbt)))
        print("%-36s %9.2fx   (ratio of mean step times)" % ("tfm bf16 / PyTorch bf16 (AMX goal 4)",
                                                              statistics.mean(pbt) / statistics.mean(bt)))
    print("%-36s %9.2fx   (ratio of mean step times%s)" % ("tfm bf16 / tfm fp32 (goal 1.5)", statistics.mean(tt) / statistics.mean(bt),
          "" if bf16_mode != "bf16-emulated" else "; EMULATED here: no speed-up expected"))
    print("%-36s %10.1f   (median; fp32 sgemm %.1f)" % ("bf16 product GFLOP/s", statistics.median(bpeaks),
                                                        statistics.median(peaks)))
    print("%-36s %10.2f   (median over steps of bf16 step GFLOP/s / bf16 product GFLOP/s)"
          % ("tfm bf16 MFU", statistics.median(bmfu)))
    print("%-36s %10.1f" % ("tfm GFLOP/s (mean step)", flops / statistics.mean(tt) / 1e9))
    print("%-36s %10.1f   (median of the sgemm run after each step; best %.1f)"
          % ("fp32 product GFLOP/s", statistics.median(peaks), max(peaks)))
    print("%-36s %10.2f   (median over steps of step GFLOP/s / that step's sgemm GFLOP/s; best-step / best-sgemm %.2f)"
          % ("tfm MFU (target 0.80)", statistics.median(mfu), flops / min(tt) / 1e9 / max(peaks)))
    print("%-36s %10.2f   (median over steps of step GFLOP/s / BLIS sgemm's %.1f at that shape, run after each step)"
          % ("tfm MFU against BLIS sgemm", statistics.median(mfu_blis), statistics.median(blas)))
    print("%-36s %10.2f   (median over steps of matrix GFLOP per cpu second / one-thread sgemm's, %.1f)"
          % ("tfm MFU by CPU time", statistics.median(cmfu), statistics.median(peaks1)))
    print("%-36s %10.0f" % ("tfm peak memory MB (process RSS)", tfm_rss))
    for precision in ("fp32", "bf16"):
        breakdown(precision, kinds, profs[precision], unit_peaks, bf16_mode, threads)
    if torch is not None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print("%-36s %10.0f   (%.0f MB of it is python + torch before the model)"
              % ("PyTorch peak memory MB (process RSS)", rss, rss0))
    return 0


def read_peaks(path, threads):
    """{unit: all-threads rate} from build/dev/peaks (GFLOP/s, GOP/s, GB/s)."""
    try:
        out = subprocess.run([path, str(threads)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print("peaks: not measured (%s)" % e)
        return None
    peaks = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 3 and not line.startswith("#"):
            try:
                peaks[f[0]] = float(f[2])
            except ValueError:
                pass
    return peaks


UNIT_NAMES = {"fp32-fma": "FMA", "bf16-dp": "VDPBF16PS", "amx-bf16": "AMX-BF16"}
PRODUCT_KINDS = ("attention projections", "feed-forward products", "output layer products")
# bf16 attention products run on VDPBF16PS on the oneDNN route only (ops.c: on
# the kernel route they are fp32 products of rounded copies)
ATTENTION_KINDS = ("attention core",)


def breakdown(precision, kinds, steps, peaks, bf16_mode, threads):
    native = bf16_mode != "bf16-emulated"
    """Mean time per kind over the timed steps, its share of the step and its
    rate against its limit."""
    if not steps:
        return
    n, K = len(steps), len(kinds)
    wall = statistics.mean(w for w, _ in steps)
    mean = [[statistics.mean(p[3 * k + j] for _, p in steps) for j in range(3)] for k in range(K)]
    prod_wall = statistics.mean(p[3 * K] for _, p in steps)
    prod_busy = statistics.mean(p[3 * K + 1] for _, p in steps)
    nt = int(steps[0][1][3 * K + 2]) or threads
    prod_convert = statistics.mean(p[3 * K + 3] for _, p in steps)
    print("== where a %s step goes (mean of %d steps, %.3f s; wall clock)" % (precision, n, wall))
    print("   %-28s %8s %6s %12s %s" % ("", "s", "share", "rate", "against its limit"))
    known = 0.0
    for k, name in enumerate(kinds):
        sec, flops, nbytes = mean[k]
        known += sec
        if sec <= 0:
            continue
        rate, limit = "", ""
        if flops > 0:
            g = flops / sec / 1e9
            tiles = bf16_mode in ("bf16-onednn", "bf16-amx")   # the attention core: oneDNN's batches on both
            bf16_unit = native and name in PRODUCT_KINDS or tiles and name in ATTENTION_KINDS
            unit = "bf16-dp" if precision == "bf16" and bf16_unit else "fp32-fma"
            if unit == "bf16-dp" and tiles and peaks and "amx-bf16" in peaks:
                unit = "amx-bf16"   # tfm's kernel, or oneDNN, runs the products on the tiles where the CPU has them
            rate = "%7.1f GFLOP/s" % g
            if peaks and unit in peaks:
                limit = "%.2f of %s %.0f" % (g / peaks[unit], UNIT_NAMES[unit], peaks[unit])
        elif nbytes > 0:
            g = nbytes / sec / 1e9
            rate = "%7.1f GB/s" % g
            if peaks and "mem-copy" in peaks:
                limit = "%.2f of copy bandwidth %.1f" % (g / peaks["mem-copy"], peaks["mem-copy"])
        print("   %-28s %8.3f %5.1f%% %14s %s" % (name, sec, 100 * sec / wall, rate, limit))
    other = wall - known
    print("   %-28s %8.3f %5.1f%%    (zeroing gradients, row gathers, final layer norms, serial code)"
          % ("the rest", other, 100 * other / wall))
    waiting = nt * prod_wall - prod_busy
    print("   %-28s %8.3f %5.1f%%    (thread-seconds idle inside the products / %d threads; of their %.3f s)"
          % ("threads waiting", waiting / nt, 100 * waiting / nt / wall, nt, prod_wall))
    if prod_convert > 0:
        print("   %-28s %8.3f %5.1f%%    (thread-seconds converting operands to bf16 inside the products / %d"
              " threads: part of their rows above)" % ("bf16 operand conversions", prod_convert / nt,
                                                       100 * prod_convert / nt / wall, nt))


if __name__ == "__main__":
    sys.exit(main())
