"""Instructions per work request from two callgrind runs of per_wr.py (K and 3K rounds),
split by where they ran: the bindings (the package's extension module), CPython, libc,
and efa-sim (the software device and its libefa stand-in, which hardware would replace).
One-time costs cancel in the difference.

Usage: python cg_split.py OUT_K OUT_3K K BATCH
"""

import collections
import re
import subprocess
import sys


def exclusive(path):
    """Exclusive instruction counts per `file:function [object]` line."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", path],
        capture_output=True, text=True, check=True,
    ).stdout
    counts = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            counts[m.group(2)] = int(m.group(1).replace(",", ""))
    return counts


def part(key):
    if "efa-sim/src" in key or "libefa_sim" in key or "efa_sim::" in key:
        return "efa-sim"
    if "libpython" in key or "/Python/" in key or "/Objects/" in key or "/Include/" in key:
        return "CPython"
    if "libc.so" in key or "ld-linux" in key:
        return "libc"
    if "numpy" in key:  # the array benchmark's slicing and status check (bench/arrays.py)
        return "numpy"
    return "bindings"


def main():
    one, three, k, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    a, b = exclusive(one), exclusive(three)
    wrs = 2 * k * batch
    split = collections.Counter()
    for key in set(a) | set(b):
        split[part(key)] += b.get(key, 0) - a.get(key, 0)
    total = sum(split.values())
    print("  total %6.0f instructions per WR: " % (total / wrs) + ", ".join(
        "%s %.0f" % (name, split[name] / wrs) for name in ("bindings", "CPython", "libc", "efa-sim", "numpy")
        if name != "numpy" or split[name]))


if __name__ == "__main__":
    main()
