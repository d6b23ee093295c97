"""bench_ab.py — training steps of one model under several settings, side by
side in one process (build/dev/bench_train, the step server of
scripts/bench-train.sh), the settings taking turns step by step so that all
see the same machine load: the A/B that a choice between two code paths
rests on.

usage: python3 scripts/bench_ab.py BINARY CONFIG B S T V THREADS STEPS VARIANT...
  VARIANT: the server commands that set it up, ';'-separated, sent before
  each of its steps, e.g. "fp32;attn loops" "fp32;attn dnnl" (commands:
  fp32, bf16, attn auto|loops|dnnl, route R, recompute 0|1; see
  dev/bench_train.c). A variant
  "@PATH;COMMANDS" runs on a server of its own, the step server at PATH
  (another build's build/dev/bench_train): two builds side by side, e.g.
  "fp32" "@/tmp/old/build/dev/bench_train;fp32". With two servers or more
  each runs with OMP_WAIT_POLICY=passive (unless the environment sets it):
  an idle server's threads would otherwise spin for the next step, taking
  the CPUs from the other's (tiny.ini's 4 ms steps took 130 ms), and slows
  steps that make many parallel regions (oneDNN's bf16 base step 2.7 -> 4.5 s
  on AMD Zen 5, 2026-12-03): two builds compare fairly in single-server runs
  taking turns. A setting a variant makes stays for the variants after it
  ("bf16" after "bf16;route emulated" runs emulated): give each variant its
  route. A route change re-plans the activations (the twins come and go), and
  their first touch lands in the next timed step: routes that take turns in
  one server ran the emulated one at 0.89x fp32 there, 0.97-0.99x in a
  server of its own; compare routes in separate runs (TFM_BF16_PRODUCTS).
Prints per variant the median and mean step (wall and CPU time) and the
median time of each part of the step (src/prof.h), then each variant's
median step against the first's. One warm-up step per variant is not
counted."""
import os
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
    servers = {}   # binary -> (process, kinds)

    def ask(srv, cmd):
        srv.stdin.write(cmd + "\n")
        srv.stdin.flush()
        return srv.stdout.readline().split()

    def server(path):
        if path not in servers:
            srv = subprocess.Popen([path, config, B, S, T, V, threads], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, bufsize=1)
            ready = srv.stdout.readline().split()
            if not ready or ready[0] != "ready":
                raise SystemExit("%s did not start" % path)
            kinds = srv.stdout.readline().split(" ", 1)[1].strip().split("|")
            print("%s: %s, %s x (%s + %s) tokens, V %s, %s threads, BLIS %s, %s"
                  % (path, config, B, S, T, V, ready[3], ready[4], ready[6]))
            servers[path] = (srv, kinds)
        return servers[path]

    split = [[c.strip() for c in v.split(";")] for v in variants]
    paths = [c.pop(0)[1:] if c[0].startswith("@") else binary for c in split]
    if len(set(paths)) > 1 and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "passive"
        print("%d builds side by side: OMP_WAIT_POLICY=passive" % len(set(paths)))
    plan = [(server(p), c) for p, c in zip(paths, split)]   # per variant: its server and its commands
    kinds = plan[0][0][1]
    if any(k != kinds for (_, k), _ in plan):
        print("the builds' breakdowns name different kinds", file=sys.stderr)
        return 1
    got = [[] for _ in variants]
    for s in range(int(steps) + 1):
        for i, ((srv, _), cmds) in enumerate(plan):
            for cmd in cmds:
                if ask(srv, cmd)[0] != "ok":
                    print("bench_train refused %r" % cmd, file=sys.stderr)
                    return 1
            r = ask(srv, "step")
            p = [float(x) for x in srv.stdout.readline().split()[2:]]
            if s:
                got[i].append((float(r[1]), float(r[2]), p))
    for srv, _ in servers.values():
        ask(srv, "quit")
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
