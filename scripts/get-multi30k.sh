#!/usr/bin/env bash
# Print the folder that holds Multi30k task 1 (train/val/test2016 .en/.de/.fr).
# Uses ../shared/data/multi30k when present (or $TFM_DATA); otherwise downloads
# the raw files from the Multi30k project's public repository into data/multi30k.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in "${TFM_DATA:-}" ../shared/data/multi30k; do
  if [ -n "$d" ] && [ -f "$d/train.en" ] && [ -f "$d/test2016.de" ]; then
    (cd "$d" && pwd); exit 0
  fi
done
out=data/multi30k
base=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw
mkdir -p "$out"
for split in train val test_2016_flickr; do
  for l in en de fr; do
    name=$split; [ "$split" = test_2016_flickr ] && name=test2016
    [ -s "$out/$name.$l" ] && continue
    echo "get-multi30k: downloading $split.$l.gz" >&2
    curl -fsSL "$base/$split.$l.gz" | gunzip > "$out/$name.$l.tmp"
    mv "$out/$name.$l.tmp" "$out/$name.$l"
  done
done
for f in train.en:29000 val.en:1014 test2016.en:1000; do
  n=$(wc -l < "$out/${f%%:*}")
  [ "$n" -eq "${f##*:}" ] || { echo "get-multi30k: $out/${f%%:*} has $n lines, expected ${f##*:}" >&2; exit 1; }
done
(cd "$out" && pwd)
