#!/usr/bin/env bash
# parity.sh — tfm's loss and every parameter gradient against an independent
# PyTorch model (tests/torch_model.py), post-norm and pre-norm, float32,
# dropout off: relative error <= 1e-4; and with bf16 products against torch
# running the same bf16 products: <= 4 * 2^-7 = 0.031, four bf16 rounding
# flips (tests/torch_parity.py derives it); run native and, with
# both on the CPU's bf16 unit and emulated where the CPU has AVX512_BF16.
# Skipped, visibly, when Debian's python3-torch is not installed.
source "$(dirname "$0")/lib.sh"
# The reference runs on its own BLAS whatever BLIS set tfm is tested under
# (.ci/run sets BLIS_ARCH_TYPE): Debian's numpy and torch use BLIS's
# libblas.so.3, whose 'generic' set executes AVX-512 instructions (vxorpd on
# ymm16) in dgemm, a SIGILL on a CPU without AVX-512 (AMD Zen 3).
PY="env -u BLIS_ARCH_TYPE /usr/bin/python3"
DUMP=${TFM_BUILD:-build}/dev/dump_parity
if ! [ -x /usr/bin/python3 ] || ! $PY -c 'import torch, numpy' 2>/dev/null; then
  skip "python3-torch (or numpy) not installed: PyTorch parity not checked (apt install python3-torch)"
  finish; exit
fi
if ! [ -x "$DUMP" ]; then fail "$DUMP not built (make tests)"; finish; exit; fi
# where the CPU has AVX512_BF16, bf16 runs both ways: on its bf16 unit and
# emulated. The default route is one of them (dispatch.c's bf16_rule: the unit
# on AMD and with AMX, the emulation on an Intel CPU without AMX); the other
# is forced: the emulation by masking AVX512_BF16, the unit by
# TFM_BF16_PRODUCTS=onednn (or kernel, in a build without oneDNN).
runs="fp32 bf16"
info=$("$TFM" info)
if echo "$info" | grep "^features:" | grep -qw avx512_bf16; then
  if echo "$info" | grep "^bf16 products:" | grep -q emulated; then
    if TFM_BF16_PRODUCTS=onednn "$TFM" info >/dev/null 2>&1; then runs="$runs bf16-onednn"; else runs="$runs bf16-kernel"; fi
  else
    runs="$runs bf16-emulated"
    # on AMX the default is tfm's tile kernel: oneDNN's route too
    if echo "$info" | grep "^bf16 products:" | grep -q "AMX-BF16 tile kernel" &&
       TFM_BF16_PRODUCTS=onednn "$TFM" info >/dev/null 2>&1; then runs="$runs bf16-onednn"; fi
  fi
fi
for run in $runs; do
  prec=${run%-*} mask= route=
  [ "$run" = bf16-emulated ] && mask=-avx512_bf16,-amx_bf16   # (AMX's tiles need no AVX512_BF16)
  case $run in bf16-onednn) route=onednn;; bf16-kernel) route=kernel;; esac
  for norm in post pre; do
    d="$T/$norm-$run"
    mkdir -p "$d"
    expect_exit 0 "dump $norm-norm model, batch and gradients ($run)" env TFM_CPU_FEATURES="$mask" TFM_BF16_PRODUCTS="$route" "$DUMP" "$d" "$norm" "$prec"
    case $run in
      bf16-emulated) check "$norm $run: the emulation ran" contains "$OUT" "bf16 products: emulated" ;;
      bf16-onednn) check "$norm $run: oneDNN ran" contains "$OUT" "oneDNN matmul" ;;
      bf16-kernel) check "$norm $run: the AVX512_BF16 kernel ran" contains "$OUT" "AVX512_BF16 kernel" ;;
    esac
    expect_exit 0 "torch parity, $norm-norm, $run" $PY tests/torch_parity.py "$d"
    echo "$OUT" | grep -v ' passed, ' >&2
    # the checkpoint loads as fairseq-named state dict: every tensor used, none missing
    check "torch parity $norm $run: all gradients compared" contains "$OUT" "gradient tensors"
  done
done
check "bf16 parity ran torch's bf16 products" contains "$OUT" "with bf16 products"
finish
