#!/usr/bin/env bash
# scripts/plot.sh — draw a run's training curves to PNG with gnuplot.
#
#   scripts/plot.sh RUN_DIR [OUT.png]      (default OUT: RUN_DIR/curves.png)
#
# Reads RUN_DIR/train.tsv (written every log_interval steps by tfm train) and
# RUN_DIR/valid.tsv (every valid_interval steps, if there is a dev set), and
# draws two panels against the update step: the training loss (label
# smoothed) and NLL per target token; the training and validation perplexity
# (log scale), with validation BLEU on a second axis when it was computed.
set -eu
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  echo "example: scripts/plot.sh runs/multi30k-en-de"
  [ $# -ge 1 ] && exit 0 || exit 2
fi
dir=$1
out=${2:-$dir/curves.png}
train=$dir/train.tsv
valid=$dir/valid.tsv
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot is not installed (Debian: apt-get install gnuplot-nox)" >&2; exit 1; }
[ -f "$train" ] || { echo "plot.sh: $train not found (has the run logged a step yet?)" >&2; exit 1; }
[ "$(wc -l < "$train")" -ge 2 ] || { echo "plot.sh: $train has no rows yet" >&2; exit 1; }
have_valid=0
[ -f "$valid" ] && [ "$(wc -l < "$valid")" -ge 2 ] && have_valid=1
have_bleu=0
[ $have_valid = 1 ] && awk -F'\t' 'NR > 1 && $6 >= 0 { found = 1 } END { exit !found }' "$valid" && have_bleu=1

{
  echo "set terminal pngcairo size 1400,560 noenhanced font ',10'"
  echo "set output '$out'"
  echo "set datafile separator '\t'"
  echo "set key autotitle columnhead"
  echo "set multiplot layout 1,2 title '$(basename "$dir")'"
  echo "set grid; set xlabel 'step'; set ylabel 'per target token'"
  echo "set title 'training loss'"
  echo "plot '$train' using 1:3 with lines lw 2 title 'loss (label smoothed)', '' using 1:4 with lines lw 2 title 'NLL'"
  echo "set title 'perplexity'; set logscale y; set ylabel 'perplexity (log scale)'; set key center right opaque box"
  if [ $have_bleu = 1 ]; then
    echo "set y2label 'BLEU'; set y2tics; set ytics nomirror"
    echo "plot '$train' using 1:5 with lines lw 2 title 'train ppl', '$valid' using 1:5 with linespoints lw 2 pt 7 title 'valid ppl', \
'$valid' using 1:(\$6 >= 0 ? \$6 : NaN) axes x1y2 with linespoints lw 2 pt 5 title 'valid BLEU'"
  elif [ $have_valid = 1 ]; then
    echo "plot '$train' using 1:5 with lines lw 2 title 'train ppl', '$valid' using 1:5 with linespoints lw 2 pt 7 title 'valid ppl'"
  else
    echo "plot '$train' using 1:5 with lines lw 2 title 'train ppl'"
  fi
  echo "unset multiplot"
} | gnuplot
echo "plot.sh: wrote $out" >&2
