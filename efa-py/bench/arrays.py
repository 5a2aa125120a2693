"""Per-work-request cost of the array form (efa.post_array + efa.poll_into, efa-rs only):
the same 64-byte RDMA writes between two SRD QPs of one process as per_wr.py, 1024 per
post_array call, prepared once as numpy arrays; completions polled into a preallocated
(1024, 4) uint64 array and checked with numpy. Prints one JSON object.

Usage: python arrays.py [--seconds S] [--batch N] [--rounds K]

--rounds K runs exactly K rounds after the warm-up, untimed (for an instruction
counter: scripts/callgrind-python.sh array).
"""

import argparse
import json
import os

# numpy's BLAS threads would spin beside the loop (and count in callgrind): one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import efa
import per_wr  # noqa: E402 (beside this script: the pair of QPs and the timing)

SIZE = per_wr.SIZE


def run(batch, seconds, exact_rounds=None):
    # The same pair of QPs and regions as per_wr.py (its CQ and send queue sized for one
    # call's batch).
    cq, a, to_b, ms, md, handles, _keep = per_wr.setup(2 * batch, batch, SIZE * batch)
    offsets = np.arange(batch, dtype=np.uint64) * SIZE
    lengths = np.full(batch, SIZE, dtype=np.uint32)
    remote = (md.addr, md.rkey, md.length)
    out = np.zeros((batch, 4), dtype=np.uint64)

    def rounds(k):
        for _ in range(k):
            posted = efa.post_array(a, to_b, ms, remote, offsets, offsets, lengths)
            got = 0
            while got < posted:
                got += efa.poll_into(cq, out[got:])
            if out[:, 1].any():
                raise RuntimeError("failed completion: %r" % out[out[:, 1] != 0][:1])

    return per_wr.measure(rounds, batch, seconds, exact_rounds, 20, 10, handles)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=None)
    args = p.parse_args()
    if args.rounds is not None:
        run(args.batch, args.seconds, args.rounds)
        return
    ns = run(args.batch, args.seconds)
    print(json.dumps({"package": efa.__file__, "ns_per_wr_array_%d" % args.batch: round(ns, 1)}))


if __name__ == "__main__":
    main()
