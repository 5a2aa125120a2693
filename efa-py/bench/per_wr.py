"""Per-work-request cost of post + poll: 64-byte RDMA writes between two SRD QPs of one
process, in batches of 1 and 32, through the `efa` API (whichever package provides it:
efa-rs or the `efa` package from PyPI run the same lines). Prints one JSON object.

Usage: python per_wr.py [--seconds S] [--batches 1,32] [--rounds K]

--rounds K runs exactly K rounds per batch size after the warm-up, untimed (for an
instruction counter: scripts/callgrind-python.sh).
"""

import argparse
import ctypes
import json
import time

import efa

QKEY = 0x1234
SIZE = 64


def setup(cq_depth, send_depth, n):
    """Two SRD QPs of one process on one CQ of `cq_depth`, each reaching the other, and
    `n`-byte source and target regions; then the handles to close when done, and what
    must stay alive until then (the buffers the MRs name, the AH towards `a`)."""
    ctx = efa.get_efa_device_list()[0].open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(cq_depth)
    attr = dict(max_send_wr=send_depth, max_recv_wr=16)
    a = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
    b = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
    to_b = efa.local_endpoint_info(b, qkey=QKEY).peer(pd)
    _to_a = efa.local_endpoint_info(a, qkey=QKEY).peer(pd)  # EFA: the target needs an AH
    # ctypes arrays: both packages register an integer address and length.
    src, dst = (ctypes.c_char * n)(), (ctypes.c_char * n)()
    access = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
    ms = pd.reg_mr(ctypes.addressof(src), n, access)
    md = pd.reg_mr(ctypes.addressof(dst), n, access)
    return cq, a, to_b, ms, md, (ms, md, a, b), (src, dst, _to_a)


def measure(rounds, batch, seconds, exact_rounds, warm_up, first_k, handles):
    """Nanoseconds per work request of `rounds(k)` (k rounds of `batch` requests), timed
    for about `seconds` after `warm_up` rounds; with `exact_rounds`, that many rounds
    untimed and None. Closes `handles` afterwards."""
    rounds(warm_up)
    if exact_rounds is not None:
        rounds(exact_rounds)
        result = None
    else:
        k, spent = first_k, 0.0
        while spent < 0.2:
            t = time.perf_counter()
            rounds(k)
            spent = time.perf_counter() - t
            k *= 2
        k = max(1, int(k / 2 * seconds / spent))
        t = time.perf_counter()
        rounds(k)
        spent = time.perf_counter() - t
        result = spent / (k * batch) * 1e9
    for h in handles:
        h.close()
    return result


def run(batch, seconds, exact_rounds=None):
    cq, a, to_b, ms, md, handles, _keep = setup(1024, 256, SIZE * batch)
    wrs = [
        efa.SendWR(wr_id=i, sg_list=[ms.sge(SIZE, SIZE * i)], opcode=efa.WROpcode.RDMA_WRITE,
                   send_flags=efa.SendFlags.SIGNALED, remote_addr=md.addr + SIZE * i,
                   rkey=md.rkey, dest=to_b)
        for i in range(batch)
    ]
    post = wrs[0] if batch == 1 else wrs

    def rounds(k):
        for _ in range(k):
            a.post_send(post)
            got = 0
            while got < batch:
                for wc in cq.poll(batch):
                    if wc.status:
                        raise RuntimeError("failed completion %r" % wc)
                    got += 1

    return measure(rounds, batch, seconds, exact_rounds, 200, 100, handles)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--rounds", type=int, default=None)
    args = p.parse_args()
    out = {"package": efa.__file__}
    for b in (int(x) for x in args.batches.split(",")):
        if args.rounds is not None:
            run(b, args.seconds, args.rounds)
            continue
        out["ns_per_wr_batch_%d" % b] = round(run(b, args.seconds), 1)
    if args.rounds is None:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
