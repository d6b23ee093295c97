#!/usr/bin/env bash
# bench-train.sh — training speed of tfm against PyTorch, side by side in one
# run: timed training steps (forward, backward, Adam) of a config's model on
# one synthetic batch shape, in tfm (build/test_model --bench) and in the
# same model in PyTorch (scripts/bench_train.py, Debian's python3-torch; its
# matrix products also go to BLIS through libblas.so.3), with the same
# number of threads, plus BLIS sgemm at the model's sizes for the machine's
# practical peak. A benchmark, not a test: the figures depend on the machine
# and on what else runs on it.
#
#   scripts/bench-train.sh [CONFIG [B [S [T [V [STEPS [THREADS]]]]]]]
#   defaults: configs/base.ini, 128 sentences x 32 + 32 tokens, V 37000,
#             3 timed steps (after one warm-up step), 2 threads
#
# Prints tokens/s (source + target tokens per second) for both, their ratio,
# tfm's model FLOP utilisation (matrix-product FLOPs of a step / step time /
# sgemm GFLOP/s) and the peak resident memory of each process.
set -eu
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/base.ini} B=${2:-128} S=${3:-32} T=${4:-32} V=${5:-37000} STEPS=${6:-3} THREADS=${7:-2}
PY=/usr/bin/python3
make -s build/test_model >/dev/null
out=$(mktemp -d /tmp/bench-train.XXXXXX)
trap 'rm -rf "$out"' EXIT

echo "== tfm"
build/test_model --bench "$CONFIG" "$B" "$S" "$T" "$V" "$STEPS" "$THREADS" | tee "$out/tfm"
if "$PY" -c 'import torch' 2>/dev/null; then
  echo "== PyTorch"
  # BLIS (torch's BLAS here) reads its thread count from the environment
  OMP_NUM_THREADS=$THREADS BLIS_NUM_THREADS=$THREADS \
    "$PY" scripts/bench_train.py "$CONFIG" "$B" "$S" "$T" "$V" "$STEPS" "$THREADS" | tee "$out/torch"
else
  echo "== PyTorch: SKIPPED (python3-torch not installed)"
  : >"$out/torch"
fi

val() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }
tt=$(val tfm_tokens_per_s "$out/tfm") mfu=$(val tfm_mfu "$out/tfm") peak=$(val sgemm_gflops "$out/tfm")
gf=$(val tfm_gflops "$out/tfm") tm=$(val tfm_peak_rss_mb "$out/tfm")
pt=$(val torch_tokens_per_s "$out/torch") pm=$(val torch_peak_rss_mb "$out/torch")
echo "== summary ($CONFIG, batch $B x ($S + $T) tokens, V $V, $THREADS threads, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-28s %10s\n' "tfm tokens/s" "$tt"
printf '%-28s %10s\n' "PyTorch tokens/s" "${pt:-n/a}"
[ -n "$pt" ] && printf '%-28s %10s\n' "speed-up (target >= 1.8)" "$(awk -v a="$tt" -v b="$pt" 'BEGIN { printf "%.2fx", a / b }')"
printf '%-28s %10s\n' "tfm GFLOP/s" "$gf"
printf '%-28s %10s\n' "BLIS sgemm GFLOP/s (peak)" "$peak"
printf '%-28s %10s\n' "tfm MFU (target >= 0.80)" "$mfu"
printf '%-28s %10s\n' "tfm peak memory MB" "$tm"
printf '%-28s %10s\n' "PyTorch peak memory MB" "${pm:-n/a}"
