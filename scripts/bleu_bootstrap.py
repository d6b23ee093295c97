#!/usr/bin/env python3
"""bleu_bootstrap.py — paired bootstrap resampling (Koehn, 2004) of corpus BLEU
between a baseline and other systems on the same test set (a measuring tool,
not a test; python3 standard library only).

    python3 scripts/bleu_bootstrap.py REF BASELINE HYP [HYP ...] [--resamples 1000] [--seed 1]

Each line of REF, BASELINE and every HYP is one sentence (detokenized, as
tfm translate writes it). Sentences are tokenized as sacreBLEU's default 13a
tokenizer does (mteval-v13a), and each contributes its clipped n-gram matches
and n-gram totals for n = 1..4 plus its hypothesis and reference lengths.
Corpus BLEU = BP * exp(mean_n log p_n), p_n = sum matches_n / sum totals_n,
BP = exp(1 - r/c) when c < r (c, r = summed hypothesis, reference lengths),
with sacreBLEU's 'exp' smoothing when a sum of matches is 0. The full-set
BLEU printed first is checked by the caller against tfm bleu (equal to
sacreBLEU 2.6.0): it is the proof that this tokenizer and these counts are
sacreBLEU's.

Resampling: R times, draw N sentence indices with replacement (the same
indices for every system: paired), sum each system's sentence statistics
over the sample and compute the corpus BLEU of each. Printed per HYP: its
BLEU, delta to BASELINE, the 95% interval of the delta over the resamples
(2.5th and 97.5th percentiles) and p = the share of resamples where HYP is
not better than BASELINE (one-sided; p < 0.05 = better by more than the
noise of sampling the test sentences).
"""
import math
import random
import re
import sys

# mteval-v13a, as sacreBLEU's tokenizer_13a: drop <skipped> and hyphenated line
# breaks, unescape four HTML entities, then space out punctuation and symbols.
_RULES = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),  # symbols in these ASCII ranges
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),                # period/comma not after a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),                # period/comma not before a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),                     # dash after a digit
]


def tok13a(line):
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = " " + line + " "
    for rx, sub in _RULES:
        line = rx.sub(sub, line)
    return line.split()


def ngrams(words, n):
    counts = {}
    for i in range(len(words) - n + 1):
        g = tuple(words[i:i + n])
        counts[g] = counts.get(g, 0) + 1
    return counts


def sentence_stats(hyp, ref):
    """[m1..m4, t1..t4, hyp_len, ref_len] of one sentence."""
    h, r = tok13a(hyp), tok13a(ref)
    st = []
    tot = []
    for n in range(1, 5):
        hn, rn = ngrams(h, n), ngrams(r, n)
        st.append(sum(min(c, rn.get(g, 0)) for g, c in hn.items()))
        tot.append(max(0, len(h) - n + 1))
    return st + tot + [len(h), len(r)]


def corpus_bleu(s):
    """BLEU (0..100) from summed statistics, sacreBLEU's 'exp' smoothing."""
    c, r = s[8], s[9]
    if c == 0:
        return 0.0
    logp, k = 0.0, 1
    for n in range(4):
        m, t = s[n], s[4 + n]
        if t == 0:
            return 0.0
        if m == 0:
            k *= 2
            logp += math.log(100.0 / (k * t))
        else:
            logp += math.log(100.0 * m / t)
    bp = 1.0 if c >= r else math.exp(1.0 - r / c)
    return bp * math.exp(logp / 4.0)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [x.rstrip() for x in f.read().split("\n")[:-1]]


def main(argv):
    resamples, seed, files = 1000, 1, []
    i = 0
    while i < len(argv):
        if argv[i] == "--resamples":
            resamples = int(argv[i + 1]); i += 2
        elif argv[i] == "--seed":
            seed = int(argv[i + 1]); i += 2
        else:
            files.append(argv[i]); i += 1
    if len(files) < 3:
        sys.exit("usage: bleu_bootstrap.py REF BASELINE HYP [HYP ...] [--resamples R] [--seed S]")
    ref = read_lines(files[0])
    systems = []
    for p in files[1:]:
        hyp = read_lines(p)
        if len(hyp) != len(ref):
            sys.exit("bleu_bootstrap.py: %s has %d lines, %s has %d: expected the same" % (p, len(hyp), files[0], len(ref)))
        systems.append((p, [sentence_stats(h, r) for h, r in zip(hyp, ref)]))
    n = len(ref)
    rng = random.Random(seed)
    samples = [[rng.randrange(n) for _ in range(n)] for _ in range(resamples)]

    def bleu_of(stats, idx):
        s = [0] * 10
        for j in idx:
            row = stats[j]
            for k in range(10):
                s[k] += row[k]
        return corpus_bleu(s)

    base_name, base = systems[0]
    base_full = bleu_of(base, range(n))
    base_bs = [bleu_of(base, idx) for idx in samples]
    print("%d sentences, %d paired resamples (seed %d); baseline %s: BLEU %.2f" % (n, resamples, seed, base_name, base_full))
    for name, st in systems[1:]:
        full = bleu_of(st, range(n))
        d = sorted(bleu_of(st, idx) - b for idx, b in zip(samples, base_bs))
        p = sum(1 for x in d if x <= 0) / resamples
        lo, hi = d[int(0.025 * resamples)], d[min(resamples - 1, int(0.975 * resamples))]
        print("%s: BLEU %.2f, delta %+.2f, 95%% interval [%+.2f, %+.2f], p(not better) = %.3f" % (name, full, full - base_full, lo, hi, p))


if __name__ == "__main__":
    main(sys.argv[1:])
