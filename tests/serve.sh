#!/usr/bin/env bash
# serve.sh — tfm serve over loopback (127.0.0.1 only), on a tiny random model:
# usage errors, a model that cannot load fails before the port opens, a busy
# port; then (tests/serve_client.py) concurrent requests equal `tfm translate`
# byte for byte, every bad-input case, a slow client, /metrics against what
# was sent; an ensemble as translate's; 429 with Retry-After on a full queue;
# the drain on SIGTERM (exit 0).
# Every server runs under `timeout`, so none outlives the test.
cd "$(dirname "$0")/.." && source tests/lib.sh
MAKE_MODEL=${TFM_BUILD:-build}/dev/make_model
if ! [ -x "$MAKE_MODEL" ]; then fail "$MAKE_MODEL not built (make tests)"; finish; exit; fi
CLIENT="python3 tests/serve_client.py"

# ---- help and usage errors ----
expect_exit 0 "--help" "$TFM" serve --help
for w in "POST /translate" "GET /health" "GET /metrics" --host --port --max-batch-tokens --max-delay-ms --max-queue \
         --max-lines --max-line-bytes --max-body-bytes --timeout "Retry-After" "SIGINT/SIGTERM" "example:"; do
  check "help mentions $w" contains "$OUT" "$w"
done
expect_exit 2 "no model" "$TFM" serve
check "no model: says -m" contains "$ERR" "-m MODEL"
expect_exit 2 "--port 70000" "$TFM" serve -m x --port 70000
expect_exit 2 "--max-delay-ms -1" "$TFM" serve -m x --max-delay-ms -1
expect_exit 2 "--max-queue 0" "$TFM" serve -m x --max-queue 0
expect_exit 2 "--max-lines over --max-queue" "$TFM" serve -m x --max-lines 10 --max-queue 5
check "says why" contains "$ERR" "could never be queued"
expect_exit 2 "unknown option" "$TFM" serve -m x --max-batch-token 5
check "suggests --max-batch-tokens" contains "$ERR" "--max-batch-tokens"
expect_exit 2 "--topk without --sample" "$TFM" serve -m x --topk 3

# ---- a tokenizer and a random model (as translate.sh) ----
for i in $(seq 1 150); do
  echo "the quick brown fox number $i jumps over the lazy dog and runs into the forest"
  echo "der schnelle braune Fuchs Nummer $i springt über den faulen Hund und läuft in den Wald"
done > "$T/corpus.txt"
expect_exit 0 "learn a BPE" "$TFM" bpe learn --vocab-size 400 -o "$T/bpe.model" "$T/corpus.txt"
M="$T/model.safetensors"
expect_exit 0 "make a random model" "$MAKE_MODEL" "$M" configs/tiny.ini "$T/bpe.model" 1 --set decode.max_len_b=20
if ! [ -s "$M" ]; then fail "no model to test with"; finish; exit; fi

# ---- a model that cannot load: exit 1 naming it, before listening ----
expect_exit 1 "missing model" timeout 20 "$TFM" serve -m "$T/nope.safetensors" --port 0
check "names the file" contains "$ERR" "$T/nope.safetensors"
check "never listened" bash -c "! grep -q listening <<< \"\$1\"" _ "$ERR"
head -c 3000 "$M" > "$T/truncated.safetensors"
expect_exit 1 "truncated model" timeout 20 "$TFM" serve -m "$T/truncated.safetensors" --port 0
check "never listened" bash -c "! grep -q listening <<< \"\$1\"" _ "$ERR"

# start_server LOG ARGS...: starts tfm serve on a free loopback port (under
# timeout, SIGKILL 10 s after its SIGTERM if it still hangs), sets PID and PORT once it listens.
start_server() {
  local log=$1; shift
  timeout -k 10 120 "$TFM" serve -m "$M" --host 127.0.0.1 --port 0 "$@" 2> "$log" &
  PID=$! PORT=
  for _ in $(seq 1 200); do
    PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    [ -n "$PORT" ] && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  fail "server did not start: $(cat "$log")"
  return 1
}
# stop_server: SIGTERM, then its exit code in RC (124: timeout killed it)
stop_server() { kill -TERM "$PID" 2>/dev/null; wait "$PID"; RC=$?; }

# ---- a busy port: exit 1 with the address ----
if start_server "$T/busy0.log" --threads 1; then
  expect_exit 1 "port in use" timeout 20 "$TFM" serve -m "$M" --port "$PORT"
  check "says the port is taken" contains "$ERR" "cannot listen on 127.0.0.1 port $PORT"
  stop_server
  check "default host is loopback" grep -q "listening on http://127.0.0.1:" "$T/busy0.log"
fi

# ---- the suite: concurrent == offline, bad input, slow client, metrics ----
if start_server "$T/suite.log" --threads 2 --max-delay-ms 20 --max-batch-tokens 64 --batch-size 4 \
     --max-lines 8 --max-line-bytes 256 --max-body-bytes 2000 --timeout 2; then
  check "suite (see FAIL serve_client lines)" $CLIENT suite "$PORT" "$TFM" "$M"
  stop_server
  check "suite server exits 0 on SIGTERM (got $RC)" test "$RC" -eq 0
  check "logs the drain" grep -q "SIGTERM: no new connections" "$T/suite.log"
  grep -h "^suite:" "$T/suite.log" >&2
fi

# ---- an ensemble (-m twice): the same translations as translate's ensemble ----
expect_exit 0 "a second model" "$MAKE_MODEL" "$T/model2.safetensors" configs/tiny.ini "$T/bpe.model" 2 --set decode.max_len_b=20
if start_server "$T/ensemble.log" -m "$T/model2.safetensors" --threads 1; then
  printf 'the quick brown fox\nder Hund\n\nläuft in den Wald\n' > "$T/ens.in"
  python3 -c '
import http.client, json, sys
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("POST", "/translate", json.dumps({"text": lines}))
r = json.loads(c.getresponse().read())
sys.stdout.write("".join(t + "\n" for t in r["translations"]))' "$PORT" "$T/ens.in" > "$T/ens.served"
  "$TFM" translate -q -m "$M" -m "$T/model2.safetensors" < "$T/ens.in" > "$T/ens.offline"
  "$TFM" translate -q -m "$M" < "$T/ens.in" > "$T/single.offline"
  check "ensemble: served == translate -m A -m B" cmp -s "$T/ens.served" "$T/ens.offline"
  check "ensemble: not the first model alone" bash -c "! cmp -s '$T/ens.served' '$T/single.offline'"
  check "ensemble: 4 lines" test "$(wc -l < "$T/ens.served")" -eq 4
  stop_server
fi

# ---- --precision int8, bf16: the same translations as translate with that precision (the server
# releases the model's fp32 weights, as translate does), and /info says so ----
for prec in int8 bf16; do
if start_server "$T/$prec.log" --threads 1 --precision $prec; then
  python3 -c '
import http.client, json, sys
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("POST", "/translate", json.dumps({"text": lines}))
r = json.loads(c.getresponse().read())
sys.stdout.write("".join(t + "\n" for t in r["translations"]))
c.request("GET", "/info")
i = json.loads(c.getresponse().read())
sys.stderr.write("precision=%s kernel=%s\n" % (i["precision"], i[i["precision"] + "_kernel"]))' "$PORT" "$T/ens.in" > "$T/$prec.served" 2> "$T/$prec.info"
  "$TFM" translate -q -m "$M" --precision $prec < "$T/ens.in" > "$T/$prec.offline"
  check "$prec: served == translate --precision $prec" cmp -s "$T/$prec.served" "$T/$prec.offline"
  check "$prec: /info names the precision and the kernel" grep -q "precision=$prec kernel=" "$T/$prec.info"
  stop_server
fi
done

# ---- --shortlist: the same translations as translate --shortlist (per-sentence candidates: batch invariant) ----
expect_exit 0 "a shortlist" "$TFM" shortlist -q -m "$M" --src "$T/corpus.txt" --tgt "$T/corpus.txt" -k 3 -n 5 -o "$T/sl.txt"
if start_server "$T/sl.log" --threads 1 --max-delay-ms 20 --shortlist "$T/sl.txt"; then
  head -12 "$T/corpus.txt" >> "$T/ens.in"
  python3 -c '
import http.client, json, sys
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.request("POST", "/translate", json.dumps({"text": lines}))
r = json.loads(c.getresponse().read())
sys.stdout.write("".join(t + "\n" for t in r["translations"]))' "$PORT" "$T/ens.in" > "$T/sl.served"
  "$TFM" translate -q -m "$M" --shortlist "$T/sl.txt" --batch-size 3 < "$T/ens.in" > "$T/sl.offline"
  check "shortlist: served == translate --shortlist" cmp -s "$T/sl.served" "$T/sl.offline"
  check "shortlist: one line per input" test "$(wc -l < "$T/sl.served")" -eq "$(wc -l < "$T/ens.in")"
  stop_server
fi

# ---- a full queue: 429 with Retry-After ----
if start_server "$T/overflow.log" --threads 1 --max-queue 8 --max-lines 8 --max-delay-ms 3000; then
  check "overflow" $CLIENT overflow "$PORT"
  stop_server
  check "overflow server exits 0 (got $RC)" test "$RC" -eq 0
fi

# ---- SIGTERM with requests in flight: all answered, exit 0 ----
if start_server "$T/drain.log" --threads 2 --max-delay-ms 1500; then
  check "drain" $CLIENT drain "$PORT" "$PID" "$TFM" "$M"
  wait "$PID"; RC=$?
  check "drained server exits 0 (got $RC)" test "$RC" -eq 0
  check "drain log: 3 requests" grep -q "stopped after 3 translate requests, 4 sentences" "$T/drain.log"
fi
finish
