#!/usr/bin/env python3
"""tests/layers.py SRC_DIR [--max-lines N] [--doc ARCHITECTURE.md] — structural
checks on the C sources (doc/architecture.md explains them).

1. No include cycle between modules. A module is x.c plus x.h (either may be
   missing); module A depends on module B when a.c or a.h has
   `#include "b.h"` and b.h is in SRC_DIR (system headers do not count).
   Every strongly connected component of that graph with more than one
   module is a cycle: it is printed as a path A -> B -> ... -> A and fails.
2. No .c file over N lines (default 700) unless its header comment (the
   first /* ... */ block) says why, in a sentence that starts with
   "Over N lines:".
3. With --doc: the file table of that Markdown file gives each module its
   layer (rows "| `x.c` `x.h` | 3 model | ... |": the files in the first
   cell, the layer's number first in the second; 1 is the top). Every module
   of SRC_DIR must have a row, every row a module, and no module may include
   the header of a layer above its own (a smaller number).

Prints one line per problem ("cycle:", "long:", "up:", "unlisted:",
"stale:"), then a summary; exits 1 when there is a problem, 0 when there is
none, 2 on a usage error.
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


def doc_layers(path):
    """{module: (layer number, layer text)} from the file table of a Markdown file."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = line.split("|")
            if len(cells) < 4 or not line.startswith("|"):
                continue
            m = re.match(r"\s*(\d+)\s*(.*?)\s*$", cells[2])
            files = re.findall(r"`([A-Za-z0-9_]+)\.[ch]`", cells[1])
            if m and files:
                for stem in files:
                    out[stem] = (int(m.group(1)), (m.group(1) + " " + m.group(2)).strip())
    return out


def main(argv):
    args, limit, doc = argv[1:], 700, None
    src = args.pop(0) if args and not args[0].startswith("--") else None
    while args:
        opt = args.pop(0)
        if opt == "--max-lines" and args and args[0].isdigit():
            limit = int(args.pop(0))
        elif opt == "--doc" and args and os.path.isfile(args[0]):
            doc = args.pop(0)
        else:
            src = None
            break
    if not src or not os.path.isdir(src):
        print("usage: layers.py SRC_DIR [--max-lines N] [--doc ARCHITECTURE.md]", file=sys.stderr)
        return 2
    deps = modules(src)
    problems = 0
    for comp in components(deps):
        if len(comp) > 1:
            problems += 1
            print("cycle: " + " -> ".join(cycle_in(comp, deps)) +
                  f" (modules {', '.join(comp)} include each other)")
    if doc:
        layer = doc_layers(doc)
        for mod in sorted(deps):
            if mod not in layer:
                problems += 1
                print(f"unlisted: module {mod} ({src}/{mod}.c/.h) has no row in {doc}'s file table")
        for mod in sorted(layer):
            if mod not in deps:
                problems += 1
                print(f"stale: {doc} has a row for {mod}, which {src}/ does not have")
        for mod in sorted(deps):
            for inc in sorted(deps[mod]):
                if mod in layer and inc in layer and layer[inc][0] < layer[mod][0]:
                    problems += 1
                    print(f"up: {mod} (layer {layer[mod][1]}) includes {inc}.h (layer {layer[inc][1]}), "
                          f"a layer above it")
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
