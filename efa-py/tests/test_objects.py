"""Devices, context queries, attribute classes, enums and the endpoint wire format."""

import pytest

import efa


def test_devices_list_the_software_efa_device():
    names = [d.name for d in efa.get_device_list()]
    efa_names = [d.name for d in efa.get_efa_device_list()]
    assert efa_names and set(efa_names) <= set(names)
    assert all(d.is_efa for d in efa.get_efa_device_list())


def test_context_queries(ctx):
    assert ctx.is_efa()
    attr = ctx.query_device()
    assert attr.fw_ver.startswith("efa-sim") and attr.max_qp > 0 and attr.max_cqe >= 1024
    e = ctx.query_efa_device()
    assert e.max_rdma_size > 0 and e.max_sq_wr > 0
    assert e.device_caps & efa.EfaDeviceCaps.RDMA_WRITE
    port = ctx.query_port()
    assert port.state == efa.PortState.ACTIVE and port.max_msg_sz > 0
    gid = ctx.query_gid()
    assert len(gid.raw) == 16 and bytes(gid) == gid.raw
    assert gid == efa.Gid(gid.raw) and hash(gid) == hash(efa.Gid(gid.raw))
    assert gid.subnet_prefix == int.from_bytes(gid.raw[:8], "big")
    assert gid.interface_id == int.from_bytes(gid.raw[8:], "big")
    assert ctx.num_comp_vectors >= 1 and ctx.async_fd >= 0


def test_gid_refuses_wrong_length():
    with pytest.raises(ValueError, match="16 bytes"):  # as the package
        efa.Gid(b"short")


def test_endpoint_info_wire_format_is_24_bytes_network_order():
    info = efa.EndpointInfo(bytes(range(16)), 0x123456, 0xDEADBEEF)
    wire = info.to_bytes()
    assert len(wire) == 24
    assert wire[16:] == bytes.fromhex("00123456deadbeef")
    assert efa.EndpointInfo.from_bytes(wire) == info
    with pytest.raises(ValueError, match="exactly 24 bytes"):
        efa.EndpointInfo.from_bytes(wire[:23])
    with pytest.raises(ValueError, match="24-bit"):
        efa.EndpointInfo(bytes(16), 1 << 24, 0)


def test_enums_have_the_verbs_values():
    assert efa.WROpcode.RDMA_WRITE == 0 and efa.WROpcode.RDMA_READ == 4
    assert efa.QPType.SRD == 0xFF and efa.QPType.UD == 4
    assert efa.SendFlags.SIGNALED == 2 and efa.AccessFlags.REMOTE_WRITE == 2
    assert efa.WCStatus.REM_OP_ERR == 11 and efa.WCOpcode.RECV == 128
    assert efa.QPState.RTS == 3 and efa.QPAttrMask.QKEY == 64


def test_qp_state_machine_query_and_layouts(ctx, pd, cq):
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64))
    assert qp.state == efa.QPState.RESET
    qp.to_init(qkey=7)
    assert qp.state == efa.QPState.INIT
    qp.to_rtr()
    qp.to_rts(rnr_retry=3)
    assert qp.state == efa.QPState.RTS
    attrs, cap = qp.query()
    assert attrs["qkey"] == 7 and attrs["qp_state"] == efa.QPState.RTS
    assert cap.max_send_wr >= 64
    sq, rq = qp.query_wqs()
    assert sq.entry_size == 64 and sq.num_entries >= 64 and rq.num_entries > 0
    layout = cq.query_efa()
    assert layout.entry_size > 0 and layout.num_entries >= 1024
    qp.modify(efa.QPAttrMask.STATE, qp_state=efa.QPState.ERR)
    assert qp.state == efa.QPState.ERR
    qp.close()


def test_ud_qp_and_cq_ex_and_ah(ctx, pd):
    cqx = ctx.create_cq_ex(256, sgid=True, unsolicited=True)
    assert isinstance(cqx, efa.CQEx) and isinstance(cqx, efa.CQ)
    assert cqx.sgid_enabled and cqx.unsolicited_enabled and cqx.cqe >= 256
    assert cqx.query_efa().num_entries >= 256
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cqx, recv_cq=cqx, qp_type=efa.QPType.UD,
                                     max_send_wr=64, max_recv_wr=64)).prepare(qkey=1)
    assert qp.qp_type == efa.QPType.UD and qp.state == efa.QPState.RTS
    gid = ctx.query_gid()
    for addr in (gid, gid.raw, efa.AHAttr(dgid=gid.raw)):
        with pd.create_ah(addr) as ah:
            assert ah.ahn >= 0 and ah.gid == gid
    qp.close()
    cqx.close()


def test_mr_attributes(pd):
    buf = bytearray(4096)
    with pd.reg_mr(buf, None, efa.AccessFlags.LOCAL_WRITE) as mr:
        assert mr.length == 4096 and mr.lkey == mr.lkey and mr.owner is not None
        assert mr.addr != 0 and mr.handle != 0
        attr = mr.query_efa()
        assert attr.ic_id_validity >= 0
        s = mr.sge(100, 8)
        assert (s.addr, s.length, s.lkey) == (mr.addr + 8, 100, mr.lkey)
        assert s.owner is mr
        assert "lkey" in repr(mr)
    assert mr.closed and repr(mr) == "MR(closed=True)"


def test_exceptions_construct_as_the_package_does():
    e = efa.EfaError("ibv_reg_mr", 12, "no memory")
    assert isinstance(e, OSError) and (e.operation, e.errno, e.strerror) == ("ibv_reg_mr", 12, "no memory")
    # Without a detail, the package's words: "<operation> failed: <strerror>".
    e = efa.EfaError("ibv_open_device", 2)
    assert e.strerror == "ibv_open_device failed: No such file or directory"
    assert str(e) == "[Errno 2] ibv_open_device failed: No such file or directory"
    assert issubclass(efa.CompletionError, efa.EfaError)
