#!/usr/bin/env bash
# parity.sh — tfm's loss and every parameter gradient against an independent
# PyTorch model (tests/torch_model.py), post-norm and pre-norm, float32,
# dropout off: relative error <= 1e-4; and with bf16 products against torch
# running the same bf16 products: <= 4 * 2^-7 = 0.031, four bf16 rounding
# flips (tests/torch_parity.py derives it); run native and, with
# TFM_CPU_FEATURES=-avx512_bf16, emulated where the CPU has AVX512_BF16.
# Skipped, visibly, when Debian's python3-torch is not installed.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
DUMP=${TFM_BUILD:-build}/dev/dump_parity
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  skip "python3-torch (or numpy) not installed: PyTorch parity not checked (apt install python3-torch)"
  finish; exit
fi
if ! [ -x "$DUMP" ]; then fail "$DUMP not built (make tests)"; finish; exit; fi
# where the CPU has AVX512_BF16, bf16 runs both ways: the kernel, and the emulation it replaces
runs="fp32 bf16"
"$TFM" info | grep "^bf16 products:" | grep -vq emulated && runs="$runs bf16-emulated"
for run in $runs; do
  prec=${run%-emulated} mask=
  [ "$run" = bf16-emulated ] && mask=-avx512_bf16
  for norm in post pre; do
    d="$T/$norm-$run"
    mkdir -p "$d"
    expect_exit 0 "dump $norm-norm model, batch and gradients ($run)" env TFM_CPU_FEATURES="$mask" "$DUMP" "$d" "$norm" "$prec"
    [ "$run" = bf16-emulated ] && check "$norm $run: the emulation ran" contains "$OUT" "emulated"
    expect_exit 0 "torch parity, $norm-norm, $run" "$PY" tests/torch_parity.py "$d"
    echo "$OUT" | grep -v ' passed, ' >&2
    # the checkpoint loads as fairseq-named state dict: every tensor used, none missing
    check "torch parity $norm $run: all gradients compared" contains "$OUT" "gradient tensors"
  done
done
check "bf16 parity ran torch's bf16 products" contains "$OUT" "with bf16 products"
finish
