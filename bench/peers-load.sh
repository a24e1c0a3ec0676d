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
# Environment: PEERS (1000,10000), ROUNDS (5), RATE (10), DURATION (3), FLOOD (10000),
# WIRES (wg), OUT. Usage: sudo bash bench/peers-load.sh
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
for r in $(seq 1 "$rounds"); do
  for n in "${counts[@]}"; do
    for w in "${wires[@]}"; do
      k=$((n / 10))
      before="$(load)"
      "$lab" bench peers --peers "$n" --active "$k" --storm "$k" --reload "$k" --flood "$flood" \
        --rate "$rate" --duration "$duration" --wire "$w" --json --out "$work/out-$r-$n-$w" \
        >"$work/run-$r-$n-$w.json"
      echo "round $r, $n peers, wire $w: load $before before, $(load) after"
    done
  done
done
echo "load average at the end: $(load)"
python3 - "$work" <<'PY'
import glob, json, statistics, sys
runs = {}
for f in sorted(glob.glob(sys.argv[1] + "/run-*.json")):
    r = json.load(open(f))
    for h in r["hubs"]:
        runs.setdefault((r["peers"], r["wire"], h["hub"]), []).append((r, h))
def med(v):
    v = [x for x in v if x is not None and x == x]
    return statistics.median(v) if v else float("nan")
cols = ["peers", "hub", "rounds", "up s", "show s", "RSS MB", "B/idle peer", "hs/s", "hs retried",
        "quiet loss %", "quiet p99 ms", "storm hs/s", "storm loss %", "storm p99 ms",
        "flood loss %", "flood p99 ms", "reload s", "reload loss %", "redone"]
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
           f"{max((h['reload'][2] for h in hs if h['reload']), default=0)}"]
    print("| " + " | ".join(row) + " |")
PY
