"""The array API against a caller that rewrites its arrays while `efa.post_array` runs:
another thread's numpy copy (which runs without the GIL) into a view that repeats one
entry flips it between a good value and a bad one, millions of times a call, so the
entry changes under every read of it. Each entry must be read once, so that what was checked is
what is posted: every call either posts a transfer whose every request completes
successfully, or raises naming the bad entry and posts nothing. A post path that checked
the arrays and then read them again would post the bad offset, and its completion would
fail (the device's protection check)."""

import threading
import time

import pytest

import efa
from conftest import ALL, Pair

np = pytest.importorskip("numpy")

N = 1024  # entries per call
FLIPS = 1 << 20  # values written per copy (a few milliseconds without the GIL)


def flipper(array, i, a, b):
    """A thread that writes `a` and `b` in turn into `array[i]` until its `stop` event is
    set: numpy copies an alternating source into a view of that one entry repeated
    (stride 0), without the GIL, so post_array runs while the entry changes."""
    from numpy.lib.stride_tricks import as_strided

    one = as_strided(array[i:], shape=(FLIPS,), strides=(0,), writeable=True)
    src = np.empty(FLIPS, dtype=array.dtype)
    src[0::2], src[1::2] = a, b
    stop = threading.Event()

    def run():
        while not stop.is_set():
            np.copyto(one, src)
        array[i] = a

    t = threading.Thread(target=run)
    t.stop = stop
    t.start()
    return t


def test_offsets_rewritten_during_post_array_are_checked_as_posted(ctx, pd):
    cq = ctx.create_cq(2 * N)
    pair = Pair(ctx, pd, cq, max_send_wr=N)
    src = np.arange(N * 8, dtype=np.uint8)
    dst = np.zeros(N * 8, dtype=np.uint8)
    ms, md = efa.reg_tensor(pd, src, ALL), efa.reg_tensor(pd, dst, ALL)
    remote = (md.addr, md.rkey, md.length)
    good = np.arange(N, dtype=np.uint64) * 8
    offsets = good.copy()
    lengths = np.full(N, 8, dtype=np.uint32)
    out = np.zeros((N, 4), dtype=np.uint64)
    posted = refused = 0
    # Entry N/2 flips between its own offset and one right past the local MR.
    flip = flipper(offsets, N // 2, good[N // 2], ms.length)
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                n = efa.post_array(pair.a, pair.to_b, ms, remote, offsets, good, lengths)
            except ValueError as e:
                assert "entry %d: local range" % (N // 2) in str(e)
                refused += 1
                continue
            got = 0
            poll_deadline = time.monotonic() + 5
            while got < n:
                got += efa.poll_into(pair.cq, out[got:n])
                assert time.monotonic() < poll_deadline, "completions missing"
            bad = out[:n][out[:n, 1] != 0]
            assert not len(bad), "a request failed at the device: %r" % bad[:4]
            posted += 1
    finally:
        flip.stop.set()
        flip.join()
        for handle in (ms, md, pair.a, pair.b, pair.to_a, pair.to_b, cq):
            handle.close()
    # Both outcomes happened, so the race was on.
    assert posted and refused, (posted, refused)


def test_lengths_rewritten_during_post_array_post_what_was_counted(ctx, pd):
    # Entry N/2's length flips between one chunk and three: post_array's count (what it
    # returns, and what the CQ's accounting reserved) must be what it posted. Each
    # round's wr_ids are its own, so a request left over from a miscounted round shows up
    # in the next one's completions, and a missing one leaves the round short.
    cq = ctx.create_cq(8 * N)
    pair = Pair(ctx, pd, cq, max_send_wr=2 * N)
    src = np.arange(N * 8 + 64, dtype=np.uint8)
    dst = np.zeros(N * 8 + 64, dtype=np.uint8)
    ms, md = efa.reg_tensor(pd, src, ALL), efa.reg_tensor(pd, dst, ALL)
    remote = (md.addr, md.rkey, md.length)
    offsets = np.arange(N, dtype=np.uint64) * 8
    lengths = np.full(N, 8, dtype=np.uint32)
    out = np.zeros((N + 2, 4), dtype=np.uint64)
    seen = set()
    flip = flipper(lengths, N // 2, 8, 24)
    try:
        deadline = time.monotonic() + 2.0
        r = 0
        while time.monotonic() < deadline:
            r += 1
            ids = np.arange(r * N, (r + 1) * N, dtype=np.uint64)
            n = efa.post_array(pair.a, pair.to_b, ms, remote, offsets, offsets, lengths,
                               wr_ids=ids, max_chunk=8)
            seen.add(n)
            got = 0
            poll_deadline = time.monotonic() + 5
            while got < n:
                got += efa.poll_into(cq, out[got:n])
                assert time.monotonic() < poll_deadline, "round %d: %d of %d" % (r, got, n)
            assert (out[:n, 1] == 0).all()
            assert ((out[:n, 0] >= r * N) & (out[:n, 0] < (r + 1) * N)).all(), \
                "round %d polled another round's completion" % r
    finally:
        flip.stop.set()
        flip.join()
        time.sleep(0.05)
        left = efa.poll_into(cq, out)
        for handle in (ms, md, pair.a, pair.b, pair.to_a, pair.to_b, cq):
            handle.close()
    assert left == 0, "completions beyond what post_array counted: %r" % out[:left]
    assert seen == {N, N + 2}, seen  # both lengths were posted, so the race was on
