#!/usr/bin/env bash
# Issue 10's scaling curves on a many-core machine that reaches no package registry (the lent
# device machine): `bench/compare-tunnels.sh` under `taskset` at 1, 2, 4, ... cores, for plain
# veth, wireguard-go and sealink, one TCP flow and four.
#
# Here, where the tools can be installed, gather them into a kit (copied to the machine with
# the repository; about 25 MB):
#   bash bench/tunnels-device.sh --make-kit DIR
# There, as root:
#   bash bench/tunnels-device.sh DIR [CORES]      # CORES: comma list, default 1,2,4,8,16
# Environment passed on to compare-tunnels.sh: RUNS (3), SECONDS_PER_FLOW (4), TESTS
# (tcp1,tcp4), TUNNELS (plain,wg-go,sealink).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "${1:-}" = "--make-kit" ]; then
  kit="${2:?usage: tunnels-device.sh --make-kit DIR}"
  mkdir -p "$kit/bin" "$kit/lib"
  [ -x "$root/target/release/sealink" ] || cargo build --release -p sealink-cli --manifest-path "$root/Cargo.toml"
  strip -o "$kit/bin/sealink" "$root/target/release/sealink"
  command -v iperf3 >/dev/null && command -v wg >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq iperf3 wireguard-tools; }
  cp "$(command -v iperf3)" "$(command -v wg)" "$kit/bin/"
  # iperf3's own libraries (glibc and libcrypto are the machine's).
  ldd "$(command -v iperf3)" | awk '/libiperf|libsctp/ {print $3}' | xargs -r cp -L -t "$kit/lib/"
  wggo="$(command -v wireguard-go || echo "$HOME/go/bin/wireguard")"
  if [ ! -x "$wggo" ]; then
    export PATH="$PATH:/usr/local/go/bin"
    go install golang.zx2c4.com/wireguard@latest
    wggo="$HOME/go/bin/wireguard"
  fi
  cp "$wggo" "$kit/bin/wireguard-go"
  du -sh "$kit"
  exit 0
fi

kit="${1:?usage: tunnels-device.sh KIT-DIR [CORES]  (or --make-kit DIR)}"
kit="$(cd "$kit" && pwd)"
cores="${2:-1,2,4,8,16}"
export PATH="$kit/bin:$PATH"
export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SEALINK="$kit/bin/sealink"
export RUNS="${RUNS:-3}" SECONDS_PER_FLOW="${SECONDS_PER_FLOW:-4}"
export TESTS="${TESTS:-tcp1,tcp4}" TUNNELS="${TUNNELS:-plain,wg-go,sealink}"
have="$(nproc --all)"
echo "tunnels-device: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($have CPUs); $(uptime)"
for n in ${cores//,/ }; do
  if [ "$n" -gt "$have" ]; then
    echo "tunnels-device: $n cores: skipped, the machine has $have"
    continue
  fi
  echo "tunnels-device: ==== $n core(s): taskset -c 0-$((n - 1)) ===="
  taskset -c "0-$((n - 1))" bash "$root/bench/compare-tunnels.sh"
done
echo "tunnels-device: done; $(uptime)"
