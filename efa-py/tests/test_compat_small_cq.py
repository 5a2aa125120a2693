"""Compatibility with the `efa` package: CQs smaller than their QPs' depths.

libefa and the package create a QP with default caps (128 sends, 128 receives) on a
small CQ shared by both queues. This package creates it too, and bounds the work
requests outstanding on each CQ by its free entries at post time: a post that could
overflow the CQ raises `EfaError` with `ENOMEM` (a full queue, as libefa reports a full
work queue), so no completion is ever lost."""

import errno

import pytest

import efa
from conftest import ALL, QKEY, poll_n, send_wr


@pytest.mark.parametrize("ext", [False, True])
@pytest.mark.parametrize("cqe", [16, 64])
def test_default_caps_on_a_small_shared_cq(ctx, pd, cqe, ext):
    with (ctx.create_cq_ex if ext else ctx.create_cq)(cqe) as cq:
        qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq))
        assert qp.state == efa.QPState.RESET
        qp.to_init(qkey=QKEY)
        qp.to_rtr()
        qp.to_rts(psn=3)
        assert qp.state == efa.QPState.RTS
        attrs, cap = qp.query()
        # The QP's depths stay what was asked for; the CQ is what bounds the posts.
        assert cap.max_send_wr >= 128 and cap.max_recv_wr >= 128
        qp.close()
        srd = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq))
        assert srd.prepare(qkey=QKEY, rnr_retry=7) is srd
        srd.close()
        ud = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, qp_type=efa.QPType.UD))
        assert ud.prepare(qkey=QKEY) is ud
        ud.close()


def _loopback(ctx, pd, cq):
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    me = efa.EndpointInfo.from_bytes(efa.local_endpoint_info(qp, qkey=QKEY).to_bytes()).peer(pd)
    return qp, me


@pytest.mark.parametrize("ext", [False, True])
def test_posts_beyond_the_cqs_free_entries_are_refused_and_nothing_is_lost(ctx, pd, ext):
    with (ctx.create_cq_ex if ext else ctx.create_cq)(8) as cq:
        n = cq.cqe
        qp, me = _loopback(ctx, pd, cq)
        buf = bytearray(64 * n)
        mr = efa.reg_tensor(pd, buf, ALL)
        half = n // 2
        qp.post_recv([efa.RecvWR(wr_id=100 + i, sg_list=[mr.sge(64, 64 * i)]) for i in range(half)])
        qp.post_send([send_wr(i, mr.sge(8), me) for i in range(n - half)])
        # The CQ is now spoken for: one more request could overflow it.
        with pytest.raises(efa.EfaError) as e:
            qp.post_send(send_wr(99, mr.sge(8), me))
        assert e.value.errno == errno.ENOMEM
        with pytest.raises(efa.EfaError) as e:
            qp.post_recv(efa.RecvWR(wr_id=199, sg_list=[mr.sge(64)]))
        assert e.value.errno == errno.ENOMEM
        # A refused list posts none of its requests.
        wcs = poll_n(cq, n)
        assert sorted(w.wr_id for w in wcs) == sorted(
            [100 + i for i in range(half)] + list(range(n - half)))
        assert all(w.is_success for w in wcs)
        assert cq.poll(4) == []
        # Polled entries are free again: the same again goes through.
        qp.post_recv([efa.RecvWR(wr_id=100 + i, sg_list=[mr.sge(64, 64 * i)]) for i in range(half)])
        qp.post_send([send_wr(i, mr.sge(8), me) for i in range(n - half)])
        assert len(poll_n(cq, n)) == n
        qp.close()


def test_closing_a_qp_frees_the_entries_its_requests_held(ctx, pd):
    with ctx.create_cq(8) as cq:
        n = cq.cqe
        buf = bytearray(64)
        mr = efa.reg_tensor(pd, buf, ALL)
        for _ in range(3):
            qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
            qp.post_recv([efa.RecvWR(wr_id=i, sg_list=[mr.sge()]) for i in range(n)])
            with pytest.raises(efa.EfaError):
                qp.post_recv(efa.RecvWR(wr_id=n, sg_list=[mr.sge()]))
            qp.close()


def test_separate_cqs_are_counted_apart(ctx, pd):
    with ctx.create_cq(4) as scq, ctx.create_cq(64) as rcq:
        qp = pd.create_qp(efa.QPInitAttr(send_cq=scq, recv_cq=rcq)).prepare(qkey=QKEY)
        buf = bytearray(64)
        mr = efa.reg_tensor(pd, buf, ALL)
        # Receives take the receive CQ's entries, not the send CQ's.
        qp.post_recv([efa.RecvWR(wr_id=i, sg_list=[mr.sge()]) for i in range(scq.cqe + 1)])
        qp.close()


@pytest.mark.parametrize("ext", [False, True])
def test_one_poll_of_two_qps_completions_frees_each_qps_entries(ctx, pd, ext):
    """A poll that returns completions of two QPs gives each QP's CQ entries back: a CQ
    filled by both, then drained in one poll, takes as many requests again."""
    with (ctx.create_cq_ex if ext else ctx.create_cq)(8) as cq:
        n = cq.cqe
        a, to_a = _loopback(ctx, pd, cq)
        b, to_b = _loopback(ctx, pd, cq)
        buf = bytearray(64 * n)
        mr = efa.reg_tensor(pd, buf, ALL)
        dst = efa.reg_tensor(pd, bytearray(64 * n), ALL)

        def writes(first, k, dest):
            return [efa.SendWR(wr_id=first + i, sg_list=[mr.sge(8, 8 * i)],
                               opcode=efa.WROpcode.RDMA_WRITE, send_flags=efa.SendFlags.SIGNALED,
                               remote_addr=dst.addr + 8 * i, rkey=dst.rkey, dest=dest)
                    for i in range(k)]

        for rnd in range(3):
            a.post_send(writes(1000 * rnd, n // 2, to_a))
            b.post_send(writes(1000 * rnd + 500, n - n // 2, to_b))
            with pytest.raises(efa.EfaError) as e:  # full: both QPs' requests count
                a.post_send(writes(999, 1, to_a))
            assert e.value.errno == errno.ENOMEM
            got = poll_n(cq, n)
            assert sorted(w.qp_num for w in got) == sorted(
                [a.qp_num] * (n // 2) + [b.qp_num] * (n - n // 2))
            assert all(w.status == 0 for w in got)
        for h in (a, b, to_a, to_b, mr, dst):
            h.close()
