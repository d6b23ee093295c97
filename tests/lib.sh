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

# gen_pairs N SEED OUT_PREFIX: a generated parallel corpus OUT.src/OUT.tgt,
# target = source reversed with word wN -> vN (learnable in a few steps).
gen_pairs() {
  awk -v n="$1" -v seed="$2" -v out="$3" 'BEGIN {
    srand(seed)
    for (i = 0; i < n; i++) {
      len = 2 + int(rand() * 7); s = ""; t = ""
      for (j = 0; j < len; j++) { w[j] = int(rand() * 30); s = s (j ? " " : "") "w" w[j] }
      for (j = len - 1; j >= 0; j--) t = t (j < len - 1 ? " " : "") "v" w[j]
      print s > (out ".src"); print t > (out ".tgt")
    }
  }'
}

# same_tensors A B [RTOL]: the tensors of two safetensors files, metadata
# aside. Without RTOL: identical bytes for every tensor (weights and Adam
# moments). With RTOL: every model tensor within max|a - b| <= RTOL * max|a|,
# except the Adam moments (optimizer.*) and the attention key biases
# (*k_proj.bias): their exact gradient is 0 (softmax is invariant to adding
# q.b_k to every score of a query), so both runs hold rounding noise there,
# which Adam's m / sqrt(v) turns into steps of full size in random directions.
# tensor_diff A B: prints that largest relative difference, "R NAME".
same_tensors() {
  /usr/bin/python3 - "$1" "$2" "${3:-}" <<'PYEOF'
import array, json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]: 8 + n + v['data_offsets'][1]] for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
if a.keys() != b.keys(): sys.exit('different tensor names')
if not sys.argv[3]:
    bad = [k for k in a if a[k] != b[k]]
    if bad: sys.exit('%d tensors differ, e.g. %s' % (len(bad), bad[0]))
    sys.exit(0)
rtol, worst = float(sys.argv[3]), (0.0, '')
for k in a:
    if k.startswith('optimizer.') or k.endswith('k_proj.bias'): continue
    x, y = array.array('f', a[k]), array.array('f', b[k])
    scale = max(abs(v) for v in x) or 1.0
    r = max(abs(u - v) for u, v in zip(x, y)) / scale
    worst = max(worst, (r, k))
print('largest relative difference %.3g (%s)' % worst, file=sys.stderr)
if rtol < 0: print('%.6g %s' % worst)
elif worst[0] > rtol: sys.exit('%s differs by %.3g relative > %g' % (worst[1], worst[0], rtol))
PYEOF
}
tensor_diff() { same_tensors "$1" "$2" -1 2>/dev/null; }

# gen_numbered LANG FIRST COUNT: sentences FIRST.. of a stand-in Multi30k
# (numbered, in en, de or fr), one a line.
gen_numbered() {
  for i in $(seq "$2" $(($2 + $3 - 1))); do
    case $1 in
      en) echo "a small dog number $i runs after the red ball" ;;
      de) echo "ein kleiner Hund Nummer $i läuft dem roten Ball nach" ;;
      fr) echo "un petit chien numéro $i court après la balle rouge" ;;
    esac
  done
}

# restamp FILE: recompute a safetensors file's CRC-32C checksums (metadata
# "crc32c", doc/checkpoints.md) after a test edited it in place, so that the
# file reads as one its writer made that way (a NaN in memory when it was
# saved, another tool's metadata): the checks behind the checksums are what
# such a test is about. Without "crc32c" in the file, it is left as it is.
restamp() {
  /usr/bin/python3 - "$1" <<'PYEOF'
import json, struct, sys
T = []
for i in range(256):
    r = i
    for _ in range(8): r = (r >> 1) ^ 0x82F63B78 if r & 1 else r >> 1
    T.append(r)
def crc(data, r=0):
    r ^= 0xFFFFFFFF
    for x in data: r = T[(r ^ x) & 0xFF] ^ (r >> 8)
    return r ^ 0xFFFFFFFF
p = sys.argv[1]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.get('__metadata__', {})
if 'crc32c' in meta:
    sums, r = {}, 0
    for k in sorted(k for k in meta if k != 'crc32c'):
        r = crc(k.encode() + b'\0' + meta[k].encode() + b'\0', r)
    sums['__metadata__'] = '%08x' % r
    for k, v in h.items():
        if k != '__metadata__':
            s, e = v['data_offsets']
            sums[k] = '%08x' % crc(b[8 + n + s:8 + n + e])
    meta['crc32c'] = json.dumps(sums, separators=(',', ':'))
    hb = json.dumps(h).encode()
    hb += b' ' * (-len(hb) % 8)
    open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
PYEOF
}
