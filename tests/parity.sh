#!/usr/bin/env bash
# parity.sh — tfm's loss and every parameter gradient against an independent
# PyTorch model (tests/torch_model.py), post-norm and pre-norm, float32,
# dropout off: relative error <= 1e-4 (see tests/torch_parity.py).
# Skipped, visibly, when Debian's python3-torch is not installed.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
DUMP=${TFM_BUILD:-build}/dev/dump_parity
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  skip "python3-torch (or numpy) not installed: PyTorch parity not checked (apt install python3-torch)"
  finish; exit
fi
if ! [ -x "$DUMP" ]; then fail "$DUMP not built (make tests)"; finish; exit; fi
for norm in post pre; do
  mkdir -p "$T/$norm"
  expect_exit 0 "dump $norm-norm model, batch and gradients" "$DUMP" "$T/$norm" "$norm"
  expect_exit 0 "torch parity, $norm-norm" "$PY" tests/torch_parity.py "$T/$norm"
  echo "$OUT" | grep -v ' passed, ' >&2
  # the checkpoint loads as fairseq-named state dict: every tensor used, none missing
  check "torch parity $norm: all gradients compared" contains "$OUT" "gradient tensors"
done
finish
