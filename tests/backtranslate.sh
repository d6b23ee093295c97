#!/usr/bin/env bash
# backtranslate.sh — scripts/backtranslate.sh end to end on a generated
# stand-in for Multi30k (TFM_DATA) with a tiny model: the split, one BPE
# with <bt> as a user symbol, the reverse model, sampled and tagged
# back-translations, the union, the BT and baseline models, test2016 BLEU in
# results.txt; a rerun trains and samples nothing more; usage errors.
cd "$(dirname "$0")/.." && source tests/lib.sh

expect_exit 0 "--help" bash scripts/backtranslate.sh --help
check "help names the method" contains "$OUT" "tagged back-translation"
expect_exit 2 "a stray argument" bash scripts/backtranslate.sh de
check "stray argument named" contains "$ERR" "'de'"

D=$T/data; mkdir -p "$D"
for l in en de; do gen_numbered $l 1 200 > "$D/train.$l"; gen_numbered $l 201 20 > "$D/val.$l"; gen_numbered $l 221 25 > "$D/test2016.$l"; done
tiny=(--set model.encoder_layers=1 --set model.decoder_layers=1 --set model.d_model=32 --set model.d_ff=64
      --set data.vocab_size=400 --set train.batch_tokens=800 --set train.warmup=10 --set train.max_steps=8
      --set train.log_interval=4 --set train.checkpoint_interval=4 --set train.valid_interval=8 --set decode.batch_size=8)
R=$T/run
expect_exit 0 "split, reverse model, sample, tag, train, score" env TFM_DATA="$D" RUN="$R" PARALLEL=120 TIME=0 bash scripts/backtranslate.sh "${tiny[@]}"
res=$(cat "$R/results.txt" 2>/dev/null)
check "stdout is results.txt" test -n "$res" -a "$OUT" = "$res"
check "120 parallel pairs, 80 monolingual sentences" contains "$res" "parallel pairs: 120; monolingual German sentences back-translated: 80"
check "the monolingual part is the rest of train.de" cmp -s "$R/mono.de" <(tail -n 80 "$D/train.de")
check "one BPE, <bt> a user symbol" test "$(sed -n '/^symbols/{n;p}' "$R/bpe.model")" = "<bt>"
check "80 sampled back-translations" test "$(wc -l < "$R/mono.sampled.en")" -eq 80
check "each tagged" test "$(grep -c '^<bt> ' "$R/mono.bt.en")" -eq 80
check "the union: parallel + synthetic" test "$(wc -l < "$R/union.en")" -eq 200 -a "$(wc -l < "$R/union.de")" -eq 200
check "the reverse model translates de→en" grep -aq 'src_lang = de' "$R/reverse/checkpoint-00000008.safetensors"
check "the BT model translates en→de" grep -aq 'src_lang = en' "$R/bt/checkpoint-00000008.safetensors"
for name in reverse bt baseline; do
  check "$name trained 8 updates" test "$(tail -n 1 "$R/$name/train.tsv" | cut -f1)" = 8
done
check "the BT model's tokenizer keeps <bt> whole" test "$(echo '<bt> a small dog' | ./tfm bpe encode -m "$R/bt/checkpoint-00000008.safetensors" | cut -d' ' -f1)" = "<bt>"
check "baseline scored" grep -q '^baseline: BLEU = [0-9]' "$R/results.txt"
check "bt scored" grep -q '^bt: *BLEU = [0-9]' "$R/results.txt"
b=$(./tfm bleu "$D/test2016.de" -i "$R/test2016.bt.de" | head -1)
check "BLEU equals tfm bleu's" contains "$res" "bt:       $b"
# the samples are those of tfm translate --sample with the seed
./tfm translate -q -m "$R/reverse/average.safetensors" --sample --topk 10 --seed 1 -i "$R/mono.de" > "$T/again.en"
check "samples reproducible from the seed" cmp -s "$T/again.en" "$R/mono.sampled.en"

expect_exit 0 "rerun" env TFM_DATA="$D" RUN="$R" PARALLEL=120 TIME=0 bash scripts/backtranslate.sh "${tiny[@]}"
check "rerun gives the same results" test "$OUT" = "$res"
finish
