#!/usr/bin/env bash
# Issue 30: nothing lost, part three — the run directory, the recorded
# config, and options bounded by what they mean. One block per class of the
# issue (numbered as there); each check failed on main at 345b236.
cd "$(dirname "$0")/.." && source tests/lib.sh

# ---- a tiny corpus: 200 generated pairs ----------------------------------
gen_pairs 200 3 "$T/d"
run_args() {  # run_args DIR -> the options for a tiny run in DIR (checkpoints every 2 steps)
  echo --threads 1 \
    --set data.train_src="$T/d.src" --set data.train_tgt="$T/d.tgt" \
    --set data.valid_src="$T/d.src" --set data.valid_tgt="$T/d.tgt" \
    --set data.bpe_model="$T/bpe.model" --set data.vocab_size=300 \
    --set train.dir="$1" --set train.batch_tokens=400 --set train.warmup=10 \
    --set train.log_interval=2 --set train.valid_interval=2 --set train.checkpoint_interval=2 \
    --set train.max_steps=4 --set train.keep=3 --set train.average_last=2
}
set_meta() {  # set_meta FILE KEY VALUE: rewrite one metadata entry of a safetensors file
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
  restamp "$1"   # as if its writer put it there: the checksums pass, the state checks are tested (issue 28)
}
dead_pid() { sh -c 'echo $$' ; }   # a process that has already exited
ck() { printf '%s/checkpoint-%08d.safetensors' "$1" "$2"; }

# ---- 1. pruning and the final average count only checkpoints that load ----
expect_exit 0 "run to step 6" "$TFM" train configs/tiny.ini $(run_args "$T/p") --set train.max_steps=6
truncate -s 5000 "$(ck "$T/p" 6)"   # a disk fault in the newest checkpoint
expect_exit 0 "resume below it with keep = 1" "$TFM" train configs/tiny.ini $(run_args "$T/p") \
  --set train.max_steps=5 --set train.keep=1
check "resumed from the last good checkpoint" contains "$ERR" "resuming from $(ck "$T/p" 4)"
check "the checkpoint just written is kept" test -s "$(ck "$T/p" 5)"
check "the damaged one is moved aside, not deleted" test -s "$(ck "$T/p" 6).corrupt"
check "the damaged one is named in a warning" contains "$ERR" "$(ck "$T/p" 6) does not load"
check "the older good one is pruned (keep = 1)" test ! -e "$(ck "$T/p" 4)"
expect_exit 0 "the next run resumes" "$TFM" train configs/tiny.ini $(run_args "$T/p") --set train.max_steps=7 --set train.keep=1
check "... from step 5" contains "$ERR" "resuming from $(ck "$T/p" 5)"
# the final average: a damaged checkpoint among the last ones is never averaged
expect_exit 0 "run to step 6 (average of 3)" "$TFM" train configs/tiny.ini $(run_args "$T/a") --set train.max_steps=6 \
  --set train.average_last=3
truncate -s 5000 "$(ck "$T/a" 4)"
expect_exit 0 "the next session averages the good ones" "$TFM" train configs/tiny.ini $(run_args "$T/a") \
  --set train.max_steps=8 --set train.average_last=3
check "average made" test -s "$T/a/average.safetensors"
check "... of steps 2, 6 and 8" contains "$ERR" "averaged the last 3 checkpoints (steps 2..8)"
check "the damaged one set aside" test -s "$(ck "$T/a" 4).corrupt"

# ---- 2. what tfm accepts it can write and read back ----------------------
expect_exit 2 "train --threads 4097" "$TFM" train --dry-run configs/tiny.ini --threads 4097
check "--threads 4097: the key's range" contains "$ERR" "--threads: [run] threads = 4097 is out of range"
expect_exit 2 "--set src_lang with a newline" "$TFM" train --dry-run configs/tiny.ini --set "data.src_lang=e
n"
check "newline in a value: key named" contains "$ERR" "[data] src_lang: the value holds a control character"
expect_exit 2 "a run directory with a newline" "$TFM" train --dry-run configs/tiny.ini --set "train.dir=$T/a
b"
check "newline in a path: key named" contains "$ERR" "[train] dir"
expect_exit 2 "' ;' in a value (an INI comment)" "$TFM" train --dry-run configs/tiny.ini --set "data.tgt_lang=de ;x"
check "' ;': key named" contains "$ERR" "[data] tgt_lang"
printf '[data]\nsrc_lang = a\x01b\n' > "$T/ctl.ini"
expect_exit 1 "a control character in a config file" "$TFM" train --dry-run "$T/ctl.ini"
check "config file: file and key named" contains "$ERR" "$T/ctl.ini:2: [data] src_lang"
# hostile but legal: spaces, '=', '#', ';' inside a word, non-ASCII; survives write -> load -> resume
odd="$T/r un=#ü;x"
expect_exit 0 "train in '$odd'" "$TFM" train configs/tiny.ini $(run_args "$T/unused") \
  --set "train.dir=$odd" --set "data.src_lang=x-ü=#1" --set train.max_steps=2
expect_exit 0 "the checkpoint loads (translate)" "$TFM" translate -q -m "$(ck "$odd" 2)" <<< "w1 w2"
expect_exit 0 "and resumes" "$TFM" train configs/tiny.ini $(run_args "$T/unused") \
  --set "train.dir=$odd" --set "data.src_lang=x-ü=#1" --set train.max_steps=4
check "resumed, dir and src_lang unchanged" bash -c '! grep -qE "config changed.*(dir|src_lang)" <<< "$1" && grep -q "resuming from" <<< "$1"' _ "$ERR"
python3 - "$(ck "$odd" 4)" "$odd" > "$T/meta.out" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
cfg = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])['__metadata__']['config']
print('dir ok' if 'dir = %s\n' % sys.argv[2] in cfg else 'dir differs')
print('lang ok' if 'src_lang = x-ü=#1\n' in cfg else 'lang differs')
EOF
check "recorded dir and src_lang unchanged" test "$(cat "$T/meta.out")" = "dir ok
lang ok"

# ---- 3. every numeric option bounded by what it can mean -----------------
"$TFM" average -o "$T/model.safetensors" "$T/p" 2>/dev/null
M="$T/model.safetensors"
printf 'w1 w2\nw3\nw4 w5 w6\n' > "$T/in.txt"
for cmd in "train --dry-run configs/tiny.ini" "translate -m $M" "eval -m $M --src $T/in.txt --ref $T/in.txt" \
           "bpe encode -m $T/bpe.model" "bpe learn --vocab-size 300 -o $T/x.model $T/d.src"; do
  expect_exit 2 "$cmd --threads 65536" $TFM $cmd --threads 65536 < /dev/null
  check "$cmd --threads 65536: range named" contains "$ERR" "[run] threads = 65536 is out of range [0, 4096]"
done
expect_exit 2 "train --threads -1" "$TFM" train --dry-run configs/tiny.ini --threads -1
check "train --threads -1: not ignored" contains "$ERR" "[run] threads = -1 is out of range"
expect_exit 2 "translate --batch-size 2147483647" "$TFM" translate -m "$M" --batch-size 2147483647 < "$T/in.txt"
check "--batch-size: the key's range" contains "$ERR" "--batch-size: [decode] batch_size = 2147483647 is out of range"
expect_exit 2 "eval --batch-size 2147483647" "$TFM" eval -m "$M" --src "$T/in.txt" --ref "$T/in.txt" --batch-size 2147483647
# the largest batch and top-k: sized by the input and the vocabulary, not by the option (1 GB of address
# space is plenty; not under ASan, which reserves terabytes of it)
vlimit="ulimit -v 1048576;"; [ -n "${TFM_ASAN:-}" ] && vlimit=""
expect_exit 0 "translate --batch-size 1048576 on 3 lines" bash -c \
  "$vlimit '$TFM' translate -q -m '$M' --batch-size 1048576 < '$T/in.txt'"
check "three lines out" test "$(wc -l < "$T/out")" -eq 3
expect_exit 0 "--sample --topk 2147483647" bash -c \
  "$vlimit '$TFM' translate -q -m '$M' --sample --topk 2147483647 --seed 1 < '$T/in.txt'"
expect_exit 0 "... the same draws as the whole vocabulary's top-k" bash -c \
  "diff <(printf '%s\n' \"\$1\") <('$TFM' translate -q -m '$M' --sample --topk 300 --seed 1 < '$T/in.txt')" _ "$OUT"
expect_exit 2 "bpe learn: a repeated --symbols entry" "$TFM" bpe learn --vocab-size 300 -o "$T/x.model" --symbols '<a>,<a>' "$T/d.src"
check "repeated symbol named" contains "$ERR" "user symbol '<a>' given twice"
expect_exit 2 "train: a repeated symbol in --set" "$TFM" train --dry-run configs/tiny.ini --set 'data.symbols=<a>,<a>'
expect_exit 2 "translate --nbest 2000" "$TFM" translate -m "$M" --nbest 2000 < /dev/null
expect_exit 2 "average --last 1e9" "$TFM" average --last 1e9 -o "$T/y.safetensors" "$T/p"

# ---- 5. caches keyed by identity and content; resume compares resolved paths
cp "$T/d.src" "$T/c.src"; cp "$T/d.tgt" "$T/c.tgt"
cargs() { run_args "$T/c" | sed "s|data.train_src=[^ ]*|data.train_src=$T/c.src|; s|data.train_tgt=[^ ]*|data.train_tgt=$T/c.tgt|"; }
expect_exit 0 "a run that caches c.src" "$TFM" train configs/tiny.ini $(cargs) --set train.max_steps=2
# another file of the same size and mtime takes its place (as unpacking an archive would)
sed 's/w1/w2/g' "$T/d.src" > "$T/c2.src"
check "same size" test "$(stat -c %s "$T/c2.src")" -eq "$(stat -c %s "$T/c.src")"
touch -r "$T/c.src" "$T/c2.src"; mv "$T/c2.src" "$T/c.src"
expect_exit 0 "the next session" "$TFM" train configs/tiny.ini $(cargs) --set train.max_steps=3
check "re-encoded, not the old ids" bash -c '! grep -q "train: .*encoded ids from the cache" <<< "$1"' _ "$ERR"
check "says the input changed" contains "$ERR" "the input files or the tokenizer changed"
# the same files named by a relative path: no "training data changed" on resume
mkdir -p "$T/rel"; cp "$T/d.src" "$T/d.tgt" "$T/rel/"
printf '[data]\ntrain_src = d.src\ntrain_tgt = d.tgt\nbpe_model = %s\nvocab_size = 300\nmax_src_len = 60\nmax_tgt_len = 60\n[train]\ndir = %s\nbatch_tokens = 400\nwarmup = 10\nmax_steps = 2\ncheckpoint_interval = 2\n' \
  "$T/bpe.model" "$T/rel/run" > "$T/rel/c.ini"
expect_exit 0 "a run from a relative config path" bash -c "cd '$T' && '$TFM' train --threads 1 rel/c.ini"
expect_exit 0 "resumed through an absolute path" "$TFM" train --threads 1 "$T/rel/c.ini" --set train.max_steps=3
check "resumed" contains "$ERR" "resuming from"
check "no 'training data changed'" bash -c '! grep -q "training data changed" <<< "$1"' _ "$ERR"

# ---- 6. resume state validated field by field, the key named -------------
for kv in batch_index=99999999 rng_state=0 elapsed=1e308; do
  rm -rf "$T/bad"; mkdir "$T/bad"; cp "$(ck "$T/p" 7)" "$T/bad/"
  set_meta "$(ck "$T/bad" 7)" "${kv%%=*}" "${kv#*=}"
  expect_exit 1 "resume with $kv" "$TFM" train configs/tiny.ini $(run_args "$T/bad") --set train.max_steps=9
  check "resume with $kv: refused, the key named" contains "$ERR" "training state ${kv%%=*} = "
done

# ---- 7. a promised output that is not made is named, with why -------------
expect_exit 0 "keep = 1" "$TFM" train configs/tiny.ini $(run_args "$T/k1") --set train.keep=1
check "keep = 1: no average, says why" contains "$ERR" "no $T/k1/average.safetensors made: [train] keep = 1"
expect_exit 0 "average_last = 1" "$TFM" train configs/tiny.ini $(run_args "$T/a1") --set train.average_last=1
check "average_last = 1: says why" contains "$ERR" "no $T/a1/average.safetensors made: [train] average_last = 1"
expect_exit 0 "no dev set" "$TFM" train configs/tiny.ini $(run_args "$T/nd") --set data.valid_src= --set data.valid_tgt=
check "no best model: says why" contains "$ERR" "no $T/nd/best.safetensors made: no dev set"

# ---- 8. leftovers and loose words ----------------------------------------
pid=$(dead_pid)
for f in train.corpus valid.corpus train.tsv checkpoint-00000009.safetensors; do echo partial > "$T/p/$f.tmp.$pid"; done
echo partial > "$T/bpe.model.tmp.$pid"   # the BPE model lives outside the run directory here
echo mine > "$T/other.tmp.$pid"          # not tfm's: left alone
expect_exit 0 "a run starts in a directory with stale temporaries" "$TFM" train configs/tiny.ini $(run_args "$T/p") \
  --set train.max_steps=8 --set train.keep=1
check "train.corpus.tmp.PID and the others removed" bash -c "! ls '$T/p'/*.tmp.* 2>/dev/null"
check "the BPE model's temporary removed" test ! -e "$T/bpe.model.tmp.$pid"
check "another file's temporary outside the run directory kept" test -e "$T/other.tmp.$pid"
check "... and named" contains "$ERR" "removed $T/p/train.corpus.tmp.$pid, left by an interrupted write"
expect_exit 0 "max_steps lowered below the run's step" "$TFM" train configs/tiny.ini $(run_args "$T/p") --set train.max_steps=6
check "says 'past max_steps'" contains "$ERR" "already at step 8 past max_steps = 6"
check "not '= max_steps'" bash -c '! grep -q "step 8 = max_steps" <<< "$1"' _ "$ERR"

finish
