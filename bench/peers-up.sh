#!/usr/bin/env bash
# A hub with many configured peers (issue 50's probe): for each N in PEERS, a wg-quick file with
# N peers (public keys derived from the index, one /32 each outside the interface's network, so
# N routes; no traffic), brought up in a fresh network namespace. Prints the time until
# `sealink show NAME --json` answers, one `show --json`, a `reload` of the same file, `down`,
# and the tunnel's RSS once up. Needs root and a release build (built here if missing).
# Environment: PEERS (1000,10000,100000). Usage: bash bench/peers-up.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$root/target/release/sealink" ] || cargo build --release --locked -q -p sealink-cli --manifest-path "$root/Cargo.toml"
sl="$root/target/release/sealink"
work="$(mktemp -d)"
export SEALINK_RUN_DIR="$work/run"
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
IFS=, read -r -a counts <<<"${PEERS:-1000,10000,100000}"
for n in "${counts[@]}"; do
  name="hub$n"
  python3 - "$n" "$work/$name.conf" <<'PY'
import base64, hashlib, os, sys
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as out:
    out.write("[Interface]\nPrivateKey = yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=\n"
              "Address = 172.31.0.1/24\nListenPort = 51820\n")
    for i in range(n):
        key = base64.b64encode(hashlib.sha256(i.to_bytes(8, "little")).digest()).decode()
        a = (10 << 24) | (i + 2)
        out.write(f"\n[Peer]\nPublicKey = {key}\nAllowedIPs = {a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}/32\n")
os.chmod(path, 0o600)
PY
  ns="slpeers$$-$n"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  t0=$(now)
  ip netns exec "$ns" "$sl" up "$work/$name.conf" 2>"$work/$name.log" &
  pid=$!
  until ip netns exec "$ns" "$sl" show "$name" --json >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "up failed:"; cat "$work/$name.log"; ip netns del "$ns"; exit 1; }
    sleep 0.02
  done
  t1=$(now)
  rss=$(ps -o rss= -p "$(pgrep -n -f "sealink up $work/$name.conf")" | tr -d ' ')
  s0=$(now); ip netns exec "$ns" "$sl" show "$name" --json >/dev/null; s1=$(now)
  r0=$(now); ip netns exec "$ns" "$sl" reload "$work/$name.conf" 2>/dev/null; r1=$(now)
  d0=$(now); ip netns exec "$ns" "$sl" down "$name" 2>/dev/null; wait "$pid" || true; d1=$(now)
  ip netns del "$ns"
  awk -v n="$n" -v up="$(echo "$t1 - $t0" | bc)" -v sh="$(echo "$s1 - $s0" | bc)" -v rl="$(echo "$r1 - $r0" | bc)" \
    -v dn="$(echo "$d1 - $d0" | bc)" -v rss="$rss" \
    'BEGIN { printf "%7d peers: up %.2f s, show --json %.2f s, reload %.2f s, down %.2f s, RSS %d MB\n", n, up, sh, rl, dn, rss / 1024 }'
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
