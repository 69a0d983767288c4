#!/usr/bin/env python3
"""plot_bench.py: draws the `flashcl bench --plot` figure from saved bench JSON files.

For runs made where gnuplot is missing (the GPU machine): one PNG per JSON file
with speedup (standard time / flash time) versus N and extra device memory versus
N (log scale) for both implementations, forward and forward+backward.

Usage: python3 tools/plot_bench.py OUTDIR FILE.json [FILE.json ...]
Needs gnuplot (installed by tools/setup.sh).
"""
import json
import os
import subprocess
import sys
import tempfile


def rows(records, direction):
    by_n = {}
    for r in records:
        if r["direction"] == direction:
            by_n.setdefault(r["seqlen"], {})[r["impl"]] = r
    out = []
    for n in sorted(by_n):
        flash, std = by_n[n].get("flash"), by_n[n].get("standard")
        speedup = (std["median_ms"] / flash["median_ms"]
                   if flash and std and flash["median_ms"] and std["median_ms"] else None)
        out.append((n, speedup,
                    flash["extra_device_bytes"] if flash else None,
                    std["extra_device_bytes"] if std else None))
    return out


def value(x, floor=None):
    if x is None:
        return "NaN"
    if floor is not None and x < floor:
        return str(floor)  # log axis: 0 bytes drawn at the floor
    return repr(float(x))


def plot(json_path, out_dir):
    with open(json_path) as f:
        records = json.load(f)
    if not records:
        raise SystemExit(f"{json_path}: no records")
    first = records[0]
    title = (f"{first['device']}: d={first['head_dim']}, H={first['heads']}, "
             f"{'causal' if first['causal'] else 'not causal'}, {first['dtype']}")
    png = os.path.join(out_dir, os.path.splitext(os.path.basename(json_path))[0] + ".png")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.txt")
        directions = [d for d in ("fwd", "fwd+bwd") if any(r["direction"] == d for r in records)]
        with open(data, "w") as f:
            for d in directions:
                f.write(f"# {d}: N speedup flash_extra standard_extra\n")
                for n, s, fe, se in rows(records, d):
                    f.write(f"{n} {value(s)} {value(fe, 1024)} {value(se, 1024)}\n")
                f.write("\n\n")
        script = os.path.join(tmp, "plot.gp")
        with open(script, "w") as f:
            f.write(f"""set terminal pngcairo size 1200,480 font ',10'
set output '{png}'
set multiplot layout 1,2 title "{title}"
set logscale x 2
set xlabel 'sequence length N'
set grid
set key top left
set title 'speedup of flash over standard attention'
set ylabel 'standard time / flash time'
plot """ + ", ".join(f"'{data}' index {i} using 1:2 with linespoints title '{d}'"
                      for i, d in enumerate(directions)) + f"""
set logscale y 2
set title 'extra device memory (0 B drawn at 1 KiB)'
set ylabel 'bytes'
plot """ + ", ".join(f"'{data}' index {i} using 1:3 with linespoints title 'flash {d}', "
                      f"'{data}' index {i} using 1:4 with linespoints title 'standard {d}'"
                      for i, d in enumerate(directions)) + "\nunset multiplot\n")
        subprocess.run(["gnuplot", script], check=True)
    return png


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for path in sys.argv[2:]:
        print(plot(path, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
