#!/usr/bin/env bash
# scripts/backtranslate.sh — tagged back-translation on Multi30k en→de
# (Sennrich et al. 2016, with the tag of Caswell et al. 2019):
#   1. Multi30k train is cut in two: the first PARALLEL lines stay parallel,
#      the German side of the rest plays the in-domain monolingual data;
#   2. one joint BPE for all models, with the tag <bt> as a user symbol;
#   3. a reverse model de→en trained on the parallel part;
#   4. an English source sampled for every monolingual German sentence
#      (tfm translate --sample --topk TOPK --seed SEED), tagged "<bt> ...";
#   5. en→de trained on the parallel part + the tagged synthetic pairs;
#   6. a baseline en→de on the parallel part alone (same config and budget);
#   7. both translate test2016 (beam 4): BLEU with its signature, also in
#      RUN/results.txt.
#
#   scripts/backtranslate.sh [--set SECTION.KEY=VALUE ...]
#
# The --set overrides apply to all three trainings. Environment: RUN (the
# folder, default runs/backtranslate), CFG (configs/demo.ini), TIME (each
# model's max_time, default 20m), PARALLEL (default: half of train), SEED
# (sampling seed, 1), TOPK (sample among the TOPK likeliest tokens, 10; 0:
# all). Every step resumes or is skipped once done: stop it whenever you
# like and run the same command again.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
for a in "$@"; do
  case "$a" in --set|--set=*|*=*) ;; *) echo "backtranslate.sh: expected --set SECTION.KEY=VALUE options, got '$a'" >&2; exit 2 ;; esac
done
[ -x ./tfm ] || make -j"$(nproc)" tfm
DATA=$(bash scripts/get-multi30k.sh)
RUN=${RUN:-runs/backtranslate}
CFG=${CFG:-configs/demo.ini}
TIME=${TIME:-20m}
SEED=${SEED:-1}
TOPK=${TOPK:-10}
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
total=$(wc -l < "$DATA/train.en")
PARALLEL=${PARALLEL:-$((total / 2))}
[ "$PARALLEL" -gt 0 ] && [ "$PARALLEL" -lt "$total" ] || { echo "backtranslate.sh: PARALLEL must be in 1..$((total - 1))" >&2; exit 2; }

# 1. the split
if [ ! -s "$RUN/mono.de" ]; then
  head -n "$PARALLEL" "$DATA/train.en" > "$RUN/par.en"
  head -n "$PARALLEL" "$DATA/train.de" > "$RUN/par.de"
  tail -n +"$((PARALLEL + 1))" "$DATA/train.de" > "$RUN/mono.de.tmp" && mv "$RUN/mono.de.tmp" "$RUN/mono.de"
fi
# 2. one tokenizer for every model, the tag a piece of its own
vocab=$(./tfm train "$CFG" "$@" --dry-run 2>/dev/null | sed -n 's/^vocab_size = //p')
[ -s "$RUN/bpe.model" ] ||
  ./tfm bpe learn -q --vocab-size "$vocab" --symbols '<bt>' -o "$RUN/bpe.model" "$RUN/par.en" "$RUN/par.de" "$RUN/mono.de"

train() {  # train NAME SRC_LANG TGT_LANG TRAIN_SRC TRAIN_TGT [--set ...]
  local name=$1 s=$2 t=$3 src=$4 tgt=$5; shift 5
  ./tfm train "$CFG" --set "data.train_src=$src" --set "data.train_tgt=$tgt" \
    --set "data.valid_src=$DATA/val.$s" --set "data.valid_tgt=$DATA/val.$t" \
    --set "data.src_lang=$s" --set "data.tgt_lang=$t" --set "data.bpe_model=$RUN/bpe.model" \
    --set "data.symbols=<bt>" --set "train.max_time=$TIME" --set "train.dir=$RUN/$name" "$@"
}
model() { [ -f "$1/average.safetensors" ] && echo "$1/average.safetensors" || echo "$1/best.safetensors"; }

# 3. the reverse model; 4. sampled back-translations, tagged
train reverse de en "$RUN/par.de" "$RUN/par.en" "$@"
if [ ! -s "$RUN/mono.bt.en" ]; then
  ./tfm translate -q -m "$(model "$RUN/reverse")" --sample --topk "$TOPK" --seed "$SEED" -i "$RUN/mono.de" -o "$RUN/mono.sampled.en"
  sed 's/^/<bt> /' "$RUN/mono.sampled.en" > "$RUN/mono.bt.en.tmp" && mv "$RUN/mono.bt.en.tmp" "$RUN/mono.bt.en"
fi
if [ ! -s "$RUN/union.de" ]; then
  cat "$RUN/par.en" "$RUN/mono.bt.en" > "$RUN/union.en"
  cat "$RUN/par.de" "$RUN/mono.de" > "$RUN/union.de.tmp" && mv "$RUN/union.de.tmp" "$RUN/union.de"
fi
# 5. en→de with back-translation; 6. the baseline
train bt en de "$RUN/union.en" "$RUN/union.de" "$@"
train baseline en de "$RUN/par.en" "$RUN/par.de" "$@"

# 7. test2016
{
  echo "== back-translation: Multi30k test2016 en→de, beam 4 (cased, detokenized, sacreBLEU 13a) =="
  echo "parallel pairs: $PARALLEL; monolingual German sentences back-translated: $(wc -l < "$RUN/mono.de")"
  for name in baseline bt; do
    m=$(model "$RUN/$name")
    ./tfm translate -q -m "$m" --beam 4 -i "$DATA/test2016.en" -o "$RUN/test2016.$name.de"
    printf '%-9s ' "$name:"
    ./tfm bleu "$DATA/test2016.de" -i "$RUN/test2016.$name.de" | head -1
    echo "          $(tail -n 1 "$RUN/$name/train.tsv" | awk -F'\t' '{ printf "%d updates, %d epochs, %.0f s of training", $1, $2, $9 }'); $m"
  done
  echo "reverse:  $(tail -n 1 "$RUN/reverse/train.tsv" | awk -F'\t' '{ printf "%d updates, %d epochs, %.0f s of training", $1, $2, $9 }')"
  ./tfm bleu "$DATA/test2016.de" -i "$RUN/test2016.baseline.de" | tail -1
  [ $# -eq 0 ] || echo "overrides: $*"
} | tee "$RUN/results.txt"
