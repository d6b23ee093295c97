#!/usr/bin/env bash
# Install the Debian packages tfm's build, tests and benchmarks need, if missing.
set -euo pipefail
pkgs=(build-essential pkg-config libblis-openmp-dev libutf8proc-dev libinih-dev zlib1g-dev
      openmpi-bin libopenmpi-dev libdnnl-dev python3 python3-numpy python3-torch sentencepiece gnuplot-nox time
      libmicrohttpd-dev curl   # tfm serve (curl: its tests and bench-serve.sh)
      clang libclang-rt-14-dev libomp-dev   # clang + libFuzzer runtime + its OpenMP: make fuzz
      libdnnl-dev)                          # oneDNN: only scripts/bench-int8.sh's reference column
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "deps: all packages present"; exit 0; fi
echo "deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
