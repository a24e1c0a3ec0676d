#!/usr/bin/env bash
# iperf3 between two network namespaces joined by a veth pair (MTU 1500), side by side in one
# run: one TCP flow (tcp1), four (tcp4), 256-byte UDP packets (udp256) and idle ping (rtt), over:
#   plain      the veth itself, no tunnel
#   wg-go      wireguard-go (go install golang.zx2c4.com/wireguard@latest), configured with `wg`
#   boringtun  boringtun-cli (cargo install boringtun-cli), configured with `wg`
#   sealink    `sealink up` (target/release/sealink, built here), default config
#   sealink-inline  the same with workers = 0, queues = 1 (no engine threads: seal/open inline)
#   sealink-par     the same with workers = 2, queues = 2 (engine threads, two queues; by default
#                   a TUN writer thread per queue, a flow always on the same one)
#   sealink-par-w0  sealink-par with tun_writers = 0 (the receive path's release writes)
#   sealink-w0      the default config with tun_writers = 0: on more than two cores, the A/B of
#                   the writers against `sealink` (on two cores the two are the same shape)
#   sealink-nolanes the default config with lanes = false: one peer's datagrams on one receiving
#                   socket (by address); on more than two cores, the A/B of lanes against
#                   `sealink` (on two cores there is one socket, and the two are the same)
#   sealink-par-nolanes  sealink-par with lanes = false: the A/B of lanes in the two-queue shape
#   sealink-par-always   sealink-par with handoff = "always": every batch handed to the crypto
#                   workers, as the engine did before handoff = "auto" (the default: the work
#                   stays on the I/O thread until that saturates); the A/B of the handoff policy
#                   in the two-queue shape
#   sealink-always  the default config with handoff = "always": the A/B of the handoff policy
#                   against `sealink` (on many cores, where the default shape has workers).
#                   A build that does not know the key fails to bring these two up: they are
#                   then reported as skipped
#   sealink-nopb    the same with piggybacking off
#   sealink-timer   the same with the explicit ADP piggyback policy (200 us timer)
#   sealink-wg      `sealink up slwga.conf`: a wg-quick config, WireGuard's wire (same protocol and
#                   cipher as wg-go and boringtun: only the data path differs)
# Every tunnel has MTU 1420 and its own subnet; all stay up for the whole run, idle while another
# is measured. The flows run interleaved RUNS times; the script prints every run, the medians in
# Gbit/s, and each tunnel's ratio to wireguard-go and to plain veth.
#
# Per-thread load of sealink: around every sealink flow (tcp1, tcp4, udp256; not rtt) the script
# reads `sealink show NAME --json` on both sides, before and after, and prints under the round
# each data-path thread's share of one core (its busy_s delta over the wall time between), the
# busiest first:
#   round 1  tcp1    sealink              4.480
#     busiest: b/sl-io-0 0.90 core (a/sl-io-0 0.83, a/sl-work-0 0.35, +4 more) over 3.20 s (flow 3.00 s)
# (a/ is the iperf3 client's side, b/ the server's; "over" is the wall time between the
# snapshots, which also holds iperf3's start and end, about 0.2 s with jq, so a thread busy all
# through the flow reads a little under 1 core; "flow" is iperf3's own time). The
# summary gives, per test and sealink tunnel, each thread's median share over the rounds, the
# busiest first. A build whose `show --json` has no "threads" prints "per-thread counters: not
# reported by this build".
#
# CPU per bit of every tunnel: around every flow (tcp1, tcp4, udp256; not rtt), just before and
# just after it (inside sealink's `show` snapshots, so their work is not counted), the script
# reads the wall clock (EPOCHREALTIME) and the CPU time of every process of BOTH ends of the
# tunnel: the daemon started for each end (its pid is recorded when it starts; `ip netns exec`
# and `taskset` exec, so it is the daemon itself, which the script checks and logs) and all its
# descendants alive at the snapshot (/proc/PID/task/*/children), each process's utime + stime +
# cutime + cstime (fields 14-17 of /proc/PID/stat, in clock ticks of `getconf CLK_TCK`; with all
# its threads, and the reaped children's, so a helper that exits in between still counts). The
# round line then ends with
#   round 1  tcp1    sealink              4.480   cpu 1.62 cores  2.77 Gbit/s per core  softirq 0.45 cores (irq 0.00; ends a 0.80, b 0.82)
# where cores = (CPU seconds of both ends, after minus before) / (wall seconds between the two
# snapshots), "Gbit/s per core" = the flow's Gbit/s / cores (for udp256 "kpps per core", the
# thousand packets/s received / cores), "ends" splits the cores into side A (iperf3's client,
# the sender) and side B (the receiver). The wall time also holds iperf3's start and end (0.1 to
# 0.3 s, when the tunnel is all but idle), so cores reads a little under the rate during the
# flow and the per-core figure a little over, the same for every tunnel. plain veth has no
# daemon: its cpu and per-core columns are "-". The kernel's work on behalf of a tunnel
# (sockets, veth, TUN, both inner TCP stacks) is not in its processes' stime when it runs in
# softirq: "softirq" (and "irq") is the machine's system-wide softirq (irq) time over the flow
# (the delta of the first line of /proc/stat / CLK_TCK / the wall seconds), i.e. ALL of the
# machine's softirq work during that flow, the veth's and both inner stacks' included, whoever
# caused it: an additional column, not attributed to a tunnel (and not part of its cores).
# The medians tables of tcp1, tcp4 and udp256 carry after the rounds, past a "|", the median
# over the rounds of cores, of the per-core figure (Gbit/s/core, or kpps/core for udp256), the
# per-core median's ratio to wireguard-go's ("per-core vs wg-go") and the median softirq cores.
#
# Missing tools are installed: iperf3, wireguard-tools and jq from Debian's packages,
# wireguard-go with `go install`, boringtun-cli with `cargo install`. JSON (iperf3's and
# sealink's) is read with jq, or with python3 where jq is missing. A tunnel that cannot be
# installed or brought up is reported (with why) and skipped; the others are still measured.
# Namespaces, interfaces and daemons are removed on exit, also on failure or Ctrl-C.
#
# Environment: RUNS (5), SECONDS_PER_FLOW (6), TESTS (tcp1,tcp4,udp256,rtt),
# TUNNELS (plain,wg-go,boringtun,sealink; add sealink-wg, sealink-inline, sealink-nopb, sealink-timer,
# sealink-par, sealink-par-always, sealink-always, ... any label above),
# SEALINK (a prebuilt sealink binary instead of building target/release/sealink),
# BORINGTUN_THREADS (boringtun's default when unset), KEEP_LOGS=1 (keep the work directory,
# made under TMPDIR, default /tmp), THREAD_LOG=FILE (append every thread's deltas of every
# sealink flow there, one line each: round= test= tunnel= thread= wall_s= flow_s= share= and
# each counter's delta as name=value), PAUSE (seconds of rest after each flow, 1),
# PIN_ENDS=CPUS_A/CPUS_B (every tunnel's daemon on side A runs under `taskset -c CPUS_A`, on
# side B under CPUS_B, the same for every tunnel, e.g. PIN_ENDS=0/1: each end of the tunnel
# gets a core of its own, as on two hosts; iperf3 and the kernel stay where the scheduler puts
# them; default: no pinning).
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
work="$(mktemp -d "${TMPDIR:-/tmp}/sealink-tunnels.XXXXXX")"
pids=()
# label -> "pidA pidB": the daemons of the tunnel's two ends (for their CPU time).
declare -A tpids=()

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
tsa=(); tsb=()
if [ -n "${PIN_ENDS:-}" ]; then
  [[ "$PIN_ENDS" == */* ]] || { log "PIN_ENDS must be CPUS_A/CPUS_B, e.g. 0/1"; exit 2; }
  tsa=(taskset -c "${PIN_ENDS%%/*}"); tsb=(taskset -c "${PIN_ENDS#*/}")
  log "every tunnel's side A pinned to CPUs ${PIN_ENDS%%/*}, side B to ${PIN_ENDS#*/}"
fi
all_tunnels="plain wg-go boringtun sealink sealink-wg sealink-inline sealink-par sealink-par-w0 sealink-w0 sealink-nolanes sealink-par-nolanes sealink-par-always sealink-always sealink-nopb sealink-timer"
declare -A ifn=([sealink]=sl [sealink-wg]=slwg [sealink-inline]=sli [sealink-par]=slp [sealink-par-w0]=slq [sealink-w0]=slr [sealink-nolanes]=sll [sealink-par-nolanes]=slm
  [sealink-par-always]=slph [sealink-always]=slh [sealink-nopb]=sln [sealink-timer]=slt)
ina() { ip netns exec "$NA" "${tsa[@]}" "$@"; }
inb() { ip netns exec "$NB" "${tsb[@]}" "$@"; }

# --- tools ------------------------------------------------------------------------------------
if ! command -v iperf3 >/dev/null || ! command -v wg >/dev/null || ! command -v ping >/dev/null ||
  { ! command -v jq >/dev/null && ! command -v python3 >/dev/null; }; then
  log "installing iperf3, wireguard-tools and jq"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq iperf3 wireguard-tools iputils-ping jq >/dev/null
fi
if command -v jq >/dev/null; then
  jsonp=jq
elif command -v python3 >/dev/null; then
  jsonp=python3
else
  log "jq or python3 is needed to read JSON"; exit 1
fi

declare -A skip=()
if want wg-go && ! command -v wireguard-go >/dev/null && [ ! -x "$HOME/go/bin/wireguard" ]; then
  log "installing wireguard-go"
  if ! go install golang.zx2c4.com/wireguard@latest >"$work/wg-go-install.log" 2>&1; then
    skip[wg-go]="go install golang.zx2c4.com/wireguard@latest failed: $(tail -n 3 "$work/wg-go-install.log" | tr '\n' ' ')"
  fi
fi
# The newest wireguard-go first: `go install`'s (upstream, with TUN offloads since 0.0.20230223)
# before a distribution's package (Debian's 0.0.20220316 has none and runs at a fraction of the
# speed); WG_GO names another.
if [ -n "${WG_GO:-}" ]; then wggo="$WG_GO"
elif [ -x "$HOME/go/bin/wireguard" ]; then wggo="$HOME/go/bin/wireguard"
else wggo="$(command -v wireguard-go || echo "$HOME/go/bin/wireguard")"; fi
log "wireguard-go: $wggo ($("$wggo" --version 2>/dev/null | head -n 1))"
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
# `sealink up` as root switches to its default user, a dedicated system account (issue 47).
if [[ ",$tunnels," == *",sealink"* ]] && ! getent passwd sealink-tunnel >/dev/null; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin sealink-tunnel
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
  ip netns exec "$NA" "${tsa[@]}" "$@" "$ia" >"$work/$label-a.log" 2>&1 &
  pids+=($!); tpids[$label]="$!"
  ip netns exec "$NB" "${tsb[@]}" "$@" "$ib" >"$work/$label-b.log" 2>&1 &
  pids+=($!); tpids[$label]+=" $!"
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
  ip netns exec "$NA" "${tsa[@]}" "$sealink" up "$work/$label-a.toml" >"$work/$label-a.log" 2>&1 &
  pids+=($!); tpids[$label]="$!"
  ip netns exec "$NB" "${tsb[@]}" "$sealink" up "$work/$label-b.toml" >"$work/$label-b.log" 2>&1 &
  pids+=($!); tpids[$label]+=" $!"
  wait_for grep -q "up: ${ifn[$label]}a" "$work/$label-a.log" || { echo "sealink up (a) failed: $(tail -n 3 "$work/$label-a.log" | tr '\n' ' ')"; return 1; }
  wait_for grep -q "up: ${ifn[$label]}b" "$work/$label-b.log" || { echo "sealink up (b) failed: $(tail -n 3 "$work/$label-b.log" | tr '\n' ' ')"; return 1; }
}

# Brings up sealink on WireGuard's wire from wg-quick configs (`sealink up NAME.conf`; the
# interface is named after the file): $1 = label, $2 = subnet prefix (10.78.N), $3 = UDP port.
sealink_wg_tunnel() {
  local label="$1" net="$2" port="$3"
  local ka kb pa pb
  ka="$(wg genkey)"; kb="$(wg genkey)"
  pa="$(wg pubkey <<<"$ka")"; pb="$(wg pubkey <<<"$kb")"
  # $1 = side, $2 = key, $3 = address, $4 = peer key, $5 = peer address, $6 = peer veth address
  mkwg() {
    printf '[Interface]\nPrivateKey = %s\nAddress = %s/24\nListenPort = %s\nMTU = 1420\n\n[Peer]\nPublicKey = %s\nAllowedIPs = %s/32\nEndpoint = %s:%s\n' \
      "$2" "$3" "$port" "$4" "$5" "$6" "$port" >"$work/${ifn[$label]}$1.conf"
    chmod 600 "$work/${ifn[$label]}$1.conf"
  }
  mkwg a "$ka" "$net.1" "$pb" "$net.2" 10.77.0.2
  mkwg b "$kb" "$net.2" "$pa" "$net.1" 10.77.0.1
  ip netns exec "$NA" "${tsa[@]}" "$sealink" up "$work/${ifn[$label]}a.conf" >"$work/$label-a.log" 2>&1 &
  pids+=($!); tpids[$label]="$!"
  ip netns exec "$NB" "${tsb[@]}" "$sealink" up "$work/${ifn[$label]}b.conf" >"$work/$label-b.log" 2>&1 &
  pids+=($!); tpids[$label]+=" $!"
  wait_for grep -q "up: ${ifn[$label]}a" "$work/$label-a.log" || { echo "sealink up (a) failed: $(tail -n 3 "$work/$label-a.log" | tr '\n' ' ')"; return 1; }
  wait_for grep -q "up: ${ifn[$label]}b" "$work/$label-b.log" || { echo "sealink up (b) failed: $(tail -n 3 "$work/$label-b.log" | tr '\n' ' ')"; return 1; }
}

# --- CPU time of each tunnel's processes ---------------------------------------------------------
clk_tck="$(getconf CLK_TCK 2>/dev/null || echo 100)"
# /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) lists a thread's children; without it, the
# parents are read from every /proc/PID/stat at each snapshot.
children_file=0
[ -r "/proc/$$/task/$$/children" ] && children_file=1
declare -A kids_of=()
# Fills kids_of (PPID -> "PID PID ...") from every process's /proc/PID/stat.
scan_parents() {
  local s p line
  local -a f
  kids_of=()
  for s in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$s" || continue
    read -r -a f <<<"${line##*) }"
    p="${s#/proc/}"
    kids_of[${f[1]}]+="${p%/stat} "
  done
}
# Adds the CPU ticks of process $1 and its descendants to cpu_ticks: utime, stime, cutime and
# cstime, fields 14-17 of /proc/PID/stat, counted after the last ")" (the command name, field
# 2, may hold spaces and parentheses), where field 3 comes first. Builtins only (no fork).
tree_ticks() {
  local p="$1" line c k
  local -a f kids
  read -r line 2>/dev/null <"/proc/$p/stat" || return 0
  read -r -a f <<<"${line##*) }"
  cpu_ticks=$((cpu_ticks + f[11] + f[12] + f[13] + f[14]))
  if [ "$children_file" = 1 ]; then
    for c in /proc/"$p"/task/*/children; do
      kids=()
      read -r -a kids 2>/dev/null <"$c" || true
      for k in "${kids[@]}"; do tree_ticks "$k"; done
    done
  else
    read -r -a kids <<<"${kids_of[$p]:-}" || true
    for k in "${kids[@]}"; do tree_ticks "$k"; done
  fi
}
# A snapshot for tunnel $1 into the globals snap_t (wall clock, s), snap_ends ("TICKS_A TICKS_B",
# each end's daemon and its descendants, "gone" for a daemon that is no more; empty for a tunnel
# without daemons) and snap_irq ("IRQ SOFTIRQ", the machine's, in ticks, from /proc/stat).
cpu_snap() {
  local p
  local -a st
  [ "$children_file" = 1 ] || [ -z "${tpids[$1]:-}" ] || scan_parents
  snap_ends=""
  for p in ${tpids[$1]:-}; do
    cpu_ticks=0
    if [ -r "/proc/$p/stat" ]; then tree_ticks "$p"; else cpu_ticks=gone; fi
    snap_ends+="$cpu_ticks "
  done
  # cpu  user nice system idle iowait irq softirq steal ...
  read -r -a st </proc/stat
  snap_irq="${st[6]} ${st[7]}"
  if [ -n "${EPOCHREALTIME:-}" ]; then snap_t="${EPOCHREALTIME/,/.}"; else snap_t="$(date +%s.%N)"; fi
}
# What the CPU columns of tunnel $1 count: each end's pid, its command name and its descendants.
cpu_pids_text() {
  local p c side=a out="" f
  local -a kids all
  for p in ${tpids[$1]}; do
    c="$(cat "/proc/$p/comm" 2>/dev/null || echo gone)"
    out+="${out:+, }side $side pid $p ($c"
    case "$c" in
      ip | taskset | env) out+=", a wrapper, not the daemon: its descendants are counted" ;;
    esac
    if [ "$children_file" = 1 ]; then
      all=()
      for f in /proc/"$p"/task/*/children; do
        kids=()
        read -r -a kids 2>/dev/null <"$f" || true
        all+=("${kids[@]}")
      done
      out+=", ${#all[@]} child process(es) now"
    fi
    out+=")"
    side=b
  done
  echo "$out, with their descendants at each snapshot"
}
# The CPU columns of one flow from the snapshots before ($1 = wall, $2 = ends' ticks, $3 = irq
# ticks) and after ($4, $5, $6), and the flow's figure $7: prints "CORES PER_CORE SOFTIRQ IRQ
# CORES_A CORES_B" ("-" for what is not known: no daemons, a daemon gone, no CPU used).
cpu_cols() {
  awk -v t0="$1" -v e0="$2" -v q0="$3" -v t1="$4" -v e1="$5" -v q1="$6" -v g="$7" -v hz="$clk_tck" 'BEGIN {
    w = t1 - t0; if (w <= 0) w = 1e-9
    split(q0, a); split(q1, b)
    sirq = sprintf("%.2f", (b[2] - a[2]) / hz / w); irq = sprintf("%.2f", (b[1] - a[1]) / hz / w)
    n0 = split(e0, x); n1 = split(e1, y)
    if (n0 == 0 || n0 != n1 || (e0 " " e1) ~ /gone/) {printf "- - %s %s - -\n", sirq, irq; exit}
    tot = 0
    for (i = 1; i <= n1; i++) {c[i] = (y[i] - x[i]) / hz / w; tot += c[i]}
    pc = (tot > 0) ? sprintf("%.2f", g / tot) : "-"
    printf "%.2f %s %s %s %.2f %s\n", tot, pc, sirq, irq, c[1], (n1 > 1 ? sprintf("%.2f", c[2]) : "-")
  }'
}

# --- tunnels ----------------------------------------------------------------------------------
declare -A dest=([plain]=10.77.0.2 [wg-go]=10.78.1.2 [boringtun]=10.78.2.2 [sealink]=10.78.3.2 [sealink-wg]=10.78.8.2
  [sealink-inline]=10.78.4.2 [sealink-nopb]=10.78.5.2 [sealink-timer]=10.78.6.2 [sealink-par]=10.78.7.2 [sealink-par-w0]=10.78.9.2 [sealink-w0]=10.78.10.2 [sealink-nolanes]=10.78.11.2 [sealink-par-nolanes]=10.78.12.2
  [sealink-par-always]=10.78.13.2 [sealink-always]=10.78.14.2)
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
    sealink-wg) sealink_wg_tunnel sealink-wg 10.78.8 51827 >"$work/$t-up.err" 2>&1 || ok=$? ;;
    # The engine bypassed: one TUN queue, one socket, seal and open inline on the readers.
    sealink-inline) sealink_tunnel sealink-inline 10.78.4 51823 $'workers = 0\nqueues = 1' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-par) sealink_tunnel sealink-par 10.78.7 51826 $'workers = 2\nqueues = 2' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-par-w0) sealink_tunnel sealink-par-w0 10.78.9 51828 $'workers = 2\nqueues = 2\ntun_writers = 0' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-w0) sealink_tunnel sealink-w0 10.78.10 51829 'tun_writers = 0' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-nolanes) sealink_tunnel sealink-nolanes 10.78.11 51830 'lanes = false' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-par-nolanes) sealink_tunnel sealink-par-nolanes 10.78.12 51831 $'workers = 2\nqueues = 2\nlanes = false' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    # The handoff policy of the old engine: every batch to the crypto workers.
    sealink-par-always) sealink_tunnel sealink-par-always 10.78.13 51832 $'workers = 2\nqueues = 2\nhandoff = "always"' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
    sealink-always) sealink_tunnel sealink-always 10.78.14 51833 'handoff = "always"' "" >"$work/$t-up.err" 2>&1 || ok=$? ;;
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
    [ -z "${tpids[$t]:-}" ] || log "$t: CPU of $(cpu_pids_text "$t")"
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
  printf '%s\n' "$out" >"$work/iperf3-last.json"
  if [ "$jsonp" = jq ]; then
    jq -r '.end.sum_received.bits_per_second' <<<"$out"
  else
    python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"])' <<<"$out"
  fi | awk '{printf "%.3f\n", $1 / 1e9}'
}
# Small UDP packets (256 B, unlimited rate); prints thousands of packets per second received.
udpflow() {
  local out
  out="$(ina iperf3 -c "$1" -p 5201 -u -l 256 -b 0 -t "$secs" -J 2>&1)" || { echo "iperf3 -u failed: $out" | head -n 5 >&2; echo 0; return; }
  printf '%s\n' "$out" >"$work/iperf3-last.json"
  if [ "$jsonp" = jq ]; then
    jq -r '.end.sum | "\(.packets) \(.lost_packets) \(.seconds)"' <<<"$out"
  else
    python3 -c 'import json,sys; d=json.load(sys.stdin)["end"]["sum"]; print(d["packets"], d["lost_packets"], d["seconds"])' <<<"$out"
  fi | awk '{printf "%.1f\n", ($3 > 0 ? ($1 - $2) / $3 / 1e3 : 0)}'
}
# Idle round trip: median of 40 pings 50 ms apart, in ms (after 10 to warm up).
rtt() {
  ina ping -c 10 -i 0.05 -q -W 1 "$1" >/dev/null 2>&1
  ina ping -c 40 -i 0.05 -W 1 "$1" 2>/dev/null | sed -n 's/.*time=\([0-9.]*\) ms/\1/p' | sort -g |
    awk '{a[NR]=$1} END {if (NR) printf "%.3f\n", a[int((NR+1)/2)]; else print 0}'
}

# --- per-thread load of sealink ----------------------------------------------------------------
# The numeric fields of every data-path thread in a `sealink show --json` answer (stdin), one
# "THREAD FIELD VALUE" line each; nothing where the build reports no "threads".
thread_fields() {
  if [ "$jsonp" = jq ]; then
    jq -r '.[] | (.threads // [])[] | . as $t | to_entries[] | select(.value | type == "number")
      | "\($t.name) \(.key) \(.value)"'
  else
    python3 -c '
import json, sys
for i in json.load(sys.stdin):
    for t in i.get("threads") or []:
        for k, v in t.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                print(t.get("name", "?"), k, repr(v))'
  fi
}
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
# The seconds of the last iperf3 flow as iperf3 measured them (without its start and end).
flow_seconds() {
  [ -s "$work/iperf3-last.json" ] || { echo 0; return 0; }
  if [ "$jsonp" = jq ]; then
    jq -r '.end.sum_received.seconds // .end.sum.seconds // 0' "$work/iperf3-last.json" 2>/dev/null
  else
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]; print((e.get("sum_received") or e.get("sum") or {}).get("seconds", 0))' \
      "$work/iperf3-last.json" 2>/dev/null
  fi | awk '{printf "%.3f\n", $1 + 0} END {if (!NR) print 0}'
}
# Both sides of sealink tunnel $1, into $2-{a,b}.t (wall clock), .txt (thread fields), .err.
thread_snap() {
  local label="$1" f="$2" side ns
  for side in a b; do
    if [ "$side" = a ]; then ns="$NA"; else ns="$NB"; fi
    now >"$f-$side.t"
    if ip netns exec "$ns" "$sealink" show "${ifn[$label]}$side" --json >"$f-$side.json" 2>"$f-$side.err"; then
      thread_fields <"$f-$side.json" >"$f-$side.txt" 2>>"$f-$side.err" || true
    else
      : >"$f-$side.txt"
      echo "sealink show ${ifn[$label]}$side --json failed" >>"$f-$side.err"
    fi
  done
}
# Prints, under a round, each thread's share of one core between snapshots $1 and $2 (busiest
# first), the wall time between them and the flow's own (iperf3's, without its start and end),
# and keeps them for the summary ($work/threads-TEST-TUNNEL.txt) and THREAD_LOG.
# $3 = round, $4 = test, $5 = tunnel.
thread_report() {
  local p0="$1" p1="$2" r="$3" test="$4" label="$5" side t0 t1 deltas="$2-deltas" fs
  fs="$(flow_seconds)"
  : >"$deltas"
  for side in a b; do
    [ -s "$p0-$side.txt" ] && [ -s "$p1-$side.txt" ] || continue
    t0="$(cat "$p0-$side.t")"; t1="$(cat "$p1-$side.t")"
    # "side/THREAD FIELD DELTA WALL" (a thread that appeared in between counts from 0)
    awk -v side="$side" -v dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", b - a}')" '
      NR == FNR {b[$1 " " $2] = $3; next}
      {k = $1 " " $2; d = $3 - (k in b ? b[k] : 0)
       printf "%s/%s %s %s %s\n", side, $1, $2, ($2 == "busy_s" ? sprintf("%.6f", d) : sprintf("%.0f", d)), dt}' \
      "$p0-$side.txt" "$p1-$side.txt" >>"$deltas"
  done
  if [ ! -s "$deltas" ]; then
    if grep -qs 'failed$' "$p0-a.err" "$p0-b.err" "$p1-a.err" "$p1-b.err"; then
      echo "  per-thread counters: sealink show failed: $(cat "$p0-a.err" "$p0-b.err" "$p1-a.err" "$p1-b.err" | head -n 2 | tr '\n' ' ')"
    else
      echo "  per-thread counters: not reported by this build"
    fi
    return 0
  fi
  awk '$2 == "busy_s" {printf "%s %.3f\n", $1, ($4 > 0 ? $3 / $4 : 0)}' "$deltas" | sort -k2,2gr -k1,1 >"$p1-shares"
  awk -v r="$r" '{print r, $1, $2}' "$p1-shares" >>"$work/threads-$test-$label.txt"
  awk -v wall="$(awk '{if ($4 > w) w = $4} END {printf "%.2f", w}' "$deltas")" -v fs="$fs" '
       NR == 1 {line = sprintf("  busiest: %s %.2f core", $1, $2); next}
       $2 >= 0.01 && n < 11 {o = o (n++ ? ", " : "") sprintf("%s %.2f", $1, $2); next}
       {rest++}
       END {
         if (NR == 0) {print "  per-thread counters: no busy_s reported"; exit}
         if (rest) o = o (n ? ", " : "") "+" rest " more"
         printf "%s%s over %s s (flow %.2f s)\n", line, (o != "" ? " (" o ")" : ""), wall, fs
       }' "$p1-shares"
  if [ -n "${THREAD_LOG:-}" ]; then
    awk -v r="$r" -v test="$test" -v t="$label" -v fs="$fs" '
      !($1 in wall) {order[++n] = $1; wall[$1] = $4; share[$1] = 0}
      {f[$1] = f[$1] " " $2 "=" $3; if ($2 == "busy_s" && $4 > 0) share[$1] = $3 / $4}
      END {for (i = 1; i <= n; i++) {th = order[i]
        printf "round=%s test=%s tunnel=%s thread=%s wall_s=%.3f flow_s=%s share=%.3f%s\n", r, test, t, th, wall[th], fs, share[th], f[th]}}' \
      "$deltas" >>"$THREAD_LOG"
  fi
}
# One summary line for test $1 and sealink tunnel $2: the threads by median share of one core
# over the rounds (a thread missing from a round counts 0 there), then each round's busiest.
thread_summary() {
  local f="$work/threads-$1-$2.txt"
  if [ ! -s "$f" ]; then
    printf '%-15s %s\n' "$2" "per-thread counters: not reported by this build"
    return 0
  fi
  awk -v name="$2" '
    function median(arr, m,   i, j, x) {
      for (i = 2; i <= m; i++) {x = arr[i]; for (j = i - 1; j >= 1 && arr[j] > x; j--) arr[j + 1] = arr[j]; arr[j + 1] = x}
      return (m % 2) ? arr[(m + 1) / 2] : (arr[m / 2] + arr[m / 2 + 1]) / 2
    }
    !($1 in seen) {seen[$1] = 1; rounds[++nr] = $1; best[$1] = sprintf("%s %.2f", $2, $3)}
    !($2 in th) {th[$2] = 1; names[++nt] = $2}
    {s[$2, $1] = $3}
    END {
      for (i = 1; i <= nt; i++) {
        for (j = 1; j <= nr; j++) v[j] = ((names[i], rounds[j]) in s) ? s[names[i], rounds[j]] : 0
        med[i] = median(v, nr)
      }
      # the four with the highest median share
      out = ""
      for (k = 1; k <= 4 && k <= nt; k++) {
        top = 0
        for (i = 1; i <= nt; i++) if (!(i in used) && (top == 0 || med[i] > med[top])) top = i
        used[top] = 1
        out = out (k > 1 ? ", " : "") sprintf("%s %.2f", names[top], med[top])
      }
      per = ""
      for (j = 1; j <= nr; j++) per = per (j > 1 ? ", " : "") best[rounds[j]]
      printf "%-15s %s   per round: %s\n", name, out, per
    }' "$f"
}

tests="${TESTS:-tcp1,tcp4,udp256,rtt}"
pause="${PAUSE:-1}"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a/b; else printf "-" }'; }

declare -A results=() cores_r=() pc_r=() sirq_r=()
# The median of the numbers in $1 with two decimals, "-" if there are none.
median2() {
  if [ -n "${1// /}" ]; then median <<<"$1" | awk '{printf "%.2f\n", $1}'; else echo -; fi
}
# Other work on the machine skews every figure: the load average goes into the report.
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
log "measuring ${active[*]} ($tests): $runs rounds of ${secs} s each, interleaved"
for r in $(seq "$runs"); do
  for test in ${tests//,/ }; do
    for t in "${active[@]}"; do
      # sealink's threads are read just before and after each of its flows.
      snap=""
      if [[ "$t" == sealink* && "$test" != rtt ]]; then
        snap="$work/threads-$r-$test-$t"
        rm -f "$work/iperf3-last.json"
        thread_snap "$t" "$snap-0"
      fi
      # Every tunnel's processes (both ends) and the machine's softirq time, just around the flow.
      if [ "$test" != rtt ]; then
        cpu_snap "$t"
        c_t0="$snap_t" c_e0="$snap_ends" c_q0="$snap_irq"
      fi
      case "$test" in
        tcp1) g="$(flow "${dest[$t]}" 1)" ;;
        tcp4) g="$(flow "${dest[$t]}" 4)" ;;
        udp256) g="$(udpflow "${dest[$t]}")" ;;
        rtt) g="$(rtt "${dest[$t]}")" ;;
        *) log "unknown test $test"; exit 1 ;;
      esac
      cpu_txt=""
      if [ "$test" != rtt ]; then
        cpu_snap "$t"
        read -r cc pc sq iq ca cb <<<"$(cpu_cols "$c_t0" "$c_e0" "$c_q0" "$snap_t" "$snap_ends" "$snap_irq" "$g")"
        if [ "$test" = udp256 ]; then pcu="kpps per core"; else pcu="Gbit/s per core"; fi
        printf -v cpu_txt '   cpu %s cores  %s %s  softirq %s cores (irq %s' "$cc" "$pc" "$pcu" "$sq" "$iq"
        [ "$ca" = - ] || cpu_txt+="; ends a $ca, b $cb"
        cpu_txt+=")"
        [ "$cc" = - ] || cores_r[$test,$t]+="$cc "
        [ "$pc" = - ] || pc_r[$test,$t]+="$pc "
        sirq_r[$test,$t]+="$sq "
      fi
      [ -z "$snap" ] || thread_snap "$t" "$snap-1"
      results[$test,$t]+="$g "
      printf 'round %d  %-7s %-15s %10s%s\n' "$r" "$test" "$t" "$g" "$cpu_txt"
      [ -z "$snap" ] || thread_report "$snap-0" "$snap-1" "$r" "$test" "$t"
      sleep "$pause"
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
  declare -A med=() mcores=() mpc=() msirq=()
  # The CPU columns (not for rtt) follow the rounds, padded to one width, past a "|".
  w=6
  for t in $all_tunnels; do
    [ -n "${results[$test,$t]:-}" ] || continue
    med[$t]="$(median <<<"${results[$test,$t]}")"
    [ "${#results[$test,$t]}" -le "$w" ] || w="${#results[$test,$t]}"
    if [ "$test" != rtt ]; then
      mcores[$t]="$(median2 "${cores_r[$test,$t]:-}")"
      mpc[$t]="$(median2 "${pc_r[$test,$t]:-}")"
      msirq[$t]="$(median2 "${sirq_r[$test,$t]:-}")"
    fi
  done
  if [ "$test" = rtt ]; then
    printf '%-15s %10s %10s %10s   %s\n' tunnel median "vs wg-go" "vs plain" "rounds"
  else
    if [ "$test" = udp256 ]; then pcu="kpps/core"; else pcu="Gbit/s/core"; fi
    printf '%-15s %10s %10s %10s   %-*s | %6s  %11s  %17s  %7s\n' tunnel median "vs wg-go" "vs plain" "$w" "rounds" \
      cores "$pcu" "per-core vs wg-go" softirq
  fi
  for t in $all_tunnels; do
    want "$t" || continue
    if [ -z "${med[$t]:-}" ]; then
      printf '%-15s %10s   skipped: %s\n' "$t" "-" "${skip[$t]:-not measured}"
      continue
    fi
    if [ "$test" = rtt ]; then
      printf '%-15s %10s %10s %10s   %s\n' "$t" "${med[$t]}" \
        "$(ratio "${med[$t]}" "${med[wg-go]:-0}")" "$(ratio "${med[$t]}" "${med[plain]:-0}")" "${results[$test,$t]}"
    else
      pcr="-"
      [ "${mpc[$t]}" = - ] || [ "${mpc[wg-go]:--}" = - ] || pcr="$(ratio "${mpc[$t]}" "${mpc[wg-go]}")"
      printf '%-15s %10s %10s %10s   %-*s | %6s  %11s  %17s  %7s\n' "$t" "${med[$t]}" \
        "$(ratio "${med[$t]}" "${med[wg-go]:-0}")" "$(ratio "${med[$t]}" "${med[plain]:-0}")" "$w" "${results[$test,$t]}" \
        "${mcores[$t]}" "${mpc[$t]}" "$pcr" "${msirq[$t]}"
    fi
  done
  if [ "$test" != rtt ]; then
    header=0
    for t in $all_tunnels; do
      [[ "$t" == sealink* && -n "${med[$t]:-}" ]] || continue
      if [ "$header" = 0 ]; then
        echo "$test: busiest threads, share of one core (median over rounds), then each round's busiest"
        header=1
      fi
      thread_summary "$test" "$t"
    done
  fi
  unset med mcores mpc msirq
done
