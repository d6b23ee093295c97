#!/usr/bin/env bash
# eval.sh — tfm eval on tiny random models: usage and file errors, the
# teacher-forced figures against the independent PyTorch model
# (tests/torch_model.py, float64) to 1e-4, translations equal to tfm
# translate's and BLEU/chrF equal to tfm bleu's, and CONFIG.ini mode (dev
# set and run directory from the config: average, else best, else latest).
cd "$(dirname "$0")/.." && source tests/lib.sh
MAKE_MODEL=${TFM_BUILD:-build}/dev/make_model
PY=/usr/bin/python3
if ! [ -x "$MAKE_MODEL" ]; then fail "$MAKE_MODEL not built (make tests)"; finish; exit; fi

expect_exit 0 "--help" "$TFM" eval --help
for w in "-m, --model" --src --ref --out --no-translate --beam --alpha --threads --precision "nll_per_token" "CONFIG.ini" "example:"; do
  check "help mentions $w" contains "$OUT" "$w"
done
expect_exit 2 "nothing given" "$TFM" eval
expect_exit 2 "no --ref" "$TFM" eval -m x --src y
expect_exit 2 "unknown option" "$TFM" eval -m x --src y --ref z --bogus
check "unknown option named" contains "$ERR" "--bogus"
expect_exit 2 "--out with --no-translate" "$TFM" eval -m x --src y --ref z --out o --no-translate
expect_exit 2 "--beam 0" "$TFM" eval -m x --src y --ref z --beam 0

# ---- data, tokenizer, models ----
for i in $(seq 1 120); do
  echo "a small dog number $i runs after the red ball in the green park"
done > "$T/src.txt"
for i in $(seq 1 120); do
  echo "ein kleiner Hund Nummer $i läuft dem roten Ball im grünen Park nach"
done > "$T/ref.txt"
cat "$T/src.txt" "$T/ref.txt" > "$T/both.txt"
expect_exit 0 "learn a BPE" "$TFM" bpe learn --vocab-size 400 -o "$T/bpe.model" "$T/both.txt"
# dev set: 30 lines, with an empty source, an empty reference and a long pair
{ sed -n '1,27p' "$T/src.txt"; echo ""; echo "the dog"; for i in $(seq 1 200); do printf 'ball%d ' "$i"; done; echo; } > "$T/dev.src"
{ sed -n '1,27p' "$T/ref.txt"; echo "der Hund"; echo ""; for i in $(seq 1 200); do printf 'Ball%d ' "$i"; done; echo; } > "$T/dev.ref"
M="$T/post.safetensors"
expect_exit 0 "make a post-norm model" "$MAKE_MODEL" "$M" configs/tiny.ini "$T/bpe.model" 3
expect_exit 0 "make a pre-norm model" "$MAKE_MODEL" "$T/pre.safetensors" configs/tiny.ini "$T/bpe.model" 4 --set model.norm=pre
expect_exit 0 "make another model" "$MAKE_MODEL" "$T/other.safetensors" configs/tiny.ini "$T/bpe.model" 5
if ! [ -s "$M" ]; then fail "no model to test with"; finish; exit; fi

# ---- file errors ----
expect_exit 1 "missing model" "$TFM" eval -m "$T/nope.safetensors" --src "$T/dev.src" --ref "$T/dev.ref"
check "missing model named" contains "$ERR" "$T/nope.safetensors"
expect_exit 1 "missing source" "$TFM" eval -m "$M" --src "$T/nope.src" --ref "$T/dev.ref"
check "missing source named" contains "$ERR" "$T/nope.src"
head -5 "$T/dev.ref" > "$T/short.ref"
expect_exit 1 "line counts differ" "$TFM" eval -m "$M" --src "$T/dev.src" --ref "$T/short.ref"
check "line counts named" contains "$ERR" "30 lines"
check "line counts named (ref)" contains "$ERR" "5"

# ---- teacher-forced figures ----
nll_of() { printf '%s\n' "$1" | sed -n 's/^nll_per_token = //p'; }
for norm in post pre; do
  expect_exit 0 "eval --no-translate ($norm)" "$TFM" eval -m "$T/$norm.safetensors" --src "$T/dev.src" --ref "$T/dev.ref" --no-translate --threads 1
  echo "$OUT" > "$T/$norm.eval"
  check "$norm: nll line" grep -qE '^nll_per_token = [0-9]+\.[0-9]{6}$' "$T/$norm.eval"
  check "$norm: perplexity = exp(nll)" awk '/^nll_per_token/ { n = $3 } /^perplexity/ { p = $3 } END { d = p / exp(n) - 1; exit !(d < 1e-4 && d > -1e-4) }' "$T/$norm.eval"
  check "$norm: label-smoothed loss line" grep -qE '^loss_per_token = [0-9]+\.[0-9]{6}$' "$T/$norm.eval"
  check "$norm: no BLEU with --no-translate" test "$(grep -c BLEU "$T/$norm.eval")" -eq 0
  check "$norm: long pair truncated with a warning naming line 30" contains "$ERR" "line 30"
done
check "post and pre-norm models differ" test "$(nll_of "$(cat "$T/post.eval")")" != "$(nll_of "$(cat "$T/pre.eval")")"
expect_exit 0 "eval --no-translate, 2 threads" "$TFM" eval -m "$M" --src "$T/dev.src" --ref "$T/dev.ref" --no-translate --threads 2
check "thread count does not change the NLL (to 1e-6)" awk -v a="$(nll_of "$OUT")" -v b="$(nll_of "$(cat "$T/post.eval")")" 'BEGIN { exit !(a - b < 1e-6 && b - a < 1e-6) }'
expect_exit 0 "eval --precision bf16" "$TFM" eval -m "$M" --src "$T/dev.src" --ref "$T/dev.ref" --no-translate --threads 1 --precision bf16
check "bf16: NLL within 1% of fp32's, not equal" awk -v a="$(nll_of "$OUT")" -v b="$(nll_of "$(cat "$T/post.eval")")" \
  'BEGIN { d = (a - b) / b; exit !(a != b && d < 0.01 && d > -0.01) }'
expect_exit 2 "eval --precision half" "$TFM" eval -m x --src y --ref z --precision half
expect_exit 0 "eval --precision int8" "$TFM" eval -m "$M" --src "$T/dev.src" --ref "$T/dev.ref" --threads 1 --precision int8
check "int8: the NLL stays fp32's" test "$(nll_of "$OUT")" = "$(nll_of "$(cat "$T/post.eval")")"
check "int8: says so" contains "$ERR" "int8 translation: "
check "int8: BLEU line" grep -q "^BLEU" <<< "$OUT"

if [ -x "$PY" ] && "$PY" -c 'import torch, numpy' 2>/dev/null; then
  "$TFM" bpe encode -m "$M" --ids < "$T/dev.src" > "$T/dev.src.ids"
  "$TFM" bpe encode -m "$M" --ids < "$T/dev.ref" > "$T/dev.ref.ids"
  for norm in post pre; do
    expect_exit 0 "torch reference ($norm)" "$PY" tests/eval_nll_torch.py "$T/$norm.safetensors" "$T/dev.src.ids" "$T/dev.ref.ids"
    echo "$OUT" > "$T/$norm.torch"
    for key in nll_per_token loss_per_token; do
      a=$(sed -n "s/^$key = //p" "$T/$norm.eval"); b=$(sed -n "s/^$key = //p" "$T/$norm.torch")
      check "$norm: $key tfm $a = torch $b to 1e-4" awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && a - b <= 1e-4 && b - a <= 1e-4) }'
    done
    check "$norm: same token count as torch" test "$(sed -n 's/^tokens = //p' "$T/$norm.eval")" = "$(sed -n 's/^tokens = //p' "$T/$norm.torch")"
  done
else
  skip "python3-torch (or numpy) not installed: nll_per_token not checked against PyTorch (apt install python3-torch)"
fi

# ---- translation and scores ----
expect_exit 0 "eval with translation" "$TFM" eval -m "$M" --src "$T/dev.src" --ref "$T/dev.ref" --threads 1 --beam 3 --max-len-b 10 --out "$T/hyp.txt"
echo "$OUT" > "$T/full.eval"
check "empty reference left out, with a warning" contains "$ERR" "empty reference lines (the first: line 29)"
check "same NLL with and without translation" test "$(nll_of "$OUT")" = "$(nll_of "$(cat "$T/post.eval")")"
check "--out has one line per source line" test "$(wc -l < "$T/hyp.txt")" -eq 30
"$TFM" translate -m "$M" --threads 1 --beam 3 --max-len-b 10 -q < "$T/dev.src" > "$T/tr.txt"
check "eval's translations = tfm translate's" cmp -s "$T/hyp.txt" "$T/tr.txt"
# tfm bleu on the same lines without the empty reference (line 29)
sed 29d "$T/dev.ref" > "$T/dev29.ref"; sed 29d "$T/hyp.txt" > "$T/hyp29.txt"
"$TFM" bleu "$T/dev29.ref" < "$T/hyp29.txt" > "$T/bleu.txt" 2>/dev/null
check "BLEU and signature = tfm bleu's" test "$(grep -A1 '^BLEU = ' "$T/full.eval")" = "$(cat "$T/bleu.txt")"
"$TFM" bleu -m chrf "$T/dev29.ref" < "$T/hyp29.txt" > "$T/chrf.txt" 2>/dev/null
check "chrF and signature = tfm bleu -m chrf's" test "$(grep -A1 '^chrF2 = ' "$T/full.eval")" = "$(cat "$T/chrf.txt")"
check "BLEU signature line" grep -q '^nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0$' "$T/full.eval"
gzip -c "$T/dev.src" > "$T/dev.src.gz"; gzip -c "$T/dev.ref" > "$T/dev.ref.gz"
expect_exit 0 "eval with .gz source and reference" "$TFM" eval -m "$M" --src "$T/dev.src.gz" --ref "$T/dev.ref.gz" --threads 1 --beam 3 --max-len-b 10
check ".gz: the same NLL, BLEU and chrF" test "$OUT" = "$(cat "$T/full.eval")"
# an ensemble: the teacher-forced figures of each model, then the ensemble's BLEU and chrF
expect_exit 0 "eval of a model ensembled with itself" "$TFM" eval -m "$M" -m "$M" --src "$T/dev.src" --ref "$T/dev.ref" --threads 1 --beam 3 --max-len-b 10
check "each model's figures" test "$(grep -c '^nll_per_token = ' <<<"$OUT")" -eq 2
check "models named" contains "$OUT" "# model 2: $M"
check "the ensemble of a model with itself scores as the model" \
  test "$(sed -n '/^# the ensemble/,$p' <<<"$OUT" | tail -n +2)" = "$(grep -A3 '^BLEU = ' "$T/full.eval")"
expect_exit 0 "eval of an ensemble of two models" "$TFM" eval -m "$M" -m "$T/other.safetensors" --src "$T/dev.src" --ref "$T/dev.ref" --threads 1 --beam 3 --max-len-b 10
check "second model's NLL = its own eval's" contains "$OUT" "$(nll_of "$("$TFM" eval -m "$T/other.safetensors" --src "$T/dev.src" --ref "$T/dev.ref" --no-translate --threads 1 -q)")"
expect_exit 2 "--src twice" "$TFM" eval -m "$M" --src a --src b --ref c
check "repeated option named" contains "$ERR" "option --src given twice"
expect_exit 2 "a misspelt option" "$TFM" eval -m "$M" --no-translat
check "did you mean" contains "$ERR" "(did you mean --no-translate?)"

# ---- CONFIG.ini: dev set, decode settings and the run's model ----
mkdir -p "$T/run"
cat > "$T/exp.ini" <<EOF
[model]
encoder_layers = 2
decoder_layers = 2
d_model = 32
d_ff = 64
heads = 4
max_positions = 128
[data]
max_src_len = 100
max_tgt_len = 100
valid_src = dev.src
valid_tgt = dev.ref
[train]
dir = run
[decode]
beam = 1
max_len_b = 7
EOF
expect_exit 1 "config with an empty run directory" "$TFM" eval "$T/exp.ini" --no-translate
check "says there is no model" contains "$ERR" "no model"
cp "$M" "$T/run/best.safetensors"
expect_exit 0 "config: best model" "$TFM" eval "$T/exp.ini" --threads 1 --out "$T/cfg-hyp.txt"
check "config: the best model's NLL" test "$(nll_of "$OUT")" = "$(nll_of "$(cat "$T/post.eval")")"
"$TFM" translate -m "$M" --threads 1 --beam 1 --max-len-b 7 -q < "$T/dev.src" > "$T/cfg-tr.txt"
check "config: its [decode] settings" cmp -s "$T/cfg-hyp.txt" "$T/cfg-tr.txt"
cp "$T/other.safetensors" "$T/run/average.safetensors"
expect_exit 0 "config: average preferred" "$TFM" eval "$T/exp.ini" --threads 1 --no-translate
a=$(nll_of "$OUT")
expect_exit 0 "the other model directly" "$TFM" eval -m "$T/other.safetensors" --src "$T/dev.src" --ref "$T/dev.ref" --threads 1 --no-translate
check "config: average.safetensors is the one evaluated" test "$a" = "$(nll_of "$OUT")"
expect_exit 0 "config with -m" "$TFM" eval "$T/exp.ini" -m "$M" --threads 1 --no-translate
check "config: -m overrides the run's model" test "$(nll_of "$OUT")" = "$(nll_of "$(cat "$T/post.eval")")"

[ -n "${TFM_VERBOSE:-}" ] && head -3 "$T"/*.eval "$T"/*.torch >&2
finish
