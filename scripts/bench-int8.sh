#!/usr/bin/env bash
# bench-int8.sh — tfm's int8 kernels against each other and against fp32,
# side by side in one run (a benchmark, not a test):
#
# 1. products at decoding shapes (dev/bench_int8.c says what each column
#    times): tfm's fp32 decoding product, its AVX512_VNNI kernel, oneDNN's
#    int8 matmul under tfm's quantization and epilogue, tfm's AMX kernel
#    (where the CPU has AMX-INT8), the scalar model;
#    M = 4, 32, 256 rows; the layers of the 3+3 x 256 Multi30k model
#    (configs/multi30k.ini until 2026-11-27) and of base.ini.
# 2. end to end: `tfm translate` of the first LINES lines of Multi30k
#    test2016.en, beam 4 (alpha 0.6, each hypothesis runs to |x| + 1 tokens:
#    random weights, as scripts/bench-translate.sh), the config's decode
#    batch, in fp32 and in int8 with each int8 kernel this CPU runs
#    (TFM_INT8_KERNEL=vnni, onednn, amx) and with tfm's default choice
#    (TFM_INT8_KERNEL unset: "default"), taking turns within each of REPS
#    rounds; best wall-clock sentences/s and best CPU seconds (user + sys,
#    model load included) of each. The int8 kernels must translate
#    byte for byte alike (the script fails otherwise).
#
#   bash scripts/bench-int8.sh                     # both, one thread
#   THREADS=2 REPS=3 bash scripts/bench-int8.sh
#   E2E=0 bash scripts/bench-int8.sh               # products only
#   PRODUCTS=0 MODELS=base LINES=100 bash scripts/bench-int8.sh
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${THREADS:-1}
REPS=${REPS:-3}
E2E=${E2E:-1}
PRODUCTS=${PRODUCTS:-1}
MODELS=${MODELS-"multi30k base"}
LINES=${LINES:-}
DATA=${TFM_DATA:-../shared/data/multi30k}
W=${BENCH_DIR:-/tmp/tfm-bench-int8}
make -s build/tfm build/dev/bench_int8 build/dev/make_model >/dev/null   # not ./tfm: it may be running elsewhere
TFM=$PWD/build/tfm
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); CPU flags: $(grep -m1 -ow -e avx512_vnni -e amx_int8 /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$TFM" info | grep -E '^(blis kernels|int8 products|oneDNN int8 matmul):'
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$PRODUCTS" = 1 ]; then
  THREADS=$THREADS REPS=$REPS build/dev/bench_int8
fi
if [ "$E2E" = 1 ]; then
  [ -f "$DATA/test2016.en" ] || { echo "no $DATA/test2016.en (scripts/get-multi30k.sh?)"; exit 1; }
  mkdir -p "$W"
  kernels=""
  for k in vnni onednn amx; do   # each this CPU runs (amx: tfm's own tiles, never the default)
    TFM_INT8_KERNEL=$k "$TFM" info >/dev/null 2>&1 && kernels="$kernels $k"
  done
  [ -n "$kernels" ] || kernels=model
  kernels="default$kernels"   # default: TFM_INT8_KERNEL unset (by rows on an AMX CPU: dispatch.h)
  echo
  echo "end to end: tfm translate, beam 4, $THREADS thread(s), best of $REPS; int8 kernels: $kernels"
  for name in $MODELS; do
    case $name in
      multi30k) vocab=8000; lines=${LINES:-1000} ;;
      base) vocab=37000; lines=${LINES:-100} ;;   # Multi30k's BPE stops at ~26,350 tokens
      *) echo "unknown model $name"; exit 2 ;;
    esac
    [ -f "$W/bpe$vocab.model" ] || "$TFM" bpe learn --vocab-size "$vocab" -o "$W/bpe$vocab.model" "$DATA/train.en" "$DATA/train.de" 2>/dev/null
    [ -f "$W/$name.safetensors" ] || build/dev/make_model "$W/$name.safetensors" "configs/$name.ini" "$W/bpe$vocab.model" 1
    head -n "$lines" "$DATA/test2016.en" > "$W/src.$name"
    batch=$(sed -n 's/^batch_size *= *\([0-9]*\).*/\1/p' "configs/$name.ini"); batch=${batch:-32}
    declare -A wall=() cpu=()
    for r in $(seq 1 "$REPS"); do
      for k in fp32 $kernels; do
        if [ "$k" = fp32 ]; then prec=fp32; env=(); elif [ "$k" = default ]; then prec=int8; env=(); else prec=int8; env=(TFM_INT8_KERNEL="$k"); fi
        log=$(env "${env[@]}" /usr/bin/time -f "%U %S" -o "$W/cpu" "$TFM" translate -m "$W/$name.safetensors" --beam 4 \
              --alpha 0.6 --max-len-a 1 --max-len-b 1 --batch-size "$batch" --threads "$THREADS" --precision $prec \
              < "$W/src.$name" 2>&1 > "$W/out.$name.$k")
        s=$(tail -1 <<< "$log" | sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p')
        c=$(awk '{ print $1 + $2 }' "$W/cpu")
        wall[$k]=$(awk -v x="$s" -v y="${wall[$k]:-1e9}" 'BEGIN { print (x < y) ? x : y }')
        cpu[$k]=$(awk -v x="$c" -v y="${cpu[$k]:-1e9}" 'BEGIN { print (x < y) ? x : y }')
      done
    done
    first=""
    for k in $kernels; do
      [ -z "$first" ] && first=$k && continue
      cmp -s "$W/out.$name.$first" "$W/out.$name.$k" || { echo "FAIL: int8 kernels $first and $k translate differently"; exit 1; }
    done
    printf '%-9s %4d lines, batch %2d | fp32 %6.1f sent/s (CPU %5.2f s)' "$name" "$lines" "$batch" \
      "$(awk -v n="$lines" -v t="${wall[fp32]}" 'BEGIN { print n / t }')" "${cpu[fp32]}"
    for k in $kernels; do
      printf ' | int8 %s %6.1f sent/s (CPU %5.2f s): x%.2f fp32 wall, x%.2f CPU' "$k" \
        "$(awk -v n="$lines" -v t="${wall[$k]}" 'BEGIN { print n / t }')" "${cpu[$k]}" \
        "$(awk -v a="${wall[fp32]}" -v b="${wall[$k]}" 'BEGIN { print a / b }')" \
        "$(awk -v a="${cpu[fp32]}" -v b="${cpu[$k]}" 'BEGIN { print a / b }')"
    done
    if [[ " $kernels " == *" vnni "* && " $kernels " == *" onednn "* ]]; then
      printf ' | onednn/vnni x%.2f wall, x%.2f CPU' "$(awk -v a="${wall[vnni]}" -v b="${wall[onednn]}" 'BEGIN { print a / b }')" \
        "$(awk -v a="${cpu[vnni]}" -v b="${cpu[onednn]}" 'BEGIN { print a / b }')"
    fi
    printf ' | int8 kernels: same output\n'
    unset wall cpu
  done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
