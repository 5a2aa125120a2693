"""Compatibility with the `efa` package (2026.10.22): the objects' `repr`s, attributes
and behaviour programs and tests reach (attribute classes, `EndpointInfo`, the
extension's linkage probes, MR owners, `Context.close`, `Peer`, `efa.cuda.GpuMR`)."""

import dataclasses
import errno
import re

import pytest

import efa
import efa.cuda
from conftest import ALL


def test_attribute_objects_have_the_packages_reprs(ctx, pd):
    cq = ctx.create_cq(16)
    assert re.fullmatch(r"CQAttr\(buffer_addr=0x[0-9a-f]+, entry_size=\d+, num_entries=\d+, "
                        r"doorbell_addr=0x[0-9a-f]+\)", repr(cq.query_efa()))
    mr = efa.reg_tensor(pd, bytearray(64), ALL)
    assert re.fullmatch(r"MRAttr\(ic_id_validity=0x[0-9a-f]+, recv_ic_id=\d+, "
                        r"rdma_read_ic_id=\d+, rdma_recv_ic_id=\d+\)", repr(mr.query_efa()))
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq))
    sq, rq = qp.query_wqs()
    assert re.fullmatch(r"WQAttr\(buffer_addr=0x[0-9a-f]+, entry_size=\d+, num_entries=\d+, "
                        r"max_batch=\d+\)", repr(sq))
    assert repr(qp) == "QP(qp_num=%d, qp_type=SRD)" % qp.qp_num
    ud = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, qp_type=efa.QPType.UD))
    assert repr(ud) == "QP(qp_num=%d, qp_type=UD)" % ud.qp_num
    # The package's default send operations: every one of the QP type's.
    ops = efa.QPExSendOpsFlags
    assert ud.send_ops_flags == ops.SEND | ops.SEND_WITH_IMM
    assert qp.send_ops_flags == (ops.SEND | ops.SEND_WITH_IMM | ops.RDMA_WRITE
                                 | ops.RDMA_WRITE_WITH_IMM | ops.RDMA_READ)
    for q in (qp, ud):
        q.close()
        assert repr(q) == "QP(closed=True)"
    cq.close()


def test_endpoint_info_is_the_packages_dataclass():
    assert dataclasses.is_dataclass(efa.EndpointInfo)
    assert [f.name for f in dataclasses.fields(efa.EndpointInfo)] == ["gid", "qp_num", "qkey"]
    assert efa.EndpointInfo._STRUCT.format == "!16sII" and efa.EndpointInfo._STRUCT.size == 24
    info = efa.EndpointInfo(gid=bytearray(range(16)), qp_num=7, qkey=0x1234)
    assert isinstance(info.gid, bytes)
    assert repr(info) == "EndpointInfo(gid=%r, qp_num=7, qkey=4660)" % bytes(range(16))
    assert efa.EndpointInfo.from_bytes(info.to_bytes()) == info
    with pytest.raises(ValueError, match="exactly 24 bytes"):
        efa.EndpointInfo.from_bytes(bytes(23))


def test_the_extension_reports_its_linkage():
    assert efa._efa._linked() is True
    assert efa._efa._has_dmabuf() is True


def test_reg_tensor_keeps_the_array_itself(pd):
    np = pytest.importorskip("numpy")
    arr = np.arange(1024, dtype=np.uint8)
    mr = efa.reg_tensor(pd, arr, ALL)
    assert mr.owner is arr and mr.addr == arr.ctypes.data and mr.length == 1024
    mr.close()
    assert mr.owner is None


def test_context_close_refuses_while_children_live(ctx):
    other = efa.get_efa_device_list()[0].open()
    for make in (other.alloc_pd, lambda: other.create_cq(16), other.create_comp_channel):
        child = make()
        with pytest.raises(efa.EfaError, match="open child resource") as e:
            other.close()
        assert e.value.errno == errno.EBUSY
        del e
        assert len(other.query_gid().raw) == 16  # still open
        child.close()
    other.close()
    other.close()  # idempotent
    with pytest.raises(efa.EfaError):
        other.query_device()


def test_a_peer_owns_the_ah_endpoint_info_made(ctx, pd):
    cq = ctx.create_cq(16)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=5)
    info = efa.local_endpoint_info(qp, qkey=5)
    assert info.gid == ctx.query_gid().raw and info.qp_num == qp.qp_num
    with info.peer(pd) as peer:
        ah = peer.ah
        assert ah.pd is pd and ah.ahn >= 0
        assert (peer.qp_num, peer.qkey) == (qp.qp_num, 5)
        assert repr(peer) == "Peer(qp_num=%d, qkey=0x5)" % qp.qp_num
    assert peer.ah is None
    with pytest.raises(efa.EfaError):
        ah.ahn  # closed with the peer
    qp.close()
    cq.close()


def test_gpu_mr_takes_an_mr_like_object():
    class LikeMR:  # the package's duck-typed MR: keys and close, no address
        lkey, rkey, closed = 1, 2, False

        def close(self):
            self.closed = True

    g = efa.cuda.GpuMR(LikeMR(), 0x10000, 4096)
    assert (g.addr, g.length, g.lkey, g.rkey, g.tensor) == (0x10000, 4096, 1, 2, None)
    sge = g.sge(100, offset=200)
    assert (sge.addr, sge.length, sge.lkey) == (0x10000 + 200, 100, 1)
    assert sge.owner is g
    for length, offset in [(4097, 0), (None, 5000), (-1, 0)]:
        with pytest.raises(ValueError):
            g.sge(length, offset=offset)
    g.close()
    assert g.closed and repr(g) == "GpuMR(closed=True)"



def test_device_objects_have_the_packages_reprs(ctx):
    dev = efa.get_efa_device_list()[0]
    assert repr(dev) == "Device(name=%r, guid=0x%x)" % (dev.name, dev.guid)
    assert repr(ctx) == "Context(name=%r)" % ctx.name
    a = ctx.query_device()
    assert repr(a) == "DeviceAttr(fw_ver=%r, max_qp=%d, max_cqe=%d, phys_port_cnt=%d)" % (
        a.fw_ver, a.max_qp, a.max_cqe, a.phys_port_cnt)
    e = ctx.query_efa_device()
    assert repr(e) == ("EfaDeviceAttr(max_sq_wr=%d, max_rq_wr=%d, inline_buf_size=%d, "
                       "device_caps=0x%x, max_rdma_size=%d)") % (
        e.max_sq_wr, e.max_rq_wr, e.inline_buf_size, e.device_caps, e.max_rdma_size)
    p = ctx.query_port()
    assert repr(p) == "PortAttr(state=%d, active_mtu=%d, max_msg_sz=%d)" % (
        p.state, p.active_mtu, p.max_msg_sz)


def test_a_gid_equals_its_bytes(ctx):
    gid = ctx.query_gid()
    assert gid == gid.raw and gid == bytearray(gid.raw) and gid == efa.Gid(gid.raw)
    assert gid != bytes(16) and gid != "not a gid"
    assert len({gid, efa.Gid(gid.raw), gid.raw}) == 1  # equal objects hash alike


def test_failed_completions_raise_the_packages_completion_error(pd, cq, pair):
    ms = efa.reg_tensor(pd, bytearray(8), 0)
    pair.a.post_send(efa.SendWR(wr_id=3, sg_list=[ms.sge()], opcode=efa.WROpcode.RDMA_WRITE,
                                send_flags=efa.SendFlags.SIGNALED, dest=pair.to_b,
                                remote_addr=0x1000, rkey=0xBAD))
    from conftest import poll_n
    (w,) = poll_n(cq, 1)
    assert repr(w) == "WC(wr_id=3, status=%d (%s), opcode=%d, byte_len=%d, qp_num=%d)" % (
        w.status, w.status_str, w.opcode, w.byte_len, w.qp_num)
    with pytest.raises(efa.CompletionError) as e:
        w.raise_for_status()
    err = e.value
    del e
    assert (err.wc, err.status, err.vendor_err) == (w, w.status, w.vendor_err)
    assert (err.operation, err.errno) == ("work completion", errno.EIO)
    assert str(err).startswith("[Errno 5] work completion failed: %s (status=%d, vendor_err=0x%x)"
                               % (w.status_str, w.status, w.vendor_err))
