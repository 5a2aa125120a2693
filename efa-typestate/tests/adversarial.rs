//! The crate's promises to safe code, attacked as a user would by mistake or on purpose
//! (issue 24): leases abandoned and forgotten, transfers polled on the wrong CQ, from two
//! threads at once, or with a panicking callback, and caller or peer numbers that would
//! wrap. Races are widened with efa-sim's delay knob (`EFA_SIM_FAULTS=delay_us=...`,
//! which also routes same-process requests through the fabric). Each test asserts what
//! the user relies on: where bytes landed, and which error came back. The promise table
//! in the crate docs (`Soundness`) names the test of each promise.

mod common;
use std::time::{Duration, Instant};

use common::*;
use efa_typestate::*;

/// The fabric delay used to widen race windows: far above the software device's
/// same-host latency, well below its 1 s peer timeout.
const DELAY: &[(&str, &str)] = &[("EFA_SIM_FAULTS", "seed=5,delay_us=150000")];
const LATE: Duration = Duration::from_millis(400);

/// Two SRD QPs of one PD on efa_0 whose sends and receives all complete on one CQ.
macro_rules! shared_cq_pair {
    ($ctx:ident, $pd:ident, $cq:ident, $a:ident, $b:ident) => {
        let $ctx = open(0);
        let $pd = $ctx.alloc_pd().unwrap();
        let $cq = $ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
        let $a = rts_qp(&$pd, &$cq, &QpConfig::srd(), QKEY_A);
        let $b = rts_qp(&$pd, &$cq, &QpConfig::srd(), QKEY_B);
    };
}

/// Registers `len` bytes of `fill` on `pd` (a plain, slice-giving registration).
fn filled<'pd>(pd: &'pd BPd<'_>, len: usize, fill: u8) -> Mr<&'pd BPd<'pd>, Vec<u8>> {
    pd.register(vec![fill; len], AccessFlags::LOCAL_WRITE)
        .unwrap()
}

/// Watches `bytes()` for `wait` and fails if it ever differs from `expect`.
fn stays(what: &str, wait: Duration, expect: &[u8], bytes: impl Fn() -> Vec<u8>) {
    let end = Instant::now() + wait;
    while Instant::now() < end {
        assert!(bytes() == expect, "{what} changed after the call returned");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---- Promise: an abandoned or forgotten lease keeps its memory and key ---------------

/// Registers and drops buffers of `len` bytes until one gets `lkey` (efa-sim reissues a
/// freed key slot's next generation, 255 of them) or `tries` ran out.
fn hunt_key<'pd>(
    pd: &'pd BPd<'_>,
    len: usize,
    lkey: u32,
    tries: usize,
) -> Option<Mr<&'pd BPd<'pd>, Vec<u8>>> {
    (0..tries)
        .map(|_| filled(pd, len, 0))
        .find(|m| m.lkey() == lkey)
}

/// The attack on an abandoned receive of key `lkey` (`wr_id` on `b`): a later, unrelated
/// registration must never get its key (registrations are made and dropped until one
/// does, 600 times), and a SEND from `a` lands in the abandoned memory, not in a fresh
/// registration.
fn lands_in_the_abandoned_receive_only<P: Parent, X, C: CompletionQueue>(
    pd: &BPd<'_>,
    a: &Qp<P, Rts>,
    to_b: &Peer<X>,
    cq: &C,
    lkey: u32,
    wr_id: u64,
) {
    let victim = hunt_key(pd, 4096, lkey, 600);
    assert!(
        victim.is_none(),
        "a new registration got the key of a posted receive"
    );
    let fresh = filled(pd, 4096, 0);
    let mut s = SendBatch::<1>::new(a);
    s.send_inline(1, to_b, &[0xab; 32]).unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(cq, 2);
    let recv = got
        .iter()
        .find(|c| c.wr_id() == wr_id)
        .expect("the receive");
    recv.result().unwrap(); // it landed in the abandoned (leaked) memory
    assert_eq!(recv.byte_len(), 32);
    assert!(fresh.as_slice().iter().all(|&x| x == 0));
}

#[test]
fn hole_1_a_dropped_recv_ticket_keeps_its_key_from_being_reissued() {
    shared_cq_pair!(ctx, pd, cq, a, b);
    let to_b = pd.connect(&b.endpoint()).unwrap();

    let lease = filled(&pd, 4096, 0);
    let lkey = lease.lkey();
    let ticket = b.post_recv_lease(lease).unwrap();
    let wr_id = ticket.wr_id();
    drop(ticket); // the natural mistake: the receive is still posted

    lands_in_the_abandoned_receive_only(&pd, &a, &to_b, &cq, lkey, wr_id);
}

#[test]
fn hole_1_a_forgotten_slot_keeps_its_pool_registered_after_the_pool_is_dropped() {
    shared_cq_pair!(ctx, pd, cq, a, b);
    let to_b = pd.connect(&b.endpoint()).unwrap();

    let pool = BufferPool::new(&pd, 4096, 1).unwrap();
    let lkey = pool.lkey();
    let ticket = b.post_recv_lease(pool.take().unwrap()).unwrap();
    let wr_id = ticket.wr_id();
    std::mem::forget(ticket); // ends the pool's borrow with the slot still posted
    drop(pool);

    lands_in_the_abandoned_receive_only(&pd, &a, &to_b, &cq, lkey, wr_id);
}

#[test]
fn tickets_come_back_by_a_reset_of_their_own_qp_only() {
    shared_cq_pair!(ctx, pd, cq, a, b);
    let pool = BufferPool::new(&pd, 64, 2).unwrap();
    let ticket = b.post_recv_lease(pool.take().unwrap()).unwrap();
    // Another QP's reset says nothing about this receive.
    let a = a.reset().unwrap();
    let ticket = ticket
        .reclaim_reset(&a)
        .expect_err("a is not the QP it was posted on");
    let b = b.reset().unwrap();
    let slot = ticket.reclaim_reset(&b).expect("b was reset");
    drop(slot);
    assert_eq!(pool.available(), 2);
    // A receive posted again after the reset is not cut off by the old one.
    let b = b.prepare(QKEY_B, None).unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let a = a.prepare(QKEY_A, None).unwrap();
    let ticket = b.post_recv_lease(pool.take().unwrap()).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(1, &to_b, b"after the reset").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    let c = got.iter().find(|c| ticket.matches(c)).expect("the receive");
    let slot = ticket.reclaim(c).unwrap();
    assert_eq!(&slot.as_slice()[..15], b"after the reset");
}

#[test]
fn a_dropped_pool_with_every_slot_back_releases_its_registration() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let pool = BufferPool::new(&pd, 64, 4).unwrap();
    let slot = pool.take().unwrap();
    drop(slot);
    drop(pool);
    // The PD can be closed only if nothing is registered in it any more.
    pd.close().map_err(|(_, e)| e).unwrap();
}

// ---- Promise: write_all / read_all return only when no chunk is in flight ------------

/// 1 MiB at b, registered for remote reads, and the pattern it holds.
fn source<'pd>(pd: &'pd BPd<'_>) -> (Mr<&'pd BPd<'pd>, Vec<u8>, RemoteWrite>, Vec<u8>) {
    let pattern: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 % 253) as u8).collect();
    let mr = pd
        .register_remote_write(pattern.clone(), AccessFlags::REMOTE_READ)
        .unwrap();
    (mr, pattern)
}

#[test]
fn hole_2_read_all_refuses_a_cq_that_is_not_the_qp_s_send_cq() {
    let ctx = open(0);
    let other = open(1);
    let pd = ctx.alloc_pd().unwrap();
    let send_cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let recv_cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let foreign_cq = other.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = pd
        .create_qp(&send_cq, &recv_cq, &QpConfig::srd())
        .unwrap()
        .prepare(QKEY_A, None)
        .unwrap();
    let b = rts_qp(&pd, &send_cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let (src, _) = source(&pd);
    let mut dst = filled(&pd, 1 << 20, 0);
    let opts = Transfer::new(Duration::from_secs(5));
    for (what, r) in [
        (
            "its receive CQ",
            a.read_all(&recv_cq, &to_b, &mut dst, src.remote(), opts, drop),
        ),
        (
            "another device's CQ",
            a.read_all(&foreign_cq, &to_b, &mut dst, src.remote(), opts, drop),
        ),
    ] {
        assert_eq!(r, Err(InvalidInput::NotSendCq.into()), "{what}");
    }
    assert_eq!(
        a.write_all(&recv_cq, &to_b, &src, src.remote(), opts, drop),
        Err(InvalidInput::NotSendCq.into())
    );
    expect_none(&send_cq, Duration::from_millis(50));
    assert!(dst.as_slice().iter().all(|&x| x == 0), "nothing was posted");
}

/// Posts a receive of `wr_id` on `a`, has `b` send to it, and waits until the receive's
/// completion surely sits in the CQ: the transfer that starts next finds it at its first
/// poll, a whole fabric delay before its own chunk can land.
fn completion_waiting_in_the_cq<P: Parent, X>(
    a: &Qp<P, Rts>,
    b: &Qp<P, Rts>,
    to_a: &Peer<X>,
    inbox: Sge<'_>,
    wr_id: u64,
) {
    recv_one(a, wr_id, inbox);
    let mut s = SendBatch::<1>::new(b);
    s.send_inline(9, to_a, b"x").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { b.post_send(&s) }.unwrap();
    std::thread::sleep(LATE);
}

#[test]
fn hole_2_a_receive_with_wr_id_0_on_a_shared_cq_is_not_a_chunk() {
    in_child(
        "hole_2_a_receive_with_wr_id_0_on_a_shared_cq_is_not_a_chunk",
        DELAY,
        || {
            shared_cq_pair!(ctx, pd, cq, a, b);
            let (to_a, to_b) = (
                pd.connect(&a.endpoint()).unwrap(),
                pd.connect(&b.endpoint()).unwrap(),
            );
            let (src, pattern) = source(&pd);
            let inbox = filled(&pd, 64, 0);
            completion_waiting_in_the_cq(&a, &b, &to_a, inbox.sge_all().unwrap(), 0);
            let mut dst = filled(&pd, 1 << 20, 0);
            let mut others = Vec::new();
            let opts = Transfer::new(Duration::from_secs(10));
            a.read_all(&cq, &to_b, &mut dst, src.remote(), opts, |c| others.push(c))
                .unwrap();
            assert!(
                dst.as_slice() == pattern.as_slice(),
                "read_all returned before its chunk landed"
            );
            assert!(
                others
                    .iter()
                    .any(|c| c.wr_id() == 0 && c.opcode().is_recv()),
                "the receive went to `others`: {others:?}"
            );
        },
    );
}

#[test]
fn eighth_hole_a_read_of_the_caller_with_wr_id_0_is_not_a_chunk() {
    in_child(
        "eighth_hole_a_read_of_the_caller_with_wr_id_0_is_not_a_chunk",
        DELAY,
        || {
            shared_cq_pair!(ctx, pd, cq, a, b);
            let to_b = pd.connect(&b.endpoint()).unwrap();
            let (src, pattern) = source(&pd);
            // The caller's own RDMA read, wr_id 0 (the old default chunk id): its
            // completion sits in the CQ when the transfer starts.
            let mine = filled(&pd, 64, 0);
            let mut r = SendBatch::<1>::new(&a);
            r.read(
                0,
                &to_b,
                mine.sge_all().unwrap(),
                src.remote().slice(0, 64).unwrap(),
            )
            .unwrap();
            // SAFETY: `mine` is read only after its completion arrived (in `others`).
            unsafe { a.post_send(&r) }.unwrap();
            std::thread::sleep(LATE);
            let mut dst = filled(&pd, 1 << 20, 0);
            let mut others = Vec::new();
            let opts = Transfer::new(Duration::from_secs(10));
            a.read_all(&cq, &to_b, &mut dst, src.remote(), opts, |c| others.push(c))
                .unwrap();
            assert!(
                dst.as_slice() == pattern.as_slice(),
                "read_all counted the caller's read as its chunk"
            );
            assert_eq!(others.len(), 1, "{others:?}");
            assert_eq!(others[0].wr_id(), 0);
        },
    );
}

#[test]
fn hole_2_a_panicking_callback_unwinds_only_after_every_chunk_landed() {
    in_child(
        "hole_2_a_panicking_callback_unwinds_only_after_every_chunk_landed",
        DELAY,
        || {
            shared_cq_pair!(ctx, pd, cq, a, b);
            let (to_a, to_b) = (
                pd.connect(&a.endpoint()).unwrap(),
                pd.connect(&b.endpoint()).unwrap(),
            );
            let (src, pattern) = source(&pd);
            let inbox = filled(&pd, 64, 0);
            completion_waiting_in_the_cq(&a, &b, &to_a, inbox.sge_all().unwrap(), 5);
            let mut dst = filled(&pd, 1 << 20, 0);
            let opts = Transfer::new(Duration::from_secs(10));
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                a.read_all(&cq, &to_b, &mut dst, src.remote(), opts, |c| {
                    panic!("a callback that panics on {c:?}")
                })
            }));
            assert!(unwound.is_err(), "the callback's panic continues");
            // Unwinding gave `dst` back: no chunk may still be on its way into it.
            assert!(
                dst.as_slice() == pattern.as_slice(),
                "the panic cut the wait for the chunk short"
            );
            stays("dst", LATE, &pattern, || dst.as_slice().to_vec());
        },
    );
}

#[test]
fn a_transfer_whose_completions_another_thread_steals_is_cut_off_by_a_reset() {
    in_child(
        "a_transfer_whose_completions_another_thread_steals_is_cut_off_by_a_reset",
        DELAY,
        || {
            shared_cq_pair!(ctx, pd, cq, a, b);
            let to_b = pd.connect(&b.endpoint()).unwrap();
            let (src, _) = source(&pd);
            let mut dst = filled(&pd, 1 << 20, 0);
            let stop = std::sync::atomic::AtomicBool::new(false);
            // 50 ms to post and 50 ms more to wait, against a 150 ms fabric delay: the
            // read request is still on its way when the transfer gives up.
            let opts = Transfer::new(Duration::from_millis(50));
            let (r, took) = std::thread::scope(|s| {
                s.spawn(|| {
                    // Another poller of the same CQ: it would take the chunk's completion.
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = cq.poll_one();
                        std::thread::sleep(Duration::from_micros(200));
                    }
                });
                let t = Instant::now();
                let r = a.read_all(&cq, &to_b, &mut dst, src.remote(), opts, drop);
                let took = t.elapsed();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                (r, took)
            });
            assert_eq!(r, Err(Error::Timeout));
            assert!(took < Duration::from_secs(1), "bounded: {took:?}");
            assert_eq!(
                a.query().unwrap().state,
                QpStateKind::Reset,
                "cut off by a reset"
            );
            // The read request reaches the target after the reset: nothing may land.
            stays("dst", LATE, &[0u8; 1 << 20], || dst.as_slice().to_vec());
        },
    );
}

// ---- Promise: caller and peer numbers never wrap into other memory -------------------

#[test]
fn hole_3_element_indexes_that_overflow_are_out_of_bounds() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let mut words = pd
        .register_remote_write(vec![0u16; 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let huge = (1usize << (usize::BITS - 1)) | 1; // * 2 wraps to 2: element 1
    assert!(matches!(
        words.read(huge),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
    assert!(matches!(
        words.write(huge, 0xbeef),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
    assert_eq!(words.read(1), Ok(0), "element 1 untouched");
    let plain = pd
        .register(vec![0u32; 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(matches!(
        plain.sge_elems(huge, 1),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
    assert!(matches!(
        plain.sge_elems(0, huge),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
}

#[test]
fn hole_3_remote_ranges_past_the_address_space_are_refused() {
    let top = u64::MAX - 99;
    let hostile = RemoteBuffer::new(top, 4096, 7).to_bytes();
    assert_eq!(
        RemoteBuffer::parse(&hostile),
        Err(InvalidInput::AddressWraps {
            addr: top,
            len: 4096
        }
        .into())
    );
    // Built from unchecked parts: slicing never wraps to a low address.
    let r = RemoteBuffer::new(top, 4096, 7);
    assert!(matches!(
        r.slice(200, 16),
        Err(Error::Invalid(InvalidInput::AddressWraps { .. }))
    ));
    assert_eq!(r.slice(0, 99).unwrap().addr(), top);
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let local = filled(&pd, 8192, 0);
    assert!(matches!(
        RdmaChunks::new(&local, 0, r, 4096).map(|c| c.count()),
        Err(Error::Invalid(InvalidInput::AddressWraps { .. }))
    ));
    // A registration whose iova range wraps is refused before the device sees it.
    assert_eq!(
        pd.register_with_iova(vec![0u8; 4096], u64::MAX - 10, AccessFlags::LOCAL_WRITE)
            .map(drop),
        Err(InvalidInput::AddressWraps {
            addr: u64::MAX - 10,
            len: 4096
        }
        .into())
    );
}

// ---- Drops in every order ---------------------------------------------------------------

#[test]
fn handles_dropped_in_any_order_with_a_ticket_out_leave_the_device_usable() {
    use std::sync::Arc;
    // Every order of dropping the QP, the pool handle and the ticket of a posted slot:
    // nothing crashes, the pool is never freed under the posted slot, and the device
    // still moves bytes afterwards.
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        let ctx = Arc::new(open(0));
        let pd = Arc::new(Pd::new(Arc::clone(&ctx)).unwrap());
        let cq = Arc::new(ExtCq::new(Arc::clone(&ctx), CqOptions::new(1024)).unwrap());
        let qp = Qp::new(
            Arc::clone(&pd),
            Arc::clone(&cq),
            Arc::clone(&cq),
            &QpConfig::srd(),
        )
        .unwrap()
        .prepare(QKEY_A, None)
        .unwrap();
        let pool = Arc::new(BufferPool::new(Arc::clone(&pd), 256, 2).unwrap());
        let ticket = qp
            .post_recv_lease(Slot::take(Arc::clone(&pool)).unwrap())
            .unwrap();
        let (mut qp, mut pool, mut ticket) = (Some(qp), Some(pool), Some(ticket));
        for step in order {
            match step {
                0 => drop(qp.take()),
                1 => drop(pool.take()),
                _ => drop(ticket.take()),
            }
        }
        drop((cq, pd, ctx));
    }
    // The device is still fine: a fresh set of objects moves bytes.
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let inbox = filled(&pd, 64, 0);
    recv_one(&a, 1, inbox.sge_all().unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(2, &to_a, b"still here").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    assert!(expect_n(&cq, 2).iter().all(|c| c.is_ok()));
    assert_eq!(&inbox.as_slice()[..10], b"still here");
}
