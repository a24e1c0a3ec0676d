#!/usr/bin/env python3
"""Issue 43's cost model: one TCP flow through sealink's tunnel at 1-16 cores, throughput and
CPU per bit, for the engine before issue 43 (every batch handed to the workers) and after it
(inline until the I/O thread saturates, then only the share it cannot carry, while a core is
idle). A prediction, not a measurement: `bench/tunnels-device.sh` measures it on a lent machine.

Units: "k" figures are cores per Gbit/s (core-seconds of CPU per gigabit); a hand-off's cost is
in microseconds of CPU per 64 KiB batch (one TSO super-packet on the way out, one GRO batch on
the way in; 1907 batches per second per Gbit/s per direction).

Inputs, each measured (defaults: the lent 16-core Xeon at a4f9480, issue 43's table, and
`sealink-lab bench tunnel-cores` there; override any of them on the command line):
  - one core: 4.79 Gbit/s with 0.84 busy tunnel cores (both ends, run to completion on one
    core): k1 = 0.175, the floor, with every cache shared.
  - two cores, still inline (the default up to two cores): 6.39 Gbit/s on 1.43 busy cores:
    k2 = 0.224. The difference is what a flow pays for crossing cores without any hand-off
    (the data read on one core, the sender's and receiver's stacks on others).
  - the rest of the one-core machine, 0.16 core at 4.79 Gbit/s: iperf3 and what the kernel
    runs for it outside the tunnel's threads: k_app = 0.033.
  - the sender's reader at 16 cores, with every batch handed off: 0.84 busy at 17.71 Gbit/s,
    0.047 per Gbit/s for read, split and reserve; the I/O thread also takes the flow's ACKs
    (assumed 0.005 more): k_io = 0.052 is what an I/O thread keeps when it hands everything off.
  - the old engine at 4, 8 and 16 cores (busy 3.02, 5.11, 6.53 at 8.00, 12.47, 17.71 Gbit/s):
    the busy share above k2 is the hand-offs, two per batch (out and in), which gives each
    hand-off's CPU (about 40 us). It splits into the 30 us poll every worker made after each
    item, a wake-up (3.8 us, waker and sleeper: ../shared/research/cpu-per-bit.md section 0) and
    the rest, the cache misses of a batch that moved (m, about 8.5 us).
  - the new engine's hand-off: a wake-up, the misses, and at most one 4 us poll (one worker
    polls at a time, only with an idle core): 16.3 us at most.
  - usable cores: the old engine used at most 0.82 of the cores at 4 (0.69 at 8) for the
    tunnel and iperf3 together; the new one is assumed to reach the same 0.82 and no more.

The new engine's operating point: the I/O thread hands off a fraction f of its batches (the
gauge adds a step while the thread is saturated and a core idle). The sending I/O thread's cost
per Gbit/s falls from k2/2 (all inline) to k_io (all handed off) with f, while each handed
batch adds a hand-off to the total. The flow settles at the largest throughput that both the
I/O thread (one core) and the usable cores allow, with f rising only while the thread is the
limit. Usage: python3 bench/cost-model.py [--markdown]
"""

import argparse

BATCHES_PER_GBIT = 1e9 / 8 / 65536  # 64 KiB batches per second per Gbit/s, one direction
WG_GO = {1: 1.31, 2: 2.45, 4: 3.77, 8: 6.19, 16: 6.14}
VETH = {1: 23.04, 2: 31.60, 4: 30.71, 8: 31.96, 16: 29.16}
OLD = {4: (8.00, 3.02), 8: (12.47, 5.11), 16: (17.71, 6.53)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--one-core", nargs=2, type=float, default=[4.79, 0.84], metavar=("GBPS", "BUSY"))
    p.add_argument("--two-core", nargs=2, type=float, default=[6.39, 1.43], metavar=("GBPS", "BUSY"))
    p.add_argument("--io-kept", type=float, default=0.052, help="k_io, cores per Gbit/s")
    p.add_argument("--old-spin-us", type=float, default=30.0)
    p.add_argument("--new-spin-us", type=float, default=4.0)
    p.add_argument("--wake-us", type=float, default=3.8)
    p.add_argument("--usable", type=float, default=0.82, help="share of the cores usable")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()

    k1 = a.one_core[1] / a.one_core[0]
    k_app = (1.0 - a.one_core[1]) / a.one_core[0]
    k2 = a.two_core[1] / a.two_core[0]
    per_handoff = {n: (busy / g - k2) / (2 * BATCHES_PER_GBIT) * 1e6 for n, (g, busy) in OLD.items()}
    old_us = sum(per_handoff.values()) / len(per_handoff)
    miss_us = old_us - a.old_spin_us - a.wake_us
    new_us = a.wake_us + miss_us + a.new_spin_us
    one_core_per_busy = 1 / k1

    def handoff_k(us: float) -> float:
        """Cores per Gbit/s that handing off every batch (both directions) adds."""
        return 2 * BATCHES_PER_GBIT * us * 1e-6

    print(f"k1 = {k1:.4f}, k2 = {k2:.4f} (crossing cores: +{(k2 / k1 - 1) * 100:.0f}%), "
          f"k_app = {k_app:.4f}, k_io = {a.io_kept:.4f} cores per Gbit/s")
    print("old engine, CPU per hand-off from the measured busy cores: "
          + ", ".join(f"{n} cores {us:.1f} us" for n, us in per_handoff.items())
          + f"; mean {old_us:.1f} = {a.old_spin_us:.0f} poll + {a.wake_us} wake + {miss_us:.1f} misses")
    print(f"new engine, CPU per hand-off: at most {new_us:.1f} us "
          f"({a.wake_us} wake + {miss_us:.1f} misses + {a.new_spin_us:.0f} poll)")
    print()

    rows = []
    for n in (1, 2, 4, 8, 16):
        if n <= 2:
            # Inline by default up to two cores: the measured figures are the model's inputs.
            g, busy = a.one_core if n == 1 else a.two_core
            f = 0.0
        else:
            usable = a.usable * n
            best = (0.0, 0.0)
            steps = 1000
            for i in range(steps + 1):
                f = i / steps
                thread = 1 / (k2 / 2 - f * (k2 / 2 - a.io_kept))
                cpu = usable / (k2 + k_app + f * handoff_k(new_us))
                x = min(thread, cpu)
                if x > best[0] + 1e-9:
                    best = (x, f)
                if thread >= cpu:
                    break  # the thread is no longer the limit: the gauge stops adding
            g, f = best
            busy = g * (k2 + f * handoff_k(new_us))
        old = OLD.get(n)
        rows.append((n, g, f, busy, g / busy, g / busy / one_core_per_busy, g / WG_GO[n], g / VETH[n], old))

    head = ("cores", "Gbit/s", "handed off", "busy cores", "Gbit/s per busy core", "of 1 core",
            "x wg-go", "of veth", "old engine measured (Gbit/s, busy, per busy core)")
    fmt = "| " + " | ".join(["{}"] * len(head)) + " |" if a.markdown else "  ".join(["{:>10}"] * (len(head) - 1)) + "  {}"
    if a.markdown:
        print(fmt.format(*head))
        print("|" + "---:|" * (len(head) - 1) + "---|")
    else:
        print(fmt.format(*head))
    for n, g, f, busy, per, of1, xwg, ofveth, old in rows:
        o = f"{old[0]:.2f}, {old[1]:.2f}, {old[0] / old[1]:.2f}" if old else "(inline: measured, the input)"
        print(fmt.format(n, f"{g:.2f}", f"{f:.2f}", f"{busy:.2f}", f"{per:.2f}", f"{of1 * 100:.0f}%",
                         f"{xwg:.2f}x", f"{ofveth * 100:.0f}%", o))


if __name__ == "__main__":
    main()
