#!/usr/bin/env bash
# GHASH with and without the carry-less multiply instruction (paper 001's "XOR multiply").
#
# RustCrypto's polyval (under ghash) picks its backend at compile time: by default it uses
# PCLMULQDQ when the CPU has it (detected at run time via cpufeatures); with
# RUSTFLAGS='--cfg polyval_force_soft' only its portable software backend is compiled in.
# Both cannot live in one binary, so this builds crates/sealink-lab/examples/ghash.rs twice:
#   - default flags, in the usual target dir        -> the CLMUL figure
#   - --cfg polyval_force_soft, in <target>/ghash-soft -> the software figure
# (a separate target dir so the changed RUSTFLAGS do not rebuild the main one; its first build
# compiles every dependency of sealink-lab, aws-lc-sys included, and takes minutes).
#
# It runs both back to back with the same size/seconds/runs, prints both and the ratio, and
# leaves ghash-soft.csv and ghash-clmul.csv in $GHASH_OUT, where `sealink-lab bench crypto` reads
# the software figure from.
#
# Environment: GHASH_OUT (default bench-out/crypto), GHASH_SIZE (8192), GHASH_SECONDS (0.3),
# GHASH_RUNS (5).
# Usage: bash bench/ghash-soft.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${GHASH_OUT:-bench-out/crypto}"
size="${GHASH_SIZE:-8192}"
seconds="${GHASH_SECONDS:-0.3}"
runs="${GHASH_RUNS:-5}"
target="${CARGO_TARGET_DIR:-$root/target}"
mkdir -p "$out"

cd "$root"
echo "building examples/ghash.rs (default: CLMUL path when the CPU has it)" >&2
env -u RUSTFLAGS cargo build --release -p sealink-lab --example ghash >&2
echo "building examples/ghash.rs with RUSTFLAGS='--cfg polyval_force_soft' into $target/ghash-soft" >&2
RUSTFLAGS='--cfg polyval_force_soft' CARGO_TARGET_DIR="$target/ghash-soft" \
    cargo build --release -p sealink-lab --example ghash >&2
cd - >/dev/null

"$target/release/examples/ghash" "$size" "$seconds" "$runs" >"$out/ghash-clmul.csv"
"$target/ghash-soft/release/examples/ghash" "$size" "$seconds" "$runs" >"$out/ghash-soft.csv"

clmul_line="$(sed -n 2p "$out/ghash-clmul.csv")"
soft_line="$(sed -n 2p "$out/ghash-soft.csv")"
case "$soft_line" in
    soft,true,*) ;;
    *) echo "error: the software build did not report polyval_force_soft: $soft_line" >&2; exit 1 ;;
esac
clmul="$(cut -d, -f4 <<<"$clmul_line")"
soft="$(cut -d, -f4 <<<"$soft_line")"
echo "GHASH, $size-byte buffers, median of $runs runs of $seconds s:"
awk -v c="$clmul" -v b="$(cut -d, -f1 <<<"$clmul_line")" 'BEGIN { printf "  %-34s %6.0f Mbit/s\n", "default build (" b "):", c }'
awk -v s="$soft" 'BEGIN { printf "  %-34s %6.0f Mbit/s\n", "--cfg polyval_force_soft (soft):", s }'
awk -v c="$clmul" -v s="$soft" 'BEGIN { printf "  speedup from the carry-less multiply instruction: %.1fx\n", c / s }'
echo "wrote $out/ghash-clmul.csv and $out/ghash-soft.csv"
