#!/usr/bin/env bash
# The paper's setup (section 5.1, 6.1): WMT14 en-de (4.5M pairs), a 37k joint
# BPE, the base model for 100k steps at ~25k+25k tokens per update, the last 5
# checkpoints averaged, newstest2014 scored with sacreBLEU-exact BLEU.
#
#   scripts/wmt14-en-de.sh [download|train|eval|all]    (default: all)
#
# Needs ~10 GB of disk. The training takes days on a CPU: it runs under
# `tfm train`, which checkpoints and resumes, so stop and rerun at will.
# Time per step and projections for this machine: see README, "Scaling to WMT14".
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
  ./tfm train "$CONFIG"
  ./tfm average --last 5 -o "$RUN/average.safetensors" "$RUN"
}

evaluate() {
  ./tfm translate -m "$RUN/average.safetensors" < "$D/newstest2014.en" > "$RUN/newstest2014.hyp.de"
  ./tfm bleu "$D/newstest2014.de" -i "$RUN/newstest2014.hyp.de"
}

case "$step" in
  download) download ;;
  train) train ;;
  eval) evaluate ;;
  all) download; train; evaluate ;;
  *) echo "usage: $0 [download|train|eval|all]" >&2; exit 2 ;;
esac
