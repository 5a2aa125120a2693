//! Safe posting: buffer leases moved into the post and handed back by their completion.

mod common;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use efa_typestate::*;

/// Waits for the completion of `ticket` (others are appended to `rest`).
fn complete<L: Lease>(
    cq: &impl CompletionQueue,
    ticket: Posted<L>,
    rest: &mut Vec<Completion>,
) -> (L, Completion) {
    let mut ticket = Some(ticket);
    for _ in 0..1000 {
        let c = cq.wait(Duration::from_secs(10)).expect("a completion");
        match ticket.take().unwrap().reclaim(&c) {
            Ok(lease) => return (lease, c),
            Err(t) => {
                ticket = Some(t);
                rest.push(c);
            }
        }
    }
    panic!("the ticket's completion never came")
}

#[test]
fn pool_slots_round_trip_send_receive_and_rdma_read() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable()).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let _to_a = pd.connect(&a.endpoint()).unwrap();
    let pool = BufferPool::new(&pd, 128, 3).unwrap();
    assert_eq!(
        (pool.len(), pool.slot_size(), pool.available()),
        (3, 128, 3)
    );

    let mut out = pool.take().unwrap();
    out.as_mut_slice()[..11].copy_from_slice(b"leased send");
    let rx = b.post_recv_lease(pool.take().unwrap()).unwrap();
    assert!(rx.wr_id() & (1 << 63) != 0, "lease wr_ids carry bit 63");
    let tx = a.post_send_lease(&to_b, SendOp::Send, out, 11).unwrap();
    assert_eq!(pool.available(), 1, "posted slots stay taken");
    let mut rest = Vec::new();
    let (inbox, rc) = complete(&cq, rx, &mut rest);
    rc.result().unwrap();
    assert_eq!(rc.byte_len(), 11);
    assert_eq!(&inbox.as_slice()[..11], b"leased send");
    assert!(inbox.as_slice()[11..].iter().all(|&x| x == 0));
    let (out, sc) = if let Some(at) = rest.iter().position(|c| c.opcode() == WcOpcode::SEND) {
        let c = rest.remove(at);
        // The send's completion already arrived: reclaim with it.
        let mut t = Some(tx);
        (t.take().unwrap().reclaim(&c).unwrap(), c)
    } else {
        complete(&cq, tx, &mut rest)
    };
    sc.result().unwrap();
    drop(inbox);
    assert_eq!(
        pool.available(),
        2,
        "a reclaimed slot goes back when dropped"
    );

    // RDMA read into a leased slot (a remote-readable owned buffer on the other side).
    let remote = pd
        .register(b"read me from afar".to_vec(), AccessFlags::REMOTE_READ)
        .unwrap();
    let t = a
        .post_send_lease(&to_b, SendOp::Read(remote.remote()), out, 17)
        .unwrap();
    let (back, c) = complete(&cq, t, &mut rest);
    c.result().unwrap();
    assert_eq!(&back.as_slice()[..17], b"read me from afar");
    assert!(rest.is_empty(), "no other completions: {rest:?}");
}

#[test]
fn refused_leases_come_back_and_reach_nothing() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let other = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    // Borrowed memory cannot be leased: a forgotten ticket would end the borrow.
    let mut stack = [0u8; 64];
    let borrowed = pd
        .register(&mut stack[..], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let r = a.post_recv_lease(borrowed).unwrap_err();
    assert_eq!(r.error, Error::Invalid(InvalidInput::LeaseNeedsOwnedMemory));
    assert_eq!(r.lease.len(), 64, "the lease is handed back");
    // A lease of another PD.
    let foreign = BufferPool::new(&other, 64, 1).unwrap();
    let r = a.post_recv_lease(foreign.take().unwrap()).unwrap_err();
    assert_eq!(
        r.error,
        Error::Invalid(InvalidInput::WrongPd(PdObject::Lease))
    );
    drop(r);
    assert_eq!(
        foreign.available(),
        1,
        "the refused slot went back to its pool"
    );
    // Longer than the lease, or than the message limit.
    let pool = BufferPool::new(&pd, 64, 2).unwrap();
    let r = a
        .post_send_lease(&to_a, SendOp::Send, pool.take().unwrap(), 65)
        .unwrap_err();
    assert_eq!(
        r.error,
        Error::Invalid(InvalidInput::SgeOutOfBounds { offset: 0, len: 65 })
    );
    expect_none(&cq, Duration::from_millis(20));
}

#[test]
fn a_dropped_ticket_keeps_its_slot_out_of_the_pool() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let pool = BufferPool::new(&pd, 64, 2).unwrap();
    let posted = b.post_recv_lease(pool.take().unwrap()).unwrap();
    drop(posted); // the receive stays posted: its slot must never be handed out again
    assert_eq!(pool.available(), 1);
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(1, &to_b, b"into the abandoned slot").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
    let only = pool.take().unwrap();
    assert!(pool.take().is_none(), "the abandoned slot is not reused");
    assert!(
        only.as_slice().iter().all(|&x| x == 0),
        "the free slot was not written"
    );
    // An owned Mr lease dropped in flight stays registered and allocated (leaked): the
    // receive lands in memory nobody else owns (deregistering it would let its key be
    // reissued to a later registration, tests/adversarial.rs hole_1).
    let mr = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let ticket = b.post_recv_lease(mr).unwrap();
    let wr_id = ticket.wr_id();
    drop(ticket);
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    let recv = got
        .iter()
        .find(|c| c.wr_id() == wr_id)
        .expect("the receive");
    assert!(
        recv.is_ok(),
        "the abandoned receive completes normally: {got:?}"
    );
}

#[test]
fn shared_pools_hand_slots_to_other_threads() {
    let ctx = Arc::new(open(0));
    let pd = Arc::new(Pd::new(Arc::clone(&ctx)).unwrap());
    let pool = Arc::new(BufferPool::new(Arc::clone(&pd), 32, 4).unwrap());
    let handles: Vec<_> = (0..4u8)
        .map(|i| {
            let mut slot = Slot::take(Arc::clone(&pool)).unwrap();
            std::thread::spawn(move || {
                slot.as_mut_slice().fill(i);
                slot
            })
        })
        .collect();
    let slots: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut indices: Vec<u32> = slots.iter().map(|s| s.index()).collect();
    indices.sort();
    assert_eq!(indices, vec![0, 1, 2, 3], "each slot handed out once");
    for (i, s) in slots.iter().enumerate() {
        assert!(s.as_slice().iter().all(|&x| x == i as u8));
    }
    assert!(pool.take().is_none());
    drop(slots);
    assert_eq!(pool.available(), 4);
}
