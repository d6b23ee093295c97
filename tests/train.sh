#!/usr/bin/env bash
# tfm train on a generated task (configs/tiny.ini-sized model): the loss
# falls; resume is exact (N straight == N/2 + resume, and == kill -9 +
# resume); kill -9 while checkpoints are being written leaves a loadable
# latest one; SIGINT/SIGTERM write a checkpoint and exit 0; NaN weights are
# caught and never saved; data errors, .gz input, filtering counts, the
# corpus cache; model-shape changes refused, safe changes logged.
cd "$(dirname "$0")/.." && source tests/lib.sh
PY=/usr/bin/python3

gen_pairs 800 1 "$T/train"
gen_pairs 60 2 "$T/valid"

# Common settings: the tiny model pointed at the generated data.
run_args() {  # run_args DIR -> the --set options for a run in DIR
  echo --threads 2 -q \
    --set data.train_src="$T/train.src" --set data.train_tgt="$T/train.tgt" \
    --set data.valid_src="$T/valid.src" --set data.valid_tgt="$T/valid.tgt" \
    --set data.bpe_model="$T/bpe.model" --set data.vocab_size=300 \
    --set train.dir="$1" --set train.batch_tokens=600 --set train.warmup=10 \
    --set train.log_interval=5 --set train.valid_interval=10 --set train.checkpoint_interval=10
}
train() {  # train DIR [more args...]
  local dir=$1; shift
  "$TFM" train configs/tiny.ini $(run_args "$dir") "$@"
}

ckpt() { printf '%s/checkpoint-%08d.safetensors' "$1" "$2"; }

# ---- 1. a straight run: the loss falls, everything is written ------------
expect_exit 0 "straight run" train "$T/a" --set train.max_steps=40 --set train.keep=3 --set train.average_last=3
check "loss falls: $(cut -f3 "$T/a/train.tsv" | sed -n '2p;$p' | tr '\n' ' ')" \
  awk -F'\t' 'NR == 2 { first = $3 } END { exit !($3 < first - 1.0) }' "$T/a/train.tsv"
check "validation ppl falls" \
  awk -F'\t' 'NR == 2 { first = $5 } END { exit !(NR >= 5 && $5 < first) }' "$T/a/valid.tsv"
check "train.tsv rows every log_interval" test "$(wc -l < "$T/a/train.tsv")" -eq 9
check "best.safetensors" test -s "$T/a/best.safetensors"
check "average.safetensors" test -s "$T/a/average.safetensors"
check "keep = 3 checkpoints" test "$(ls "$T/a"/checkpoint-*.safetensors | wc -l)" -eq 3
check "final checkpoint" test -s "$(ckpt "$T/a" 40)"
check "corpus cache written" test -s "$T/a/train.corpus"
check "tokenizer learned and saved" test -s "$T/bpe.model"
check "plot.sh draws a PNG" bash scripts/plot.sh "$T/a" "$T/a.png"
check "PNG file" bash -c "head -c 4 '$T/a.png' | grep -q PNG"

# ---- bf16 products: the same run tracks fp32's; its checkpoints are fp32 ----
expect_exit 0 "bf16 run" train "$T/h" --set train.max_steps=40 --precision bf16
check "bf16: loss at step 40 within 3% of fp32's, not equal: $(tail -1 "$T/h/train.tsv" | cut -f3) vs $(tail -1 "$T/a/train.tsv" | cut -f3)" \
  awk -v a="$(tail -1 "$T/h/train.tsv" | cut -f3)" -v b="$(tail -1 "$T/a/train.tsv" | cut -f3)" \
  'BEGIN { d = (a - b) / b; exit !(a != b && d < 0.03 && d > -0.03) }'
expect_exit 0 "a bf16 run resumes in fp32" train "$T/h" --set train.max_steps=45 --precision fp32
check "bf16 run resumed in fp32: step 45" test -s "$(ckpt "$T/h" 45)"
expect_exit 2 "train --precision int8" train "$T/i8" --precision int8
check "train --precision int8: int8 is for translation" contains "$ERR" "int8 is for tfm translate and eval"
expect_exit 2 "train --set run.precision=int8" train "$T/i8" --set run.precision=int8
check "--set run.precision=int8: refused too" contains "$ERR" "int8 is for tfm translate and eval"
check "no run directory made for an int8 run" test ! -e "$T/i8/train.tsv"

# The log, not quiet: figures, padding waste, filtering counts, cache reuse.
expect_exit 0 "already done" "$TFM" train configs/tiny.ini $(run_args "$T/a" | sed 's/ -q / /') --set train.max_steps=40
check "finished run says so" contains "$ERR" "nothing to do"
expect_exit 0 "more steps, logged" "$TFM" train configs/tiny.ini $(run_args "$T/a" | sed 's/ -q / /') --set train.max_steps=45
check "safe change logged" contains "$ERR" "[train] max_steps: 40 -> 45"
check "resumed" contains "$ERR" "resuming from $(ckpt "$T/a" 40)"
check "cache reused" contains "$ERR" "encoded ids from the cache"
check "padding waste logged" contains "$ERR" "padding waste"
for f in "step 45" "loss " "nll " "ppl " "lr " "gnorm " "tok/s" "ETA "; do
  check "log line has '$f'" contains "$ERR" "$f"
done

# ---- 2. exact resume: 40 straight == 20 + resume to 40 ------------------
expect_exit 0 "first half" train "$T/b" --set train.max_steps=20
expect_exit 0 "second half" train "$T/b" --set train.max_steps=40
check "N/2 + resume == N straight (bit-identical)" same_tensors "$(ckpt "$T/a" 40)" "$(ckpt "$T/b" 40)"
check "tsv rows not repeated on resume" test "$(cut -f1 "$T/b/train.tsv" | sort | uniq -d | wc -l)" -eq 0

# ---- BPE-dropout ([data] bpe_dropout): each epoch's segmentation comes from
#      (seed, epoch), so a run resumed in its second epoch (35 batches an
#      epoch here) rebuilds it: 40 + resume to 80 == 80 straight, bit for bit;
#      and it trains other weights than the plain encoding.
expect_exit 0 "bpe_dropout 0.1: straight run" "$TFM" train configs/tiny.ini $(run_args "$T/bd" | sed 's/ -q / /') \
  --set train.max_steps=80 --set data.bpe_dropout=0.1
check "bpe_dropout: logged" contains "$ERR" "BPE-dropout 0.1: each epoch encodes these pairs again"
expect_exit 0 "bpe_dropout: first half" train "$T/bd2" --set train.max_steps=40 --set data.bpe_dropout=0.1
expect_exit 0 "bpe_dropout: second half" "$TFM" train configs/tiny.ini $(run_args "$T/bd2" | sed 's/ -q / /') \
  --set train.max_steps=80 --set data.bpe_dropout=0.1
check "bpe_dropout: resumed in epoch 2" contains "$ERR" "epoch 2, "
check "bpe_dropout: N/2 + resume == N straight (bit-identical)" same_tensors "$(ckpt "$T/bd" 80)" "$(ckpt "$T/bd2" 80)"
expect_exit 0 "no bpe_dropout: the same 40 steps" train "$T/bd0" --set train.max_steps=40
other_tensors() { ! same_tensors "$1" "$2" 2>/dev/null; }
check "bpe_dropout 0.1 trains other weights than 0" other_tensors "$(ckpt "$T/bd2" 40)" "$(ckpt "$T/bd0" 40)"
expect_exit 0 "bpe_dropout changed on resume" "$TFM" train configs/tiny.ini $(run_args "$T/bd0" | sed 's/ -q / /') \
  --set train.max_steps=45 --set data.bpe_dropout=0.2
check "bpe_dropout changed on resume: the batches differ, said" contains "$ERR" "bpe_dropout changed"
expect_exit 2 "bpe_dropout 1.5 refused" train "$T/bdx" --set data.bpe_dropout=1.5
check "bpe_dropout 1.5: range named" contains "$ERR" "out of range [0, 1]"

# ---- 3. kill -9 while a checkpoint is being written (its temp file exists),
#         three times, checkpoints every step: the latest one always loads,
#         and resuming to 40 matches the straight run bit for bit.
# The watch loop forks nothing (builtins and globs only): a checkpoint's
# temp file lives ~1 ms, and a loop of `ls` calls missed every one of steps
# 25-40 now and then once a step took a few ms.
for k in 5 15 25; do
  "$TFM" train configs/tiny.ini $(run_args "$T/c") --set train.max_steps=40 --set train.checkpoint_interval=1 \
    --set train.keep=2 2>/dev/null &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    compgen -G "$T/c/checkpoint-*.tmp.*" > /dev/null || continue
    latest=-1   # the latest checkpoint's step (the glob sorts them)
    for f in "$T/c"/checkpoint-*.safetensors; do [ -e "$f" ] && { f=${f##*-}; latest=$((10#${f%%.*})); }; done
    [ "$latest" -ge $k ] && { kill -9 $pid; break; }
  done
  wait $pid 2>/dev/null
  rc=$?
  check "kill -9 after step $k landed mid-run (exit $rc)" test $rc -eq 137
done
expect_exit 0 "resume after kill -9" "$TFM" train configs/tiny.ini $(run_args "$T/c" | sed 's/ -q / /') \
  --set train.max_steps=40 --set train.checkpoint_interval=1 --set train.keep=2
check "latest checkpoint loaded without complaint" bash -c "! grep -q 'cannot resume' <<< \"\$1\"" _ "$ERR"
resumed=$(sed -n 's/.*resuming from .*checkpoint-\([0-9]*\)\.safetensors.*/\1/p' <<< "$ERR")
check "resumed from the checkpoint after the last kill (step ${resumed:-none})" test "$((10#${resumed:-0}))" -ge 25
check "stale temp files cleaned up" bash -c "! ls '$T/c'/*.tmp.* 2>/dev/null"
check "kill -9 + resume == straight (bit-identical)" same_tensors "$(ckpt "$T/a" 40)" "$(ckpt "$T/c" 40)"

# ---- 4. SIGINT and SIGTERM: finish the step, checkpoint, exit 0 ----------
for sig in INT TERM; do
  d="$T/sig$sig"
  "$TFM" train configs/tiny.ini $(run_args "$d" | sed 's/ -q / /') --set train.max_steps=100000 2>"$T/sig.err" &
  pid=$!
  while kill -0 $pid 2>/dev/null && { [ ! -s "$d/train.tsv" ] || [ "$(wc -l < "$d/train.tsv")" -lt 2 ]; }; do sleep 0.05; done
  kill -$sig $pid
  wait $pid
  rc=$?
  check "SIG$sig exits 0 (got $rc)" test $rc -eq 0
  err=$(cat "$T/sig.err")
  check "SIG$sig says how to resume" contains "$err" "Resume with: tfm train configs/tiny.ini"
  step=$(sed -n 's/.*interrupted (SIG[A-Z]*) at step \([0-9]*\).*/\1/p' "$T/sig.err")
  check "SIG$sig checkpoint at the stopped step ($step)" test -n "$step" -a -s "$(ckpt "$d" "${step:-0}")"
done

# ---- 5. NaN: a checkpoint whose weights hold a NaN is refused (resume
#         skips it, naming the tensor); one whose Adam moment holds a NaN (a
#         real fault, not a hook) poisons the weights in its first update:
#         every later update is skipped and logged, the run stops after 5 in
#         a row with a clear message, and no checkpoint is written.
poison() {  # poison FILE TENSOR: a NaN as its first value
  $PY - "$1" "$2" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
o = 8 + n + h[sys.argv[2]]['data_offsets'][0]
b[o:o + 4] = struct.pack('<f', float('nan'))
open(p, 'wb').write(b)
EOF
  restamp "$1"   # as if it was saved so: the checksums pass, the NaN checks are what is tested
}
cp -r "$T/b" "$T/nanw"
rm -f "$T/nanw"/checkpoint-0000001* "$T/nanw"/checkpoint-0000003*
poison "$(ckpt "$T/nanw" 40)" encoder.layers.0.final_layer_norm.weight
expect_exit 0 "a NaN weight: resume skips that checkpoint" "$TFM" train configs/tiny.ini \
  $(run_args "$T/nanw" | sed 's/ -q / /') --set train.max_steps=21 --set train.average_last=1
check "NaN weight named" contains "$ERR" \
  "cannot resume from it: $(ckpt "$T/nanw" 40): tensor encoder.layers.0.final_layer_norm.weight holds a non-finite value (nan)"
check "resumed from the one before" contains "$ERR" "resuming from $(ckpt "$T/nanw" 20)"
cp -r "$T/b" "$T/nan"
rm -f "$T/nan"/checkpoint-0000001* "$T/nan"/checkpoint-0000003*
poison "$(ckpt "$T/nan" 40)" optimizer.adam_m
expect_exit 1 "NaN weights stop the run" "$TFM" train configs/tiny.ini $(run_args "$T/nan" | sed 's/ -q / /') \
  --set train.max_steps=80 --set train.checkpoint_interval=100
# Under UBSan (make asan) a NaN reaching src/ops.c's fast_expf is undefined
# behaviour there (a shift of a garbage exponent): say so visibly instead of
# failing on another file's bug; the checks run again once it is fixed.
ub=$(grep -m1 -o 'src/[a-z_]*\.c:[0-9]*:[0-9]*: runtime error: .*' <<< "$ERR" | grep -v 'src/train.c\|src/data.c')
if [ -n "${TFM_ASAN:-}" ] && [ -n "$ub" ]; then
  skip "NaN checks: UBSan stops tfm in the model's kernels first: $ub"
else
  check "NaN skip logged with the step" contains "$ERR" "step 42: loss is NaN; update skipped (1 in a row)"
  check "stops after 5 in a row" contains "$ERR" "5 updates in a row had a NaN/inf loss"
fi
check "no poisoned checkpoint written" test "$(ls "$T/nan"/checkpoint-* | wc -l)" -eq 2

# ---- 6. config: a model-shape change is refused, before any work --------
expect_exit 1 "shape change refused" train "$T/b" --set model.d_ff=128 --set train.max_steps=50
check "shape change names the key" contains "$ERR" "[model] d_ff: 64 vs 128"
check "shape change: nothing written" test ! -e "$(ckpt "$T/b" 50)"

# ---- 7. data: mismatched lines, missing file, filtering counts, .gz, cache
head -n 799 "$T/train.tgt" > "$T/short.tgt"
expect_exit 1 "mismatched line counts" train "$T/d" --set data.train_tgt="$T/short.tgt"
check "mismatch names both files and counts" \
  contains "$ERR" "$T/train.src has 800 lines but $T/short.tgt has 799"
check "mismatch: no checkpoint" bash -c "! ls '$T/d'/checkpoint-* 2>/dev/null"
expect_exit 1 "missing file" train "$T/d" --set data.train_src="$T/nope.src"
check "missing file named" contains "$ERR" "$T/nope.src"

# filtering: 3 empty pairs, 2 too long, 1 with a bad length ratio
{ cat "$T/train.src"; printf '\nw1 w2\n\n'; for i in 1 2; do seq -s' ' 1 70 | sed 's/[0-9]*/w&/g'; done; echo w1; } > "$T/f.src"
{ cat "$T/train.tgt"; printf 'v1\n\n\nv1\nv1\n'; echo "v1 v2 v3 v4 v5 v6 v7 v8 v9 v10 v11 v12 v13 v14 v15 v16 v17 v18 v19 v20"; } > "$T/f.tgt"
gzip -c "$T/f.src" > "$T/f.src.gz"
gzip -c "$T/f.tgt" > "$T/f.tgt.gz"
expect_exit 0 ".gz corpus trains" "$TFM" train configs/tiny.ini $(run_args "$T/e" | sed 's/ -q / /') \
  --set data.train_src="$T/f.src.gz" --set data.train_tgt="$T/f.tgt.gz" --set train.max_steps=3 --set data.max_len_ratio=4
check "filter counts logged" contains "$ERR" "dropped 3 empty, 2 longer than 60/60 tokens, 1 with length ratio > 4; kept 800 pairs"
check "806 pairs read" contains "$ERR" "806 pairs from $T/f.src.gz"
expect_exit 0 ".gz again" "$TFM" train configs/tiny.ini $(run_args "$T/e" | sed 's/ -q / /') \
  --set data.train_src="$T/f.src.gz" --set data.train_tgt="$T/f.tgt.gz" --set train.max_steps=4 --set data.max_len_ratio=4
check "cache reused" contains "$ERR" "encoded ids from the cache"
check "filter counts logged from the cache too" contains "$ERR" "dropped 3 empty, 2 longer"
touch -d '2001-01-01' "$T/f.tgt.gz"
expect_exit 0 "changed input" "$TFM" train configs/tiny.ini $(run_args "$T/e" | sed 's/ -q / /') \
  --set data.train_src="$T/f.src.gz" --set data.train_tgt="$T/f.tgt.gz" --set train.max_steps=5 --set data.max_len_ratio=4
check "cache invalidated by a changed input" contains "$ERR" "the input files or the tokenizer changed"
echo garbage > "$T/e/valid.corpus"
expect_exit 0 "corrupt cache" "$TFM" train configs/tiny.ini $(run_args "$T/e" | sed 's/ -q / /') \
  --set data.train_src="$T/f.src.gz" --set data.train_tgt="$T/f.tgt.gz" --set train.max_steps=6 --set data.max_len_ratio=4
check "corrupt cache detected and remade" contains "$ERR" "is not a tfm corpus cache"

# ---- 8. accumulation, max_epochs, max_time, early stopping, valid BLEU ----
expect_exit 0 "accumulate = 3, one epoch" "$TFM" train configs/tiny.ini $(run_args "$T/g" | sed 's/ -q / /') \
  --set train.accumulate=3 --set train.max_epochs=1 --set train.max_steps=0 --set train.valid_bleu=true
nb=$(sed -n 's/.*batches: \([0-9,]*\) per epoch.*/\1/p' <<< "$ERR" | tr -d ,)
check "accumulate: ceil($nb / 3) updates in the epoch" contains "$ERR" "reached max_epochs = 1 at step $(( (nb + 2) / 3 ))"
check "valid BLEU logged" contains "$ERR" "| BLEU "
check "valid BLEU in valid.tsv" awk -F'\t' 'NR > 1 && $6 >= 0 { ok = 1 } END { exit !ok }' "$T/g/valid.tsv"
# A blank line in the dev references: sacreBLEU refuses an empty reference,
# so validation leaves that line out as tfm eval does (it used to send it
# to the scorer and log BLEU -1). The references are the model's own greedy
# translations at step 20 (a run that the validated one repeats bit for
# bit), so both must say 100.
expect_exit 0 "run that makes the references" train "$T/vr" --set train.max_steps=20
"$TFM" translate -q -m "$(ckpt "$T/vr" 20)" --beam 1 < "$T/valid.src" | awk 'NR == 3 { print ""; next } { print }' > "$T/valid-blank.tgt"
expect_exit 0 "valid BLEU with a blank reference" "$TFM" train configs/tiny.ini $(run_args "$T/vb" | sed 's/ -q / /') \
  --set data.valid_tgt="$T/valid-blank.tgt" --set train.valid_bleu=true --set train.max_steps=20
check "blank reference: said once" test "$(grep -c 'empty reference lines in .*valid-blank.tgt (the first: line 3) are left out' <<< "$ERR")" -eq 1
VB=$(awk -F'\t' '$1 == 20 { print $6 }' "$T/vb/valid.tsv")
check "blank reference: valid BLEU at step 20 is 100.00, got $VB" test "$VB" = 100.00
expect_exit 0 "eval of the step-20 checkpoint" "$TFM" eval -q -m "$(ckpt "$T/vb" 20)" --src "$T/valid.src" \
  --ref "$T/valid-blank.tgt" --beam 1
EB=$(sed -n 's/^BLEU = \([0-9.]*\) .*/\1/p' <<< "$OUT")
check "blank reference: valid BLEU $VB == tfm eval's $EB" test "$VB" = "$EB"
# Invalid UTF-8 in a dev reference: validation reads the references as tfm
# eval does (U+FFFD), so the two BLEU figures agree.
awk 'NR == 2 { printf "%s \377\n", $0; next } { print }' "$T/valid-blank.tgt" > "$T/valid-bad.tgt"
expect_exit 0 "valid BLEU with invalid UTF-8 in a reference" "$TFM" train configs/tiny.ini $(run_args "$T/vu") \
  --set data.valid_tgt="$T/valid-bad.tgt" --set train.valid_bleu=true --set train.max_steps=20
VU=$(awk -F'\t' '$1 == 20 { print $6 }' "$T/vu/valid.tsv")
expect_exit 0 "eval with invalid UTF-8 in a reference" "$TFM" eval -q -m "$(ckpt "$T/vu" 20)" --src "$T/valid.src" \
  --ref "$T/valid-bad.tgt" --beam 1
EU=$(sed -n 's/^BLEU = \([0-9.]*\) .*/\1/p' <<< "$OUT")
check "invalid UTF-8 reference: valid BLEU $VU == tfm eval's $EU" test "$VU" = "$EU"
check "invalid UTF-8 reference: BLEU below 100 ($VU)" awk -v b="$VU" 'BEGIN { exit !(b > 0 && b < 100) }'
# A dev pair longer than the model's 128 positions: validation truncates it,
# as tfm eval does (it used to drop it, so the two figures differed).
{ head -1 "$T/valid.src" | awk '{ s = $0; for (i = 1; i < 60; i++) s = s " " $0; print s }'; tail -n +2 "$T/valid.src"; } > "$T/valid-long.src"
expect_exit 0 "validation with a pair too long for the model" "$TFM" train configs/tiny.ini $(run_args "$T/vl" | sed 's/ -q / /') \
  --set data.valid_src="$T/valid-long.src" --set train.max_steps=10
check "too-long dev pair: truncated, said" contains "$ERR" "valid: 1 sentence pairs longer than the model's 128 positions were truncated (the first: line 1)"
VL=$(awk -F'\t' '$1 == 10 { print $4 }' "$T/vl/valid.tsv")
expect_exit 0 "eval with a pair too long for the model" "$TFM" eval -q -m "$(ckpt "$T/vl" 10)" --src "$T/valid-long.src" \
  --ref "$T/valid.tgt" --no-translate
check "too-long dev pair: valid nll $VL == tfm eval's" contains "$OUT" "nll_per_token = $VL"
expect_exit 0 "max_time" "$TFM" train configs/tiny.ini $(run_args "$T/h" | sed 's/ -q / /') \
  --set train.max_steps=0 --set train.max_time=1
check "max_time stops the run" contains "$ERR" "reached max_time = 1s"
# lr 0: the dev loss cannot improve, so patience 2 stops at the 3rd validation
expect_exit 0 "early stopping" "$TFM" train configs/tiny.ini $(run_args "$T/i" | sed 's/ -q / /') \
  --set train.lr_scale=0 --set train.patience=2 --set train.max_steps=100
check "early stopping logged" contains "$ERR" "early stopping: no better validation NLL in the last 2 validations"
check "stopped at step 30" test -s "$(ckpt "$T/i" 30)" -a ! -e "$(ckpt "$T/i" 40)"
expect_exit 0 "early-stopped run stays stopped" train "$T/i" --set train.lr_scale=0 --set train.patience=2 --set train.max_steps=100
check "no step after early stopping" test ! -e "$(ckpt "$T/i" 40)"

# ---- 9. a damaged newest checkpoint (not something tfm writes: disk
#         corruption) is reported and the run resumes from the one before.
cp -r "$T/b" "$T/j"
truncate -s 1000 "$(ckpt "$T/j" 40)"
expect_exit 0 "resume past a damaged checkpoint" "$TFM" train configs/tiny.ini $(run_args "$T/j" | sed 's/ -q / /') \
  --set train.max_steps=40
check "damaged checkpoint named" contains "$ERR" "$(ckpt "$T/j" 40): cannot resume from it"
check "resumed from step 30" contains "$ERR" "resuming from $(ckpt "$T/j" 30)"
check "and redone exactly" same_tensors "$(ckpt "$T/a" 40)" "$(ckpt "$T/j" 40)"

# ---- 10. a live progress line on a terminal (\r), plain lines otherwise
if command -v script >/dev/null; then
  script -qec "$TFM train configs/tiny.ini $(run_args "$T/k" | sed 's/ -q / /') --set train.max_steps=8" /dev/null > "$T/tty.out" 2>&1
  check "terminal: live line redrawn with \\r" grep -q $'\r\033\[Kstep 7 |' "$T/tty.out"
  check "not a terminal: no \\r" bash -c "! grep -q $'\r' <<< \"\$1\"" _ "$ERR"
else
  skip "script(1) not installed: live progress line not tested"
fi

# A kernel set BLIS does not know is refused before any work (BLIS 0.9 would
# read the name as 0 and quietly run its AVX-512 kernels); names are accepted.
BLIS_ARCH_TYPE=bogus expect_exit 1 "unknown BLIS_ARCH_TYPE" train "$T/blis" --set train.max_steps=1
check "BLIS_ARCH_TYPE named" contains "$ERR" "BLIS_ARCH_TYPE=bogus: not a BLIS kernel set"
BLIS_ARCH_TYPE=generic expect_exit 0 "BLIS_ARCH_TYPE=generic" "$TFM" train configs/tiny.ini $(run_args "$T/blis" | sed 's/ -q / /') --set train.max_steps=1
check "kernel set logged" contains "$ERR" "BLIS kernels generic"
check "generic kernels: a warning" contains "$ERR" "warning: BLIS runs its portable C kernels"

finish
