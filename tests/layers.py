#!/usr/bin/env python3
"""tests/layers.py SRC_DIR [MAX_LINES] — structural checks on the C sources.

1. No include cycle between modules. A module is x.c plus x.h (either may be
   missing); module A depends on module B when a.c or a.h has
   `#include "b.h"` and b.h is in SRC_DIR (system headers do not count).
   Every strongly connected component of that graph with more than one
   module is a cycle: it is printed as a path A -> B -> ... -> A and fails.
2. No .c file over MAX_LINES lines (default 700) unless its header comment
   (the first /* ... */ block) says why, in a sentence that starts with
   "Over 700 lines:" (the number is MAX_LINES).

Prints one line per problem ("cycle: ..." / "long: ..."), then a summary;
exits 1 when there is a problem, 0 when there is none, 2 on a usage error.
doc/architecture.md explains the layers this keeps pointing one way.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)\.h"', re.M)


def modules(src):
    """{module: set of modules it includes} for the .c/.h files in src."""
    deps = {}
    for name in sorted(os.listdir(src)):
        stem, ext = os.path.splitext(name)
        if ext not in (".c", ".h"):
            continue
        with open(os.path.join(src, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        mine = deps.setdefault(stem, set())
        for inc in INCLUDE.findall(text):
            if inc != stem and os.path.exists(os.path.join(src, inc + ".h")):
                mine.add(inc)
    return deps


def components(deps):
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(deps):
        if root in index:
            continue
        work = [(root, iter(sorted(deps[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(deps.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def cycle_in(comp, deps):
    """One cycle through the component's first module, as a list A, B, ..., A
    (breadth-first: the shortest one back to it)."""
    start, members = comp[0], set(comp)
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(deps[v] & members):
            if w == start:   # v -> start closes the cycle: walk back to start
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w not in prev:
                prev[w] = v; queue.append(w)
    return comp + [comp[0]]


def header_comment(text):
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def main(argv):
    if len(argv) not in (2, 3) or not os.path.isdir(argv[1]):
        print("usage: layers.py SRC_DIR [MAX_LINES]", file=sys.stderr)
        return 2
    src, limit = argv[1], int(argv[2]) if len(argv) == 3 else 700
    deps = modules(src)
    problems = 0
    for comp in components(deps):
        if len(comp) > 1:
            problems += 1
            print("cycle: " + " -> ".join(cycle_in(comp, deps)) +
                  f" (modules {', '.join(comp)} include each other)")
    reason = re.compile(r"Over\s+%d\s+lines:" % limit)
    for name in sorted(os.listdir(src)):
        if not name.endswith(".c"):
            continue
        with open(os.path.join(src, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        n = text.count("\n")
        if n > limit and not reason.search(header_comment(text)):
            problems += 1
            print(f"long: {src}/{name} has {n} lines (limit {limit}) and its header "
                  f"comment gives no reason (a sentence starting 'Over {limit} lines:')")
    edges = sum(len(v) for v in deps.values())
    print(f"{len(deps)} modules, {edges} include edges, {problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
