#!/usr/bin/env bash
# Stream mode under each AEAD library, side by side in one run (issue 44): `sealink send` of one
# file over loopback with SUITE (chacha20-poly1305) and 16 KiB records, the sender and its
# receiver both started with SEALINK_AEAD_BACKEND set to each of BACKENDS in turn (one receiver
# per backend, each on its own port), the backends interleaved round by round, RUNS rounds.
# Prints every round's Gbit/s and the CPU seconds of both ends (the sender's user + system time
# from /usr/bin/time, the receiver's from /proc/PID/stat around the transfer), then the medians,
# Gbit/s per CPU core, and the ratio of each to the first backend. The file is random, in
# /dev/shm, and every copy is checked with cmp. The load average is printed first and last.
#
# Environment: SIZE_MIB (1024), RUNS (5), SUITE (chacha20-poly1305),
# BACKENDS (aws-lc-rs,ring,openssl,aws-lc-rs+openssl; "chosen" = no override), PORT (22130,
# then PORT+1, ...).
# Usage: bash bench/ab-backend-stream.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${SIZE_MIB:-1024}"
runs="${RUNS:-5}"
suite="${SUITE:-chacha20-poly1305}"
IFS=, read -r -a backends <<<"${BACKENDS:-aws-lc-rs,ring,openssl,aws-lc-rs+openssl}"
port0="${PORT:-22130}"

cd "$root"
cargo build --release --locked -q -p sealink-cli
sealink="$root/target/release/sealink"
hz="$(getconf CLK_TCK)"

work="$(mktemp -d /dev/shm/sealink-abbk.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo "$("$sealink" --version -v | sed -n '2,$p' | tr '\n' ' ')"
head -c "$((size_mib << 20))" /dev/urandom >"$work/file"
bytes="$(stat -c %s "$work/file")"

mkdir -p "$work/a" "$work/b"
"$sealink" keygen host "$work/a/host.key" >/dev/null 2>&1
"$sealink" keygen owner "$work/a/owner.key" >/dev/null 2>&1
"$sealink" keygen host "$work/b/host.key" >/dev/null 2>&1
pub() { cut -d' ' -f2 "$1"; }
echo "host bob $(pub "$work/b/host.key.pub")" >"$work/a/trust"
printf 'host alice %s\nowner alice %s\n' "$(pub "$work/a/host.key.pub")" \
  "$(pub "$work/a/owner.key.pub")" >"$work/b/trust"

# One receiver per backend.
declare -A recv_pid port
for i in "${!backends[@]}"; do
  b="${backends[$i]}"
  port[$b]=$((port0 + i))
  mkdir -p "$work/in-$i"
  env_b=()
  [ "$b" = chosen ] || env_b=(SEALINK_AEAD_BACKEND="$b")
  env "${env_b[@]}" SEALINK_HOME="$work/b" "$sealink" recv --listen "127.0.0.1:${port[$b]}" \
    --dir "$work/in-$i" --force --quiet 2>"$work/recv-$i.log" &
  recv_pid[$b]=$!
  pids+=($!)
done
for i in "${!backends[@]}"; do
  for _ in $(seq 50); do grep -q listening "$work/recv-$i.log" && break; sleep 0.1; done
done

cpu_of() { awk -v hz="$hz" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }

declare -A secs cpus
printf '%-5s %-20s %9s %10s\n' round backend Gbit/s "cpu s"
for r in $(seq "$runs"); do
  for i in "${!backends[@]}"; do
    b="${backends[$i]}"
    env_b=()
    [ "$b" = chosen ] || env_b=(SEALINK_AEAD_BACKEND="$b")
    c0="$(cpu_of "${recv_pid[$b]}")"
    t0="$(date +%s.%N)"
    /usr/bin/time -f '%U %S' -o "$work/time" env "${env_b[@]}" SEALINK_HOME="$work/a" \
      "$sealink" send "$work/file" "bob@127.0.0.1:${port[$b]}" --suite "$suite" --quiet
    t1="$(date +%s.%N)"
    c1="$(cpu_of "${recv_pid[$b]}")"
    cmp -s "$work/file" "$work/in-$i/file" || { echo "copy for $b differs" >&2; exit 1; }
    rm -f "$work/in-$i/file"
    s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')"
    c="$(awk -v u="$(cut -d' ' -f1 "$work/time")" -v y="$(cut -d' ' -f2 "$work/time")" \
      -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", u + y + b - a }')"
    secs[$b]+="$s "
    cpus[$b]+="$c "
    printf '%-5s %-20s %9.3f %10.3f\n' "$r" "$b" "$(awk -v s="$s" -v n="$bytes" 'BEGIN { print n * 8 / s / 1e9 }')" "$c"
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "medians ($suite, ${size_mib} MiB, $runs rounds; per core = Gbit/s over the CPU cores of both ends):"
printf '%-20s %9s %9s %12s %9s %12s\n' backend Gbit/s "cpu s" "Gbit/s/core" "x first" "per core x"
first_g="" first_pc=""
for b in "${backends[@]}"; do
  ms="$(echo "${secs[$b]}" | median)"
  mc="$(echo "${cpus[$b]}" | median)"
  g="$(awk -v s="$ms" -v n="$bytes" 'BEGIN { printf "%.3f", n * 8 / s / 1e9 }')"
  pc="$(awk -v c="$mc" -v n="$bytes" 'BEGIN { printf "%.3f", n * 8 / c / 1e9 }')"
  [ -n "$first_g" ] || { first_g="$g"; first_pc="$pc"; }
  printf '%-20s %9.3f %9.3f %12.3f %9.3f %12.3f\n' "$b" "$g" "$mc" "$pc" \
    "$(awk -v a="$g" -v b="$first_g" 'BEGIN { print a / b }')" \
    "$(awk -v a="$pc" -v b="$first_pc" 'BEGIN { print a / b }')"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
