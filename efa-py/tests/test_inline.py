"""Inline sends take their bytes from any host memory, as in the package: an SGE made from
an integer address needs no registration (its bytes are copied at the post), and an
address that is not readable is an EfaError, not a crash."""

import ctypes
import errno

import pytest

import efa
from conftest import ALL, Pair, poll_n

INLINE = efa.SendFlags.SIGNALED | efa.SendFlags.INLINE


def _inline_send(p, sge, wr_id=2):
    p.a.post_send(efa.SendWR(wr_id=wr_id, sg_list=[sge], dest=p.to_b, send_flags=INLINE))


def test_inline_send_of_unregistered_memory_copies_it_at_the_post(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_inline_data=32)
    dst = bytearray(64)
    md = efa.reg_tensor(pd, dst, ALL)
    src = bytearray(b"not registered!!")
    view = (ctypes.c_char * len(src)).from_buffer(src)
    p.b.post_recv(efa.RecvWR(1, [md.sge()]))
    _inline_send(p, efa.SGE(ctypes.addressof(view), len(src)))
    src[:] = b"X" * len(src)  # the post copied the bytes: the source is free again
    wcs = {w.wr_id: w for w in poll_n(cq, 2)}
    assert wcs[1].is_success and wcs[2].is_success and wcs[1].byte_len == 16
    assert bytes(dst[:16]) == b"not registered!!"
    # Two SGEs: a registered buffer's bytes, then an unregistered ctypes buffer's.
    head = bytearray(b"head-")
    mh = efa.reg_tensor(pd, head, 0)
    tail = ctypes.create_string_buffer(b"tail", 4)
    p.b.post_recv(efa.RecvWR(3, [md.sge()]))
    p.a.post_send(efa.SendWR(wr_id=4, sg_list=[mh.sge(5), efa.SGE(ctypes.addressof(tail), 4)],
                             dest=p.to_b, send_flags=INLINE))
    wcs = {w.wr_id: w for w in poll_n(cq, 2)}
    assert wcs[3].byte_len == 9 and bytes(dst[:9]) == b"head-tail"


def test_inline_send_from_an_integer_address_registration(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_inline_data=32)
    dst = bytearray(64)
    md = efa.reg_tensor(pd, dst, ALL)
    src = ctypes.create_string_buffer(b"by address", 32)
    mr = pd.reg_mr(ctypes.addressof(src), 32, 0)  # the package's form: no host view
    p.b.post_recv(efa.RecvWR(1, [md.sge()]))
    _inline_send(p, efa.SGE(mr, 10))
    src.value = b"overwritten"
    poll_n(cq, 2)
    assert bytes(dst[:10]) == b"by address"
    with pytest.raises(ValueError, match="exceeds the memory region"):  # as the package
        efa.SGE(mr, 8, offset=30)
    mr.close()


def test_inline_send_of_an_unreadable_address_raises_efault(ctx, pd, cq):
    p = Pair(ctx, pd, cq, max_inline_data=32)
    with pytest.raises(efa.EfaError) as e:
        _inline_send(p, efa.SGE(8, 16))  # the unmapped first page
    assert e.value.errno == errno.EFAULT and "not readable" in str(e.value)
    # Nothing was posted: the QP still works.
    dst = bytearray(16)
    md = efa.reg_tensor(pd, dst, ALL)
    src = ctypes.create_string_buffer(b"still fine", 10)
    p.b.post_recv(efa.RecvWR(1, [md.sge()]))
    _inline_send(p, efa.SGE(ctypes.addressof(src), 10), wr_id=5)
    assert {w.wr_id for w in poll_n(cq, 2)} == {1, 5} and bytes(dst[:10]) == b"still fine"
    # Without INLINE an unregistered address is still refused (the device could not read it).
    with pytest.raises(efa.EfaError, match="names no open memory region"):
        p.a.post_send(efa.SendWR(wr_id=6, sg_list=[efa.SGE(ctypes.addressof(src), 10)],
                                 dest=p.to_b, send_flags=efa.SendFlags.SIGNALED))
