#!/usr/bin/env bash
# Issue 50's hub under load, side by side with wireguard-go: `sealink-lab bench peers` at each N
# in PEERS configured peers, N/10 of them active (echo at RATE a second each), a storm of N/10
# more handshaking at once, a flood of FLOOD foreign initiations a second from spoofed sources,
# and a reload that removes and adds N/10 peers, each window DURATION seconds; on each wire in
# WIRES (wg: sealink's hub on WireGuard's wire, then wireguard-go configured by `wg setconf`
# with the same peers; sealink: sealink's hub on its own wire). ROUNDS interleaved rounds (every
# N and wire once per round), then the median of each figure over the rounds, with the load
# average before and after every run. Needs root, wireguard-go and wg; builds the release
# binaries if missing. Each run's JSON stays in OUT (default: a temporary directory, removed).
# OLD=DIR: each run is also made with DIR/sealink as the hub (another build, e.g. of main before
# a change), right after the NEW one (this tree's), without wireguard-go (measured in NEW's run).
# REKEY=SECS: each wire and build also runs a rekey storm alone (every active peer's session
# reaching REKEY_AFTER_TIME at SECS after the bring-up; no storm, flood or reload, whose windows
# would see a rekey every SECS; a hub built with `sealink-tunnel/test-timers` rekeys by time
# the sessions it initiated, and those it answered only near REJECT_AFTER_TIME). Environment: PEERS (1000,10000), ROUNDS (5), RATE (10), DURATION (3), FLOOD (10000),
# WIRES (wg), OLD, REKEY, OUT, FIRST (the first round's number, 1: to add rounds to an OUT made
# before, whose runs the medians then include). Usage: sudo bash bench/peers-load.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
lab="$target/release/sealink-lab"
if [ ! -x "$lab" ] || [ ! -x "$target/release/sealink" ]; then
  cargo build --release --locked -q -p sealink-lab -p sealink-cli --manifest-path "$root/Cargo.toml"
fi
IFS=, read -r -a counts <<<"${PEERS:-1000,10000}"
IFS=, read -r -a wires <<<"${WIRES:-wg}"
rounds="${ROUNDS:-5}" rate="${RATE:-10}" duration="${DURATION:-3}" flood="${FLOOD:-10000}"
if [ -n "${OUT:-}" ]; then work="$OUT"; mkdir -p "$work"; else
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT; fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
echo "load average at the start: $(load)"
builds=(new)
[ -n "${OLD:-}" ] && builds+=(old)
run() { # round n wire build kind(main|rekey)
  local r=$1 n=$2 w=$3 b=$4 kind=$5 k=$(($2 / 10)) before
  local args=(--peers "$n" --active "$k" --rate "$rate" --duration "$duration" --wire "$w" --json)
  if [ "$kind" = rekey ]; then
    args+=(--rekey-storm "$REKEY")
  else
    args+=(--storm "$k" --reload "$k" --flood "$flood")
  fi
  [ "$b" = old ] && args+=(--sealink "$OLD/sealink" --no-wireguard-go)
  before="$(load)"
  "$lab" bench peers "${args[@]}" --out "$work/out-$r-$n-$w-$b-$kind" >"$work/run-$r-$n-$w-$b-$kind.json"
  echo "round $r, $n peers, wire $w, $b, $kind: load $before before, $(load) after"
}
first="${FIRST:-1}"
for r in $(seq "$first" $((first + rounds - 1))); do
  for n in "${counts[@]}"; do
    for w in "${wires[@]}"; do
      for b in "${builds[@]}"; do
        run "$r" "$n" "$w" "$b" main
        if [ -n "${REKEY:-}" ]; then run "$r" "$n" "$w" "$b" rekey; fi
      done
    done
  done
done
echo "load average at the end: $(load)"
python3 - "$work" <<'PY'
import glob, json, statistics, sys
runs = {}
rekeys = {}
for f in sorted(glob.glob(sys.argv[1] + "/run-*.json")):
    r = json.load(open(f))
    # run-ROUND-N-WIRE-BUILD-KIND.json (older runs: run-ROUND-N-WIRE.json, one build)
    parts = f.rsplit("/", 1)[1][:-5].split("-")
    build, kind = (parts[4], parts[5]) if len(parts) == 6 else ("new", "main")
    for h in r["hubs"]:
        hub = h["hub"] if h["hub"] == "wireguard-go" else f'{h["hub"]} {build}'
        into = rekeys if kind == "rekey" else runs
        into.setdefault((r["peers"], r["wire"], hub), []).append((r, h))
def med(v):
    v = [x for x in v if x is not None and x == x]
    return statistics.median(v) if v else float("nan")
cols = ["peers", "hub", "rounds", "up s", "show s", "RSS MB", "B/idle peer", "hs/s", "hs retried",
        "quiet loss %", "quiet p99 ms", "storm hs/s", "storm loss %", "storm p99 ms",
        "flood loss %", "flood p99 ms", "reload s", "reload loss %", "reload p99 ms", "redone"]
print("\nmedians over the rounds:\n")
print("| " + " | ".join(cols) + " |")
print("|" + "---:|" * len(cols))
for (n, wire, hub), rs in sorted(runs.items()):
    hs = [h for _, h in rs]
    g = lambda f: med([f(h) for h in hs])
    row = [f"{n:,}", hub, str(len(hs)),
           f"{g(lambda h: h['up_seconds']):.3f}", f"{g(lambda h: h['show_seconds']):.3f}",
           f"{g(lambda h: h['rss_configured_bytes']) / 1e6:.1f}", f"{g(lambda h: h['bytes_per_idle_peer']):.0f}",
           f"{g(lambda h: h['bringup']['per_second']):.0f}", f"{g(lambda h: h['bringup']['retried']):.0f}",
           f"{g(lambda h: h['quiet']['loss_percent']):.3f}", f"{g(lambda h: h['quiet']['rtt_p99_ms']):.2f}",
           f"{g(lambda h: h['storm'][0]['per_second'] if h['storm'] else None):.0f}",
           f"{g(lambda h: h['storm'][1]['loss_percent'] if h['storm'] else None):.3f}",
           f"{g(lambda h: h['storm'][1]['rtt_p99_ms'] if h['storm'] else None):.2f}",
           f"{g(lambda h: h['flood'][1]['loss_percent'] if h['flood'] else None):.3f}",
           f"{g(lambda h: h['flood'][1]['rtt_p99_ms'] if h['flood'] else None):.2f}",
           f"{g(lambda h: h['reload'][0] if h['reload'] else None):.2f}",
           f"{g(lambda h: h['reload'][1]['loss_percent'] if h['reload'] else None):.3f}",
           f"{g(lambda h: h['reload'][1]['rtt_p99_ms'] if h['reload'] else None):.2f}",
           f"{max((h['reload'][2] for h in hs if h['reload']), default=0)}"]
    print("| " + " | ".join(row) + " |")
if rekeys:
    cols = ["peers", "hub", "rounds", "quiet p99 ms", "rekeyed", "rekey over s", "rekey loss %", "rekey p99 ms"]
    print("\nrekey storm alone, medians over the rounds:\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for (n, wire, hub), rs in sorted(rekeys.items()):
        hs = [h for _, h in rs if h.get("rekey")]
        g = lambda f: med([f(h) for h in hs])
        row = [f"{n:,}", hub, str(len(hs)), f"{g(lambda h: h['quiet']['rtt_p99_ms']):.2f}",
               f"{g(lambda h: h['rekey'][1]):.0f}", f"{g(lambda h: h['rekey'][2]):.2f}",
               f"{g(lambda h: h['rekey'][0]['loss_percent']):.3f}", f"{g(lambda h: h['rekey'][0]['rtt_p99_ms']):.2f}"]
        print("| " + " | ".join(row) + " |")
PY
