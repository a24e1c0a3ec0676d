#!/usr/bin/env bash
# Checks a kit of bench/tunnels-device.sh here as the bare device machine would see it: in a
# private mount namespace where the kit's tools (ip, ss, ping, iperf3, wg, wireguard-go, jq,
# taskset), python3, apt-get and go are gone from /usr/bin and /usr/sbin (overlay whiteouts, so
# neither the PATH nor an absolute path finds them), and the kit's libraries are gone from
# /usr/lib/x86_64-linux-gnu too (all but those the base tools need: coreutils, bash, awk, sed,
# grep, tar, gzip, ...). HOME is an empty directory (no ~/go/bin). Then it runs
#   bash bench/tunnels-device.sh KIT OUTDIR CORES
# there, short (RUNS=1, SECONDS_PER_FLOW=2, TESTS=tcp1 unless set), and lists the archive.
#
# Usage, as root: bash bench/device-kit-check.sh KIT OUTDIR [CORES]      (CORES: 1,2)
# Takes /tmp/sealink-bench.lock (flock) around the run, as the other benchmarks here do.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kit="$(cd "${1:?usage: device-kit-check.sh KIT OUTDIR [CORES]}" && pwd)"
out="${2:?usage: device-kit-check.sh KIT OUTDIR [CORES]}"
cores="${3:-1,2}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export RUNS="${RUNS:-1}" SECONDS_PER_FLOW="${SECONDS_PER_FLOW:-2}" TESTS="${TESTS:-tcp1}"

hide_bins="ip ss ping ping4 ping6 iperf3 wg wg-quick wireguard-go wireguard jq taskset python3 python apt-get apt go"
# Libraries the base tools load stay (hiding them would break the shell itself).
base_libs="$(for b in bash cat cp mv rm mkdir mktemp sort seq head tail cut tr date sleep nproc timeout du \
  uname basename dirname readlink env ls find xargs tee wc sha256sum awk sed grep tar gzip lscpu getconf \
  mount umount flock; do
  p="$(command -v "$b" 2>/dev/null)" && ldd "$p" 2>/dev/null | awk '$2 == "=>" {print $1}'
done | sort -u)"
hide_libs=""
for l in "$kit"/lib/*; do
  l="$(basename "$l")"
  grep -qx "$l" <<<"$base_libs" || [ "$l" = libgcc_s.so.1 ] || hide_libs+="$l "
done
echo "device-kit-check: hiding programs: $hide_bins"
echo "device-kit-check: hiding libraries: $hide_libs"
echo "device-kit-check: kept (base tools use them): $(for l in "$kit"/lib/*; do l="$(basename "$l")"; [[ " $hide_libs " == *" $l "* ]] || printf '%s ' "$l"; done)"

inner='
set -euo pipefail
mount -t tmpfs kitcheck /mnt
libdir=/usr/lib/x86_64-linux-gnu
for d in /usr/bin /usr/sbin /usr/local/bin "$libdir"; do
  u="/mnt/up$d" w="/mnt/work$d"
  mkdir -p "$u" "$w"
  case "$d" in "$libdir") names="$HIDE_LIBS" ;; *) names="$HIDE_BINS" ;; esac
  for n in $names; do [ -e "$d/$n" ] && mknod "$u/$n" c 0 0; done
  mount -t overlay overlay -o "lowerdir=$d,upperdir=$u,workdir=$w" "$d"
done
mkdir -p /mnt/home
export HOME=/mnt/home PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo "device-kit-check: inside, before the kit:"
for n in ip ss ping iperf3 wg wireguard-go jq taskset python3 apt-get; do
  printf "  %-13s %s\n" "$n" "$(command -v "$n" || echo "not found")"
done
for n in $HIDE_LIBS; do [ ! -e "$libdir/$n" ] || { echo "device-kit-check: $libdir/$n still there"; exit 1; }; done
echo "  ip runs: $(/usr/sbin/ip -V 2>&1 | head -n 1)"
echo "device-kit-check: with the kit first on the PATH:"
for n in ip ss ping iperf3 wg wireguard-go jq taskset; do
  printf "  %-13s %s\n" "$n" "$(PATH="$KIT/bin:$PATH" command -v "$n" || echo "not found")"
done
LD_DEBUG=libs "$KIT/bin/ip" -V 2>&1 | grep -E "calling init|trying file" | grep -v "$KIT" | grep -Ev "libc.so|ld-linux" | sed "s/^/  ip loads outside the kit: /" || true
bash "$ROOT/bench/tunnels-device.sh" "$KIT" "$OUT" "$CORES"
'
t0="$(date +%s)"
flock "${LOCK:-/tmp/sealink-bench.lock}" \
  env KIT="$kit" OUT="$out" CORES="$cores" ROOT="$root" HIDE_BINS="$hide_bins" HIDE_LIBS="$hide_libs" \
  unshare -m --propagation private bash -c "$inner"
echo "device-kit-check: run took $(($(date +%s) - t0)) s (with the wait for the lock)"
a="$(ls -t "$out"/tunnels-device-*.tar.gz | head -n 1)"
echo "device-kit-check: $a ($(du -h "$a" | cut -f1)):"
tar -tzf "$a" | grep -v '/work-[0-9]*/.' | sed 's/^/  /'
echo "  ... and $(tar -tzf "$a" | grep -c '/work-[0-9]*/.') files under work-N/"
