#!/usr/bin/env bash
# A/B of `sealink-lab bench seal` between builds: the builds alternate round by round, each round a
# fresh process (the 1400 B ratio can differ between processes, RESULTS §22d). Prints each
# round's protocol/raw ratios and the load average, then the median per build and size.
# Used for RESULTS §22c and §22d.
# Usage: bash bench/ab-seal.sh ROUNDS SIZES NAME=BINARY [NAME=BINARY ...]
#   e.g. bash bench/ab-seal.sh 5 64,1400,65000 base=/tmp/sl-base new=target/release/sealink-lab
# BINARY is a lab binary (`cargo build --release -p sealink-lab`), or a `sealink` built before
# the lab got its own binary (issue 31): both take `BINARY bench seal ...`.
set -euo pipefail
rounds=$1 sizes=$2
shift 2
[ "$#" -ge 1 ] || { echo "usage: $0 ROUNDS SIZES NAME=BINARY..." >&2; exit 2; }
out="$(mktemp -d /tmp/sealink-ab-seal.XXXXXX)"
trap 'rm -rf "$out"' EXIT
echo "start $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -m1 "model name" /proc/cpuinfo || true
for i in $(seq 1 "$rounds"); do
  for nb in "$@"; do
    name=${nb%%=*} bin=${nb#*=}
    printf 'round %d %s ' "$i" "$name"
    "$bin" bench seal --sizes "$sizes" --suites aes128-gcm --out "$out/$name-$i" 2>/dev/null \
      | awk -F'|' '/^\| aes/ {printf "%s:%s ", $3+0, $6+0}'
    echo "load $(cut -d' ' -f1 /proc/loadavg)"
  done
done | tee "$out/rounds.txt"
echo "end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "medians (protocol/raw):"
awk '/^round/ {
  for (f = 4; f <= NF; f++) if ($f ~ /^[0-9]+:/) { split($f, a, ":"); v[$3 " " a[1]] = v[$3 " " a[1]] " " a[2] }
} END {
  for (k in v) {
    n = split(v[k], x, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    m = (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
    printf "  %s B: %.3f (%d rounds)\n", k, m, n
  }
}' "$out/rounds.txt" | sort
