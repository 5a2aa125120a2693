"""The array API (efa.post_array, efa.poll_into): a transfer given as arrays, checked in
full before anything is posted, chunked, and its completions polled into an array;
one process and two, its refusals (each naming the bad entry, none posting anything),
and the README's example run as written."""

import errno
import os
import re
import struct
import subprocess
import sys
import time

import pytest

import efa
from conftest import ALL, QKEY, Pair

np = pytest.importorskip("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))


def drain(cq, n, timeout=5.0):
    """Polls `n` completions into an (n, 4) array (fails the test after `timeout`)."""
    out = np.zeros((n, 4), dtype=np.uint64)
    got, deadline = 0, time.monotonic() + timeout
    while got < n:
        got += efa.poll_into(cq, out[got:])
        if time.monotonic() > deadline:
            pytest.fail("only %d of %d completions after %ss" % (got, n, timeout))
    return out


def nothing_completes(cq, wait=0.2):
    """True if no completion arrives within `wait` seconds."""
    out = np.zeros((4, 4), dtype=np.uint64)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if efa.poll_into(cq, out):
            return False
    return True


@pytest.fixture
def bufs(pd):
    src = np.arange(8192, dtype=np.uint32).view(np.uint8).copy()  # 32 KiB, no two words alike
    dst = np.zeros(src.size, dtype=np.uint8)
    ms, md = efa.reg_tensor(pd, src, ALL), efa.reg_tensor(pd, dst, ALL)
    yield src, dst, ms, md
    # Closed before the context: its close() refuses while children live, as the
    # package's does.
    ms.close()
    md.close()


def u64(*v):
    return np.array(v, dtype=np.uint64)


def u32(*v):
    return np.array(v, dtype=np.uint32)


def test_writes_land_and_complete_into_an_array(pair, bufs):
    src, dst, ms, md = bufs
    n = posted = efa.post_array(pair.a, pair.to_b, ms, (md.addr, md.rkey, md.length),
                                u64(0, 4096, 100), u64(8192, 0, 20000), u32(4096, 64, 3),
                                wr_ids=u64(7, 8, 9))
    assert posted == 3
    done = drain(pair.cq, n)
    assert sorted(done[:, 0].tolist()) == [7, 8, 9]
    assert (done[:, 1] == 0).all()  # status: success
    assert (dst[8192:12288] == src[:4096]).all()
    assert (dst[:64] == src[4096:4160]).all()
    assert (dst[20000:20003] == src[100:103]).all()
    assert not dst[12288:20000].any() and not dst[20003:].any()
    # Without wr_ids, an entry's wr_id is its index.
    assert efa.post_array(pair.a, pair.to_b, ms, (md.addr, md.rkey, md.length),
                          u64(0, 8, 16), u64(0, 8, 16), u32(8, 8, 8)) == 3
    assert sorted(drain(pair.cq, 3)[:, 0].tolist()) == [0, 1, 2]


def test_long_entries_are_chunked_and_reads_and_immediates_work(pair, pd, bufs):
    src, dst, ms, md = bufs
    remote = (md.addr, md.rkey, md.length)
    # 1000 bytes in chunks of at most 300: 4 work requests, each with the entry's wr_id.
    assert efa.post_array(pair.a, pair.to_b, ms, remote, u64(0), u64(5000), u32(1000),
                          wr_ids=u64(42), max_chunk=300) == 4
    done = drain(pair.cq, 4)
    assert done[:, 0].tolist() == [42] * 4
    assert (dst[5000:6000] == src[:1000]).all()
    # RDMA read: the remote bytes land locally.
    back = np.zeros(256, dtype=np.uint8)
    mb = efa.reg_tensor(pd, back, ALL)
    assert efa.post_array(pair.a, pair.to_b, mb, remote, u64(16), u64(5000), u32(128),
                          opcode=efa.WROpcode.RDMA_READ) == 1
    drain(pair.cq, 1)
    assert (back[16:144] == src[:128]).all() and not back[:16].any()
    # Write with immediate: one receive consumed at the target per request.
    for i in range(2):
        pair.b.post_recv(efa.RecvWR(wr_id=100 + i, sg_list=[mb.sge(8)]))
    dst[:] = 0
    assert efa.post_array(pair.a, pair.to_b, ms, remote, u64(0, 64), u64(0, 64), u32(64, 64),
                          imm=u32(0xAB, 0xCD)) == 2
    done = drain(pair.cq, 4)
    rows = {int(r[0]): r for r in done}
    assert {int(rows[100][3]), int(rows[101][3])} == {0xAB, 0xCD}
    assert rows[100][2] == rows[101][2] == 64  # byte_len of the target's completions
    assert (dst[:128] == src[:128]).all()


def test_a_bad_entry_is_named_and_nothing_is_posted(pair, bufs):
    src, dst, ms, md = bufs
    remote = (md.addr, md.rkey, md.length)
    good = u64(0, 64, 128, 192)
    # Local range past the MR at entry 2.
    with pytest.raises(ValueError, match=r"entry 2: local range 32760\+64 runs past"):
        efa.post_array(pair.a, pair.to_b, ms, remote, u64(0, 64, 32760, 192), good,
                       u32(64, 64, 64, 64))
    # Remote range past the remote buffer at entry 3 (the remote length given).
    with pytest.raises(ValueError, match="entry 3: remote range"):
        efa.post_array(pair.a, pair.to_b, ms, (md.addr, md.rkey, 256), good,
                       u64(0, 64, 128, 200), u32(64, 64, 64, 64))
    with pytest.raises(ValueError, match="entry 1: length 0"):
        efa.post_array(pair.a, pair.to_b, ms, remote, good, good, u32(64, 0, 64, 64))
    # Offsets so large that offset + length wraps 64 bits.
    with pytest.raises(ValueError, match="entry 0: local range"):
        efa.post_array(pair.a, pair.to_b, ms, remote, u64(2**64 - 8), u64(0), u32(64))
    assert nothing_completes(pair.cq)
    assert not dst.any()


def test_short_arrays_wrong_dtypes_and_non_contiguous_arrays_are_refused(pair, bufs):
    src, dst, ms, md = bufs
    remote = (md.addr, md.rkey, md.length)
    off, ln = u64(0, 64, 128), u32(64, 64, 64)
    with pytest.raises(ValueError, match="lengths has 2 entries, local_offsets 3"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off, u32(64, 64))
    with pytest.raises(ValueError, match="wr_ids has 4 entries"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off, ln, wr_ids=u64(1, 2, 3, 4))
    with pytest.raises(TypeError, match="local_offsets: expected uint64"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off.astype(np.int64), off, ln)
    with pytest.raises(TypeError, match="lengths: expected uint32"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off, ln.astype(np.uint64))
    with pytest.raises(TypeError, match="remote_offsets: expected uint64"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off.astype(np.float64), ln)
    with pytest.raises(TypeError, match="local_offsets: expected a buffer of uint64"):
        efa.post_array(pair.a, pair.to_b, ms, remote, [0, 64, 128], off, ln)
    with pytest.raises(ValueError, match="local_offsets: not C-contiguous"):
        efa.post_array(pair.a, pair.to_b, ms, remote, u64(0, 0, 64, 0, 128, 0)[::2], off, ln)
    with pytest.raises(ValueError, match="dimension"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off.reshape(3, 1), off, ln)
    with pytest.raises(ValueError, match="RDMA_WRITE_WITH_IMM needs imm"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off, ln,
                       opcode=efa.WROpcode.RDMA_WRITE_WITH_IMM)
    with pytest.raises(ValueError, match="opcode"):
        efa.post_array(pair.a, pair.to_b, ms, remote, off, off, ln, opcode=efa.WROpcode.SEND)
    # Any buffer of the right item type will do: array.array, a memoryview.
    import array
    assert efa.post_array(pair.a, pair.to_b, ms, remote, array.array("Q", [0, 64, 128]),
                          memoryview(off), array.array("I", [64, 64, 64])) == 3
    drain(pair.cq, 3)
    assert (dst[:192] == src[:192]).all()


def test_a_closed_mr_or_ah_is_refused(pair, pd, bufs):
    src, dst, ms, md = bufs
    tmp = efa.reg_tensor(pd, np.zeros(64, dtype=np.uint8), ALL)
    tmp.close()
    with pytest.raises(efa.EfaError, match="closed"):
        efa.post_array(pair.a, pair.to_b, tmp, (md.addr, md.rkey, md.length), u64(0), u64(0),
                       u32(8))
    # A closed AH too (a Peer made on it).
    ah = pd.create_ah(pair.ctx.query_gid(1, 0))
    ah.close()
    with pytest.raises(efa.EfaError, match="AH is closed"):
        efa.post_array(pair.a, efa.Peer(ah, pair.to_b.qp_num, QKEY), ms,
                       (md.addr, md.rkey, md.length), u64(0), u64(0), u32(8))
    assert nothing_completes(pair.cq)
    assert not dst.any()


def test_a_full_queue_posts_nothing(ctx, pd, cq, bufs):
    src, dst, ms, md = bufs
    p = Pair(ctx, pd, cq, max_send_wr=16)
    remote = (md.addr, md.rkey, md.length)
    depth = p.a.query()[1].max_send_wr
    # More work requests in one transfer than the queue holds: refused up front.
    n = depth + 1
    offs = np.arange(n, dtype=np.uint64) * 8
    with pytest.raises(efa.EfaError, match="send queue's depth"):
        efa.post_array(p.a, p.to_b, ms, remote, offs, offs, np.full(n, 8, dtype=np.uint32))
    assert nothing_completes(cq)
    # Transfers that fit, posted without polling until the queue has no room: the one
    # that does not fit is refused whole.
    k = depth // 2 + 1
    offs = np.arange(k, dtype=np.uint64) * 8
    lens = np.full(k, 8, dtype=np.uint32)
    posted = 0
    with pytest.raises(efa.EfaError, match="queue"):
        for _ in range(8):
            posted += efa.post_array(p.a, p.to_b, ms, remote, offs, offs, lens)
    assert posted >= k
    drain(cq, posted)
    assert nothing_completes(cq)  # none of the refused transfer's requests went out
    # With the completions polled, the queue takes a transfer again.
    assert efa.post_array(p.a, p.to_b, ms, remote, offs, offs, lens) == k
    drain(cq, k)


def test_poll_into_checks_its_array_and_leaves_the_rest_in_the_cq(pair, bufs):
    src, dst, ms, md = bufs
    with pytest.raises(ValueError, match="4 columns"):
        efa.poll_into(pair.cq, np.zeros((4, 3), dtype=np.uint64))
    with pytest.raises(TypeError, match="out: expected uint64"):
        efa.poll_into(pair.cq, np.zeros((4, 4), dtype=np.float64))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.zeros((4, 4), dtype=np.uint64)
        ro.flags.writeable = False
        efa.poll_into(pair.cq, ro)
    with pytest.raises(ValueError, match="not C-contiguous"):
        efa.poll_into(pair.cq, np.zeros((4, 8), dtype=np.uint64)[:, ::2])
    n = 10
    offs = np.arange(n, dtype=np.uint64) * 8
    efa.post_array(pair.a, pair.to_b, ms, (md.addr, md.rkey, md.length), offs, offs,
                   np.full(n, 8, dtype=np.uint32))
    out = np.zeros((3, 4), dtype=np.uint64)
    got = []
    deadline = time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        k = efa.poll_into(pair.cq, out)
        assert k <= 3
        got += out[:k, 0].tolist()
    assert sorted(got) == list(range(n))
    assert efa.poll_into(pair.cq, np.zeros((0, 4), dtype=np.uint64)) == 0


CHILD = r'''
import struct, sys
import numpy as np
import efa
ctx = efa.get_efa_device_list()[0].open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(256)
qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=0x1234)
buf = np.zeros(65536, dtype=np.uint8)
access = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
mr = efa.reg_tensor(pd, buf, access)
out = sys.stdout.buffer
out.write(efa.local_endpoint_info(qp, qkey=0x1234).to_bytes() + struct.pack("!QIQ", mr.addr, mr.rkey, mr.length))
out.flush()
peer = efa.EndpointInfo.from_bytes(sys.stdin.buffer.read(24)).peer(pd)  # the target's AH
out.write(b"R"); out.flush()
sys.stdin.buffer.read(1)  # the parent's writes completed
out.write(buf.tobytes()); out.flush()
sys.stdin.buffer.read(1)
'''


def test_writes_into_another_process(ctx, pd, cq, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    p = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    try:
        qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=512)).prepare(qkey=QKEY)
        hello = p.stdout.read(24 + 20)
        peer = efa.EndpointInfo.from_bytes(hello[:24]).peer(pd)
        raddr, rkey, rlen = struct.unpack("!QIQ", hello[24:])
        p.stdin.write(efa.local_endpoint_info(qp, qkey=QKEY).to_bytes())
        p.stdin.flush()
        assert p.stdout.read(1) == b"R"
        src = (np.arange(65536, dtype=np.uint32) * 2654435761 >> 24).astype(np.uint8)
        ms = efa.reg_tensor(pd, src, ALL)
        # 256 blocks of 256 bytes, reversed; the last 16 blocks as one entry of 4096 bytes
        # in chunks of 1024.
        n = 240
        lo = np.arange(n, dtype=np.uint64) * 256
        ro = (65536 - 256 - lo).astype(np.uint64)
        posted = efa.post_array(qp, peer, ms, (raddr, rkey, rlen), lo, ro,
                                np.full(n, 256, dtype=np.uint32))
        posted += efa.post_array(qp, peer, ms, (raddr, rkey, rlen), u64(61440), u64(0),
                                 u32(4096), wr_ids=u64(1000), max_chunk=1024)
        assert posted == n + 4
        done = drain(cq, posted, timeout=20)
        assert (done[:, 1] == 0).all()
        p.stdin.write(b"x")
        p.stdin.flush()
        got = np.frombuffer(p.stdout.read(65536), dtype=np.uint8)
        want = np.empty(65536, dtype=np.uint8)
        for i in range(n):
            want[65536 - 256 - 256 * i:65536 - 256 * i] = src[256 * i:256 * (i + 1)]
        want[:4096] = src[61440:]
        assert (got == want).all()
        p.stdin.write(b"x")
        p.stdin.flush()
        assert p.wait(timeout=20) == 0
    finally:
        p.kill()


def test_the_readme_example_runs_as_written(tmp_path):
    readme = os.path.join(HERE, "..", "README.md")
    text = open(readme).read()
    section = text.split("## Posting from arrays", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "efa.post_array(" in code and "efa.poll_into(" in code
    script = tmp_path / "example.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, timeout=60)


def test_a_small_cq_bounds_an_array_post_and_poll_into_frees_its_entries(ctx, pd, bufs):
    # A QP of default depths on a 16-entry CQ, as small-CQ programs make them: a transfer
    # that could overflow the CQ is refused as a full queue, nothing posted; polled
    # completions free their entries for the next one.
    src, dst, ms, md = bufs
    small = ctx.create_cq(16)
    p = Pair(ctx, pd, small)
    remote = (md.addr, md.rkey, md.length)
    n = 17
    with pytest.raises(efa.EfaError) as e:
        efa.post_array(p.a, p.to_b, ms, remote, u64(*range(n)), u64(*range(n)), u32(*[1] * n))
    assert e.value.errno == errno.ENOMEM  # the CQ's 16 entries cannot take 17
    assert nothing_completes(small)
    for round in range(3):
        assert efa.post_array(p.a, p.to_b, ms, remote, u64(*range(16)), u64(*range(16)),
                              u32(*[1] * 16), wr_ids=u64(*range(100 * round, 100 * round + 16))) == 16
        done = drain(small, 16)
        assert sorted(done[:, 0].tolist()) == list(range(100 * round, 100 * round + 16))
        assert (done[:, 1] == 0).all()
    p.a.close()
    p.b.close()
    small.close()


def test_unaligned_arrays_and_reserved_wr_ids(pair, bufs):
    src, dst, ms, md = bufs
    remote = (md.addr, md.rkey, md.length)

    def unaligned(fmt, values):
        size = struct.calcsize(fmt)
        raw = bytearray(size * len(values) + 1)
        view = memoryview(raw)[1:].cast(fmt)  # items one byte off their alignment
        for i, v in enumerate(values):
            view[i] = v
        return view

    # Read through a copy when the items are not aligned: the same transfer.
    assert efa.post_array(pair.a, pair.to_b, ms, remote, unaligned("Q", [0, 64]),
                          unaligned("Q", [128, 256]), unaligned("I", [64, 32]),
                          wr_ids=unaligned("Q", [5, 6])) == 2
    assert sorted(drain(pair.cq, 2)[:, 0].tolist()) == [5, 6]
    assert (dst[128:192] == src[:64]).all() and (dst[256:288] == src[64:96]).all()
    # A wr_id with bit 63 set (reserved by the Rust core) names its entry, posts nothing.
    dst[:] = 0
    with pytest.raises(efa.EfaError, match="entry 1: .*bit 63"):
        efa.post_array(pair.a, pair.to_b, ms, remote, u64(0, 64), u64(0, 64), u32(8, 8),
                       wr_ids=u64(1, 2**63 + 1))
    assert nothing_completes(pair.cq)
    assert not dst.any()


def test_poll_into_frees_the_entries_of_each_qp_of_a_shared_small_cq(ctx, pd, bufs):
    # Writes with immediate from a to b on one 16-entry CQ: each polled batch mixes a's
    # sends and b's receives, and every entry goes back to the QP that held it.
    src, dst, ms, md = bufs
    small = ctx.create_cq(16)
    p = Pair(ctx, pd, small, max_recv_wr=16)
    remote = (md.addr, md.rkey, md.length)
    inbox = efa.reg_tensor(pd, np.zeros(8, dtype=np.uint8), ALL)
    for round in range(4):
        for i in range(4):
            p.b.post_recv(efa.RecvWR(wr_id=1000 + i, sg_list=[inbox.sge(0)]))
        # 4 receives outstanding: 13 sends would exceed the 16 entries.
        with pytest.raises(efa.EfaError) as e:
            efa.post_array(p.a, p.to_b, ms, remote, u64(*range(13)), u64(*range(13)),
                           u32(*[1] * 13), imm=u32(*range(13)))
        assert e.value.errno == errno.ENOMEM
        assert efa.post_array(p.a, p.to_b, ms, remote, u64(0, 8, 16, 24), u64(0, 8, 16, 24),
                              u32(8, 8, 8, 8), imm=u32(1, 2, 3, 4)) == 4
        done = drain(small, 8)
        assert sorted(done[:, 0].tolist()) == [0, 1, 2, 3, 1000, 1001, 1002, 1003]
        assert sorted(done[:, 3].tolist()) == [0, 0, 0, 0, 1, 2, 3, 4]
        assert nothing_completes(small, 0.05)
    p.a.close()
    p.b.close()
    inbox.close()
    small.close()
