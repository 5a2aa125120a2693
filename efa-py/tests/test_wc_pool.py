"""`CQ.poll` reuses the `WC` objects the program dropped (no allocation per completion)
and never touches one the program still holds."""

import ctypes
import sys
import time

import efa
from conftest import ALL, poll_n


def write_wrs(pair, src, dst, first, n):
    return [
        efa.SendWR(wr_id=first + i, sg_list=[src.sge(8, 8 * i)],
                   opcode=efa.WROpcode.RDMA_WRITE, send_flags=efa.SendFlags.SIGNALED,
                   remote_addr=dst.addr + 8 * i, rkey=dst.rkey, dest=pair.to_b)
        for i in range(n)
    ]


def drain_ids(cq, n):
    """`(wr_id, id(wc))` of `n` completions, holding none of the `WC`s between polls (a
    comprehension's variable ends with it), as a loop that handles each completion and
    drops it does."""
    got = []
    deadline = time.monotonic() + 5
    while len(got) < n:
        assert time.monotonic() < deadline, "only %d of %d completions" % (len(got), n)
        got += [(wc.wr_id, id(wc)) for wc in cq.poll(n - len(got))]
    return got


def test_a_kept_completion_is_never_rewritten_and_dropped_ones_are_reused(pair, pd):
    n = 8
    buf_s, buf_d = (ctypes.c_char * (8 * n))(), (ctypes.c_char * (8 * n))()
    src = pd.reg_mr(ctypes.addressof(buf_s), 8 * n, ALL)
    dst = pd.reg_mr(ctypes.addressof(buf_d), 8 * n, ALL)

    pair.a.post_send(write_wrs(pair, src, dst, 100, n))
    kept = poll_n(pair.cq, n)
    kept_ids = sorted(wc.wr_id for wc in kept)
    assert kept_ids == list(range(100, 100 + n))
    kept_objects = {id(wc) for wc in kept}

    # The program holds `kept`: the next polls give other objects, and leave these.
    pair.a.post_send(write_wrs(pair, src, dst, 200, n))
    second = drain_ids(pair.cq, n)
    assert sorted(w for w, _ in second) == list(range(200, 200 + n))
    assert not kept_objects & {o for _, o in second}
    assert sorted(wc.wr_id for wc in kept) == kept_ids
    assert all(wc.status == 0 and wc.opcode == efa.WCOpcode.RDMA_WRITE for wc in kept)

    # A dropped WC goes back to the pool: single completions, each dropped before the
    # next poll, make at most one new WC between them (one per poll without the pool).
    made = efa._efa._wc_created()
    for i in range(10):
        pair.a.post_send(write_wrs(pair, src, dst, 300 + i, 1))
        assert drain_ids(pair.cq, 1)[0][0] == 300 + i
    assert efa._efa._wc_created() - made <= 1
    assert sorted(wc.wr_id for wc in kept) == kept_ids
    for h in (src, dst):
        h.close()


def test_a_reused_completion_carries_only_its_own_fields(pair, pd):
    """A reused WC that held a SEND with immediate becomes a write without one: no field
    of the earlier completion survives."""
    buf = (ctypes.c_char * 64)()
    mr = pd.reg_mr(ctypes.addressof(buf), 64, ALL)
    pair.b.post_recv(efa.RecvWR(wr_id=7, sg_list=[mr.sge(32, 32)]))
    pair.a.post_send(efa.SendWR(wr_id=8, sg_list=[mr.sge(16)],
                                opcode=efa.WROpcode.SEND_WITH_IMM, imm_data=0x1234,
                                send_flags=efa.SendFlags.SIGNALED, dest=pair.to_b))
    got = {wc.wr_id: (wc.opcode, wc.byte_len, wc.imm_data, wc.wc_flags)
           for wc in poll_n(pair.cq, 2)}
    assert got[7][2] == 0x1234 and got[7][1] == 16 and got[7][3] != 0
    pair.a.post_send(efa.SendWR(wr_id=9, sg_list=[mr.sge(8)],
                                opcode=efa.WROpcode.RDMA_WRITE,
                                send_flags=efa.SendFlags.SIGNALED,
                                remote_addr=mr.addr + 48, rkey=mr.rkey, dest=pair.to_b))
    (wc,) = poll_n(pair.cq, 1)
    assert (wc.wr_id, wc.status, wc.imm_data, wc.wc_flags, wc.byte_len) == (9, 0, 0, 0, 0)
    assert wc.src_qp == 0 and wc.sgid is None and not wc.unsolicited
    mr.close()


def test_completions_the_program_keeps_carry_no_reference_of_the_pool(pair, pd):
    """The pool forgets a `WC` the program keeps (held at two polls in a row), and one it
    has no room for, by giving up its reference there and then: the program's own
    references are the only ones left. (`CQ.poll` and `QP.post_send` run outside PyO3's
    trampoline, where a reference PyO3 gives up late would stay until some other call
    of the package; nothing but CPython runs between the polls and the counts here.)"""
    n, rounds = 32, 10  # 320 kept: more than the pool keeps (256)
    buf_s, buf_d = (ctypes.c_char * (8 * n))(), (ctypes.c_char * (8 * n))()
    src = pd.reg_mr(ctypes.addressof(buf_s), 8 * n, ALL)
    dst = pd.reg_mr(ctypes.addressof(buf_d), 8 * n, ALL)
    batches = [write_wrs(pair, src, dst, 1000 * (r + 1), n) for r in range(rounds)]
    # Two more posts of one request, whose completions are kept too (the pool has no
    # free WC, so a poll looks at every pooled one): their polls find every WC kept
    # before them held, the second time for all of them.
    more = [write_wrs(pair, src, dst, 50 + i, 1) for i in range(2)]
    kept = []
    deadline = time.monotonic() + 5
    for wrs in batches:
        pair.a.post_send(wrs)
        got = 0
        while got < n:
            assert time.monotonic() < deadline
            polled = pair.cq.poll(n - got)
            got += len(polled)
            kept += polled
            del polled
    assert len(kept) == n * rounds
    extra = []
    for i, wrs in enumerate(more):
        pair.a.post_send(wrs)
        while len(extra) <= i:
            assert time.monotonic() < deadline
            extra += pair.cq.poll(1)
    # As many references as an object only a list holds, read the same way (3 on
    # CPython 3.9 to 3.13: the list's, the loop variable's, getrefcount's argument),
    # nothing of the pool's: the pool forgot each WC at the second poll that found it
    # held, or never kept it (full).
    alone = [sys.getrefcount(x) for x in [object()]][0]
    counts = [sys.getrefcount(wc) for wc in kept]
    assert counts == [alone] * (n * rounds), [i for i, c in enumerate(counts) if c != alone]
    assert sorted(wc.wr_id for wc in kept) == sorted(
        1000 * (r + 1) + i for r in range(rounds) for i in range(n))
    for h in (src, dst):
        h.close()
