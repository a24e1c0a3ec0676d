#!/usr/bin/env bash
# Issue 10's and 28's scaling curves on a many-core machine that reaches no package registry (the
# lent device machine): `bench/compare-tunnels.sh` under `taskset -c 0-(N-1)` at 1, 2, 4, 8 and
# 16 cores, for plain veth, wireguard-go and sealink, one TCP flow and four, with sealink's
# per-thread busy times (the busiest thread of every flow, see compare-tunnels.sh) and every
# tunnel's CPU per bit (issue 43): the CPU time of all the processes of both ends of each tunnel
# around every flow, as cores (CPU seconds / wall seconds) and Gbit/s per core, with the ratio of
# that to wireguard-go's, and the machine's softirq cores over the flow (system-wide, not a
# tunnel's; see compare-tunnels.sh's header).
#
# 1. Here, where the tools can be installed, gather them into a kit:
#      bash bench/tunnels-device.sh --make-kit DIR
#    DIR/bin gets sealink (stripped target/release/sealink, or $SEALINK), iperf3, wg,
#    wireguard-go, boringtun-cli, ip and ss (iproute2), ping, jq and taskset; DIR/lib every library they link
#    that is not glibc's own. The binaries find DIR/lib by their RPATH ($ORIGIN/../lib, set with
#    patchelf), so nothing else (no LD_LIBRARY_PATH) is needed and the machine's own programs
#    never see these libraries. DIR/VERSIONS records where each came from and the newest glibc
#    symbol version they need (2.35 when made on Debian 12; the run warns if the machine's glibc
#    is older). About 30 MB (13 MB gzipped), sealink 13 MB of it.
#    For the device tool: make it in an ignored folder of the repository and carry that, e.g.
#      echo /.kit/ >>.git/info/exclude; bash bench/tunnels-device.sh --make-kit .kit
#    then run (carry [".kit"]):  bash bench/tunnels-device.sh .kit "$OUT"   (about 7 minutes)
# 2. Copy the repository and the kit there, then, as root:
#      bash bench/tunnels-device.sh KIT OUTDIR [CORES]      # CORES: comma list, 1,2,4,8,16
#    None of the kit's tools need be installed there: KIT/bin goes first on the PATH. Core
#    counts above the machine's are skipped. Every result goes into ONE archive,
#    OUTDIR/tunnels-device-<UTC time>.tar.gz, rewritten after each core count (so a run cut
#    short still leaves what it measured), and also when a core count fails (the next one still
#    runs). It holds: run.log (everything printed), machine.txt (uname -a, CPU model, lscpu,
#    nproc, memory, glibc, os-release), kit.txt (the kit's VERSIONS and what each tool says of
#    its version there), cores-N.log (compare-tunnels' output at N cores: every round with its
#    CPU columns, "cpu C cores  G Gbit/s per core  softirq S cores (irq I; ends a A, b B)", the
#    busiest-thread line under each sealink flow, the medians, whose tables carry after the
#    rounds, past a "|", the median cores, Gbit/s/core, per-core vs wg-go and softirq),
#    threads-N.txt (every sealink thread's share of one core and counter deltas, per flow),
#    work-N/ (the daemons' logs and `sealink show --json` snapshots; keys removed), status.tsv
#    (cores, exit status, seconds), compact.txt (one line per core count, test and tunnel:
#    Gbit/s, x wg-go, cores, Gbit/s per core, per-core x wg-go and softirq cores, the medians;
#    rewritten after each core count) and summary.txt (the medians part of every cores-N.log,
#    then compact.txt's table, which the run also prints at its end).
#    Defaults sized for 8 minutes at 1-16 cores: RUNS=3, SECONDS_PER_FLOW=3, TESTS=tcp1,tcp4,
#    TUNNELS=plain,wg-go,sealink, PAUSE=1 (all passed to compare-tunnels.sh, each may be set).
#    TUNNELS=plain,wg-go,sealink,sealink-w0 adds the A/B of the TUN writer threads (sealink-w0:
#    the default config with tun_writers = 0), about 10 minutes for all five core counts;
#    TUNNELS=plain,wg-go,sealink,sealink-nolanes the A/B of lanes (lanes = false: one peer
#    received on one socket), the same time; TUNNELS=plain,wg-go,sealink,sealink-always the A/B
#    of issue 43's hand-off policy (sealink-always: handoff = "always", every batch to the
#    workers with a reader per direction and TUN writers, the engine's shape before issue 43;
#    the default, "auto", keeps a batch on its I/O thread unless that saturates with a core
#    idle; each thread's `handoffs` is in threads-N.txt); TUNNELS=plain,wg-go,sealink-wg,boringtun
#    issue 44's WireGuard wire against both WireGuard peers (the same cipher). The device tool stops a command at 10 minutes, so
#    run a four-tunnel set in two calls by CORES (1,2,4 then 8,16; each writes its own archive).
#    The estimate is printed first: per core count, set-up and tear-down (5 s) plus
#    RUNS x tests x tunnels x (SECONDS_PER_FLOW + PAUSE + 0.3 s for iperf3's start and end,
#    the `sealink show` snapshots and the CPU snapshots of /proc, about 1 ms each and 2 ms for
#    the round's arithmetic), i.e. 5 + 18 x 4.3 = 82 s, and 5 core counts 410 s (6 min 50 s),
#    under the device tool's 10 minutes with more than 2 minutes to spare. Measured on the
#    2-core development VM: 76 s for one core count with these defaults (before the CPU
#    columns, which add about 10 ms per flow).
#    Each core count is stopped (timeout) at twice its estimate plus 30 s, or TIMEOUT_S.
#    Exit status 1 if any core count failed (status.tsv says which).
# Old form `tunnels-device.sh KIT CORES` still works (OUTDIR then /tmp/tunnels-device).
#
# Check of a kit here, without iproute2 and the other tools on the PATH: bench/device-kit-check.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The kit's tools: NAME (in KIT/bin) and the Debian package that has it here.
kit_tools="ip:iproute2 ss:iproute2 ping:iputils-ping iperf3:iperf3 wg:wireguard-tools jq:jq taskset:util-linux"
# glibc's own libraries stay the machine's (mixing two glibcs does not work).
glibc_libs='^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libnss_[a-z]+|ld-linux[a-z0-9-]*)\.so'

# What a tool says of its version (first line); $1 = the binary, $2 = its name.
tool_version() {
  local v rc=0
  case "$2" in
    ip | ss | ping) v="$("$1" -V 2>&1)" || rc=$? ;;
    *) v="$("$1" --version 2>&1)" || rc=$? ;;
  esac
  printf '%s\n' "${v%%$'\n'*}"
  return $rc
}

# The Debian package that has file $1 (also under merged /usr, where dpkg knows /bin/X).
pkg_of() {
  local f
  for f in "$1" "$(readlink -f "$1")" "${1#/usr}" "$(readlink -f "$1" | sed 's|^/usr||')"; do
    dpkg -S "$f" 2>/dev/null | head -n 1 | cut -d: -f1 | grep . && return 0
  done
  echo "?"
}

make_kit() {
  local kit="$1" t name pkg src
  export PATH="$PATH:/usr/sbin:/sbin:/usr/local/go/bin:$HOME/go/bin"
  mkdir -p "$kit"
  kit="$(cd "$kit" && pwd)"
  rm -rf "$kit/bin" "$kit/lib" "$kit/VERSIONS"
  mkdir -p "$kit/bin" "$kit/lib"

  local sl="${SEALINK:-$root/target/release/sealink}"
  if [ ! -x "$sl" ]; then
    cargo build --release -p sealink-cli --manifest-path "$root/Cargo.toml"
    sl="$root/target/release/sealink"
  fi
  local missing=()
  for t in $kit_tools patchelf:patchelf; do
    command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "make-kit: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  local wggo
  wggo="$(command -v wireguard-go || echo "$HOME/go/bin/wireguard")"
  if [ ! -x "$wggo" ]; then
    go install golang.zx2c4.com/wireguard@latest
    wggo="$HOME/go/bin/wireguard"
  fi

  {
    echo "kit made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(ldd --version 2>&1 | head -n 1)"
    echo "repository: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD -- crates 2>/dev/null || echo ' (crates/ modified)')"
  } >"$kit/VERSIONS"
  strip -o "$kit/bin/sealink" "$sl"
  echo "sealink: $sl, $("$kit/bin/sealink" --version), sha256 $(sha256sum "$kit/bin/sealink" | cut -c1-16), built $(date -u -r "$sl" +%Y-%m-%dT%H:%M:%SZ)" >>"$kit/VERSIONS"
  cp -L "$wggo" "$kit/bin/wireguard-go"
  echo "wireguard-go: $wggo, $(tool_version "$kit/bin/wireguard-go" wireguard-go || true)" >>"$kit/VERSIONS"
  # boringtun, the second WireGuard peer (issue 44: TUNNELS=...,sealink-wg,boringtun), from
  # crates.io by name; the version CI's interop tests use.
  local bt
  bt="$(command -v boringtun-cli || echo "$HOME/.cargo/bin/boringtun-cli")"
  if [ ! -x "$bt" ]; then
    cargo install -q boringtun-cli --version 0.7.1 --locked
    bt="$HOME/.cargo/bin/boringtun-cli"
  fi
  strip -o "$kit/bin/boringtun-cli" "$bt"
  echo "boringtun-cli: $bt, $(tool_version "$kit/bin/boringtun-cli" boringtun-cli || true)" >>"$kit/VERSIONS"
  for t in $kit_tools; do
    name="${t%%:*}"
    src="$(command -v "$name")"
    cp -L "$src" "$kit/bin/$name"
    pkg="$(pkg_of "$src")"
    echo "$name: $src, package $pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true), $(tool_version "$kit/bin/$name" "$name" || true)" >>"$kit/VERSIONS"
  done

  # Every library the binaries load (ldd lists them transitively), but glibc's.
  local b l libs=()
  for b in "$kit"/bin/*; do
    while read -r l; do libs+=("$l"); done < <(ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  done
  printf '%s\n' "${libs[@]}" | sort -u | while read -r l; do
    if ! basename "$l" | grep -Eq "$glibc_libs"; then
      cp -L "$l" "$kit/lib/$(basename "$l")"
      echo "lib: $(basename "$l") from $l ($(pkg_of "$l"))" >>"$kit/VERSIONS"
    fi
  done
  # The binaries look for their libraries in ../lib first (DT_RPATH, which also covers the
  # libraries' own dependencies), the libraries beside themselves.
  for b in "$kit"/bin/*; do
    if ldd "$b" 2>/dev/null | awk '$2 == "=>" {print $1}' | grep -Evq "$glibc_libs"; then
      patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"
    fi
  done
  for l in "$kit"/lib/*; do
    [ -e "$l" ] && patchelf --force-rpath --set-rpath '$ORIGIN' "$l"
  done

  # Each binary must run and find every library in the kit, with nothing else on the PATH.
  local bad=0
  for b in "$kit"/bin/*; do
    if ldd "$b" 2>&1 | grep -q 'not found'; then
      echo "make-kit: $b misses a library: $(ldd "$b" 2>&1 | grep 'not found' | tr '\n' ' ')" >&2
      bad=1
    fi
    ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r l p; do
      basename "$l" | grep -Eq "$glibc_libs" || [[ "$p" == "$kit/"* ]] ||
        echo "make-kit: warning: $(basename "$b") loads $l from $p, not from the kit" >&2
    done
    env -i PATH=/usr/bin:/bin "$BASH" -c "$(declare -f tool_version); tool_version '$b' '$(basename "$b")'" >/dev/null ||
      { echo "make-kit: $b does not run" >&2; bad=1; }
  done
  [ "$bad" = 0 ] || exit 1
  # The newest glibc symbol version any of them asks for: the machine's glibc must have it.
  local need
  need="$(for b in "$kit"/bin/* "$kit"/lib/*; do objdump -T "$b" 2>/dev/null | grep -o 'GLIBC_[0-9.]*'; done |
    sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  echo "needs glibc: ${need:-unknown}" >>"$kit/VERSIONS"
  echo "make-kit: $(du -sh "$kit" | cut -f1) in $kit ($(ls "$kit/bin" | wc -l) programs, $(ls "$kit/lib" | wc -l) libraries)"
  cat "$kit/VERSIONS"
}

if [ "${1:-}" = "--make-kit" ]; then
  make_kit "${2:?usage: tunnels-device.sh --make-kit DIR}"
  exit 0
fi

usage="usage: tunnels-device.sh KIT OUTDIR [CORES]   (or --make-kit DIR)"
kit="${1:?$usage}"
kit="$(cd "$kit" && pwd)"
if [[ -n "${2:-}" && -z "${3:-}" && "$2" =~ ^[0-9][0-9,]*$ ]]; then
  out=/tmp/tunnels-device cores="$2" # the old form: KIT CORES
else
  out="${2:?$usage}" cores="${3:-${CORES:-1,2,4,8,16}}"
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
[ -x "$kit/bin/sealink" ] || { echo "tunnels-device: $kit/bin/sealink missing: not a kit (make one with --make-kit)" >&2; exit 1; }

export PATH="$kit/bin:$PATH"
export SEALINK="$kit/bin/sealink"
export RUNS="${RUNS:-3}" SECONDS_PER_FLOW="${SECONDS_PER_FLOW:-3}" PAUSE="${PAUSE:-1}"
export TESTS="${TESTS:-tcp1,tcp4}" TUNNELS="${TUNNELS:-plain,wg-go,sealink}"
export KEEP_LOGS=1

name="tunnels-device-$(date -u +%Y%m%dT%H%M%SZ)"
stage="$(mktemp -d /tmp/tunnels-device.XXXXXX)"
dir="$stage/$name"
mkdir -p "$dir"
archive="$out/$name.tar.gz"

# (Re)writes the one archive from what the run has so far.
pack() {
  tar -C "$stage" -czf "$archive.tmp" "$name" && mv -f "$archive.tmp" "$archive"
}

# Seconds one core count takes: set-up and tear-down, then every flow with its pause (an rtt
# test is 50 pings 50 ms apart). The per-flow overhead (iperf3's start and end, four
# `sealink show` for sealink, two CPU snapshots of /proc and the round's arithmetic, a few ms)
# and the set-up were measured on the 2-core development VM, with some margin: 76 s measured
# where this says 82 s.
estimate() {
  local ntests=0 ntun=0 nrtt=0 t
  for t in ${TESTS//,/ }; do if [ "$t" = rtt ]; then nrtt=$((nrtt + 1)); else ntests=$((ntests + 1)); fi; done
  for t in ${TUNNELS//,/ }; do ntun=$((ntun + 1)); done
  awk -v r="$RUNS" -v s="$SECONDS_PER_FLOW" -v p="$PAUSE" -v n="$ntests" -v m="$nrtt" -v k="$ntun" \
    'BEGIN {printf "%d\n", 5 + r * k * (n * (s + p + 0.3) + m * (3.0 + p)) + 0.5}'
}

# The compact table of every cores-N.log there is (core counts $1, a comma list): one line per
# core count, test (all but rtt) and tunnel, from compare-tunnels' medians tables: Gbit/s (kpps
# for udp256), x wg-go, cores, per core, per-core x wg-go, softirq cores.
compact() {
  local n
  echo "compact: medians per core count, test and tunnel; cores = CPU seconds of both ends of the"
  echo "tunnel's processes / wall seconds, per core = Gbit/s / cores (udp256: kpps and kpps/core),"
  echo "softirq = the machine's softirq cores during the flow (system-wide, not the tunnel's)"
  printf '%-5s  %-6s  %-19s %9s %8s %6s %11s %16s %8s\n' cores test tunnel Gbit/s "x wg-go" cores "Gbit/s/core" "per-core x wg-go" softirq
  for n in ${1//,/ }; do
    [ -f "$dir/cores-$n.log" ] || continue
    awk -v n="$n" '
      /^medians of/ {on = 1; next}
      !on {next}
      /^[a-z0-9]+: / && !/^[a-z0-9]+: busiest/ {split($0, h, ":"); test = h[1]; tab = 0; next}
      /^tunnel +median/ {tab = (test != "rtt"); next}
      /^$/ || / busiest threads/ {tab = 0; next}
      !tab {next}
      {
        got++
        if ($2 == "-") {printf "%-5s  %-6s  %-19s %9s   skipped\n", n, test, $1, "-"; next}
        k = split($0, part, " [|] ")
        c = pc = pcr = sq = "-"
        if (k > 1) {split(part[2], f, " "); c = f[1]; pc = f[2]; pcr = f[3]; sq = f[4]}
        printf "%-5s  %-6s  %-19s %9s %8s %6s %11s %16s %8s\n", n, test, $1, $2, $3, c, pc, pcr, sq
      }
      END {if (!got) printf "%-5s  (no medians in cores-%s.log)\n", n, n}' "$dir/cores-$n.log"
  done
}

main() {
  local have n per total t0 t1 rc ncounts=0 c need have_glibc failed=()
  have="$(nproc --all)"
  echo "tunnels-device: $name, $(date -u +%Y-%m-%dT%H:%M:%SZ), kit $kit, archive $archive"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname: $(uname -a)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
    echo "nproc: $(nproc) (all: $have)"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "load: $(cat /proc/loadavg)"
    echo "tun: $(ls -l /dev/net/tun 2>&1)"
    grep -E '^(MemTotal|MemAvailable)' /proc/meminfo
    echo "--- os-release"
    cat /etc/os-release 2>/dev/null || echo "(none)"
    echo "--- lscpu"
    lscpu 2>&1 || grep -E '^(model name|flags)' /proc/cpuinfo | sort -u
  } >"$dir/machine.txt"
  cat "$dir/machine.txt"
  {
    cat "$kit/VERSIONS" 2>/dev/null || echo "(no VERSIONS in the kit)"
    echo "--- here"
    for c in "$kit"/bin/*; do
      echo "$(basename "$c"): $(command -v "$(basename "$c")"), $(tool_version "$c" "$(basename "$c")" || echo "DOES NOT RUN")"
    done
    for c in ip ss ping iperf3 wg wireguard-go jq taskset; do
      [ "$(command -v "$c")" = "$kit/bin/$c" ] || echo "WARNING: $c is $(command -v "$c" || echo missing), not the kit's"
    done
    need="$(sed -n 's/^needs glibc: //p' "$kit/VERSIONS" 2>/dev/null)"
    have_glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
    if [ -n "$need" ] && [ -n "$have_glibc" ] &&
      [ "$(printf '%s\n%s\n' "$need" "$have_glibc" | sort -V | head -n 1)" != "$need" ]; then
      echo "WARNING: the kit needs glibc $need, this machine has $have_glibc"
    fi
  } >"$dir/kit.txt" 2>&1
  cat "$dir/kit.txt"

  for n in ${cores//,/ }; do [ "$n" -le "$have" ] && ncounts=$((ncounts + 1)); done
  per="$(estimate)"
  total=$((per * ncounts))
  echo "tunnels-device: RUNS=$RUNS SECONDS_PER_FLOW=$SECONDS_PER_FLOW PAUSE=$PAUSE TESTS=$TESTS TUNNELS=$TUNNELS"
  echo "tunnels-device: estimate ${per} s per core count x $ncounts core counts ($cores, $have CPUs) = ${total} s ($((total / 60)) min $((total % 60)) s)"
  [ "$total" -le 480 ] || echo "tunnels-device: WARNING: the estimate is over 8 minutes"
  printf 'cores\trc\tseconds\n' >"$dir/status.tsv"
  pack
  for n in ${cores//,/ }; do
    if [ "$n" -gt "$have" ]; then
      echo "tunnels-device: $n cores: skipped, the machine has $have"
      printf '%s\tskipped\t0\n' "$n" >>"$dir/status.tsv"
      continue
    fi
    echo "tunnels-device: ==== $n core(s): taskset -c 0-$((n - 1)), $(cut -d' ' -f1-3 /proc/loadavg) ===="
    mkdir -p "$dir/work-$n"
    t0="$(date +%s)"
    rc=0
    TMPDIR="$dir/work-$n" THREAD_LOG="$dir/threads-$n.txt" \
      timeout -k 10 "${TIMEOUT_S:-$((2 * per + 30))}" taskset -c "0-$((n - 1))" bash "$root/bench/compare-tunnels.sh" \
      2>&1 | tee "$dir/cores-$n.log" || rc=$?
    t1="$(date +%s)"
    find "$dir/work-$n" \( -name '*.key' -o -name '*.key.pub' \) -delete 2>/dev/null || true
    echo "tunnels-device: $n core(s): exit $rc after $((t1 - t0)) s"
    printf '%s\t%s\t%s\n' "$n" "$rc" "$((t1 - t0))" >>"$dir/status.tsv"
    [ "$rc" = 0 ] || failed+=("$n")
    {
      echo "==== $n core(s), exit $rc, $((t1 - t0)) s"
      sed -n '/^medians of/,$p' "$dir/cores-$n.log"
      echo
    } >>"$dir/summary.txt"
    compact "$cores" >"$dir/compact.txt"
    pack
  done
  compact "$cores" >"$dir/compact.txt"
  cat "$dir/compact.txt" >>"$dir/summary.txt"
  echo
  cat "$dir/compact.txt"
  echo
  echo "tunnels-device: done, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  cat "$dir/status.tsv"
  if [ "${#failed[@]}" -gt 0 ]; then
    echo "tunnels-device: FAILED at ${failed[*]} core(s) (exit status 124: stopped by the timeout)"
    return 1
  fi
}

set +e
main 2>&1 | tee "$dir/run.log"
rc="${PIPESTATUS[0]}"
pack && echo "tunnels-device: archive $archive ($(du -h "$archive" | cut -f1))"
rm -rf "$stage"
exit "$rc"
