#!/usr/bin/env bash
# The paper's setup (section 5.1, 6.1): WMT14 en-de (4.5M pairs), a 37k joint
# BPE, the base model for 100k steps at ~25k+25k tokens per update, the last 5
# checkpoints averaged, newstest2014 scored with sacreBLEU-exact BLEU.
#
#   scripts/wmt14-en-de.sh [download|train|eval|all]    (default: all)
#   scripts/wmt14-en-de.sh measure [THREADS]
#
# `measure` times 3 updates of the base model at the paper's batch (6,250
# tokens x 8 accumulated = 50,000 per update) and the peak memory, then
# projects 100k steps. It uses the WMT14 text when it has been downloaded,
# otherwise a stand-in made from Multi30k: two consecutive sentences per line
# (WMT-like lengths, ~30 BPE tokens per side) and a joint BPE learned on the
# en, de and fr text (35k tokens; WMT's is 37k). Only the shapes matter here.
#
# Needs ~10 GB of disk. The training takes days on a CPU: it runs under
# `tfm train`, which checkpoints and resumes, so stop and rerun at will.
# Time per step and projections for this machine: see doc/wmt14.md.
set -euo pipefail
cd "$(dirname "$0")/.."
D=data/wmt14-en-de
CONFIG=configs/base.ini
RUN=runs/wmt14-base
step=${1:-all}
mkdir -p "$D/raw"

download() {
  local urls=(
    http://statmt.org/wmt13/training-parallel-europarl-v7.tgz
    http://statmt.org/wmt13/training-parallel-commoncrawl.tgz
    http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz
    http://data.statmt.org/wmt17/translation-task/dev.tgz
    http://statmt.org/wmt14/test-full.tgz
  )
  for u in "${urls[@]}"; do
    f="$D/raw/$(basename "$u")"
    [ -s "$f" ] || { echo "wmt14: downloading $u" >&2; curl -fL --retry 3 -o "$f.part" "$u" && mv "$f.part" "$f"; }
    tar -xzf "$f" -C "$D/raw"
  done
  # Training text: Europarl v7 + Common Crawl + News Commentary v12 (as fairseq's recipe).
  : > "$D/train.en"; : > "$D/train.de"
  for c in training/europarl-v7.de-en commoncrawl.de-en training/news-commentary-v12.de-en; do
    cat "$D/raw/$c.en" >> "$D/train.en"
    cat "$D/raw/$c.de" >> "$D/train.de"
  done
  # Dev newstest2013 (plain text in dev.tgz), test newstest2014 (SGML in test-full).
  cp "$D/raw/dev/newstest2013.en" "$D/newstest2013.en"
  cp "$D/raw/dev/newstest2013.de" "$D/newstest2013.de"
  for l in en de; do
    sed -n 's/^<seg[^>]*>\s*\(.*\)<\/seg>\s*$/\1/p' "$D/raw/test-full/newstest2014-deen-$( [ $l = en ] && echo src || echo ref ).$l.sgm" \
      | sed 's/&amp;/\&/g; s/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g; s/&apos;/'"'"'/g' > "$D/newstest2014.$l"
  done
  wc -l "$D"/train.en "$D"/newstest2013.en "$D"/newstest2014.en >&2
}

train() {
  # The BPE (37k joint) is learned by tfm train itself when bpe_model is missing.
  ./tfm train "$CONFIG"    # averages the last 5 checkpoints at the end (average_last)
}

evaluate() {
  ./tfm translate -m "$RUN/average.safetensors" < "$D/newstest2014.en" > "$RUN/newstest2014.hyp.de"
  ./tfm bleu "$D/newstest2014.de" -i "$RUN/newstest2014.hyp.de"
}

measure() {
  local threads=${1:-0} M=runs/wmt14-measure src tgt bpe
  rm -rf "$M"; mkdir -p "$M"
  if [ -s "$D/train.en" ]; then
    src=$D/train.en; tgt=$D/train.de; bpe=$M/bpe.model
  else
    local mm; mm=$(bash scripts/get-multi30k.sh)
    for l in en de; do paste -d' ' - - < "$mm/train.$l" > "$M/pairs.$l"; done
    src=$M/pairs.en; tgt=$M/pairs.de; bpe=$M/bpe.model
    ./tfm bpe learn --vocab-size 37000 -o "$bpe" "$mm/train.en" "$mm/train.de" "$mm/train.fr"
  fi
  /usr/bin/time -v -o "$M/time.txt" ./tfm train "$CONFIG" --threads "$threads" \
    --set "data.train_src=$PWD/$src" --set "data.train_tgt=$PWD/$tgt" --set data.valid_src= --set data.valid_tgt= \
    --set "data.bpe_model=$PWD/$bpe" --set "train.dir=$PWD/$M" --set train.batch_tokens=6250 \
    --set train.accumulate=8 --set train.max_steps=3 --set train.log_interval=1 --set train.checkpoint_interval=1000
  # Updates 2 and 3 (the first one also plans the activation buffers).
  awk -F'\t' -v rss="$(awk -F': ' '/Maximum resident/ { print $2 }' "$M/time.txt")" '
    NR == 3 { t2 = $9 } NR == 4 { t3 = $9; tok = $8 }
    END { s = t3 - t2; printf "wmt14 measure: %.1f s per update of 6,250 x 8 padded tokens (%d real tokens/s), peak memory %.2f GB\n", s, tok, rss / 1048576;
          printf "wmt14 measure: 100k updates = %.1f days on this machine\n", s * 1e5 / 86400 }' "$M/train.tsv"
}

case "$step" in
  download) download ;;
  train) train ;;
  eval) evaluate ;;
  all) download; train; evaluate ;;
  measure) measure "${2:-0}" ;;
  *) echo "usage: $0 [download|train|eval|all] | measure [THREADS]" >&2; exit 2 ;;
esac
