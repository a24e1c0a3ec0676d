#!/usr/bin/env python3
"""Plain, unencrypted TCP file copy: the baseline of bench/compare-scp.sh.

  plain-tcp-copy.py recv PORT OUTFILE     # accepts one connection, writes what arrives
  plain-tcp-copy.py send HOST PORT FILE   # sends FILE with sendfile(2)

Both sides use the kernel's fast paths (sendfile on the sender, recv_into a reused 4 MiB buffer
on the receiver), so this is what a copy costs without any crypto.
"""
import os
import socket
import sys
import time


def recv(port, out):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(port)))
    ls.listen(1)
    print("ready", flush=True)
    c, _ = ls.accept()
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    n = 0
    with open(out, "wb") as f:
        while True:
            k = c.recv_into(buf)
            if k == 0:
                break
            f.write(view[:k])
            n += k
    c.sendall(b"ok")
    c.close()


def send(host, port, path):
    t = time.monotonic()
    s = socket.create_connection((host, int(port)))
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        sent = s.sendfile(f)
    s.shutdown(socket.SHUT_WR)
    if s.recv(2) != b"ok" or sent != size:
        sys.exit("plain copy failed")
    dt = time.monotonic() - t
    print(f"sent {size} bytes in {dt:.3f} s ({size * 8 / dt / 1e9:.2f} Gbit/s)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["recv"]:
        recv(*sys.argv[2:4])
    elif sys.argv[1:2] == ["send"]:
        send(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
