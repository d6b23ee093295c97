#!/usr/bin/env bash
# bench-kernels.sh — tfm under each BLIS kernel set, side by side in one run:
# is the default (tfm's choice, `tfm info`) as fast as the best set that
# BLIS_ARCH_TYPE can force on this CPU? (A benchmark, not a test.)
#
# For each set (the default, then each of SETS that this CPU can run), in
# ROUNDS rounds that take the sets in turn, so that all see the same load:
#   sgemm   one thread, the base model's FFN product [4096 x 512] x [512 x 2048],
#           GFLOP/s per CPU second (the core's peak whatever else runs);
#   train   base model steps (forward, backward, Adam; fp32), B sentences x
#           32 + 32 tokens, vocabulary 37,000, THREADS threads (as
#           scripts/bench-train.sh): source + target tokens per second;
#   decode  tfm translate, beam 4, a random configs/multi30k.ini model (as
#           scripts/bench-translate.sh) on Multi30k test2016.en: sentences/s.
# Best of the rounds for each, by wall clock and per CPU second (user + sys
# of the process: what another process's load does not inflate as much);
# the ratio is to the best set.
#
#   scripts/bench-kernels.sh                      # all
#   SETS="zen3 skx" ROUNDS=2 B=64 scripts/bench-kernels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SETS=${SETS:-"generic haswell zen3 skx"}
ROUNDS=${ROUNDS:-2} B=${B:-128} STEPS=${STEPS:-2} THREADS=${THREADS:-2}
DATA=${TFM_DATA:-../shared/data/multi30k}
W=${BENCH_DIR:-/tmp/tfm-bench-kernels.$$}
make -s build/tfm build/dev/bench_train build/dev/make_model >/dev/null
mkdir -p "$W"
TFM=$PWD/build/tfm

features=$(env -u BLIS_ARCH_TYPE "$TFM" info | sed -n 's/^features://p')
has() { for f in "$@"; do [[ " $features " == *" $f "* ]] || return 1; done; }
runnable=(default)
for s in $SETS; do
  case $s in
    skx) has avx512f avx512dq avx512bw avx512vl || continue ;;
    haswell | zen*) has avx2 fma || continue ;;
  esac
  runnable+=("$s")
done
env -u BLIS_ARCH_TYPE "$TFM" info | sed -n 's/^\(cpu\|features\|blis kernels\): /\1: /p'
echo "sets: ${runnable[*]}; $ROUNDS rounds; train: base, $B x (32+32), $STEPS steps after a warm-up, $THREADS threads"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

decode=0
if [ -f "$DATA/test2016.en" ]; then
  decode=1
  [ -f "$W/bpe.model" ] || "$TFM" bpe learn --vocab-size 8000 -o "$W/bpe.model" "$DATA/train.en" "$DATA/train.de" 2>/dev/null
  [ -f "$W/m.safetensors" ] || build/dev/make_model "$W/m.safetensors" configs/multi30k.ini "$W/bpe.model" 1 >/dev/null
fi

with_set() {  # with_set SET cmd...: run cmd with BLIS_ARCH_TYPE for SET (default: unset)
  local s=$1; shift
  if [ "$s" = default ]; then env -u BLIS_ARCH_TYPE "$@"; else BLIS_ARCH_TYPE=$s "$@"; fi
}

declare -A SG TR TRC DE DEC NAME
for r in $(seq 1 "$ROUNDS"); do
  for s in "${runnable[@]}"; do
    # the training step server (dev/bench_train.c): warm-up, STEPS steps, one-thread sgemm
    cmds=$( { echo step; for i in $(seq 1 "$STEPS"); do echo step; done; echo sgemm1; echo quit; } )
    out=$(with_set "$s" build/dev/bench_train configs/base.ini "$B" 32 32 37000 "$THREADS" <<< "$cmds")
    NAME[$s]=$(awk '/^ready/ { print $5 }' <<< "$out")
    tps=$(awk -v n=$((B * 64)) '/^step/ { if (++k > 1 && (best == "" || $2 < best)) best = $2 } END { printf "%.1f", n / best }' <<< "$out")
    tpc=$(awk -v n=$((B * 64)) '/^step/ { if (++k > 1 && (best == "" || $3 < best)) best = $3 } END { printf "%.1f", n / best }' <<< "$out")
    [ -z "${TRC[$s]:-}" ] || tpc=$(awk -v a="$tpc" -v b="${TRC[$s]}" 'BEGIN { print (a > b) ? a : b }')
    TRC[$s]=$tpc
    gf=$(awk '/^sgemm1/ { print $2 }' <<< "$out")
    [ -z "${TR[$s]:-}" ] || tps=$(awk -v a="$tps" -v b="${TR[$s]}" 'BEGIN { print (a > b) ? a : b }')
    [ -z "${SG[$s]:-}" ] || gf=$(awk -v a="$gf" -v b="${SG[$s]}" 'BEGIN { print (a > b) ? a : b }')
    TR[$s]=$tps SG[$s]=$gf
    if [ $decode = 1 ]; then
      line=$( { TIMEFORMAT='cpu %U %S'; time with_set "$s" "$TFM" translate -m "$W/m.safetensors" --beam 4 \
             --max-len-a 1 --max-len-b 1 --threads "$THREADS" < "$DATA/test2016.en" >/dev/null; } 2>&1 )
      sec=$(sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' <<< "$line")
      sps=$(awk -v t="$sec" 'BEGIN { printf "%.1f", 1000 / t }')
      spc=$(awk '/^cpu / { printf "%.1f", 1000 / ($2 + $3) }' <<< "$line")
      [ -z "${DE[$s]:-}" ] || sps=$(awk -v a="$sps" -v b="${DE[$s]}" 'BEGIN { print (a > b) ? a : b }')
      [ -z "${DEC[$s]:-}" ] || spc=$(awk -v a="$spc" -v b="${DEC[$s]}" 'BEGIN { print (a > b) ? a : b }')
      DE[$s]=$sps DEC[$s]=$spc
    fi
    echo "round $r, ${s} (${NAME[$s]}): sgemm ${SG[$s]} GFLOP/s/cpu-s, train ${TR[$s]} tok/s (${TRC[$s]} per cpu-s), decode ${DE[$s]:-n/a} sent/s (${DEC[$s]:-n/a} per cpu-s) (best so far)"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
best() {  # best ARRAY: the largest value over the sets
  local m=0 s v
  for s in "${runnable[@]}"; do
    eval "v=\${$1[$s]:-0}"
    m=$(awk -v a="$m" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
  done
  echo "$m"
}
bs=$(best SG) bt=$(best TR) bd=$(best DE) btc=$(best TRC) bdc=$(best DEC)
printf '%-16s %20s %20s %20s %20s %20s\n' "BLIS kernels" "sgemm GFLOP/cpu-s" "train tok/s" "train tok/cpu-s" \
  "decode sent/s" "decode sent/cpu-s"
for s in "${runnable[@]}"; do
  awk -v n="$s (${NAME[$s]})" -v g="${SG[$s]}" -v t="${TR[$s]}" -v tc="${TRC[$s]}" -v d="${DE[$s]:-0}" \
      -v dc="${DEC[$s]:-0}" -v bg="$bs" -v bt="$bt" -v btc="$btc" -v bd="$bd" -v bdc="$bdc" 'BEGIN {
    r = "%11.1f (%5.2f)"
    printf "%-16s " r " " r " " r " " r " " r "\n", n, g, g / bg, t, t / bt, tc, tc / btc, d, (bd > 0 ? d / bd : 0),
           dc, (bdc > 0 ? dc / bdc : 0) }'
done
echo "(in parentheses: the ratio to the best set of the column; per cpu-s: per CPU second of the process,"
echo " the steadier figure on a shared machine; wall-clock figures count the time other processes took)"
rm -rf "$W"
