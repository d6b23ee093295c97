#!/usr/bin/env bash
# tfm bpe learn/encode/decode from the command line: help, usage and runtime
# errors, invalid UTF-8, streaming (one line out per line in, empty lines),
# round trips on Multi30k val against Python's NFKC, determinism, .gz input.
cd "$(dirname "$0")/.." && source tests/lib.sh
PY=/usr/bin/python3

for c in learn encode decode; do
  expect_exit 0 "bpe $c --help" "$TFM" bpe $c --help
  check "bpe $c --help has usage" contains "$OUT" "usage: tfm bpe $c"
  check "bpe $c --help has an example" contains "$OUT" "example: tfm bpe"
done
expect_exit 0 "bpe learn --help lists options" "$TFM" bpe learn --help
for o in --vocab-size --output --normalization --skip-invalid --threads --quiet; do
  check "learn --help lists $o" contains "$OUT" "$o"
done
expect_exit 2 "bpe without subcommand" "$TFM" bpe
expect_exit 2 "bpe unknown subcommand" "$TFM" bpe frobnicate
check "unknown subcommand named" contains "$ERR" "frobnicate"

# ---- learn: usage errors (2) and runtime errors (1) ----
printf 'low low low low low\nlower lower\nnewest newest newest newest newest newest\nwidest widest widest\n' > "$T/small.txt"
expect_exit 2 "learn without -o" "$TFM" bpe learn --vocab-size 300 "$T/small.txt"
check "missing -o named" contains "$ERR" "-o MODEL is required"
expect_exit 2 "learn without --vocab-size" "$TFM" bpe learn -o "$T/m" "$T/small.txt"
expect_exit 2 "learn with a tiny vocabulary" "$TFM" bpe learn --vocab-size 100 -o "$T/m" "$T/small.txt"
check "minimum vocabulary named" contains "$ERR" "261"
expect_exit 2 "learn --vocab-size not a number" "$TFM" bpe learn --vocab-size lots -o "$T/m" "$T/small.txt"
expect_exit 2 "learn bad normalization" "$TFM" bpe learn --vocab-size 300 --normalization nfd -o "$T/m" "$T/small.txt"
check "normalization choices named" contains "$ERR" "nfkc, nfc or none"
expect_exit 2 "learn unknown option" "$TFM" bpe learn --vocab-size 300 --bogus -o "$T/m" "$T/small.txt"
check "unknown option named" contains "$ERR" "--bogus"
expect_exit 2 "learn without files" "$TFM" bpe learn --vocab-size 300 -o "$T/m"
expect_exit 1 "learn from a missing file" "$TFM" bpe learn --vocab-size 300 -o "$T/m" "$T/small.txt" "$T/nope.txt"
check "missing file named" contains "$ERR" "$T/nope.txt: cannot open"
check "no model written on error" test ! -e "$T/m"
printf 'a fine line\nbad \xff byte\nlast\n' > "$T/bad.txt"
expect_exit 1 "learn from invalid UTF-8" "$TFM" bpe learn --vocab-size 300 -o "$T/m" "$T/bad.txt"
check "file:line and byte named" contains "$ERR" "$T/bad.txt:2: invalid UTF-8 (byte 0xFF at byte 4 of the line"
expect_exit 0 "--skip-invalid" "$TFM" bpe learn --vocab-size 300 --skip-invalid -o "$T/m" "$T/bad.txt"
check "skipped lines counted" contains "$ERR" "skipped 1 line with invalid UTF-8"

# -o to something that is not a regular file (a pipe here; /dev/stdout alike) is
# written in place, never replaced by a rename
mkfifo "$T/fifo"
cat "$T/fifo" > "$T/from_fifo" &
expect_exit 0 "learn -o a pipe" "$TFM" bpe learn -q --vocab-size 300 -o "$T/fifo" "$T/small.txt"
wait
check "the pipe is still a pipe" test -p "$T/fifo"
check "the model went through the pipe" test "$(head -1 "$T/from_fifo")" = "tfm-bpe 1"

# ---- a small model: its file, streaming, errors ----
expect_exit 0 "learn small" "$TFM" bpe learn -q --vocab-size 1000 --normalization none -o "$T/small.model" "$T/small.txt"
check "quiet learn: no progress" test -z "$(grep -v warning <<<"$ERR")"
check "nothing on stdout" test -z "$OUT"
check "model file header" test "$(head -1 "$T/small.model")" = "tfm-bpe 1"
check "normalization recorded" grep -qx "normalization none" "$T/small.model"
check "hand-checked first merges" test "$(sed -n '/^merges/{n;p;n;p;n;p}' "$T/small.model" | tr '\n' '|')" = "e s|es t|▁ l|"
printf 'lowest\n\n   \nnewer widest\n' > "$T/in.txt"
expect_exit 0 "encode" "$TFM" bpe encode -m "$T/small.model" < "$T/in.txt"
check "encode pieces" test "$OUT" = $'▁low est\n\n\n▁new er ▁widest'
check "one line out per line in" test "$(wc -l < "$T/out")" -eq 4
expect_exit 0 "encode --ids" "$TFM" bpe encode -m "$T/small.model" --ids < "$T/in.txt"
check "encode ids" test "$OUT" = $'275 272\n\n\n278 284 283'
"$TFM" bpe encode -m "$T/small.model" --ids < "$T/in.txt" > "$T/ids.txt"
expect_exit 0 "decode --ids" "$TFM" bpe decode -m "$T/small.model" --ids < "$T/ids.txt"
check "decode ids" test "$OUT" = $'lowest\n\n\nnewer widest'
expect_exit 0 "decode pieces" "$TFM" bpe decode -m "$T/small.model" <<< $'▁low est ▁ <0xC3> <0x9F>\n<s> ▁new </s>'
check "decode pieces text" test "$OUT" = $'lowest ß\nnew'
printf 'low\n\xff low\nlow \xfe\xfe\n' > "$T/badin.txt"
expect_exit 0 "encode invalid UTF-8" "$TFM" bpe encode -m "$T/small.model" < "$T/badin.txt"
check "invalid becomes U+FFFD bytes" test "$(sed -n 2p "$T/out")" = "▁ <0xEF> <0xBF> <0xBD> ▁low"
check "one warning only" test "$(grep -c 'invalid UTF-8' "$T/err")" -eq 1
check "warning names the line" contains "$ERR" "stdin line 2: invalid UTF-8 replaced by U+FFFD"
expect_exit 1 "decode an unknown piece" "$TFM" bpe decode -m "$T/small.model" <<< $'▁low\n▁low zzz'
check "unknown piece named with its line" contains "$ERR" "stdin line 2: piece 'zzz' is not in the model"
expect_exit 1 "decode an id out of range" "$TFM" bpe decode -m "$T/small.model" --ids <<< "275 286"
check "bad id named" contains "$ERR" "id '286' is not in the model"
expect_exit 2 "encode without -m" "$TFM" bpe encode
expect_exit 2 "encode unknown option" "$TFM" bpe encode -m "$T/small.model" --bogus
expect_exit 2 "encode --dropout 1.5" "$TFM" bpe encode -m "$T/small.model" --dropout 1.5 < "$T/in.txt"
check "--dropout 1.5: the range named" contains "$ERR" "out of range [0, 1]"
expect_exit 0 "encode --dropout 1" "$TFM" bpe encode -m "$T/small.model" --dropout 1 < "$T/in.txt"
check "--dropout 1: characters only" test "$OUT" = $'▁ l o w e s t\n\n\n▁ n e w e r ▁ w i d e s t'
expect_exit 1 "encode with a missing model" "$TFM" bpe encode -m "$T/none.model"
check "missing model named" contains "$ERR" "$T/none.model"
echo "garbage" > "$T/junk.model"
expect_exit 1 "decode with a junk model" "$TFM" bpe decode -m "$T/junk.model"
check "junk model explained" contains "$ERR" "neither a tfm BPE model"

# ---- user-defined symbols: one piece each, kept through encode/decode ----
printf '<2de> low lower<bt> newest\n<bt><2de>widest newest <bt>\n' > "$T/tags.txt"
expect_exit 0 "learn --symbols" "$TFM" bpe learn -q --vocab-size 400 --symbols '<2de>,<bt>' -o "$T/tags.model" "$T/tags.txt"
check "model file version 2" test "$(head -1 "$T/tags.model")" = "tfm-bpe 2"
check "symbols listed in the file" test "$(sed -n '/^symbols/{n;p;n;p}' "$T/tags.model" | tr '\n' '|')" = "<2de>|<bt>|"
printf '<2de> lowest <bt>\n  <bt>newer<2de>  \n' > "$T/tags_in.txt"
expect_exit 0 "encode with symbols" "$TFM" bpe encode -m "$T/tags.model" < "$T/tags_in.txt"
check "tags are single pieces" test "$(head -1 <<<"$OUT" | cut -d' ' -f1)" = "<2de>"
check "a lone ▁ before a tag after a space" test "$(head -1 <<<"$OUT" | rev | cut -d' ' -f1-2 | rev)" = "▁ <bt>"
"$TFM" bpe encode -m "$T/tags.model" < "$T/tags_in.txt" | "$TFM" bpe decode -m "$T/tags.model" > "$T/tags_out.txt"
check "symbols round trip" test "$(cat "$T/tags_out.txt")" = "$(printf '<2de> lowest <bt>\n<bt>newer<2de>')"
expect_exit 2 "a symbol with a space (a bad option value: usage error)" "$TFM" bpe learn -q --vocab-size 400 --symbols '<a b>' -o "$T/bad.model" "$T/tags.txt"
check "bad symbol named" contains "$ERR" "user symbol '<a b>' holds white space"
expect_exit 0 "learn --help lists --symbols" "$TFM" bpe learn --help
check "--symbols in help" contains "$OUT" "--symbols LIST"

# ---- Multi30k val: round trips, determinism, .gz ----
if D=$(data_dir); then
  expect_exit 0 "learn on val en+de+fr" "$TFM" bpe learn --vocab-size 3000 --threads 2 -o "$T/val.model" "$D/val.en" "$D/val.de" "$D/val.fr"
  check "progress on stderr" contains "$ERR" "learned"
  "$TFM" bpe learn -q --vocab-size 3000 --threads 1 -o "$T/val1.model" "$D/val.en" "$D/val.de" "$D/val.fr"
  check "same model at 1 and 2 threads" cmp -s "$T/val.model" "$T/val1.model"
  gzip -c "$D/val.de" > "$T/val.de.gz"
  "$TFM" bpe learn -q --vocab-size 3000 -o "$T/valgz.model" "$D/val.en" "$T/val.de.gz" "$D/val.fr"
  check "same model from .gz" cmp -s "$T/val.model" "$T/valgz.model"
  for l in en de fr; do
    "$TFM" bpe encode -m "$T/val.model" < "$D/val.$l" > "$T/val.$l.bpe"
    check "val.$l: same line count" test "$(wc -l < "$T/val.$l.bpe")" -eq "$(wc -l < "$D/val.$l")"
    "$TFM" bpe decode -m "$T/val.model" < "$T/val.$l.bpe" > "$T/val.$l.dec"
    $PY -c '
import sys, unicodedata
def norm(line):
    line = unicodedata.normalize("NFKC", line)
    line = "".join(" " if c in " \t\n\v\f\r\x85" or unicodedata.category(c) in ("Zs", "Zl", "Zp") else c for c in line)
    return " ".join(w for w in line.split(" ") if w)
for line in open(sys.argv[1], encoding="utf-8"):
    print(norm(line.rstrip("\n")))
' "$D/val.$l" > "$T/val.$l.norm"
    check "val.$l: decode(encode(x)) == NFKC(x), white space collapsed" cmp -s "$T/val.$l.dec" "$T/val.$l.norm"
    "$TFM" bpe encode -m "$T/val.model" --ids --threads 2 < "$D/val.$l" | "$TFM" bpe decode -m "$T/val.model" --ids > "$T/val.$l.dec2"
    check "val.$l: ids round trip" cmp -s "$T/val.$l.dec2" "$T/val.$l.norm"
  done
  # BPE-dropout: one seed gives the same pieces on 1 and 2 threads, another
  # seed others; finer pieces than the plain encoding; decode gives the text back
  "$TFM" bpe encode -m "$T/val.model" --dropout 0.1 --seed 3 --threads 1 < "$D/val.de" > "$T/drop1.bpe"
  "$TFM" bpe encode -m "$T/val.model" --dropout 0.1 --seed 3 --threads 2 < "$D/val.de" > "$T/drop2.bpe"
  "$TFM" bpe encode -m "$T/val.model" --dropout 0.1 --seed 4 < "$D/val.de" > "$T/drop4.bpe"
  check "--dropout: the same pieces on 1 and 2 threads" cmp -s "$T/drop1.bpe" "$T/drop2.bpe"
  check "--dropout: another seed, other pieces" bash -c '! cmp -s "$1" "$2"' _ "$T/drop1.bpe" "$T/drop4.bpe"
  check "--dropout 0.1: more pieces than plain ($(wc -w < "$T/drop1.bpe") vs $(wc -w < "$T/val.de.bpe"))" \
    test "$(wc -w < "$T/drop1.bpe")" -gt "$(wc -w < "$T/val.de.bpe")"
  "$TFM" bpe decode -m "$T/val.model" < "$T/drop1.bpe" > "$T/drop1.dec"
  check "--dropout: decode(encode(x)) == NFKC(x) still" cmp -s "$T/drop1.dec" "$T/val.de.norm"
  "$TFM" bpe encode -m "$T/val.model" --dropout 0 --seed 9 < "$D/val.de" > "$T/drop0.bpe"
  check "--dropout 0: the plain encoding" cmp -s "$T/drop0.bpe" "$T/val.de.bpe"
else
  skip "Multi30k not found: no round trips on real data"
fi
finish
