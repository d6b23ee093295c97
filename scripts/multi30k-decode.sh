#!/usr/bin/env bash
# multi30k-decode.sh — tune the Multi30k recipe's decoding on val only, then
# score the val-best setting and the recipe's default on test2016 once each
# (a measurement, not a test).
#
# On a finished recipe run (RUN=dir with its checkpoint-*.safetensors):
#   1. length penalty alpha in ALPHAS at beam 4, the last 5 checkpoints averaged;
#   2. beam in BEAMS at the best alpha;
#   3. the last 3 against the last 5 checkpoints averaged (tfm average) at the
#      best (beam, alpha);
# each translating val.en -> val.$TGT with THREADS thread(s) and printing
# BLEU (tfm bleu: cased sacreBLEU 13a), the length ratio and the CPU time of
# the whole process (user + sys, model load included). Then a paired
# bootstrap (scripts/bleu_bootstrap.py, 1,000 resamples of val's sentences)
# of the val-best setting against the default (beam 4, alpha 0.6, last 5),
# and test2016 for both. The setting is chosen on val alone; test2016 is
# decoded once per setting, after the choice.
#
#   RUN=runs/multi30k-en-de bash scripts/multi30k-decode.sh
#   RUN=/tmp/m30k/run ALPHAS="0.6 1.0" BEAMS="4 8" bash scripts/multi30k-decode.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${TFM_DATA:-../shared/data/multi30k}
RUN=${RUN:?set RUN=the recipe run directory (its checkpoint-*.safetensors)}
TGT=${TGT:-de}
ALPHAS=${ALPHAS:-"0.4 0.6 0.8 1.0 1.2"}
BEAMS=${BEAMS:-"4 6 8"}
THREADS=${THREADS:-1}
W=${BENCH_DIR:-/tmp/tfm-multi30k-decode}
[ -f "$DATA/val.en" ] || { echo "no $DATA/val.en (scripts/get-multi30k.sh?)"; exit 1; }
make -s build/tfm >/dev/null   # not ./tfm: it may be running elsewhere
TFM=$PWD/build/tfm
mkdir -p "$W"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); blis kernels: $("$TFM" info | sed -n 's/^blis kernels: //p')"
echo "run: $RUN ($(ls "$RUN"/checkpoint-*.safetensors | wc -l) checkpoints, newest $(basename "$(ls "$RUN"/checkpoint-*.safetensors | tail -1)")); $THREADS thread(s)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 3 5; do
  [ -f "$W/avg$n.safetensors" ] && [ "$W/avg$n.safetensors" -nt "$(ls "$RUN"/checkpoint-*.safetensors | tail -1)" ] ||
    "$TFM" average --last "$n" -o "$W/avg$n.safetensors" "$RUN" >/dev/null
done

# decode SET AVG BEAM ALPHA: translate $SET.en with avgAVG into $W/SET.bBEAM.aALPHA.avgAVG;
# prints one row and sets BLEU
decode() {
  local set=$1 avg=$2 beam=$3 alpha=$4 out cpu
  out=$W/$set.b$beam.a$alpha.avg$avg
  /usr/bin/time -f "%U %S" -o "$W/cpu" "$TFM" translate -q -m "$W/avg$avg.safetensors" --beam "$beam" --alpha "$alpha" \
    --threads "$THREADS" -i "$DATA/$set.en" -o "$out"
  cpu=$(awk '{ printf "%.1f", $1 + $2 }' "$W/cpu")
  local line; line=$("$TFM" bleu "$DATA/$set.$TGT" -i "$out" | head -1)
  BLEU=$(sed -n 's/^BLEU = \([0-9.]*\).*/\1/p' <<< "$line")
  printf '%-8s beam %d alpha %-3s last %d averaged | %s | CPU %s s\n' "$set" "$beam" "$alpha" "$avg" "$line" "$cpu"
}

better() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

echo; echo "== 1. alpha at beam 4 (val) =="
best_a=; best=-1
for a in $ALPHAS; do
  decode val 5 4 "$a"
  if better "$BLEU" "$best"; then best=$BLEU; best_a=$a; fi
done
echo; echo "== 2. beam at alpha $best_a (val) =="
best_b=4
for b in $BEAMS; do
  [ "$b" = 4 ] && { echo "(beam 4: above)"; continue; }
  decode val 5 "$b" "$best_a"
  if better "$BLEU" "$best"; then best=$BLEU; best_b=$b; fi
done
echo; echo "== 3. last 3 against last 5 averaged at beam $best_b alpha $best_a (val) =="
best_n=5
decode val 3 "$best_b" "$best_a"
if better "$BLEU" "$best"; then best=$BLEU; best_n=3; fi

echo; echo "== val-best: beam $best_b alpha $best_a last $best_n averaged; default: beam 4 alpha 0.6 last 5 =="
[ -f "$W/val.b4.a0.6.avg5" ] || decode val 5 4 0.6 >/dev/null
python3 scripts/bleu_bootstrap.py "$DATA/val.$TGT" "$W/val.b4.a0.6.avg5" "$W/val.b$best_b.a$best_a.avg$best_n" --resamples 1000
echo; echo "== test2016, once each =="
decode test2016 5 4 0.6
[ "$best_b $best_a $best_n" = "4 0.6 5" ] || decode test2016 "$best_n" "$best_b" "$best_a"
[ "$best_b $best_a $best_n" = "4 0.6 5" ] ||
  python3 scripts/bleu_bootstrap.py "$DATA/test2016.$TGT" "$W/test2016.b4.a0.6.avg5" "$W/test2016.b$best_b.a$best_a.avg$best_n" --resamples 1000
echo; echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
