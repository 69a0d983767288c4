"""Median GPU time per kernel and grid from cl_kernel_times.c's logs: lines "kernel global0 global1 ns", optionally
grouped by marker lines "## name" (a script's echo before each run). The first 3 launches of each kernel and grid
are dropped as warm-up when there are more than 6. Usage: python3 tools/probe/cl_kernel_times.py times.txt..."""
import collections
import statistics
import sys

for path in sys.argv[1:]:
    runs = collections.OrderedDict()
    run = path
    for line in open(path):
        if line.startswith("## "):
            run = line[3:].strip()
            continue
        name, g0, g1, ns = line.split()
        runs.setdefault(run, collections.OrderedDict()).setdefault((name, int(g0), int(g1)), []).append(int(ns) / 1e6)
    for run, kernels in runs.items():
        print("#", run)
        for (name, g0, g1), times in kernels.items():
            kept = times[3:] if len(times) > 6 else times
            print("  %-28s %7d %5d n=%3d median %.3f ms" % (name, g0, g1, len(times), statistics.median(kept)))
