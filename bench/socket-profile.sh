#!/usr/bin/env bash
# Paper 003's Figure 1 today: where the sending side's time goes on each of `bench socket`'s
# paths (library, crypto-service, integrated-1, integrated), from a perf profile of each path
# alone. Samples are split by thread (the sender: the main thread and, on the crypto-service
# path, sl-service; the receiver, sl-receiver, is left out as the paper leaves out the client)
# and by what the symbol is:
#   crypto       AES-GCM and GHASH (aws-lc / ring), and the AEAD wrappers
#   copy (user)  memcpy/memmove in the process (the plaintext into the sealing buffer, the
#                crypto service's copy-in and copy-out)
#   copy (kernel) the kernel's copies of the data (copy_user*, *_copy_from_iter, ...)
#   kernel       the rest of the kernel: system calls, TCP/IP over loopback, scheduling
#   other        everything else in user space
# Left out: the receiver thread, and the bench's own set-up (the source data's generation,
# `fill_source`, and aws-lc's entropy start-up, jent_*), filled once before the timed runs.
#
# Usage: bash bench/socket-profile.sh [LAB_BINARY] [MIB] [RECORD] [OUT_CSV]
#   defaults: target/release/sealink-lab, 1024 MiB, 16384-byte records, stdout only
# Needs perf and python3.
set -euo pipefail
lab="${1:-target/release/sealink-lab}"
mib="${2:-1024}"
rec="${3:-16384}"
out="${4:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
command -v perf >/dev/null || { echo "perf is needed" >&2; exit 1; }
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# load before: $(cat /proc/loadavg)"
for path in library crypto-service integrated-1 integrated; do
  perf record -q -F 2000 -o "$tmp/$path.data" -- \
    "$lab" bench socket --only "$path" --record "$rec" --size "$mib" --runs 3 >"$tmp/$path.txt" 2>/dev/null
  perf report -i "$tmp/$path.data" --no-children --sort comm,dso,sym -F overhead,comm,dso,sym \
    --stdio 2>/dev/null >"$tmp/$path.report"
done
echo "# load after: $(cat /proc/loadavg)"
python3 - "$tmp" "$out" <<'PY'
import re, sys, os
tmp, out = sys.argv[1], sys.argv[2]
paths = ["library", "crypto-service", "integrated-1", "integrated"]
cats = ["crypto", "copy (user)", "copy (kernel)", "kernel", "other"]
crypto = re.compile(r"aes|gcm|ghash|aws_lc|ring_core|gfmul|aead|seal|open_in_place|PacketKey", re.I)
setup = re.compile(r"fill_source|SimRng|xoshiro|jent_|uint32rotl|rol64", re.I)
ucopy = re.compile(r"memcpy|memmove", re.I)
kcopy = re.compile(r"copy_user|_copy_from_iter|_copy_to_iter|copy_from_user|copy_to_user|rep_movs|memcpy|skb_copy|csum_partial_copy", re.I)
rows = []
for p in paths:
    share = dict.fromkeys(cats, 0.0)
    secs = []
    for line in open(os.path.join(tmp, p + ".txt")):
        m = re.search(r"([0-9.]+) s,", line)
        if m:
            secs.append(float(m.group(1)))
    for line in open(os.path.join(tmp, p + ".report")):
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if not m:
            continue
        pct, comm, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5)
        if comm == "sl-receiver" or setup.search(sym):
            continue
        if kind == "k":
            share["copy (kernel)" if kcopy.search(sym) else "kernel"] += pct
        elif crypto.search(sym):
            share["crypto"] += pct
        elif ucopy.search(sym):
            share["copy (user)"] += pct
        else:
            share["other"] += pct
    total = sum(share.values()) or 1.0
    secs.sort()
    med = secs[len(secs) // 2] if secs else float("nan")
    rows.append([p, med] + [100.0 * share[c] / total for c in cats])
head = "path,median_seconds," + ",".join(c.replace(" ", "_").replace("(", "").replace(")", "") + "_pct" for c in cats)
lines = [head] + [f"{r[0]},{r[1]:.3f}," + ",".join(f"{v:.1f}" for v in r[2:]) for r in rows]
print("\n".join(lines))
if out:
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
PY
