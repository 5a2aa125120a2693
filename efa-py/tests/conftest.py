"""Fixtures: one device context, a PD, a CQ and two SRD QPs in RTS that can reach each
other (AHs both ways, as EFA's RDMA needs)."""

import gc
import time

import pytest

import efa

QKEY = 0x1234


def poll_n(cq, n, timeout=5.0):
    """Polls until `n` completions arrived (or fails the test after `timeout`)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        got += cq.poll(n - len(got))
        if time.monotonic() > deadline:
            pytest.fail("only %d of %d completions after %ss: %r" % (len(got), n, timeout, got))
    return got


@pytest.fixture
def ctx():
    with efa.get_efa_device_list()[0].open() as c:
        yield c
        # A context closes only once what was made from it is gone (as in the package);
        # objects a test's frame kept in a reference cycle (`pytest.raises(...) as e`)
        # go with the cycle collector.
        gc.collect()


@pytest.fixture
def pd(ctx):
    with ctx.alloc_pd() as p:
        yield p


@pytest.fixture
def cq(ctx):
    with ctx.create_cq(1024) as c:
        yield c


class Pair:
    def __init__(self, ctx, pd, cq, **attr):
        self.ctx, self.pd, self.cq = ctx, pd, cq
        self.a = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
        self.b = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, **attr)).prepare(qkey=QKEY)
        wire_b = efa.local_endpoint_info(self.b, qkey=QKEY).to_bytes()
        wire_a = efa.local_endpoint_info(self.a, qkey=QKEY).to_bytes()
        self.to_b = efa.EndpointInfo.from_bytes(wire_b).peer(pd)
        self.to_a = efa.EndpointInfo.from_bytes(wire_a).peer(pd)


@pytest.fixture
def pair(ctx, pd, cq):
    p = Pair(ctx, pd, cq)
    yield p
    for handle in (p.a, p.b, p.to_a, p.to_b):
        handle.close()


ALL = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ


def send_wr(wr_id, sge, dest, opcode=efa.WROpcode.SEND, **kw):
    return efa.SendWR(wr_id=wr_id, sg_list=[sge], opcode=opcode,
                      send_flags=efa.SendFlags.SIGNALED, dest=dest, **kw)
