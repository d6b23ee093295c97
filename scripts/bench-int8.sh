#!/usr/bin/env bash
# bench-int8.sh — int8 products at decoding shapes: tfm's fp32 decoding
# product, its int8 VNNI kernel, its scalar model and oneDNN's int8 matmul
# (Debian libdnnl-dev), side by side in one run (dev/bench_int8.c says what
# each column times). A benchmark, not a test.
#
#   bash scripts/bench-int8.sh              # one thread, best of 5
#   THREADS=2 REPS=3 bash scripts/bench-int8.sh
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build/dev/bench_int8 >/dev/null   # tfm's kernels only
BIN=build/dev/bench_int8
if [ -f /usr/include/dnnl.h ]; then       # the same, with oneDNN's column
  BIN=build/dev/bench_int8_dnnl
  make -s build/dev/bench_int8_dnnl >/dev/null
else
  echo "(no /usr/include/dnnl.h: apt install libdnnl-dev for oneDNN's column)"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); CPU flags: $(grep -m1 -ow -e avx512_vnni -e amx_int8 /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
