"""The data path in one process: SEND, RDMA write/read (with immediate), batches,
raw-address SGEs, failed completions, CQEx metadata and completion channels."""

import pytest

import efa
from conftest import ALL, QKEY, poll_n, send_wr


def test_send_arrives_with_its_bytes(pair, pd):
    src, dst = bytearray(b"hello world" + bytes(53)), bytearray(64)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    pair.b.post_recv(efa.RecvWR(wr_id=42, sg_list=[md.sge()]))
    pair.a.post_send(send_wr(7, ms.sge(11), pair.to_b))
    wcs = {w.wr_id: w for w in poll_n(pair.cq, 2)}
    for w in wcs.values():
        w.raise_for_status()
        assert w.is_success and w.status_str == "success"
    assert wcs[42].opcode == efa.WCOpcode.RECV and wcs[42].byte_len == 11
    assert wcs[42].src_qp == pair.a.qp_num and wcs[42].qp_num == pair.b.qp_num
    # The sender as the receiver knows it: its AH number (libefa's slid).
    assert wcs[42].slid == pair.to_a.ah.ahn
    assert wcs[7].opcode == efa.WCOpcode.SEND and wcs[7].vendor_err == 0
    for name in ("wr_id", "status", "byte_len", "slid", "unsolicited"):
        with pytest.raises(AttributeError):
            setattr(wcs[42], name, 1)
        # The fields are read at an offset into the object: never into another type's.
        with pytest.raises(TypeError):
            getattr(efa.WC, name).__get__(pair.to_a.ah)
    assert bytes(dst[:11]) == b"hello world" and not any(dst[11:])


def test_rdma_write_read_and_write_with_immediate(pair, pd):
    src = bytearray(range(256)) * 4
    target, back = bytearray(1024), bytearray(1024)
    ms, mt, mb = (efa.reg_tensor(pd, b, ALL) for b in (src, target, back))
    pair.a.post_send(efa.write_wrs(ms, pair.to_b, mt.addr, mt.rkey, chunk=300, wr_id=10))
    wcs = poll_n(pair.cq, 4)  # 1024 bytes in chunks of 300
    assert sorted(w.wr_id for w in wcs) == [10, 11, 12, 13]
    assert all(w.is_success and w.opcode == efa.WCOpcode.RDMA_WRITE for w in wcs)
    assert target == src
    pair.a.post_send(efa.read_wrs(mb, pair.to_b, mt.addr + 100, mt.rkey, length=50, offset=5))
    (w,) = poll_n(pair.cq, 1)
    # rdma-core's EFA provider reports RDMA-read requester completions as SEND.
    assert w.opcode in (efa.WCOpcode.RDMA_READ, efa.WCOpcode.SEND) and w.is_success
    assert back[5:55] == src[100:150] and not any(back[:5]) and not any(back[55:])
    # Write with immediate consumes a receive at the target.
    pair.b.post_recv(efa.RecvWR(wr_id=99, sg_list=[mb.sge(16)]))
    pair.a.post_send(send_wr(5, ms.sge(8, 16), pair.to_b, efa.WROpcode.RDMA_WRITE_WITH_IMM,
                             remote_addr=mt.addr + 512, rkey=mt.rkey, imm_data=0xABCD))
    wcs = {w.wr_id: w for w in poll_n(pair.cq, 2)}
    assert wcs[99].opcode == efa.WCOpcode.RECV_RDMA_WITH_IMM and wcs[99].imm_data == 0xABCD
    assert wcs[99].wc_flags & efa.WCFlags.WITH_IMM
    assert target[512:520] == src[16:24] and target[520:528] == src[520:528]


def test_a_list_of_32_writes_is_one_post(pair, pd):
    src = bytearray(b"x" * 64 * 32)
    dst = bytearray(64 * 32)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    wrs = [send_wr(i, ms.sge(64, 64 * i), pair.to_b, efa.WROpcode.RDMA_WRITE,
                   remote_addr=md.addr + 64 * i, rkey=md.rkey) for i in range(32)]
    pair.a.post_send(wrs)
    assert sorted(w.wr_id for w in poll_n(pair.cq, 32)) == list(range(32))
    assert dst == src
    # More requests than one doorbell carries go out in several.
    big = [send_wr(i, ms.sge(8), pair.to_b, efa.WROpcode.RDMA_WRITE,
                   remote_addr=md.addr, rkey=md.rkey) for i in range(100)]
    pair.a.post_send(big)
    assert len(poll_n(pair.cq, 100)) == 100


def test_sge_by_address_and_lkey_finds_its_mr(pair, pd):
    src, dst = bytearray(b"abcdefgh"), bytearray(8)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    pair.b.post_recv(efa.RecvWR(1, [efa.SGE(md.addr, 8, lkey=md.lkey)]))
    sge = efa.SGE(ms.addr, 4, lkey=ms.lkey, offset=2)
    wr = efa.SendWR(wr_id=2, sg_list=[sge], send_flags=efa.SendFlags.SIGNALED,
                    ah=pair.to_b.ah, remote_qpn=pair.to_b.qp_num, remote_qkey=QKEY)
    pair.a.post_send(wr)
    assert all(w.is_success for w in poll_n(pair.cq, 2))
    assert bytes(dst[:4]) == b"cdef"


def test_a_failed_completion_raises_completion_error(pair, pd):
    src = bytearray(64)
    ms = efa.reg_tensor(pd, src, 0)
    bad_rkey = 0x7FFFF0
    pair.a.post_send(send_wr(3, ms.sge(8), pair.to_b, efa.WROpcode.RDMA_WRITE,
                             remote_addr=0x1000, rkey=bad_rkey))
    (w,) = poll_n(pair.cq, 1)
    assert not w.is_success and w.status != efa.WCStatus.SUCCESS
    assert w.status_str.endswith("error")  # ibv_wc_status_str words, e.g. "remote access error"
    with pytest.raises(efa.CompletionError) as e:
        w.raise_for_status()
    assert isinstance(e.value, efa.EfaError) and e.value.wc is w
    assert "work request 3" in str(e.value)
    # The device's own status, as the Rust core names it in the message.
    assert w.vendor_err != 0 and "(EFA status %d)" % w.vendor_err in str(e.value)


def test_cq_ex_reports_the_sender_gid_of_an_unknown_peer(ctx):
    pd = ctx.alloc_pd()
    cqx = ctx.create_cq_ex(512, sgid=True)
    a = pd.create_qp(efa.QPInitAttr(send_cq=cqx, recv_cq=cqx)).prepare(qkey=QKEY)
    b = pd.create_qp(efa.QPInitAttr(send_cq=cqx, recv_cq=cqx)).prepare(qkey=QKEY)
    # b's PD holds no AH for a's GID until `to_b` exists: b's receive sees the sender GID.
    other = ctx.alloc_pd()
    ob = other.create_qp(efa.QPInitAttr(send_cq=cqx, recv_cq=cqx)).prepare(qkey=QKEY)
    src, dst = bytearray(b"gid?"), bytearray(4)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(other, dst, ALL)
    ob.post_recv(efa.RecvWR(9, [md.sge()]))
    to_ob = efa.local_endpoint_info(ob, qkey=QKEY).peer(pd)
    a.post_send(send_wr(1, ms.sge(4), to_ob))
    wcs = {w.wr_id: w for w in poll_n(cqx, 2)}
    assert wcs[9].sgid == ctx.query_gid() and bytes(dst) == b"gid?"
    assert isinstance(wcs[9].sgid, bytes)  # as the package gives it
    assert wcs[9].unsolicited is False
    for h in (a, b, ob, cqx):
        h.close()


def test_completion_channel_wakes_on_a_completion(pair, ctx, pd):
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(256, channel=ch)
    assert cq.channel is ch and ch.fd >= 0
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64, max_recv_wr=64))
    qp.prepare(qkey=QKEY)
    src = bytearray(8)
    ms = efa.reg_tensor(pd, src, 0)
    dst = bytearray(8)
    md = efa.reg_tensor(pd, dst, ALL)
    cq.req_notify()
    qp.post_send(send_wr(1, ms.sge(8), pair.to_b, efa.WROpcode.RDMA_WRITE,
                         remote_addr=md.addr, rkey=md.rkey))
    assert ch.get_cq_event() is cq
    cq.ack_events(1)
    assert poll_n(cq, 1)[0].is_success
    with pytest.raises(efa.EfaError, match="solicited-only"):
        cq.req_notify(solicited_only=True)
    qp.close()
    cq.close()
    ch.close()


def test_unsolicited_write_with_immediate_needs_no_receive(ctx, pd):
    caps = ctx.query_efa_device().device_caps
    if not caps & efa.EfaDeviceCaps.UNSOLICITED_WRITE_RECV:
        pytest.skip("device without unsolicited write-with-immediate receive")
    cqx = ctx.create_cq_ex(512, unsolicited=True)
    attr = dict(send_cq=cqx, recv_cq=cqx, unsolicited_write_recv=True)
    a = pd.create_qp(efa.QPInitAttr(**attr)).prepare(qkey=QKEY)
    b = pd.create_qp(efa.QPInitAttr(**attr)).prepare(qkey=QKEY)
    to_b = efa.local_endpoint_info(b, qkey=QKEY).peer(pd)
    src, dst = bytearray(b"unsolicited!"), bytearray(12)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    a.post_send(send_wr(1, ms.sge(), to_b, efa.WROpcode.RDMA_WRITE_WITH_IMM,
                        remote_addr=md.addr, rkey=md.rkey, imm_data=77))
    wcs = poll_n(cqx, 2)
    recv = [w for w in wcs if w.opcode == efa.WCOpcode.RECV_RDMA_WITH_IMM]
    assert len(recv) == 1 and recv[0].unsolicited is True and recv[0].imm_data == 77
    assert recv[0].wr_id == 0 and bytes(dst) == b"unsolicited!"
    a.close()
    b.close()


def test_a_list_alternating_mrs_and_destinations(pair, pd, ctx):
    s1, s2 = bytearray(b"1" * 64), bytearray(b"2" * 64)
    dst = bytearray(64 * 8)
    m1, m2, md = efa.reg_tensor(pd, s1, 0), efa.reg_tensor(pd, s2, 0), efa.reg_tensor(pd, dst, ALL)
    second = efa.local_endpoint_info(pair.b, qkey=QKEY).peer(pd)  # another AH to b
    wrs = [send_wr(i, (m1, m2)[i % 2].sge(64), (pair.to_b, second)[(i // 2) % 2],
                   efa.WROpcode.RDMA_WRITE, remote_addr=md.addr + 64 * i, rkey=md.rkey)
           for i in range(8)]
    pair.a.post_send(wrs)
    assert all(w.is_success for w in poll_n(pair.cq, 8))
    assert dst == (b"1" * 64 + b"2" * 64) * 4
    second.close()
    with pytest.raises(efa.EfaError, match="AH is closed"):
        pair.a.post_send(wrs)
