"""Completion events as the package keeps them: `CQ.ack_events` refuses to acknowledge
more events than `get_cq_event` returned for that CQ, and `req_notify(solicited_only=True)`
raises the EFA provider's EOPNOTSUPP; a CQ can be made on a channel while another thread
waits on it."""

import errno
import threading
import time

import pytest

import efa
from conftest import ALL, QKEY, poll_n, send_wr


def _arm_and_write(pd, pair, cq):
    """Arms `cq` and posts one RDMA write that completes on it; returns the QP and the
    write's two regions, which the caller keeps until the write completed (a region
    deregistered under an outstanding WR fails it: strict mode runs the write late)."""
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64, max_recv_wr=64))
    qp.prepare(qkey=QKEY)
    ms = efa.reg_tensor(pd, bytearray(8), 0)
    md = efa.reg_tensor(pd, bytearray(8), ALL)
    cq.req_notify()
    qp.post_send(send_wr(1, ms.sge(8), pair.to_b, efa.WROpcode.RDMA_WRITE,
                         remote_addr=md.addr, rkey=md.rkey))
    return qp, (ms, md)


def _one_event(ctx, pd, pair, ch, cq):
    """Arms `cq`, completes one RDMA write on it and returns `ch.get_cq_event()`."""
    qp, regions = _arm_and_write(pd, pair, cq)
    got = ch.get_cq_event()
    assert poll_n(cq, 1)[0].is_success
    qp.close()
    del regions  # only now: the write has completed
    return got


def test_ack_events_refuses_more_than_were_received(ctx, pd, pair):
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(256, channel=ch)
    other = ctx.create_cq(256, channel=ch)
    with pytest.raises(ValueError, match="cannot acknowledge more CQ events than were received"):
        cq.ack_events()
    assert _one_event(ctx, pd, pair, ch, cq) is cq
    with pytest.raises(ValueError, match="2 acknowledged, 1 received"):
        cq.ack_events(2)
    with pytest.raises(ValueError, match="cannot acknowledge more"):
        other.ack_events(1)  # the event was this CQ's, not the other's
    cq.ack_events(0)
    cq.ack_events(1)
    with pytest.raises(ValueError, match="cannot acknowledge more"):
        cq.ack_events(1)  # already acknowledged
    assert _one_event(ctx, pd, pair, ch, cq) is cq
    assert _one_event(ctx, pd, pair, ch, cq) is cq
    cq.ack_events(2)
    for c in (cq, other, ch):
        c.close()


def test_solicited_only_notification_raises_the_providers_eopnotsupp(ctx, pd, pair):
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(256, channel=ch)
    with pytest.raises(efa.EfaError) as e:
        cq.req_notify(solicited_only=True)
    assert e.value.errno == errno.EOPNOTSUPP and e.value.operation == "ibv_req_notify_cq"
    # The CQ stays usable: a plain request still arms it.
    assert _one_event(ctx, pd, pair, ch, cq) is cq
    cq.ack_events(1)
    cq.close()
    ch.close()


def test_a_cq_can_be_made_on_a_channel_another_thread_waits_on(ctx, pd, pair):
    ch = ctx.create_comp_channel()
    woke = []
    t = threading.Thread(target=lambda: woke.append(ch.get_cq_event()), daemon=True)
    t.start()
    try:
        time.sleep(0.2)  # the thread is blocked in get_cq_event, without the GIL
        cq = ctx.create_cq(256, channel=ch)  # was a PanicException (channel borrowed)
        qp, regions = _arm_and_write(pd, pair, cq)
    finally:
        t.join(10)
    assert woke == [cq]  # the waiter is handed the CQ made while it waited
    cq.ack_events(1)
    assert poll_n(cq, 1)[0].is_success
    qp.close()
    del regions  # only now: the write has completed
    cq.close()
    ch.close()
