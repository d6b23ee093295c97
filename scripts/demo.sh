#!/usr/bin/env bash
# The README's main job: get Multi30k, learn a joint BPE, train configs/demo.ini
# for about 10 minutes, translate test2016 en→de with beam 4, print BLEU with
# the sacreBLEU signature and a few translations beside their references.
# Precision as scripts/multi30k.sh chooses it (scripts/train-precision.sh): bf16
# where this CPU has a bf16 unit that outruns its fp32 FMAs, else fp32;
# PRECISION=fp32|bf16 decides. Rerunning resumes the run (and skips training
# once it has finished).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x ./tfm ] || make -j"$(nproc)" tfm
DATA=$(bash scripts/get-multi30k.sh)
RUN=runs/demo
CFG=configs/demo.ini
PRECISION=${PRECISION:-$(bash scripts/train-precision.sh)}
BF16=$(./tfm info | sed -n 's/^bf16 products: //p')
set_data=(--set "data.train_src=$DATA/train.en" --set "data.train_tgt=$DATA/train.de"
          --set "data.valid_src=$DATA/val.en" --set "data.valid_tgt=$DATA/val.de" --set "run.precision=$PRECISION")
echo "== demo: training $CFG on $DATA in $PRECISION (bf16 products here: $BF16; about 10 minutes; logs below) ==" >&2
./tfm train "$CFG" "${set_data[@]}"
MODEL=$RUN/average.safetensors
[ -f "$MODEL" ] || MODEL=$RUN/best.safetensors
echo "== demo: translating $DATA/test2016.en with $MODEL (beam 4) ==" >&2
./tfm translate -m "$MODEL" < "$DATA/test2016.en" > "$RUN/test2016.hyp.de"
echo
echo "== BLEU on Multi30k test2016 en→de (cased, detokenized, sacreBLEU 13a) =="
./tfm bleu "$DATA/test2016.de" -i "$RUN/test2016.hyp.de"
echo
echo "== examples (source / reference / tfm) =="
for i in 1 2 3 4 5; do
  n=$((i * 97))
  echo "src: $(sed -n "${n}p" "$DATA/test2016.en")"
  echo "ref: $(sed -n "${n}p" "$DATA/test2016.de")"
  echo "tfm: $(sed -n "${n}p" "$RUN/test2016.hyp.de")"
  echo
done
