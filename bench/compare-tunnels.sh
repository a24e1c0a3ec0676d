#!/usr/bin/env bash
# iperf3 between two network namespaces joined by a veth pair (MTU 1500), side by side in one
# run: one TCP flow (tcp1), four (tcp4), 256-byte UDP packets (udp256) and idle ping (rtt), over:
#   plain      the veth itself, no tunnel
#   wg-go      wireguard-go (go install golang.zx2c4.com/wireguard@latest), configured with `wg`
#   boringtun  boringtun-cli (cargo install boringtun-cli), configured with `wg`
#   sealink    `sealink up` (target/release/sealink, built here), default config
#   sealink-inline  the same with workers = 0, queues = 1 (no engine threads: seal/open inline)
#   sealink-par     the same with workers = 2, queues = 2 (engine threads, two queues)
#   sealink-nopb    the same with piggybacking off
#   sealink-timer   the same with the explicit ADP piggyback policy (200 us timer)
# Every tunnel has MTU 1420 and its own subnet; all stay up for the whole run, idle while another
# is measured. The flows run interleaved RUNS times; the script prints every run, the medians in
# Gbit/s, and each tunnel's ratio to wireguard-go and to plain veth.
#
# Missing tools are installed: iperf3 and wireguard-tools from Debian's packages, wireguard-go
# with `go install`, boringtun-cli with `cargo install`. A tunnel that cannot be installed or
# brought up is reported (with why) and skipped; the others are still measured.
# Namespaces, interfaces and daemons are removed on exit, also on failure or Ctrl-C.
#
# Environment: RUNS (5), SECONDS_PER_FLOW (6), TESTS (tcp1,tcp4,udp256,rtt),
# TUNNELS (plain,wg-go,boringtun,sealink; add sealink-inline, sealink-nopb, sealink-timer),
# SEALINK (a prebuilt sealink binary instead of building target/release/sealink),
# BORINGTUN_THREADS (boringtun's default when unset), KEEP_LOGS=1 (keep the work directory).
# Usage: sudo bash bench/compare-tunnels.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RUNS:-5}"
secs="${SECONDS_PER_FLOW:-6}"
tunnels="${TUNNELS:-plain,wg-go,boringtun,sealink}"
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin:$HOME/.cargo/bin"
# wireguard-go refuses to run on Linux (which has the kernel module) without this.
export WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1

NA=slbench-a
NB=slbench-b
work="$(mktemp -d /tmp/sealink-tunnels.XXXXXX)"
pids=()

log() { echo "compare-tunnels: $*" >&2; }

cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  # Up to 3 s for the daemons to remove their interfaces, then no more mercy.
  for _ in $(seq 30); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$NA" 2>/dev/null
  ip netns del "$NB" 2>/dev/null
  rm -f /var/run/wireguard/{wga0,wgb0,bta0,btb0}.sock
  if [ -n "${KEEP_LOGS:-}" ]; then log "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

want() { [[ ",$tunnels," == *",$1,"* ]]; }
all_tunnels="plain wg-go boringtun sealink sealink-inline sealink-par sealink-nopb sealink-timer"
declare -A ifn=([sealink]=sl [sealink-inline]=sli [sealink-par]=slp [sealink-nopb]=sln [sealink-timer]=slt)
ina() { ip netns exec "$NA" "$@"; }
inb() { ip netns exec "$NB" "$@"; }

# --- tools ------------------------------------------------------------------------------------
if ! command -v iperf3 >/dev/null || ! command -v wg >/dev/null || ! command -v ping >/dev/null; then
  log "installing iperf3 and wireguard-tools"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq iperf3 wireguard-tools iputils-ping >/dev/null
fi
command -v python3 >/dev/null || { log "python3 is needed to read iperf3's JSON"; exit 1; }

declare -A skip=()
if want wg-go && ! command -v wireguard-go >/dev/null && [ ! -x "$HOME/go/bin/wireguard" ]; then
  log "installing wireguard-go"
  if ! go install golang.zx2c4.com/wireguard@latest >"$work/wg-go-install.log" 2>&1; then
    skip[wg-go]="go install golang.zx2c4.com/wireguard@latest failed: $(tail -n 3 "$work/wg-go-install.log" | tr '\n' ' ')"
  fi
fi
wggo="$(command -v wireguard-go || echo "$HOME/go/bin/wireguard")"
if want boringtun && ! command -v boringtun-cli >/dev/null; then
  log "installing boringtun-cli (takes a few minutes)"
  if ! cargo install -q boringtun-cli >"$work/boringtun-install.log" 2>&1; then
    skip[boringtun]="cargo install boringtun-cli failed: $(tail -n 3 "$work/boringtun-install.log" | tr '\n' ' ')"
  fi
fi
if [[ ",$tunnels," == *",sealink"* ]]; then
  if [ -n "${SEALINK:-}" ]; then
    sealink="$SEALINK"
  else
    log "building sealink (release)"
    if (cd "$root" && cargo build --release -q -p sealink-cli) >"$work/sealink-build.log" 2>&1; then
      sealink="$root/target/release/sealink"
    else
      skip[sealink]="cargo build --release -p sealink-cli failed: $(tail -n 5 "$work/sealink-build.log" | tr '\n' ' ')"
    fi
  fi
fi

# --- namespaces -------------------------------------------------------------------------------
ip netns del "$NA" 2>/dev/null || true
ip netns del "$NB" 2>/dev/null || true
ip netns add "$NA"
ip netns add "$NB"
ip link add slb-va netns "$NA" type veth peer name slb-vb netns "$NB"
ina ip link set lo up
inb ip link set lo up
ina ip addr add 10.77.0.1/24 dev slb-va
inb ip addr add 10.77.0.2/24 dev slb-vb
ina ip link set slb-va mtu 1500 up
inb ip link set slb-vb mtu 1500 up

# Waits up to 10 s for `cond` (a command) to succeed.
wait_for() {
  for _ in $(seq 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# Brings up a WireGuard-protocol tunnel between A and B: $1 = label, $2/$3 = interface names in
# A/B, $4 = subnet prefix (10.78.N), $5 = UDP port, $6... = daemon command (gets the name last).
wg_tunnel() {
  local label="$1" ia="$2" ib="$3" net="$4" port="$5"
  shift 5
  local ka kb pa pb
  ka="$(wg genkey)"; kb="$(wg genkey)"
  pa="$(wg pubkey <<<"$ka")"; pb="$(wg pubkey <<<"$kb")"
  ip netns exec "$NA" "$@" "$ia" >"$work/$label-a.log" 2>&1 &
  pids+=($!)
  ip netns exec "$NB" "$@" "$ib" >"$work/$label-b.log" 2>&1 &
  pids+=($!)
  wait_for ina ip link show "$ia" || { echo "$ia did not appear: $(tail -n 3 "$work/$label-a.log" | tr '\n' ' ')"; return 1; }
  wait_for inb ip link show "$ib" || { echo "$ib did not appear: $(tail -n 3 "$work/$label-b.log" | tr '\n' ' ')"; return 1; }
  # The UAPI socket appears a moment after the interface.
  wait_for test -S "/var/run/wireguard/$ia.sock" || { echo "no UAPI socket for $ia"; return 1; }
  wait_for test -S "/var/run/wireguard/$ib.sock" || { echo "no UAPI socket for $ib"; return 1; }
  printf '[Interface]\nPrivateKey = %s\nListenPort = %s\n[Peer]\nPublicKey = %s\nAllowedIPs = %s.2/32\nEndpoint = 10.77.0.2:%s\n' \
    "$ka" "$port" "$pb" "$net" "$port" >"$work/$label-a.conf"
  printf '[Interface]\nPrivateKey = %s\nListenPort = %s\n[Peer]\nPublicKey = %s\nAllowedIPs = %s.1/32\nEndpoint = 10.77.0.1:%s\n' \
    "$kb" "$port" "$pa" "$net" "$port" >"$work/$label-b.conf"
  ina wg setconf "$ia" "$work/$label-a.conf" || { echo "wg setconf $ia failed"; return 1; }
  inb wg setconf "$ib" "$work/$label-b.conf" || { echo "wg setconf $ib failed"; return 1; }
  ina ip addr add "$net.1/24" dev "$ia"
  inb ip addr add "$net.2/24" dev "$ib"
  ina ip link set "$ia" mtu 1420 up
  inb ip link set "$ib" mtu 1420 up
}

# Brings up a sealink tunnel pair: $1 = label, $2 = subnet prefix (10.78.N), $3 = UDP port,
# $4 = extra [interface] lines, $5 = [interface.piggyback] lines.
sealink_tunnel() {
  local label="$1" net="$2" port="$3" extra="$4" pb="$5" side
  for side in a b; do
    "$sealink" keygen host "$work/$label-$side.key" >/dev/null || { echo "sealink keygen failed"; return 1; }
  done
  local puba pubb
  puba="$(awk '{print $2}' "$work/$label-a.key.pub")"
  pubb="$(awk '{print $2}' "$work/$label-b.key.pub")"
  # $1 = this side, $2 = its address, $3 = peer public key, $4 = peer tunnel address, $5 = peer veth address
  mkconf() {
    cat >"$work/$label-$1.toml" <<CONF
[interface]
name = "${ifn[$label]}$1"
private_key = "$work/$label-$1.key"
address = "$2/24"
listen_port = $port
mtu = 1420
$extra

[interface.piggyback]
$pb

[[peer]]
name = "peer"
public_key = "$3"
endpoint = "$5:$port"
allowed_ips = ["$4/32"]
CONF
  }
  mkconf a "$net.1" "$pubb" "$net.2" 10.77.0.2
  mkconf b "$net.2" "$puba" "$net.1" 10.77.0.1
  ip netns exec "$NA" "$sealink" up "$work/$label-a.toml" >"$work/$label-a.log" 2>&1 &
  pids+=($!)
  ip netns exec "$NB" "$sealink" up "$work/$label-b.toml" >"$work/$label-b.log" 2>&1 &
  pids+=($!)
  wait_for grep -q "up: ${ifn[$label]}a" "$work/$label-a.log" || { echo "sealink up (a) failed: $(tail -n 3 "$work/$label-a.log" | tr '\n' ' ')"; return 1; }
  wait_for grep -q "up: ${ifn[$label]}b" "$work/$label-b.log" || { echo "sealink up (b) failed: $(tail -n 3 "$work/$label-b.log" | tr '\n' ' ')"; return 1; }
}

# --- tunnels ----------------------------------------------------------------------------------
declare -A dest=([plain]=10.77.0.2 [wg-go]=10.78.1.2 [boringtun]=10.78.2.2 [sealink]=10.78.3.2
  [sealink-inline]=10.78.4.2 [sealink-nopb]=10.78.5.2 [sealink-timer]=10.78.6.2 [sealink-par]=10.78.7.2)
active=()
for t in $all_tunnels; do
  want "$t" || continue
  if [ -n "${skip[$t]:-}" ]; then continue; fi
  err=""
  # Not in a $(...) subshell: the daemons' pids must reach `pids` for the cleanup.
  ok=0
  if [[ "$t" == sealink* && -z "${sealink:-}" ]]; then
    skip[$t]="${skip[sealink]:-no sealink binary}"
    continue
  fi
  case "$t" in
    plain) ;;
    wg-go) wg_tunnel wg-go wga0 wgb0 10.78.1 51820 "$wggo" -f >"$work/$t-up.err" 2>&1 || ok=$? ;;
    boringtun)
      bt=(env WG_SUDO=1 boringtun-cli --foreground --disable-drop-privileges)
      [ -n "${BORINGTUN_THREADS:-}" ] && bt+=(--threads "$BORINGTUN_THREADS")
      wg_tunnel boringtun bta0 btb0 10.78.2 51821 "${bt[@]}" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink) sealink_tunnel sealink 10.78.3 51822 "" "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    # The engine bypassed: one TUN queue, one socket, seal and open inline on the readers.
    sealink-inline) sealink_tunnel sealink-inline 10.78.4 51823 $'workers = 0\nqueues = 1' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-par) sealink_tunnel sealink-par 10.78.7 51826 $'workers = 2\nqueues = 2' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-nopb) sealink_tunnel sealink-nopb 10.78.5 51824 "" "enabled = false" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-timer) sealink_tunnel sealink-timer 10.78.6 51825 "" 'mode = "timer"' >"$work/$t-up.err" 2>&1 || ok=$? ;;
  esac
  [ "$ok" -eq 0 ] || err="$(tr '\n' ' ' <"$work/$t-up.err")"
  # Bring-up is checked by a ping through the tunnel (the first one also completes a handshake).
  if [ -z "$err" ] && ! ina ping -c 3 -i 0.2 -W 2 "${dest[$t]}" >"$work/$t-ping.log" 2>&1; then
    err="no ping through the tunnel: $(tail -n 2 "$work/$t-ping.log" | tr '\n' ' ')"
  fi
  if [ -n "$err" ]; then
    skip[$t]="$err"
    log "skipping $t: $err"
  else
    active+=("$t")
  fi
done
[ "${#active[@]}" -gt 0 ] || { log "nothing to measure"; exit 1; }

ip netns exec "$NB" iperf3 -s -p 5201 >"$work/iperf3-server.log" 2>&1 &
pids+=($!)
wait_for inb bash -c 'ss -Hltn "sport = :5201" | grep -q .' || { log "iperf3 server did not start"; exit 1; }

# One TCP test with $2 parallel streams; prints received Gbit/s.
flow() {
  local out
  out="$(ina iperf3 -c "$1" -p 5201 -t "$secs" -P "$2" -J 2>&1)" || { echo "iperf3 failed: $out" | head -n 5 >&2; echo 0; return; }
  python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' <<<"$out"
}
# Small UDP packets (256 B, unlimited rate); prints thousands of packets per second received.
udpflow() {
  local out
  out="$(ina iperf3 -c "$1" -p 5201 -u -l 256 -b 0 -t "$secs" -J 2>&1)" || { echo "iperf3 -u failed: $out" | head -n 5 >&2; echo 0; return; }
  python3 -c '
import json,sys
d=json.load(sys.stdin)["end"]["sum"]
print("%.1f" % ((d["packets"]-d["lost_packets"])/d["seconds"]/1e3))' <<<"$out"
}
# Idle round trip: median of 40 pings 50 ms apart, in ms (after 10 to warm up).
rtt() {
  ina ping -c 10 -i 0.05 -q -W 1 "$1" >/dev/null 2>&1
  ina ping -c 40 -i 0.05 -W 1 "$1" 2>/dev/null | sed -n 's/.*time=\([0-9.]*\) ms/\1/p' | sort -g |
    awk '{a[NR]=$1} END {if (NR) printf "%.3f\n", a[int((NR+1)/2)]; else print 0}'
}

tests="${TESTS:-tcp1,tcp4,udp256,rtt}"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a/b; else printf "-" }'; }

declare -A results=()
# Other work on the machine skews every figure: the load average goes into the report.
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
log "measuring ${active[*]} ($tests): $runs rounds of ${secs} s each, interleaved"
for r in $(seq "$runs"); do
  for test in ${tests//,/ }; do
    for t in "${active[@]}"; do
      case "$test" in
        tcp1) g="$(flow "${dest[$t]}" 1)" ;;
        tcp4) g="$(flow "${dest[$t]}" 4)" ;;
        udp256) g="$(udpflow "${dest[$t]}")" ;;
        rtt) g="$(rtt "${dest[$t]}")" ;;
        *) log "unknown test $test"; exit 1 ;;
      esac
      results[$test,$t]+="$g "
      printf 'round %d  %-7s %-15s %10s\n' "$r" "$test" "$t" "$g"
      sleep 1
    done
  done
done

echo
echo "medians of $runs interleaved rounds, ${secs} s per flow (veth MTU 1500, tunnels MTU 1420), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
for test in ${tests//,/ }; do
  case "$test" in
    tcp1) unit="Gbit/s, one TCP flow" ;;
    tcp4) unit="Gbit/s, iperf3 -P 4" ;;
    udp256) unit="thousand packets/s received, UDP 256 B (iperf3 -u -l 256 -b 0)" ;;
    rtt) unit="ms, idle ping RTT (median of 40)" ;;
  esac
  echo
  echo "$test: $unit"
  printf '%-15s %10s %10s %10s   %s\n' tunnel median "vs wg-go" "vs plain" "rounds"
  declare -A med=()
  for t in $all_tunnels; do
    [ -n "${results[$test,$t]:-}" ] && med[$t]="$(median <<<"${results[$test,$t]}")"
  done
  for t in $all_tunnels; do
    want "$t" || continue
    if [ -z "${med[$t]:-}" ]; then
      printf '%-15s %10s   skipped: %s\n' "$t" "-" "${skip[$t]:-not measured}"
      continue
    fi
    printf '%-15s %10s %10s %10s   %s\n' "$t" "${med[$t]}" \
      "$(ratio "${med[$t]}" "${med[wg-go]:-0}")" "$(ratio "${med[$t]}" "${med[plain]:-0}")" "${results[$test,$t]}"
  done
  unset med
done
