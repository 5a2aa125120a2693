"""Instructions per work request from two callgrind runs of per_wr.py (K and 3K rounds),
split by the shared object they ran in: the bindings (the package's extension module
under site-packages/efa/), CPython (the interpreter, libpython and its lib-dynload
modules), libc (and the dynamic loader), efa-sim (the software device and its
libibverbs/libefa stand-in, libefa_sim.so, which hardware would replace) and numpy.
One-time costs cancel in the difference.

The callgrind output is read directly: every cost line counts for the object (`ob=`)
it is listed under, and the line after a `calls=` line (the inclusive cost of a call)
is skipped, so the parts add up to callgrind's total exactly. (Splitting
callgrind_annotate's per-function lines by file name instead put the Rust standard
library's functions, which both libefa_sim.so and the bindings contain, in whichever
column the name happened to match.)

Usage: python cg_split.py OUT_K OUT_3K K BATCH
"""

import collections
import re
import sys

PARTS = ("bindings", "CPython", "libc", "efa-sim", "numpy", "other")


def by_object(path):
    """Exclusive instruction counts per shared object, and the run's total."""
    names, costs, cur, after_call, total = {}, collections.Counter(), None, False, None
    name_re = re.compile(r"c?ob=\((\d+)\)(?: (.*))?$")
    with open(path) as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                if after_call:  # a call's inclusive cost: counted in the callee
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) > 1:
                    costs[cur] += int(fields[1])
                continue
            after_call = False
            if line.startswith(("ob=", "cob=")):
                m = name_re.match(line.rstrip("\n"))
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                if line.startswith("ob="):
                    cur = names[m.group(1)]
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    if total is not None and total != sum(costs.values()):
        sys.exit("cg_split: %s: parts add up to %d, callgrind's total is %d"
                 % (path, sum(costs.values()), total))
    return costs


def part(obj):
    if "libefa_sim" in obj:
        return "efa-sim"
    if "/site-packages/efa/" in obj:
        return "bindings"
    if "numpy" in obj:  # the array benchmark's slicing and status check (bench/arrays.py)
        return "numpy"
    if "libpython" in obj or "/bin/python" in obj or "/lib-dynload/" in obj:
        return "CPython"
    if re.search(r"/(libc|libm|libpthread|ld-linux[^/]*)\.so", obj):
        return "libc"
    return "other"


def main():
    one, three, k, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    a, b = by_object(one), by_object(three)
    wrs = 2 * k * batch
    split = collections.Counter()
    for obj in set(a) | set(b):
        split[part(obj or "")] += b.get(obj, 0) - a.get(obj, 0)
    total = sum(split.values())
    print("  total %6.0f instructions per WR: " % (total / wrs) + ", ".join(
        "%s %.0f" % (name, split[name] / wrs) for name in PARTS
        if name not in ("numpy", "other") or round(split[name] / wrs)))


if __name__ == "__main__":
    main()
