#!/usr/bin/env bash
# bench-bpe.sh — tfm bpe against sentencepiece's BPE (Debian's spm_train
# --model_type=bpe), side by side in one run, at the same vocabulary size:
#
#   1. learning time on Multi30k train en+de (58K lines), and on a corpus of
#      BIG_LINES (default 2M) lines built here from Multi30k en/de/fr: lines
#      drawn at random, 8% of words glued to the next one (compounds), 4% with
#      two letters swapped, so it has ~300K distinct words like a real corpus;
#   2. encoding throughput, tokens/s on one core (stdin -> ids on stdout);
#   3. compression: tokens per sentence on held-out text (Multi30k test2016
#      en+de) and on training text.
#
# Fair comparison: spm_train reads every line (--input_sentence_size=0, no
# sampling), uses tfm's character coverage (0.9999), byte fallback and tfm's
# special ids (pad 0, unk 1, bos 2, eos 3), so both vocabularies hold the same
# 260 reserved entries, and the same number of threads. spm keeps its own
# normalization (nmt_nfkc) and maximum piece length (16 characters).
# Times are wall clock and CPU (user+sys) from /usr/bin/time; on a shared
# machine read the ratios, measured back to back, not the absolute times.
#
# usage: scripts/bench-bpe.sh        env: TFM (./tfm), TFM_DATA, BENCH_DIR,
#                                         BIG_LINES (2000000), THREADS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
TFM=${TFM:-$PWD/tfm}
D=${TFM_DATA:-../shared/data/multi30k}
W=${BENCH_DIR:-/tmp/tfm-bench-bpe}
BIG_LINES=${BIG_LINES:-2000000}
THREADS=${THREADS:-2}
[ -x "$TFM" ] || { echo "bench-bpe: $TFM not built (make tfm)" >&2; exit 1; }
[ -f "$D/train.en" ] || { echo "bench-bpe: Multi30k not found in $D (set TFM_DATA)" >&2; exit 1; }
command -v spm_train >/dev/null || { echo "bench-bpe: spm_train not found (apt-get install sentencepiece)" >&2; exit 1; }
mkdir -p "$W"
export LC_ALL=C

# ---- corpora -------------------------------------------------------------
cat "$D/train.en" "$D/train.de" > "$W/m30k.txt"
cat "$D/test2016.en" "$D/test2016.de" > "$W/test.txt"
if [ ! -f "$W/big.txt" ] || [ "$(wc -l < "$W/big.txt")" -ne "$BIG_LINES" ]; then
  echo "building $BIG_LINES lines in $W/big.txt ..." >&2
  cat "$D/train.en" "$D/train.de" "$D/train.fr" | awk -v N="$BIG_LINES" 'BEGIN { srand(1) }
    { pool[n++] = $0 }
    END { for (i = 0; i < N; i++) {
            nw = split(pool[int(rand() * n)], w, " "); out = ""
            for (j = 1; j <= nw; j++) {
              x = w[j]; r = rand()
              if (r < 0.08 && j < nw) { x = x tolower(w[j + 1]); j++ }
              else if (r < 0.12 && length(x) > 3) {
                k = int(rand() * (length(x) - 1)) + 1; a = substr(x, k, 1); b = substr(x, k + 1, 1)
                if (a ~ /[a-z]/ && b ~ /[a-z]/) x = substr(x, 1, k - 1) b a substr(x, k + 2)
              }
              out = out (j > 1 ? " " : "") x
            }
            print out } }' > "$W/big.txt"
fi
head -500000 "$W/big.txt" > "$W/big500k.txt"

# ---- helpers -------------------------------------------------------------
# timed NAME cmd...: runs cmd (stdin/stdout as given), records "wall cpu maxrss_kb" in $W/NAME.time
timed() {
  local name=$1; shift
  /usr/bin/time -f "%e %U %S %M" -o "$W/$name.time" "$@"
}
wall() { awk '{ print $1 }' "$W/$1.time"; }
cpu()  { awk '{ printf "%.2f", $2 + $3 }' "$W/$1.time"; }
rss()  { awk '{ printf "%.0f", $4 / 1024 }' "$W/$1.time"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a / (b > 0 ? b : 0.01) }'; }
per_line() { awk -v t="$(wc -w < "$1")" -v l="$(wc -l < "$1")" 'BEGIN { printf "%.2f", t / l }'; }

spm_learn() {  # name vocab input
  timed "spm_$1" spm_train --input="$3" --model_prefix="$W/spm_$1" --vocab_size="$2" --model_type=bpe \
    --num_threads="$THREADS" --input_sentence_size=0 --character_coverage=0.9999 --byte_fallback=true \
    --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3 --minloglevel=1 > "$W/spm_$1.log" 2>&1
}
tfm_learn() {  # name vocab input
  timed "tfm_$1" "$TFM" bpe learn -q --threads "$THREADS" --vocab-size "$2" -o "$W/tfm_$1.model" "$3" 2> "$W/tfm_$1.log"
}

echo "# bench-bpe: $(date -u +%FT%TZ), $(nproc) cores, $THREADS threads, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# tfm: $TFM; $(spm_train --version 2>&1 | head -1)"
echo

# ---- 1. learning ---------------------------------------------------------
echo "## Learning (same vocabulary, $THREADS threads, every line)"
echo
echo "| corpus | lines | vocab | tfm wall s (CPU s) | spm wall s (CPU s) | spm/tfm wall | spm/tfm CPU | tfm / spm peak MB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for run in "m30k 8000 $W/m30k.txt" "m30k16 16000 $W/m30k.txt" "big 32000 $W/big.txt"; do
  set -- $run
  tfm_learn "$1" "$2" "$3"
  spm_learn "$1" "$2" "$3"
  echo "| $(basename "$3") | $(wc -l < "$3") | $2 | $(wall "tfm_$1") ($(cpu "tfm_$1")) | $(wall "spm_$1") ($(cpu "spm_$1")) |" \
       "$(ratio "$(wall "spm_$1")" "$(wall "tfm_$1")")x | $(ratio "$(cpu "spm_$1")" "$(cpu "tfm_$1")")x | $(rss "tfm_$1") / $(rss "spm_$1") |"
done
echo

# ---- 2. encoding throughput ----------------------------------------------
echo "## Encoding throughput (one core: tfm --threads 1; spm_encode is single-threaded), text -> ids"
echo
echo "| model | input | tokens | tfm tokens/s (per CPU s) | spm tokens/s (per CPU s) | tfm/spm |"
echo "|---|---|---:|---:|---:|---:|"
for run in "m30k m30k.txt" "big big500k.txt"; do
  set -- $run
  timed "tfm_enc_$1" "$TFM" bpe encode -m "$W/tfm_$1.model" --ids --threads 1 < "$W/$2" > "$W/tfm_enc_$1.ids"
  timed "spm_enc_$1" spm_encode --model="$W/spm_$1.model" --output_format=id < "$W/$2" > "$W/spm_enc_$1.ids"
  tt=$(wc -w < "$W/tfm_enc_$1.ids"); st=$(wc -w < "$W/spm_enc_$1.ids")
  trate=$(awk -v t="$tt" -v s="$(wall "tfm_enc_$1")" 'BEGIN { printf "%.2fM", t / s / 1e6 }')
  tcpu=$(awk -v t="$tt" -v s="$(cpu "tfm_enc_$1")" 'BEGIN { printf "%.2fM", t / (s > 0 ? s : 0.01) / 1e6 }')
  srate=$(awk -v t="$st" -v s="$(wall "spm_enc_$1")" 'BEGIN { printf "%.2fM", t / s / 1e6 }')
  scpu=$(awk -v t="$st" -v s="$(cpu "spm_enc_$1")" 'BEGIN { printf "%.2fM", t / (s > 0 ? s : 0.01) / 1e6 }')
  echo "| $1 | $2 ($(wc -l < "$W/$2") lines) | $tt | $trate ($tcpu) | $srate ($scpu) |" \
       "$(awk -v a="$tt" -v b="$(wall "tfm_enc_$1")" -v c="$st" -v d="$(wall "spm_enc_$1")" 'BEGIN { printf "%.1fx", (a / b) / (c / d) }') |"
done
timed tfm_enc_big2 "$TFM" bpe encode -m "$W/tfm_big.model" --ids --threads "$THREADS" < "$W/big500k.txt" > "$W/tfm_enc_big2.ids"
echo
echo "tfm with $THREADS threads on big500k.txt: $(awk -v t="$(wc -w < "$W/tfm_enc_big2.ids")" -v s="$(wall tfm_enc_big2)" 'BEGIN { printf "%.2fM", t / s / 1e6 }') tokens/s"
echo

# ---- 3. compression -------------------------------------------------------
echo "## Compression: tokens per sentence (lower is better)"
echo
echo "| model | text | tfm | spm | tfm vs spm |"
echo "|---|---|---:|---:|---:|"
for run in "m30k test.txt" "m30k m30k.txt" "m30k16 test.txt" "big test.txt" "big big500k.txt"; do
  set -- $run
  "$TFM" bpe encode -m "$W/tfm_$1.model" < "$W/$2" > "$W/c_tfm.txt"
  spm_encode --model="$W/spm_$1.model" < "$W/$2" > "$W/c_spm.txt"
  t=$(per_line "$W/c_tfm.txt"); s=$(per_line "$W/c_spm.txt")
  echo "| $1 | $2 | $t | $s | $(awk -v t="$t" -v s="$s" 'BEGIN { printf "%+.1f%%", 100 * (t - s) / s }') |"
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg); files in $W"
