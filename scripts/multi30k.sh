#!/usr/bin/env bash
# scripts/multi30k.sh — the Multi30k recipe: train configs/multi30k.ini on
# Multi30k task 1 (train for training, val for validation and early stopping)
# for at most 2 hours, average the last 5 checkpoints, translate test2016 with
# beam 4 and length penalty 0.6, and print cased sacreBLEU (13a) with its
# signature. The figures also go to runs/multi30k-en-TGT/results.txt.
#
#   scripts/multi30k.sh [de|fr] [--set SECTION.KEY=VALUE ...]
#
# RUN=DIR puts the run elsewhere than runs/multi30k-en-TGT (for a tuning run
# with --set overrides, e.g. RUN=runs/m30k-drop0.1 scripts/multi30k.sh de
# --set model.dropout=0.1 --set train.max_time=30m).
# Training checkpoints as it goes: stop it (Ctrl-C) whenever you like and run
# the same command again to resume where it stopped. To run it in the
# background:  nohup scripts/multi30k.sh de > runs/multi30k-en-de.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-de}" in
  de|fr) TGT=${1:-de}; [ $# -gt 0 ] && shift ;;
  -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "multi30k.sh: target language must be de or fr, not '$1'" >&2; exit 2 ;;
esac
[ -x ./tfm ] || make -j"$(nproc)" tfm
DATA=$(bash scripts/get-multi30k.sh)
RUN=${RUN:-runs/multi30k-en-$TGT}
CFG=configs/multi30k.ini
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
./tfm train "$CFG" \
  --set "data.train_src=$DATA/train.en" --set "data.train_tgt=$DATA/train.$TGT" \
  --set "data.valid_src=$DATA/val.en" --set "data.valid_tgt=$DATA/val.$TGT" \
  --set "data.tgt_lang=$TGT" --set "data.bpe_model=$RUN/bpe.model" \
  --set "train.dir=$RUN" "$@"
command -v gnuplot >/dev/null && scripts/plot.sh "$RUN" >/dev/null || true
{
  echo "== Multi30k test2016 en→$TGT, beam 4, alpha 0.6 (cased, detokenized, sacreBLEU 13a) =="
  for m in average best; do
    [ -f "$RUN/$m.safetensors" ] || continue
    /usr/bin/time -f "%e" -o "$RUN/translate-$m.time" \
      ./tfm translate -m "$RUN/$m.safetensors" --beam 4 --alpha 0.6 < "$DATA/test2016.en" > "$RUN/test2016.$m.$TGT"
    printf '%-8s ' "$m:"
    ./tfm bleu "$DATA/test2016.$TGT" -i "$RUN/test2016.$m.$TGT"
  done
  [ $# -eq 0 ] || echo "overrides: $*"
  echo "training: $(tail -n 1 "$RUN/train.tsv" | awk -F'\t' '{ printf "%d updates, %d epochs, %.0f s", $1, $2, $9 }')"
  echo "parameters: $(./tfm train "$CFG" "$@" --dry-run 2>/dev/null | sed -n 's/^; parameters: \([0-9]*\).*/\1/p')"
} | tee "$RUN/results.txt"
