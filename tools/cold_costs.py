#!/usr/bin/env python3
"""cold_costs.py: the FLASHCL_TEST_COLD_SECONDS table (tests/CMakeLists.txt) from a cold run's ctest output.

Usage: python3 tools/cold_costs.py CTEST_OUTPUT [MIN_SECONDS]
CTEST_OUTPUT is what `ctest --test-dir build -j2` printed on a tree whose kernel caches were empty (build/pocl-cache,
build/mesa-cache, build/flashcl-cache removed), or build/Testing/Temporary/LastTest.log of such a run. Prints the
tests of MIN_SECONDS (default 2) or more, slowest first, as the lines to paste into the table.
"""
import re
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    floor = float(sys.argv[2]) if len(sys.argv) == 3 else 2.0
    seconds = {}
    with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
        for line in log:
            # "12/299 Test  #16: split_kv_pocl ....   Passed    7.07 sec"
            match = re.search(r"Test +#\d+: (\S+) .*?([\d.]+) sec", line)
            if match:
                seconds[match.group(1)] = float(match.group(2))
    if not seconds:
        sys.exit("no test times found in " + sys.argv[1])
    entries = [f"{name}={round(t)}" for name, t in sorted(seconds.items(), key=lambda x: -x[1]) if t >= floor]
    line = "   "
    for entry in entries:
        if len(line) + 1 + len(entry) > 116:
            print(line)
            line = "   "
        line += " " + entry
    print(line)


if __name__ == "__main__":
    main()
