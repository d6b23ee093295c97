#!/usr/bin/env bash
# device-amx.sh — issue #25's measurements on a lent machine whose CPU has
# AMX (the device tool's machines: x86-64, no Debian packages, a few minutes
# of device time a session), prepared here so that the device time goes to
# measuring, not to building.
#
#   scripts/device-amx.sh pack   (here) build portable binaries (ARCH=x86-64-v4,
#                                MPI=0) into build-v4/ and put them, with every
#                                library they load but glibc's, into
#                                .device/amx.tar.xz (~12 MB; .device/ is ignored)
#   scripts/device-amx.sh run [SECONDS]
#                                (there, in the repository root, carry .device)
#                                unpack, then run the checks below in order
#                                until SECONDS (default 420) have passed, each
#                                under what is left; the log goes to stdout
#                                and to $OUT/amx.log (or /tmp/amx.log)
#
# The checks, first what decides (see doc/precision.md, the 2026-11-28 note):
#   1. tfm info, and the host's peaks (build/dev/peaks) on 2 threads;
#   2. test_bf16 natively (tfm's AMX kernel on the real tiles), then
#      test_bf16 and test_model on the route TFM_BF16_PRODUCTS=amx;
#   3. bench_amx 2 5: the twelve products of a base step, tfm's kernel
#      (k in passes, and in one pass: amx_k_pass) against oneDNN's;
#   4. the base step (scripts/bench_ab.py, 128 x (32 + 32), V 37,000, 2
#      threads, 3 steps each): bf16 on oneDNN, bf16 on tfm's kernel, fp32;
#   5. the same at configs/multi30k.ini's shape (30 steps each);
#   6. the peak RSS of two base steps (one process each: bench_train's "rss"
#      line, MiB) on tfm's kernel and on oneDNN, recompute off and on (the
#      goal: 1,907 MiB; the AMX route keeps no rounded copy of the weights);
#   7. the peaks, bench_amx and the base A/B on 16 threads, if time is left.
# A check that fails is logged and the next one runs.
set -u
cd "$(dirname "$0")/.."
PACK=.device/amx.tar.xz
BINS="build-v4/tfm build-v4/dev/bench_train build-v4/dev/bench_amx build-v4/dev/peaks build-v4/test_bf16 build-v4/test_model"

case "${1:-}" in
pack)
    set -e
    # shellcheck disable=SC2086
    make -s -j"$(nproc)" BUILD=build-v4 ARCH=x86-64-v4 MPI=0 $BINS
    rm -rf .device/pack && mkdir -p .device/pack/lib .device/pack/bin
    # shellcheck disable=SC2086
    cp $BINS .device/pack/bin/
    strip .device/pack/bin/*
    # every library a binary loads but glibc's own (the device has its own glibc)
    for b in .device/pack/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r l; do cp -L "$l" .device/pack/lib/; done
    tar -C .device/pack -cJf "$PACK" bin lib
    rm -rf .device/pack
    echo "device-amx: $PACK ($(du -h "$PACK" | cut -f1)); run there: scripts/device-amx.sh run, carry .device"
    ;;
run)
    LIMIT=${2:-420}
    START=$(date +%s)
    LOG=${OUT:-/tmp}/amx.log
    D=/tmp/tfm-amx
    rm -rf "$D" && mkdir -p "$D" && tar -C "$D" -xJf "$PACK" || { echo "device-amx: no $PACK (run pack here first)"; exit 1; }
    export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    B=$D/bin
    exec > >(tee "$LOG") 2>&1
    left() { echo $((LIMIT - ($(date +%s) - START))); }
    check() {   # check NAME COMMAND...: run under the time left, log its end
        local t
        t=$(left)
        if [ "$t" -lt 20 ]; then echo "== $1: skipped, ${t}s left"; return; fi
        echo "== $1 ($(date +%T), ${t}s left)"
        timeout "$t" "${@:2}"
        echo "== $1: exit $?"
    }
    AB=scripts/bench_ab.py
    check "tfm info" "$B/tfm" info
    check "cpu" sh -c "grep -m1 'model name' /proc/cpuinfo; nproc"
    check "peaks, 2 threads" "$B/peaks" 2
    check "test_bf16 (native)" "$B/test_bf16"
    check "test_bf16 on the amx route" env TFM_BF16_PRODUCTS=amx "$B/test_bf16"
    check "test_model on the amx route" env TFM_BF16_PRODUCTS=amx "$B/test_model"
    check "bench_amx 2 5" "$B/bench_amx" 2 5
    check "base step, 2 threads" python3 "$AB" "$B/bench_train" configs/base.ini 128 32 32 37000 2 3 \
        "route onednn;bf16" "route amx;bf16" "fp32"
    check "multi30k step, 2 threads" python3 "$AB" "$B/bench_train" configs/multi30k.ini 100 20 20 8000 2 30 \
        "route onednn;bf16" "route amx;bf16" "fp32"
    sed 's/^recompute = false/recompute = true/' configs/base.ini > "$D/base-recompute.ini"
    for cfg in configs/base.ini "$D/base-recompute.ini"; do
        for route in amx onednn; do
            check "peak RSS, $route route, $(basename "$cfg")" sh -c "printf 'route $route\nbf16\nstep\nstep\nquit\n' |
                \"$B/bench_train\" $cfg 128 32 32 37000 2 | grep -E '^(error|rss)'"
        done
    done
    check "peaks, 16 threads" "$B/peaks" 16
    check "bench_amx 16 3" "$B/bench_amx" 16 3
    check "base step, 16 threads" python3 "$AB" "$B/bench_train" configs/base.ini 128 32 32 37000 16 3 \
        "route onednn;bf16" "route amx;bf16" "fp32"
    echo "== done in $(( $(date +%s) - START ))s"
    ;;
*)
    sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
