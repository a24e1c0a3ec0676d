#!/usr/bin/env bash
# Checks a kit of bench/gpu-device.sh here as the bare device machine would see it (the sibling
# of bench/device-kit-check.sh, which checks bench/tunnels-device.sh's kit). In a private mount
# namespace:
#   - the Rust toolchain is gone: ~/.cargo, ~/.rustup (and /usr/local/cargo, /usr/local/rustup
#     if there) under empty tmpfs mounts, and CARGO_TARGET_DIR and the repository's target/ too,
#     so no built binary outside the kit is reachable;
#   - the tools a bare machine lacks are gone from /usr/bin, /usr/sbin and /usr/local/bin
#     (overlay whiteouts, so neither the PATH nor an absolute path finds them): the compilers,
#     binutils (strip, objdump, readelf), patchelf, iproute2, iperf3, jq, python3, apt, go, and
#     uptime (procps; the script then reads /proc/loadavg);
#   - the environment is empty but for PATH=/usr/sbin:/usr/bin:/sbin:/bin and an empty HOME.
# Then it runs the whole plan, `bash bench/gpu-device.sh KIT OUTDIR` (6 minutes), and checks
# that the archive holds what it should. Here, without a GPU, the GPU tests skip and `bench gpu`
# reports its GPU rows not measured.
#
# Usage, as root: bash bench/gpu-device-check.sh KIT OUTDIR
# PLAN=lab checks bench/lab-device.sh's plan instead (gpu-device.sh's PLAN=lab).
# Takes /tmp/sealink-bench.lock (flock) around the run, as the other benchmarks here do.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: gpu-device-check.sh KIT OUTDIR"
inside=0
if [ "${1:-}" = --inside ]; then inside=1; shift; fi
kit="$(cd "${1:?$usage}" && pwd)"
out="${2:?$usage}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# Inside the namespace, with the empty environment: what the PATH finds, then the whole plan.
if [ "$inside" = 1 ]; then
  set +e
  echo "device-check: inside: env: $(env | sort | tr '\n' ' ')"
  for n in cargo rustc strip objdump patchelf ip jq python3 apt-get uptime nvidia-smi bash tar gzip timeout lscpu getconf; do
    printf '  %-11s %s\n' "$n" "$(command -v "$n" || echo "not found")"
  done
  for d in $HIDE_DIRS; do printf '  %s: %s entries\n' "$d" "$(ls -A "$d" | wc -l)"; done
  exec env PLAN="${PLAN:-gpu}" bash "$root/bench/gpu-device.sh" "$kit" "$out"
fi
plan_name="${PLAN:-gpu}"

hide_bins="cargo rustc rustup rustdoc cc gcc g++ c++ clang ld ld.bfd ld.gold strip objdump readelf nm patchelf
  ip ss ping iperf3 wg wireguard-go jq python3 python apt-get apt go uptime"
hide_bins="$(echo $hide_bins)"
hide_dirs=""
for d in "${HOME:-/root}/.cargo" "${HOME:-/root}/.rustup" /usr/local/cargo /usr/local/rustup \
  "${CARGO_TARGET_DIR:-}" "$root/target"; do
  [ -n "$d" ] && [ -d "$d" ] && hide_dirs+="$(cd "$d" && pwd) "
done
echo "device-check: hiding programs: $hide_bins"
echo "device-check: hiding directories: $hide_dirs"

inner='
set -euo pipefail
mount -t tmpfs gpukitcheck /mnt
for d in $HIDE_DIRS; do mount -t tmpfs -o ro,size=1m hidden "$d"; done
for d in /usr/bin /usr/sbin /usr/local/bin; do
  [ -d "$d" ] || continue
  u="/mnt/up$d" w="/mnt/work$d"
  mkdir -p "$u" "$w"
  for n in $HIDE_BINS; do [ -e "$d/$n" ] && mknod "$u/$n" c 0 0; done
  mount -t overlay overlay -o "lowerdir=$d,upperdir=$u,workdir=$w" "$d"
done
mkdir -p /mnt/home
exec env -i HOME=/mnt/home PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C HIDE_DIRS="$HIDE_DIRS" PLAN="$PLAN" \
  bash "$SELF" --inside "$KIT" "$OUT"
'
t0="$(date +%s)"
rc=0
flock "${LOCK:-/tmp/sealink-bench.lock}" \
  env PLAN="$plan_name" KIT="$kit" OUT="$out" SELF="$root/bench/gpu-device-check.sh" HIDE_BINS="$hide_bins" HIDE_DIRS="$hide_dirs" \
  unshare -m --propagation private bash -c "$inner" || rc=$?
echo "device-check: gpu-device.sh exit $rc; run took $(($(date +%s) - t0)) s (with the wait for the lock)"
a="$(ls -t "$out"/"$plan_name"-device-*.tar.gz | head -n 1)"
echo "device-check: $a ($(du -h "$a" | cut -f1)):"
list="$(tar -tzf "$a")"
sed 's/^/  /' <<<"$list"
missing=0
top="$(head -n 1 <<<"$list" | cut -d/ -f1)"
if [ "$plan_name" = lab ]; then
  expect="gpu-packet.log gpu-packet/gpu-points.csv gpu-packet/gpu.csv tunnel-cores.log
    tunnel-cores/tunnel-cores-points.csv tunnel-cores/tunnel-cores-order.csv thread-times.log
    stacks-12-aes.log stacks-12-aes/stacks-points.csv stacks-12-aes/stacks.json stacks-12-des.log
    stacks-12-des/stacks-points.csv stacks-12-3des.log stacks-12-3des/stacks-points.csv"
else
  expect="gpu.log gpu/gpu-points.csv tunnel-cores.log tunnel-cores/tunnel-cores-points.csv
    stacks-12.log stacks-12/stacks-points.csv stacks-12/stacks.json stacks-16.log
    stacks-16/stacks-points.csv stacks-16/stacks.json"
fi
for f in run.log machine.txt ulp.txt kit.txt status.tsv summary.txt test-gpu.log test-sealink_gpu.log $expect; do
  grep -qx "$top/$f" <<<"$list" || { echo "device-check: MISSING from the archive: $f"; missing=1; }
done
echo "device-check: status.tsv:"
tar -xzOf "$a" "$top/status.tsv" | sed 's/^/  /'
[ "$missing" = 0 ] && echo "device-check: the archive holds every expected file"
exit $((rc != 0 || missing != 0))
