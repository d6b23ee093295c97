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
cp "$CK" "$T/pristine.st"
# each block starts from whole fixtures (on a tfm with the bugs, block 1 destroys them)
restore() { cp "$T/pristine.st" "$T/m.st"; cp "$T/pristine.st" "$CK"; head -20 "$T/d.src" > "$T/in.en"; gen_pairs 200 5 "$T/d"; }

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
restore
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

# ---- 4. tensor bytes are checksummed: one flipped bit is an error naming the
restore
#         tensor, in every loader; files without checksums load with a notice -
flip() {  # flip IN OUT TENSOR: OUT = IN with the exponent's top bit of TENSOR's first weight flipped
  /usr/bin/python3 - "$1" "$2" "$3" <<'PYEOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h[sys.argv[3]]['data_offsets'][0]
b[at + 3] ^= 0x40                     # 0.01 -> 1e36: huge, finite
print(struct.unpack('<f', b[at:at + 4])[0], file=sys.stderr)
open(sys.argv[2], 'wb').write(b)
PYEOF
}
unsum() {  # unsum IN OUT: OUT = IN without the checksums (as another tool or an older tfm writes it)
  /usr/bin/python3 - "$1" "$2" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
del h['__metadata__']['crc32c']
j = json.dumps(h, separators=(',', ':')).encode()
j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PYEOF
}
W=encoder.layers.0.fc1.weight
flip "$T/m.st" "$T/flip.st" $W 2>/dev/null
bad_tensor() {  # bad_tensor DESC CMD...
  local desc=$1; shift
  expect_exit 1 "$desc" "$@"
  check "$desc: names the file and the tensor ($(head -c 300 <<< "$ERR"))" \
    contains "$ERR" "$T/flip.st: tensor '$W': checksum mismatch"
}
bad_tensor "translate, a flipped bit" "$TFM" translate -q -m "$T/flip.st" -i "$T/in.en" --beam 1
check "translate: no output" test -z "$OUT"
bad_tensor "eval, a flipped bit" "$TFM" eval -q -m "$T/flip.st" --src "$T/d.src" --ref "$T/d.tgt" --beam 1
bad_tensor "average, a flipped bit" "$TFM" average -o "$T/avg.st" "$T/m.st" "$T/flip.st"
check "average: nothing written" test ! -e "$T/avg.st"
flip "$CK" "$T/flipck.st" optimizer.adam_v 2>/dev/null
cp -r "$T/r" "$T/rflip"; mv "$T/flipck.st" "$T/rflip/$(basename "$CK")"
expect_exit 1 "resume from a flipped Adam moment" "$TFM" train configs/tiny.ini $(run_args "$T/rflip") --set train.max_steps=8
check "resume: names the tensor ($(head -c 300 <<< "$ERR"))" contains "$ERR" "tensor 'optimizer.adam_v': checksum mismatch"
# the metadata: a changed config byte
/usr/bin/python3 - "$T/m.st" "$T/meta.st" <<'PYEOF'
import sys
b = open(sys.argv[1], 'rb').read()
i = b.index(b'dropout = 0.1')
open(sys.argv[2], 'wb').write(b[:i] + b'dropout = 0.7' + b[i + 13:])
PYEOF
expect_exit 1 "a changed config in the metadata" "$TFM" translate -q -m "$T/meta.st" -i "$T/in.en" --beam 1
check "metadata checksum named" contains "$ERR" "$T/meta.st: the metadata fail their checksum"
# the table CRC (a CPU without SSE4.2) reads the same checksums
expect_exit 0 "checksums by table (TFM_CPU_FEATURES=-sse4_2)" env TFM_CPU_FEATURES=-sse4_2 "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" --beam 1
check "by table: same translations" test "$OUT" = "$(cat "$T/out.de")"
expect_exit 1 "by table: a flipped bit caught" env TFM_CPU_FEATURES=-sse4_2 "$TFM" translate -q -m "$T/flip.st" -i "$T/in.en" --beam 1
# without checksums: a notice, and the same translations
unsum "$T/m.st" "$T/old.st"
expect_exit 0 "a file without checksums loads" "$TFM" translate -m "$T/old.st" -i "$T/in.en" --beam 1
check "one notice" test "$(grep -c 'no tensor checksums' <<< "$ERR")" -eq 1
check "same translations" test "$OUT" = "$(cat "$T/out.de")"
# a flipped bit in a file without checksums cannot be caught: it loads (documented)
flip "$T/old.st" "$T/oldflip.st" $W 2>/dev/null
expect_exit 0 "no checksums, a flipped bit: loads (nothing to check against)" "$TFM" translate -q -m "$T/oldflip.st" -i "$T/in.en" --beam 1

# ---- 5. train.tsv does not depend on resumes --------------------------------
restore
tsv_args() { echo $(run_args "$1") --set train.log_interval=5 --set train.checkpoint_interval=4 --set train.keep=10; }
expect_exit 0 "straight to 24" "$TFM" train configs/tiny.ini $(tsv_args "$T/s1") --set train.max_steps=24
expect_exit 0 "to 9" "$TFM" train configs/tiny.ini $(tsv_args "$T/s2") --set train.max_steps=9
expect_exit 0 "then to 17" "$TFM" train configs/tiny.ini $(tsv_args "$T/s2") --set train.max_steps=17
rm "$T/s2/checkpoint-00000017.safetensors"   # and a resume from an older checkpoint (16)
expect_exit 0 "then to 24" "$TFM" train configs/tiny.ini $(tsv_args "$T/s2") --set train.max_steps=24
cols() { cut -f1-7 "$1"; }   # step epoch loss nll ppl lr gnorm (not the times)
check "train.tsv: the same rows after resumes ($(diff <(cols "$T/s1/train.tsv") <(cols "$T/s2/train.tsv") | head -4 | tr '\n' ' '))" \
  cmp -s <(cols "$T/s1/train.tsv") <(cols "$T/s2/train.tsv")
check "train.tsv: rows 5 10 15 20 24" test "$(cut -f1 "$T/s1/train.tsv" | tr '\n' ' ')" = "step 5 10 15 20 24 "

# ---- 7. the advice for invalid UTF-8 in training data names an option that exists
restore
cp "$T/d.src" "$T/bad.src"; printf 'w1 \xff w2\n' >> "$T/bad.src"; cp "$T/d.tgt" "$T/bad.tgt"; echo v2 v1 >> "$T/bad.tgt"
expect_exit 1 "train, invalid UTF-8, no BPE model yet" "$TFM" train configs/tiny.ini $(run_args "$T/r7") \
  --set data.train_src="$T/bad.src" --set data.train_tgt="$T/bad.tgt" --set data.bpe_model="$T/r7bpe.model"
check "names the line" contains "$ERR" "$T/bad.src:201: invalid UTF-8"
check "advises tfm bpe learn --skip-invalid ($(head -c 400 <<< "$ERR"))" contains "$ERR" "tfm bpe learn --skip-invalid"
advice=$(grep -o "'tfm bpe learn [^']*'" "$T/err" | tr -d "'")
expect_exit 0 "the advice works" bash -c "'$TFM' ${advice#tfm } -q"
expect_exit 0 "then training works" "$TFM" train configs/tiny.ini $(run_args "$T/r7") \
  --set data.train_src="$T/bad.src" --set data.train_tgt="$T/bad.tgt" --set data.bpe_model="$T/r7bpe.model"

# ---- 9. resume with another [data] bpe_model is refused --------------------
restore
"$TFM" bpe learn -q --vocab-size 290 -o "$T/other.bpe" "$T/d.src" "$T/d.tgt"
cp -r "$T/r" "$T/r9"
expect_exit 1 "resume with another bpe_model" "$TFM" train configs/tiny.ini $(run_args "$T/r9") \
  --set data.bpe_model="$T/other.bpe" --set train.max_steps=8
check "says it is not the run's tokenizer ($(head -c 300 <<< "$ERR"))" contains "$ERR" "is not the tokenizer of the run in $T/r9"
check "no new checkpoint" test ! -e "$T/r9/checkpoint-00000008.safetensors"
cp "$T/bpe.model" "$T/same.bpe"
expect_exit 0 "resume with a copy of the same tokenizer" "$TFM" train configs/tiny.ini $(run_args "$T/r9") \
  --set data.bpe_model="$T/same.bpe" --set train.max_steps=6

# ---- 10. eval on an empty dev set is an error, not perplexity 1 ------------
restore
: > "$T/empty.src"; : > "$T/empty.tgt"
expect_exit 1 "eval on an empty dev set" "$TFM" eval -q -m "$T/m.st" --src "$T/empty.src" --ref "$T/empty.tgt" --beam 1
check "says the dev set is empty" contains "$ERR" "no sentence pairs to score"
check "no perplexity printed" bash -c "! grep -q perplexity '$T/out'"

# ---- 11. bounds and messages ----------------------------------------------
restore
expect_exit 2 "translate --beam 100000" "$TFM" translate -q -m "$T/m.st" -i "$T/in.en" --beam 100000
check "beam bounded as the config caps it ($ERR)" contains "$ERR" "beam = 100000 is out of range [1, 1024]"
expect_exit 2 "bpe learn --vocab-size -5" "$TFM" bpe learn -q --vocab-size -5 -o "$T/x.bpe" "$T/d.src"
check "says the value is bad ($ERR)" contains "$ERR" "vocab_size = -5 is out of range"
expect_exit 2 "a range error" "$TFM" train --dry-run configs/tiny.ini --set model.max_positions=99999999
check "plain integers in range errors ($ERR)" contains "$ERR" "out of range [8, 1048576]"
expect_exit 1 "an empty [train] dir" "$TFM" train configs/tiny.ini $(run_args "$T/r") --set train.dir=
check "names the key ($ERR)" contains "$ERR" "[train] dir is empty"
cp -r "$T/r" "$T/rfull"; rm "$T/rfull/train.tsv"; ln -s /dev/full "$T/rfull/train.tsv"
expect_exit 1 "train.tsv on a full disk" timeout 60 "$TFM" train configs/tiny.ini $(run_args "$T/rfull") --set train.max_steps=12
check "reported at its step ($(head -c 300 <<< "$ERR"))" contains "$ERR" "train.tsv: cannot write the row of step 6: No space left on device"
check "at once: no checkpoint after it" test ! -e "$T/rfull/checkpoint-00000008.safetensors"

finish
