#!/usr/bin/env python3
"""Paper 002's tables and figures over several seeds: runs `sealink-lab bench adp` once per seed
(virtual time, so each seed's tables are reproduced to the last digit) and writes, per CSV the
bench prints, one CSV with the mean, min and max across the seeds and each seed's value.

Usage: python3 bench/adp-seeds.py SEALINK OUTDIR [SEEDS] [-- EXTRA BENCH ARGS]
  e.g. python3 bench/adp-seeds.py target/release/sealink-lab docs/results/002 1,2,3,4,5

Writes OUTDIR/<table>.csv for every CSV of the run (the per-seed runs go to a temporary
directory, or to $ADP_SEEDS_KEEP/seed<N> if that is set). Rows are matched across seeds by
position; the bench writes the same rows in the same order for every seed. A column whose cells
are the same in every seed (the trace, the profile, the timeout, ...) is copied; a numeric column
that differs between seeds becomes four: <col>_mean, <col>_min, <col>_max and <col>_by_seed (the
seeds' values in seed order, separated by ';'). A non-numeric cell that differs is written as
the seeds' values separated by ';'. Used for docs/results/002 (RESULTS §24b).
"""

import csv
import os
import subprocess
import sys
import tempfile


def number(s):
    try:
        v = float(s)
    except ValueError:
        return None
    return v if v == v else None  # NaN is not summarized


def fmt(v):
    # Short and stable: up to 6 significant digits.
    return f"{v:.6g}"


def summarize(tables, seeds):
    """tables: one list of rows (header first) per seed."""
    head = tables[0][0]
    for t in tables[1:]:
        if t[0] != head or len(t) != len(tables[0]):
            raise SystemExit("the seeds' tables differ in shape: rows cannot be matched")
    rows = [list(zip(*(t[i] for t in tables))) for i in range(1, len(tables[0]))]
    # A column varies if any row's cells differ between seeds and all of them are numbers.
    varies = []
    for c in range(len(head)):
        cells = [r[c] for r in rows]
        differs = any(len(set(x)) > 1 for x in cells)
        numeric = all(all(number(v) is not None for v in x) for x in cells if len(set(x)) > 1)
        varies.append(differs and numeric)
    out_head = []
    for c, name in enumerate(head):
        if varies[c]:
            out_head += [f"{name}_mean", f"{name}_min", f"{name}_max", f"{name}_by_seed"]
        else:
            out_head.append(name)
    out = [["seeds"] + out_head]
    label = ";".join(str(s) for s in seeds)
    for r in rows:
        line = [label]
        for c, x in enumerate(r):
            if varies[c]:
                vs = [number(v) for v in x]
                if len(set(x)) == 1 and vs[0] is None:
                    line += [x[0], x[0], x[0], ";".join(x)]  # "n/a" in every seed
                elif any(v is None for v in vs):
                    line += ["", "", "", ";".join(x)]
                else:
                    line += [fmt(sum(vs) / len(vs)), fmt(min(vs)), fmt(max(vs)), ";".join(x)]
            elif len(set(x)) > 1:
                line.append(";".join(x))
            else:
                line.append(x[0])
        out.append(line)
    return out


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1 :]
    if len(args) not in (2, 3):
        raise SystemExit(__doc__)
    sealink, outdir = args[0], args[1]
    seeds = [int(s) for s in (args[2] if len(args) == 3 else "1,2,3,4,5").split(",")]
    keep = os.environ.get("ADP_SEEDS_KEEP")
    with tempfile.TemporaryDirectory() as tmp:
        base = keep or tmp
        dirs = []
        for s in seeds:
            d = os.path.join(base, f"seed{s}")
            cmd = [sealink, "bench", "adp", "--seed", str(s), "--out", d] + extra
            print("running:", " ".join(cmd), file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            dirs.append(d)
        names = sorted(n for n in os.listdir(dirs[0]) if n.endswith(".csv"))
        os.makedirs(outdir, exist_ok=True)
        for n in names:
            tables = []
            for d in dirs:
                with open(os.path.join(d, n), newline="") as f:
                    tables.append(list(csv.reader(f)))
            with open(os.path.join(outdir, n), "w", newline="") as f:
                csv.writer(f, lineterminator="\n").writerows(summarize(tables, seeds))
            print("wrote", os.path.join(outdir, n), file=sys.stderr)


if __name__ == "__main__":
    main()
