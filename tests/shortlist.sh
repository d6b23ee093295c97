#!/usr/bin/env bash
# shortlist.sh — tfm shortlist and --shortlist from the command line, on a
# tiny model with random weights: usage, the file it writes, its error
# paths (missing, truncated, damaged, another vocabulary), a shortlist that
# holds the whole vocabulary translating byte for byte as no shortlist (fp32
# and int8), and a real one translating batch and thread invariantly, on
# translate and eval. (The numbers are checked in tests/test_decode.c and
# tests/test_shortlist.c.)
cd "$(dirname "$0")/.." && source tests/lib.sh
MAKE_MODEL=${TFM_BUILD:-build}/dev/make_model
if ! [ -x "$MAKE_MODEL" ]; then fail "$MAKE_MODEL not built (make tests)"; finish; exit; fi

expect_exit 0 "--help" "$TFM" shortlist --help
for w in "-m, --model" --src --tgt "-k K" "-n N" "-o, --output" "example:"; do check "help mentions $w" contains "$OUT" "$w"; done
expect_exit 2 "no arguments" "$TFM" shortlist
expect_exit 2 "-k -1" "$TFM" shortlist -m x --src a --tgt b -o c -k -1
expect_exit 2 "unknown option" "$TFM" shortlist --bogus
expect_exit 0 "translate --help mentions --shortlist" "$TFM" translate --help
check "translate help: --shortlist" contains "$OUT" "--shortlist FILE"

# ---- a tokenizer, a corpus, a random model ----
for i in $(seq 1 150); do
  echo "the quick brown fox number $i jumps over the lazy dog and runs into the forest" >> "$T/train.en"
  echo "der schnelle braune Fuchs Nummer $i springt über den faulen Hund und läuft in den Wald" >> "$T/train.de"
done
cat "$T/train.en" "$T/train.de" > "$T/corpus.txt"
expect_exit 0 "learn a BPE" "$TFM" bpe learn --vocab-size 400 -o "$T/bpe.model" "$T/corpus.txt"
M="$T/model.safetensors"
expect_exit 0 "make a random model" "$MAKE_MODEL" "$M" configs/tiny.ini "$T/bpe.model" 1
if ! [ -s "$M" ]; then fail "no model to test with"; finish; exit; fi
V=$(sed -n 's/^vocab_size \([0-9]*\)/\1/p' "$T/bpe.model")

expect_exit 0 "build from a checkpoint" "$TFM" shortlist -q -m "$M" --src "$T/train.en" --tgt "$T/train.de" -k 3 -n 5 -o "$T/sl.txt"
expect_exit 0 "build from the BPE model" "$TFM" shortlist -q -m "$T/bpe.model" --src "$T/train.en" --tgt "$T/train.de" -k 3 -n 5 -o "$T/sl2.txt"
check "same file from the checkpoint's tokenizer and the BPE file" cmp -s "$T/sl.txt" "$T/sl2.txt"
expect_exit 0 "build with 2 threads" "$TFM" shortlist -q --threads 2 -m "$M" --src "$T/train.en" --tgt "$T/train.de" -k 3 -n 5 -o "$T/sl3.txt"
check "the file does not depend on the threads" cmp -s "$T/sl.txt" "$T/sl3.txt"
check "header" [ "$(head -1 "$T/sl.txt")" = "tfm-shortlist 1" ]
check "ends with its checksum" grep -q '^crc32c [0-9a-f]\{8\}$' <(tail -1 "$T/sl.txt")
expect_exit 0 "whole vocabulary (n >= V)" "$TFM" shortlist -q -m "$M" --src "$T/train.en" --tgt "$T/train.de" -k 0 -n "$V" -o "$T/all.txt"
head -c 20 "$T/train.en" > "$T/short.en"
expect_exit 1 "corpus sides of different lengths" "$TFM" shortlist -q -m "$M" --src "$T/short.en" --tgt "$T/train.de" -o "$T/x.txt"
check "names both files" contains "$ERR" "short.en"
check "nothing written" [ ! -e "$T/x.txt" ]
expect_exit 1 "missing corpus" "$TFM" shortlist -q -m "$M" --src "$T/nope.en" --tgt "$T/train.de" -o "$T/x.txt"
check "names it" contains "$ERR" "nope.en"

# ---- translate: a whole-vocabulary list is no list; a real one is batch invariant ----
head -40 "$T/train.en" > "$T/in.en"
echo "a sentence never seen with Zebra 12345" >> "$T/in.en"
for p in fp32 int8; do
  expect_exit 0 "$p without shortlist" "$TFM" translate -q -m "$M" --precision $p --beam 4 < "$T/in.en"
  echo "$OUT" > "$T/none.$p"
  expect_exit 0 "$p whole-vocabulary shortlist" "$TFM" translate -q -m "$M" --precision $p --beam 4 --shortlist "$T/all.txt" < "$T/in.en"
  echo "$OUT" > "$T/all.$p"
  check "$p: whole-vocabulary shortlist byte-identical to none" cmp -s "$T/none.$p" "$T/all.$p"
  expect_exit 0 "$p shortlist, batch 1, 1 thread" "$TFM" translate -q -m "$M" --precision $p --beam 4 --batch-size 1 --threads 1 \
    --scores --shortlist "$T/sl.txt" < "$T/in.en"
  echo "$OUT" > "$T/b1.$p"
  expect_exit 0 "$p shortlist, batch 7, 2 threads" "$TFM" translate -q -m "$M" --precision $p --beam 4 --batch-size 7 --threads 2 \
    --scores --shortlist "$T/sl.txt" < "$T/in.en"
  check "$p: shortlist output does not depend on batch and threads" [ "$OUT" = "$(cat "$T/b1.$p")" ]
  check "$p: one line per input" [ "$(wc -l < "$T/b1.$p")" -eq "$(wc -l < "$T/in.en")" ]
done
# int8 with an fp32 output layer on the list (TFM_SHORTLIST_OUT=fp32): invariant too; a bad value is an error
expect_exit 0 "int8, fp32 output layer, batch 1" env TFM_SHORTLIST_OUT=fp32 "$TFM" translate -q -m "$M" --precision int8 --beam 4 \
  --batch-size 1 --threads 1 --scores --shortlist "$T/sl.txt" < "$T/in.en"
echo "$OUT" > "$T/f1.int8"
expect_exit 0 "int8, fp32 output layer, batch 7" env TFM_SHORTLIST_OUT=fp32 "$TFM" translate -q -m "$M" --precision int8 --beam 4 \
  --batch-size 7 --threads 2 --scores --shortlist "$T/sl.txt" < "$T/in.en"
check "int8 fp32 output layer: batch and thread invariant" [ "$OUT" = "$(cat "$T/f1.int8")" ]
expect_exit 1 "TFM_SHORTLIST_OUT=bogus" env TFM_SHORTLIST_OUT=bogus "$TFM" translate -q -m "$M" --precision int8 --shortlist "$T/sl.txt" < /dev/null
check "names the variable" contains "$ERR" "TFM_SHORTLIST_OUT"
expect_exit 0 "translate logs the candidates" "$TFM" translate -m "$M" --shortlist "$T/sl.txt" < "$T/in.en"
check "candidates per batch logged" contains "$ERR" "candidates per batch"
expect_exit 0 "eval with a shortlist" "$TFM" eval -m "$M" --src "$T/in.en" --ref "$T/in.en" --shortlist "$T/all.txt"
check "eval prints BLEU" contains "$OUT" "BLEU"
expect_exit 2 "eval --shortlist with --no-translate" "$TFM" eval -m "$M" --src "$T/in.en" --ref "$T/in.en" --shortlist "$T/all.txt" --no-translate

# ---- error paths: each names the file, before any input is read ----
expect_exit 1 "missing shortlist" "$TFM" translate -m "$M" --shortlist "$T/none.txt" < /dev/null
check "names the missing file" contains "$ERR" "none.txt"
head -c $(( $(wc -c < "$T/sl.txt") - 7 )) "$T/sl.txt" > "$T/trunc.txt"
expect_exit 1 "truncated shortlist" "$TFM" translate -m "$M" --shortlist "$T/trunc.txt" < /dev/null
check "truncated: says so" contains "$ERR" "truncated"
check "truncated: names the file" contains "$ERR" "trunc.txt"
head -n 3 "$T/sl.txt" > "$T/trunc2.txt"
expect_exit 1 "shortlist cut at a line" "$TFM" translate -m "$M" --shortlist "$T/trunc2.txt" < /dev/null
check "cut at a line: truncated" contains "$ERR" "truncated"
sed '5s/^\([0-9]*\) /\1 1/' "$T/sl.txt" > "$T/bad.txt"   # a changed id, the checksum left as it was
check "the damaged copy differs" [ "$(cat "$T/sl.txt")" != "$(cat "$T/bad.txt")" ]
expect_exit 1 "damaged shortlist" "$TFM" translate -m "$M" --shortlist "$T/bad.txt" < /dev/null
check "damaged: checksum mismatch" contains "$ERR" "checksum mismatch"
expect_exit 0 "another BPE" "$TFM" bpe learn --vocab-size 300 -o "$T/bpe2.model" "$T/corpus.txt"
expect_exit 0 "a model of another vocabulary" "$MAKE_MODEL" "$T/m2.safetensors" configs/tiny.ini "$T/bpe2.model" 1
expect_exit 1 "shortlist of another vocabulary" "$TFM" translate -m "$T/m2.safetensors" --shortlist "$T/sl.txt" < /dev/null
check "another vocabulary: says so" contains "$ERR" "another vocabulary"
expect_exit 1 "eval: a bad shortlist fails before any work" "$TFM" eval -m "$M" --src "$T/in.en" --ref "$T/in.en" --shortlist "$T/bad.txt"
check "eval: names the file" contains "$ERR" "bad.txt"
finish
