"""Instructions per work request from two callgrind runs of per_wr.py (K and 3K rounds),
split by where they ran: the bindings (the package's extension module), CPython, libc,
and efa-sim (the software device and its libefa stand-in, which hardware would replace).
One-time costs cancel in the difference.

Usage: python cg_split.py OUT_K OUT_3K K BATCH
"""

import collections
import re
import sys


def exclusive(path):
    """Exclusive instruction counts per `function [object]`, read from the callgrind
    output itself: every function is charged to the object its code is in.
    (callgrind_annotate names the object only on the first of a function's lines, so a
    function of efa-sim's library with code inlined from Rust's std, such as its
    thread-local accessors, reads there as an object-less std function: bindings.)"""
    names = {"ob": {}, "fn": {}}
    obj = fn_obj = fn = None
    counts = {}
    after_call = False
    with open(path) as f:
        for line in f:
            head = line[:3]
            if head in ("ob=", "fn=", "cob", "cfn"):
                m = re.match(r"^c?(ob|fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
                if m:
                    kind, ident, name = m.groups()
                    if name is not None:
                        names[kind][ident] = name
                    if line.startswith("ob="):
                        obj = names["ob"].get(ident, "???")
                    elif line.startswith("fn="):
                        fn, fn_obj = names["fn"].get(ident, "???"), obj
                continue
            if line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
                continue
            if line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) >= 2 and fn is not None:
                    key = "%s [%s]" % (fn, fn_obj)
                    counts[key] = counts.get(key, 0) + int(fields[1])
    return counts


def part(key):
    obj = key.rsplit(" [", 1)[1] if " [" in key else ""
    if "efa-sim/src" in key or "libefa_sim" in obj or "efa_sim::" in key:
        return "efa-sim"
    if "libpython" in obj or "/bin/python" in obj or "lib-dynload" in obj or "/Python/" in key \
            or "/Objects/" in key or "/Include/" in key:
        return "CPython"
    if any(lib in obj for lib in ("libc.so", "ld-linux", "libm.so", "libpthread", "libgcc_s")):
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
