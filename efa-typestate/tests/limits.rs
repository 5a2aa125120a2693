//! Limits on the software device: full send and receive queues, batches no longer than
//! their queue, send operations a QP lacks, the message size, RNR with no retry.

#[macro_use]
mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

#[test]
fn sends_up_to_max_msg_sz_arrive_and_longer_ones_are_refused() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mtu = ctx.query_port(1).unwrap().max_msg_sz as usize;
    assert_eq!(a.limits().max_msg_sz() as usize, mtu);
    let big = pd
        .register(vec![1u8; mtu + 1], AccessFlags::empty())
        .unwrap();
    let dst = pd
        .register(vec![0u8; mtu + 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    let err = s.send(5, &to_b, big.sge_all().unwrap()).unwrap_err();
    assert_eq!(
        err,
        Error::Invalid(InvalidInput::MessageTooLong {
            len: mtu as u64 + 1,
            max: mtu as u32
        })
    );
    assert_eq!(
        err.to_string(),
        format!("message of {} bytes exceeds max_msg_sz {mtu}", mtu + 1)
    );
    assert!(s.is_empty(), "nothing refused reaches the device");

    // Exactly max_msg_sz bytes arrive whole.
    recv_one(&b, 1, dst.sge_all().unwrap());
    s.send(6, &to_b, big.sge(0, mtu as u64).unwrap()).unwrap();
    // SAFETY: `big` is not written after the post and its Mr lives to the end; `dst` is
    // read only after its receive completion is polled below.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let r = expect_n(&cqb, 1)[0];
    r.result().unwrap();
    assert_eq!(r.byte_len() as usize, mtu);
    assert!(dst.as_slice()[..mtu].iter().all(|&x| x == 1));
    assert!(dst.as_slice()[mtu..].iter().all(|&x| x == 0));
}

#[test]
fn rnr_when_receiver_posts_nothing() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(QKEY_A, Some(RnrRetry::Times(0)))
        .unwrap();
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(77, &to_b, b"anyone?").unwrap();
    // SAFETY: the batch holds only an inline payload, copied during the call: no memory
    // of ours is left to the device.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cq, 1)[0];
    assert_eq!(c.wr_id(), 77);
    assert_eq!(c.efa_status(), EfaStatus::REMOTE_RNR);
    assert_eq!(c.status(), WcStatus::RNR_RETRY_EXC_ERR);
}

#[test]
fn send_queue_full_is_recoverable() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd().depth(8, 8), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd().depth(64, 64), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let depth = a.caps().max_send_wr as usize;
    let dst = pd
        .register(vec![0u8; 64 * 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<64>::new(&b);
    for i in 0..64 {
        r.push(1000 + i, dst.sge(i * 16, 16).unwrap()).unwrap();
    }
    // SAFETY: `dst` is never read or written after this; its Mr owns the buffer and is
    // dropped before `b`, which the contract allows (the device then fails the
    // receive instead of writing).
    unsafe { b.post_recv(&r) }.unwrap();

    // Fill the SQ exactly; the next batch fails as a whole with SendQueueFull.
    let mut s = SendBatch::<64>::new(&a);
    for i in 0..depth {
        s.send_inline(i as u64, &to_b, b"x").unwrap();
    }
    // A batch never grows past the queue: it could never be posted whole.
    assert_eq!(
        s.send_inline(depth as u64, &to_b, b"x"),
        Err(Error::Invalid(InvalidInput::BatchLargerThanQueue {
            depth: depth as u32
        }))
    );
    // SAFETY: every WR is inline, copied during the call: no memory is left to the device.
    unsafe { a.post_send(&s) }.unwrap();
    let mut one = SendBatch::<1>::new(&a);
    one.send_inline(999, &to_b, b"y").unwrap();
    // SAFETY: as above: inline only (and refused, the SQ being full).
    assert_eq!(unsafe { a.post_send(&one) }, Err(Error::SendQueueFull));
    // Polling retires completions and frees slots: the retry succeeds.
    let got = expect_n(&cq, 2 * depth);
    assert!(got.iter().all(|c| c.is_ok()));
    // SAFETY: as above: inline only.
    unsafe { a.post_send(&one) }.unwrap();
    let got = expect_n(&cq, 2);
    assert!(got.iter().any(|c| c.wr_id() == 999));
}

#[test]
fn recv_queue_full_reports_how_many_were_posted() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd().depth(8, 8))
        .unwrap()
        .init(1)
        .unwrap();
    let depth = qp.caps().max_recv_wr as usize;
    let buf = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    // A batch can never be longer than the queue: refused while building.
    let mut r = RecvBatch::<64>::new(&qp);
    for i in 0..depth {
        r.push(i as u64, buf.sge(0, 64).unwrap()).unwrap();
    }
    assert_eq!(
        r.push(depth as u64, buf.sge(0, 64).unwrap()),
        Err(Error::Invalid(InvalidInput::BatchLargerThanQueue {
            depth: depth as u32
        }))
    );
    // With 3 receives already posted, a full-depth batch posts only what fits.
    let mut first = RecvBatch::<3>::new(&qp);
    for i in 0..3 {
        first.push(100 + i, buf.sge(0, 64).unwrap()).unwrap();
    }
    // SAFETY: `buf` is never accessed after this and its Mr lives to the end; nothing
    // sends to this QP (still in INIT), so no receive ever completes.
    unsafe { qp.post_recv(&first) }.unwrap();
    assert_eq!(
        // SAFETY: as above.
        unsafe { qp.post_recv(&r) },
        Err(Error::RecvQueueFull { posted: depth - 3 })
    );
}

#[test]
fn send_op_not_enabled_is_refused_before_the_device() {
    pair!(
        ctx,
        pd,
        cqa,
        cqb,
        a,
        b,
        to_b,
        _to_a,
        QpConfig::srd().send_ops(SendOps::SEND),
        QpConfig::srd()
    );
    let src = pd.register(vec![0u8; 8], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 8);
    let mut s = SendBatch::<2>::new(&a);
    s.send_inline(1, &to_b, b"ok").unwrap();
    assert_eq!(
        s.write(2, &to_b, src.sge_all().unwrap(), target.remote()),
        Err(Error::Invalid(InvalidInput::SendOpNotEnabled {
            op: SendOps::RDMA_WRITE,
            enabled: SendOps::SEND
        }))
    );
    assert_eq!(s.len(), 1, "the refused write was not added");
    expect_none(&cqa, Duration::from_millis(20));
    let _ = (&ctx, &b, &cqb);
}

#[test]
fn gather_lists_follow_the_qps_sge_limits() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd().sges(2, 1), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    assert_eq!(a.limits().max_send_sge(), 2);
    let src = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    let three = SgeList::<4>::new(&[
        src.sge(0, 8).unwrap(),
        src.sge(8, 8).unwrap(),
        src.sge(16, 8).unwrap(),
    ])
    .unwrap();
    let two = SgeList::<4>::new(&[src.sge(0, 8).unwrap(), src.sge(8, 8).unwrap()]).unwrap();
    let target = write_target(&pd, 64);
    let mut s = SendBatch::<4>::new(&a);
    assert_eq!(
        s.send(1, &to_a, &three),
        Err(Error::Invalid(InvalidInput::TooManySges {
            count: 3,
            max: 2
        }))
    );
    // RDMA takes one local SGE on EFA.
    assert_eq!(
        s.write(2, &to_a, &two, target.remote()),
        Err(Error::Invalid(InvalidInput::TooManySges {
            count: 2,
            max: 1
        }))
    );
    s.send(3, &to_a, &two).unwrap();
    assert_eq!(s.len(), 1);
    // A list longer than its capacity, or of two PDs, cannot even be built.
    assert_eq!(
        SgeList::<1>::new(&[src.sge(0, 8).unwrap(), src.sge(8, 8).unwrap()]).map(drop),
        Err(Error::Invalid(InvalidInput::TooManySges {
            count: 2,
            max: 1
        }))
    );
}
