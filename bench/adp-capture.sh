#!/usr/bin/env bash
# Paper 002 on a real capture: records the traffic of real transfers between two network
# namespaces with tcpdump, then runs `sealink-lab bench adp --pcap` on it (issue 32).
#
# The mix, all at once on one veth pair, for SECONDS (default 20):
#   - bulk TCP: a 4 MiB file fetched over HTTP (python3 http.server) every 2 s;
#   - interactive TCP: a session of short lines (16-120 bytes) with 20-200 ms think time and an
#     echo of each, as a remote shell would;
#   - request/response UDP: 64-byte queries with 300-1200-byte answers every 10-50 ms, as DNS
#     or an RPC protocol would (port 2049 is left out: no NFS server here);
#   - ping every 200 ms.
# The capture (snap length 128: the bench reads sizes from the IP and transport headers) goes to
# OUTDIR/capture.pcap, the bench's report and CSVs to OUTDIR/adp.
# Usage: sudo bash bench/adp-capture.sh SEALINK-LAB OUTDIR [SECONDS]
# Needs: ip (iproute2), tcpdump, python3.
set -euo pipefail
lab="$(realpath "${1:?usage: adp-capture.sh SEALINK-LAB OUTDIR [SECONDS]}")"
out="${2:?usage: adp-capture.sh SEALINK-LAB OUTDIR [SECONDS]}"
secs="${3:-20}"
for t in ip tcpdump python3; do
  command -v "$t" >/dev/null || { echo "adp-capture: $t is needed" >&2; exit 1; }
done
mkdir -p "$out"
out="$(realpath "$out")"
work="$(mktemp -d /tmp/sealink-adpcap.XXXXXX)"
cleanup() {
  set +e
  ip netns pids acapa 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns pids acapb 2>/dev/null | xargs -r kill 2>/dev/null
  sleep 0.3
  ip netns del acapa 2>/dev/null
  ip netns del acapb 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cleanup; mkdir -p "$work"

ip netns add acapa; ip netns add acapb
ip link add acap-a netns acapa type veth peer name acap-b netns acapb
for n in a b; do ip -n acap$n link set lo up; ip -n acap$n link set acap-$n up; done
ip -n acapa addr add 10.93.0.1/24 dev acap-a
ip -n acapb addr add 10.93.0.2/24 dev acap-b

# Servers in b: HTTP for the bulk fetches, an echo for the interactive session, a UDP responder.
head -c $((4 << 20)) /dev/urandom >"$work/file.bin"
(cd "$work" && ip netns exec acapb python3 -m http.server 8080 --bind 10.93.0.2 >/dev/null 2>&1 &)
ip netns exec acapb python3 - >/dev/null 2>&1 <<'PY' &
import socket, threading, random
def echo():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.93.0.2", 2222)); s.listen(4)
    while True:
        c, _ = s.accept()
        threading.Thread(target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")], daemon=True).start()
def rpc():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("10.93.0.2", 5353))
    while True:
        _, a = u.recvfrom(2048); u.sendto(bytes(random.randint(300, 1200)), a)
threading.Thread(target=echo, daemon=True).start()
rpc()
PY
disown
sleep 1

ip netns exec acapa tcpdump -i acap-a -s 128 -w "$out/capture.pcap" -U >/dev/null 2>"$work/tcpdump.log" &
tcpd=$!
sleep 1

# Clients in a, all for SECONDS.
ip netns exec acapa python3 - "$secs" <<'PY' &
import socket, time, random, sys, urllib.request, threading
end = time.time() + float(sys.argv[1])
rnd = random.Random(2)
def bulk():
    while time.time() < end:
        urllib.request.urlopen("http://10.93.0.2:8080/file.bin", timeout=10).read()
        time.sleep(2)
def shell():
    s = socket.create_connection(("10.93.0.2", 2222)); s.settimeout(5)
    while time.time() < end:
        line = bytes(rnd.randint(16, 120)); s.sendall(line)
        got = 0
        while got < len(line): got += len(s.recv(4096))
        time.sleep(rnd.uniform(0.02, 0.2))
def rpc():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
    while time.time() < end:
        u.sendto(bytes(64), ("10.93.0.2", 5353)); u.recvfrom(2048)
        time.sleep(rnd.uniform(0.01, 0.05))
ts = [threading.Thread(target=f) for f in (bulk, shell, rpc)]
[t.start() for t in ts]; [t.join() for t in ts]
PY
clients=$!
ip netns exec acapa ping -q -i 0.2 -w "$secs" 10.93.0.2 >/dev/null || true
wait "$clients"
sleep 1
kill -INT "$tcpd"; wait "$tcpd" || true
echo "capture: $out/capture.pcap ($(stat -c %s "$out/capture.pcap") bytes; $(tail -1 "$work/tcpdump.log" 2>/dev/null))"

"$lab" bench adp --pcap "$out/capture.pcap" --out "$out/adp"
