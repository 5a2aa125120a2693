"""Per-work-request cost of the array form (efa.post_array + efa.poll_into, efa-rs only):
the same 64-byte RDMA writes between two SRD QPs of one process as per_wr.py, 1024 per
post_array call, prepared once as numpy arrays; completions polled into a preallocated
(1024, 4) uint64 array and checked with numpy. Prints one JSON object.

Usage: python arrays.py [--seconds S] [--batch N] [--rounds K]

--rounds K runs exactly K rounds after the warm-up, untimed (for an instruction
counter: scripts/callgrind-python.sh array).
"""

import argparse
import ctypes
import json
import os
import time

# numpy's BLAS threads would spin beside the loop (and count in callgrind): one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

import efa

QKEY = 0x1234
SIZE = 64


def run(batch, seconds, exact_rounds=None):
    ctx = efa.get_efa_device_list()[0].open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(2 * batch)
    attr = dict(max_send_wr=batch, max_recv_wr=16)
    a = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
    b = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
    to_b = efa.local_endpoint_info(b, qkey=QKEY).peer(pd)
    _to_a = efa.local_endpoint_info(a, qkey=QKEY).peer(pd)  # EFA: the target needs an AH
    n = SIZE * batch
    # ctypes arrays registered by address and length, as per_wr.py does.
    src, dst = (ctypes.c_char * n)(), (ctypes.c_char * n)()
    access = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
    ms = pd.reg_mr(ctypes.addressof(src), n, access)
    md = pd.reg_mr(ctypes.addressof(dst), n, access)
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

    rounds(20)  # warm up
    if exact_rounds is not None:
        rounds(exact_rounds)
        for h in (ms, md, a, b):
            h.close()
        return None
    k, spent = 10, 0.0
    while spent < 0.2:
        t = time.perf_counter()
        rounds(k)
        spent = time.perf_counter() - t
        k *= 2
    k = max(1, int(k / 2 * seconds / spent))
    t = time.perf_counter()
    rounds(k)
    spent = time.perf_counter() - t
    for h in (ms, md, a, b):
        h.close()
    return spent / (k * batch) * 1e9


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
