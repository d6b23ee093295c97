#!/usr/bin/env bash
# recipe.sh — scripts/multi30k.sh end to end on generated data (TFM_DATA
# points get-multi30k.sh at it) with a tiny model: train, average, translate
# test2016, BLEU with the signature, results.txt; a rerun resumes (no more
# training, the same BLEU); usage errors.
cd "$(dirname "$0")/.." && source tests/lib.sh

expect_exit 0 "--help" bash scripts/multi30k.sh --help
check "help names the recipe" contains "$OUT" "average the last 5 checkpoints"
check "help names MEMBERS" contains "$OUT" "MEMBERS=N trains N models"
check "help is the header comment, no code" bash -c '! grep -q "^set " <<< "$0"' "$OUT"
expect_exit 2 "unknown target language" bash scripts/multi30k.sh xx
check "bad language named" contains "$ERR" "'xx'"

# A stand-in Multi30k: numbered sentences in en, de and fr.
D=$T/data; mkdir -p "$D"
for l in en de fr; do
  gen_numbered $l 1 300 > "$D/train.$l"; gen_numbered $l 301 20 > "$D/val.$l"; gen_numbered $l 321 25 > "$D/test2016.$l"
done
tiny=(--set model.encoder_layers=1 --set model.decoder_layers=1 --set model.d_model=32 --set model.d_ff=64
      --set data.vocab_size=400 --set train.batch_tokens=800 --set train.warmup=10
      --set train.max_steps=12 --set train.max_time=0 --set train.log_interval=4
      --set train.checkpoint_interval=4 --set train.valid_interval=6 --set train.valid_bleu=false
      --set decode.batch_size=8)
R=$T/run
# (bf16 emulated, as on a CPU whose bf16 unit does not win: the recipe trains in fp32)
expect_exit 0 "train, average, translate, score" env TFM_DATA="$D" RUN="$R" MEMBERS=1 TFM_BF16_PRODUCTS=emulated \
  bash scripts/multi30k.sh de "${tiny[@]}"
res=$(cat "$R/results.txt" 2>/dev/null)
check "results.txt written" test -n "$res"
check "stdout is results.txt" test "$OUT" = "$res"
check "average model scored" grep -q '^average: *BLEU = [0-9]' "$R/results.txt"
check "best model scored" grep -q '^best: *BLEU = [0-9]' "$R/results.txt"
check "signature printed" contains "$res" "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp"
check "12 updates trained" contains "$res" "training: 12 updates"
check "overrides recorded" contains "$res" "overrides: --set model.encoder_layers=1"
params=$(./tfm train configs/multi30k.ini "${tiny[@]}" --dry-run 2>/dev/null | sed -n 's/^; parameters: \([0-9]*\).*/\1/p')
check "parameter count is the tiny model's ($params)" contains "$res" "parameters: $params"
check "fp32 where bf16 is emulated" grep -q '^precision: fp32 (bf16 products here: emulated' "$R/results.txt"
check "the run trained in fp32" grep -aqF 'precision = fp32\n' "$R/average.safetensors"
check "checkpoints averaged" test -s "$R/average.safetensors"
check "25 translations" test "$(wc -l < "$R/test2016.average.de")" -eq 25
check "tokenizer learned in the run" test -s "$R/bpe.model"
check "valid.tsv has 2 validations" test "$(wc -l < "$R/valid.tsv")" -eq 3
# The BLEU line equals tfm bleu's on the same files.
b=$(./tfm bleu "$D/test2016.de" -i "$R/test2016.average.de" | head -1)
check "BLEU equals tfm bleu's" contains "$res" "average: $b"

# Rerun: the finished run is not trained further, the scores are the same.
expect_exit 0 "rerun" env TFM_DATA="$D" RUN="$R" MEMBERS=1 TFM_BF16_PRODUCTS=emulated bash scripts/multi30k.sh de "${tiny[@]}"
check "rerun trains nothing more" contains "$OUT" "training: 12 updates"
check "rerun gives the same results" test "$OUT" = "$res"

# MEMBERS=2: two models side by side (seeds 1 and 2), each scored, then their ensemble.
expect_exit 2 "MEMBERS must be a number" env MEMBERS=two bash scripts/multi30k.sh de
check "bad MEMBERS named" contains "$ERR" "'two'"
# bf16 where it wins: a CPU with a bf16 unit that outruns its FMAs stands in
# for by forcing one of tfm's routes for bf16 products (bf16.sh tests them)
unit=onednn
TFM_BF16_PRODUCTS=onednn ./tfm info > /dev/null 2>&1 || unit=kernel
TFM_BF16_PRODUCTS=$unit ./tfm info > /dev/null 2>&1 || unit=
[ -n "$unit" ] || skip "neither oneDNN nor AVX512_BF16 here: the recipe's members train in fp32 (its bf16 branch untested)"
E=$T/ens
expect_exit 0 "two members and their ensemble" env TFM_DATA="$D" RUN="$E" MEMBERS=2 ${unit:+TFM_BF16_PRODUCTS=$unit} \
  bash scripts/multi30k.sh de "${tiny[@]}"
res=$(cat "$E/results.txt" 2>/dev/null)
check "stdout is results.txt (members)" test "$OUT" = "$res"
for k in 1 2; do
  check "member $k trained in its folder" contains "$res" "training seed$k: 12 updates"
  check "member $k averaged" test -s "$E/seed$k/average.safetensors"
  check "member $k ran its seed" grep -aqF "seed = $k\\n" "$E/seed$k/average.safetensors"
  b=$(./tfm bleu "$D/test2016.de" -i "$E/test2016.seed$k.de" | head -1)
  check "member $k scored alone" contains "$res" "seed$k:   $b"
done
if [ -n "$unit" ]; then
  check "bf16 where a bf16 unit wins" grep -q '^precision: bf16 (bf16 products here: oneDNN matmul\|^precision: bf16 (bf16 products here: AVX512_BF16 kernel' "$E/results.txt"
  for k in 1 2; do check "member $k trained in bf16" grep -aqF 'precision = bf16\n' "$E/seed$k/average.safetensors"; done
fi
check "the members differ (seeds)" bash -c '! cmp -s "$0" "$1"' "$E/seed1/average.safetensors" "$E/seed2/average.safetensors"
check "results.txt names the seeds" grep -qx 'seeds: 1 2' "$E/results.txt"
env ${unit:+TFM_BF16_PRODUCTS=$unit} ./tfm translate -m "$E/seed1/average.safetensors" -m "$E/seed2/average.safetensors" --beam 4 --alpha 0.6 \
  < "$D/test2016.en" > "$T/ens.de" 2>/dev/null
check "the ensemble line is the two averaged models' ensemble" cmp -s "$T/ens.de" "$E/test2016.ensemble.de"
b=$(./tfm bleu "$D/test2016.de" -i "$E/test2016.ensemble.de" | head -1)
check "ensemble scored" contains "$res" "ensemble: $b"
# The user's --set run.precision wins over the host's choice; with no MEMBERS
# the recipe runs two where there are two cores (the run is done: no training)
if [ "$(nproc)" -ge 2 ]; then members=; else members=2; fi
expect_exit 0 "precision overridden" env TFM_DATA="$D" RUN="$E" ${members:+MEMBERS=$members} ${unit:+TFM_BF16_PRODUCTS=$unit} \
  bash scripts/multi30k.sh de "${tiny[@]}" --set run.precision=fp32
check "the override is the precision" contains "$OUT" "precision: fp32 (bf16 products here: "
check "two members by default ($(nproc) cores)" contains "$OUT" "training seed2: 12 updates"
# SEED=S: another draw, members seeded S and S+1 (bf16 emulated: fp32, quicker)
expect_exit 2 "SEED must be a number" env SEED=x bash scripts/multi30k.sh de
check "bad SEED named" contains "$ERR" "'x'"
expect_exit 0 "SEED=3" env TFM_DATA="$D" RUN="$T/s3" MEMBERS=2 SEED=3 TFM_BF16_PRODUCTS=emulated \
  bash scripts/multi30k.sh de "${tiny[@]}"
for k in 1 2; do
  check "member $k ran seed $((k + 2))" grep -aqF "seed = $((k + 2))\n" "$T/s3/seed$k/average.safetensors"
done
check "results.txt names seeds 3 and 4" contains "$OUT" "seeds: 3 4"
# A member that fails stops the script before any scoring, and says which and why.
expect_exit 1 "a failing member" env TFM_DATA="$D" RUN="$T/bad" MEMBERS=2 bash scripts/multi30k.sh de "${tiny[@]}" --set model.d_model=abc
check "the failing member named with its log" contains "$ERR" "member 1 failed"
check "its error shown" contains "$ERR" "d_model"
check "nothing scored" test ! -e "$T/bad/results.txt"
finish
