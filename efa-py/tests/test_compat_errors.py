"""Compatibility with the `efa` package (2026.10.22): the exception each public call
raises for a bad argument, as its sources raise them (`ValueError`, `TypeError`,
`EfaError`), with the package's messages where programs match on them."""

import errno

import pytest

import efa
from conftest import ALL, QKEY


@pytest.fixture
def small_cq(ctx):
    with ctx.create_cq(16) as c:
        yield c


def test_gid_and_ahattr_refuse_a_gid_that_is_not_16_bytes(pd):
    with pytest.raises(ValueError, match="gid must be exactly 16 bytes"):
        efa.Gid(b"short")
    with pytest.raises(ValueError, match="dgid must be 16 bytes"):
        efa.AHAttr(b"too-short")
    with pytest.raises(ValueError, match="dgid must be 16 bytes"):
        pd.create_ah(b"\x01" * 15)
    # `dgid` is bytes (any bytes-like object or a Gid is taken), zeros by default.
    assert efa.AHAttr().dgid == bytes(16)
    assert efa.AHAttr(bytearray(range(16))).dgid == bytes(range(16))
    assert efa.AHAttr(efa.Gid(bytes(range(16)))).dgid == bytes(range(16))


def test_create_cq_refuses_bad_sizes_vectors_and_channels(ctx):
    for make in (ctx.create_cq, ctx.create_cq_ex):
        for cqe in (0, -1):
            with pytest.raises(ValueError, match="cqe must be positive"):
                make(cqe)
        for vector in (-1, ctx.num_comp_vectors, 10**9):
            with pytest.raises(ValueError, match="comp_vector is outside"):
                make(16, comp_vector=vector)
    with efa.get_efa_device_list()[0].open() as other:
        ch = other.create_comp_channel()
        with pytest.raises(ValueError, match="channel must belong to this context"):
            ctx.create_cq(16, channel=ch)
        ch.close()


def test_reg_mr_by_address_refuses_bad_ranges(pd):
    for addr, length, what in [(-1, 4096, "addr"), (2**64, 1, "addr"),
                               (0x1000, 0, "length"), (0x1000, -5, "length"),
                               (2**64 - 0x1000, 0x2000, "exceeds 2\\*\\*64")]:
        with pytest.raises(ValueError, match=what):
            pd.reg_mr(addr, length, ALL)


def test_sge_refuses_out_of_range_integers_with_valueerror():
    assert (efa.SGE(0xDEAD0000, 128, lkey=7).addr, efa.SGE(2**64 - 1, 0).addr) == (0xDEAD0000, 2**64 - 1)
    for args, kw, what in [((-1, 8), {}, "address"), ((2**64, 8), {}, "address"),
                           ((0, 2**32), {}, "length"), ((0, -1), {}, "length"),
                           ((0, 8), {"lkey": -1}, "lkey"), ((0, 8), {"lkey": 2**32}, "lkey"),
                           ((0, 8), {"offset": -1}, "offset"),
                           ((2**64 - 4, 8), {"offset": 8}, "plus offset")]:
        with pytest.raises(ValueError, match=what):
            efa.SGE(*args, **kw)


def test_sges_of_an_mr_stay_inside_it(pd):
    mr = efa.reg_tensor(pd, bytearray(4096), ALL)
    assert (mr.sge().length, mr.sge(100, offset=200).addr) == (4096, mr.addr + 200)
    assert mr.sge(offset=4096).length == 0
    for length, offset in [(4097, 0), (1, 4096), (None, 5000), (None, -1), (-1, 0)]:
        with pytest.raises(ValueError):
            mr.sge(length, offset=offset)
    with pytest.raises(ValueError, match="SGE range exceeds the memory region"):
        efa.SGE(mr, 8, offset=4090)
    # Made from an MR, an SGE takes its lkey unless given one.
    assert efa.SGE(mr, 8).lkey == mr.lkey and efa.SGE(mr, 8, lkey=5).lkey == 5
    mr.close()
    with pytest.raises(efa.EfaError):
        efa.SGE(mr, 8)


def test_create_qp_refuses_an_unknown_type_and_cqs_of_another_context(pd, small_cq):
    with pytest.raises(ValueError, match="EFA supports qp_type SRD or UD"):
        pd.create_qp(efa.QPInitAttr(send_cq=small_cq, recv_cq=small_cq, qp_type=2))
    with efa.get_efa_device_list()[0].open() as other:
        foreign = other.create_cq(16)
        for s, r in [(foreign, foreign), (small_cq, foreign), (foreign, small_cq)]:
            with pytest.raises(ValueError, match="CQs must belong to the PD's context"):
                pd.create_qp(efa.QPInitAttr(send_cq=s, recv_cq=r))
        foreign.close()


def test_post_send_refuses_in_the_packages_order_with_valueerror(pd, small_cq):
    qp = pd.create_qp(efa.QPInitAttr(
        send_cq=small_cq, recv_cq=small_cq,
        send_ops_flags=efa.QPExSendOpsFlags.SEND | efa.QPExSendOpsFlags.SEND_WITH_IMM,
    )).prepare(qkey=QKEY)
    peer = efa.local_endpoint_info(qp, qkey=QKEY).peer(pd)
    # An SGE naming no MR: each refusal below comes before the SGEs are looked at.
    sge = efa.SGE(0x1000, 8, lkey=1)

    def post(**kw):
        qp.post_send(efa.SendWR(wr_id=1, sg_list=[sge], send_flags=efa.SendFlags.SIGNALED, **kw))

    with pytest.raises(ValueError, match="connectionless"):
        post()
    with pytest.raises(ValueError, match="EFA supports SEND.*got opcode 99"):
        post(opcode=99, dest=peer)
    with pytest.raises(ValueError, match="opcode 0 is not enabled in this QP's send_ops_flags"):
        post(opcode=efa.WROpcode.RDMA_WRITE, remote_addr=0x2000, rkey=1, dest=peer)
    # An unsignaled send stays the package's EfaError (EINVAL).
    with pytest.raises(efa.EfaError) as e:
        qp.post_send(efa.SendWR(wr_id=1, sg_list=[sge], dest=peer))
    assert e.value.errno == errno.EINVAL
    del e
    peer.close()
    qp.close()


def test_modify_names_unknown_attributes_with_typeerror(pd, small_cq):
    qp = pd.create_qp(efa.QPInitAttr(send_cq=small_cq, recv_cq=small_cq))
    with pytest.raises(TypeError, match="unknown QP attribute\\(s\\): bogus, other"):
        qp.modify(efa.QPAttrMask.STATE, qp_state=efa.QPState.INIT, other=1, bogus=2)
    assert qp.state == efa.QPState.RESET  # nothing was applied
    qp.modify(efa.QPAttrMask.STATE | efa.QPAttrMask.PKEY_INDEX | efa.QPAttrMask.PORT
              | efa.QPAttrMask.QKEY, qp_state=efa.QPState.INIT, pkey_index=0, port_num=1,
              qkey=0x77)
    assert qp.state == efa.QPState.INIT
    qp.close()


def test_poll_and_ack_events_take_positive_counts(ctx):
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(16, channel=ch)
    for n in (0, -3):
        with pytest.raises(ValueError, match="num_entries must be positive"):
            cq.poll(n)
    with pytest.raises(ValueError, match="nevents must be positive"):
        cq.ack_events(0)
    cq.close()
    ch.close()


def test_keyword_names_are_the_packages(pd):
    buf = bytearray(4096)
    mr = efa.reg_tensor(pd, buf, ALL)
    same = pd.reg_mr(addr=mr.addr, length=4096, access=ALL)
    assert (same.addr, same.length) == (mr.addr, 4096)
    same.close()
    mr.close()


def test_reg_dmabuf_mr_refuses_bad_ranges_with_valueerror(pd):
    import os
    r, w = os.pipe()
    try:
        for offset, length, iova, what in [(-1, 4096, 0, "offset"), (0, 0, 0, "length"),
                                           (0, 2**64, 0, "length"), (0, 4096, -1, "iova"),
                                           (2**64, 4096, 0, "offset")]:
            with pytest.raises(ValueError, match=what):
                pd.reg_dmabuf_mr(offset, length, iova, r, ALL)
    finally:
        os.close(r)
        os.close(w)


UNSUPPORTED_CHILD = """
import efa
ctx = efa.get_efa_device_list()[0].open()
pd, cq = ctx.alloc_pd(), ctx.create_cq(16)
for what, call in [("qp", lambda: pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq))),
                   ("query_cq", cq.query_efa)]:
    try:
        call()
        print(what, "made")
    except efa.EfaError as e:
        print(what, e.errno)
"""


def test_what_the_device_or_provider_lacks_is_eopnotsupp():
    # A device without RDMA read (so the default send ops ask for more than it has) and a
    # provider without efadv_query_cq (efa-sim's profile, in a process of its own): the
    # package's verbs answer EOPNOTSUPP.
    import os
    import subprocess
    import sys
    env = dict(os.environ, EFA_SIM_PROFILE="caps=-rdma_read,ring_query=0")
    out = subprocess.run([sys.executable, "-c", UNSUPPORTED_CHILD], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["qp %d" % errno.EOPNOTSUPP,
                                          "query_cq %d" % errno.EOPNOTSUPP]
