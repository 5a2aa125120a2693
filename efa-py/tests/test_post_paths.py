"""The lean posting path (src/post_fast.rs) takes a list only as it is: a SendWR
changed after an earlier post, an MR or AH closed since, or a list that turns out to
hold something else, raises what the general path raises and posts nothing."""

import errno

import pytest

import efa
from conftest import ALL, poll_n

SIGNALED = efa.SendFlags.SIGNALED


@pytest.fixture
def mrs(pd):
    src, dst = bytearray(4096), bytearray(4096)
    ms, md = efa.reg_tensor(pd, src, ALL), efa.reg_tensor(pd, dst, ALL)
    yield ms, md
    ms.close()
    md.close()


def writes(pair, ms, md, n):
    return [efa.SendWR(wr_id=i, sg_list=[ms.sge(64, 64 * i)], opcode=efa.WROpcode.RDMA_WRITE,
                       send_flags=SIGNALED, remote_addr=md.addr + 64 * i, rkey=md.rkey,
                       dest=pair.to_b) for i in range(n)]


def post_ok(pair, wrs):
    """Posts `wrs` (a list or one SendWR) and polls their completions: all succeed."""
    pair.a.post_send(wrs)
    n = len(wrs) if isinstance(wrs, list) else 1
    got = poll_n(pair.cq, n)
    assert [w.status for w in got] == [0] * n
    return got


def nothing_posted(pair):
    assert pair.cq.poll(64) == []


def test_a_list_with_another_object_in_it_posts_nothing(pair, mrs):
    wrs = writes(pair, *mrs, 4)
    post_ok(pair, wrs)  # the lean path took it
    for bad in ("not a work request", efa.RecvWR(1, [mrs[0].sge(8)]), None):
        with pytest.raises(TypeError):
            pair.a.post_send(wrs[:2] + [bad] + wrs[2:])
        nothing_posted(pair)
    with pytest.raises(TypeError):
        pair.a.post_send(wrs[:1] + [efa.SendWR(wr_id=9, sg_list=["not an SGE"],
                                               send_flags=SIGNALED, dest=pair.to_b)])
    nothing_posted(pair)
    post_ok(pair, wrs)


def test_a_sendwr_changed_after_a_post_is_checked_again(pair, mrs):
    ms, md = mrs
    wrs = writes(pair, ms, md, 3)
    post_ok(pair, wrs)
    w = wrs[1]
    w.send_flags = 0
    with pytest.raises(efa.EfaError, match="not SIGNALED") as e:
        pair.a.post_send(wrs)
    assert e.value.errno == errno.EINVAL
    nothing_posted(pair)
    w.send_flags = SIGNALED
    w.opcode = 99
    with pytest.raises(ValueError, match="got opcode 99"):
        pair.a.post_send(wrs)
    w.opcode = efa.WROpcode.RDMA_WRITE
    w.ah = None
    with pytest.raises(ValueError, match="connectionless"):
        pair.a.post_send(wrs)
    w.dest = pair.to_b
    # Its SGE list, changed in place: two SGEs (RDMA takes one), a range outside its MR.
    w.sg_list.append(ms.sge(8))
    with pytest.raises(efa.EfaError):
        pair.a.post_send(wrs)
    nothing_posted(pair)
    w.sg_list[:] = [efa.SGE(ms.addr + 4090, 64, lkey=ms.lkey)]
    with pytest.raises(efa.EfaError):
        pair.a.post_send(wrs)
    nothing_posted(pair)
    w.sg_list = [ms.sge(64, 64)]
    w.remote_addr = md.addr + 4090  # past the remote MR: the device fails it
    w.wr_id = 77
    got = sorted(post_ok_or_fail(pair, wrs), key=lambda c: c.wr_id)
    assert [c.wr_id for c in got] == [0, 2, 77] and got[2].status != 0
    w.remote_addr = md.addr + 64
    post_ok(pair, wrs)


def post_ok_or_fail(pair, wrs):
    pair.a.post_send(wrs)
    return poll_n(pair.cq, len(wrs))


def test_an_mr_or_ah_closed_after_a_post_is_refused(ctx, pd, pair):
    ms = efa.reg_tensor(pd, bytearray(256), ALL)
    md = efa.reg_tensor(pd, bytearray(256), ALL)
    wrs = writes(pair, ms, md, 2)
    post_ok(pair, wrs)
    post_ok(pair, wrs[0])  # one SendWR, not in a list
    ms.close()
    for post in (wrs, wrs[0]):
        with pytest.raises(efa.EfaError, match="MR is closed") as e:
            pair.a.post_send(post)
        assert e.value.errno == errno.EBADF
    nothing_posted(pair)
    ms2 = efa.reg_tensor(pd, bytearray(256), ALL)
    wrs = writes(pair, ms2, md, 2)
    post_ok(pair, wrs)
    pair.to_b.ah.close()
    with pytest.raises(efa.EfaError, match="AH is closed"):
        pair.a.post_send(wrs)
    nothing_posted(pair)
    md.close()
    ms2.close()


CHILD = """
import efa
ctx = efa.get_efa_device_list()[0].open()
pd, cq = ctx.alloc_pd(), ctx.create_cq(64)
qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=1)
peer = efa.local_endpoint_info(qp, qkey=1).peer(pd)
acc = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
src, dst = bytearray(b"r" * 131072), bytearray(131072)
ms, md = efa.reg_tensor(pd, src, acc), efa.reg_tensor(pd, dst, acc)
wrs = [efa.SendWR(wr_id=i, sg_list=[ms.sge(64, 64 * i)], opcode=efa.WROpcode.RDMA_WRITE,
                  send_flags=efa.SendFlags.SIGNALED, remote_addr=md.addr + 64 * i,
                  rkey=md.rkey, dest=peer) for i in range(3)]
for round in range(2):
    qp.post_send(wrs)
    wcs = []
    while len(wcs) < 3:
        wcs += cq.poll(8)
    print(sorted((w.wr_id, w.status) for w in wcs))
    wrs[1].sg_list = [ms.sge(65537)]  # past max_rdma_size: fails by its completion
    wrs[1].remote_addr = md.addr
"""


def test_a_write_past_max_rdma_size_in_a_list_fails_by_its_completion():
    import os
    import subprocess
    import sys
    env = dict(os.environ, EFA_SIM_PROFILE="max_rdma_size=65536")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == [
        "[(0, 0), (1, 0), (2, 0)]", "[(0, 0), (1, %d), (2, 0)]" % efa.WCStatus.LOC_LEN_ERR]


def test_calls_the_lean_methods_do_not_take_are_parsed_as_before(ctx, pair, mrs):
    # QP.post_send and CQ.poll take one positional argument without PyO3's parsing
    # (src/fastcall.rs); every other call goes to the parsing method, as before.
    import inspect
    assert str(inspect.signature(efa.QP.post_send)) == "(self, /, wrs)"
    assert str(inspect.signature(efa.CQ.poll)) == "(self, /, num_entries)"
    assert efa.CQ.poll.__doc__.startswith("Polls up to")
    cq = ctx.create_cq(16)
    assert cq.poll(1) == [] and cq.poll(num_entries=2) == [] and cq.poll(True) == []
    for args, exc, words in [((), TypeError, "missing 1 required positional argument"),
                             ((1, 2), TypeError, "takes 1 positional arguments but 2"),
                             (("x",), TypeError, "cannot be interpreted as an integer"),
                             ((2 ** 40,), OverflowError, "out of range"),
                             ((0,), ValueError, "num_entries must be positive")]:
        with pytest.raises(exc, match=words):
            cq.poll(*args)
    with pytest.raises(TypeError, match="doesn't apply to a"):
        efa.CQ.poll(ctx, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n'"):
        cq.poll(n=1)
    with pytest.raises(TypeError, match="multiple values for argument 'num_entries'"):
        cq.poll(1, num_entries=1)
    assert efa.CQ.poll(cq, 1) == [] and cq.poll(**{"num_entries": 3}) == []
    cq.close()
    wrs = writes(pair, *mrs, 2)
    pair.a.post_send(wrs=wrs)
    assert len(poll_n(pair.cq, 2)) == 2
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        pair.a.post_send()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        pair.a.post_send(wrs, flags=1)
    with pytest.raises(TypeError, match="doesn't apply to a"):
        efa.QP.post_send(ctx, wrs)


def test_a_sendwr_posted_to_another_qp_is_checked_for_that_qp(ctx, pd, cq, pair, mrs):
    # A request checked for one QP is kept (src/kept.rs) for that QP only.
    ms, md = mrs
    wrs = writes(pair, ms, md, 2)
    post_ok(pair, wrs)
    post_ok(pair, wrs)  # the kept requests
    sends_only = pd.create_qp(efa.QPInitAttr(
        send_cq=cq, recv_cq=cq, send_ops_flags=efa.QPExSendOpsFlags.SEND)).prepare(qkey=0x1234)
    with pytest.raises(ValueError, match="not enabled in this QP's send_ops_flags"):
        sends_only.post_send(wrs)
    sig_all = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, sq_sig_all=True)).prepare(
        qkey=0x1234)
    unsignaled = writes(pair, ms, md, 2)
    for w in unsignaled:
        w.send_flags = 0
    sig_all.post_send(unsignaled)
    sig_all.post_send(unsignaled)
    assert len(poll_n(cq, 4)) == 4
    with pytest.raises(efa.EfaError, match="not SIGNALED"):
        pair.a.post_send(unsignaled)
    nothing_posted(pair)
    sends_only.close()
    sig_all.close()


def test_a_sendwr_can_be_read_and_changed_while_dest_is_set(pair, mrs):
    # SendWR keeps its fields behind the GIL (src/wr.rs), not a PyO3 borrow: code that
    # `dest=` runs (a property of the peer) may read and change the same SendWR, as with
    # the package's plain class.
    ms, md = mrs
    wr = writes(pair, ms, md, 1)[0]
    seen = []

    class Peer:
        qp_num, qkey = pair.to_b.qp_num, pair.to_b.qkey

        @property
        def ah(self):
            seen.append(wr.wr_id)
            wr.wr_id = 42
            return pair.to_b.ah

    wr.dest = Peer()
    assert seen == [0] and wr.wr_id == 42
    got = post_ok(pair, wr)
    assert got[0].wr_id == 42


def test_one_sendwr_posted_alone_is_checked_again_after_a_change(ctx, pd, pair):
    """`QP.post_send(wr)` of one `SendWR` takes a path of its own (post_fast's
    `post_single`): a kept request is reposted only while nothing it was checked with
    changed (its fields, its SGE list changed in place, its AH), and the bytes land
    where the request names now."""
    src, dst = bytearray(range(256)), bytearray(256)
    ms, md = efa.reg_tensor(pd, src, ALL), efa.reg_tensor(pd, dst, ALL)
    w = writes(pair, ms, md, 1)[0]
    post_ok(pair, w)
    post_ok(pair, w)  # the kept request
    assert dst[:64] == src[:64]
    w.sg_list[0] = efa.SGE(ms.addr + 250, 64, lkey=ms.lkey)  # in place, past the MR
    with pytest.raises(efa.EfaError):
        pair.a.post_send(w)
    nothing_posted(pair)
    w.sg_list[0] = ms.sge(32, 128)  # in place, after a post of the kept request
    post_ok(pair, w)
    assert dst[:32] == src[128:160] and dst[32:64] == src[32:64]
    w.remote_addr = md.addr + 160
    w.wr_id = 9
    assert [c.wr_id for c in post_ok(pair, w)] == [9]
    assert dst[160:192] == src[128:160] and dst[64:160] == bytes(96)
    w.send_flags = 0
    with pytest.raises(efa.EfaError, match="not SIGNALED"):
        pair.a.post_send(w)
    nothing_posted(pair)
    w.send_flags = SIGNALED
    post_ok(pair, w)
    pair.to_b.ah.close()
    with pytest.raises(efa.EfaError, match="AH is closed"):
        pair.a.post_send(w)
    nothing_posted(pair)
    ms.close()
    md.close()
