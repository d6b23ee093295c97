#!/usr/bin/env bash
# The structure of src/ (tests/layers.py, doc/architecture.md): no include
# cycle between modules (x.c + x.h), no include that points up a layer of
# doc/architecture.md's file table, every module in that table, no .c file
# over 700 lines without a reason in its header comment. First the checker
# on small fixtures whose answers are known (so that it can fail), then on
# src/ itself.
cd "$(dirname "$0")/.." && source tests/lib.sh
PY=/usr/bin/python3
L=tests/layers.py

# fixture DIR: empty source folder
fixture() { rm -rf "$T/$1"; mkdir -p "$T/$1"; }

# a three-module cycle through a .c and two headers: a.c -> b.h, b.h -> c.h, c.c -> a.h
fixture cyc
printf '#include "a.h"\n#include "b.h"\n' >"$T/cyc/a.c"
printf '#pragma once\n' >"$T/cyc/a.h"
printf '#pragma once\n#include "c.h"\n' >"$T/cyc/b.h"
printf '#include "c.h"\n  #  include "a.h"\n#include <stdio.h>\n' >"$T/cyc/c.c"
printf '#pragma once\n' >"$T/cyc/c.h"
printf '#include "a.h"\n' >"$T/cyc/d.c"    # d depends on the cycle, is not in it
expect_exit 1 "a three-module cycle fails" $PY $L "$T/cyc"
check "the cycle is printed as a path" contains "$OUT" "cycle: a -> b -> c -> a"
check "only the modules of the cycle are named" contains "$OUT" "(modules a, b, c include each other)"
check "d is not in it" eval '! contains "$OUT" "modules a, b, c, d"'

# two modules that include each other's headers (ops <-> gemm_bf16 before kernel.h)
fixture two
printf '#include "y.h"\n' >"$T/two/x.h"
printf '#include "x.h"\n' >"$T/two/y.c"
printf '\n' >"$T/two/y.h"
expect_exit 1 "a two-module cycle fails" $PY $L "$T/two"
check "x -> y -> x" contains "$OUT" "cycle: x -> y -> x"

# no cycle: the same shapes pointing one way; system headers, headers not in
# the folder, a header including its own .c's module, paths: none count
fixture dag
printf '#include "a.h"\n#include "b.h"\n#include <b.h>\n' >"$T/dag/a.c"
printf '#pragma once\n#include "b.h"\n' >"$T/dag/a.h"
printf '#include "b.h"\n#include "missing.h"\n#include "sub/a.h"\n' >"$T/dag/b.c"
printf '#pragma once\n' >"$T/dag/b.h"
printf '/* b.c is long: 800 lines of nothing. */\n' >"$T/dag/c.c"
expect_exit 0 "an acyclic graph passes" $PY $L "$T/dag"
check "counts modules and edges" contains "$OUT" "3 modules, 1 include edges, 0 problem(s)"

# long files: over the limit without a reason fails, with one passes
fixture long
{ printf '/* long.c — a test.\n * It is long. */\n'; for i in $(seq 1 700); do echo ";"; done; } >"$T/long/long.c"
expect_exit 1 "702 lines without a reason fail" $PY $L "$T/long"
check "the file and its length are named" contains "$OUT" "long: $T/long/long.c has 702 lines (limit 700)"
{ printf '/* long.c — a test.\n * Over 700 lines: a good reason. */\n'; for i in $(seq 1 700); do echo ";"; done; } >"$T/long/long.c"
expect_exit 0 "702 lines with a reason pass" $PY $L "$T/long"
{ printf '/* long.c — a test. */\n/* Over 700 lines: not in the header comment. */\n'; for i in $(seq 1 700); do echo ";"; done; } >"$T/long/long.c"
expect_exit 1 "a reason outside the header comment does not count" $PY $L "$T/long"
{ printf '/* long.c */\n'; for i in $(seq 1 699); do echo ";"; done; } >"$T/long/long.c"
expect_exit 0 "700 lines need no reason" $PY $L "$T/long"
expect_exit 0 "another limit" $PY $L "$T/long" --max-lines 800
expect_exit 2 "a bad option: usage error" $PY $L "$T/long" --max-lines x
expect_exit 2 "no folder: usage error" $PY $L "$T/nonexistent"

# layers from a Markdown table: the dag fixture (a includes b) with b above a,
# then the right way round; a module without a row, a row without a module
printf '| files | layer | holds |\n|---|---|---|\n| `a.c` `a.h` | 1 top | a |\n| `b.c` `b.h` | 2 low | b |\n| `c.c` | 2 low | c |\n' >"$T/ok.md"
expect_exit 0 "includes that point down pass" $PY $L "$T/dag" --doc "$T/ok.md"
printf '| files | layer | holds |\n|---|---|---|\n| `a.c` `a.h` | 2 low | a |\n| `b.c` `b.h` | 1 top | b |\n| `c.c` | 2 low | c |\n' >"$T/up.md"
expect_exit 1 "an include that points up fails" $PY $L "$T/dag" --doc "$T/up.md"
check "the upward include is named with both layers" contains "$OUT" "up: a (layer 2 low) includes b.h (layer 1 top), a layer above it"
printf '| files | layer | holds |\n|---|---|---|\n| `a.c` `a.h` | 1 top | a |\n| `b.c` `b.h` | 2 low | b |\n| `gone.c` | 2 low | x |\n' >"$T/stale.md"
expect_exit 1 "a missing row and a stale row fail" $PY $L "$T/dag" --doc "$T/stale.md"
check "the module without a row is named" contains "$OUT" "unlisted: module c"
check "the row without a module is named" contains "$OUT" "stale: $T/stale.md has a row for gone"

# the real thing
expect_exit 0 "src/ has no include cycle, no upward include, no unlisted module and no unexplained long file" \
  $PY $L src --doc doc/architecture.md
[ "$FAIL" -eq 0 ] || echo "$OUT" >&2
finish
