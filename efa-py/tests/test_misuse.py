"""Misuse the Rust core refuses becomes an EfaError with its words, never a crash; closing
any handle in any order while others use it is safe."""

import ctypes
import itertools

import pytest

import efa
from conftest import ALL, QKEY, poll_n, send_wr


def test_send_on_a_qp_not_in_rts_is_refused(pd, cq, pair):
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64, max_recv_wr=64))
    ms = efa.reg_tensor(pd, bytearray(8), 0)
    with pytest.raises(efa.EfaError, match="state") as e:
        qp.post_send(send_wr(1, ms.sge(8), pair.to_b))
    assert e.value.errno == 22 and e.value.operation == "post_send"
    with pytest.raises(efa.EfaError, match="state"):
        qp.post_recv(efa.RecvWR(1, [efa.reg_tensor(pd, bytearray(8), ALL).sge()]))
    with pytest.raises(efa.EfaError):
        qp.to_rts()  # RESET -> RTS is not a transition


def test_an_sge_of_another_pd_is_refused(ctx, pair):
    other = ctx.alloc_pd()
    foreign = efa.reg_tensor(other, bytearray(8), 0)
    with pytest.raises(efa.EfaError, match="protection domain"):
        pair.a.post_send(send_wr(1, foreign.sge(8), pair.to_b))
    # By address and lkey, an MR of another PD is not found in this QP's PD.
    with pytest.raises(efa.EfaError, match="no open memory region"):
        pair.a.post_send(send_wr(1, efa.SGE(foreign.addr, 8, lkey=foreign.lkey), pair.to_b))


def test_ranges_beyond_the_memory_are_refused(pd, pair):
    ms = efa.reg_tensor(pd, bytearray(64), 0)
    with pytest.raises(ValueError, match="SGE range exceeds the memory region"):  # the package's
        ms.sge(65)
    with pytest.raises(efa.EfaError):
        pair.a.post_send(send_wr(1, efa.SGE(ms.addr + 60, 8, lkey=ms.lkey), pair.to_b))
    with pytest.raises(efa.EfaError, match="exceeds the buffer"):
        pd.reg_mr(bytearray(16), 32, 0)


def test_unsignaled_and_destinationless_sends_are_refused(pd, pair):
    ms = efa.reg_tensor(pd, bytearray(8), 0)
    with pytest.raises(efa.EfaError, match="not SIGNALED"):
        pair.a.post_send(efa.SendWR(sg_list=[ms.sge()], dest=pair.to_b))
    with pytest.raises(ValueError, match="connectionless"):  # as the package
        pair.a.post_send(efa.SendWR(sg_list=[ms.sge()], send_flags=efa.SendFlags.SIGNALED))


def test_buffers_that_cannot_be_registered(pd):
    with pytest.raises(ValueError, match="not C-contiguous"):
        pd.reg_mr(memoryview(bytearray(64))[::2], None, 0)
    with pytest.raises(ValueError, match="read-only"):
        efa.reg_tensor(pd, b"immutable bytes", efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE)
    # A read-only buffer is fine for memory the device only reads.
    with efa.reg_tensor(pd, b"immutable bytes", 0) as mr:
        assert mr.length == 15


def test_a_registered_buffer_is_pinned_and_kept_alive(pd):
    buf = bytearray(b"abc" + bytes(61))
    mr = efa.reg_tensor(pd, buf, ALL)
    with pytest.raises(BufferError):
        buf.extend(b"more")  # the MR's memoryview pins it: it cannot move
    del buf
    assert mr.read(0, 3) == b"abc"  # still alive through the MR
    mr.close()


def test_closed_handles_raise(ctx, pd, cq, pair):
    mr = efa.reg_tensor(pd, bytearray(8), 0)
    mr.close()
    mr.close()  # idempotent
    with pytest.raises(efa.EfaError, match="MR is closed") as e:
        mr.lkey
    assert e.value.errno == 9
    with pytest.raises(efa.EfaError, match="MR is closed"):
        pair.a.post_send(send_wr(1, efa.SGE(mr, 8), pair.to_b))
    pair.to_b.ah.close()
    sge = efa.reg_tensor(pd, bytearray(8), 0).sge()
    with pytest.raises(efa.EfaError, match="AH is closed"):
        pair.a.post_send(send_wr(1, sge, pair.to_b))
    pair.a.close()
    with pytest.raises(efa.EfaError, match="QP is closed"):
        pair.a.post_send(send_wr(1, sge, pair.to_a))
    with pytest.raises(efa.EfaError, match="QP is closed"):
        pair.a.qp_num
    cq2 = ctx.create_cq(64)
    cq2.close()
    with pytest.raises(efa.EfaError, match="CQ is closed"):
        cq2.poll(1)
    with pytest.raises(efa.EfaError, match="CQ is closed"):
        pd.create_qp(efa.QPInitAttr(send_cq=cq2, recv_cq=cq2))


HANDLES = ["ctx", "pd", "cq", "qp_a", "qp_b", "mr_src", "mr_dst", "ah"]


@pytest.mark.parametrize("order", list(itertools.permutations(HANDLES, 3)) [::7])
def test_closing_handles_in_any_order_while_others_use_them(order):
    """Closes three handles in a given order, then uses every handle: each use either
    works (the dependents retain what they need) or raises EfaError; nothing crashes."""
    ctx = efa.get_efa_device_list()[0].open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(512)
    qa = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    qb = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    src, dst = bytearray(b"z" * 32), bytearray(32)
    ms, md = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, dst, ALL)
    ah = pd.create_ah(ctx.query_gid())
    h = dict(ctx=ctx, pd=pd, cq=cq, qp_a=qa, qp_b=qb, mr_src=ms, mr_dst=md, ah=ah)
    for name in order:
        if name == "ctx":
            # As in the package: a context closes only once what was made from it is
            # closed (EBUSY); it stays open and usable.
            with pytest.raises(efa.EfaError, match="open child resource"):
                ctx.close()
            continue
        h[name].close()
    closed = set(order) - {"ctx"}

    def attempt(f):
        try:
            f()
            return True
        except efa.EfaError:
            return False

    ok_recv = attempt(lambda: qb.post_recv(efa.RecvWR(1, [efa.SGE(md, 32)])))
    qpn = qb.qp_num if "qp_b" not in closed else 1
    # An SGE of a closed MR is refused when made (EfaError, as in the package).
    ok_send = attempt(lambda: qa.post_send(efa.SendWR(
        wr_id=2, sg_list=[efa.SGE(ms, 32)], send_flags=efa.SendFlags.SIGNALED,
        ah=ah, remote_qpn=qpn, remote_qkey=QKEY)))
    assert ok_recv == (not closed & {"qp_b", "mr_dst"})
    assert ok_send == (not closed & {"qp_a", "mr_src", "ah"})
    if "cq" not in closed and ok_send and ok_recv:
        polled = poll_n(cq, 2)
        assert all(w.is_success for w in polled)
        assert dst == src
    # Handles that were not closed still work.
    if "ctx" not in closed:
        assert len(ctx.query_gid().raw) == 16
    if not closed & {"ctx", "pd"}:
        pd.create_ah(ctx.query_gid()).close()
    for x in reversed(list(h.values())):  # the context last, once nothing uses it
        x.close()


def test_closing_an_mr_a_posted_receive_names_fails_that_receive_not_the_process(pair, pd):
    buf = bytearray(64)
    md = efa.reg_tensor(pd, buf, ALL)
    pair.b.post_recv(efa.RecvWR(1, [md.sge()]))
    md.close()  # the receive still names it; its key is now invalid
    del buf
    ms = efa.reg_tensor(pd, bytearray(b"late" * 16), 0)
    pair.a.post_send(send_wr(2, ms.sge(), pair.to_b))
    wcs = {w.wr_id: w for w in poll_n(pair.cq, 2, timeout=20)}
    assert not wcs[1].is_success  # the device refused the stale key


def test_numpy_arrays_and_tensor_like_objects(pd):
    np = pytest.importorskip("numpy")
    a = np.arange(64, dtype=np.uint32)
    with efa.reg_tensor(pd, a, ALL) as mr:
        assert mr.length == 256 and mr.addr == a.ctypes.data
        assert mr.read(4, 4) == (1).to_bytes(4, "little")
    with pytest.raises(ValueError, match="not C-contiguous"):
        efa.reg_tensor(pd, np.zeros((8, 8), dtype=np.uint8)[:, ::2], 0)
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        efa.reg_tensor(pd, ro, ALL)
    assert efa.tensor_addr_len(a) == (a.ctypes.data, 256)

    class CpuTensor:  # what reg_tensor reads of a torch CPU tensor
        is_cuda = False

        def __init__(self, n):
            self.buf = ctypes.create_string_buffer(b"tensor", n)

        def data_ptr(self):
            return ctypes.addressof(self.buf)

        def numel(self):
            return len(self.buf)

        def element_size(self):
            return 1

        def is_contiguous(self):
            return True

    t = CpuTensor(32)
    with efa.reg_tensor(pd, t, ALL) as mr:
        assert mr.owner is t and mr.read(0, 6) == b"tensor"
    t.is_contiguous = lambda: False
    with pytest.raises(ValueError, match="contiguous"):
        efa.reg_tensor(pd, t, 0)
    t.is_cuda = True
    with pytest.raises(ValueError, match="efa.cuda.register_tensor"):
        efa.reg_tensor(pd, t, 0)
