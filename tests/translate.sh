#!/usr/bin/env bash
# translate.sh — tfm translate from the command line, on a tiny model with
# random weights (built by build/dev/make_model from a BPE learned
# here): usage, bad models, output order and count, streaming, n-best and
# score formats, bad input lines, batch/thread invariance of the output
# text, training checkpoints and averaged models.
cd "$(dirname "$0")/.." && source tests/lib.sh
MAKE_MODEL=${TFM_BUILD:-build}/dev/make_model
if ! [ -x "$MAKE_MODEL" ]; then fail "$MAKE_MODEL not built (make tests)"; finish; exit; fi

# ---- help and usage errors (no model needed) ----
expect_exit 0 "--help" "$TFM" translate --help
for w in "-m, --model" --beam --alpha --max-len-a --max-len-b --nbest --scores --batch-size --threads --precision "example:" \
         "LINE<TAB>RANK<TAB>SCORE<TAB>LOGPROB<TAB>TEXT"; do
  check "help mentions $w" contains "$OUT" "$w"
done
expect_exit 2 "no model" "$TFM" translate
check "no model: says -m" contains "$ERR" "-m MODEL"
expect_exit 2 "unknown option" "$TFM" translate -m x --bogus
check "unknown option named" contains "$ERR" "--bogus"
expect_exit 2 "--beam 0" "$TFM" translate -m x --beam 0
expect_exit 2 "--beam abc" "$TFM" translate -m x --beam abc
expect_exit 2 "--alpha -1" "$TFM" translate -m x --alpha -1
expect_exit 2 "--nbest 0" "$TFM" translate -m x --nbest 0
expect_exit 2 "--batch-size 0" "$TFM" translate -m x --batch-size 0
expect_exit 2 "-m without value" "$TFM" translate -m

# ---- a tokenizer and random models ----
for i in $(seq 1 150); do
  echo "the quick brown fox number $i jumps over the lazy dog and runs into the forest"
  echo "der schnelle braune Fuchs Nummer $i springt über den faulen Hund und läuft in den Wald"
done > "$T/corpus.txt"
expect_exit 0 "learn a BPE" "$TFM" bpe learn --vocab-size 400 -o "$T/bpe.model" "$T/corpus.txt"
M="$T/model.safetensors"
expect_exit 0 "make a random model" "$MAKE_MODEL" "$M" configs/tiny.ini "$T/bpe.model" 1
expect_exit 0 "make a training checkpoint" "$MAKE_MODEL" "$T/ckpt.safetensors" configs/tiny.ini "$T/bpe.model" 1 train
expect_exit 0 "make a pre-norm model" "$MAKE_MODEL" "$T/pre.safetensors" configs/tiny.ini "$T/bpe.model" 2 --set model.norm=pre
if ! [ -s "$M" ]; then fail "no model to test with"; finish; exit; fi

# ---- missing or corrupt model: a clear error, before reading any input ----
# stdin is a FIFO that nobody writes: reading it would block until the timeout.
mkfifo "$T/never"
exec 3<>"$T/never"
bad_model() {  # description, model path, expected text in the error
  expect_exit 1 "$1" timeout 20 "$TFM" translate -m "$2" <&3
  check "$1: names the file" contains "$ERR" "$2"
  [ -n "${3:-}" ] && check "$1: says '$3'" contains "$ERR" "$3"
  check "$1: nothing on stdout" test -z "$OUT"
}
bad_model "missing model" "$T/nope.safetensors"
head -c 3000 "$M" > "$T/truncated.safetensors"
bad_model "truncated model" "$T/truncated.safetensors"
head -c 20000 /dev/urandom > "$T/garbage.safetensors"
bad_model "garbage model" "$T/garbage.safetensors"
mkdir -p "$T/dir.safetensors"
bad_model "directory as model" "$T/dir.safetensors"
exec 3>&-

# ---- one output line per input line, in order; empty lines stay empty ----
{
  echo "the quick brown fox"
  echo ""
  echo "der faule Hund springt"
  echo "   "
  sed -n '1,36p' "$T/corpus.txt"
  printf 'a last line without newline'
} > "$T/in.txt"
NIN=$(wc -l < "$T/in.txt"); NIN=$((NIN + 1))
expect_exit 0 "translate" "$TFM" translate -m "$M" --threads 1 < "$T/in.txt"
echo "$OUT" > "$T/out1.txt"
check "as many lines out as in ($NIN)" test "$(printf '%s\n' "$OUT" | wc -l)" -eq "$NIN"
check "empty line -> empty line" test -z "$(sed -n 2p "$T/out1.txt")"
check "blank line -> empty line" test -z "$(sed -n 4p "$T/out1.txt")"
check "non-empty input gives output" test -n "$(sed -n 1p "$T/out1.txt")"
check "config's beam (2) used" contains "$ERR" "beam 2"
check "summary on stderr" contains "$ERR" "lines/s"
check "output is valid UTF-8" iconv -f UTF-8 -t UTF-8 "$T/out1.txt" -o /dev/null

# Threads are this host's (all cores) unless --threads says otherwise, not the
# [run] threads recorded in the model (its training host's: 1 for a MEMBERS=N member).
NP=$(nproc)
expect_exit 0 "a model trained with $((NP + 1)) threads" "$MAKE_MODEL" "$T/thr.safetensors" configs/tiny.ini "$T/bpe.model" 1 --set run.threads=$((NP + 1))
expect_exit 0 "translate without --threads" "$TFM" translate -m "$T/thr.safetensors" < "$T/in.txt"
check "all $NP cores, not the model's $((NP + 1)) threads" contains "$ERR" ", $NP threads"
expect_exit 0 "translate --threads 1" "$TFM" translate -m "$T/thr.safetensors" --threads 1 < "$T/in.txt"
check "--threads 1 wins" contains "$ERR" ", 1 threads"

# the same lines one by one, alone: each output line depends only on its input
{ sed -n 1p "$T/in.txt"; } | "$TFM" translate -m "$M" --threads 1 -q > "$T/one.txt"
check "a line alone = the same line in a chunk" test "$(cat "$T/one.txt")" = "$(sed -n 1p "$T/out1.txt")"
{ sed -n 20p "$T/in.txt"; } | "$TFM" translate -m "$M" --threads 1 -q > "$T/one.txt"
check "line 20 alone = line 20 in a chunk" test "$(cat "$T/one.txt")" = "$(sed -n 20p "$T/out1.txt")"

# ---- bit-identical output text whatever the batch size and thread count ----
# (short outputs: a random model never says EOS, and 2 threads on a busy
# 2-core machine are slow)
L="--max-len-a 0.5 --max-len-b 6"
"$TFM" translate -m "$M" $L --threads 1 -q < "$T/in.txt" > "$T/ref.txt"
for bt in "1 1" "7 2" "64 2" "3 1"; do
  set -- $bt
  "$TFM" translate -m "$M" $L --batch-size "$1" --threads "$2" -q < "$T/in.txt" > "$T/out-$1-$2.txt"
  check "batch $1 threads $2: same output as batch 16 threads 1" cmp -s "$T/ref.txt" "$T/out-$1-$2.txt"
done
"$TFM" translate -m "$T/pre.safetensors" $L --batch-size 1 --threads 1 -q < "$T/in.txt" > "$T/pre-1.txt"
"$TFM" translate -m "$T/pre.safetensors" $L --batch-size 9 --threads 2 -q < "$T/in.txt" > "$T/pre-9.txt"
check "pre-norm: batch/thread invariant" cmp -s "$T/pre-1.txt" "$T/pre-9.txt"
check "pre-norm model translates differently" test "$(cat "$T/pre-1.txt")" != "$(cat "$T/ref.txt")"
"$TFM" translate -m "$M" $L --beam 1 --batch-size 1 --threads 1 -q < "$T/in.txt" > "$T/g1.txt"
"$TFM" translate -m "$M" $L --beam 1 --batch-size 10 --threads 2 -q < "$T/in.txt" > "$T/g10.txt"
check "greedy: batch/thread invariant" cmp -s "$T/g1.txt" "$T/g10.txt"
# bf16 products (emulated where the CPU lacks AVX512_BF16): as invariant; the
# scores differ from fp32's (the text of a random model may or may not)
"$TFM" translate -m "$M" $L --precision bf16 --batch-size 1 --threads 1 --scores < "$T/in.txt" > "$T/b1.txt" 2> "$T/b1.err"
check "bf16: says how it runs" grep -q "bf16 products: " "$T/b1.err"
# and says what runs: decoding's products are tfm's kernel (or the emulation),
# never oneDNN's matmul, whatever route training's products take
if "$TFM" info | grep -q "^bf16 translation: AVX512_BF16 kernel"; then want="AVX512_BF16 kernel"; else want="emulated"; fi
check "bf16: the log names what decoding runs ($want)" grep -q "bf16 products: $want" "$T/b1.err"
check "bf16: the log does not name oneDNN" bash -c '! grep -q "oneDNN" "$1"' _ "$T/b1.err"
# (TFM_BF16_PRODUCTS cleared: CI runs this file with the kernel forced, and a
# forced kernel on a CPU without AVX512_BF16 stops, as the next check says)
env -u TFM_BF16_PRODUCTS TFM_CPU_FEATURES=-avx512_bf16 "$TFM" translate -m "$M" $L --precision bf16 --threads 1 --scores < "$T/in.txt" > "$T/b1e.txt" 2> "$T/b1e.err"
check "bf16, AVX512_BF16 masked off: the log says emulated" grep -q "bf16 products: emulated" "$T/b1e.err"
check "bf16, AVX512_BF16 masked off: a line per line" test "$(wc -l < "$T/b1e.txt")" -eq "$(wc -l < "$T/b1.txt")"
expect_exit 1 "bf16 kernel forced, AVX512_BF16 masked off" env TFM_BF16_PRODUCTS=kernel TFM_CPU_FEATURES=-avx512_bf16 "$TFM" translate -m "$M" $L --precision bf16 --threads 1 < "$T/in.txt"
check "bf16 kernel forced, AVX512_BF16 masked off: says why" contains "$ERR" "TFM_BF16_PRODUCTS=kernel: this CPU lacks AVX512_BF16"
check "bf16 kernel forced, AVX512_BF16 masked off: writes no translation" test -z "$OUT"
check "bf16: says how much memory the weights take" grep -q "model weights in memory .* MB (bf16)" "$T/b1.err"
"$TFM" translate -m "$M" $L --precision bf16 --batch-size 7 --threads 2 --scores -q < "$T/in.txt" > "$T/b7.txt"
check "bf16: batch/thread invariant" cmp -s "$T/b1.txt" "$T/b7.txt"
"$TFM" translate -m "$M" $L --precision fp32 --threads 1 --scores -q < "$T/in.txt" > "$T/f1.txt"
check "bf16: same line count as fp32" test "$(wc -l < "$T/b1.txt")" -eq "$(wc -l < "$T/f1.txt")"
check "bf16: scores differ from fp32's" test "$(cut -f2- "$T/b1.txt")" != "$(cut -f2- "$T/f1.txt")"
expect_exit 2 "--precision fp16" "$TFM" translate -m "$M" --precision fp16
check "--precision fp16: names the choices" contains "$ERR" "fp32, bf16 or int8"
# int8 products: as invariant, the scalar model (what CPUs without AVX512_VNNI
# run) gives the same bytes as the kernel, and the scores differ from fp32's
"$TFM" translate -m "$M" $L --precision int8 --batch-size 1 --threads 1 --scores < "$T/in.txt" > "$T/i1.txt" 2> "$T/i1.err"
check "int8: says how it runs" grep -q "int8 products: " "$T/i1.err"
check "int8: says how much memory the weights take" grep -q "model weights in memory .* MB (int8)" "$T/i1.err"
"$TFM" translate -m "$M" $L --precision int8 --batch-size 7 --threads 2 --scores -q < "$T/in.txt" > "$T/i7.txt"
check "int8: batch/thread invariant" cmp -s "$T/i1.txt" "$T/i7.txt"
TFM_INT8_KERNEL=model "$TFM" translate -m "$M" $L --precision int8 --batch-size 5 --threads 2 --scores < "$T/in.txt" > "$T/im.txt" 2> "$T/im.err"
check "int8: the scalar model is forced" grep -q "int8 products: scalar model" "$T/im.err"
check "int8: the scalar model translates as the kernel" cmp -s "$T/i1.txt" "$T/im.txt"
TFM_INT8_KERNEL=amx-model "$TFM" translate -m "$M" $L --precision int8 --batch-size 5 --threads 2 --scores < "$T/in.txt" > "$T/ia.txt" 2> "$T/ia.err"
check "int8: the AMX loops' model is forced" grep -q "int8 products: scalar model of the AMX kernel" "$T/ia.err"
check "int8: the AMX loops translate as the kernel" cmp -s "$T/i1.txt" "$T/ia.txt"
# oneDNN's int8 matmul (where it has VNNI or AMX-INT8): the same bytes, any batch and threads
if TFM_INT8_KERNEL=onednn "$TFM" info > /dev/null 2>&1; then
  TFM_INT8_KERNEL=onednn "$TFM" translate -m "$M" $L --precision int8 --batch-size 7 --threads 2 --scores < "$T/in.txt" > "$T/io.txt" 2> "$T/io.err"
  check "int8: oneDNN is forced" grep -q "int8 products: oneDNN matmul" "$T/io.err"
  check "int8: oneDNN translates as the kernel (batch 7, 2 threads)" cmp -s "$T/i1.txt" "$T/io.txt"
  TFM_INT8_KERNEL=onednn "$TFM" translate -m "$M" $L --precision int8 --batch-size 1 --threads 1 --scores -q < "$T/in.txt" > "$T/io1.txt"
  check "int8: oneDNN translates as the kernel (batch 1, 1 thread)" cmp -s "$T/i1.txt" "$T/io1.txt"
else
  skip "oneDNN has no exact int8 path here (no VNNI or AMX-INT8, or built without it): its route is not run"
fi
# the choice follows the features tfm sees: VNNI masked (and AMX-INT8, which
# needs no VNNI), the scalar model; a kernel the CPU cannot run, or a
# misspelt one, is an error that says why
TFM_CPU_FEATURES=-avx512_vnni,-amx_int8 "$TFM" translate -m "$M" $L --precision int8 --threads 1 --scores < "$T/in.txt" > "$T/iv.txt" 2> "$T/iv.err"
check "int8: -avx512_vnni,-amx_int8 runs the scalar model" grep -q "int8 products: scalar model: AVX512_VNNI not found" "$T/iv.err"
check "int8: ... which translates as the kernel" cmp -s "$T/i1.txt" "$T/iv.txt"
TFM_CPU_FEATURES=-avx512_vnni TFM_INT8_KERNEL=vnni expect_exit 1 "TFM_INT8_KERNEL=vnni, VNNI masked" "$TFM" translate -m "$M" --precision int8 < "$T/in.txt"
check "vnni without VNNI: says why" contains "$ERR" "lacks AVX512_VNNI"
TFM_INT8_KERNEL=avx expect_exit 1 "TFM_INT8_KERNEL=avx" "$TFM" translate -m "$M" --precision int8 < "$T/in.txt"
check "a misspelt int8 kernel: names the choices" contains "$ERR" "expected model, vnni, amx, amx-model or onednn"
check "int8: same line count as fp32" test "$(wc -l < "$T/i1.txt")" -eq "$(wc -l < "$T/f1.txt")"
check "int8: scores differ from fp32's" test "$(cut -f2- "$T/i1.txt")" != "$(cut -f2- "$T/f1.txt")"
"$TFM" translate -m "$M" -m "$M" $L --precision int8 --threads 1 --scores -q < "$T/in.txt" > "$T/ie.txt"
check "int8: an ensemble of a model with itself translates as the model" cmp -s "$T/i1.txt" "$T/ie.txt"

# ---- a training checkpoint and an averaged model translate too ----
"$TFM" translate -m "$T/ckpt.safetensors" --threads 1 -q < "$T/in.txt" > "$T/ckpt.txt"
check "training checkpoint = model file with the same weights" cmp -s "$T/out1.txt" "$T/ckpt.txt"
if "$TFM" average -o "$T/avg.safetensors" "$M" "$T/ckpt.safetensors" 2>/dev/null; then
  "$TFM" translate -m "$T/avg.safetensors" --threads 1 -q < "$T/in.txt" > "$T/avg.txt"
  check "average of two equal models = the model" cmp -s "$T/out1.txt" "$T/avg.txt"
else
  fail "tfm average of two checkpoints failed"
fi

# ---- options override the checkpoint's [decode] section ----
expect_exit 0 "--beam 3 --alpha 1 --max-len-a 0 --max-len-b 4" \
  "$TFM" translate -m "$M" --threads 1 --beam 3 --alpha 1 --max-len-a 0 --max-len-b 4 < "$T/in.txt"
check "beam 3 used" contains "$ERR" "beam 3"
check "alpha 1 used" contains "$ERR" "alpha 1"
check "max length used" contains "$ERR" "0*|x|+4"
expect_exit 2 "--nbest above the beam" "$TFM" translate -m "$M" --nbest 5 < /dev/null
check "nbest error names the beam" contains "$ERR" "beam"

# ---- n-best: LINE RANK SCORE LOGPROB TEXT, best first ----
printf 'the quick brown fox\n\nder Hund\n' > "$T/nb.txt"
expect_exit 0 "--nbest 3" "$TFM" translate -m "$M" --threads 1 --beam 3 --nbest 3 < "$T/nb.txt"
echo "$OUT" > "$T/nb.out"
check "n-best: 3 + 1 + 3 lines" test "$(wc -l < "$T/nb.out")" -eq 7
check "n-best: 5 tab-separated fields" test "$(awk -F'\t' 'NF != 5' "$T/nb.out" | wc -l)" -eq 0
check "n-best: line numbers" test "$(cut -f1 "$T/nb.out" | tr '\n' ' ')" = "1 1 1 2 3 3 3 "
check "n-best: ranks" test "$(cut -f2 "$T/nb.out" | tr '\n' ' ')" = "1 2 3 1 1 2 3 "
check "n-best: empty line has score 0 and no text" test "$(sed -n 4p "$T/nb.out")" = "$(printf '2\t1\t0.000000\t0.000000\t')"
check "n-best: scores non-increasing per line" awk -F'\t' '$1 == l && $3 > s + 1e-9 { exit 1 } { l = $1; s = $3 }' "$T/nb.out"
check "n-best: score = logprob / lp, both <= 0" awk -F'\t' '$3 > 0 || $4 > 0 { exit 1 }' "$T/nb.out"
"$TFM" translate -m "$M" --threads 1 --beam 3 -q < "$T/nb.txt" > "$T/nb1.txt"
check "n-best rank 1 = the 1-best output" test "$(awk -F'\t' '$2 == 1 { print $5 }' "$T/nb.out")" = "$(cat "$T/nb1.txt")"

# ---- --scores: TEXT<TAB>SCORE<TAB>LOGPROB ----
expect_exit 0 "--scores" "$TFM" translate -m "$M" --threads 1 --beam 3 --scores < "$T/nb.txt"
check "--scores: 3 lines" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 3
check "--scores: numbers appended" test "$(printf '%s\n' "$OUT" | grep -cE $'\t-?[0-9]+\\.[0-9]{6}\t-?[0-9]+\\.[0-9]{6}$')" -eq 3
check "--scores: same score as n-best rank 1" test "$(printf '%s\n' "$OUT" | head -1 | cut -f2)" = "$(head -1 "$T/nb.out" | cut -f3)"

# ---- invalid UTF-8: U+FFFD and one warning; long lines: truncated, named ----
printf 'the fox \xff\xfe jumps\nfine line\nbad \xc3 again\n' > "$T/bad.txt"
expect_exit 0 "invalid UTF-8" "$TFM" translate -m "$M" --threads 1 < "$T/bad.txt"
check "invalid UTF-8: 3 lines out" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 3
check "invalid UTF-8: one warning" test "$(grep -c 'invalid UTF-8' <<< "$ERR")" -eq 1
check "invalid UTF-8: the warning names line 1" contains "$ERR" "line 1: invalid UTF-8"
{ echo "short"; for i in $(seq 1 400); do printf 'word%d ' "$i"; done; echo; echo "short again"; } > "$T/long.txt"
expect_exit 0 "a line longer than max_positions" "$TFM" translate -m "$M" --threads 1 --max-len-a 0 --max-len-b 5 < "$T/long.txt"
check "long line: 3 lines out" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 3
check "long line: warning names line 2" contains "$ERR" "line 2:"
check "long line: says truncated" contains "$ERR" "truncated"

# ---- streaming: an output line appears while the input is still open ----
mkfifo "$T/stream"
"$TFM" translate -m "$M" --threads 1 -q < "$T/stream" > "$T/stream.out" 2> "$T/stream.err" &
pid=$!
exec 4> "$T/stream"
echo "the quick brown fox" >&4
for _ in $(seq 1 300); do [ "$(wc -l < "$T/stream.out")" -ge 1 ] && break; sleep 0.1; done
check "streaming: first output before the input ends" test "$(wc -l < "$T/stream.out")" -eq 1
echo "der Hund" >&4
for _ in $(seq 1 300); do [ "$(wc -l < "$T/stream.out")" -ge 2 ] && break; sleep 0.1; done
check "streaming: second output before the input ends" test "$(wc -l < "$T/stream.out")" -eq 2
exec 4>&-
wait "$pid"
check "streaming: exit 0 at end of input" test $? -eq 0
printf 'the quick brown fox\nder Hund\n' | "$TFM" translate -m "$M" --threads 1 -q > "$T/batch.out"
check "streaming: same text as all at once" cmp -s "$T/stream.out" "$T/batch.out"

# ---- -i / -o, .gz input ----
"$TFM" translate -m "$M" --threads 1 -q < "$T/in.txt" > "$T/ref.out"
expect_exit 0 "-i FILE -o FILE" "$TFM" translate -m "$M" --threads 1 -q -i "$T/in.txt" -o "$T/io.out"
check "-i/-o: nothing on stdout" test -z "$OUT"
check "-i/-o: the same translations as stdin/stdout" cmp -s "$T/io.out" "$T/ref.out"
gzip -c "$T/in.txt" > "$T/in.txt.gz"
expect_exit 0 "-i FILE.gz" "$TFM" translate -m "$M" --threads 1 -q -i "$T/in.txt.gz" --output="$T/gz.out"
check "-i .gz: the same translations" cmp -s "$T/gz.out" "$T/ref.out"
expect_exit 1 "-i a missing file" "$TFM" translate -m "$M" -i "$T/nope.txt" -o "$T/nope.out"
check "missing input named" contains "$ERR" "$T/nope.txt: cannot open"
check "no output file on error" test ! -e "$T/nope.out"

# ---- habits: repeated options, suggestions, BPE-encoded input ----
expect_exit 2 "a single-valued option twice" "$TFM" translate -m "$M" --beam 2 --beam 3
check "both values named" contains "$ERR" "option --beam given twice ('2' and '3')"
expect_exit 2 "-i twice" "$TFM" translate -m "$M" -i a -i b
expect_exit 2 "a misspelt option" "$TFM" translate -m "$M" --bema 2
check "did you mean" contains "$ERR" "unknown option '--bema' (did you mean --beam?)"
expect_exit 2 "a misspelt flag" "$TFM" translate -m "$M" --score
check "did you mean a flag" contains "$ERR" "(did you mean --scores?)"
printf 'the quick brown fox\n\xe2\x96\x81the \xe2\x96\x81quick \xe2\x96\x81brown\n' > "$T/spm.txt"
expect_exit 0 "sentencepiece-style input" "$TFM" translate -m "$M" --threads 1 -i "$T/spm.txt"
check "warned: ▁ marks" contains "$ERR" "$T/spm.txt line 2 looks BPE-encoded already"
printf 'the qu@@ ick brown fox\n' > "$T/subword.txt"
expect_exit 0 "subword-nmt-style input" "$TFM" translate -m "$M" --threads 1 < "$T/subword.txt"
check "warned: @@ joiners" contains "$ERR" "input line 1 looks BPE-encoded already ('@@ '"
{ cat "$T/in.txt"; printf '@@\nmail me @@ home\n'; } > "$T/plain.txt"   # a stray @@ (Multi30k train.de has a line "@@") is no joiner
expect_exit 0 "plain input" "$TFM" translate -m "$M" --threads 1 -i "$T/plain.txt"
check "plain input: no such warning" test "$(grep -c "BPE-encoded" <<<"$ERR")" -eq 0

# ---- ensembles ----
"$MAKE_MODEL" "$T/m2.safetensors" configs/tiny.ini "$T/bpe.model" 7 >/dev/null 2>&1
expect_exit 0 "a model ensembled with itself" "$TFM" translate -m "$M" -m "$M" --threads 1 --nbest 3 --beam 4 -q -i "$T/in.txt"
"$TFM" translate -m "$M" --threads 1 --nbest 3 --beam 4 -q -i "$T/in.txt" > "$T/alone.nbest"
check "... gives exactly that model's n-best, scores included" test "$OUT" = "$(cat "$T/alone.nbest")"
expect_exit 0 "an ensemble of two models" "$TFM" translate -m "$M" --model "$T/m2.safetensors" --threads 1 -q -i "$T/in.txt"
check "ensemble: one line per input" test "$(wc -l <<<"$OUT")" -eq "$NIN"
check "ensemble: its own translations" test "$OUT" != "$(cat "$T/ref.out")"
"$TFM" bpe learn -q --vocab-size 300 -o "$T/bpe2.model" "$T/corpus.txt"
"$MAKE_MODEL" "$T/other-vocab.safetensors" configs/tiny.ini "$T/bpe2.model" 8 >/dev/null 2>&1
expect_exit 1 "models with other tokenizers" "$TFM" translate -m "$M" -m "$T/other-vocab.safetensors" -i "$T/in.txt"
check "both models named" contains "$ERR" "$M and $T/other-vocab.safetensors have different tokenizers"

# ---- sampling ----
expect_exit 0 "--sample" "$TFM" translate -m "$M" --sample --seed 5 --threads 1 -i "$T/in.txt" -o "$T/s1.out"
check "sampling logged" contains "$ERR" "sampling (temperature 1, top-k 0, seed 5)"
check "samples: one line per input" test "$(wc -l < "$T/s1.out")" -eq "$NIN"
check "samples differ from beam search" test "$(cat "$T/s1.out")" != "$(cat "$T/ref.out")"
"$TFM" translate -m "$M" --sample --seed 5 --threads 2 --batch-size 3 -q < "$T/in.txt" > "$T/s2.out"
check "same seed: the same samples at another batch size and thread count" cmp -s "$T/s1.out" "$T/s2.out"
"$TFM" translate -m "$M" --sample --seed 6 --threads 1 -q -i "$T/in.txt" > "$T/s4.out"
check "another seed: other samples" test "$(cat "$T/s1.out")" != "$(cat "$T/s4.out")"
"$TFM" translate -m "$M" --sample --seed 5 --temperature 0.01 --topk 1 --threads 1 -q -i "$T/in.txt" > "$T/greedy-sample.out"
"$TFM" translate -m "$M" --beam 1 --threads 1 -q -i "$T/in.txt" > "$T/greedy.out"
check "top-1 sampling is greedy search" cmp -s "$T/greedy-sample.out" "$T/greedy.out"
expect_exit 2 "--topk without --sample" "$TFM" translate -m "$M" --topk 5
check "named" contains "$ERR" "options of --sample"
expect_exit 2 "--sample with --beam" "$TFM" translate -m "$M" --sample --beam 4
expect_exit 2 "--sample with --nbest" "$TFM" translate -m "$M" --sample --nbest 2
expect_exit 2 "--temperature 0" "$TFM" translate -m "$M" --sample --temperature 0

finish
