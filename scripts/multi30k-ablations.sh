#!/usr/bin/env bash
# scripts/multi30k-ablations.sh — short tuning runs around the Multi30k recipe,
# in the manner of the paper's Table 3: each run changes one setting of
# configs/multi30k.ini, trains en→de for the same number of target tokens as
# STEPS updates of the recipe (default 1000, ~12 min here), and is compared
# with the recipe's own curve at that point (validation perplexity and greedy
# validation BLEU on val).
#
#   scripts/multi30k-ablations.sh [--steps N] [NAME ...]
#
# NAME is one of the runs listed below (default: all of them). Each run goes
# to runs/abl-NAME through scripts/multi30k.sh (which resumes, so an
# interrupted list can be restarted, and a finished run is only read). The recipe's curve is read from
# BASE=DIR (default runs/multi30k-en-de, the full recipe run); when it has no
# validation at the step needed, the recipe is run as "recipe" like the others.
# THREADS=N trains with N threads (default: all cores), e.g. to run two lists
# side by side with THREADS=1 each.
# Prints a Markdown table on stdout; logs go to runs/abl-NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | updates as a multiple of STEPS (same tokens seen) | overrides
RUNS=(
  "recipe|1|"
  "dropout0.1|1|--set model.dropout=0.1"
  "ls0|1|--set model.label_smoothing=0"
  "layers2|1|--set model.encoder_layers=2 --set model.decoder_layers=2"
  "bpe16k|1|--set data.vocab_size=16000"
  "batch8k|0.5|--set train.batch_tokens=8000"
  "warmup2000|1|--set train.warmup=2000"
  "post-ln|1|--set model.norm=post"
)

STEPS=1000
case "${1:-}" in
  --steps) STEPS=$2; shift 2 ;;
  -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
BASE=${BASE:-runs/multi30k-en-de}
WANT=("$@")
if [ ${#WANT[@]} -eq 0 ]; then
  for r in "${RUNS[@]}"; do WANT+=("${r%%|*}"); done
fi

# "ppl bleu elapsed_s" of the validation at step $2 in $1/valid.tsv, or nothing
valid_at() { [ -f "$1/valid.tsv" ] && awk -F'\t' -v s="$2" 'NR > 1 && $1 == s { print $5, $6, $7 }' "$1/valid.tsv"; }

echo "| run | overrides | parameters | updates | valid ppl | valid BLEU (greedy) | time |"
echo "|---|---|---|---|---|---|---|"
for name in "${WANT[@]}"; do
  entry=""
  for r in "${RUNS[@]}"; do [ "${r%%|*}" = "$name" ] && entry=$r; done
  [ -n "$entry" ] || { echo "multi30k-ablations.sh: no run named '$name'" >&2; exit 2; }
  IFS='|' read -r _ mult overrides <<< "$entry"
  steps=$(awk -v s="$STEPS" -v m="$mult" 'BEGIN { printf "%d", s * m }')
  dir=runs/abl-$name
  res=$(valid_at "$dir" "$steps" || true)   # a finished run is not run again
  if [ -z "$res" ] && [ "$name" = recipe ]; then res=$(valid_at "$BASE" "$steps" || true); [ -z "$res" ] || dir=$BASE; fi
  if [ -z "$res" ]; then
    # validate (and checkpoint) twice: half way and at the end
    # shellcheck disable=SC2086
    RUN=$dir scripts/multi30k.sh de $overrides --set "train.max_steps=$steps" \
      ${THREADS:+--set "run.threads=$THREADS"} --set "train.valid_interval=$((steps / 2))" --set "train.checkpoint_interval=$((steps / 2))" \
      > "$dir.log" 2>&1 || { echo "multi30k-ablations.sh: run $name failed, see $dir.log" >&2; exit 1; }
    res=$(valid_at "$dir" "$steps" || true)
    [ -n "$res" ] || { echo "multi30k-ablations.sh: $dir/valid.tsv has no step $steps" >&2; exit 1; }
  fi
  params=$(./tfm train configs/multi30k.ini $overrides --dry-run 2>/dev/null | sed -n 's/^; parameters: \([0-9]*\).*/\1/p')
  read -r ppl bleu secs <<< "$res"
  printf '| %s | %s | %s | %s | %.2f | %.2f | %.0f s |\n' "$name" "${overrides//--set /}" "$params" "$steps" "$ppl" "$bleu" "$secs"
done
