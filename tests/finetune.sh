#!/usr/bin/env bash
# Fine-tuning ([train] init_from): a new run starts from a checkpoint's
# weights and tokenizer with a fresh optimizer, schedule and step count; its
# first logged loss is exactly `tfm eval`'s loss of the initial model on the
# same batch; shape and vocabulary mismatches are errors naming the key; a
# run directory with checkpoints resumes and ignores init_from. Also
# [data] symbols through training (the checkpoint's tokenizer keeps them).
cd "$(dirname "$0")/.." && source tests/lib.sh

gen_pairs 400 1 "$T/train"
gen_pairs 40 2 "$T/valid"
# the in-domain set: 6 pairs, every one of another length, so that training's
# batch (shuffled, then sorted by length) and eval's (sorted) are the same
printf 'w1 w2\nw3 w4 w5\nw6 w7 w8 w9\nw1 w1 w2 w2 w3\nw4 w5 w6 w7 w8 w9\nw9 w8 w7 w6 w5 w4 w3\n' > "$T/ft.src"
awk '{ s = ""; for (j = NF; j >= 1; j--) s = s (j < NF ? " " : "") "v" substr($j, 2); print s }' "$T/ft.src" > "$T/ft.tgt"

base() {  # base DIR [more --set ...]: the tiny model on the generated task
  local dir=$1; shift
  "$TFM" train configs/tiny.ini --threads 1 -q \
    --set data.train_src="$T/train.src" --set data.train_tgt="$T/train.tgt" \
    --set data.valid_src="$T/valid.src" --set data.valid_tgt="$T/valid.tgt" \
    --set data.bpe_model="$dir/bpe.model" --set data.vocab_size=300 \
    --set train.dir="$dir" --set train.batch_tokens=600 --set train.warmup=10 --set train.max_steps=20 "$@"
}
finetune() {  # finetune DIR [more --set ...]: dropout off, one batch per update, a loss logged every update
  local dir=$1; shift
  "$TFM" train configs/tiny.ini --threads 1 \
    --set data.train_src="$T/ft.src" --set data.train_tgt="$T/ft.tgt" \
    --set data.valid_src="$T/valid.src" --set data.valid_tgt="$T/valid.tgt" \
    --set data.bpe_model="$dir/bpe.model" --set data.vocab_size=300 \
    --set model.dropout=0 --set model.attention_dropout=0 --set model.relu_dropout=0 \
    --set train.dir="$dir" --set train.batch_tokens=600 --set train.warmup=10 --set train.log_interval=1 \
    --set train.init_from="$T/base/checkpoint-00000020.safetensors" "$@"
}

expect_exit 0 "base run" base "$T/base"
INIT=$T/base/checkpoint-00000020.safetensors
check "base checkpoint written" test -f "$INIT"

# ---- 1. the first logged loss is the initial model's loss on that batch ----
expect_exit 0 "fine-tune one step" finetune "$T/ft" --set train.max_steps=1
check "logged as fine-tuning" contains "$ERR" "fine-tuning the weights of $INIT"
check "fresh step count" test -f "$T/ft/checkpoint-00000001.safetensors"
expect_exit 0 "eval of the initial model on the in-domain set" "$TFM" eval -m "$INIT" --src "$T/ft.src" --ref "$T/ft.tgt" --no-translate --threads 1 -q
want=$(sed -n 's/^loss_per_token = //p' <<<"$OUT")
got=$(awk -F'\t' 'NR == 2 { print $3 }' "$T/ft/train.tsv")
check "first logged loss ($got) == eval's loss of the initial model ($want)" test -n "$want" -a "$got" = "$want"
# fresh schedule: the lr of step 1 is the schedule's first value, lr_scale * d^-0.5 * 1 * warmup^-1.5
lr=$(awk -F'\t' 'NR == 2 { print $6 }' "$T/ft/train.tsv")
check "lr at step 1 ($lr) is the schedule's start" awk -v lr="$lr" 'BEGIN { w = 32 ^ -0.5 * 10 ^ -1.5; exit !(lr > w * 0.9999 && lr < w * 1.0001) }'
check "the checkpoint's tokenizer kept as bpe_model" cmp -s "$T/ft/bpe.model" "$T/base/bpe.model"
# and the update did move the weights
expect_exit 0 "eval of the fine-tuned model" "$TFM" eval -m "$T/ft/checkpoint-00000001.safetensors" --src "$T/ft.src" --ref "$T/ft.tgt" --no-translate --threads 1 -q
after=$(sed -n 's/^loss_per_token = //p' <<<"$OUT")
check "one step on the in-domain set lowers its loss ($want -> $after)" awk -v a="$want" -v b="$after" 'BEGIN { exit !(b < a) }'

# ---- 2. a run directory with checkpoints resumes; init_from is ignored ----
expect_exit 0 "resume the fine-tuning run" finetune "$T/ft" --set train.max_steps=3
check "init_from ignored with a log line" contains "$ERR" "init_from = $INIT is ignored"
check "resumed from step 1" contains "$ERR" "resuming from $T/ft/checkpoint-00000001.safetensors"
check "went on to step 3" test -f "$T/ft/checkpoint-00000003.safetensors"

# ---- 3. mismatches are errors naming the key ----
expect_exit 1 "another model shape" finetune "$T/bad1" --set train.max_steps=1 --set model.d_ff=128
check "shape mismatch names the key" contains "$ERR" "[model] d_ff: 64 vs 128"
check "... and init_from" contains "$ERR" "[train] init_from = $INIT"
expect_exit 1 "another vocabulary size" finetune "$T/bad2" --set train.max_steps=1 --set data.vocab_size=400
check "vocabulary mismatch names the key" contains "$ERR" "[data] vocab_size: 300 vs 400"
"$TFM" bpe learn -q --vocab-size 300 -o "$T/other.model" "$T/ft.src" "$T/valid.tgt"
expect_exit 1 "a config naming another tokenizer" finetune "$T/bad3" --set train.max_steps=1 --set data.bpe_model="$T/other.model"
check "tokenizer mismatch names bpe_model" contains "$ERR" "[data] bpe_model = $T/other.model is not the tokenizer of [train] init_from"
cp "$T/base/bpe.model" "$T/same.model"
expect_exit 0 "a config naming the same tokenizer" finetune "$T/ok3" --set train.max_steps=1 --set data.bpe_model="$T/same.model"
expect_exit 1 "a missing init_from" finetune "$T/bad4" --set train.max_steps=1 --set train.init_from="$T/nope.safetensors"
check "missing checkpoint named" contains "$ERR" "[train] init_from = $T/nope.safetensors"
check "no checkpoint in a refused run" test -z "$(ls "$T/bad1" "$T/bad2" "$T/bad3" "$T/bad4" 2>/dev/null | grep safetensors)"

# ---- 4. [data] symbols: learned into the tokenizer, kept by checkpoints ----
expect_exit 0 "train with [data] symbols" base "$T/sym" --set train.max_steps=2 --set data.symbols='<bt>,<2v>'
check "bpe_model is a version 2 file" test "$(head -1 "$T/sym/bpe.model")" = "tfm-bpe 2"
pieces=$(echo '<2v> w1 w2 <bt>' | "$TFM" bpe encode -m "$T/sym/checkpoint-00000002.safetensors")
check "the checkpoint's tokenizer keeps the symbols whole ($pieces)" test "$pieces" = "<2v> ▁w 1 ▁w 2 ▁ <bt>"
expect_exit 1 "resume with other symbols" base "$T/sym" --set train.max_steps=3 --set data.symbols='<bt>'
check "symbol mismatch named" contains "$ERR" "[data] symbols: $T/sym/checkpoint-00000002.safetensors has the user symbols '<bt>,<2v>' but '<bt>' were asked for"
expect_exit 1 "fine-tune with symbols the model lacks" finetune "$T/bad5" --set train.max_steps=1 --set data.symbols='<bt>'
check "symbols of init_from named" contains "$ERR" "$INIT has no user symbols but '<bt>' were asked for"
finish
