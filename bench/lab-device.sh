#!/usr/bin/env bash
# The lab's plan for its next lent machine (issue 49), in 6 minutes: paper 004's Figure 12 on
# the paper's own x-axis (`bench gpu --packet-size`, 4-128 KB packets, all four GPU strategies,
# the CPU line at the same sizes), `tunnel-cores` at 1-16 workers with the order cost at each
# count (`--order-each`), `thread-times` at 1-16 encryption threads, paper 000's des-md5,
# 3des-md5 and aes128-gcm stacks at 1-12 workers, the GPU tests, and whether the kernel offers
# the `tls` ULP (ulp.txt). One archive, OUTDIR/lab-device-<UTC time>.tar.gz, as
# bench/gpu-device.sh writes (this is its PLAN=lab; the kit is the same).
#
#   bash bench/gpu-device.sh --make-kit DIR      (here, where Rust is installed)
#   bash bench/lab-device.sh KIT OUTDIR          (there)
#
# With the device tool: make the kit in an ignored folder and carry it, e.g.
#   echo /.gpukit/ >>.git/info/exclude; bash bench/gpu-device.sh --make-kit .gpukit
#   run (carry [".gpukit"]): bash bench/lab-device.sh .gpukit "$OUT"
# Environment as bench/gpu-device.sh's (TOTAL_S, TC_WORKERS, GPU_WORKERS).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = --make-kit ]; then exec bash "$here/gpu-device.sh" "$@"; fi
PLAN=lab exec bash "$here/gpu-device.sh" "$@"
