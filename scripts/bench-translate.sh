#!/usr/bin/env bash
# bench-translate.sh — decoding speed of tfm translate against PyTorch, side
# by side in one run (a benchmark, not a test).
#
# Translates Multi30k test2016.en (1,000 sentences) with beam 4 and with
# greedy search, using a model of configs/multi30k.ini and one of
# configs/base.ini, in tfm and in the same incremental beam search written
# in PyTorch (scripts/bench_translate_torch.py, Debian's python3-torch, same
# threads, same batch size, same BPE ids), and reports sentences/s and
# target tokens/s (1-best output tokens, EOS excluded) and the ratio.
#
# The models have RANDOM weights (timing does not need trained ones): a
# random model never ends a hypothesis early, so every hypothesis runs to
# the maximum length, set to |x| + 1 tokens (Multi30k's German references
# have as many BPE tokens as the English sources: 14.3 vs 14.2 per line).
# Early stopping, which both implementations do, never triggers.
# The BPE models are learned on Multi30k train (en+de): 8,000 tokens for
# multi30k.ini; base.ini asks 37,000, which Multi30k stops at about 26,350.
# Each configuration runs REPS times alternating tfm and PyTorch; the best
# time of each is kept (the machine is shared: see the load averages
# printed). Agreement = share of sentences with the same 1-best text.
# Precision column: tfm also translates with --precision bf16 (bf16 matrix
# products), timed alongside, with its 1-best agreement with tfm fp32. On a
# CPU without AVX512_BF16 bf16 is emulated (the same numbers at fp32 speed):
# the line then says "emulated" and its ratio is no measure of the kernel.
# And --precision int8 (weights quantized per row at load, activations per
# row, the AVX512_VNNI kernel or its scalar model: the mode is printed),
# timed alongside, with its speed ratio to tfm fp32, its 1-best agreement
# with fp32, and the memory of the weights each precision holds ("model
# weights in memory" as tfm translate logs it: fp32 = every weight matrix
# packed, the embedding and the vectors (the parameters freed); int8 = the quantized
# matrices plus the float vectors, the fp32 parameters freed). Each line also
# gives the CPU time of each precision (user + sys of the whole process,
# best of REPS, model load included): on a shared machine, with one thread,
# the steadier measure (wall time counts the time other jobs hold the core).
#
#   bash scripts/bench-translate.sh            # all
#   THREADS="2" REPS=1 MODELS=multi30k bash scripts/bench-translate.sh
#   TORCH=0 LINES=300 MODELS=base bash scripts/bench-translate.sh
#     (no PyTorch column; the first 300 lines of test2016 only)
#   MODELS= TRAINED=runs/multi30k-en-de/seed1/average.safetensors bash scripts/bench-translate.sh
#     (also times a trained model, with its own decode settings: beam 4, alpha 0.6,
#      max length |x| + 50)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${TFM_DATA:-../shared/data/multi30k}
PY=/usr/bin/python3
THREADS=${THREADS:-"1 2"}
REPS=${REPS:-2}
MODELS=${MODELS-"multi30k base"}
W=${BENCH_DIR:-/tmp/tfm-bench-translate}
TORCH=${TORCH:-1}
LINES=${LINES:-1000}
[ -f "$DATA/test2016.en" ] || { echo "no $DATA/test2016.en (scripts/get-multi30k.sh?)"; exit 1; }
[ "$TORCH" = 0 ] || "$PY" -c 'import torch' 2>/dev/null || { echo "needs $PY with torch (apt install python3-torch), or TORCH=0"; exit 1; }
make -s build/tfm build/dev/make_model >/dev/null   # not ./tfm: it may be running elsewhere
mkdir -p "$W"
head -n "$LINES" "$DATA/test2016.en" > "$W/src.en"
SRC=$W/src.en
TFM=$PWD/build/tfm
MAKE_MODEL=$PWD/build/dev/make_model

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
[ "$TORCH" = 0 ] || echo "torch $("$PY" -c 'import torch; print(torch.__version__)'), BLAS of both: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo '?')"
echo "CPU flags: $(grep -m1 -ow -e avx512_vnni -e avx512_bf16 -e amx_int8 /proc/cpuinfo | sort -u | tr '\n' ' ')(BLIS: ${BLIS_ARCH_TYPE:-its own choice}); $LINES lines of test2016.en"
echo

model_for() {  # name -> checkpoint path (random weights)
  local name=$1 vocab cfg
  case $name in
    multi30k) vocab=8000; cfg=configs/multi30k.ini ;;
    base) vocab=37000; cfg=configs/base.ini ;;
  esac
  if ! [ -f "$W/bpe$vocab.model" ]; then
    "$TFM" bpe learn --vocab-size "$vocab" -o "$W/bpe$vocab.model" "$DATA/train.en" "$DATA/train.de" 2>/dev/null
  fi
  [ -f "$W/$name.safetensors" ] || "$MAKE_MODEL" "$W/$name.safetensors" "$cfg" "$W/bpe$vocab.model" 1
  echo "$W/$name.safetensors"
}

# run_pair LABEL MODEL BATCH THREADS BEAM ALPHA A B
run_pair() {
  local label=$1 model=$2 batch=$3 th=$4 beam=$5 alpha=$6 a=$7 b=$8
  local ids="$W/$(basename "$model" .safetensors).$LINES.src.ids"
  [ "$TORCH" = 0 ] || [ -f "$ids" ] || "$TFM" bpe encode -m "$model" --ids < "$SRC" > "$ids"
  local best_t=1e9 best_p=1e9 best_b=1e9 best_8=1e9 tok_t=0 tok_p=0 r out mem32 mem8
  local cpu_t=1e9 cpu_b=1e9 cpu_8=1e9   # CPU seconds (user + sys, whole process: model load included)
  for r in $(seq 1 "$REPS"); do
    out=$(/usr/bin/time -f "%U %S" -o "$W/cpu" "$TFM" translate -m "$model" --beam "$beam" --alpha "$alpha" --max-len-a "$a" --max-len-b "$b" \
          --batch-size "$batch" --threads "$th" < "$SRC" 2>&1 >"$W/tfm.txt")
    mem32=$(sed -n 's/.*model weights in memory \([0-9.]*\) MB.*/\1/p' <<< "$out")
    out=$(tail -1 <<< "$out")
    local s; s=$(sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' <<< "$out")
    tok_t=$(sed -n 's/.* lines, \([0-9]*\) output tokens.*/\1/p' <<< "$out")
    best_t=$(awk -v x="$s" -v y="$best_t" 'BEGIN { print (x < y) ? x : y }')
    cpu_t=$(awk -v y="$cpu_t" '{ x = $1 + $2; print (x < y) ? x : y }' "$W/cpu")
    out=$(/usr/bin/time -f "%U %S" -o "$W/cpu" "$TFM" translate -m "$model" --beam "$beam" --alpha "$alpha" --max-len-a "$a" --max-len-b "$b" \
          --batch-size "$batch" --threads "$th" --precision bf16 < "$SRC" 2>&1 >"$W/tfm16.txt" | tail -1)
    s=$(sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' <<< "$out")
    best_b=$(awk -v x="$s" -v y="$best_b" 'BEGIN { print (x < y) ? x : y }')
    cpu_b=$(awk -v y="$cpu_b" '{ x = $1 + $2; print (x < y) ? x : y }' "$W/cpu")
    out=$(/usr/bin/time -f "%U %S" -o "$W/cpu" "$TFM" translate -m "$model" --beam "$beam" --alpha "$alpha" --max-len-a "$a" --max-len-b "$b" \
          --batch-size "$batch" --threads "$th" --precision int8 < "$SRC" 2>&1 >"$W/tfm8.txt")
    mem8=$(sed -n 's/.*model weights in memory \([0-9.]*\) MB.*/\1/p' <<< "$out")
    out=$(tail -1 <<< "$out")
    s=$(sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' <<< "$out")
    best_8=$(awk -v x="$s" -v y="$best_8" 'BEGIN { print (x < y) ? x : y }')
    cpu_8=$(awk -v y="$cpu_8" '{ x = $1 + $2; print (x < y) ? x : y }' "$W/cpu")
    [ "$TORCH" = 0 ] && continue
    out=$("$PY" scripts/bench_translate_torch.py "$model" "$ids" --beam "$beam" --alpha "$alpha" --max-len-a "$a" \
          --max-len-b "$b" --batch-size "$batch" --threads "$th" --out "$W/torch.ids")
    s=$(awk '{ print $6 }' <<< "$out"); tok_p=$(awk '{ print $4 }' <<< "$out")
    best_p=$(awk -v x="$s" -v y="$best_p" 'BEGIN { print (x < y) ? x : y }')
  done
  local agree="n/a"
  if [ "$TORCH" != 0 ]; then
  # PyTorch's ids as tfm would print them: tab/newline/CR byte tokens as
  # spaces (tfm does that after detokenizing), then each byte that is not
  # valid UTF-8 as U+FFFD (as utf8proc_iterate sees it)
  "$PY" -c 'import sys
for line in open(sys.argv[1]):
    print(" ".join("36" if t in ("13", "14", "17") else t for t in line.split()))' "$W/torch.ids" |
    "$TFM" bpe decode -m "$model" --ids > "$W/torch.raw"
  agree=$("$PY" - "$W/tfm.txt" "$W/torch.raw" <<'EOF'
import sys
def sanitize(b):
    out, i = bytearray(), 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        ok = n > 0 and i + n <= len(b) and all(0x80 <= x <= 0xBF for x in b[i + 1:i + n])
        if ok and n >= 3:
            d = b[i + 1]
            ok = not ((c == 0xE0 and d < 0xA0) or (c == 0xED and d >= 0xA0) or (c == 0xF0 and d < 0x90) or (c == 0xF4 and d >= 0x90))
        if ok:
            out += b[i:i + n]; i += n
        else:
            out += "\ufffd".encode(); i += 1
    return bytes(out)
a = open(sys.argv[1], "rb").read().split(b"\n")[:-1]
b = [sanitize(x) for x in open(sys.argv[2], "rb").read().split(b"\n")[:-1]]
print("%.1f%%" % (100.0 * sum(x == y for x, y in zip(a, b)) / max(1, len(a))) if len(a) == len(b) else "n/a (%d vs %d lines)" % (len(a), len(b)))
EOF
)
  fi
  local agree16; agree16=$("$PY" -c 'import sys
a, b = open(sys.argv[1], "rb").read().split(b"\n"), open(sys.argv[2], "rb").read().split(b"\n")
print("%.1f%%" % (100.0 * sum(x == y for x, y in zip(a, b)) / max(1, len(a) - 1)))' "$W/tfm.txt" "$W/tfm16.txt")
  local agree8; agree8=$("$PY" -c 'import sys
a, b = open(sys.argv[1], "rb").read().split(b"\n"), open(sys.argv[2], "rb").read().split(b"\n")
print("%.1f%%" % (100.0 * sum(x == y for x, y in zip(a, b)) / max(1, len(a) - 1)))' "$W/tfm.txt" "$W/tfm8.txt")
  awk -v l="$label" -v th="$th" -v tt="$best_t" -v tp="$best_p" -v kt="$tok_t" -v kp="$tok_p" -v ag="$agree" \
      -v tb="$best_b" -v ag16="$agree16" -v mode="$BF16_MODE" -v t8="$best_8" -v ag8="$agree8" -v m8="$INT8_MODE" \
      -v mem32="$mem32" -v mem8="$mem8" -v n="$LINES" -v torch="$TORCH" -v ct="$cpu_t" -v cb="$cpu_b" -v c8="$cpu_8" 'BEGIN {
    printf "%-34s %2d thr | tfm %7.1f sent/s %8.0f tok/s", l, th, n / tt, kt / tt
    if (torch != 0) printf " | torch %7.1f sent/s %8.0f tok/s | x%5.2f | same 1-best %s", n / tp, kp / tp, tp / tt, ag
    printf " | tfm bf16 (%s) %7.1f sent/s x%4.2f of fp32, same 1-best as fp32 %s", mode, n / tb, tt / tb, ag16
    printf " | tfm int8 (%s) %7.1f sent/s x%4.2f of fp32, same 1-best as fp32 %s | weights fp32 %s MB, int8 %s MB (x%.3f)",
      m8, n / t8, tt / t8, ag8, mem32, mem8, mem8 / mem32
    printf " | CPU s fp32 %.1f, bf16 %.1f (x%.2f), int8 %.1f (x%.2f)\n", ct, cb, ct / cb, c8, ct / c8 }'
}

BF16_MODE=$("$TFM" info | grep -q "^bf16 translation: AVX512_BF16 kernel" && echo "AVX512_BF16" || echo "emulated")
INT8_MODE=$([ "${TFM_INT8_KERNEL:-}" != model ] && grep -qw avx512_vnni /proc/cpuinfo && echo "AVX512_VNNI" || echo "scalar model")
printf 'load average before: %s\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for name in $MODELS; do
  m=$(model_for "$name")
  batch=$(sed -n 's/^batch_size *= *\([0-9]*\).*/\1/p' "configs/$name.ini"); batch=${batch:-32}
  for th in $THREADS; do
    run_pair "$name (random) beam 4, batch $batch" "$m" "$batch" "$th" 4 0.6 1 1
    run_pair "$name (random) greedy, batch $batch" "$m" "$batch" "$th" 1 0.6 1 1
  done
done
if [ -n "${TRAINED:-}" ]; then
  for th in $THREADS; do
    run_pair "trained $(basename "$TRAINED") beam 4" "$TRAINED" 64 "$th" 4 0.6 1 50
  done
fi
printf '\nload average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
