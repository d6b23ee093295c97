#!/usr/bin/env python3
"""bench_serve.py — the load generator of scripts/bench-serve.sh (loopback only).

    bench_serve.py load PORT LINES OFFLINE CONCURRENCY [SECONDS]
        Sends every line of LINES once, in requests of 1-20 lines (seeded),
        from CONCURRENCY workers with one keep-alive connection each, and
        stops early after SECONDS. Prints one JSON object: requests,
        sentences, seconds, sentences/s, p50/p95/p99 latency (ms), and how
        many translations differ from OFFLINE (tfm translate of LINES).
    bench_serve.py single PORT LINES OFFLINE N
        N one-sentence greedy requests one after another: the latency of each
        against the engine's decoding time for it (from /metrics), and the
        p50 of both.
    bench_serve.py soak PORT LINES OFFLINE N CONCURRENCY PID
        N one-line requests, each with its own id, at CONCURRENCY: none lost,
        none duplicated (every answer checked against OFFLINE, and /metrics
        counts N), the server's RSS every N/10 requests.
"""
import http.client, json, random, sys, threading, time

HOST = '127.0.0.1'


class Client:
    def __init__(self, port):
        self.port = port
        self.c = None

    def post(self, body):
        for attempt in (0, 1):   # one retry on a keep-alive connection the server closed
            try:
                if self.c is None:
                    self.c = http.client.HTTPConnection(HOST, self.port, timeout=300)
                self.c.request('POST', '/translate', body=json.dumps(body).encode(),
                               headers={'Content-Type': 'application/json'})
                r = self.c.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, ConnectionError):
                self.c = None
                if attempt: raise

    def get(self, path):
        c = http.client.HTTPConnection(HOST, self.port, timeout=60)
        c.request('GET', path)
        r = c.getresponse()
        d = r.read()
        c.close()
        return d.decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + ' '):
            return float(line.split()[-1])
    return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float('nan')


def load(port, lines, offline, conc, seconds):
    rng = random.Random(conc)
    reqs, i = [], 0
    while i < len(lines):
        k = rng.randint(1, 20)
        reqs.append(list(range(i, min(i + k, len(lines)))))
        i += k
    lat, bad, errors, done_sent = [], [0], [], [0]
    nxt = [0]
    mu = threading.Lock()
    t_end = time.time() + seconds

    def worker():
        cl = Client(port)
        while True:
            with mu:
                if nxt[0] >= len(reqs) or time.time() > t_end: return
                idx = reqs[nxt[0]]
                nxt[0] += 1
            t0 = time.perf_counter()
            st, data = cl.post({'text': [lines[j] for j in idx]})
            dt = time.perf_counter() - t0
            with mu:
                if st != 200:
                    errors.append((st, data[:200]))
                    continue
                lat.append(dt)
                done_sent[0] += len(idx)
                got = json.loads(data)['translations']
                bad[0] += sum(1 for j, g in zip(idx, got) if g != offline[j]) + abs(len(got) - len(idx))
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts: t.start()
    for t in ts: t.join()
    el = time.perf_counter() - t0
    print(json.dumps({'concurrency': conc, 'requests': len(lat), 'sentences': done_sent[0], 'seconds': el,
                      'sentences_per_s': done_sent[0] / el, 'p50_ms': pct(lat, 50) * 1e3, 'p95_ms': pct(lat, 95) * 1e3,
                      'p99_ms': pct(lat, 99) * 1e3, 'differ': bad[0], 'errors': len(errors),
                      'first_error': repr(errors[0]) if errors else None}))


def single(port, lines, offline_greedy, n):
    cl = Client(port)
    lat, busy = [], []
    rng = random.Random(7)
    idx = rng.sample(range(len(lines)), n)
    bad = 0
    for j in idx:
        b0 = metric(cl.get('/metrics'), 'tfm_engine_busy_seconds_total')
        t0 = time.perf_counter()
        st, data = cl.post({'text': [lines[j]], 'beam': 1})
        dt = time.perf_counter() - t0
        b1 = metric(cl.get('/metrics'), 'tfm_engine_busy_seconds_total')
        if st != 200 or json.loads(data)['translations'] != [offline_greedy[j]]: bad += 1
        lat.append(dt)
        busy.append(b1 - b0)
    ratios = [a / b for a, b in zip(lat, busy) if b > 0]
    print(json.dumps({'n': n, 'p50_latency_ms': pct(lat, 50) * 1e3, 'p50_decode_ms': pct(busy, 50) * 1e3,
                      'p50_ratio': pct(ratios, 50), 'p95_ratio': pct(ratios, 95), 'differ': bad}))


def rss_kb(pid):
    for line in open('/proc/%d/status' % pid):
        if line.startswith('VmRSS:'): return int(line.split()[1])
    return -1


def soak(port, lines, offline, n, conc, pid):
    answers = {}
    nxt = [0]
    mu = threading.Lock()
    rss = []
    wrong, errors = [0], []

    def worker():
        cl = Client(port)
        while True:
            with mu:
                i = nxt[0]
                if i >= n: return
                nxt[0] += 1
                if i % (n // 10) == 0: rss.append((i, rss_kb(pid)))
            j = i % len(lines)
            st, data = cl.post({'text': [lines[j]]})
            with mu:
                if st != 200:
                    errors.append(st)
                    continue
                got = json.loads(data)['translations']
                answers[i] = answers.get(i, 0) + 1
                if got != [offline[j]]: wrong[0] += 1
    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts: t.start()
    for t in ts: t.join()
    el = time.perf_counter() - t0
    rss.append((n, rss_kb(pid)))
    m = Client(port).get('/metrics')
    print(json.dumps({'requests': n, 'seconds': el, 'answered': len(answers),
                      'lost': n - len(answers), 'duplicated': sum(v - 1 for v in answers.values()),
                      'wrong': wrong[0], 'errors': len(errors),
                      'server_counted_200': metric(m, 'tfm_requests_total{endpoint="translate",code="200"}'),
                      'server_sentences': metric(m, 'tfm_translated_sentences_total'),
                      'rss_kb': rss}))


if __name__ == '__main__':
    what, port = sys.argv[1], int(sys.argv[2])
    lines = open(sys.argv[3], encoding='utf-8').read().split('\n')[:-1]
    offline = open(sys.argv[4], encoding='utf-8').read().split('\n')[:-1]
    assert len(lines) == len(offline), (len(lines), len(offline))
    if what == 'load': load(port, lines, offline, int(sys.argv[5]), float(sys.argv[6]) if len(sys.argv) > 6 else 300)
    elif what == 'single': single(port, lines, offline, int(sys.argv[5]))
    elif what == 'soak': soak(port, lines, offline, int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
