"""bench_ab.py — training steps of one model under several settings, side by
side in one process (build/dev/bench_train, the step server of
scripts/bench-train.sh), the settings taking turns step by step so that all
see the same machine load: the A/B that a choice between two code paths
rests on.

usage: python3 scripts/bench_ab.py BINARY CONFIG B S T V THREADS STEPS VARIANT...
  VARIANT: the server commands that set it up, ';'-separated, sent before
  each of its steps, e.g. "fp32;attn loops" "fp32;attn dnnl" (commands:
  fp32, bf16, attn auto|loops|dnnl; see dev/bench_train.c).
Prints per variant the median and mean step (wall and CPU time) and the
median time of each part of the step (src/prof.h), then each variant's
median step against the first's. One warm-up step per variant is not
counted."""
import statistics
import subprocess
import sys


def main():
    if len(sys.argv) < 10:
        print(__doc__, file=sys.stderr)
        return 2
    binary, config = sys.argv[1], sys.argv[2]
    B, S, T, V, threads, steps = sys.argv[3:9]
    variants = sys.argv[9:]
    srv = subprocess.Popen([binary, config, B, S, T, V, threads], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, bufsize=1)

    def ask(cmd):
        srv.stdin.write(cmd + "\n")
        srv.stdin.flush()
        return srv.stdout.readline().split()

    ready = srv.stdout.readline().split()
    if not ready or ready[0] != "ready":
        print("bench_train did not start", file=sys.stderr)
        return 1
    kinds = srv.stdout.readline().split(" ", 1)[1].strip().split("|")
    print("%s, %s x (%s + %s) tokens, V %s, %s threads, BLIS %s, %s" % (config, B, S, T, V, ready[3], ready[4], ready[6]))
    got = [[] for _ in variants]
    for s in range(int(steps) + 1):
        for i, v in enumerate(variants):
            for cmd in v.split(";"):
                if ask(cmd.strip())[0] != "ok":
                    print("bench_train refused %r" % cmd, file=sys.stderr)
                    return 1
            r = ask("step")
            p = [float(x) for x in srv.stdout.readline().split()[2:]]
            if s:
                got[i].append((float(r[1]), float(r[2]), p))
    ask("quit")
    srv.wait()
    base = statistics.median(w for w, _, _ in got[0])
    for i, v in enumerate(variants):
        wall = [w for w, _, _ in got[i]]
        cpu = [c for _, c, _ in got[i]]
        print("%-28s step median %.4f s (mean %.4f, cpu median %.4f) | first / this %.3fx"
              % (v, statistics.median(wall), statistics.mean(wall), statistics.median(cpu),
                 base / statistics.median(wall)))
        parts = ["%s %.4f" % (name, statistics.median(p[3 * k] for _, _, p in got[i]))
                 for k, name in enumerate(kinds) if statistics.median(p[3 * k] for _, _, p in got[i]) > 0]
        print("    " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
