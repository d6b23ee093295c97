#!/usr/bin/env bash
# Issue 17: nothing lost, nothing overwritten. Output files are replaced
# atomically (or written through, for streams) and never clobber what is not
# a regular file; stdout write errors fail; a run directory has one trainer;
# corrupt and hostile inputs are errors that name the file; SIGINT/SIGTERM
# in the middle of any command that writes a file (issue 24) removes its
# temporary file and leaves the output as it was.
cd "$(dirname "$0")/.." && source tests/lib.sh

# ---- a tiny run to have checkpoints: 200 generated pairs, 4 steps ---------
awk -v out="$T/d" 'BEGIN { srand(3)
  for (i = 0; i < 200; i++) { len = 2 + int(rand() * 5); s = ""; t = ""
    for (j = 0; j < len; j++) { w = int(rand() * 20); s = s (j ? " " : "") "w" w; t = "v" w (j ? " " : "") t }
    print s > (out ".src"); print t > (out ".tgt") } }'
run_args() {  # run_args DIR -> the options for a tiny run in DIR
  echo --threads 1 -q \
    --set data.train_src="$T/d.src" --set data.train_tgt="$T/d.tgt" \
    --set data.valid_src="$T/d.src" --set data.valid_tgt="$T/d.tgt" \
    --set data.bpe_model="$T/bpe.model" --set data.vocab_size=300 \
    --set train.dir="$1" --set train.batch_tokens=400 --set train.warmup=10 \
    --set train.log_interval=2 --set train.valid_interval=2 --set train.checkpoint_interval=2 \
    --set train.max_steps=4 --set train.keep=3 --set train.average_last=2
}
expect_exit 0 "tiny run" "$TFM" train configs/tiny.ini $(run_args "$T/r")
check "two checkpoints" test "$(ls "$T/r"/checkpoint-*.safetensors | wc -l)" -eq 2
CK=$(ls "$T/r"/checkpoint-*.safetensors | tail -1)

# ---- 1. output paths that are not regular files ---------------------------
"$TFM" average -o "$T/plain.safetensors" "$T/r" 2>/dev/null
# a symbolic link: followed, the file it names is replaced, the link stays
echo old > "$T/real.safetensors"
ln -s real.safetensors "$T/link.safetensors"
expect_exit 0 "average -o a symlink" "$TFM" average -o "$T/link.safetensors" "$T/r"
check "the link is still a link" test -L "$T/link.safetensors"
check "the file it names was replaced" cmp -s "$T/real.safetensors" "$T/plain.safetensors"
check "no temporary file left" bash -c "! ls '$T'/*.tmp.* 2>/dev/null"
# a FIFO (as a character device would be): written through, stays a FIFO
mkfifo "$T/fifo"
cat "$T/fifo" > "$T/fifo.got" &
reader=$!
expect_exit 0 "average -o a FIFO" timeout 20 "$TFM" average -o "$T/fifo" "$T/r"
kill $reader 2>/dev/null; wait $reader 2>/dev/null
check "the FIFO is still a FIFO" test -p "$T/fifo"
check "the data went through it" cmp -s "$T/fifo.got" "$T/plain.safetensors"
rm -f "$T/fifo"
# a directory and a dangling link: refused, named
mkdir "$T/adir"
expect_exit 1 "average -o a directory" "$TFM" average -o "$T/adir" "$T/r"
check "directory refused with its name" contains "$ERR" "$T/adir: is a directory"
check "the directory is untouched" test -d "$T/adir"
ln -s nowhere/x "$T/dangling"
expect_exit 1 "average -o a dangling link" "$TFM" average -o "$T/dangling" "$T/r"
check "dangling link refused" contains "$ERR" "symbolic link to a missing file"
check "the dangling link is untouched" test -L "$T/dangling"
# the same rule for the other writers: BPE models, --out files, the corpus cache
echo old > "$T/bpe.real"; ln -s bpe.real "$T/bpe.link"
expect_exit 0 "bpe learn -o a symlink" "$TFM" bpe learn -q --vocab-size 280 -o "$T/bpe.link" "$T/d.src"
check "bpe: the link stays" test -L "$T/bpe.link"
check "bpe: the model went to the file it names" bash -c "head -c 8 '$T/bpe.real' | grep -q 'tfm-bpe'"
expect_exit 1 "bpe learn -o a directory" "$TFM" bpe learn -q --vocab-size 280 -o "$T/adir" "$T/d.src"
check "bpe: directory named" contains "$ERR" "$T/adir: is a directory"
echo old > "$T/hyp.real"; ln -s hyp.real "$T/hyp.link"
expect_exit 0 "eval --out a symlink" "$TFM" eval -q -m "$CK" --src "$T/d.src" --ref "$T/d.tgt" --out "$T/hyp.link" --beam 1
check "eval --out: the link stays" test -L "$T/hyp.link"
check "eval --out: 200 lines in the file it names" test "$(wc -l < "$T/hyp.real")" -eq 200
cp -r "$T/r" "$T/r2"; rm -f "$T/r2"/*.corpus
echo old > "$T/cache.real"; ln -s "$T/cache.real" "$T/r2/train.corpus"
expect_exit 0 "train with the cache a symlink" "$TFM" train configs/tiny.ini $(run_args "$T/r2") --set train.max_steps=5
check "cache: the link stays" test -L "$T/r2/train.corpus"
check "cache: written to the file it names" test "$(head -c 3 "$T/cache.real")" != old

# ---- 2. stdout write errors: /dev/full and a closed stdout exit 1 with a
#         message; a broken pipe ends quietly -------------------------------
full() {  # full DESC CMD...: stdout is /dev/full
  "$@" > /dev/full 2> "$T/full.err" < "${FULL_IN:-/dev/null}"; local rc=$?
  check "${*:2:2}: exit 1 on /dev/full (got $rc)" test $rc -eq 1
  check "${*:2:2}: says stdout cannot be written" grep -q "cannot write to stdout: No space left on device" "$T/full.err"
}
closed() {  # closed CMD...: stdout closed
  "$@" >&- 2> "$T/closed.err" < "${FULL_IN:-/dev/null}"; local rc=$?
  check "${*:2:2}: exit 1 with stdout closed (got $rc)" test $rc -eq 1
  check "${*:2:2}: says stdout cannot be written" grep -q "cannot write to stdout" "$T/closed.err"
}
for c in "--help" "version" "train --help" "translate --help" "bleu --help" "eval --help" "bpe --help" "average --help"; do
  full "$TFM" $c
done
full "$TFM" train --dry-run configs/tiny.ini
closed "$TFM" train --dry-run configs/tiny.ini
FULL_IN="$T/d.tgt" full "$TFM" bleu "$T/d.tgt"
FULL_IN="$T/d.tgt" closed "$TFM" bleu "$T/d.tgt"
full "$TFM" eval -q -m "$CK" --src "$T/d.src" --ref "$T/d.tgt" --beam 1
FULL_IN="$T/d.src" full "$TFM" translate -q -m "$CK" --beam 1
FULL_IN="$T/d.src" closed "$TFM" translate -q -m "$CK" --beam 1
FULL_IN="$T/d.src" full "$TFM" bpe encode -m "$T/bpe.model"
FULL_IN="$T/d.src" closed "$TFM" bpe encode -m "$T/bpe.model"
"$TFM" bpe encode -m "$T/bpe.model" < "$T/d.src" > "$T/d.pieces"
FULL_IN="$T/d.pieces" full "$TFM" bpe decode -m "$T/bpe.model"
# closed stdout while writing a file: the file never takes fd 1's output
"$TFM" average -o "$T/closed.safetensors" "$T/r" >&- 2>/dev/null
check "average with stdout closed writes a whole file" cmp -s "$T/closed.safetensors" "$T/plain.safetensors"
# a broken pipe, even with SIGPIPE ignored by the parent: quiet
for i in $(seq 3000); do cat "$T/d.src"; done > "$T/big.src"
# (the warning for BLIS's generic kernels is the machine's, not the pipe's:
# CI runs these tests under BLIS_ARCH_TYPE=generic too)
quiet_pipe() { sed -i "/^tfm: warning: BLIS runs its portable C kernels/d" "$T/pipe.err"; }
(trap '' PIPE; "$TFM" bpe encode -m "$T/bpe.model" < "$T/big.src" 2> "$T/pipe.err" | head -1 > /dev/null)
quiet_pipe
check "bpe encode | head -1: nothing on stderr ($(head -c 200 "$T/pipe.err"))" test ! -s "$T/pipe.err"
(trap '' PIPE; "$TFM" translate -q -m "$CK" --beam 1 < "$T/d.src" 2> "$T/pipe.err" | head -1 > /dev/null)
quiet_pipe
check "translate | head -1: nothing on stderr ($(head -c 200 "$T/pipe.err"))" test ! -s "$T/pipe.err"

# ---- 4. a truncated or corrupt .gz is an error naming the file ------------
for i in $(seq 40); do cat "$T/d.src"; done | gzip -c > "$T/whole.gz"
head -c $(( $(wc -c < "$T/whole.gz") / 2 )) "$T/whole.gz" > "$T/cut.gz"
for i in $(seq 40); do cat "$T/d.tgt"; done > "$T/whole.tgt"
expect_exit 1 "train on a truncated .gz" "$TFM" train configs/tiny.ini $(run_args "$T/gz") \
  --set data.train_src="$T/cut.gz" --set data.train_tgt="$T/whole.tgt"
check "train: truncated .gz named" contains "$ERR" "$T/cut.gz: the gzip stream ends early"
expect_exit 1 "bpe learn on a truncated .gz" "$TFM" bpe learn -q --vocab-size 280 -o "$T/x.bpe" "$T/cut.gz"
check "bpe learn: truncated .gz named" contains "$ERR" "$T/cut.gz: the gzip stream ends early"
check "bpe learn: no model written" test ! -e "$T/x.bpe"
expect_exit 1 "eval on a truncated .gz" "$TFM" eval -q -m "$CK" --src "$T/cut.gz" --ref "$T/whole.tgt"
check "eval: truncated .gz named" contains "$ERR" "$T/cut.gz: the gzip stream ends early"

# ---- 5. a NUL byte in a training line: U+FFFD and one warning, the rest of
#         the line kept (as bpe encode and translate read it) ----------------
{ printf 'w1\000w2 w3 w4 w5 w6 w7 w8 w9\n'; tail -n +2 "$T/d.src"; } > "$T/nul.src"
expect_exit 0 "train with a NUL byte" "$TFM" train configs/tiny.ini $(run_args "$T/nul" | sed 's/ -q / /') \
  --set data.train_src="$T/nul.src" --set train.max_steps=1
check "NUL line counted and warned about once" contains "$ERR" "train: 1 lines had invalid UTF-8 or NUL bytes"
# the whole line is scored: as many target tokens as with U+FFFD written out
{ printf 'v1\000v2 v3 v4 v5 v6 v7 v8 v9\n'; tail -n +2 "$T/d.tgt"; } > "$T/nul.tgt"
{ printf 'v1\357\277\275v2 v3 v4 v5 v6 v7 v8 v9\n'; tail -n +2 "$T/d.tgt"; } > "$T/fffd.tgt"
tokens() { "$TFM" eval -q --no-translate -m "$CK" --src "$T/d.src" --ref "$1" 2>/dev/null | sed -n 's/^tokens = //p'; }
nul_tokens=$(tokens "$T/nul.tgt") fffd_tokens=$(tokens "$T/fffd.tgt")
check "eval: the line is whole after the NUL ($nul_tokens vs $fffd_tokens tokens)" test -n "$nul_tokens" -a "$nul_tokens" = "$fffd_tokens"

# ---- 6. non-finite weights: every loader refuses them, naming the tensor --
cp "$CK" "$T/nan.safetensors"
python3 - "$T/nan.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
o = 8 + n + h['decoder.layers.0.fc2.bias']['data_offsets'][0] + 8
b[o:o + 4] = struct.pack('<f', float('inf'))
open(p, 'wb').write(b)
EOF
restamp "$T/nan.safetensors"   # saved so (the checksums pass): the finite checks are tested
expect_exit 1 "translate with an inf weight" "$TFM" translate -q -m "$T/nan.safetensors" < "$T/d.src"
check "translate: tensor named" contains "$ERR" "tensor decoder.layers.0.fc2.bias holds a non-finite value (inf) at index 2"
check "translate: no output" test -z "$OUT"
expect_exit 1 "eval with an inf weight" "$TFM" eval -q -m "$T/nan.safetensors" --src "$T/d.src" --ref "$T/d.tgt"
check "eval: tensor named" contains "$ERR" "decoder.layers.0.fc2.bias holds a non-finite value"
expect_exit 1 "average with an inf weight" "$TFM" average -o "$T/avg-nan.safetensors" "$CK" "$T/nan.safetensors"
check "average: tensor named" contains "$ERR" "decoder.layers.0.fc2.bias"

# ---- 10. inputs that were read as something else are errors --------------
expect_exit 1 "a directory as the config" "$TFM" train --dry-run "$T/adir"
check "directory config named" contains "$ERR" "$T/adir: read error: Is a directory"
for kv in train.max_time=nan train.max_time=inf train.lr_scale=nan train.clip_norm=-nan; do
  expect_exit 2 "--set $kv" "$TFM" train --dry-run configs/tiny.ini --set "$kv"
  key=${kv%%=*}; check "--set $kv named" contains "$ERR" "] ${key#*.} "
done
set_meta() {  # set_meta FILE KEY VALUE: rewrite one metadata entry
  python3 - "$@" <<'EOF'
import json, struct, sys
p, k, v = sys.argv[1:]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h['__metadata__'][k] = v
hb = json.dumps(h).encode()
hb += b' ' * (-len(hb) % 8)
open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
EOF
  restamp "$1"
}
for kv in elapsed=-1 elapsed=nan best_valid=nan best_valid=-inf; do
  rm -rf "$T/bad"; mkdir "$T/bad"; cp "$CK" "$T/bad/"
  set_meta "$T/bad/$(basename "$CK")" "${kv%%=*}" "${kv#*=}"
  expect_exit 1 "resume with $kv" "$TFM" train configs/tiny.ini $(run_args "$T/bad" | sed 's/ -q / /') --set train.max_steps=6
  check "resume with $kv: refused, named" contains "$ERR" "training state ${kv%%=*} = "
done
expect_exit 1 "bpe encode with a directory on stdin" bash -c '"$1" bpe encode -m "$2" < "$3"' _ "$TFM" "$T/bpe.model" "$T/adir"
check "bpe encode: read error named" contains "$ERR" "stdin: read error"
expect_exit 1 "bpe decode with a directory on stdin" bash -c '"$1" bpe decode -m "$2" < "$3"' _ "$TFM" "$T/bpe.model" "$T/adir"
expect_exit 1 "translate with a directory on stdin" bash -c '"$1" translate -q -m "$2" < "$3"' _ "$TFM" "$CK" "$T/adir"
expect_exit 1 "bleu with a directory on stdin" bash -c '"$1" bleu "$2" < "$3"' _ "$TFM" "$T/d.tgt" "$T/adir"

# ---- 15. a checkpoint that is not a regular file: refused at once, named --
#          (a FIFO with no writer would block open() for ever; a device or a
#          directory cannot be mapped). Each under a timeout: a hang fails.
mkfifo "$T/m.fifo"
notfile() {  # notfile PATH KIND DESC CMD...
  local path=$1 kind=$2 desc=$3; shift 3
  expect_exit 1 "$desc" timeout 30 "$@"
  check "$desc: names it ($(head -c 300 <<< "$ERR"))" \
    contains "$ERR" "$path: is a $kind, not a regular file: a checkpoint is mapped into memory, so it must be a file"
}
for p in "$T/m.fifo:FIFO (named pipe)" "/dev/zero:character device" "$T/adir:directory"; do
  f=${p%%:*} kind=${p#*:}
  notfile "$f" "$kind" "translate -m $f" "$TFM" translate -q -m "$f" -i "$T/d.src"
  notfile "$f" "$kind" "eval -m $f" "$TFM" eval -q -m "$f" --src "$T/d.src" --ref "$T/d.tgt"
  if [ "$kind" != directory ]; then   # (average DIR is a run directory's checkpoints)
    notfile "$f" "$kind" "average $f" "$TFM" average -o "$T/avgf.st" "$CK" "$f"
    check "average $f: no output, no temporary" bash -c "! ls '$T'/avgf.st* 2>/dev/null"
  fi
  notfile "$f" "$kind" "serve -m $f" "$TFM" serve -m "$f" --port 0
  notfile "$f" "$kind" "train init_from = $f" "$TFM" train configs/tiny.ini $(run_args "$T/init") --set train.init_from="$f"
done
check "a FIFO was never opened for writing by tfm (still a FIFO)" test -p "$T/m.fifo"

# ---- 13. usage errors exit 2, "--" ends the options ----------------------
for bad in "foo" "train.nokey=1" "train.max_steps=abc" "model.d_model=-1" ".x=1"; do
  expect_exit 2 "--set $bad is a usage error" "$TFM" train --dry-run configs/tiny.ini --set "$bad"
done
cp configs/tiny.ini "$T/-dash.ini"
(cd "$T" && "$TFM" train --dry-run -- -dash.ini > /dev/null 2>&1)
check "train --dry-run -- -dash.ini" test $? -eq 0
expect_exit 0 "bleu -- REF" bash -c '"$1" bleu -q -- "$2" < "$2"' _ "$TFM" "$T/d.tgt"
check "bleu -- REF scores" contains "$OUT" "BLEU = 100.00"
expect_exit 0 "average -o OUT -- DIR" "$TFM" average -o "$T/dd.safetensors" -- "$T/r"
expect_exit 0 "bpe learn -- FILE" "$TFM" bpe learn -q --vocab-size 280 -o "$T/dd.bpe" -- "$T/d.src"
expect_exit 2 "translate -- x" "$TFM" translate -m "$CK" -- x
expect_exit 2 "bpe encode -- x" "$TFM" bpe encode -m "$T/bpe.model" -- x

# ---- 3. one trainer per run directory; the lock dies with its process ----
"$TFM" train configs/tiny.ini $(run_args "$T/lk") --set train.max_steps=1000000 2>/dev/null &
first=$!
while kill -0 $first 2>/dev/null && [ ! -s "$T/lk/train.tsv" ]; do sleep 0.05; done
expect_exit 1 "a second trainer on the same run directory" timeout 60 "$TFM" train configs/tiny.ini \
  $(run_args "$T/lk") --set train.max_steps=1000000
check "refused, naming the first's PID ($first)" contains "$ERR" "another tfm train (PID $first) is training"
check "the first is still running" kill -0 $first
kill -9 $first; wait $first 2>/dev/null
expect_exit 0 "after kill -9 the directory is free again" "$TFM" train configs/tiny.ini $(run_args "$T/lk") \
  --set train.max_steps=1
check "lock file holds the PID of its last holder" test -s "$T/lk/train.lock"

# ---- 8. the resume hint after SIGINT is the exact command line ------------
"$TFM" train configs/tiny.ini $(run_args "$T/hint" | sed 's/ -q / /') --set train.max_steps=1000000 \
  --set 'train.max_time=10 h' 2> "$T/hint.err" &
pid=$!
while kill -0 $pid 2>/dev/null && [ ! -s "$T/hint/train.tsv" ]; do sleep 0.05; done
kill -INT $pid; wait $pid
want="Resume with: tfm train configs/tiny.ini $(run_args "$T/hint" | sed 's/ -q / /') --set train.max_steps=1000000 --set 'train.max_time=10 h'"
check "hint = the command line with every --set ($(grep -o 'Resume with:.*' "$T/hint.err" | head -c 300))" grep -qF -- "$want" "$T/hint.err"

# ---- 11. a failed final average removes the stale one and fails ----------
# (a damaged checkpoint no longer fails it: issue 30 sets it aside, tests/runstate.sh)
expect_exit 0 "run to step 4" "$TFM" train configs/tiny.ini $(run_args "$T/avg") --set train.average_last=3
check "an average from that session" test -s "$T/avg/average.safetensors"
rm "$T/avg/average.safetensors"; ln -s nowhere/x "$T/avg/average.safetensors"   # a path the average cannot be written to
expect_exit 1 "averaging fails at the end of the next session" "$TFM" train configs/tiny.ini $(run_args "$T/avg") \
  --set train.average_last=3 --set train.max_steps=6
check "says the average could not be made" contains "$ERR" "average.safetensors could not be made (the older one there was removed)"
check "the stale average is gone" test ! -e "$T/avg/average.safetensors"
check "the run's checkpoint is written" test -s "$T/avg/checkpoint-00000006.safetensors"

# ---- 12. an unusable run directory is found before any training ----------
ln -s "$T/nowhere/run" "$T/dangling-run"
expect_exit 1 "a dangling run directory" "$TFM" train configs/tiny.ini $(run_args "$T/dangling-run" | sed 's/ -q / /')
check "dangling run dir named" contains "$ERR" "$T/dangling-run: the run directory is a symbolic link to nothing"
check "no training step before the error" bash -c '! grep -q "| epoch" <<< "$1"' _ "$ERR"
expect_exit 1 "a run directory nothing can be written in" "$TFM" train configs/tiny.ini \
  $(run_args /proc/self | sed 's/ -q / /') --set train.checkpoint_interval=1000
check "unwritable run dir named" contains "$ERR" "/proc/self: cannot write in the run directory"
check "no training step before the error" bash -c '! grep -q "| epoch" <<< "$1"' _ "$ERR"
if [ "$(id -u)" -ne 0 ]; then
  mkdir "$T/ro"; chmod 555 "$T/ro"
  expect_exit 1 "a read-only run directory" "$TFM" train configs/tiny.ini $(run_args "$T/ro")
  check "read-only run dir named" contains "$ERR" "$T/ro: cannot write in the run directory"
  chmod 755 "$T/ro"
else
  skip "read-only run directory (chmod 555): running as root, who may write there anyway; /proc/self stands in"
fi


# ---- 14. SIGINT/SIGTERM mid-write: the temporary file goes, the output is
#          untouched, the command says so and dies of the signal ------------
# Every command that writes a file through OUT.tmp.PID opens it before its
# work, and is held in that work: translate and bpe learn read a FIFO that
# this script keeps open (they wait for more input for ever); eval and
# average get inputs that take seconds to get through (they read no FIFO),
# and are stopped (SIGSTOP) the moment the temporary file appears, so the
# signal finds them mid-work however loaded the machine. SIGINT where OUT
# did not exist, SIGTERM where it did. Then: an error after the output is
# opened leaves no temporary file either.
for i in $(seq 50); do cat "$T/d.src"; done > "$T/long.src"
for i in $(seq 50); do cat "$T/d.tgt"; done > "$T/long.tgt"
many=(); for i in $(seq 1000); do many+=("$CK"); done   # one checkpoint 1000 times: seconds of reading
interrupted() {  # interrupted SIG OUT DESC CMD...: CMD writes OUT; stopped mid-write, sent SIG
  local sig=$1 out=$2 desc="$3 SIG$1"; shift 3
  rm -f "$out" "$out".tmp.*
  [ "$sig" = TERM ] && echo old > "$out"
  # (env: a background job of a script starts with SIGINT ignored, which tfm respects)
  env --default-signal=INT,TERM "$@" > "$T/sig.out" 2> "$T/sig.err" &
  local pid=$! i
  local tmp; tmp="$(realpath -m "$out").tmp.$pid"
  for i in $(seq 3000); do [ -e "$tmp" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.01; done
  kill -STOP $pid 2>/dev/null
  check "$desc: caught mid-write ($tmp exists, the process stopped)" test -e "$tmp"
  kill -$sig $pid 2>/dev/null; kill -CONT $pid 2>/dev/null; wait $pid; local code=$?
  local want=$((128 + $(kill -l $sig)))
  check "$desc: died of the signal (exit $code, want $want)" test $code -eq $want
  check "$desc: no temporary file left ($(ls "$out".tmp.* 2>/dev/null))" bash -c "! ls '$out'.tmp.* 2>/dev/null"
  if [ "$sig" = TERM ]; then check "$desc: $out as it was" test "$(cat "$out")" = old
  else check "$desc: no $out" test ! -e "$out"; fi
  check "$desc: says so ($(head -c 300 "$T/sig.err"))" \
    contains "$(cat "$T/sig.err")" "interrupted by SIG$sig: removed the unfinished $tmp (the output it was for is unchanged)"
}
rm -f "$T/hold"; mkfifo "$T/hold"
for sig in INT TERM; do
  exec 3<>"$T/hold"; head -20 "$T/d.src" >&3   # 20 lines, then the FIFO stays open, empty
  interrupted $sig "$T/tr.out" "translate -o" "$TFM" translate -q -m "$CK" --threads 1 --beam 1 -i "$T/hold" -o "$T/tr.out"
  exec 3>&-
  exec 3<>"$T/hold"; cat "$T/d.src" >&3
  interrupted $sig "$T/learn.bpe" "bpe learn -o" "$TFM" bpe learn -q --threads 1 --vocab-size 280 -o "$T/learn.bpe" "$T/hold"
  exec 3>&-
  interrupted $sig "$T/ev.out" "eval --out" "$TFM" eval -q -m "$CK" --threads 1 --beam 4 --src "$T/long.src" --ref "$T/long.tgt" --out "$T/ev.out"
  interrupted $sig "$T/avg.out" "average -o" "$TFM" average -o "$T/avg.out" "${many[@]}"
done
# an error after the output is opened (here: a damaged input) leaves no temporary file either
expect_exit 1 "average with a truncated input" "$TFM" average -o "$T/avg2.out" "$CK" "$T/cut.gz"
check "average error: no temporary file" bash -c "! ls '$T'/avg2.out* 2>/dev/null"
expect_exit 1 "eval --out with a damaged source" "$TFM" eval -q -m "$CK" --src "$T/cut.gz" --ref "$T/whole.tgt" --out "$T/ev2.out"
check "eval error: no temporary file" bash -c "! ls '$T'/ev2.out* 2>/dev/null"
expect_exit 1 "bpe learn -o with a damaged input" "$TFM" bpe learn -q --vocab-size 280 -o "$T/l2.bpe" "$T/cut.gz"
check "bpe learn error: no temporary file" bash -c "! ls '$T'/l2.bpe* 2>/dev/null"

finish
