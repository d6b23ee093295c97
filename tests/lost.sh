#!/usr/bin/env bash
# Issue 28: nothing lost, part two. Outputs never overwrite inputs; tensor
# bytes are checksummed; train.tsv does not depend on resumes; work is not
# thrown away at the end; advice names options that exist; and the smaller
# items. Each block failed on main at 345b236. (The readers' items 2, 3 and 8
# are the text-input module's, tested with it.)
cd "$(dirname "$0")/.." && source tests/lib.sh

gen_pairs 200 5 "$T/d"
run_args() {  # run_args DIR -> the options for a tiny run in DIR
  echo --threads 1 -q \
    --set data.train_src="$T/d.src" --set data.train_tgt="$T/d.tgt" \
    --set data.valid_src="$T/d.src" --set data.valid_tgt="$T/d.tgt" \
    --set data.bpe_model="$T/bpe.model" --set data.vocab_size=300 \
    --set train.dir="$1" --set train.batch_tokens=400 --set train.warmup=10 \
    --set train.log_interval=2 --set train.valid_interval=100 --set train.checkpoint_interval=4 \
    --set train.max_steps=4 --set train.keep=3 --set train.average_last=2
}
expect_exit 0 "tiny run" "$TFM" train configs/tiny.ini $(run_args "$T/r")
CK=$(ls "$T/r"/checkpoint-*.safetensors | tail -1)
check "a checkpoint" test -f "$CK"
cp "$CK" "$T/m.st"
head -20 "$T/d.src" > "$T/in.en"

# ---- 1. an output that is an input is refused before any work -------------
same() {  # same DESC FILE CMD...: exit 1, says "same file", FILE unchanged
  local desc=$1 file=$2; shift 2
  local sum; sum=$(md5sum < "$file")
  expect_exit 1 "$desc" "$@"
  check "$desc: says it is the same file ($(head -c 200 <<< "$ERR"))" contains "$ERR" "is the same file as"
  check "$desc: $file unchanged" test "$(md5sum < "$file")" = "$sum"
}
same "translate -o MODEL" "$T/m.st" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/m.st" --beam 1
same "translate -i X -o X" "$T/in.en" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/in.en" --beam 1
same "translate < X -o X" "$T/in.en" bash -c '"$0" translate -q -m "$1" -o "$2" --beam 1 < "$2"' "$TFM" "$T/m.st" "$T/in.en"
ln -s in.en "$T/in.link"; ln "$T/in.en" "$T/in.hard"
same "translate -o a symlink to the input" "$T/in.en" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/in.link" --beam 1
same "translate -o a hard link to the input" "$T/in.en" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/in.hard" --beam 1
same "eval --out SRC" "$T/d.src" "$TFM" eval -q -m "$T/m.st" --src "$T/d.src" --ref "$T/d.tgt" --out "$T/d.src" --beam 1
same "eval --out REF" "$T/d.tgt" "$TFM" eval -q -m "$T/m.st" --src "$T/d.src" --ref "$T/d.tgt" --out "$T/d.tgt" --beam 1
same "eval --out MODEL" "$T/m.st" "$TFM" eval -q -m "$T/m.st" --src "$T/d.src" --ref "$T/d.tgt" --out "$T/m.st" --beam 1
cp "$T/d.src" "$T/learn.txt"
same "bpe learn -o F F" "$T/learn.txt" "$TFM" bpe learn -q --vocab-size 280 -o "$T/learn.txt" "$T/learn.txt"
same "average -o an input" "$CK" "$TFM" average -o "$CK" "$T/r"
same "average -o FILE FILE" "$T/m.st" "$TFM" average -o "$T/m.st" "$T/m.st"
cp -r "$T/r" "$T/r2"
cp "$T/d.src" "$T/r2/train.tsv"   # a corpus where tfm writes its log
same "train with train_src = the run's train.tsv" "$T/r2/train.tsv" \
  "$TFM" train configs/tiny.ini $(run_args "$T/r2") --set data.train_src="$T/r2/train.tsv" --set train.max_steps=6
# a different file of the same content is fine, and so is a stream
expect_exit 0 "translate -o another file" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/out.de" --beam 1
check "20 lines translated" test "$(wc -l < "$T/out.de")" -eq 20
expect_exit 0 "translate -i /dev/stdin -o /dev/stdout" bash -c '"$0" translate -q -m "$1" -i /dev/stdin -o /dev/stdout --beam 1 < "$2"' "$TFM" "$T/m.st" "$T/in.en"

# ---- 6. an output in a missing directory fails before the work -------------
expect_exit 1 "eval --out nodir/x" "$TFM" eval -q -m "$T/m.st" --src "$T/d.src" --ref "$T/d.tgt" --out "$T/nodir/x" --beam 1
check "eval: names the missing directory" contains "$ERR" "$T/nodir does not exist"
check "eval: failed before scoring (nothing on stdout)" test -z "$OUT"
expect_exit 1 "average -o nodir/x" "$TFM" average -o "$T/nodir/x" "$T/r"
check "average: names the missing directory" contains "$ERR" "$T/nodir does not exist"
check "average: failed before averaging" bash -c "! grep -q averaging '$T/err'"
expect_exit 1 "bpe learn -o nodir/x" "$TFM" bpe learn -q --vocab-size 280 -o "$T/nodir/x" "$T/d.src"
check "bpe learn: names the missing directory" contains "$ERR" "$T/nodir does not exist"
expect_exit 1 "translate -o nodir/x" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" -o "$T/nodir/x" --beam 1
check "translate: names the missing directory" contains "$ERR" "$T/nodir does not exist"

finish
