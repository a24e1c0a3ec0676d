#!/usr/bin/env bash
# A/B of two sealink builds through the tunnel: one TCP flow (iperf3), a fresh pair of network
# namespaces and tunnel per sample, the builds interleaved round by round. Prints Gbit/s per
# round and the load average. Used for RESULTS §10f.
# Usage: sudo bash bench/ab-tunnel.sh ROUNDS SECONDS NAME=BINARY [NAME=BINARY ...]
set -euo pipefail
rounds=$1 secs=$2
shift 2
work="$(mktemp -d /tmp/sealink-ab.XXXXXX)"
cleanup() {
  ip netns pids tla 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns pids tlb 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del tla 2>/dev/null || true
  ip netns del tlb 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

up() { # $1 = sealink binary
  cleanup; mkdir -p "$work"; sleep 0.3
  ip netns add tla; ip netns add tlb
  ip link add tl-va netns tla type veth peer name tl-vb netns tlb
  for n in a b; do ip -n tl$n link set lo up; done
  ip -n tla addr add 10.90.0.1/24 dev tl-va; ip -n tlb addr add 10.90.0.2/24 dev tl-vb
  ip -n tla link set tl-va up; ip -n tlb link set tl-vb up
  for s in a b; do "$1" keygen host "$work/$s.key" >/dev/null; done
  local pa pb
  pa=$(awk '{print $2}' "$work/a.key.pub"); pb=$(awk '{print $2}' "$work/b.key.pub")
  mk() { printf '[interface]\nname = "tl%s"\nprivate_key = "%s"\naddress = "%s/24"\nlisten_port = 51900\nmtu = 1420\n\n[[peer]]\nname = "peer"\npublic_key = "%s"\nendpoint = "%s:51900"\nallowed_ips = ["%s/32"]\n' \
    "$1" "$work/$1.key" "$2" "$3" "$4" "$5" >"$work/$1.toml"; }
  mk a 10.91.0.1 "$pb" 10.90.0.2 10.91.0.2
  mk b 10.91.0.2 "$pa" 10.90.0.1 10.91.0.1
  ip netns exec tla "$1" up "$work/a.toml" >"$work/a.log" 2>&1 &
  ip netns exec tlb "$1" up "$work/b.toml" >"$work/b.log" 2>&1 &
  for _ in $(seq 100); do grep -q "up: tlb" "$work/b.log" 2>/dev/null && grep -q "up: tla" "$work/a.log" 2>/dev/null && break; sleep 0.1; done
  ip netns exec tlb iperf3 -s -D >/dev/null
  sleep 0.5
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
for r in $(seq "$rounds"); do
  line="round $r load $(cut -d' ' -f1-3 /proc/loadavg):"
  for v in "$@"; do
    up "${v#*=}"
    g=$(ip netns exec tla iperf3 -c 10.91.0.2 -t "$secs" -J |
      python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9,3))')
    line="$line ${v%%=*}=$g"
  done
  echo "$line"
done
