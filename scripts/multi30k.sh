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
# MEMBERS=N trains N models side by side (seeds 1..N, nproc/N threads each,
# in RUN/seed1 ... RUN/seedN, logs in RUN/seedK.log) in the same 2 hours and
# translates with their ensemble (each member's averaged model); the default
# is 2 (1 on a one-core machine), MEMBERS=1 trains one model on every core.
# SEED=S seeds the members S..S+N-1 instead of 1..N (MEMBERS=1: the model S
# instead of the config's), for another draw of the same recipe.
# Precision: bf16 where this CPU has a bf16 unit that outruns its fp32 FMAs
# (scripts/train-precision.sh), else fp32; --set run.precision=P decides.
# Training checkpoints as it goes: stop it (Ctrl-C) whenever you like and run
# the same command again to resume where it stopped. To run it in the
# background:  nohup scripts/multi30k.sh de > runs/multi30k-en-de.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-de}" in
  de|fr) TGT=${1:-de}; [ $# -gt 0 ] && shift ;;
  -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "multi30k.sh: target language must be de or fr, not '$1'" >&2; exit 2 ;;
esac
# Two members, one core each, made the most updates in the 2 hours on 2 cores
# (one model's step gains 1.3-1.5x from a second core), and their ensemble is
# the recipe's best (doc/multi30k.md).
[ "$(nproc)" -ge 2 ] && MEMBERS=${MEMBERS:-2} || MEMBERS=${MEMBERS:-1}
[[ $MEMBERS =~ ^[1-9][0-9]?$ ]] || { echo "multi30k.sh: MEMBERS must be a number of models from 1 to 99, not '$MEMBERS'" >&2; exit 2; }
[[ ${SEED:-1} =~ ^(0|[1-9][0-9]{0,8})$ ]] || { echo "multi30k.sh: SEED must be a number, not '$SEED'" >&2; exit 2; }
[ -x ./tfm ] || make -j"$(nproc)" tfm
DATA=$(bash scripts/get-multi30k.sh)
RUN=${RUN:-runs/multi30k-en-$TGT}
CFG=configs/multi30k.ini
# bf16 where it wins (the header): the same validation perplexity per update,
# more updates in the 2 hours (doc/multi30k.md)
PRECISION=$(bash scripts/train-precision.sh)
BF16=$(./tfm info | sed -n 's/^bf16 products: //p')
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)

# train_args DIR [--set ...]: ARGS = the recipe's tfm train arguments, its run (and tokenizer) in DIR
train_args() {
  local dir=$1; shift
  ARGS=("$CFG"
    --set "data.train_src=$DATA/train.en" --set "data.train_tgt=$DATA/train.$TGT"
    --set "data.valid_src=$DATA/val.en" --set "data.valid_tgt=$DATA/val.$TGT"
    --set "data.tgt_lang=$TGT" --set "data.bpe_model=$dir/bpe.model"
    --set "train.dir=$dir" --set "run.precision=$PRECISION" "$@")
}
if [ "$MEMBERS" -eq 1 ]; then
  DIRS=("$RUN")
  train_args "$RUN" ${SEED:+--set "train.seed=$SEED"} "$@"
  ./tfm train "${ARGS[@]}"
else
  # Each member learns the same tokenizer from the same data (the ensemble
  # checks that they share it); the member's seed and threads come last, so
  # they win over the overrides. Each is its own process (exec), so that a
  # TERM given to the script reaches them: each checkpoints and stops.
  threads=$(( $(nproc) / MEMBERS )); [ "$threads" -ge 1 ] || threads=1
  DIRS=(); pids=()
  echo "multi30k.sh: training $MEMBERS models side by side, $threads thread(s) each; progress: tail -f $RUN/seed*.log" >&2
  for k in $(seq 1 "$MEMBERS"); do
    DIRS+=("$RUN/seed$k")
    train_args "$RUN/seed$k" "$@" --set "run.threads=$threads" --set "train.seed=$(( ${SEED:-1} + k - 1 ))"
    (exec ./tfm train "${ARGS[@]}" > "$RUN/seed$k.log" 2>&1) &
    pids+=($!)
  done
  trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM
  failed=0
  for k in $(seq 1 "$MEMBERS"); do
    # wait again when a TERM cut it short (status > 128 while the member still runs)
    while true; do
      st=0; wait "${pids[k-1]}" || st=$?
      [ "$st" -gt 128 ] && kill -0 "${pids[k-1]}" 2>/dev/null || break
    done
    [ "$st" -eq 0 ] || { echo "multi30k.sh: member $k failed (exit $st); the end of $RUN/seed$k.log:" >&2; tail -n 5 "$RUN/seed$k.log" >&2; failed=1; }
  done
  trap - TERM
  [ "$failed" -eq 0 ] || exit 1
fi
command -v gnuplot >/dev/null && for d in "${DIRS[@]}"; do scripts/plot.sh "$d" >/dev/null || true; done

# score NAME OUT MODEL...: translate test2016 with MODEL (several: their ensemble), print its BLEU line
score() {
  local name=$1 out=$2; shift 2
  local m=(); for f in "$@"; do m+=(-m "$f"); done
  /usr/bin/time -f "%e" -o "$RUN/translate-$name.time" \
    ./tfm translate "${m[@]}" --beam 4 --alpha 0.6 < "$DATA/test2016.en" > "$out"
  printf '%-8s ' "$name:"
  ./tfm bleu "$DATA/test2016.$TGT" -i "$out"
}
summary() {   # the last line of DIR's train.tsv: updates, epochs, seconds of training
  tail -n 1 "$1/train.tsv" | awk -F'\t' '{ printf "%d updates, %d epochs, %.0f s", $1, $2, $9 }'
}
{
  echo "== Multi30k test2016 en→$TGT, beam 4, alpha 0.6 (cased, detokenized, sacreBLEU 13a) =="
  if [ "$MEMBERS" -eq 1 ]; then
    for m in average best; do
      if [ -f "$RUN/$m.safetensors" ]; then score "$m" "$RUN/test2016.$m.$TGT" "$RUN/$m.safetensors"; fi
    done
  else
    avg=()
    for k in $(seq 1 "$MEMBERS"); do   # a member stopped before its end has no averaged model yet
      f=$RUN/seed$k/average.safetensors
      if [ -f "$f" ]; then avg+=("$f"); score "seed$k" "$RUN/test2016.seed$k.$TGT" "$f"
      else echo "seed$k:   not averaged yet (stopped before its end: run the same command to resume)"; fi
    done
    if [ "${#avg[@]}" -eq "$MEMBERS" ]; then score ensemble "$RUN/test2016.ensemble.$TGT" "${avg[@]}"; fi
  fi
  [ $# -eq 0 ] || echo "overrides: $*"
  if [ "$MEMBERS" -eq 1 ]; then echo "training: $(summary "$RUN")"
  else
    for k in $(seq 1 "$MEMBERS"); do echo "training seed$k: $(summary "$RUN/seed$k")"; done
    echo "seeds: $(seq -s ' ' "${SEED:-1}" $(( ${SEED:-1} + MEMBERS - 1 )))"
  fi
  dry=$(./tfm train "$CFG" --set "run.precision=$PRECISION" "$@" --dry-run 2>/dev/null)   # the config as it ran
  echo "parameters: $(sed -n 's/^; parameters: \([0-9]*\).*/\1/p' <<< "$dry")"
  echo "precision: $(sed -n 's/^precision = //p' <<< "$dry") (bf16 products here: $BF16)"
} | tee "$RUN/results.txt"
