#!/usr/bin/env bash
# bench-shortlist.sh — the vocabulary shortlist (issue #26's second step) on a
# trained Multi30k model: quality and speed of beam-4 translation of test2016
# in fp32 and int8, with the whole vocabulary and with shortlists of a few
# (K, N) settings, side by side in one run (a benchmark, not a test).
#
# For each setting it builds the shortlist from Multi30k train (tfm shortlist:
# K lexical candidates per source token by p(t|s), N most frequent target
# tokens), then translates test2016.$SRC with beam 4 and the model's alpha and
# reports: BLEU (cased, 13a, tfm bleu = sacreBLEU) against test2016.$TGT, the
# share of lines whose 1-best is the same as fp32's with the whole vocabulary,
# the mean candidates per batch (the output layer's rows; of the vocabulary),
# sentences/s (wall, best of REPS) and CPU seconds (user + sys of the whole
# process, model load included, best of REPS: the steadier figure on a shared
# machine), and the speed ratio to fp32 with the whole vocabulary. int8 runs
# its output layer on the shortlist as int8 (TFM_SHORTLIST_OUT=int8, the
# default) and as fp32 (TFM_SHORTLIST_OUT=fp32: the candidates' fp32 rows,
# activations unquantized); its rows also give the share of lines whose
# 1-best is fp32's with the same shortlist. The mean candidates are the
# output layer's rows per sentence (its own list) and per batch (the union
# the search's columns span).
#
# Each row also gives the memory of the model's weights ("model weights in
# memory" as tfm translate logs it: fp32 = every weight matrix packed, the
# embedding and the vectors (the parameters freed); int8 = the quantized matrices and the
# float vectors, plus the fp32 output rows with TFM_SHORTLIST_OUT=fp32) and
# the resident size of the process: after loading (as tfm translate logs
# it) and at its peak (/usr/bin/time's maximum RSS: loading the fp32
# checkpoint, and the candidate rows a shortlist gathers per batch).
#
# MODEL=base: the base model's shape (configs/base.ini) with RANDOM weights,
# as scripts/bench-translate.sh times it: a joint BPE learned on Multi30k
# train asking base.ini's 37,000 tokens (Multi30k stops at about 26,350), the
# model written by build/dev/make_model, the shortlists learned by tfm
# shortlist on Multi30k train for that BPE, and every hypothesis run to
# |x| + 1 tokens (a random model never ends one early), batch 32 (base.ini's
# [decode]). Only speed and memory mean anything there: BLEU and the 1-best
# agreements of a random model are not printed.
#
#   MODEL=/tmp/m30k/run/average.safetensors bash scripts/bench-shortlist.sh
#   MODEL=... SETTINGS="50:100 20:100 10:50" REPS=3 THREADS=1 LINES=1000 bash scripts/bench-shortlist.sh
#   MODEL=base LINES=100 bash scripts/bench-shortlist.sh      (K 50 N 100, int8 output layer, by default)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${TFM_DATA:-../shared/data/multi30k}
MODEL=${MODEL:?set MODEL=path/to/average.safetensors (a model trained on Multi30k)}
SRC=${SRC:-en}
TGT=${TGT:-de}
RANDOM_BASE=0; [ "$MODEL" = base ] && RANDOM_BASE=1
if [ "$RANDOM_BASE" = 1 ]; then
  SETTINGS=${SETTINGS:-"50:100"}; INT8_OUT=${INT8_OUT:-int8}; BATCH=${BATCH:-32}; LINES=${LINES:-100}
fi
SETTINGS=${SETTINGS:-"10:50 50:100 200:1000"}
REPS=${REPS:-2}
THREADS=${THREADS:-1}
LINES=${LINES:-1000}
BATCH=${BATCH:-64}
INT8_OUT=${INT8_OUT:-"int8 fp32"}
W=${BENCH_DIR:-/tmp/tfm-bench-shortlist}
[ "$RANDOM_BASE" = 0 ] || W=${BENCH_DIR:-/tmp/tfm-bench-shortlist-base}   # its own BPE: not the trained model's lists
[ -f "$DATA/test2016.$SRC" ] || { echo "no $DATA/test2016.$SRC (scripts/get-multi30k.sh?)"; exit 1; }
make -s build/tfm build/dev/make_model >/dev/null   # not ./tfm: it may be running elsewhere
TFM=$PWD/build/tfm
mkdir -p "$W"
LEN=()   # decoding length: the model's own, or |x| + 1 for a random model
if [ "$RANDOM_BASE" = 1 ]; then
  [ -f "$W/bpe37000.model" ] || "$TFM" bpe learn --vocab-size 37000 -o "$W/bpe37000.model" "$DATA/train.$SRC" "$DATA/train.$TGT" 2>/dev/null
  [ -f "$W/base.safetensors" ] || build/dev/make_model "$W/base.safetensors" configs/base.ini "$W/bpe37000.model" 1
  MODEL=$W/base.safetensors
  LEN=(--max-len-a 1 --max-len-b 1)
fi
head -n "$LINES" "$DATA/test2016.$SRC" > "$W/src"
head -n "$LINES" "$DATA/test2016.$TGT" > "$W/ref"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); CPU flags: $(grep -m1 -ow -e avx512_vnni -e avx512_bf16 -e amx_int8 /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kernels: $("$TFM" info 2>/dev/null | grep -e '^blis kernels' -e '^int8 products' | tr '\n' ';')"
[ "$RANDOM_BASE" = 0 ] || echo "base.ini shape, random weights (the vocabulary: the candidates of the first row), outputs run to |x| + 1 tokens"
echo "model: $MODEL; $LINES lines of test2016.$SRC -> $TGT, beam 4, batch $BATCH, $THREADS thread(s), best of $REPS"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# run NAME PRECISION SHORTLIST|- [ENV=...]: translate REPS times into $W/NAME.out;
# sets WALL (best), CPU (best), CAND (mean candidates per batch, or the vocabulary),
# MEM (model weights in memory, MB), RES (the process's resident size after loading, MB)
# and RSS (its peak resident size, MB)
run() {
  local name=$1 prec=$2 sl=$3 envs=${4:-} r out s slopt=()
  [ "$sl" = - ] || slopt=(--shortlist "$sl")
  WALL=1e9 CPU=1e9
  for r in $(seq 1 "$REPS"); do
    out=$(env $envs /usr/bin/time -f "%U %S %M" -o "$W/cpu" "$TFM" translate -m "$MODEL" --beam 4 --batch-size "$BATCH" \
          --threads "$THREADS" --precision "$prec" "${LEN[@]}" "${slopt[@]}" < "$W/src" 2>&1 >"$W/$name.out")
    s=$(sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' <<< "$out" | tail -1)
    WALL=$(awk -v x="$s" -v y="$WALL" 'BEGIN { print (x < y) ? x : y }')
    CPU=$(awk -v y="$CPU" '{ x = $1 + $2; print (x < y) ? x : y }' "$W/cpu")
  done
  MEM=$(sed -n 's/.*model weights in memory \([0-9.]*\) MB.*/\1/p' <<< "$out" | head -1)
  RES=$(sed -n 's/.*process resident \([0-9.]*\) MB.*/\1/p' <<< "$out" | head -1)
  RSS=$(awk '{ printf "%.1f", $3 / 1024 }' "$W/cpu")
  CAND=$(sed -n 's/.*shortlist: \([0-9.]*\) candidates per batch.*, \([0-9.]*\) per sentence.*/\2 (\1 per batch)/p' <<< "$out" | tail -1)
  [ -n "$CAND" ] || CAND=$(sed -n 's/.*vocab \([0-9]*\)).*/\1/p' <<< "$out" | head -1)
}

row() {  # LABEL NAME [FP32_NAME: also the same 1-best as fp32 with the same shortlist]
  local bleu="n/a" same="n/a (random weights)" same2=""
  if [ "$RANDOM_BASE" = 0 ]; then
    [ -z "${3:-}" ] || same2=$(paste -d'\t' "$W/$3.out" "$W/$2.out" | awk -F'\t' '$1 == $2 { n++ } END { printf " (as fp32 with this list %.1f%%)", 100 * n / NR }')
    bleu=$("$TFM" bleu "$W/ref" < "$W/$2.out" | sed -n 's/^BLEU = \([0-9.]*\).*/\1/p')
    same=$(paste -d'\t' "$W/fp32-full.out" "$W/$2.out" | awk -F'\t' '$1 == $2 { n++ } END { printf "%.1f%%", 100 * n / NR }')
  fi
  awk -v l="$1" -v b="$bleu" -v s="$same$same2" -v c="$CAND" -v w="$WALL" -v cpu="$CPU" -v n="$LINES" -v w0="$W0" -v c0="$C0" \
      -v mem="$MEM" -v res="$RES" -v rss="$RSS" -v mem0="$M0" 'BEGIN {
    printf "%-38s | BLEU %6s | same 1-best as fp32 full %s | candidates %s | %6.1f sent/s (x%4.2f) | CPU %6.2f s (x%4.2f) | weights %s MB (x%.3f), resident after load %s MB, peak %s MB\n",
      l, b, s, c, n / w, w0 / w, cpu, c0 / cpu, mem, mem / mem0, res, rss }'
}

for s in $SETTINGS; do
  k=${s%%:*} n=${s##*:}
  [ -f "$W/sl-$k-$n.txt" ] && [ "$W/sl-$k-$n.txt" -nt "$MODEL" ] ||
    "$TFM" shortlist -q -m "$MODEL" --src "$DATA/train.$SRC" --tgt "$DATA/train.$TGT" -k "$k" -n "$n" -o "$W/sl-$k-$n.txt"
done
run fp32-full fp32 -; W0=$WALL C0=$CPU M0=$MEM; row "fp32, whole vocabulary" fp32-full
run int8-full int8 -; row "int8, whole vocabulary" int8-full
for s in $SETTINGS; do
  k=${s%%:*} n=${s##*:}
  run "fp32-$k-$n" fp32 "$W/sl-$k-$n.txt"; row "fp32, shortlist K $k N $n" "fp32-$k-$n"
  for o in $INT8_OUT; do
    run "int8-$k-$n-$o" int8 "$W/sl-$k-$n.txt" "TFM_SHORTLIST_OUT=$o"; row "int8, shortlist K $k N $n ($o out)" "int8-$k-$n-$o" "fp32-$k-$n"
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
