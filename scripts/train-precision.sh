#!/usr/bin/env bash
# train-precision.sh — prints the precision the scripts train in on this CPU:
# bf16 where it has a bf16 unit that outruns its fp32 FMAs (tfm info's "bf16
# products" line names one: AMD Zen 4/5's AVX512_BF16, Intel's AMX tiles),
# else fp32 (the bf16 products would be emulated: the same numbers, no faster).
# Used by demo.sh and multi30k.sh; their PRECISION / --set run.precision wins.
set -euo pipefail
cd "$(dirname "$0")/.."
case "$(./tfm info | sed -n 's/^bf16 products: //p')" in
  emulated*|'') echo fp32 ;;
  *) echo bf16 ;;
esac
