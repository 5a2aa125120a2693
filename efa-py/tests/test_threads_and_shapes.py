"""Gather lists, inline sends, posting from several threads, and closing a handle that a
call in another thread (running without the GIL) still uses."""

import threading
import time

import pytest

import efa
from conftest import ALL, QKEY, Pair, poll_n, send_wr


def test_gather_and_scatter_lists(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_send_sge=2, max_recv_sge=2)
    src = bytearray(b"0123456789abcdef")
    d1, d2 = bytearray(4), bytearray(16)
    ms, m1, m2 = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, d1, ALL), efa.reg_tensor(pd, d2, ALL)
    p.b.post_recv(efa.RecvWR(1, [m1.sge(), m2.sge()]))
    wr = efa.SendWR(wr_id=2, sg_list=[ms.sge(3, 0), ms.sge(4, 10)],
                    send_flags=efa.SendFlags.SIGNALED, dest=p.to_b)
    p.a.post_send(wr)
    wcs = {w.wr_id: w for w in poll_n(cq, 2)}
    assert wcs[1].byte_len == 7
    assert bytes(d1) == b"012a" and bytes(d2[:3]) == b"bcd"
    # More SGEs than the QP was created with: refused with the Rust core's words.
    with pytest.raises(efa.EfaError, match="SGE"):
        p.a.post_send(efa.SendWR(wr_id=3, sg_list=[ms.sge(1, i) for i in range(3)],
                                 send_flags=efa.SendFlags.SIGNALED, dest=p.to_b))


def test_inline_sends_copy_the_bytes_at_post_time(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_inline_data=32)
    src, dst = bytearray(b"inline!" + bytes(57)), bytearray(64)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    p.b.post_recv(efa.RecvWR(1, [md.sge()]))
    p.a.post_send(efa.SendWR(wr_id=2, sg_list=[ms.sge(7)], dest=p.to_b,
                             send_flags=efa.SendFlags.SIGNALED | efa.SendFlags.INLINE))
    src[:7] = b"changed"  # the payload was copied by the post: changing it is safe now
    poll_n(cq, 2)
    assert bytes(dst[:7]) == b"inline!"
    with pytest.raises(efa.EfaError, match="inline"):
        p.a.post_send(efa.SendWR(wr_id=3, sg_list=[ms.sge(33)], dest=p.to_b,
                                 send_flags=efa.SendFlags.SIGNALED | efa.SendFlags.INLINE))


def test_several_threads_post_to_one_qp(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_send_wr=256)
    src, dst = bytearray(b"t" * 64), bytearray(64 * 4)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    errors = []

    def worker(k):
        try:
            for i in range(50):
                p.a.post_send(send_wr(k * 1000 + i, ms.sge(16), p.to_b, efa.WROpcode.RDMA_WRITE,
                                      remote_addr=md.addr + 64 * k, rkey=md.rkey))
                time.sleep(0)
        except efa.EfaError as e:  # a full send queue is the only acceptable refusal
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    got = []
    while any(t.is_alive() for t in threads) or len(got) < 200 - 50 * len(errors):
        got += cq.poll(64)
        if len(got) >= 200:
            break
    for t in threads:
        t.join()
    assert all("queue" in str(e) for e in errors), errors
    assert all(w.is_success for w in got)
    assert all(bytes(dst[64 * k:64 * k + 16]) == b"t" * 16 for k in range(4))


def test_closing_a_channel_another_thread_waits_on_is_refused_until_it_returns(ctx, pd, pair):
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(256, channel=ch)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64, max_recv_wr=64))
    qp.prepare(qkey=QKEY)
    cq.req_notify()
    woke = []
    t = threading.Thread(target=lambda: woke.append(ch.get_cq_event()))
    t.start()
    time.sleep(0.2)  # the thread is blocked in get_cq_event, without the GIL
    with pytest.raises(efa.EfaError, match="in use by a call in another thread") as e:
        ch.close()
    assert e.value.errno == 16 and not ch.closed
    ms = efa.reg_tensor(pd, bytearray(8), 0)
    md = efa.reg_tensor(pd, bytearray(8), ALL)
    qp.post_send(send_wr(1, ms.sge(8), pair.to_b, efa.WROpcode.RDMA_WRITE,
                         remote_addr=md.addr, rkey=md.rkey))
    t.join(10)
    assert woke == [cq]
    ch.close()
    assert ch.closed
    qp.close()


def test_async_events_block_without_the_gil():
    """EFA raises no async events (efa-sim neither): the fd is quiet, and a thread waiting
    in get_async_event does not hold the GIL (this thread keeps running) nor lets its
    context be closed under it."""
    import select

    ctx = efa.get_efa_device_list()[0].open()
    assert select.select([ctx.async_fd], [], [], 0)[0] == []
    waiter = threading.Thread(target=ctx.get_async_event, daemon=True)
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive()  # blocked in the device, and we are running: GIL released
    with pytest.raises(efa.EfaError, match="in use by a call in another thread"):
        ctx.close()
    assert ctx.query_gid()  # still open and usable meanwhile
