# tests/lib.sh — helpers for shell tests: source it, call ok/expect_*, end with `finish`.
#   expect_exit CODE "description" cmd args...   (stdout/stderr kept in $OUT/$ERR)
set -u
TFM=${TFM:-$PWD/tfm}
T=$(mktemp -d "${TFM_TMP:-/tmp}/sh.XXXXXX")
PASS=0 FAIL=0
ok()   { PASS=$((PASS + 1)); }
fail() { FAIL=$((FAIL + 1)); echo "FAIL ${BASH_SOURCE[1]}:${BASH_LINENO[0]}: $*" >&2; }
check() { local d=$1; shift; if "$@"; then ok; else fail "$d"; fi; }
expect_exit() {
  local want=$1 desc=$2; shift 2
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  OUT=$(cat "$T/out"); ERR=$(cat "$T/err")
  if [ "$rc" -eq "$want" ]; then ok; else fail "$desc: exit $rc, expected $want; stderr: $(head -c 300 "$T/err")"; fi
}
contains() { case "$1" in *"$2"*) return 0;; *) return 1;; esac; }
data_dir() {
  for d in "${TFM_DATA:-}" ../shared/data/multi30k ../../shared/data/multi30k; do
    [ -n "$d" ] && [ -f "$d/val.en" ] && { echo "$d"; return 0; }
  done
  return 1
}
skip() { echo "SKIP ${BASH_SOURCE[1]}: $*" >&2; }
finish() { echo "$PASS passed, $FAIL failed"; rm -rf "$T"; [ "$FAIL" -eq 0 ]; }
