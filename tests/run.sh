#!/usr/bin/env bash
# Run every C test binary ($TFM_BUILD/test_*) and shell test (tests/*.sh),
# then print the totals as "N passed, N failed". Exit 1 if anything failed.
# Run from the repository root (make test does). TFM=path to the binary.
set -u
cd "$(dirname "$0")/.."
export TFM=${TFM:-$PWD/tfm} TFM_BUILD=${TFM_BUILD:-$PWD/build}
export TFM_TMP=$(mktemp -d /tmp/tfm-test.XXXXXX)
trap 'rm -rf "$TFM_TMP"' EXIT
passed=0 failed=0 ran=0 broken=()
only=${1:-}
run_one() {  # name, command...
  local name=$1; shift
  local out="$TFM_TMP/$name.log" t0=$SECONDS
  "$@" >"$out" 2>&1
  local rc=$?
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
  local p=0 f=0
  if [ -n "$line" ]; then p=${line%% passed*}; f=${line#*, }; f=${f%% failed}; fi
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # crashed or exited non-zero
  # a test that checked nothing proves nothing: it fails, unless it said why it skipped
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && ! grep -q '^SKIP' "$out"; then
    echo "FAIL $name: ran no checks (no 'N passed, N failed' line and no SKIP)"; f=1
  fi
  ran=$((ran + 1))
  passed=$((passed + p)); failed=$((failed + f))
  grep -E '^(FAIL|SKIP)' "$out" | head -40
  if [ "$f" -ne 0 ]; then broken+=("$name"); tail -20 "$out"; fi
  printf '%-28s %4d passed, %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
}
for t in "$TFM_BUILD"/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ -n "$only" ] && [[ "$name" != *"$only"* ]] && continue
  run_one "$name" "$t"
done
for t in tests/*.sh; do
  name=$(basename "$t" .sh)
  [ "$name" = run ] || [ "$name" = lib ] && continue
  [ -n "$only" ] && [[ "$name" != *"$only"* ]] && continue
  run_one "$name.sh" bash "$t"
done
echo "----"
if [ "$ran" -eq 0 ]; then echo "FAIL: no test matches '$only'"; failed=$((failed + 1)); fi
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
