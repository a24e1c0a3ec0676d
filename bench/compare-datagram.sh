#!/usr/bin/env bash
# Datagram mode, builds side by side: `sealink-lab bench datagram` for each variant in turn, RUNS
# interleaved rounds, then the median messages/s per (variant, size, piggyback) and each
# variant's ratio to the first. Prints the load average before and after.
#
#   VARIANTS="old=/path/to/old/sealink-lab new=target/release/sealink-lab new-w2=target/release/sealink-lab:--workers=2" \
#     RUNS=5 SIZES=64,256 SECONDS_PER_RUN=1.5 bench/compare-datagram.sh
#
# A variant is NAME=BINARY[:EXTRA_ARGS], extra arguments separated by commas. BINARY is a lab
# binary (`cargo build --release -p sealink-lab`), or a `sealink` from before the lab got its
# own binary (issue 31): both take `BINARY bench datagram ...`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SIZES=${SIZES:-64,256}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-1.5}
VARIANTS=${VARIANTS:-"sealink=target/release/sealink-lab"}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for round in $(seq 1 "$RUNS"); do
  for v in $VARIANTS; do
    name=${v%%=*}
    spec=${v#*=}
    bin=${spec%%:*}
    extra=()
    if [[ "$spec" == *:* ]]; then
      IFS=',' read -r -a extra <<<"${spec#*:}"
    fi
    "$bin" bench datagram --sizes "$SIZES" --seconds "$SECONDS_PER_RUN" --runs 1 "${extra[@]}" 2>/dev/null |
      awk -v n="$name" -v r="$round" '$2=="on"||$2=="off" {print n, r, $1, $2, $3}' >>"$out"
  done
  echo "round $round done (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$VARIANTS" <<'PY'
import sys, statistics, collections
rows = [l.split() for l in open(sys.argv[1])]
order = [v.split('=')[0] for v in sys.argv[2].split()]
m = collections.defaultdict(list)
for name, rnd, size, pb, rate in rows:
    m[(name, int(size), pb)].append(float(rate))
keys = sorted({(s, p) for (_, s, p) in m})
print(f"\nmedian messages/s over {max(len(v) for v in m.values())} interleaved rounds (ratio to {order[0]})")
print("| size | piggyback | " + " | ".join(order) + " |")
print("|---:|---|" + "---:|" * len(order))
for s, p in keys:
    base = statistics.median(m[(order[0], s, p)]) if m[(order[0], s, p)] else None
    cells = []
    for n in order:
        v = m.get((n, s, p))
        if not v:
            cells.append("-")
            continue
        med = statistics.median(v)
        cells.append(f"{med/1e6:.3f}M" + (f" ({med/base:.2f})" if base and n != order[0] else ""))
    print(f"| {s} | {p} | " + " | ".join(cells) + " |")
PY
