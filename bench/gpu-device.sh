#!/bin/bash
# Paper 004 on a machine with a CUDA GPU and many cores (issue 15): the GPU tests, Figure 12
# (`bench gpu`) and the multicore figures (`bench tunnel-cores`), in one run.
#
# Such a machine may have no Rust toolchain and no registry. Build on a machine that has them:
#   cargo build --release -p sealink-lab --features cuda
#   cargo test --release -p sealink-gpu --features cuda --no-run    # prints the test binaries
# copy target/release/sealink-lab and the two sealink-gpu test binaries (stripped) into DIR, then
# run:  bash bench/gpu-device.sh DIR [OUT]
set -u
dir=${1:?usage: gpu-device.sh DIR-WITH-BINARIES [OUT-DIR]}
out=${2:-/tmp/gpu-device}
mkdir -p "$out"
echo "== machine"; date -u; uptime
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
nproc; lscpu | grep -E 'Model name|Thread|Core|Socket'
# cudarc looks for libnvrtc.so by its usual names; CUDA 13 keeps it under targets/.
nvrtc=$(find /usr/local -name 'libnvrtc.so*' -not -path '*stubs*' 2>/dev/null | grep -v builtins | head -1)
[ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"
echo "NVRTC: ${nvrtc:-not found}"
for t in "$dir"/sealink_gpu-* "$dir"/gpu-*; do
  [ -x "$t" ] || continue
  echo "== $(basename "$t")"; timeout 300 "$t" --nocapture 2>&1 | tail -25
done
# Figure 12 with all four GPU strategies (naive, naive-streams, no-streams, streams), so the
# paper's 4x (4 KB) and 8x (128 KB) of one block per file with streams over its naive code can
# be tested; --budget fits the points into 150 s (the default strategy first, see bench gpu).
echo "== bench gpu"; timeout 400 "$dir/sealink-lab" bench gpu --workers 1,2,4,8,16 \
  --strategy naive,naive-streams,no-streams,streams --budget 150 --out "$out/gpu"
uptime
echo "== bench tunnel-cores"; timeout 300 "$dir/sealink-lab" bench tunnel-cores --workers 1,2,4,8,16 --out "$out/tc"
uptime
