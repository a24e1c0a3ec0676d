#!/usr/bin/env bash
# Two sealink builds against each other through the tunnel, both roles: a build with a newer
# wire revision (lanes, PROTOCOL §12) must still reach an older one, and be reached by it. In
# two fresh network namespaces per pairing, `workers = 2, queues = 2` on both sides; side a has
# the endpoint, so it initiates. Prints, per pairing: how long the first ping took (an older
# responder refuses the lanes offer, and the retry a second later is answered), three more
# pings, and each side's `show` lines (data path, handshake and lanes, drops). Exit status 1
# if any pairing could not ping.
# Usage: sudo bash bench/interop-builds.sh NEW_BINARY OLD_BINARY
# (RESULTS §38c: this build against bf4afc8, the build before lanes.)
set -uo pipefail
new=$1 old=$2
work="$(mktemp -d /tmp/sealink-interop.XXXXXX)"
cleanup() {
  ip netns pids ia 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids ib 2>/dev/null | xargs -r kill 2>/dev/null
  sleep 0.3
  ip netns del ia 2>/dev/null
  ip netns del ib 2>/dev/null
}
trap 'cleanup; rm -rf "$work"' EXIT
failed=0

pair() { # $1 = side a's binary (initiator), $2 = side b's
  cleanup
  rm -f "$work"/*
  ip netns add ia && ip netns add ib
  ip link add va netns ia type veth peer name vb netns ib
  ip -n ia addr add 10.66.0.1/24 dev va && ip -n ib addr add 10.66.0.2/24 dev vb
  for n in ia ib; do ip -n "$n" link set lo up; done
  ip -n ia link set va up && ip -n ib link set vb up
  "$new" keygen host "$work/a.key" >/dev/null && "$new" keygen host "$work/b.key" >/dev/null
  local pa pb
  pa=$(awk '{print $2}' "$work/a.key.pub") pb=$(awk '{print $2}' "$work/b.key.pub")
  conf() { # $1 = side, $2 = address, $3 = peer key, $4 = peer address, $5 = endpoint line
    printf '[interface]\nname = "i%s0"\nprivate_key = "%s"\naddress = "%s/24"\nlisten_port = 51900\nworkers = 2\nqueues = 2\n\n[[peer]]\nname = "peer"\npublic_key = "%s"\n%sallowed_ips = ["%s/32"]\n' \
      "$1" "$work/$1.key" "$2" "$3" "$5" "$4" >"$work/$1.toml"
  }
  conf a 10.67.0.1 "$pb" 10.67.0.2 $'endpoint = "10.66.0.2:51900"\n'
  conf b 10.67.0.2 "$pa" 10.67.0.1 ""
  ip netns exec ib "$2" up "$work/b.toml" >"$work/b.log" 2>&1 &
  ip netns exec ia "$1" up "$work/a.toml" >"$work/a.log" 2>&1 &
  sleep 1.5
  local t0 t1
  t0=$(date +%s%N)
  if ip netns exec ia ping -c 1 -W 5 10.67.0.2 >/dev/null; then
    t1=$(date +%s%N)
    echo "first ping answered after $(((t1 - t0) / 1000000)) ms"
    ip netns exec ia ping -c 3 -i 0.2 10.67.0.2 | tail -2
  else
    echo "NO PING"
    failed=1
  fi
  echo "--- side a ($1):"
  ip netns exec ia "$1" show ia0 | grep -E "data path|latest handshake|drops"
  echo "--- side b ($2):"
  ip netns exec ib "$2" show ib0 | grep -E "data path|latest handshake|drops"
}

echo "=== new initiator, old responder"; pair "$new" "$old"
echo "=== old initiator, new responder"; pair "$old" "$new"
echo "=== new against new"; pair "$new" "$new"
exit "$failed"
