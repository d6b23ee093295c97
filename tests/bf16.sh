#!/usr/bin/env bash
# bf16.sh — every route of the bf16 products (src/dispatch.h, bf16_route)
# on this host, forced with TFM_BF16_PRODUCTS: the product tests
# (test_bf16) and the model's bf16 gradient checks (test_model) pass on
# each; `tfm info` names the route; a route that cannot run here, or a
# misspelt one, is an error with the reason. "kernel" needs AVX512_BF16
# (else a visible SKIP), "onednn" a build with oneDNN on a CPU with AVX-512
# (make DNNL=0, or AVX2 only: SKIP),
# "amx" AMX-BF16 tiles (tfm's own tile kernel, forced only: SKIP without them).
. "$(dirname "$0")/lib.sh"
B=${TFM_BUILD:-$PWD/build}
expect_exit 0 "tfm info" "$TFM" info
native=0; contains "$OUT" "avx512_bf16" && ! contains "$OUT" "masked off" && native=1
for route in emulated kernel onednn amx; do
  if [ "$route" = amx ] && ! TFM_BF16_PRODUCTS=amx "$TFM" info >/dev/null 2>&1; then
    TFM_BF16_PRODUCTS=amx expect_exit 1 "amx route without AMX-BF16 tiles" "$TFM" info
    check "amx route refused with the reason" contains "$ERR" "this CPU lacks AMX-BF16 tiles"
    skip "no AMX-BF16 tiles here: tfm's AMX route cannot run (its loops run in test_bf16 and test_model on the tiles' model)"
    continue
  fi
  if [ "$route" = kernel ] && [ $native = 0 ]; then
    TFM_BF16_PRODUCTS=kernel expect_exit 1 "kernel route without AVX512_BF16" "$TFM" info
    check "kernel route refused with the reason" contains "$ERR" "this CPU lacks AVX512_BF16"
    skip "no AVX512_BF16 here: the kernel route cannot run (its loops run in test_bf16 through the model of VDPBF16PS)"
    continue
  fi
  if [ "$route" = onednn ] && ! TFM_BF16_PRODUCTS=onednn "$TFM" info >/dev/null 2>&1; then
    TFM_BF16_PRODUCTS=onednn expect_exit 1 "onednn route without oneDNN's bf16 matmul" "$TFM" info
    check "onednn route refused with the reason" eval 'contains "$ERR" "built without oneDNN" || contains "$ERR" "needs AVX-512"'
    skip "no oneDNN bf16 matmul here (built without oneDNN, or no AVX-512): the oneDNN route cannot run"
    continue
  fi
  TFM_BF16_PRODUCTS=$route expect_exit 0 "tfm info, route $route" "$TFM" info
  case $route in
    emulated) want="emulated";; kernel) want="AVX512_BF16 kernel";; onednn) want="oneDNN matmul";;
    amx) want="tfm's AMX-BF16 tile kernel";;
  esac
  check "route $route shown by tfm info" contains "$OUT" "bf16 products: $want"
  TFM_BF16_PRODUCTS=$route expect_exit 0 "test_bf16 on route $route" "$B/test_bf16"
  check "test_bf16 ran on route $route" contains "$OUT" "bf16 products: $want"
  TFM_BF16_PRODUCTS=$route expect_exit 0 "test_model (bf16 gradient checks) on route $route" "$B/test_model"
done
# dev/bench_amx: its table of a step's twelve products on gemm_amx.c against oneDNN (on the tiles' model
# at a small size without AMX: a check of the harness)
BENCH_AMX_MODEL=1 expect_exit 0 "bench_amx: the twelve products" "$B/dev/bench_amx" 2 1
check "bench_amx: no check WRONG" test "$(grep -c WRONG <<< "$OUT")" = 0
if contains "$OUT" "no oneDNN bf16 matmul here"; then
  check "bench_amx: the twelve products ran" contains "$OUT" "the twelve, one of each: tfm's AMX kernel"
else
  check "bench_amx: the twelve products agree with oneDNN's" contains "$OUT" "against oneDNN: ok"
fi
TFM_BF16_PRODUCTS=bogus expect_exit 1 "misspelt route" "$TFM" info
check "misspelt route named" contains "$ERR" "TFM_BF16_PRODUCTS=bogus: expected onednn"
finish
