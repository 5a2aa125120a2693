"""Compatibility with the `efa` package (2026.10.22) on the data path: its README's
quickstart and one-sided RDMA examples as written (one process, talking to itself),
completion-channel notification in its sequence of calls, and a SEND longer than the
port's `max_msg_sz` failing by its completion, as on the device."""

import select

import pytest

import efa

np = pytest.importorskip("numpy")

ACCESS = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ


def _drain(cq, n, rounds=2_000_000):
    wcs = []
    for _ in range(rounds):
        wcs += cq.poll(16)
        if len(wcs) >= n:
            break
    return wcs


@pytest.fixture
def quickstart():
    """The README's quickstart, verbatim but for the out-of-band exchange (this process
    is its own peer)."""
    dev = efa.get_efa_device_list()[0]
    ctx = dev.open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(256)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=0x1234)
    local_info = efa.local_endpoint_info(qp, qkey=0x1234)
    remote_bytes = local_info.to_bytes()
    remote_info = efa.EndpointInfo.from_bytes(remote_bytes)
    peer = remote_info.peer(pd)
    yield ctx, pd, cq, qp, peer
    for h in (peer, qp, cq, pd, ctx):
        h.close()


def test_readme_quickstart_send(quickstart):
    ctx, pd, cq, qp, peer = quickstart
    buf = np.zeros(4096, dtype=np.uint8)
    mr = efa.reg_tensor(pd, buf, ACCESS)
    inbox = np.zeros(4096, dtype=np.uint8)
    rmr = efa.reg_tensor(pd, inbox, ACCESS)
    qp.post_recv(efa.RecvWR(wr_id=9, sg_list=[rmr.sge()]))
    buf[:5] = list(b"hello")
    qp.post_send(efa.SendWR(
        wr_id=1,
        sg_list=[mr.sge()],
        opcode=efa.WROpcode.SEND,
        send_flags=efa.SendFlags.SIGNALED,
        dest=peer,
    ))
    wcs = _drain(cq, 2)
    for wc in wcs:
        wc.raise_for_status()
    assert sorted(w.wr_id for w in wcs) == [1, 9]
    assert bytes(inbox[:5]) == b"hello"
    mr.close()
    rmr.close()


def test_readme_one_sided_rdma(quickstart):
    ctx, pd, cq, qp, peer = quickstart
    local = np.arange(8192, dtype=np.uint8)
    remote = np.zeros(8192, dtype=np.uint8)
    local_mr, remote_mr = efa.reg_tensor(pd, local, ACCESS), efa.reg_tensor(pd, remote, ACCESS)
    remote_addr, remote_rkey = remote_mr.addr, remote_mr.rkey
    wrs = efa.write_wrs(local_mr, peer, remote_addr, remote_rkey)
    qp.post_send(wrs)
    for wc in _drain(cq, len(wrs)):
        wc.raise_for_status()
    assert (remote == local).all()
    local[:] = 0
    wrs = efa.read_wrs(local_mr, peer, remote_addr, remote_rkey, chunk=3000)
    assert len(wrs) == 3
    qp.post_send(wrs)
    for wc in _drain(cq, len(wrs)):
        wc.raise_for_status()
    assert (local == remote).all()
    local_mr.close()
    remote_mr.close()


def test_completion_channel_in_the_packages_sequence(ctx, pd):
    chan = ctx.create_comp_channel()
    cq = ctx.create_cq(64, channel=chan)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=0x1234)
    peer = efa.local_endpoint_info(qp, qkey=0x1234).peer(pd)
    src, dst = np.full(64, 3, dtype=np.uint8), np.zeros(64, dtype=np.uint8)
    smr, dmr = efa.reg_tensor(pd, src, ACCESS), efa.reg_tensor(pd, dst, ACCESS)
    cq.req_notify()
    qp.post_recv(efa.RecvWR(wr_id=1, sg_list=[dmr.sge()]))
    qp.post_send(efa.SendWR(wr_id=2, sg_list=[smr.sge()], opcode=efa.WROpcode.SEND,
                            send_flags=efa.SendFlags.SIGNALED, dest=peer))
    readable, _, _ = select.select([chan.fd], [], [], 10.0)
    assert readable, "no completion event within 10s"
    assert chan.get_cq_event() is cq
    assert {w.wr_id for w in _drain(cq, 2)} == {1, 2}
    cq.ack_events(1)
    assert (dst == 3).all()
    for h in (smr, dmr, peer, qp, cq, chan):
        h.close()


def test_an_oversized_send_fails_by_its_completion(quickstart):
    ctx, pd, cq, qp, peer = quickstart
    max_msg = ctx.query_port().max_msg_sz
    src = np.zeros(max_msg + 4096, dtype=np.uint8)
    dst = np.zeros(max_msg + 4096, dtype=np.uint8)
    smr, dmr = efa.reg_tensor(pd, src, ACCESS), efa.reg_tensor(pd, dst, ACCESS)
    qp.post_recv(efa.RecvWR(wr_id=60, sg_list=[dmr.sge()]))

    def send(wr_id, length):
        return efa.SendWR(wr_id=wr_id, sg_list=[smr.sge(length)], opcode=efa.WROpcode.SEND,
                          send_flags=efa.SendFlags.SIGNALED, dest=peer)

    qp.post_send(send(61, max_msg + 4096))  # posted, as the package posts it
    (wc,) = _drain(cq, 1)
    assert wc.wr_id == 61 and wc.qp_num == qp.qp_num
    assert wc.status == efa.WCStatus.LOC_LEN_ERR and wc.opcode == efa.WCOpcode.SEND
    with pytest.raises(efa.CompletionError):
        wc.raise_for_status()
    # In a list, the others go through; the failed SEND consumed no receive.
    qp.post_send([send(62, 16), send(63, max_msg + 1), send(64, max_msg)])
    qp.post_recv(efa.RecvWR(wr_id=65, sg_list=[dmr.sge()]))
    wcs = {w.wr_id: w for w in _drain(cq, 5)}
    assert sorted(wcs) == [60, 62, 63, 64, 65]
    assert [w.wr_id for w in wcs.values() if not w.is_success] == [63]
    assert {wcs[60].byte_len, wcs[65].byte_len} == {16, max_msg}
    smr.close()
    dmr.close()


def test_posts_take_any_iterable_of_work_requests(quickstart):
    ctx, pd, cq, qp, peer = quickstart
    buf = np.zeros(256, dtype=np.uint8)
    mr = efa.reg_tensor(pd, buf, ACCESS)
    # The package posts list(wrs): a tuple or a generator is a list of requests.
    qp.post_recv(tuple(efa.RecvWR(wr_id=10 + i, sg_list=[mr.sge(16, 16 * i)]) for i in range(2)))
    qp.post_send(efa.SendWR(wr_id=i, sg_list=[mr.sge(8, 128)], opcode=efa.WROpcode.SEND,
                            send_flags=efa.SendFlags.SIGNALED, dest=peer) for i in range(2))
    assert sorted(w.wr_id for w in _drain(cq, 4)) == [0, 1, 10, 11]
    with pytest.raises(TypeError):
        qp.post_send(42)
    mr.close()


RDMA_CHILD = """
import efa
ctx = efa.get_efa_device_list()[0].open()
pd, cq = ctx.alloc_pd(), ctx.create_cq(64)
qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=1)
peer = efa.local_endpoint_info(qp, qkey=1).peer(pd)
acc = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
src, dst = bytearray(b"r" * 131072), bytearray(131072)
ms, md = efa.reg_tensor(pd, src, acc), efa.reg_tensor(pd, dst, acc)
print(ctx.query_efa_device().max_rdma_size)
# One write past max_rdma_size (posted: the device fails it), then the split ones.
qp.post_send(efa.write_wrs(ms, peer, md.addr, md.rkey, wr_id=1))
qp.post_send(efa.read_wrs(ms, peer, md.addr, md.rkey, wr_id=2))
qp.post_send(efa.write_wrs(ms, peer, md.addr, md.rkey, chunk=65536, wr_id=10))
wcs = []
while len(wcs) < 4:
    wcs += cq.poll(8)
for w in sorted(wcs, key=lambda w: w.wr_id):
    print(w.wr_id, w.status == efa.WCStatus.LOC_LEN_ERR, w.opcode, hex(w.vendor_err))
print(bytes(dst) == bytes(src))
"""


def test_an_rdma_past_max_rdma_size_fails_by_its_completion():
    # The package's docs: oversized posts fail with an error completion (efa-sim's
    # profile shrinks max_rdma_size to 64 KiB, in a process of its own).
    import os
    import subprocess
    import sys
    env = dict(os.environ, EFA_SIM_PROFILE="max_rdma_size=65536")
    out = subprocess.run([sys.executable, "-c", RDMA_CHILD], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    W, R = efa.WCOpcode.RDMA_WRITE, efa.WCOpcode.RDMA_READ
    assert out.stdout.split("\n")[:6] == [
        "65536", "1 True %d 0x6" % W, "2 True %d 0x6" % R,
        "10 False %d 0x0" % W, "11 False %d 0x0" % W, "True"]
