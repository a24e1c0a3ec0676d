#!/usr/bin/env bash
# Two sealink builds side by side on one large file: OLD and NEW each send FILE (default 1 GiB
# of random bytes in /dev/shm) over loopback to a `--once` receiver of the same build writing to
# /dev/shm, alternately, RUNS times (default 5). Prints each round, the load before and after,
# and the medians. For an A/B of a change to the stream path.
# Usage: bash bench/ab-send-file.sh OLD_BINARY NEW_BINARY
set -euo pipefail
old="$1" new="$2"
runs="${RUNS:-5}" size_mib="${SIZE_MIB:-1024}" port="${PORT:-22077}"
w="$(mktemp -d /dev/shm/sealink-ab.XXXXXX)"
trap 'rm -rf "$w"' EXIT
mkdir -p "$w/a" "$w/b" "$w/in"
"$new" keygen host "$w/a/host.key" >/dev/null 2>&1
"$new" keygen owner "$w/a/owner.key" >/dev/null 2>&1
"$new" keygen host "$w/b/host.key" >/dev/null 2>&1
pub() { cut -d' ' -f2 "$1"; }
echo "host bob $(pub "$w/b/host.key.pub")" >"$w/a/trust"
printf 'host alice %s\nowner alice %s\n' "$(pub "$w/a/host.key.pub")" \
  "$(pub "$w/a/owner.key.pub")" >"$w/b/trust"
head -c "$((size_mib << 20))" /dev/urandom >"$w/file"
one() { # one BINARY: seconds for one send
  SEALINK_HOME="$w/b" "$1" recv --listen "127.0.0.1:$port" --dir "$w/in" --force --once \
    --quiet 2>"$w/recv.log" &
  local p=$!
  for _ in $(seq 100); do grep -q listening "$w/recv.log" && break; sleep 0.05; done
  local t0 t1
  t0=$(date +%s.%N)
  SEALINK_HOME="$w/a" "$1" send "$w/file" "bob@127.0.0.1:$port" --quiet
  t1=$(date +%s.%N)
  wait "$p"
  cmp -s "$w/file" "$w/in/file" || { echo "the copy differs" >&2; exit 1; }
  rm -f "$w/in/file"
  echo "$t1 - $t0" | bc -l
}
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR + 1) / 2; print (NR % 2) ? a[m] : (a[NR/2] + a[NR/2+1]) / 2 }'; }
echo "# ab-send-file: $(date -u +%FT%TZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), ${size_mib} MiB"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
a=() b=()
for i in $(seq "$runs"); do
  a+=("$(one "$old")")
  b+=("$(one "$new")")
  printf '%-3s old %8.3f s   new %8.3f s\n' "$i" "${a[-1]}" "${b[-1]}"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
ma=$(median "${a[@]}") mb=$(median "${b[@]}")
awk -v a="$ma" -v b="$mb" 'BEGIN { printf "median: old %.3f s, new %.3f s (new/old time %.2f)\n", a, b, b / a }'
