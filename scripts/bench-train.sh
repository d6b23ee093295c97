#!/usr/bin/env bash
# bench-train.sh — training speed of tfm against PyTorch, side by side in one
# run: timed training steps (forward, backward, Adam) of a config's model on
# one synthetic batch shape, in tfm (build/dev/bench_train) and in the
# same model in PyTorch (tests/torch_model.py, Debian's python3-torch, whose
# matrix products also go to BLIS through libblas.so.3), with the same number
# of threads, steps alternating so that both see the same machine load, plus
# tfm's fp32 product at the model's sizes for the practical peak (BLIS sgemm, or
# oneDNN's f32 matmul where tfm runs it: `tfm info`; scripts/bench_train.py).
# A benchmark, not a test: the figures depend on the machine and on what else
# runs on it.
#
#   scripts/bench-train.sh [CONFIG [B [S [T [V [STEPS [THREADS]]]]]]]
#   defaults: configs/base.ini, 128 sentences x 32 + 32 tokens, V 37000,
#             3 timed steps (after one warm-up step), 2 threads
#
# Precision column: tfm also runs each step with bf16 matrix products ([run]
# precision = bf16) and times a bf16 product at the FFN's shape; on a CPU
# without AVX512_BF16 that column is emulated (same numbers, fp32 speed).
#
# Prints tokens/s (source + target tokens per second) of both, their ratio,
# tfm's model FLOP utilisation (matrix-product FLOPs of a step / step time /
# that product's GFLOP/s) and the peak resident memory of each process.
set -eu
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/base.ini} B=${2:-128} S=${3:-32} T=${4:-32} V=${5:-37000} STEPS=${6:-3} THREADS=${7:-2}
make -s build/dev/bench_train build/dev/peaks >/dev/null
exec /usr/bin/python3 scripts/bench_train.py build/dev/bench_train "$CONFIG" "$B" "$S" "$T" "$V" "$STEPS" "$THREADS"
