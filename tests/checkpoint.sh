#!/usr/bin/env bash
# tfm average: usage and runtime errors, and averaging checkpoints written by
# an independent safetensors writer (Python json + numpy), read back by it.
cd "$(dirname "$0")/.." && source tests/lib.sh
PY=/usr/bin/python3

expect_exit 0 "--help" "$TFM" average --help
for w in "usage: tfm average" "--last N" "-o, --output OUT" "RUN_DIR" "example"; do
  check "help mentions $w" contains "$OUT" "$w"
done
expect_exit 2 "no -o" "$TFM" average "$T"
check "missing -o named" contains "$ERR" "missing -o"
expect_exit 2 "no input" "$TFM" average -o "$T/x.safetensors"
check "no input named" contains "$ERR" "no input"
expect_exit 2 "unknown option" "$TFM" average --bogus -o "$T/x.safetensors" "$T"
check "unknown option named" contains "$ERR" "--bogus"
expect_exit 2 "--last 0" "$TFM" average --last 0 -o "$T/x.safetensors" "$T"
expect_exit 2 "--last abc" "$TFM" average --last abc -o "$T/x.safetensors" "$T"
expect_exit 2 "-o without value" "$TFM" average "$T" -o
touch "$T/a.safetensors"
expect_exit 2 "--last with files" "$TFM" average --last 2 -o "$T/x.safetensors" "$T/a.safetensors"
expect_exit 2 "directory and files" "$TFM" average -o "$T/x.safetensors" "$T" "$T/a.safetensors"
check "nothing on stdout" test -z "$OUT"
mkdir -p "$T/empty"
expect_exit 1 "run dir without checkpoints" "$TFM" average -o "$T/x.safetensors" "$T/empty"
check "empty dir message" contains "$ERR" "no training checkpoints"
expect_exit 1 "missing file" "$TFM" average -o "$T/x.safetensors" "$T/nope.safetensors"
check "missing file named" contains "$ERR" "$T/nope.safetensors"
expect_exit 1 "empty file" "$TFM" average -o "$T/x.safetensors" "$T/a.safetensors"
check "empty file: too short" contains "$ERR" "$T/a.safetensors: file is 0 bytes"

if ! $PY -c 'import numpy' 2>/dev/null; then
  skip "/usr/bin/python3 with numpy not available: averaging of Python-written files not tested"
  finish; exit
fi

# An independent writer: json.dumps (ASCII with \uXXXX escapes), no padding,
# tensors in another order than their data, optimizer state included.
cat > "$T/write.py" <<'EOF'
import json, struct, sys
import numpy as np
path, seed, d_model, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
tensors = {
    "encoder.layers.0.fc1.bias": rng.standard_normal(6).astype("<f4"),
    "encoder.embed_tokens.weight": (rng.standard_normal((rows, 4)) * 1e3).astype("<f4"),
    "optimizer.adam_m": rng.standard_normal(3).astype("<f4"),
}
meta = {"format": "tfm-checkpoint-1", "config": "[model]\nd_model = %d\nheads = 2\n" % d_model,
        "tokenizer": "tfm-bpe 1\n\u2581the \u00e9 \U0001F600", "step": str(seed), "note": "seed %d \u2581" % seed}
header, data, off = {"__metadata__": meta}, b"", 0
for name in sorted(tensors, reverse=True):
    b = tensors[name].tobytes()
    header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
    data += b
    off += len(b)
h = json.dumps(header).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF
cat > "$T/check.py" <<'EOF'
import json, struct, sys
import numpy as np
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n].decode("utf-8"))
    meta = h.pop("__metadata__", {})
    data = b[8 + n:]
    assert max(v["data_offsets"][1] for v in h.values()) == len(data)
    return meta, {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"]) for k, v in h.items()}
out, inputs = sys.argv[1], sys.argv[2:]
meta, avg = read(out)
ins = [read(p)[1] for p in inputs]
assert sorted(avg) == ["encoder.embed_tokens.weight", "encoder.layers.0.fc1.bias"], sorted(avg)
for k in avg:
    want = (sum(x[k].astype(np.float64) for x in ins) / len(ins)).astype(np.float32)
    assert np.array_equal(avg[k], want), k
assert json.loads(meta["averaged_from"]) == inputs, meta["averaged_from"]
newest = read(inputs[-1])[0]
assert meta["note"] == newest["note"] and meta["tokenizer"] == newest["tokenizer"]
assert "step" not in meta
print("ok")
EOF
R="$T/run"
mkdir -p "$R"
for s in 100 200 300; do $PY "$T/write.py" "$R/checkpoint-$(printf %08d $s).safetensors" $s 8 5; done
expect_exit 0 "average --last 2 RUN_DIR" "$TFM" average --last 2 -o "$R/average.safetensors" "$R"
check "log names the output" contains "$ERR" "$R/average.safetensors"
expect_exit 0 "Python reads the mean" $PY "$T/check.py" "$R/average.safetensors" "$R/checkpoint-00000200.safetensors" "$R/checkpoint-00000300.safetensors"
check "python check ok" test "$OUT" = ok
expect_exit 0 "average all files" "$TFM" average -o "$T/all.safetensors" "$R"/checkpoint-*.safetensors
expect_exit 0 "mean of three" $PY "$T/check.py" "$T/all.safetensors" "$R"/checkpoint-0000{0100,0200,0300}.safetensors
expect_exit 0 "average of averages is accepted" "$TFM" average -o "$T/again.safetensors" "$T/all.safetensors" "$R/average.safetensors"
expect_exit 1 "--last more than there are" "$TFM" average --last 5 -o "$T/x.safetensors" "$R"
check "count named" contains "$ERR" "holds 3"

$PY "$T/write.py" "$T/shape.safetensors" 7 8 6
expect_exit 1 "different shapes refused" "$TFM" average -o "$T/x.safetensors" "$R/checkpoint-00000100.safetensors" "$T/shape.safetensors"
check "shape difference named" contains "$ERR" "'encoder.embed_tokens.weight' is F32 [5, 4] in $R/checkpoint-00000100.safetensors but F32 [6, 4] in $T/shape.safetensors"
$PY "$T/write.py" "$T/config.safetensors" 7 16 5
expect_exit 1 "different configs refused" "$TFM" average -o "$T/x.safetensors" "$R/checkpoint-00000100.safetensors" "$T/config.safetensors"
check "config difference named" contains "$ERR" "$R/checkpoint-00000100.safetensors and $T/config.safetensors have different model configs: [model] d_model: 8 vs 16"
check "nothing written when refused" test ! -e "$T/x.safetensors"
head -c 300 "$R/checkpoint-00000100.safetensors" > "$T/trunc.safetensors"
expect_exit 1 "truncated input refused" "$TFM" average -o "$T/x.safetensors" "$R/checkpoint-00000100.safetensors" "$T/trunc.safetensors"
check "truncated file named" contains "$ERR" "$T/trunc.safetensors"
finish
