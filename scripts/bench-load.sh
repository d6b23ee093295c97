#!/usr/bin/env bash
# bench-load.sh — what checking every tensor's CRC-32C costs when a model
# loads (a benchmark, not a test; issue 28's goal: at most 10% over loading
# without the checks).
#
# Makes a random model of configs/base.ini (6+6 layers, d_model 512; the BPE
# is learned on Multi30k train en+de: base.ini asks 37,000 tokens, Multi30k
# stops at about 26,350) and times checkpoint_load of it (config, tokenizer,
# model: the load of translate and eval) with and without the checks,
# alternating, from the page cache (build/dev/bench_load.c).
#
#   bash scripts/bench-load.sh          # REPS=10
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${TFM_DATA:-../shared/data/multi30k}
REPS=${REPS:-10}
W=${BENCH_DIR:-/tmp/tfm-bench-load}
[ -f "$DATA/train.en" ] || { echo "no $DATA/train.en (scripts/get-multi30k.sh?)"; exit 1; }
make -s build/tfm build/dev/make_model build/dev/bench_load >/dev/null
mkdir -p "$W"
[ -f "$W/bpe37000.model" ] || build/tfm bpe learn -q --vocab-size 37000 -o "$W/bpe37000.model" "$DATA/train.en" "$DATA/train.de"
[ -f "$W/base.safetensors" ] || build/dev/make_model "$W/base.safetensors" configs/base.ini "$W/bpe37000.model" 1
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $W/base.safetensors, $(( $(stat -c %s "$W/base.safetensors") / 1000000 )) MB"
build/dev/bench_load "$W/base.safetensors" "$REPS"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
