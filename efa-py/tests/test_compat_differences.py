"""Deliberate differences from the `efa` package (README, "Differences"), pinned where no
other test of the suite does."""

import pytest

import efa
from conftest import ALL, QKEY, poll_n, send_wr


def test_qpinitattr_takes_cq_objects_only(ctx):
    # The package's QPInitAttr is a plain class (create_qp raises); this one checks types.
    cq = ctx.create_cq(16)
    with pytest.raises(TypeError):
        efa.QPInitAttr(send_cq="not a cq", recv_cq=cq)
    cq.close()


def test_create_ah_ignores_sgid_index_and_port(ctx, pd):
    # EFA has one port and one GID: the AH reaches the same device whatever they say.
    gid = ctx.query_gid()
    a, b = pd.create_ah(gid), pd.create_ah(gid, sgid_index=3, port_num=2)
    assert a.ahn == b.ahn  # one AH number per destination GID and PD
    a.close()
    b.close()


def test_create_cq_ex_reports_every_standard_field_whatever_wc_flags_ask(ctx, pd):
    cq = ctx.create_cq_ex(64, wc_flags=0)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    me = efa.local_endpoint_info(qp, qkey=QKEY).peer(pd)
    src, dst = bytearray(b"0123456789" + bytes(6)), bytearray(16)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    qp.post_recv(efa.RecvWR(wr_id=1, sg_list=[md.sge()]))
    qp.post_send(send_wr(2, ms.sge(10), me))
    wcs = {w.wr_id: w for w in poll_n(cq, 2)}
    assert wcs[1].byte_len == 10 and wcs[1].src_qp == qp.qp_num and wcs[1].qp_num == qp.qp_num
    for h in (ms, md, me, qp, cq):
        h.close()


def test_a_pd_closes_while_its_objects_live_and_they_keep_working(ctx, cq):
    pd = ctx.alloc_pd()
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    me = efa.local_endpoint_info(qp, qkey=QKEY).peer(pd)
    src, dst = bytearray(b"kept" + bytes(4)), bytearray(8)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    pd.close()  # the package raises EBUSY here; the objects hold the PD
    assert pd.closed
    qp.post_recv(efa.RecvWR(wr_id=1, sg_list=[md.sge()]))
    qp.post_send(send_wr(2, ms.sge(4), me))
    assert all(w.is_success for w in poll_n(cq, 2)) and bytes(dst[:4]) == b"kept"
    for h in (ms, md, me, qp):
        h.close()
