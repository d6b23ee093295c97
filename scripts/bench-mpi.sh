#!/usr/bin/env bash
# bench-mpi.sh — data-parallel training on this machine: 1 process x 2
# threads against 2 ranks x 1 thread (mpirun), the same updates (the one
# process accumulates twice the batches of each rank), runs alternating
# A B A B ... so that both see the same machine load. A benchmark, not a
# test: the figures depend on the machine and on what else runs on it.
#
#   scripts/bench-mpi.sh [multi30k|base|all] [REPEATS]     default: all 1
#   BASE_ACC=2 BASE_UPDATES=2 scripts/bench-mpi.sh base     a quarter of the batch
#   scripts/bench-mpi.sh shard [REPEATS]                    sharded vs unsharded Adam
#   scripts/bench-mpi.sh comm [REPEATS]                     the communication alone
#   BASELINE=main scripts/bench-mpi.sh mem [REPEATS]        rank 0's memory and checkpoints
#
#   multi30k  configs/multi30k.ini, batch_tokens 4000: 1 x accumulate 2 vs
#             2 ranks x 1; 8 updates per run
#   base      configs/base.ini at the paper's batch (6,250 tokens x BASE_ACC
#             = 8: 50k per update): 1 x accumulate 8 vs 2 ranks x 4;
#             BASE_UPDATES = 3 updates per run (~1 min each on a quiet
#             2-core machine), on the WMT14 stand-in of scripts/wmt14-en-de.sh
#             measure (Multi30k sentences in pairs, a 37k joint BPE)
#   shard     the optimizer step sharded over the ranks (this tfm: each rank
#             runs Adam on its half) against the unsharded step (tfm built
#             from commit $UNSHARDED, default the commit before sharding,
#             which logs the same timings: found by its message), both 2 ranks x 1 thread, runs
#             alternating: configs/base.ini at 800 tokens per rank and update
#             (the per-rank batch of the paper's 50k tokens over 64 ranks,
#             where the optimizer's fixed cost counts; 6 updates), and
#             multi30k.ini at 4000 (8 updates); each rank's peak RSS
#             (/usr/bin/time), rank 0's including gathering the moments for
#             the final checkpoint
#   mem       rank 0's memory against rank 1's: 2 ranks x 1 thread,
#             configs/base.ini at 800 tokens per rank, 2 updates, a checkpoint
#             after each and their average at the end (the checking and
#             averaging only rank 0 does); each rank's peak RSS (/usr/bin/time)
#             and rank 0's seconds per checkpoint (its step's log line to the
#             checkpoint's: gathering the moments, checksums, write, fsync);
#             with BASELINE=<commit>, that commit's tfm too, runs alternating;
#             then the resume alone: the same 2 ranks load checkpoint 2 and stop
#             (nothing to do at max_steps 2), each rank's peak RSS, the seconds
#             to rank 0's "resuming from" line and to the end
#   wire      bf16 products (run.precision = bf16), 2 ranks x 1 thread: the
#             all-gather with bf16 on the wire (the product weights as bf16)
#             against fp32 on the wire, each forced (the test hook
#             TFM_TEST_WIRE), and tfm's own choice after trying both (the
#             log's line), runs alternating: configs/base.ini at 800 tokens
#             per rank and update (10 updates) and multi30k.ini at 4000 (10);
#             the all-gather's seconds and the MB the ranks sent in all;
#             BTL=tcp,self: over TCP (loopback) instead of shared memory
#   comm      the gradient's communication alone, 2 ranks (dev/bench_dist.c):
#             MPI_Allreduce of the base model's 62M floats against dist.c's
#             reduce-scatter + all-gather, alternating, REPEATS (default 5)
#
# Per run: time per update and real tokens/s (train.tsv, updates 2.. ; the
# first also sizes the buffers), and for 2 ranks the all-reduce of the
# gradient per update and its share of the update (tfm's log: the transfer
# after a barrier, and the wait at that barrier for the slower rank; sharded:
# the reduce-scatter and the all-gather of the weights), and the optimizer
# step per update on rank 0 (norm, clipping, Adam, bf16 copies).
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all} repeats=${2:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun >/dev/null || { echo "bench-mpi: mpirun not found (make deps)" >&2; exit 1; }
make -s tfm
B=$PWD/runs/bench-mpi
mkdir -p "$B"
mm=$(bash scripts/get-multi30k.sh)

# one NAME CONFIG RANKS ACCUMULATE UPDATES [--set ...]: one run, one result line
# (TFM_BIN: the binary, default ./tfm)
one() {
  local name=$1 config=$2 ranks=$3 acc=$4 updates=$5; shift 5
  local dir=$B/$name threads=$((2 / ranks))
  rm -rf "$dir"; mkdir -p "$dir"
  # each rank's peak RSS into its own file (one stream for all ranks' lines would interleave them)
  rm -f "$dir".peak*
  local cmd=(bash -c 'exec /usr/bin/time -o "$0.peak${OMPI_COMM_WORLD_RANK:-0}" -f %M "$@"' "$dir"
             "${TFM_BIN:-./tfm}" train "$config" --threads "$threads"
             --set "train.dir=$dir" --set data.valid_src= --set data.valid_tgt=
             --set "train.accumulate=$acc" --set "train.max_steps=$updates" --set train.max_time=0
             --set train.log_interval=1 --set train.checkpoint_interval=100000 "$@")
  if [ "$ranks" -eq 1 ]; then "${cmd[@]}" 2>"$dir.log"
  else mpirun -np "$ranks" --oversubscribe --bind-to none ${WIRE:+-x TFM_TEST_WIRE=$WIRE} ${BTL:+--mca btl "$BTL"} "${cmd[@]}" 2>"$dir.log"; fi
  local ar wait ag opt rss mb
  # the unsharded all-reduce, or the sharded reduce-scatter; the all-gather of the weights
  ar=$(sed -n 's/.*\(all-reduce\|reduce-scatter\): \([0-9.]*\) s per update.*/\2/p' "$dir.log")
  wait=$(sed -n 's/.*and \([0-9.]*\) s per update waiting.*/\1/p' "$dir.log")
  ag=$(sed -n 's/.*all-gather: \([0-9.]*\) s per update.*/\1/p' "$dir.log")
  opt=$(sed -n 's/.*optimizer step: \([0-9.]*\) s per update.*/\1/p' "$dir.log")
  mb=$(sed -n 's/.*, \([0-9.]*\) MB per update sent by the ranks.*/\1/p' "$dir.log")
  rss=$(for r in $(seq 0 $((ranks - 1))); do cat "$dir.peak$r" 2>/dev/null || echo 0; done |
        awk '{ printf "%s%.0f", (NR > 1 ? "/" : ""), $1 / 1024 }')   # rank 0 / rank 1 ...
  awk -F'\t' -v name="$name" -v ar="${ar:-0}" -v wait="${wait:-0}" -v ag="${ag:-0}" -v opt="${opt:-0}" -v rss="$rss" -v mb="${mb:-}" '
    NR == 2 { prev = $9 } NR > 2 { dt += $9 - prev; prev = $9; tok += $8; n++ }
    END { t = dt / n
          printf "%-22s %8.3f s/update %7.0f tok/s  gradient sum %6.3f s (%4.1f%%)  wait %6.3f s  all-gather %6.3f s%s  optimizer %6.3f s (%4.1f%%)  peak RSS %s MB\n",
                 name, t, tok / n, ar, 100 * ar / t, wait, ag, mb == "" ? "" : " (" mb " MB sent)", opt, 100 * opt / t, rss }' "$dir/train.tsv"
}

if [ "$which" = multi30k ] || [ "$which" = all ]; then
  echo "== configs/multi30k.ini, 2 x 4000 tokens per update ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  # the tokenizer once, outside the timed runs
  [ -s "$B/m30k-bpe.model" ] || ./tfm bpe learn -q --vocab-size 8000 -o "$B/m30k-bpe.model" "$mm/train.en" "$mm/train.de"
  for r in $(seq "$repeats"); do
    one "m30k-1x2threads-$r" configs/multi30k.ini 1 2 8 --set "data.bpe_model=$B/m30k-bpe.model"
    one "m30k-2ranksx1-$r" configs/multi30k.ini 2 1 8 --set "data.bpe_model=$B/m30k-bpe.model"
  done
fi

base_data() {  # the WMT14 stand-in: Multi30k sentences in pairs, a 37k joint BPE
  for l in en de; do [ -s "$B/pairs.$l" ] || paste -d' ' - - < "$mm/train.$l" > "$B/pairs.$l"; done
  [ -s "$B/bpe37k.model" ] || ./tfm bpe learn -q --vocab-size 37000 -o "$B/bpe37k.model" "$mm/train.en" "$mm/train.de" "$mm/train.fr"
}

both_data() {  # shard and wire: the base model's data (data=(...)) and the Multi30k tokenizer
  base_data
  [ -s "$B/m30k-bpe.model" ] || ./tfm bpe learn -q --vocab-size 8000 -o "$B/m30k-bpe.model" "$mm/train.en" "$mm/train.de"
  data=(--set "data.train_src=$B/pairs.en" --set "data.train_tgt=$B/pairs.de" --set "data.bpe_model=$B/bpe37k.model")
}

if [ "$which" = comm ]; then
  make -s build/dev/bench_dist
  echo "== communication, 2 ranks ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  mpirun -np 2 --oversubscribe --bind-to none build/dev/bench_dist 62033920 "${2:-5}"
fi

if [ "$which" = mem ]; then
  base_data
  bins=("$PWD/tfm")
  if [ -n "${BASELINE:-}" ]; then   # the baseline tfm, built from its commit
    U=$B/baseline-$BASELINE
    [ -x "$U/tfm" ] || { rm -rf "$U"; mkdir -p "$U"; git archive "$BASELINE" | tar -x -C "$U"; make -C "$U" -s tfm; }
    bins=("$U/tfm" "$PWD/tfm")
  fi
  echo "== rank 0's memory, 2 ranks x 1 thread, configs/base.ini at 800 tokens per rank, 2 updates, 2 checkpoints and their average ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  for r in $(seq "$repeats"); do
    for bin in "${bins[@]}"; do
      dir=$B/mem-$r; rm -rf "$dir"; mkdir -p "$dir"
      # each rank under /usr/bin/time; rank 0's log lines stamped as they come
      mpirun -np 2 --oversubscribe --bind-to none bash -c 'exec /usr/bin/time -o "$0.peak$OMPI_COMM_WORLD_RANK" -f %M "$@"' \
        "$dir" "$bin" train configs/base.ini --threads 1 --set "train.dir=$dir" --set data.valid_src= --set data.valid_tgt= \
        --set train.accumulate=1 --set train.max_steps=2 --set train.max_time=0 --set train.log_interval=1 \
        --set train.checkpoint_interval=1 --set "data.train_src=$B/pairs.en" --set "data.train_tgt=$B/pairs.de" \
        --set "data.bpe_model=$B/bpe37k.model" --set train.batch_tokens=800 2>&1 |
        while IFS= read -r l; do echo "$EPOCHREALTIME $l"; done > "$dir.log"
      ck=$(awk '$3 == "step" && $5 == "|" { t[$4] = $1 } $3 == "checkpoint" { n = $4; sub(/.*checkpoint-0*/, "", n); sub(/\..*/, "", n); printf "%s%.2f", (k++ ? " / " : ""), $1 - t[n] }' "$dir.log")
      printf '%-60s peak RSS rank 0 %5d MB, rank 1 %5d MB; checkpoints %s s\n' "$bin" \
        $(($(cat "$dir.peak0") / 1024)) $(($(cat "$dir.peak1") / 1024)) "$ck"
      # the resume alone: the same 2 ranks load checkpoint 2 and stop (max_steps 2: nothing to do), so
      # each rank's peak is the resume's (weights, its slice of the moments, the data) and the seconds
      # are mpirun's whole run, the corpus caches read and the replicas compared included
      t0=$EPOCHREALTIME
      mpirun -np 2 --oversubscribe --bind-to none bash -c 'exec /usr/bin/time -o "$0.rpeak$OMPI_COMM_WORLD_RANK" -f %M "$@"' \
        "$dir" "$bin" train configs/base.ini --threads 1 --set "train.dir=$dir" --set data.valid_src= --set data.valid_tgt= \
        --set train.max_steps=2 --set "data.train_src=$B/pairs.en" --set "data.train_tgt=$B/pairs.de" \
        --set "data.bpe_model=$B/bpe37k.model" --set train.batch_tokens=800 2>&1 |
        while IFS= read -r l; do echo "$EPOCHREALTIME $l"; done > "$dir.resume.log"
      t1=$EPOCHREALTIME
      grep -q "resuming from .*checkpoint-00000002" "$dir.resume.log" || { echo "bench-mpi: the resume did not resume (see $dir.resume.log)" >&2; exit 1; }
      # seconds to rank 0's "resuming from" line (start, MPI, the checkpoint read and checked), and in all
      printf '%-60s resume: peak RSS rank 0 %5d MB, rank 1 %5d MB; loaded after %.2f s, %.2f s in all\n' "$bin" \
        $(($(cat "$dir.rpeak0") / 1024)) $(($(cat "$dir.rpeak1") / 1024)) \
        "$(awk -v a="$t0" '$3 == "resuming" { print $1 - a; exit }' "$dir.resume.log")" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
    done
  done
fi

if [ "$which" = shard ]; then
  rev=${UNSHARDED:-$(git log --format=%h -1 --grep='the unsharded baseline of scripts/bench-mpi.sh shard')}
  [ -n "$rev" ] || { echo "bench-mpi: the unsharded commit not found; set UNSHARDED=<commit>" >&2; exit 1; }
  U=$B/unsharded-$rev
  if [ ! -x "$U/tfm" ]; then   # the unsharded tfm, built from its commit
    rm -rf "$U"; mkdir -p "$U"
    git archive "$rev" | tar -x -C "$U"
    make -C "$U" -s tfm
  fi
  both_data
  echo "== the optimizer step sharded (this tfm) vs unsharded ($rev), 2 ranks x 1 thread ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  echo "   configs/base.ini, 800 tokens per rank and update; configs/multi30k.ini, 4000"
  for r in $(seq "$repeats"); do
    TFM_BIN=$U/tfm one "base800-unsharded-$r" configs/base.ini 2 1 6 "${data[@]}" --set train.batch_tokens=800
    one "base800-sharded-$r" configs/base.ini 2 1 6 "${data[@]}" --set train.batch_tokens=800
  done
  for r in $(seq "$repeats"); do
    TFM_BIN=$U/tfm one "m30k-unsharded-$r" configs/multi30k.ini 2 1 8 --set "data.bpe_model=$B/m30k-bpe.model"
    one "m30k-sharded-$r" configs/multi30k.ini 2 1 8 --set "data.bpe_model=$B/m30k-bpe.model"
  done
fi

if [ "$which" = wire ]; then
  both_data
  echo "== bf16 products, the all-gather with bf16 on the wire vs fp32, 2 ranks x 1 thread ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  echo "   configs/base.ini, 800 tokens per rank and update; configs/multi30k.ini, 4000"
  for r in $(seq "$repeats"); do
    for w in fp32 bf16 chosen; do
      WIRE=${w#chosen} one "base800-wire-$w-$r" configs/base.ini 2 1 10 "${data[@]}" --set train.batch_tokens=800 --set run.precision=bf16
      [ $w = chosen ] && sed -n 's/^tfm: all-gather of the weights: /    /p' "$B/base800-wire-$w-$r.log"
    done
  done
  for r in $(seq "$repeats"); do
    for w in fp32 bf16 chosen; do
      WIRE=${w#chosen} one "m30k-wire-$w-$r" configs/multi30k.ini 2 1 10 --set "data.bpe_model=$B/m30k-bpe.model" --set run.precision=bf16
      [ $w = chosen ] && sed -n 's/^tfm: all-gather of the weights: /    /p' "$B/m30k-wire-$w-$r.log"
    done
  done
fi

if [ "$which" = base ] || [ "$which" = all ]; then
  acc=${BASE_ACC:-8} updates=${BASE_UPDATES:-3}
  echo "== configs/base.ini, 6,250 x $acc tokens per update ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  base_data
  data=(--set "data.train_src=$B/pairs.en" --set "data.train_tgt=$B/pairs.de" --set "data.bpe_model=$B/bpe37k.model"
        --set train.batch_tokens=6250)
  for r in $(seq "$repeats"); do
    one "base-1x2threads-$r" configs/base.ini 1 "$acc" "$updates" "${data[@]}"
    one "base-2ranksx1-$r" configs/base.ini 2 $((acc / 2)) "$updates" "${data[@]}"
  done
fi
