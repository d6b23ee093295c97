#!/usr/bin/env bash
# text.sh — one way in for text (src/text.h, issues 24, 28 and 30): every
# command that reads text (translate -i and stdin, bpe encode/decode/learn,
# bleu, eval, train) meets the same damaged files and behaves the same:
#   truncated gzip        exit 1, the file named, no partial output kept
#   NUL byte, invalid     U+FFFD with one warning naming file and line; an
#     UTF-8               error naming them where the command is strict
#                         (bleu, bpe learn)
#   CRLF, no final        read as the clean file: the same output
#     newline, BOM,
#     gzip members,
#     trailing garbage    (BOM and trailing bytes with a one-line notice)
#   a 10 MB line          read (the limit is 16 MiB a line)
#   a 17 MB line          exit 1, file and line named (memory stays bounded)
#   an empty file         zero lines
#   a directory           exit 1, the directory named
#   a FIFO                read once where a command streams; refused, not
#                         waited on, where it reads a file twice (train, eval)
# and: a read error is never end of input; BPE models from pipes; configs
# with NUL or over-long lines; train.tsv that is not a file. (SIGINT/SIGTERM
# while an output is written: tests/reliability.sh.)
cd "$(dirname "$0")/.." && source tests/lib.sh
MAKE_MODEL=${TFM_BUILD:-build}/dev/make_model
if ! [ -x "$MAKE_MODEL" ]; then fail "$MAKE_MODEL not built (make tests)"; finish; exit; fi

# ---- a tokenizer, a random model, a reference run -------------------------
awk -v out="$T/d" 'BEGIN { srand(3)
  for (i = 0; i < 200; i++) { len = 2 + int(rand() * 5); s = ""; t = ""
    for (j = 0; j < len; j++) { w = int(rand() * 20); s = s (j ? " " : "") "w" w; t = "v" w (j ? " " : "") t }
    print s > (out ".src"); print t > (out ".tgt") } }'
expect_exit 0 "learn a BPE" "$TFM" bpe learn -q --vocab-size 300 -o "$T/bpe.model" "$T/d.src" "$T/d.tgt"
M="$T/m.safetensors"
expect_exit 0 "make a random model" "$MAKE_MODEL" "$M" configs/tiny.ini "$T/bpe.model" 1
if ! [ -s "$M" ]; then fail "no model to test with"; finish; exit; fi

# ---- the damaged files: each is clean.txt (3 lines) with one fault --------
D="$T/files"; mkdir "$D"
printf 'w1 w2 w3\nw4 w5\nw6 w7 w8 w9\n' > "$D/clean.txt"
printf 'v3 v2 v1\nv5 v4\nv9 v8 v7 v6\n' > "$T/ref.txt"
printf 'w1 w2 w3\nw4\0w5\nw6 w7 w8 w9\n' > "$D/nul.txt"
printf 'w1 w2 w3\nw4 \377 w5\nw6 w7 w8 w9\n' > "$D/bad.txt"
printf 'w1 w2 w3\nw4 \357\277\275 w5\nw6 w7 w8 w9\n' > "$D/fffd.txt"   # bad.txt as U+FFFD reads it
printf 'w1 w2 w3\nw4\357\277\275w5\nw6 w7 w8 w9\n' > "$D/fffd-nul.txt"  # nul.txt as U+FFFD reads it
printf 'w1 w2 w3\r\nw4 w5\r\nw6 w7 w8 w9\r\n' > "$D/crlf.txt"
printf 'w1 w2 w3\nw4 w5\nw6 w7 w8 w9' > "$D/nonl.txt"
printf '\357\273\277w1 w2 w3\nw4 w5\nw6 w7 w8 w9\n' > "$D/bom.txt"
{ printf 'w1 w2 w3\n' | gzip -c; printf 'w4 w5\nw6 w7 w8 w9\n' | gzip -c; } > "$D/members.gz"
{ gzip -c "$D/clean.txt"; printf 'garbage after the stream'; } > "$D/trail.gz"
for i in $(seq 3000); do cat "$D/clean.txt"; done | gzip -c > "$T/whole.gz"
head -c $(( $(wc -c < "$T/whole.gz") / 2 )) "$T/whole.gz" > "$D/trunc.gz"
{ printf 'w1 w2 w3\n'; head -c 10000000 /dev/zero | tr '\0' 'w'; printf '\nw6 w7 w8 w9\n'; } > "$D/long.txt"
{ printf 'w1 w2 w3\n'; head -c 17000000 /dev/zero | tr '\0' 'w'; printf '\nw6 w7 w8 w9\n'; } > "$D/huge.txt"
: > "$D/empty.txt"
mkdir "$D/dir"

# The commands, each reading FILE as its text input ($1), output on stdout.
# Strict readers (bleu, bpe learn) refuse NUL and invalid UTF-8; the rest read U+FFFD.
TO="timeout 120"   # no command may hang on these files
tr_i()    { $TO "$TFM" translate -m "$M" --threads 1 -q -i "$1"; }
tr_in()   { $TO "$TFM" translate -m "$M" --threads 1 -q < "$1"; }
encode()  { $TO "$TFM" bpe encode -m "$T/bpe.model" --threads 1 < "$1"; }
bleu()    { $TO "$TFM" bleu -b "$T/ref.txt" -i "$1"; }
bleuref() { $TO "$TFM" bleu -b "$1" -i "$T/ref.txt"; }
learn()   { $TO "$TFM" bpe learn -q --vocab-size 280 --threads 1 -o /dev/stdout "$1" "$T/d.tgt"; }
evals()   { $TO "$TFM" eval -q -m "$M" --threads 1 --src "$1" --ref "$T/ref.txt"; }
train()   {   # prints the trained weights' checksum (one step, one thread: deterministic)
  local dir; dir=$(mktemp -d "$T/run.XXXXXX")
  $TO "$TFM" train configs/tiny.ini --threads 1 -q --set data.train_src="$1" --set data.train_tgt="$T/ref.txt" \
    --set data.valid_src="$T/d.src" --set data.valid_tgt="$T/d.tgt" --set data.bpe_model="$T/bpe.model" \
    --set data.vocab_size=300 --set train.dir="$dir" --set train.max_steps=1 --set train.average_last=1 || return
  python3 -c 'import json,struct,sys,hashlib; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]
h=json.loads(b[8:8+n]); h.pop("__metadata__",None)
print(hashlib.sha256(b"".join(b[8+n+v["data_offsets"][0]:8+n+v["data_offsets"][1]] for k,v in sorted(h.items()))).hexdigest())' \
    "$dir/checkpoint-00000001.safetensors"
}
ALL="tr_i tr_in encode bleu bleuref learn evals train"
LENIENT="tr_i tr_in encode evals train"
STRICT="bleu bleuref learn"
name_of() { case $2 in tr_in|encode) echo stdin;; *) echo "$D/$1";; esac; }
# run CMD FILE: exit status, stdout, stderr in $T/<cmd>.<file>.{rc,out,err}
run() { "$1" "$D/$2" > "$T/$1.$2.out" 2> "$T/$1.$2.err"; echo $? > "$T/$1.$2.rc"; }
rc() { cat "$T/$1.$2.rc"; }
err() { cat "$T/$1.$2.err"; }
for f in clean nul bad fffd fffd-nul crlf nonl bom empty long huge; do
  for c in $ALL; do run $c $f.txt; done
done
for f in members.gz trail.gz trunc.gz dir; do
  for c in $ALL; do run $c $f; done
done
for c in $ALL; do check "$c: the clean file reads (exit $(rc $c clean.txt): $(head -c 200 "$T/$c.clean.txt.err"))" test "$(rc $c clean.txt)" = 0; done

# ---- read as the clean file: CRLF, no final newline, BOM, gzip members, trailing garbage
for f in crlf.txt nonl.txt bom.txt members.gz trail.gz; do
  for c in $ALL; do
    check "$c $f: exit 0 ($(head -c 200 "$T/$c.$f.err"))" test "$(rc $c $f)" = 0
    check "$c $f: the same output as the clean file" cmp -s "$T/$c.$f.out" "$T/$c.clean.txt.out"
  done
done
for c in $ALL; do
  check "$c bom.txt: a one-line notice" contains "$(err $c bom.txt)" "$(name_of bom.txt $c): a UTF-8 byte order mark (BOM) starts the file: dropped"
  check "$c trail.gz: a warning naming the file" contains "$(err $c trail.gz)" "$(name_of trail.gz $c): bytes after the end of the gzip data are ignored"
  check "$c crlf.txt: no warning about the file" bash -c '! grep -q "crlf.txt" "$1"' _ "$T/$c.crlf.txt.err"
done

# ---- NUL and invalid UTF-8: one rule (a NUL is one more ill-formed byte) ----
for c in $LENIENT; do
  check "$c bad.txt: exit 0" test "$(rc $c bad.txt)" = 0
  check "$c nul.txt: exit 0" test "$(rc $c nul.txt)" = 0
  check "$c bad.txt: read as U+FFFD" cmp -s "$T/$c.bad.txt.out" "$T/$c.fffd.txt.out"
  check "$c nul.txt: read as U+FFFD" cmp -s "$T/$c.nul.txt.out" "$T/$c.fffd-nul.txt.out"
  check "$c bad.txt: a warning naming file and line 2" \
    contains "$(err $c bad.txt)" "$(name_of bad.txt $c) line 2: invalid UTF-8 replaced by U+FFFD"
  check "$c nul.txt: a warning naming file and line 2" \
    contains "$(err $c nul.txt)" "$(name_of nul.txt $c) line 2: a NUL byte (not text) replaced by U+FFFD"
done
for c in $STRICT; do
  check "$c bad.txt: exit 1" test "$(rc $c bad.txt)" = 1
  check "$c nul.txt: exit 1" test "$(rc $c nul.txt)" = 1
  check "$c bad.txt: file, line, byte named" contains "$(err $c bad.txt)" "$D/bad.txt:2: invalid UTF-8 (byte 0xFF at byte 3 of the line"
  check "$c nul.txt: file, line, byte named" contains "$(err $c nul.txt)" "$D/nul.txt:2: a NUL byte (not UTF-8 text) at byte 2 of the line"
done

# ---- faults that are errors everywhere: truncated gzip, a 17 MB line, a directory
for c in $ALL; do
  check "$c trunc.gz: exit 1" test "$(rc $c trunc.gz)" = 1
  check "$c trunc.gz: the file named, said truncated" contains "$(err $c trunc.gz)" "$(name_of trunc.gz $c): the gzip stream ends early"
  check "$c huge.txt: exit 1" test "$(rc $c huge.txt)" = 1
  check "$c huge.txt: file and line named" contains "$(err $c huge.txt)" "$(name_of huge.txt $c):2: a line longer than 16 MiB"
  check "$c dir: exit 1" test "$(rc $c dir)" = 1
  check "$c dir: the directory named" contains "$(err $c dir)" "$(name_of dir $c): read error: Is a directory"
done
expect_exit 1 "translate -i trunc.gz -o FILE" "$TFM" translate -m "$M" --threads 1 -q -i "$D/trunc.gz" -o "$T/cut.out"
check "translate -i trunc.gz -o FILE: no partial file" test ! -e "$T/cut.out"

# ---- a 10 MB line is text; an empty file is no lines -----------------------
for c in $ALL; do check "$c long.txt: exit 0 ($(head -c 200 "$T/$c.long.txt.err"))" test "$(rc $c long.txt)" = 0; done
check "translate long.txt: 3 lines out" test "$(wc -l < "$T/tr_i.long.txt.out")" = 3
check "bpe encode long.txt: 3 lines out" test "$(wc -l < "$T/encode.long.txt.out")" = 3
for c in tr_i tr_in encode; do check "$c empty.txt: exit 0, nothing out" test "$(rc $c empty.txt)" = 0 -a ! -s "$T/$c.empty.txt.out"; done
for c in evals train; do check "$c empty.txt: 0 lines named" contains "$(err $c empty.txt)" "empty.txt has 0 lines but"; done
check "bleu empty.txt: an empty hypothesis said" contains "$(err bleu empty.txt)" "is empty"
expect_exit 0 "bpe learn on clean + empty" "$TFM" bpe learn -q --vocab-size 280 --threads 1 -o /dev/stdout "$D/clean.txt" "$D/empty.txt" "$T/d.tgt"
check "bpe learn: an empty file adds nothing" test "$OUT" = "$(cat "$T/learn.clean.txt.out")"

# ---- an endless line from a device: bounded, an error naming the line ----
# memory capped at 2 GB (not under ASan: its shadow memory needs the address space)
CAP='[ -z "${TFM_ASAN:-}" ] && ulimit -v 2000000; "$@"'

expect_exit 1 "translate -i /dev/zero" timeout 60 bash -c "$CAP" _ "$TFM" translate -m "$M" -q -i /dev/zero
check "translate -i /dev/zero: line 1 too long" contains "$ERR" "/dev/zero:1: a line longer than 16 MiB"
expect_exit 1 "bleu reference /dev/zero" timeout 60 bash -c "$CAP" _ "$TFM" bleu /dev/zero -i "$T/ref.txt"
check "bleu /dev/zero: line 1 too long" contains "$ERR" "/dev/zero:1: a line longer than 16 MiB"

# ---- a read error is an error, never the end of the input ------------------
# bpe encode: the lines before the fault are written, then exit 1 naming it
expect_exit 1 "bpe encode: a 17 MB line on stdin" "$TFM" bpe encode -m "$T/bpe.model" < "$D/huge.txt"
check "bpe encode: the line before is written" test "$OUT" = "$(head -1 "$T/encode.clean.txt.out")"
for i in $(seq 3000); do cat "$T/encode.clean.txt.out"; done | gzip -c > "$T/pieces.gz"
head -c $(( $(wc -c < "$T/pieces.gz") / 2 )) "$T/pieces.gz" > "$T/pieces-cut.gz"
expect_exit 1 "bpe decode of a truncated .gz on stdin" "$TFM" bpe decode -m "$T/bpe.model" < "$T/pieces-cut.gz"
check "bpe decode: truncated named" contains "$ERR" "stdin: the gzip stream ends early"

# ---- FIFOs: streamed once where a command reads once; refused (never waited on) where it reads twice
fifo_run() {  # fifo_run FILE CMD...: CMD with $F a FIFO that a writer fills from FILE
  local src=$1; shift
  rm -f "$T/fifo"; mkfifo "$T/fifo"
  (cat "$src" > "$T/fifo") & local w=$!
  F="$T/fifo"
  timeout 60 "$@" > "$T/fifo.out" 2> "$T/fifo.err"; local rc=$?
  kill $w 2>/dev/null; wait $w 2>/dev/null
  return $rc
}
F=; fifo_run "$D/clean.txt" bash -c '"$1" translate -m "$2" --threads 1 -q -i "$3"' _ "$TFM" "$M" "$T/fifo"
check "translate -i FIFO: read once, the same output" cmp -s "$T/fifo.out" "$T/tr_i.clean.txt.out"
fifo_run "$D/clean.txt" bash -c '"$1" bleu -b "$2" -i "$3"' _ "$TFM" "$T/ref.txt" "$T/fifo"
check "bleu -i FIFO: the same score" cmp -s "$T/fifo.out" "$T/bleu.clean.txt.out"
fifo_run "$D/clean.txt" bash -c '"$1" bpe learn -q --vocab-size 280 --threads 1 -o /dev/stdout "$2" "$3"' _ "$TFM" "$T/fifo" "$T/d.tgt"
check "bpe learn FIFO: the same model" cmp -s "$T/fifo.out" "$T/learn.clean.txt.out"
# a BPE model from a FIFO or a process substitution: read once (it was opened twice: a hang, or "not a model")
fifo_run "$T/bpe.model" bash -c '"$1" bpe encode -m "$2" --threads 1 < "$3"' _ "$TFM" "$T/fifo" "$D/clean.txt"
check "bpe encode -m FIFO: exit 0, the same pieces" cmp -s "$T/fifo.out" "$T/encode.clean.txt.out"
expect_exit 0 "bpe encode -m <(cat model)" timeout 60 bash -c '"$1" bpe encode -m <(cat "$2") --threads 1 < "$3"' _ "$TFM" "$T/bpe.model" "$D/clean.txt"
check "bpe encode -m <(cat model): the same pieces" test "$OUT" = "$(cat "$T/encode.clean.txt.out")"
# train and eval read their corpus twice (and cache it by size and time): a FIFO is refused at once
rm -f "$T/fifo"; mkfifo "$T/fifo"
expect_exit 1 "train with a FIFO as train_src" timeout 60 "$TFM" train configs/tiny.ini --threads 1 -q \
  --set data.train_src="$T/fifo" --set data.train_tgt="$T/ref.txt" --set data.valid_src="$T/d.src" \
  --set data.valid_tgt="$T/d.tgt" --set data.bpe_model="$T/bpe.model" --set train.dir="$T/fiforun" --set train.max_steps=1
check "train FIFO: refused, named" contains "$ERR" "$T/fifo: is a FIFO (named pipe), not a regular file"
expect_exit 1 "eval with a FIFO as --src" timeout 60 "$TFM" eval -q -m "$M" --src "$T/fifo" --ref "$T/ref.txt"
check "eval FIFO: refused, named" contains "$ERR" "$T/fifo: is a FIFO (named pipe), not a regular file"

# ---- train.tsv that is not a file: no hang, no endless read ----------------
R="$T/tsvrun"
targs() { echo --threads 1 -q --set data.train_src="$T/d.src" --set data.train_tgt="$T/d.tgt" \
  --set data.valid_src="$T/d.src" --set data.valid_tgt="$T/d.tgt" --set data.bpe_model="$T/bpe.model" \
  --set train.dir="$R" --set train.checkpoint_interval=1 --set train.average_last=1; }
expect_exit 0 "a run of 1 step" "$TFM" train configs/tiny.ini $(targs) --set train.max_steps=1
rm -f "$R/train.tsv"; ln -s /dev/zero "$R/train.tsv"
expect_exit 0 "resume with train.tsv -> /dev/zero" timeout 60 bash -c "$CAP" _ "$TFM" train configs/tiny.ini $(targs | sed 's/ -q / /') --set train.max_steps=2
check "train.tsv -> /dev/zero: written to, never read back" test -L "$R/train.tsv" -a "$(readlink "$R/train.tsv")" = /dev/zero
rm -f "$R/train.tsv"; mkfifo "$R/train.tsv"
expect_exit 0 "resume with train.tsv a FIFO" timeout 60 "$TFM" train configs/tiny.ini $(targs | sed 's/ -q / /') --set train.max_steps=3
check "train.tsv FIFO: not written, named" contains "$ERR" "$R/train.tsv: is a FIFO (named pipe), not a regular file"

# ---- configs: a NUL byte or an over-long line is an error at the right line
printf '[model]\nencoder_layers = 2\n' > "$T/c.ini"
printf '[model]\nd_model = 32\0\nencoder_layers = 3\n' > "$T/nul.ini"
expect_exit 1 "a config with a NUL byte" "$TFM" train --dry-run "$T/nul.ini"
check "config NUL: file and line named" contains "$ERR" "$T/nul.ini:2: a NUL byte"
{ printf '[model]\n; '; head -c 70000 /dev/zero | tr '\0' 'x'; printf 'encoder_layers = 3\n'; } > "$T/long.ini"
expect_exit 1 "a config with a 70,000-byte comment" "$TFM" train --dry-run "$T/long.ini"
check "config long line: file and line 2 named" contains "$ERR" "$T/long.ini:2: a line longer than"
{ printf '[data]\ntrain_src = '; head -c 70000 /dev/zero | tr '\0' 'x'; printf '\n'; } > "$T/value.ini"
expect_exit 1 "a config with a 70,000-byte value on line 2" "$TFM" train --dry-run "$T/value.ini"
check "config long value: line 2 (not 3)" contains "$ERR" "$T/value.ini:2: a line longer than"
printf '\357\273\277[model]\r\nencoder_layers = 3\r\n' > "$T/bomcrlf.ini"
expect_exit 0 "a config with a BOM and CRLF" "$TFM" train --dry-run "$T/bomcrlf.ini"

finish
