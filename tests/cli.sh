#!/usr/bin/env bash
# CLI rules: --help everywhere, usage errors exit 2, runtime errors exit 1,
# data on stdout and logs on stderr, config overrides and dry runs.
cd "$(dirname "$0")/.." && source tests/lib.sh

expect_exit 2 "no command" "$TFM"
expect_exit 2 "unknown command" "$TFM" frobnicate
check "unknown command message" contains "$ERR" "unknown command 'frobnicate'"
check "usage on stderr" contains "$ERR" "usage: tfm"
check "nothing on stdout" test -z "$OUT"
expect_exit 0 "--help" "$TFM" --help
check "help lists commands" contains "$OUT" "translate"
expect_exit 0 "version" "$TFM" version
check "version text" contains "$OUT" "tfm "
for c in train translate eval bleu bpe average shortlist info version help; do
  expect_exit 0 "$c --help" "$TFM" $c --help
  check "$c --help has usage" contains "$OUT" "usage: tfm $c"
  check "$c --help has an example" contains "$OUT" "example"
  expect_exit 0 "help $c" "$TFM" help $c
done
# tfm info: what runs here (dispatch.h); the CPU features tfm uses can be
# masked off (TFM_CPU_FEATURES), so every kernel choice can be forced anywhere.
expect_exit 0 "info" "$TFM" info
for k in "cpu: " "features:" "blis kernels: " "default threads: " "fp32 products: " "bf16 products: "; do
  check "info prints '$k'" contains "$OUT" "$k"
done
expect_exit 2 "info takes no argument" "$TFM" info extra
# (AMX-BF16 too: on an AMX host oneDNN's tiles need no AVX512_BF16)
TFM_CPU_FEATURES=-avx512_bf16,-amx_bf16 expect_exit 0 "info, AVX512_BF16 and AMX-BF16 masked off" "$TFM" info
check "masked: bf16 emulated" contains "$OUT" "bf16 products: emulated"
check "masked: the mask is shown" contains "$OUT" "features masked off: TFM_CPU_FEATURES=-avx512_bf16,-amx_bf16"
check "masked: avx512_bf16 not listed" bash -c '! grep "^features:" <<< "$1" | grep -q avx512_bf16' _ "$OUT"
TFM_CPU_FEATURES=-avx512f expect_exit 0 "info, AVX-512 masked off" "$TFM" info
check "no AVX-512: no avx512 feature left" bash -c '! grep "^features:" <<< "$1" | grep -q avx512' _ "$OUT"
check "no AVX-512: no skx chosen by tfm" bash -c '! grep -q "blis kernels: skx (chosen by tfm" <<< "$1"' _ "$OUT"
check "no AVX-512: fp32 products on BLIS" contains "$OUT" "fp32 products: BLIS sgemm ("
TFM_FP32_PRODUCTS=blis expect_exit 0 "info, fp32 products forced to BLIS" "$TFM" info
check "forced BLIS shown" contains "$OUT" "fp32 products: BLIS sgemm (TFM_FP32_PRODUCTS=blis)"
TFM_FP32_PRODUCTS=mkl expect_exit 1 "unknown fp32 route" "$TFM" info
check "unknown fp32 route named" contains "$ERR" "TFM_FP32_PRODUCTS=mkl: expected onednn or blis"
TFM_CPU_FEATURES=-avx expect_exit 1 "unknown feature in TFM_CPU_FEATURES" "$TFM" info
check "unknown feature named" contains "$ERR" "TFM_CPU_FEATURES=-avx: unknown feature 'avx'"
TFM_CPU_FEATURES=avx2 expect_exit 1 "TFM_CPU_FEATURES cannot add" "$TFM" info
BLIS_ARCH_TYPE=generic expect_exit 0 "info, generic kernels" "$TFM" info
check "generic: shown" contains "$OUT" "blis kernels: generic (as BLIS_ARCH_TYPE asks"
check "generic: warning on stderr" contains "$ERR" "warning: BLIS runs its portable C kernels"
BLIS_ARCH_TYPE=haswell expect_exit 0 "info, a set by name" "$TFM" info
check "haswell by name" contains "$OUT" "blis kernels: haswell (as BLIS_ARCH_TYPE asks"
check "no warning for a vector set" test -z "$ERR"
BLIS_ARCH_TYPE= expect_exit 0 "info, empty BLIS_ARCH_TYPE = unset" "$TFM" info
check "empty: not skx by accident" bash -c '! grep -q "as BLIS_ARCH_TYPE asks" <<< "$1"' _ "$OUT"
# oneDNN's cache of compiled products: tfm's size (gemm_dnnl.h), unless the
# environment sets oneDNN's own variables
expect_exit 0 "info" "$TFM" info
if grep -q "^oneDNN primitive cache" <<< "$OUT"; then
  check "primitive cache: tfm's size" contains "$OUT" "oneDNN primitive cache: 16384 shapes (tfm's default)"
  DNNL_PRIMITIVE_CACHE_CAPACITY=100 expect_exit 0 "info, DNNL_PRIMITIVE_CACHE_CAPACITY" "$TFM" info
  check "primitive cache: DNNL_ variable" contains "$OUT" "oneDNN primitive cache: 100 shapes (from"
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=7 expect_exit 0 "info, ONEDNN_PRIMITIVE_CACHE_CAPACITY" "$TFM" info
  check "primitive cache: ONEDNN_ variable" contains "$OUT" "oneDNN primitive cache: 7 shapes (from"
  if grep -q "^features:.*avx512f" <<< "$OUT"; then
    TFM_FP32_PRODUCTS=onednn expect_exit 0 "info, fp32 products forced to oneDNN" "$TFM" info
    check "forced oneDNN shown" contains "$OUT" "fp32 products: oneDNN matmul (TFM_FP32_PRODUCTS=onednn)"
  else
    TFM_FP32_PRODUCTS=onednn expect_exit 1 "fp32 products forced to oneDNN without AVX-512" "$TFM" info
    check "why named: AVX-512" contains "$ERR" "needs AVX-512"
    skip "no AVX-512 here: oneDNN's fp32 route cannot be forced"
  fi
else
  TFM_FP32_PRODUCTS=onednn expect_exit 1 "fp32 products on oneDNN in a build without it" "$TFM" info
  check "why named" contains "$ERR" "built without oneDNN"
  skip "oneDNN primitive cache: tfm is built without oneDNN"
fi

expect_exit 2 "unknown option" "$TFM" train --bogus configs/tiny.ini
check "unknown option named" contains "$ERR" "--bogus"
expect_exit 2 "train without config" "$TFM" train
expect_exit 2 "bad --threads" "$TFM" train --threads many configs/tiny.ini

# Runtime errors: exit 1 with the file named.
expect_exit 1 "missing config" "$TFM" train "$T/nope.ini"
check "missing config named" contains "$ERR" "$T/nope.ini"
printf '[model]\nd_model = 512\nheads = 8\nlayers = 6\n' > "$T/bad.ini"
expect_exit 1 "unknown key" "$TFM" train --dry-run "$T/bad.ini"
check "file:line in message" contains "$ERR" "$T/bad.ini:4:"

# Dry run: the effective config on stdout, with the parameter count.
expect_exit 0 "dry run base" "$TFM" train --dry-run configs/base.ini
check "base has 63M parameters" contains "$OUT" "parameters: 63082496"
check "effective config printed" contains "$OUT" "warmup = 4000"
expect_exit 0 "dry run with --set" "$TFM" train --dry-run configs/base.ini --set train.max_steps=100 --set model.dropout=0.3
check "--set applied" contains "$OUT" "max_steps = 100"
check "--set applied (float)" contains "$OUT" "dropout = 0.29999999999999999"
expect_exit 2 "--set unknown key (a usage error)" "$TFM" train --dry-run configs/base.ini --set model.dmodel=4
check "--set did you mean" contains "$ERR" "did you mean [model] d_model"
expect_exit 0 "big config" "$TFM" train --dry-run configs/big.ini
check "big has ~214M parameters" contains "$OUT" "(214.2M)"
expect_exit 0 "relative paths resolve against the config" "$TFM" train --dry-run configs/multi30k.ini
check "multi30k path resolved" contains "$OUT" "train_src = configs/../../shared/data/multi30k/train.en"
# every command: a misspelt option gets the closest one suggested; a single-valued option given twice is an error
for c in "train --dryrun:--dry-run" "bpe learn --vocab:--vocab-size" "bleu --forse:--force" "average --lst:--last" \
         "translate --nbset:--nbest" "eval --no-translat:--no-translate" "bpe encode --id:--ids" \
         "shortlist --sr:--src" "translate --shortlst:--shortlist"; do
  args=${c%%:*}; want=${c##*:}
  expect_exit 2 "tfm $args" "$TFM" $args
  check "tfm $args suggests $want" contains "$ERR" "(did you mean $want?)"
done
expect_exit 2 "train --threads twice" "$TFM" train --threads 1 --threads 2 configs/tiny.ini
check "repeated option named with both values" contains "$ERR" "option --threads given twice ('1' and '2')"
expect_exit 2 "bleu -i twice" "$TFM" bleu ref -i a -i b
check "bleu: repeated option named" contains "$ERR" "option -i/--input given twice"
# two spellings of one option are one option
expect_exit 2 "translate -i and --input" "$TFM" translate -m x -i a --input=b
check "two spellings: repeated option named" contains "$ERR" "option -i/--input given twice ('a' and 'b')"
expect_exit 2 "bpe encode --mdoel" "$TFM" bpe encode --mdoel x
check "the long spelling of -m suggested" contains "$ERR" "(did you mean --model?)"
finish
