#!/usr/bin/env bash
# tfm bleu on the command line: output formats, sacreBLEU's flags, error
# paths (line counts, missing files, invalid UTF-8, empty input), and the
# sacreBLEU 2.6.0 cases of tests/bleu-cases end to end.
cd "$(dirname "$0")/.." && source tests/lib.sh

# A one-line corpus scored by hand in tests/test_bleu.c: BLEU = 100 * (1/48)^(1/4).
printf 'the cat sat on the mat\n' > "$T/hyp"
printf 'the cat is on the mat\n' > "$T/ref"
printf 'the cat sat on a mat\n' > "$T/ref2"
LINE='BLEU = 37.99 83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)'
SIG='nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0'

expect_exit 0 "hyp on stdin" bash -c '"$1" bleu "$2" < "$3"' _ "$TFM" "$T/ref" "$T/hyp"
check "score line and signature" test "$OUT" = "$LINE
$SIG"
expect_exit 0 "hyp with -i" "$TFM" bleu "$T/ref" -i "$T/hyp"
check "-i gives the same output" test "$OUT" = "$LINE
$SIG"
check "nothing on stderr" test -z "$ERR"
gzip -c "$T/ref" > "$T/ref.gz"; gzip -c "$T/hyp" > "$T/hyp.gz"
expect_exit 0 "a .gz reference and hypothesis" "$TFM" bleu "$T/ref.gz" -i "$T/hyp.gz"
check ".gz files give the same output" test "$OUT" = "$LINE
$SIG"
expect_exit 0 "--input=" "$TFM" bleu "$T/ref" --input="$T/hyp"
check "--input= form" test "$OUT" = "$LINE
$SIG"

expect_exit 0 "-b" "$TFM" bleu "$T/ref" -i "$T/hyp" -b
check "-b prints the score only" test "$OUT" = "37.99"
expect_exit 0 "-w 4" "$TFM" bleu "$T/ref" -i "$T/hyp" --score-only -w 4
check "-w 4" test "$OUT" = "37.9918"
expect_exit 0 "-f json" "$TFM" bleu "$T/ref" -i "$T/hyp" -f json
check "json name" contains "$OUT" '"name": "BLEU",'
check "json score (rounded to the width, as sacreBLEU)" contains "$OUT" '"score": 37.99,'
check "json signature" contains "$OUT" "\"signature\": \"$SIG\","
check "json verbose" contains "$OUT" '"verbose_score": "83.3/60.0/25.0/16.7 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)",'
check "json signature fields" contains "$OUT" '"tok": "13a",'
if /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["score"] == 37.99 and d["nrefs"] == "1"' <<<"$OUT" 2>/dev/null; then ok; else fail "json does not parse: $OUT"; fi

# sacreBLEU's flags
expect_exit 0 "-tok char" "$TFM" bleu "$T/ref" -i "$T/hyp" -tok char
check "tok:char in signature" contains "$OUT" "|tok:char|"
expect_exit 0 "-lc -s floor" "$TFM" bleu "$T/ref" -i "$T/hyp" -lc -s floor
check "case:lc, smooth:floor[0.10]" contains "$OUT" "nrefs:1|case:lc|eff:no|tok:13a|smooth:floor[0.10]|"
expect_exit 0 "-s add-k -sv 2" "$TFM" bleu "$T/ref" -i "$T/hyp" -s add-k -sv 2
check "smooth:add-k[2.00]" contains "$OUT" "|smooth:add-k[2.00]|"
expect_exit 0 "-s none" "$TFM" bleu "$T/ref" -i "$T/hyp" -s none -b
check "no smoothing: a missing 4-gram gives 0" test "$OUT" = "0.00"
expect_exit 0 "two references" "$TFM" bleu "$T/ref" "$T/ref2" -i "$T/hyp"
check "nrefs:2" contains "$OUT" "nrefs:2|"
expect_exit 0 "-m chrf" "$TFM" bleu "$T/ref" -i "$T/hyp" -m chrf
check "chrF2 line" contains "$OUT" "chrF2 = "
check "chrF signature" contains "$OUT" "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
expect_exit 0 "chrF++" "$TFM" bleu "$T/ref" -i "$T/hyp" -m chrf --chrf-word-order 2
check "chrF2++ line" contains "$OUT" "chrF2++ = "
check "nw:2" contains "$OUT" "|nw:2|"
expect_exit 0 "-m bleu chrf" "$TFM" bleu "$T/ref" -i "$T/hyp" -m bleu chrf
check "both metrics, BLEU first" test "$(echo "$OUT" | sed -n '1s/ .*//p;3s/ .*//p' | tr '\n' ' ')" = "BLEU chrF2 "
expect_exit 0 "-m bleu chrf -f json" "$TFM" bleu "$T/ref" -i "$T/hyp" -m bleu chrf -f json
if /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert [x["name"] for x in d] == ["BLEU", "chrF2"]' <<<"$OUT" 2>/dev/null; then ok; else fail "json list does not parse: $OUT"; fi

# Errors: usage (exit 2)
expect_exit 2 "no reference" "$TFM" bleu -i "$T/hyp"
check "says what is missing" contains "$ERR" "no reference"
expect_exit 2 "unknown option" "$TFM" bleu --bogus "$T/ref"
check "names the option" contains "$ERR" "--bogus"
expect_exit 2 "unsupported tokenizer" "$TFM" bleu -tok zh "$T/ref" -i "$T/hyp"
check "names the tokenizer" contains "$ERR" "'zh'"
expect_exit 2 "bad smoothing" "$TFM" bleu -s laplace "$T/ref" -i "$T/hyp"
expect_exit 2 "bad width" "$TFM" bleu -w many "$T/ref" -i "$T/hyp"
expect_exit 2 "bad format" "$TFM" bleu -f latex "$T/ref" -i "$T/hyp"
expect_exit 2 "bad metric" "$TFM" bleu -m ter "$T/ref" -i "$T/hyp"
expect_exit 2 "reference after -i" "$TFM" bleu -i "$T/hyp" "$T/ref"
check "explains the order" contains "$ERR" "before -i"

# Errors: runtime (exit 1), naming files, lines and counts
printf 'a b c\nd e f\n' > "$T/two"
expect_exit 1 "line counts differ" "$TFM" bleu "$T/ref" -i "$T/two"
check "names the hypothesis and its count" contains "$ERR" "$T/two has 2 lines"
check "names the reference and its count" contains "$ERR" "$T/ref has 1"
expect_exit 1 "line counts differ on stdin" bash -c '"$1" bleu "$2" < "$3"' _ "$TFM" "$T/ref" "$T/two"
check "stdin named" contains "$ERR" "stdin has 2 lines"
expect_exit 1 "references differ" "$TFM" bleu "$T/ref" "$T/two" -i "$T/hyp"
check "both references named" contains "$ERR" "$T/two has 2 lines but reference $T/ref has 1"
expect_exit 1 "missing reference" "$TFM" bleu "$T/nope.de" -i "$T/hyp"
check "missing file named" contains "$ERR" "$T/nope.de"
expect_exit 1 "missing hypothesis" "$TFM" bleu "$T/ref" -i "$T/nope.hyp"
check "missing hypothesis named" contains "$ERR" "$T/nope.hyp"
printf 'a b c\nd \xff f\n' > "$T/bad"
expect_exit 1 "invalid UTF-8" "$TFM" bleu "$T/two" -i "$T/bad"
check "file and line named" contains "$ERR" "$T/bad:2:"
check "says UTF-8" contains "$ERR" "UTF-8"
expect_exit 0 "--replace-invalid" "$TFM" bleu "$T/two" -i "$T/bad" --replace-invalid
check "warns about the replacement" contains "$ERR" "U+FFFD"
expect_exit 1 "invalid UTF-8 in a reference" "$TFM" bleu "$T/bad" -i "$T/two"
check "reference file named" contains "$ERR" "$T/bad:2:"
printf 'a b c\n\n' > "$T/ref_gap"
expect_exit 1 "empty reference line" "$TFM" bleu "$T/ref_gap" -i "$T/two"
check "line named" contains "$ERR" "line 2"

# Empty input scores 0, no crash
: > "$T/empty"
expect_exit 0 "empty hypothesis file" "$TFM" bleu "$T/ref" -i "$T/empty"
check "BLEU 0 against the whole reference" contains "$OUT" "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 6)"
check "warns that it is empty" contains "$ERR" "empty"
expect_exit 0 "empty hypothesis on stdin, chrF" bash -c '"$1" bleu "$2" -m chrf -b < /dev/null' _ "$TFM" "$T/ref"
check "chrF 0" test "$OUT" = "0.00"
expect_exit 0 "everything empty" "$TFM" bleu "$T/empty" -i "$T/empty"
check "BLEU 0" contains "$OUT" "BLEU = 0.00"
expect_exit 0 "-q" "$TFM" bleu "$T/ref" -i "$T/empty" -q
check "-q: no warning" test -z "$ERR"
printf '\n' > "$T/blank"
expect_exit 0 "an empty hypothesis line" "$TFM" bleu "$T/ref" -i "$T/blank" -b
check "scores 0" test "$OUT" = "0.00"

# Tokenized-looking input gets sacreBLEU's warning (100+ lines ending in " .")
for i in $(seq 120); do echo "a house on a hill ."; done > "$T/tok"
expect_exit 0 "tokenized hypothesis" "$TFM" bleu "$T/tok" -i "$T/tok"
check "warns about tokenized input" contains "$ERR" "tokenized period"
check "scores anyway" contains "$OUT" "BLEU = 100.00"
expect_exit 0 "--force" "$TFM" bleu "$T/tok" -i "$T/tok" --force
check "--force: no warning" test -z "$ERR"

# sacreBLEU 2.6.0's own output on tests/bleu-cases, end to end: one case by hand,
# then every case's flags on the command line (test_bleu checks the same 132 in C).
B=${TFM_BLEU_DATA:-tests/bleu-cases}
expect_exit 0 "sacreBLEU case de-0.05" "$TFM" bleu "$B/de-0.05/ref" -i "$B/de-0.05/hyp" -w 4
check "agrees with sacreBLEU 2.6.0" test "$OUT" = "BLEU = 90.6113 97.7/93.3/89.3/85.7 (BP = 0.992 ratio = 0.992 hyp_len = 603 ref_len = 608)
$SIG"
if OUT=$(/usr/bin/python3 - "$TFM" "$B" <<'PY' 2>&1
import json, subprocess, sys
tfm, d = sys.argv[1], sys.argv[2]
cases, bad = json.load(open(d + "/expected.json")), []
for c in cases:
    refs = [f"{d}/{c['dir']}/{r}" for r in c["refs"]]
    out = subprocess.run([tfm, "bleu", *refs, "-i", f"{d}/{c['dir']}/hyp", "-w", "4", *c["sacrebleu_args"]],
                         capture_output=True, text=True).stdout.split("\n")
    head = out[0].split(" ", 3)            # NAME = SCORE [VERBOSE]
    ok = (len(out) > 1 and len(head) >= 3 and abs(float(head[2]) - c["score"]) <= 1e-4 + 1e-9
          and out[1] == c["signature"] and (c.get("verbose") is None or head[3:] == [c["verbose"]]))
    if not ok: bad.append(f"{c['dir']} {' '.join(c['sacrebleu_args'])}: {out[:2]}")
print(f"{len(cases) - len(bad)}/{len(cases)} cases agree", *bad[:5], sep="\n")
sys.exit(len(cases) != 132 or bad != [])
PY
); then ok; else fail "tfm bleu against sacreBLEU on $B: $OUT"; fi

finish
