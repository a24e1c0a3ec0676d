#!/usr/bin/env bash
# Bulk transfer over loopback, side by side in one run: OpenSSH scp (aes128-gcm@openssh.com),
# a plain unencrypted TCP copy (bench/plain-tcp-copy.py: sendfile + recv_into), and
# `sealink send` / `sealink recv` (AES-128-GCM). Same random file in /dev/shm for all three,
# written to /dev/shm, so the disk is out of the picture; every copy is checked with cmp.
#
# Installs openssh-server from Debian's packages when sshd is missing and starts a private sshd
# on 127.0.0.1 (its own host key, an authorized key made here, nothing of the system's touched).
# Runs the three tools interleaved RUNS times and prints each run, the medians and the ratios.
#
# Environment: SIZE_MIB (2048), RUNS (5), SSH_PORT (22022), PLAIN_PORT (22023),
# SEALINK_PORT (22024), STREAMS (sealink's default when unset), SCP_FLAGS (extra scp flags, for
# example -O for the legacy scp protocol instead of SFTP, today's default).
# Usage: bash bench/compare-scp.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${SIZE_MIB:-2048}"
runs="${RUNS:-5}"
ssh_port="${SSH_PORT:-22022}"
plain_port="${PLAIN_PORT:-22023}"
sl_port="${SEALINK_PORT:-22024}"
scp_flags=()
[ -n "${SCP_FLAGS:-}" ] && read -r -a scp_flags <<<"$SCP_FLAGS"
streams=()
[ -n "${STREAMS:-}" ] && streams=(--streams "$STREAMS")

if [ ! -x /usr/sbin/sshd ]; then
  echo "installing openssh-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq openssh-server openssh-client >/dev/null
fi
command -v bc >/dev/null || apt-get install -y -qq bc >/dev/null
command -v python3 >/dev/null || { echo "python3 is needed for the plain copy" >&2; exit 1; }

cd "$root"
cargo build --release --locked -q -p sealink-cli
sealink="$root/target/release/sealink"

work="$(mktemp -d /dev/shm/sealink-scp.XXXXXX)"
pids=()
USER="${USER:-$(id -un)}"
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "writing ${size_mib} MiB of random data to $work/file" >&2
head -c "$((size_mib << 20))" /dev/urandom >"$work/file"
bytes="$(stat -c %s "$work/file")"

# --- a private sshd ---------------------------------------------------------------------------
mkdir -p /run/sshd "$work/ssh"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/client_key"
cp "$work/ssh/client_key.pub" "$work/ssh/authorized_keys"
chmod 600 "$work/ssh/authorized_keys"
cat >"$work/ssh/sshd_config" <<EOF
Port $ssh_port
ListenAddress 127.0.0.1
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
/usr/sbin/sshd -D -e -f "$work/ssh/sshd_config" 2>"$work/ssh/sshd.log" &
pids+=($!)
ssh_opts=(-q -i "$work/ssh/client_key" -P "$ssh_port" -c aes128-gcm@openssh.com
  -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
  -o Compression=no)
for _ in $(seq 50); do
  scp "${ssh_opts[@]}" "$work/ssh/client_key.pub" "$USER@127.0.0.1:$work/ssh/probe" 2>/dev/null && break
  sleep 0.1
done
if ! scp "${ssh_opts[@]}" "$work/ssh/client_key.pub" "$USER@127.0.0.1:$work/ssh/probe"; then
  echo "the private sshd does not answer; its log:" >&2
  cat "$work/ssh/sshd.log" >&2
  exit 1
fi
# --- sealink keys: host a sends as owner alice to host b --------------------------------------
mkdir -p "$work/a" "$work/b"
"$sealink" keygen host "$work/a/host.key" >/dev/null 2>&1
"$sealink" keygen owner "$work/a/owner.key" >/dev/null 2>&1
"$sealink" keygen host "$work/b/host.key" >/dev/null 2>&1
pub() { cut -d' ' -f2 "$1"; }
echo "host bob $(pub "$work/b/host.key.pub")" >"$work/a/trust"
printf 'host alice %s\nowner alice %s\n' "$(pub "$work/a/host.key.pub")" \
  "$(pub "$work/a/owner.key.pub")" >"$work/b/trust"
mkdir -p "$work/in"
SEALINK_HOME="$work/b" "$sealink" recv --listen "127.0.0.1:$sl_port" --dir "$work/in" \
  --force --quiet 2>"$work/recv.log" &
pids+=($!)
for _ in $(seq 50); do grep -q listening "$work/recv.log" && break; sleep 0.1; done

now() { date +%s.%N; }
gbps() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.2f", b * 8 / s / 1e9 }'; }
check() { cmp -s "$work/file" "$1" || { echo "copy $1 differs" >&2; exit 1; }; rm -f "$1"; }

run_scp() {
  local t0 t1
  t0=$(now)
  scp "${ssh_opts[@]}" "${scp_flags[@]}" "$work/file" "$USER@127.0.0.1:$work/out-scp"
  t1=$(now)
  check "$work/out-scp"
  echo "$t1 - $t0" | bc -l
}

run_plain() {
  local t0 t1
  python3 "$root/bench/plain-tcp-copy.py" recv "$plain_port" "$work/out-plain" >"$work/plain.ready" &
  local p=$!
  for _ in $(seq 50); do grep -q ready "$work/plain.ready" && break; sleep 0.05; done
  t0=$(now)
  python3 "$root/bench/plain-tcp-copy.py" send 127.0.0.1 "$plain_port" "$work/file" >/dev/null
  t1=$(now)
  wait "$p"
  check "$work/out-plain"
  echo "$t1 - $t0" | bc -l
}

run_sealink() {
  local t0 t1
  t0=$(now)
  SEALINK_HOME="$work/a" "$sealink" send "$work/file" "bob@127.0.0.1:$sl_port" --quiet \
    "${streams[@]}"
  t1=$(now)
  check "$work/in/file"
  echo "$t1 - $t0" | bc -l
}

declare -a t_scp t_plain t_sl
printf '%-4s %10s %10s %10s   (seconds for %d MiB)\n' run scp plain sealink "$size_mib"
for i in $(seq "$runs"); do
  t_scp+=("$(run_scp)")
  t_plain+=("$(run_plain)")
  t_sl+=("$(run_sealink)")
  printf '%-4s %10.3f %10.3f %10.3f\n' "$i" "${t_scp[-1]}" "${t_plain[-1]}" "${t_sl[-1]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { m = (NR + 1) / 2; print (NR % 2) ? a[m] : (a[NR/2] + a[NR/2+1]) / 2 }'; }
m_scp=$(median "${t_scp[@]}")
m_plain=$(median "${t_plain[@]}")
m_sl=$(median "${t_sl[@]}")

echo
printf '%-28s %9s %12s\n' tool "median s" "Gbit/s"
printf '%-28s %9.3f %12s\n' "scp aes128-gcm@openssh.com" "$m_scp" "$(gbps "$m_scp")"
printf '%-28s %9.3f %12s\n' "plain TCP copy" "$m_plain" "$(gbps "$m_plain")"
printf '%-28s %9.3f %12s\n' "sealink send (aes128-gcm)" "$m_sl" "$(gbps "$m_sl")"
echo
awk -v s="$m_scp" -v p="$m_plain" -v l="$m_sl" 'BEGIN {
  printf "sealink / plain copy: %.0f%%   (target >= 65%%)\n", p / l * 100
  printf "sealink / scp:        %.2fx  (target >= 2.4x)\n", s / l
}'
