#!/usr/bin/env bash
# One TCP flow through a sealink tunnel between two namespaces, with where the time went: each
# data-path thread's share of a core and what its system calls carried (`sealink show --json`
# before and after), per-CPU time split (user, system, softirq) and, with PERF=1, a system-wide
# profile (`perf record -a -g`) whose top symbols are printed. This is how RESULTS §21's cost
# model was measured.
# Usage: sudo bash bench/profile-tunnel.sh SEALINK-BINARY [SECONDS] [CPUS]
#   CPUS: a taskset list for everything (tunnels, iperf3, the kernel work they cause), e.g. 0
#   for one core; default: all.
# Environment: PERF=1 (profile), PERF_OUT (perf.data path, default in the work directory),
# CONFIG_EXTRA (lines added to both sides' [interface], e.g. 'workers = 2'), WG=1 (WireGuard's
# wire: `protocol = "wireguard"` with `wg genkey` keys, the sealink-wg tunnel of compare-tunnels.sh),
# PIN_A / PIN_B (a taskset list for one side's tunnel process alone, e.g. PIN_A=0 PIN_B=1),
# GSO_MAX_SEGS (set on both TUN devices before the flow: the TCP segments per TSO super-packet).
set -euo pipefail
bin="$(realpath "${1:?usage: profile-tunnel.sh SEALINK-BINARY [SECONDS] [CPUS]}")"
secs="${2:-8}"
cpus="${3:-}"
work="$(mktemp -d /tmp/sealink-prof.XXXXXX)"
cleanup() {
  set +e
  ip netns pids tpa 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids tpb 2>/dev/null | xargs -r kill 2>/dev/null
  sleep 0.3
  ip netns del tpa 2>/dev/null
  ip netns del tpb 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")

ip netns add tpa; ip netns add tpb
ip link add tp-va netns tpa type veth peer name tp-vb netns tpb
for n in a b; do ip -n tp$n link set lo up; done
ip -n tpa addr add 10.92.0.1/24 dev tp-va; ip -n tpb addr add 10.92.0.2/24 dev tp-vb
ip -n tpa link set tp-va up; ip -n tpb link set tp-vb up
extra="${CONFIG_EXTRA:-}"
if [ "${WG:-0}" = 1 ]; then
  for s in a b; do (umask 077; wg genkey >"$work/$s.key"); wg pubkey <"$work/$s.key" >"$work/$s.key.pub"; done
  pa=$(cat "$work/a.key.pub"); pb=$(cat "$work/b.key.pub")
  extra="protocol = \"wireguard\"
$extra"
else
  for s in a b; do "$bin" keygen host "$work/$s.key" >/dev/null; done
  pa=$(awk '{print $2}' "$work/a.key.pub"); pb=$(awk '{print $2}' "$work/b.key.pub")
fi
mk() {
  printf '[interface]\nname = "tp%s"\nprivate_key = "%s"\naddress = "%s/24"\nlisten_port = 51910\nmtu = 1420\n%s\n\n[[peer]]\nname = "peer"\npublic_key = "%s"\nendpoint = "%s:51910"\nallowed_ips = ["%s/32"]\n' \
    "$1" "$work/$1.key" "$2" "$extra" "$3" "$4" "$5" >"$work/$1.toml"
}
mk a 10.93.0.1 "$pb" 10.92.0.2 10.93.0.2
mk b 10.93.0.2 "$pa" 10.92.0.1 10.93.0.1
pina=("${pin[@]}"); pinb=("${pin[@]}")
[ -n "${PIN_A:-}" ] && pina=(taskset -c "$PIN_A")
[ -n "${PIN_B:-}" ] && pinb=(taskset -c "$PIN_B")
ip netns exec tpa "${pina[@]}" "$bin" up "$work/a.toml" >"$work/a.log" 2>&1 &
ip netns exec tpb "${pinb[@]}" "$bin" up "$work/b.toml" >"$work/b.log" 2>&1 &
for _ in $(seq 100); do grep -q "up: tpb" "$work/b.log" 2>/dev/null && grep -q "up: tpa" "$work/a.log" 2>/dev/null && break; sleep 0.1; done
if [ -n "${GSO_MAX_SEGS:-}" ]; then
  ip -n tpa link set tpa gso_max_segs "$GSO_MAX_SEGS"; ip -n tpb link set tpb gso_max_segs "$GSO_MAX_SEGS"
fi
ip netns exec tpb "${pin[@]}" iperf3 -s -D >/dev/null
sleep 0.5
ip netns exec tpa ping -c 2 -W 2 10.93.0.2 >/dev/null

snap() { # $1 = tag
  ip netns exec tpa "$bin" show tpa --json >"$work/a-$1.json"
  ip netns exec tpb "$bin" show tpb --json >"$work/b-$1.json"
  date +%s.%N >"$work/t-$1"
  head -1 /proc/stat >"$work/cpu-$1"
  grep -E '^(NET_RX|NET_TX)' /proc/softirqs >"$work/softirq-$1" || true
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores; pinned to: ${cpus:-all}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
ip netns exec tpa "${pin[@]}" iperf3 -c 10.93.0.2 -t "$secs" -J >"$work/iperf.json" &
iperf=$!
sleep 1
snap 0
if [ "${PERF:-0}" = 1 ]; then
  perf record -a -g -F 999 -o "${PERF_OUT:-$work/perf.data}" -- sleep $((secs - 3)) 2>/dev/null >/dev/null
else
  sleep $((secs - 3))
fi
snap 1
wait "$iperf"

python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
g = json.load(open(f"{w}/iperf.json"))["end"]["sum_received"]["bits_per_second"] / 1e9
t0 = float(open(f"{w}/t-0").read()); t1 = float(open(f"{w}/t-1").read())
wall = t1 - t0
c0 = list(map(int, open(f"{w}/cpu-0").read().split()[1:]))
c1 = list(map(int, open(f"{w}/cpu-1").read().split()[1:]))
d = [b - a for a, b in zip(c0, c1)]
tot = sum(d) or 1
names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
print(f"one TCP flow: {g:.3f} Gbit/s; window {wall:.2f} s")
print("machine CPU: " + ", ".join(f"{n} {100*d[i]/tot:.1f}%" for i, n in enumerate(names) if i < len(d)))
bytes_per_s = g * 1e9 / 8
for side in "ab":
    s0 = {t["name"]: t for t in json.load(open(f"{w}/{side}-0.json"))[0].get("threads", [])}
    s1 = {t["name"]: t for t in json.load(open(f"{w}/{side}-1.json"))[0].get("threads", [])}
    for n, t in s1.items():
        a = s0.get(n)
        if not a:
            continue
        busy = t["busy_s"] - a["busy_s"]
        if busy / wall < 0.005:
            continue
        parts = [f"{side}/{n:<12} {busy / wall:5.2f} core  {1e6 * busy / (bytes_per_s * wall / 65536):6.1f} us per 64 KiB"]
        for k, (c, i) in {"tun_read": ("tun_reads", "tun_read_packets"), "udp_send": ("udp_sends", "udp_send_datagrams"),
                          "udp_recv": ("udp_receives", "udp_receive_datagrams"), "tun_write": ("tun_writes", "tun_write_packets")}.items():
            dc = t[c] - a[c]; di = t[i] - a[i]
            if dc:
                parts.append(f"{k} {dc / wall / 1e3:.1f}k/s x{di / dc:.1f}")
        print("  ".join(parts))
PY
if [ "${PERF:-0}" = 1 ]; then
  perf report -i "${PERF_OUT:-$work/perf.data}" --no-children -g none --percent-limit 0.7 --sort comm,dso,sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -45
fi
