#!/usr/bin/env bash
# bench-serve.sh — tfm serve under load, against offline tfm translate of the
# same lines in the same run (a benchmark, not a test; loopback only:
# the server listens on 127.0.0.1 and every request goes there).
#
#   1. offline: tfm translate of Multi30k test2016.en (1,000 lines) with the
#      model's decode settings, timed by translate itself (decoding only, the
#      model load excluded); run before and after the load phases, the faster
#      kept (the stricter baseline on a shared machine).
#   2. load: one server; at each concurrency (1 4 16 64) every test2016 line
#      is sent once, in requests of 1-20 lines (seeded), each worker with one
#      keep-alive connection (scripts/bench_serve.py); p50/p95/p99 request
#      latency, sentences/s and its ratio to offline; every translation is
#      checked against the offline output ("differ" must be 0). Offline runs
#      again just before each level: vs_before is the ratio to that run.
#   3. single: N one-sentence greedy requests one after another: latency
#      against the engine's decoding time of that sentence alone (the
#      tfm_engine_busy_seconds_total delta of /metrics): the overhead of HTTP,
#      JSON, the queue and --max-delay-ms.
#   4. soak: a fresh server, SOAK one-line requests at concurrency 16: none
#      lost or duplicated (each answered once, checked against offline, and
#      the server's counters), the server's RSS every SOAK/10 requests.
#
# The load generator is Python on the same machine: it takes CPU from the
# server (on 2 cores, noticeably). Each phase is capped (CAP seconds).
#
#   bash scripts/bench-serve.sh                              # MODEL=/tmp/serve-model/average.safetensors
#   MODEL=run/average.safetensors THREADS=2 CONCS="1 16" SOAK=1000 NLINES=200 bash scripts/bench-serve.sh
#   (no MODEL file: a random model of configs/demo.ini's shape, which decodes to the maximum length)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${TFM_DATA:-../shared/data/multi30k}
MODEL=${MODEL:-/tmp/serve-model/average.safetensors}
THREADS=${THREADS:-2}
CONCS=${CONCS-"1 4 16 64"}
SINGLE=${SINGLE:-50}
SOAK=${SOAK:-10000}
CAP=${CAP:-600}
SERVE_ARGS=${SERVE_ARGS:-}
W=${BENCH_DIR:-/tmp/tfm-bench-serve}
PY=/usr/bin/python3
[ -f "$DATA/test2016.en" ] || { echo "no $DATA/test2016.en (scripts/get-multi30k.sh?)"; exit 1; }
make -s build/tfm build/dev/make_model >/dev/null   # not ./tfm: it may be running elsewhere
TFM=$PWD/build/tfm
mkdir -p "$W"
LINES=$DATA/test2016.en
if [ -n "${NLINES:-}" ]; then head -n "$NLINES" "$LINES" > "$W/lines.en"; LINES=$W/lines.en; fi   # a quick run
if ! [ -f "$MODEL" ]; then
  echo "no $MODEL: a random model of configs/demo.ini's shape"
  [ -f "$W/bpe.model" ] || "$TFM" bpe learn --vocab-size 5000 -o "$W/bpe.model" "$DATA/train.en" "$DATA/train.de" 2>/dev/null
  MODEL=$W/random.safetensors
  [ -f "$MODEL" ] || build/dev/make_model "$MODEL" configs/demo.ini "$W/bpe.model" 1
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $MODEL; $THREADS threads"

offline() {  # OUT [translate options] -> seconds of decoding (translate's own figure)
  local out=$1; shift
  "$TFM" translate -m "$MODEL" --threads "$THREADS" "$@" < "$LINES" > "$out" 2> "$W/offline.log"
  sed -n 's/.* output tokens in \([0-9.]*\)s .*/\1/p' "$W/offline.log"
}
n=$(wc -l < "$LINES")
t_off1=$(offline "$W/offline-beam.de")
offline "$W/offline-greedy.de" --beam 1 >/dev/null

PID= PORT=
start_server() {  # log file, args...
  local log=$1; shift
  timeout $((CAP * 8)) "$TFM" serve -m "$MODEL" --host 127.0.0.1 --port 0 --threads "$THREADS" $SERVE_ARGS "$@" 2> "$log" &
  PID=$!   # timeout's; SPID: tfm's (its child), whose memory the soak samples
  for _ in $(seq 1 600); do
    PORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    if [ -n "$PORT" ]; then SPID=$(ps -o pid= --ppid "$PID" | tr -d ' '); return 0; fi
    sleep 0.05
  done
  echo "server did not start: $(cat "$log")"; exit 1
}
stop_server() { kill -TERM "$PID"; wait "$PID" || echo "server exit code $?"; }
trap '[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null || true' EXIT

start_server "$W/serve.log"
grep -m1 "serve:" "$W/serve.log" | sed 's/^tfm: /server: /'
grep -o '"blis_kernels": "[a-z0-9_]*"' <(curl -s "http://127.0.0.1:$PORT/info") | sed 's/^/server /'
results=() offs=()
for c in $CONCS; do   # offline right before each level (the server idle): the machine's speed of the moment
  offs+=("$(offline "$W/offline-c$c.de")")
  results+=("$(timeout "$CAP" "$PY" scripts/bench_serve.py load "$PORT" "$LINES" "$W/offline-beam.de" "$c" $((CAP - 10)))")
done
single=
[ "$SINGLE" -gt 0 ] && single=$(timeout "$CAP" "$PY" scripts/bench_serve.py single "$PORT" "$LINES" "$W/offline-greedy.de" "$SINGLE")
stop_server
t_off2=$(offline "$W/offline2.de")
cmp -s "$W/offline2.de" "$W/offline-beam.de" || echo "warning: the two offline runs differ"
t_off=$(awk -v a="$t_off1" -v b="$t_off2" 'BEGIN { print (a < b ? a : b) }')
off_sps=$(awk -v n="$n" -v t="$t_off" 'BEGIN { printf "%.1f", n / t }')
echo
echo "offline tfm translate: $n sentences in ${t_off1}s and ${t_off2}s: $off_sps sentences/s (the faster)"
echo
echo "vs_offline: against the faster offline run; vs_before: against the offline run just before that level (its seconds: before_s)"
printf '%-11s %8s %9s %9s %9s %9s %13s %10s %9s %10s %7s\n' concurrency requests sentences p50_ms p95_ms p99_ms sentences/s vs_offline before_s vs_before differ
for k in "${!results[@]}"; do
  "$PY" -c '
import json, sys
r, off, before, n = json.loads(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print("%-11d %8d %9d %9.1f %9.1f %9.1f %13.1f %9.2fx %9.2f %9.2fx %7d%s" % (r["concurrency"], r["requests"], r["sentences"],
      r["p50_ms"], r["p95_ms"], r["p99_ms"], r["sentences_per_s"], r["sentences_per_s"] / off, before,
      r["sentences_per_s"] / (n / before), r["differ"],
      "  errors: %d (%s)" % (r["errors"], r["first_error"]) if r["errors"] else ""))' "${results[$k]}" "$off_sps" "${offs[$k]}" "$n"
done
echo
[ -n "$single" ] && "$PY" -c '
import json, sys
s = json.loads(sys.argv[1])
print("one-sentence greedy requests at concurrency 1 (%d): p50 latency %.2f ms, p50 decoding alone %.2f ms: "
      "latency / decoding p50 %.2fx, p95 %.2fx; differ %d" % (s["n"], s["p50_latency_ms"], s["p50_decode_ms"],
      s["p50_ratio"], s["p95_ratio"], s["differ"]))' "$single"

if [ "$SOAK" -gt 0 ]; then
  start_server "$W/soak.log"
  soak=$(timeout $((CAP * 4)) "$PY" scripts/bench_serve.py soak "$PORT" "$LINES" "$W/offline-beam.de" "$SOAK" 16 "$SPID")
  stop_server
  "$PY" -c '
import json, sys
s = json.loads(sys.argv[1])
print("soak: %d one-line requests at concurrency 16 in %.0f s: answered %d, lost %d, duplicated %d, wrong %d, errors %d; "
      "server counted %d answers, %d sentences" % (s["requests"], s["seconds"], s["answered"], s["lost"], s["duplicated"],
      s["wrong"], s["errors"], s["server_counted_200"], s["server_sentences"]))
print("soak: server RSS (MiB) by requests sent: " + ", ".join("%d: %.1f" % (i, kb / 1024) for i, kb in s["rss_kb"]))' "$soak"
fi
