#!/usr/bin/env bash
# Whole trees (issue 45), side by side: `sealink send` of a directory against `rsync -a` over
# ssh (aes128-gcm@openssh.com), `scp -r`, `tar c | ssh tar x`, and plain tar over TCP (no
# crypto: the ceiling). Trees are generated deterministically (same seed, same bytes):
#
#   a  A_FILES files of 1-16 KB in a source-like layout (default 100,000)
#   b  B_FILES empty or tiny files (default 1,000,000)
#   c  C_MIB MiB of 1 MiB files (default 10,240: 10 GiB)
#   repo  this repository, cloned with its .git
#
# and an incremental case: 1% of tree a changed, `sealink send --update` against `rsync -a`.
#
# `sealink` is the receiver's default (every file fsynced before it takes its name);
# `sealink-nofsync` runs `recv --no-fsync`, which, like rsync and tar by default, does not sync;
# `rsync-fsync` (not in the default TOOLS) is `rsync -a --fsync`, the like-for-like peer of the
# default.
# Every tool copies into an empty directory (removed between runs, not timed), interleaved
# RUNS times (default 5), over loopback or (NETNS=1) between two network namespaces joined by
# a veth pair. Prints each run, then per tree and tool the median seconds, files/s, Gbit/s and
# the peak RSS of both ends (/usr/bin/time -v; "-" where a tool's far end cannot be wrapped:
# scp's sftp server), the load average before and after, and sealink's ratios against the
# issue's targets. Every copy is checked (file count and bytes).
#
# Installs rsync, openssh-server and time from Debian's packages when missing and starts a
# private sshd (its own host key, an authorized key made here, nothing of the system's touched).
#
# Environment: TREES ("a b c repo"), A_FILES, B_FILES, C_MIB, RUNS, NETNS (0), WORK (a new
# directory under /var/tmp; the trees and copies go there: give tree c the room), STREAMS
# (sealink's default when unset), SSH_PORT (22032), PLAIN_PORT (22033), SEALINK_PORT (22034),
# TOOLS ("sealink sealink-nofsync rsync scp tar-ssh tar-tcp"), INCREMENTAL (1), SEALINK_B (another
# sealink binary, for an A/B of two builds in one run: tools `sealink-b` and `sealink-b-nofsync`
# run it at both ends).
# Quick run: TREES="a b" A_FILES=5000 B_FILES=20000 RUNS=3 bash bench/compare-trees.sh
# Usage: bash bench/compare-trees.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
trees="${TREES:-a b c repo}"
a_files="${A_FILES:-100000}"
b_files="${B_FILES:-1000000}"
c_mib="${C_MIB:-10240}"
runs="${RUNS:-5}"
netns="${NETNS:-0}"
ssh_port="${SSH_PORT:-22032}"
plain_port="${PLAIN_PORT:-22033}"
sl_port="${SEALINK_PORT:-22034}"
tools="${TOOLS:-sealink sealink-nofsync rsync scp tar-ssh tar-tcp}"
incremental="${INCREMENTAL:-1}"
streams=()
[ -n "${STREAMS:-}" ] && streams=(--streams "$STREAMS")

need=()
command -v rsync >/dev/null || need+=(rsync)
[ -x /usr/sbin/sshd ] || need+=(openssh-server openssh-client)
[ -x /usr/bin/time ] || need+=(time)
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v python3 >/dev/null || { echo "python3 is needed (tree generator, plain TCP)" >&2; exit 1; }

cd "$root"
cargo build --release --locked -q -p sealink-cli
sealink="${CARGO_TARGET_DIR:-$root/target}/release/sealink"

mkdir -p /var/tmp
work="${WORK:-$(mktemp -d /var/tmp/sealink-trees.XXXXXX)}"
mkdir -p "$work"
# An ext4 without a journal (some VMs' root file systems) skips inodes freed in the last seconds
# to minutes when it allocates new ones (the kernel's recently_deleted), so a copy made right
# after the last one was deleted costs every tool far more per file than on a journaled disk,
# and by how much depends on where the last copy's inodes were. Measure on a journaled file
# system: a loop-mounted `mkfs.ext4` image will do.
if [ "$(findmnt -no FSTYPE -T "$work" 2>/dev/null)" = ext4 ]; then
  dev="$(findmnt -no SOURCE -T "$work")"
  if ! ls /proc/fs/jbd2 2>/dev/null | grep -q "^$(basename "$dev")-"; then
    echo "warning: $work is on an ext4 without a journal ($dev): figures for many small files" \
      "will not be what a journaled disk gives (see the comment above)" >&2
  fi
fi
pids=()
USER="${USER:-$(id -un)}"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$netns" = 1 ]; then
    ip netns del sltA 2>/dev/null || true
    ip netns del sltB 2>/dev/null || true
  fi
  if [ -z "${WORK:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

# --- where the two ends run -------------------------------------------------------------------
if [ "$netns" = 1 ]; then
  ip netns add sltA
  ip netns add sltB
  ip link add sltA0 netns sltA type veth peer name sltB0 netns sltB
  ip -n sltA addr add 10.45.0.1/24 dev sltA0
  ip -n sltB addr add 10.45.0.2/24 dev sltB0
  for n in sltA sltB; do ip -n "$n" link set lo up; done
  ip -n sltA link set sltA0 up
  ip -n sltB link set sltB0 up
  at_a=(ip netns exec sltA)
  at_b=(ip netns exec sltB)
  host=10.45.0.2
else
  at_a=()
  at_b=()
  host=127.0.0.1
fi
where="$([ "$netns" = 1 ] && echo "two network namespaces (veth)" || echo loopback)"

# --- the trees ----------------------------------------------------------------------------------
gen() { # gen KIND DIR COUNT: a deterministic tree
  python3 - "$@" <<'EOF'
import os, random, sys
kind, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(45)
words = [b"fn", b"let", b"mut", b"impl", b"struct", b"pub", b"use", b"self", b"match",
         b"return", b"if", b"else", b"for", b"while", b"loop", b"Ok", b"Err", b"Some", b"None",
         b"value", b"buffer", b"record", b"stream", b"key", b"index", b"len", b"0", b"1", b"=>",
         b"{", b"}", b"(", b")", b";", b"//", b"the", b"a", b"of", b"to"]
os.makedirs(d, exist_ok=True)
if kind == "a":
    # crates/<c>/src/<m>/<file>.rs: 20 files a directory, 10 directories a crate.
    for i in range(n):
        c, rest = divmod(i, 200)
        m, f = divmod(rest, 20)
        p = os.path.join(d, f"crate{c:04}", "src", f"mod{m:02}")
        if f == 0:
            os.makedirs(p, exist_ok=True)
        size = rng.randint(1024, 16384)
        out = bytearray()
        while len(out) < size:
            line = b" ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))
            out += b"    " * rng.randint(0, 3) + line + b"\n"
        with open(os.path.join(p, f"file{f:02}.rs"), "wb") as fh:
            fh.write(out[:size])
elif kind == "b":
    # 1000 files a directory; half empty, half a few bytes.
    for i in range(n):
        dd, f = divmod(i, 1000)
        p = os.path.join(d, f"d{dd:05}")
        if f == 0:
            os.makedirs(p, exist_ok=True)
        with open(os.path.join(p, f"f{f:04}"), "wb") as fh:
            if f % 2:
                fh.write(b"%d\n" % i)
elif kind == "c":
    block = rng.randbytes(1 << 20)
    for i in range(n):
        with open(os.path.join(d, f"blob{i:05}.bin"), "wb") as fh:
            # Each file differs (its first bytes), none compresses.
            fh.write(i.to_bytes(8, "little") + block[8:])
EOF
}

mkdir -p "$work/src"
for t in $trees; do
  src="$work/src/$t"
  [ -e "$src" ] && continue
  echo "generating tree $t" >&2
  case "$t" in
    a) gen a "$src" "$a_files" ;;
    b) gen b "$src" "$b_files" ;;
    c) gen c "$src" "$c_mib" ;;
    repo) git clone -q --no-hardlinks "$root" "$src" ;;
    *) echo "unknown tree $t" >&2; exit 1 ;;
  esac
done
stats() { # files and bytes of a tree
  # %.0f: mawk's %d stops at 2^31 - 1, which a tree of 10 GiB passes.
  find "$1" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { printf "%d %.0f\n", n, b }'
}

# --- a private sshd (in namespace B with NETNS=1) -----------------------------------------------
mkdir -p /run/sshd "$work/ssh"
rm -f "$work/ssh/host_key" "$work/ssh/client_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/client_key"
cp "$work/ssh/client_key.pub" "$work/ssh/authorized_keys"
chmod 600 "$work/ssh/authorized_keys"
cat >"$work/ssh/sshd_config" <<EOF
Port $ssh_port
ListenAddress $host
HostKey $work/ssh/host_key
AuthorizedKeysFile $work/ssh/authorized_keys
PidFile $work/ssh/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Ciphers aes128-gcm@openssh.com
Compression no
Subsystem sftp internal-sftp
EOF
"${at_b[@]}" /usr/sbin/sshd -D -e -f "$work/ssh/sshd_config" 2>"$work/ssh/sshd.log" &
pids+=($!)
ssh_o=(-i "$work/ssh/client_key" -c aes128-gcm@openssh.com -o StrictHostKeyChecking=no
  -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o Compression=no -o LogLevel=ERROR)
ssh_cmd="ssh ${ssh_o[*]} -p $ssh_port"
for _ in $(seq 50); do
  "${at_a[@]}" ssh "${ssh_o[@]}" -p "$ssh_port" "$USER@$host" true 2>/dev/null && break
  sleep 0.1
done
"${at_a[@]}" ssh "${ssh_o[@]}" -p "$ssh_port" "$USER@$host" true \
  || { echo "the private sshd does not answer:" >&2; cat "$work/ssh/sshd.log" >&2; exit 1; }

# --- sealink keys: host a sends as owner alice to host b ----------------------------------------
mkdir -p "$work/ka" "$work/kb"
for k in "ka/host" "kb/host"; do [ -e "$work/$k.key" ] || "$sealink" keygen host "$work/$k.key" >/dev/null 2>&1; done
[ -e "$work/ka/owner.key" ] || "$sealink" keygen owner "$work/ka/owner.key" >/dev/null 2>&1
pub() { cut -d' ' -f2 "$1"; }
echo "host bob $(pub "$work/kb/host.key.pub")" >"$work/ka/trust"
printf 'host alice %s\nowner alice %s\n' "$(pub "$work/ka/host.key.pub")" \
  "$(pub "$work/ka/owner.key.pub")" >"$work/kb/trust"

# --- one copy per tool; each prints "seconds sender_rss_kib receiver_rss_kib" ----------------
now() { date +%s.%N; }
rss() { awk '/Maximum resident set size/ { print $NF }' "$1" 2>/dev/null || echo -; }
dest="$work/dest"
fresh() { rm -rf "$dest"; mkdir -p "$dest"; sync; }
# Reads a tree through the page cache (not timed), so every tool starts from the same warm
# source: a VM may page out file pages it has not seen touched for a minute (DAMON's pageout
# scheme on the 2-vCPU VM of RESULTS §53), and whichever tool ran first after a long one read
# its source from disk.
warm() { find "$1" -type f -exec cat {} + >/dev/null; }

tcp_pipe='
import socket, sys
if sys.argv[1] == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], int(sys.argv[3]))); s.listen(1); print("ready", file=sys.stderr, flush=True)
    c, _ = s.accept(); out = sys.stdout.buffer
    while True:
        b = c.recv(1 << 20)
        if not b: break
        out.write(b)
else:
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    inp = sys.stdin.buffer
    while True:
        b = inp.read(1 << 20)
        if not b: break
        c.sendall(b)
'

run_sealink() { # run_sealink SRC [send flags...]; RECV_EXTRA: flags of the receiver; SL: binary
  local src="$1"; shift
  local sealink="${SL:-$sealink}"
  # shellcheck disable=SC2086
  SEALINK_HOME="$work/kb" "${at_b[@]}" /usr/bin/time -v -o "$work/rss.b" "$sealink" recv \
    --listen "$host:$sl_port" --dir "$dest" --once --update --quiet ${RECV_EXTRA:-} 2>"$work/recv.log" &
  local p=$!
  for _ in $(seq 100); do grep -q listening "$work/recv.log" && break; sleep 0.05; done
  local t0 t1
  t0=$(now)
  SEALINK_HOME="$work/ka" "${at_a[@]}" /usr/bin/time -v -o "$work/rss.a" "$sealink" send \
    "$src" "bob@$host:$sl_port" --quiet "${streams[@]}" "$@"
  t1=$(now)
  wait "$p"
  echo "$(echo "$t1 - $t0" | bc -l) $(rss "$work/rss.a") $(rss "$work/rss.b")"
}

run_rsync() { # run_rsync SRC [rsync flags...]
  local src="$1" t0 t1
  shift
  t0=$(now)
  "${at_a[@]}" /usr/bin/time -v -o "$work/rss.a" rsync -a "$@" -e "$ssh_cmd" \
    --rsync-path="/usr/bin/time -v -o $work/rss.b rsync" "$src" "$USER@$host:$dest/"
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc -l) $(rss "$work/rss.a") $(rss "$work/rss.b")"
}

run_scp() {
  local t0 t1
  t0=$(now)
  "${at_a[@]}" /usr/bin/time -v -o "$work/rss.a" scp -q -r "${ssh_o[@]}" -P "$ssh_port" "$1" \
    "$USER@$host:$dest/"
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc -l) $(rss "$work/rss.a") -"
}

run_tar_ssh() {
  local t0 t1
  t0=$(now)
  (cd "$(dirname "$1")" && "${at_a[@]}" /usr/bin/time -v -o "$work/rss.a" tar cf - "$(basename "$1")") \
    | "${at_a[@]}" ssh "${ssh_o[@]}" -p "$ssh_port" "$USER@$host" \
      "/usr/bin/time -v -o $work/rss.b tar xf - -C $dest"
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc -l) $(rss "$work/rss.a") $(rss "$work/rss.b")"
}

run_tar_tcp() {
  rm -f "$work/tcp.ready"
  "${at_b[@]}" python3 -c "$tcp_pipe" recv "$host" "$plain_port" 2>"$work/tcp.ready" \
    | /usr/bin/time -v -o "$work/rss.b" tar xf - -C "$dest" &
  local p=$!
  for _ in $(seq 100); do grep -q ready "$work/tcp.ready" 2>/dev/null && break; sleep 0.05; done
  local t0 t1
  t0=$(now)
  (cd "$(dirname "$1")" && /usr/bin/time -v -o "$work/rss.a" tar cf - "$(basename "$1")") \
    | "${at_a[@]}" python3 -c "$tcp_pipe" send "$host" "$plain_port"
  wait "$p"
  t1=$(now)
  echo "$(echo "$t1 - $t0" | bc -l) $(rss "$work/rss.a") $(rss "$work/rss.b")"
}

check() { # check SRC: the copy holds the same files and bytes
  local want got
  want="$(stats "$1")"
  got="$(stats "$dest/$(basename "$1")")"
  [ "$want" = "$got" ] || { echo "copy of $1 differs: $got, want $want" >&2; exit 1; }
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR + 1) / 2; print (NR % 2) ? a[m] : (a[NR/2] + a[NR/2+1]) / 2 }'; }

echo "# sealink compare-trees: $(date -u +%FT%TZ), $(uname -srm), $(nproc) cores, $where"
echo "# $(git -C "$root" describe --always --dirty 2>/dev/null), runs $runs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A med_s
for t in $trees; do
  src="$work/src/$t"
  read -r files bytes < <(stats "$src")
  echo
  echo "## tree $t: $files files, $bytes bytes"
  printf '%-4s %-15s %10s %12s %12s\n' run tool seconds "rss send KiB" "rss recv KiB"
  declare -A all=()
  declare -A rss_a=() rss_b=()
  for i in $(seq "$runs"); do
    for tool in $tools; do
      fresh
      warm "$src"
      out="$(case "$tool" in
        sealink) run_sealink "$src" ;;
        sealink-nofsync) RECV_EXTRA=--no-fsync run_sealink "$src" ;;
        sealink-b) SL="$SEALINK_B" run_sealink "$src" ;;
        sealink-b-nofsync) SL="$SEALINK_B" RECV_EXTRA=--no-fsync run_sealink "$src" ;;
        rsync) run_rsync "$src" ;;
        rsync-fsync) run_rsync "$src" --fsync ;;
        scp) run_scp "$src" ;;
        tar-ssh) run_tar_ssh "$src" ;;
        tar-tcp) run_tar_tcp "$src" ;;
      esac)"
      check "$src"
      read -r s ra rb <<<"$out"
      all[$tool]="${all[$tool]:-} $s"
      rss_a[$tool]="$ra"
      rss_b[$tool]="$rb"
      printf '%-4s %-15s %10.3f %12s %12s\n' "$i" "$tool" "$s" "$ra" "$rb"
    done
  done
  echo
  printf '%-15s %9s %12s %9s %12s %12s\n' tool "median s" "files/s" "Gbit/s" "rss send" "rss recv"
  for tool in $tools; do
    # shellcheck disable=SC2086
    m=$(median ${all[$tool]})
    med_s["$t.$tool"]=$m
    awk -v t="$tool" -v m="$m" -v f="$files" -v b="$bytes" -v ra="${rss_a[$tool]}" -v rb="${rss_b[$tool]}" \
      'BEGIN { printf "%-15s %9.3f %12.0f %9.3f %12s %12s\n", t, m, f / m, b * 8 / m / 1e9, ra, rb }'
  done
  if [[ " $tools " == *" sealink "* ]]; then
    for sl in sealink sealink-nofsync; do
      [[ " $tools " == *" $sl "* ]] || continue
      s=${med_s["$t.$sl"]}
      for tool in $tools; do
        [[ "$tool" == sealink* ]] && continue
        awk -v o="${med_s["$t.$tool"]}" -v s="$s" -v n="$tool" -v sl="$sl" \
          'BEGIN { printf "%s against %-8s %.2fx (its time / ours)\n", sl, n, o / s }'
      done
    done
  fi
  unset all rss_a rss_b
done

# --- the incremental case: 1% of tree a changed -----------------------------------------------
if [ "$incremental" = 1 ] && [[ " $trees " == *" a "* ]]; then
  src="$work/src/a"
  echo
  echo "## incremental: 1% of tree a changed, sealink send --update against rsync -a"
  printf '%-4s %-8s %10s\n' run tool seconds
  declare -a inc_sl inc_rs inc_b
  for i in $(seq "$runs"); do
    # A complete copy (kept aside for rsync), then 1% of the files changed (content and mtime):
    # each tool brings the same old copy up to date.
    fresh
    run_sealink "$src" >/dev/null
    rm -rf "$work/base"
    cp -a "$dest/a" "$work/base"
    find "$src" -type f | sort | awk -v i="$i" 'NR % 100 == i % 100' | while read -r f; do
      printf 'changed in round %s\n' "$i" >>"$f"
    done
    sync
    warm "$src"
    out="$(run_sealink "$src" --update)"; check "$src"
    inc_sl+=("${out%% *}")
    rm -rf "$dest/a"
    if [ -n "${SEALINK_B:-}" ]; then
      # The other build too, from the same old copy.
      cp -a "$work/base" "$dest/a"
      sync
      warm "$src"
      out="$(SL="$SEALINK_B" run_sealink "$src" --update)"; check "$src"
      inc_b+=("${out%% *}")
      printf '%-4s %-8s %10.3f\n' "$i" sealink-b "${inc_b[-1]}"
      rm -rf "$dest/a"
    fi
    mv "$work/base" "$dest/a"
    warm "$src"
    out="$(run_rsync "$src")"; check "$src"
    inc_rs+=("${out%% *}")
    printf '%-4s %-8s %10.3f\n%-4s %-8s %10.3f\n' "$i" sealink "${inc_sl[-1]}" "$i" rsync "${inc_rs[-1]}"
  done
  ms=$(median "${inc_sl[@]}")
  mr=$(median "${inc_rs[@]}")
  awk -v s="$ms" -v r="$mr" 'BEGIN { printf "median: sealink %.3f s, rsync %.3f s (sealink %.2fx rsync'\''s speed; target >= 1)\n", s, r, r / s }'
  if [ -n "${SEALINK_B:-}" ]; then
    awk -v s="$(median "${inc_b[@]}")" -v r="$mr" 'BEGIN { printf "median: sealink-b %.3f s (%.2fx rsync'\''s speed)\n", s, r / s }'
  fi
fi
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
