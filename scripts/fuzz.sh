#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS [NAME...]] — run the libFuzzer targets built by
# `make fuzz-build` (build-fuzz/fuzz_NAME), each for SECONDS (default 60),
# one after the other, from the seeds in tests/fuzz/NAME/; the corpus each
# grows is kept in build-fuzz/corpus/NAME (the next run starts from it).
# Limits per input: 10 s, 2 GiB RSS, and no single allocation over 1 GiB
# (the largest a valid input of a few KB could need is far less).
# One line per target: executions, executions/s, corpus, peak memory,
# findings. A finding (crash, sanitizer report, leak, timeout, out of memory)
# keeps its input in build-fuzz/findings/NAME/ and makes the script exit 1;
# reproduce with: build-fuzz/fuzz_NAME build-fuzz/findings/NAME/<file>
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do f=${f##*/fuzz_}; names+=("${f%.c}"); done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1
failed=0
for n in "${names[@]}"; do
  bin=build-fuzz/fuzz_$n
  [ -x "$bin" ] || { echo "fuzz: $bin missing (make fuzz-build)"; failed=1; continue; }
  mkdir -p "build-fuzz/corpus/$n" "build-fuzz/findings/$n"
  log=build-fuzz/fuzz_$n.log
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$n/" "build-fuzz/corpus/$n" "tests/fuzz/$n" > "$log" 2>&1
  rc=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  found=$(ls "build-fuzz/findings/$n" | wc -l)
  printf 'fuzz %-12s %5ss  %10s execs  %7s/s  corpus %5s  peak %5s MB  findings %s%s\n' "$n" "$secs" \
    "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" "$(ls "build-fuzz/corpus/$n" | wc -l)" \
    "$(stat peak_rss_mb)" "$found" "$([ $rc -ne 0 ] && echo "  (exit $rc, see $log)")"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -m3 -E 'ERROR: |runtime error|SUMMARY' "$log" | sed 's/^/  /'
  fi
done
exit $failed
