#!/usr/bin/env python3
"""serve_client.py — the client side of tests/serve.sh (loopback only).

    serve_client.py suite PORT TFM MODEL      concurrent requests == tfm translate, byte for byte;
                                              every bad-input case; a slow client; /metrics agrees
    serve_client.py overflow PORT             429 with Retry-After on a full queue
    serve_client.py drain PORT PID TFM MODEL  requests in flight at SIGTERM are answered

Each prints what failed and exits 1 if anything did. Every socket has a
timeout, so nothing here can hang past it.
"""
import http.client, json, os, random, signal, socket, subprocess, sys, threading, time

HOST = '127.0.0.1'
failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL serve_client: ' + msg, file=sys.stderr)


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers dict, body bytes)."""
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body, ensure_ascii=False).encode()
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def offline(tfm, model, lines, args):
    """tfm translate's output lines for lines, with args."""
    p = subprocess.run([tfm, 'translate', '-m', model, '-q'] + args, input='\n'.join(lines) + '\n',
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError('tfm translate %s: %s' % (args, p.stderr[-300:]))
    return p.stdout.split('\n')[:-1]


def as_lines(resp, req):
    """A /translate response written as tfm translate writes its output."""
    out = []
    for i, t in enumerate(resp['translations']):
        if req.get('n_best', 1) > 1:
            for k, h in enumerate(t):
                out.append('%d\t%d\t%.6f\t%.6f\t%s' % (i + 1, k + 1, h['score'], h['logprob'], h['text']))
        elif req.get('scores'):
            out.append('%s\t%.6f\t%.6f' % (t['text'], t['score'], t['logprob']))
        else:
            out.append(t)
    return out


def translate_args(req):
    a = []
    if 'beam' in req: a += ['--beam', str(req['beam'])]
    if 'alpha' in req: a += ['--alpha', str(req['alpha'])]
    if 'n_best' in req: a += ['--nbest', str(req['n_best'])]
    if req.get('scores'): a += ['--scores']
    if 'max_len' in req: a += ['--max-len-a', '0', '--max-len-b', str(req['max_len'])]
    if req.get('sample'): a += ['--sample']
    if 'seed' in req: a += ['--seed', str(req['seed'])]
    if 'topk' in req: a += ['--topk', str(req['topk'])]
    if 'temperature' in req: a += ['--temperature', str(req['temperature'])]
    return a


LINES = ['the quick brown fox', '', 'der schnelle braune Fuchs Nummer 7 springt', 'the lazy dog',
         'über den faulen Hund und läuft in den Wald', 'number 12 jumps over the forest and the fox and the dog',
         'a', 'the forest ' * 20, 'Fuchs', 'runs into the forest', '  spaces  around  ', 'tab\tinside']
OPTIONS = [{}, {'beam': 1}, {'beam': 3, 'alpha': 1.0}, {'beam': 3, 'n_best': 2}, {'scores': True},
           {'max_len': 5}, {'sample': True, 'seed': 7}, {'sample': True, 'seed': 3, 'topk': 5, 'temperature': 0.7}]


def suite(port, tfm, model):
    counts = {'ok': 0, 'sentences': 0, 'tokens_checked': 0}
    errors = {}

    def count_error(st, data):
        try:
            e = json.loads(data)
            errors[e['kind']] = errors.get(e['kind'], 0) + 1
            return e
        except Exception as ex:
            fail('error response is not JSON with "kind": %r (%s)' % (data[:200], ex))
            return {}

    # -- concurrent requests, mixed options, equal to offline output --
    rng = random.Random(1)
    reqs = []
    for i in range(48):
        o = dict(OPTIONS[i % len(OPTIONS)])
        o['text'] = [rng.choice(LINES) for _ in range(rng.randint(1, 6))]
        reqs.append(o)
    results = [None] * len(reqs)

    def worker(k):
        for i in range(k, len(reqs), 12):
            try:
                results[i] = request(port, 'POST', '/translate', reqs[i])
            except Exception as ex:
                results[i] = (0, {}, repr(ex).encode())
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(12)]
    for t in ts: t.start()
    for t in ts: t.join()
    # offline: beam search is per line, so one run per option set over all lines;
    # sampling depends on the line's index in the request: one run per request
    cache = {}
    for req, (st, hdr, data) in zip(reqs, results):
        if st != 200:
            fail('concurrent request: status %d: %r' % (st, data[:300]))
            continue
        counts['ok'] += 1
        counts['sentences'] += len(req['text'])
        resp = json.loads(data)
        if hdr.get('content-type') != 'application/json': fail('content-type %r' % hdr.get('content-type'))
        if not isinstance(resp.get('time_ms'), (int, float)) or 'model' not in resp: fail('no time_ms/model: %r' % resp)
        args = translate_args(req)
        if req.get('sample'):
            want = offline(tfm, model, req['text'], args)
        else:
            key = tuple(args)
            if key not in cache:   # line -> its output lines (n-best: several, LINE field dropped)
                out, per = offline(tfm, model, LINES, args), {}
                for w in out:
                    if req.get('n_best', 1) > 1:
                        n, rest = w.split('\t', 1)
                        per.setdefault(LINES[int(n) - 1], []).append(rest)
                    else:
                        per.setdefault(LINES[len(per)], []).append(w)
                cache[key] = per
            want = []
            for i, l in enumerate(req['text']):
                for w in cache[key][l]:
                    want.append('%d\t%s' % (i + 1, w) if req.get('n_best', 1) > 1 else w)
        got = as_lines(resp, req)
        if got != want:
            fail('request %r: server %r != translate %r' % (req, got[:3], want[:3]))
        else:
            counts['tokens_checked'] += len(got)

    # -- bad input: each case its status and kind --
    long_line = 'x' * 5000
    cases = [
        ('malformed JSON', b'{"text": ["a"', 400, 'bad_json'),
        ('trailing garbage', b'{"text": ["a"]} x', 400, 'bad_json'),
        ('lone surrogate', b'{"text": ["\\ud800"]}', 400, 'bad_json'),
        ('empty body', b'', 400, 'bad_json'),
        ('not an object', b'[1, 2]', 400, 'bad_request'),
        ('no text', b'{"beam": 2}', 400, 'bad_request'),
        ('text a string', b'{"text": "a"}', 400, 'bad_request'),
        ('text with a number', b'{"text": ["a", 3]}', 400, 'bad_request'),
        ('unknown field', b'{"text": ["a"], "beams": 2}', 400, 'bad_request'),
        ('field twice', b'{"text": ["a"], "text": ["b"]}', 400, 'bad_request'),
        ('beam a string', b'{"text": ["a"], "beam": "4"}', 400, 'bad_request'),
        ('beam 0', b'{"text": ["a"], "beam": 0}', 400, 'bad_request'),
        ('beam 2.5', b'{"text": ["a"], "beam": 2.5}', 400, 'bad_request'),
        ('alpha negative', b'{"text": ["a"], "alpha": -1}', 400, 'bad_request'),
        ('sample not a bool', b'{"text": ["a"], "sample": 1}', 400, 'bad_request'),
        ('n_best over beam', b'{"text": ["a"], "beam": 2, "n_best": 3}', 400, 'bad_request'),
        ('seed without sample', b'{"text": ["a"], "seed": 3}', 400, 'bad_request'),
        ('sample with beam', b'{"text": ["a"], "sample": true, "beam": 2}', 400, 'bad_request'),
        ('newline in a line', b'{"text": ["a\\nb"]}', 400, 'bad_request'),
        ('invalid UTF-8', b'{"text": ["caf\xe9"]}', 400, 'invalid_utf8'),
        ('overlong UTF-8', b'{"text": ["\xc0\xaf"]}', 400, 'invalid_utf8'),
        ('too many lines', json.dumps({'text': ['a'] * 9}).encode(), 413, 'too_large'),
        ('line too long', json.dumps({'text': [long_line[:300]]}).encode(), 413, 'too_large'),
        ('body too large', json.dumps({'text': [long_line]}).encode(), 413, 'too_large'),
    ]
    for desc, body, want_st, want_kind in cases:
        st, hdr, data = request(port, 'POST', '/translate', body)
        e = count_error(st, data)
        if st != want_st or e.get('kind') != want_kind or not e.get('error'):
            fail('%s: got %d %r, expected %d %s' % (desc, st, data[:200], want_st, want_kind))
    # a body over the limit sent in chunks (no Content-Length): read, refused at the end
    c = http.client.HTTPConnection(HOST, port, timeout=30)
    c.request('POST', '/translate', body=iter([b'{"text": ["', b'y' * 3000, b'"]}']), encode_chunked=True)
    r = c.getresponse(); data = r.read(); c.close()
    e = count_error(r.status, data)
    if r.status != 413 or e.get('kind') != 'too_large': fail('chunked body too large: %d %r' % (r.status, data[:200]))
    for desc, method, path, want_st, want_kind in [('GET /translate', 'GET', '/translate', 405, 'method_not_allowed'),
                                                  ('POST /health', 'POST', '/health', 405, 'method_not_allowed'),
                                                  ('unknown path', 'GET', '/nope', 404, 'not_found')]:
        st, hdr, data = request(port, method, path, b'' if method == 'POST' else None)
        e = count_error(st, data)
        if st != want_st or e.get('kind') != want_kind: fail('%s: %d %r' % (desc, st, data[:200]))
        if st == 405 and 'allow' not in hdr: fail('%s: no Allow header' % desc)

    # -- a client that sends too slowly: closed after --timeout, the server unharmed --
    s = socket.create_connection((HOST, port), timeout=10)
    s.sendall(b'POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"text"')
    t0 = time.time()
    try:
        got = s.recv(4096)
    except socket.timeout:
        got = None
    waited = time.time() - t0
    if got is None or waited > 8: fail('slow client: not closed within 8 s (waited %.1f s, got %r)' % (waited, got))
    s.close()
    s = socket.create_connection((HOST, port), timeout=10)   # headers never finished
    s.sendall(b'GET /health HTTP/1.1\r\nHo')
    try:
        got = s.recv(4096)
    except socket.timeout:
        got = None
    if got is None: fail('client stuck in its headers: not closed')
    s.close()
    st, _, data = request(port, 'GET', '/health')
    if st != 200 or json.loads(data) != {'status': 'ready'}: fail('health after slow clients: %d %r' % (st, data))
    st, _, data = request(port, 'GET', '/info')
    info = json.loads(data)
    for k in ('models', 'model', 'config', 'precision', 'blis_kernels', 'threads', 'decode', 'limits'):
        if k not in info: fail('/info lacks %s' % k)

    # -- /metrics agrees with what was sent --
    st, hdr, data = request(port, 'GET', '/metrics')
    m = {}
    for line in data.decode().splitlines():
        if line and not line.startswith('#'):
            k, v = line.rsplit(' ', 1)
            m[k] = float(v)

    def expect(key, want):
        if m.get(key) != want: fail('/metrics %s = %r, sent %r' % (key, m.get(key), want))
    expect('tfm_requests_total{endpoint="translate",code="200"}', counts['ok'])
    expect('tfm_request_duration_seconds_count', counts['ok'])
    expect('tfm_request_duration_seconds_bucket{le="+Inf"}', counts['ok'])
    expect('tfm_sentences_total', counts['sentences'])
    expect('tfm_translated_sentences_total', counts['sentences'])
    expect('tfm_queue_sentences', 0)
    expect('tfm_requests_total{endpoint="translate",code="400"}', sum(1 for c in cases if c[2] == 400))
    expect('tfm_requests_total{endpoint="translate",code="413"}', sum(1 for c in cases if c[2] == 413) + 1)
    expect('tfm_requests_total{endpoint="other",code="404"}', 1)
    for kind in ('bad_json', 'bad_request', 'invalid_utf8', 'too_large', 'method_not_allowed', 'not_found'):
        expect('tfm_errors_total{kind="%s"}' % kind, errors.get(kind, 0))
    if m.get('tfm_errors_total{kind="timeout"}', 0) < 1: fail('/metrics: the slow client\'s timeout not counted')
    if not 0 < m.get('tfm_batches_total', 0) <= counts['sentences']: fail('tfm_batches_total %r' % m.get('tfm_batches_total'))
    print('suite: %d requests (%d sentences) equal to tfm translate, %d bad-input cases, %d batches'
          % (counts['ok'], counts['sentences'], len(cases) + 4, m.get('tfm_batches_total', 0)), file=sys.stderr)


def overflow(port):
    """--max-queue 8 --max-delay-ms 3000: 6 queued sentences wait; 6 more do not fit."""
    first = {}

    def send():
        first['r'] = request(port, 'POST', '/translate', {'text': ['the fox'] * 6})
    t = threading.Thread(target=send)
    t.start()
    deadline = time.time() + 10
    while time.time() < deadline:   # until the first job is queued
        st, _, data = request(port, 'GET', '/metrics')
        if 'tfm_queue_sentences 6' in data.decode(): break
        time.sleep(0.05)
    st, hdr, data = request(port, 'POST', '/translate', {'text': ['the dog'] * 6})
    e = json.loads(data) if data else {}
    if st != 429 or e.get('kind') != 'queue_full': fail('full queue: %d %r, expected 429 queue_full' % (st, data[:200]))
    ra = hdr.get('retry-after', '')
    if not ra.isdigit() or int(ra) < 1: fail('429 without a Retry-After of >= 1 s: %r' % ra)
    st, _, data = request(port, 'POST', '/translate', {'text': ['the dog'] * 2})   # fits
    if st != 200: fail('a request that fits the queue: %d %r' % (st, data[:200]))
    t.join(30)
    if first.get('r', (0,))[0] != 200: fail('the queued request: %r' % (first.get('r'),))
    st, _, data = request(port, 'GET', '/metrics')
    if 'tfm_errors_total{kind="queue_full"} 1' not in data.decode(): fail('/metrics does not count the 429')


def drain(port, pid, tfm, model):
    """--max-delay-ms 1500: requests wait in the queue when SIGTERM comes; all are answered."""
    reqs = [{'text': ['the quick brown fox', 'the lazy dog']}, {'text': ['Fuchs']}, {'text': ['runs into the forest'], 'beam': 1}]
    res = [None] * len(reqs)

    def send(i):
        try:
            res[i] = request(port, 'POST', '/translate', reqs[i])
        except Exception as ex:
            res[i] = (0, {}, repr(ex).encode())
    ts = [threading.Thread(target=send, args=(i,)) for i in range(len(reqs))]
    for t in ts: t.start()
    deadline = time.time() + 10
    while time.time() < deadline:
        st, _, data = request(port, 'GET', '/metrics')
        if 'tfm_queue_requests 3' in data.decode(): break
        time.sleep(0.05)
    else:
        fail('drain: the requests were not queued')
    os.kill(pid, signal.SIGTERM)
    for t in ts: t.join(30)
    for req, r in zip(reqs, res):
        if not r or r[0] != 200:
            fail('drain: request in flight at SIGTERM: %r' % (r,))
            continue
        want = offline(tfm, model, req['text'], translate_args(req))
        if json.loads(r[2])['translations'] != want: fail('drain: %r != %r' % (r[2][:200], want))
    time.sleep(0.5)
    try:   # no new connections after the drain began
        st, _, data = request(port, 'GET', '/health', timeout=5)
        fail('drain: a new connection was served after SIGTERM: %d %r' % (st, data))
    except (ConnectionError, OSError):
        pass


if __name__ == '__main__':
    what = sys.argv[1]
    if what == 'suite': suite(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    elif what == 'overflow': overflow(int(sys.argv[2]))
    elif what == 'drain': drain(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else: sys.exit('unknown command ' + what)
    sys.exit(1 if failures else 0)
