//! Data path on the software device, two-sided: SEND/SEND_IMM, UD, inline and gather
//! lists, batches, channels, several posting threads (RDMA: `rdma.rs`; limits: `limits.rs`).

#[macro_use]
mod common;
use std::time::Duration;

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::*;

#[test]
fn send_and_receive() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut src = pd.register(vec![0u8; 256], AccessFlags::empty()).unwrap();
    src.as_mut_slice()[..11].copy_from_slice(b"hello world");
    let dst = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 42, dst.sge(0, 256).unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.send(7, &to_b, src.sge(0, 11).unwrap()).unwrap();
    // SAFETY: `src` is owned by its Mr, which lives to the end of the test, and is not
    // written after this; the send's completion is polled just below.
    unsafe { a.post_send(&s) }.unwrap();

    let sc = expect_n(&cqa, 1)[0];
    sc.result().unwrap();
    assert_eq!(
        (sc.wr_id(), sc.opcode(), sc.qp_num()),
        (7, WcOpcode::SEND, a.qpn())
    );
    let rc = expect_n(&cqb, 1)[0];
    rc.result().unwrap();
    assert_eq!(rc.wr_id(), 42);
    assert_eq!(rc.opcode(), WcOpcode::RECV);
    assert_eq!(rc.byte_len(), 11);
    assert_eq!(rc.src_qp(), a.qpn());
    assert_eq!(rc.qp_num(), b.qpn());
    assert_eq!(rc.imm(), None);
    assert_eq!(
        rc.sender_ah(),
        Some(to_a_number(&pd, &ctx)),
        "b's PD has an AH for a's GID"
    );
    assert_eq!(&dst.as_slice()[..11], b"hello world");
    assert!(
        dst.as_slice()[11..].iter().all(|&x| x == 0),
        "nothing written past the message"
    );
}

fn to_a_number(pd: &BPd<'_>, ctx: &Context) -> u16 {
    pd.create_ah(ctx.gid().unwrap()).unwrap().number()
}

#[test]
fn send_with_immediate_arrives_in_host_order() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd.register(vec![5u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 1, dst.sge_all().unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.send_imm(2, &to_b, src.sge(0, 3).unwrap(), 0x0102_0304)
        .unwrap();
    // SAFETY: `src` is owned by its Mr (alive to the end) and never written after the post;
    // the send completes (polled) on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let rc = expect_n(&cqb, 1)[0];
    assert_eq!(rc.imm(), Some(0x0102_0304));
    assert!(rc.flags().contains(CompletionFlags::WITH_IMM));
    assert_eq!(rc.byte_len(), 3);
    assert_eq!(&dst.as_slice()[..4], &[5, 5, 5, 0]);
    let _ = &ctx;
}

#[test]
fn inline_send_and_two_sge_gather() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let dst = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<2>::new(&b);
    r.push(1, dst.sge(0, 128).unwrap()).unwrap();
    r.push(2, dst.sge(128, 128).unwrap()).unwrap();
    // SAFETY: `dst` is read only after both receive completions are polled on `cqb`
    // below; its Mr owns the buffer and lives to the end of the test.
    unsafe { b.post_recv(&r) }.unwrap();

    let mut first = pd.register(vec![0u8; 8], AccessFlags::empty()).unwrap();
    first.as_mut_slice().copy_from_slice(b"gather, ");
    let mut second = pd.register(vec![0u8; 16], AccessFlags::empty()).unwrap();
    second.as_mut_slice()[..6].copy_from_slice(b"world!");
    let sges = SgeList::<2>::new(&[first.sge_all().unwrap(), second.sge(0, 6).unwrap()]).unwrap();
    let inline = *b"inline!";
    let mut s = SendBatch::<2>::new(&a);
    s.send_inline(10, &to_b, &inline).unwrap();
    s.send(11, &to_b, &sges).unwrap();
    // SAFETY: the inline payload is copied during the call; the gather sources `first`
    // and `second` are not written after the post and their Mrs outlive the two
    // send completions polled below.
    unsafe { a.post_send(&s) }.unwrap();
    let mut sc = expect_n(&cqa, 2);
    sc.sort_by_key(|c| c.wr_id());
    assert!(sc.iter().all(|c| c.is_ok()), "{sc:?}");
    assert_eq!(
        sc.iter().map(|c| c.wr_id()).collect::<Vec<_>>(),
        vec![10, 11]
    );

    let rc = expect_n(&cqb, 2);
    // SRD is unordered: match messages by length.
    let mut lens: Vec<_> = rc.iter().map(|c| c.byte_len()).collect();
    lens.sort();
    assert_eq!(lens, vec![7, 14]);
    let got: Vec<&[u8]> = rc
        .iter()
        .map(|c| {
            let off = if c.wr_id() == 1 { 0 } else { 128 };
            &dst.as_slice()[off..off + c.byte_len() as usize]
        })
        .collect();
    assert!(got.contains(&&b"inline!"[..]), "{got:?}");
    assert!(got.contains(&&b"gather, world!"[..]), "{got:?}");
    let _ = &ctx;
}

#[test]
fn ud_send_and_receive_with_grh_prefix() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::ud(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::ud(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 40 + 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 5, dst.sge_all().unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.send_imm(6, &to_b, Payload::Inline(b"datagram"), 12)
        .unwrap();
    // SAFETY: inline payload, copied during the call: no memory of ours is left to the device.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    let r = got
        .iter()
        .find(|c| c.opcode() == WcOpcode::RECV)
        .expect("receive completion");
    r.result().unwrap();
    assert_eq!(r.imm(), Some(12));
    assert_eq!(r.src_qp(), a.qpn());
    assert_eq!(
        r.byte_len(),
        40 + 8,
        "UD byte_len includes the 40-byte GRH area"
    );
    assert_eq!(&dst.as_slice()[40..48], b"datagram");
}

#[test]
fn receives_can_be_posted_in_init_and_rtr() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .init(QKEY_B)
        .unwrap();
    recv_one(&b, 1, dst.sge(0, 32).unwrap());
    let b = b.rtr().unwrap();
    recv_one(&b, 2, dst.sge(32, 32).unwrap());
    let b = b.rts(RtsOptions::default()).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let mut s = SendBatch::<2>::new(&a);
    s.send_inline(10, &to_b, b"one").unwrap();
    s.send_inline(11, &to_b, b"two").unwrap();
    // SAFETY: both sends are inline, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 4);
    let mut recv_ids: Vec<_> = got
        .iter()
        .filter(|c| c.opcode() == WcOpcode::RECV)
        .map(|c| c.wr_id())
        .collect();
    recv_ids.sort();
    assert_eq!(recv_ids, vec![1, 2]);
}

#[test]
fn classic_cq_batch_polling_respects_capacity() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd().depth(32, 32), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd().depth(32, 32), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 20 * 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<20>::new(&b);
    for i in 0..20 {
        r.push(100 + i, dst.sge(i * 8, 8).unwrap()).unwrap();
    }
    // SAFETY: `dst` is never read or written after this; its Mr owns the buffer and lives
    // until the end of the test.
    unsafe { b.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<20>::new(&a);
    for i in 0..20 {
        s.send_inline(i, &to_b, b"abc").unwrap();
    }
    // SAFETY: all 20 sends are inline, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    // Wait until all 40 completions are queued, then poll in fixed-size pieces.
    std::thread::sleep(Duration::from_millis(100));
    let mut small = ArrayVec::<Completion, 7>::new();
    let n = cq.poll(&mut small).unwrap();
    assert_eq!(n, 7);
    assert!(small.is_full());
    assert_eq!(
        cq.poll(&mut small),
        Err(InvalidInput::OutputFull { capacity: 7 }.into()),
        "a full buffer takes nothing, and says so"
    );
    let rest = poll_n(&cq, 33, Duration::from_secs(10));
    assert_eq!(rest.len(), 33);
    expect_none(&cq, Duration::from_millis(20));
    let mut ids: Vec<u64> = small.iter().chain(rest.iter()).map(|c| c.wr_id()).collect();
    ids.sort();
    let expected: Vec<u64> = (0..20).chain(100..120).collect();
    assert_eq!(
        ids, expected,
        "every send and receive completed exactly once"
    );
}

#[test]
fn completion_channel_wakes_on_completion() {
    let ctx = open(0);
    let ch = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq_with_channel(&ch, CqOptions::new(1024))
        .unwrap();
    let other = ctx
        .create_cq_with_channel(&ch, CqOptions::new(1024))
        .unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&a, 3, dst.sge_all().unwrap());

    cq.request_notify().unwrap();
    // Nothing happened yet: the wait times out.
    assert_eq!(ch.wait(Some(Duration::from_millis(30))).unwrap(), None);

    let t0 = std::time::Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            let mut s = SendBatch::<1>::new(&a);
            s.send_inline(1, &to_a, b"wake").unwrap(); // loopback to a's own receive

            // SAFETY: inline payload, copied during the call; `a` is Sync, so posting from
            // this thread is allowed.
            unsafe { a.post_send(&s) }.unwrap();
        });
        let ev = ch
            .wait(Some(Duration::from_secs(10)))
            .unwrap()
            .expect("woken by the completion");
        assert!(ev.is_for(&cq));
        assert!(!ev.is_for(&other));
    });
    assert!(t0.elapsed() >= Duration::from_millis(40));
    let got = expect_n(&cq, 2);
    assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
    assert_eq!(&dst.as_slice()[..4], b"wake");
    // Not re-armed: a second event does not come.
    assert_eq!(ch.wait(Some(Duration::from_millis(30))).unwrap(), None);
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        assert_eq!(ch.as_raw_fd(), ch.fd());
    }
}

#[test]
fn several_threads_post_to_one_qp() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 300;
    let total = (THREADS * PER_THREAD) as usize;
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let send_cq = ctx.create_ext_cq(CqOptions::new(4096)).unwrap();
    let recv_cq = ctx.create_cq(CqOptions::new(4096)).unwrap();
    let a = rts_qp(&pd, &send_cq, &QpConfig::srd().depth(64, 8), QKEY_A);
    let b = rts_qp(&pd, &recv_cq, &QpConfig::srd().depth(8, 2048), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; total * 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let sges: Vec<Sge<'_>> = (0..total)
        .map(|i| dst.sge(i as u64 * 8, 8).unwrap())
        .collect();
    for chunk in sges.chunks(64).enumerate() {
        let mut r = RecvBatch::<64>::new(&b);
        for (j, sge) in chunk.1.iter().enumerate() {
            r.push((chunk.0 * 64 + j) as u64, *sge).unwrap();
        }
        // SAFETY: `dst` is read only after all `total` receive completions are polled on
        // `recv_cq`; its Mr owns the buffer and lives to the end of the test.
        unsafe { b.post_recv(&r) }.unwrap();
    }
    let sent = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (a, to_b, send_cq, sent) = (&a, &to_b, &send_cq, &sent);
            sc.spawn(move || {
                for k in 0..PER_THREAD {
                    let id = t << 32 | k;
                    let payload = id.to_le_bytes();
                    let mut s = SendBatch::<1>::new(a);
                    s.send_inline(id, to_b, &payload).unwrap();
                    loop {
                        // SAFETY: inline payload, copied during the call; `a` is Sync, so several threads
                        // may post to it.
                        match unsafe { a.post_send(&s) } {
                            Ok(()) => break,
                            Err(Error::SendQueueFull) => {
                                let mut got = ArrayVec::<Completion, 32>::new();
                                send_cq.poll(&mut got).unwrap();
                                sent.lock().unwrap().extend(got);
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("post failed: {e}"),
                        }
                    }
                }
            });
        }
    });
    let mut sent = sent.into_inner().unwrap();
    let missing = total - sent.len();
    sent.extend(poll_n(&send_cq, missing, Duration::from_secs(20)));
    assert_eq!(sent.len(), total);
    assert!(
        sent.iter().all(|c| c.is_ok()),
        "{:?}",
        sent.iter().find(|c| !c.is_ok())
    );
    let mut ids: Vec<u64> = sent.iter().map(|c| c.wr_id()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "every send completed exactly once");

    let recvd = expect_n(&recv_cq, total);
    let mut payloads: Vec<u64> = recvd
        .iter()
        .map(|c| {
            assert!(c.is_ok());
            let off = c.wr_id() as usize * 8;
            u64::from_le_bytes(dst.as_slice()[off..off + 8].try_into().unwrap())
        })
        .collect();
    payloads.sort();
    assert_eq!(payloads, ids, "every message arrived intact");
}

#[test]
fn receive_scatters_over_two_sges() {
    pair!(
        ctx,
        pd,
        cqa,
        cqb,
        a,
        b,
        to_b,
        _to_a,
        QpConfig::srd(),
        QpConfig::srd().sges(1, 2)
    );
    assert_eq!(b.caps().max_recv_sge, 2);
    let head = pd.register(vec![0u8; 4], AccessFlags::LOCAL_WRITE).unwrap();
    let tail = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let sges = SgeList::<2>::new(&[head.sge_all().unwrap(), tail.sge_all().unwrap()]).unwrap();
    let mut r = RecvBatch::<1>::new(&b);
    r.push(1, &sges).unwrap();
    // SAFETY: `head` and `tail` are read only after the receive completion is polled on
    // `cqb`; their Mrs own the buffers and live to the end of the test.
    unsafe { b.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(2, &to_b, b"headtail!").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let c = expect_n(&cqb, 1)[0];
    assert_eq!(c.byte_len(), 9);
    assert_eq!(head.as_slice(), b"head");
    assert_eq!(&tail.as_slice()[..5], b"tail!");
    assert!(tail.as_slice()[5..].iter().all(|&x| x == 0));

    // More SGEs than the QP was created with: refused while building.
    let three = SgeList::<3>::new(&[
        head.sge(0, 1).unwrap(),
        head.sge(1, 1).unwrap(),
        head.sge(2, 1).unwrap(),
    ])
    .unwrap();
    let mut r = RecvBatch::<1>::new(&b);
    assert_eq!(
        r.push(3, &three),
        Err(Error::Invalid(InvalidInput::TooManySges {
            count: 3,
            max: 2
        }))
    );
    assert!(r.is_empty());
    let _ = &ctx;
}

#[test]
fn a_classic_cq_gives_its_entries_as_written_or_as_completions() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 5, dst.sge(0, 32).unwrap());
    recv_one(&b, 6, dst.sge(32, 32).unwrap());
    let mut s = SendBatch::<2>::new(&a);
    s.send_imm(7, &to_b, Payload::Inline(b"first"), 0x0a0b_0c0d)
        .unwrap();
    s.send_inline(8, &to_b, b"second!").unwrap();
    // SAFETY: inline payloads, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();

    let mut wcs = ArrayVec::<WorkCompletion, 8>::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while wcs.len() < 4 {
        cq.poll_wc(&mut wcs).unwrap();
        assert!(std::time::Instant::now() < deadline, "got {wcs:?}");
    }
    let find = |id| wcs.iter().find(|w| w.wr_id() == id).expect("entry");
    for id in [7, 8] {
        let w = find(id);
        w.result().unwrap();
        assert_eq!((w.opcode(), w.qp_num()), (WcOpcode::SEND, a.qpn()));
        // The provider writes no receive fields for a send: they read as 0.
        assert_eq!(
            (w.byte_len(), w.src_qp(), w.slid(), w.imm()),
            (0, 0, 0, None)
        );
        assert_eq!(w.completion().byte_len(), 0);
    }
    // SRD delivers the two SENDs in either order and receives are consumed in posting
    // order: either SEND may have landed in receive 5 (offset 0) or 6 (offset 32).
    let (r, second) = if find(5).imm().is_some() {
        (find(5), find(6))
    } else {
        (find(6), find(5))
    };
    let at = |w: &WorkCompletion| if w.wr_id() == 5 { 0 } else { 32 };
    assert_eq!(
        (r.opcode(), r.byte_len(), r.imm()),
        (WcOpcode::RECV, 5, Some(0x0a0b_0c0d))
    );
    assert_eq!((r.src_qp(), r.qp_num()), (a.qpn(), b.qpn()));
    assert_eq!((second.byte_len(), second.imm()), (7, None));
    // The same entries as Completions.
    let c = r.completion();
    assert_eq!(
        (
            c.wr_id(),
            c.opcode(),
            c.byte_len(),
            c.imm(),
            c.src_qp(),
            c.slid()
        ),
        (
            r.wr_id(),
            WcOpcode::RECV,
            5,
            Some(0x0a0b_0c0d),
            a.qpn(),
            r.slid()
        )
    );
    assert_eq!((c.sender_gid(), c.is_unsolicited()), (None, false));
    assert_eq!(second.completion().imm(), None);
    assert_eq!(&dst.as_slice()[at(r)..at(r) + 5], b"first");
    assert_eq!(&dst.as_slice()[at(second)..at(second) + 7], b"second!");
}

/// `SendWr::to_ah`: a work request named by an AH, QP number and qkey (no `Peer`) arrives
/// as one through a peer does; a QP number over 24 bits and an AH of another PD are refused.
#[test]
fn a_send_named_by_ah_qpn_and_qkey_arrives() {
    pair!(ctx, pd, cqa, cqb, a, b, _to_b, _to_a);
    let ah = pd.create_ah(ctx.gid().unwrap()).unwrap();
    let mut src = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    src.as_mut_slice()[..3].copy_from_slice(b"abc");
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 9, dst.sge(0, 64).unwrap());
    let qkey = b.endpoint().qkey();
    let payload = Payload::Sge(src.sge(0, 3).unwrap());
    assert!(matches!(
        SendWr::to_ah(1, SendOp::Send, &ah, MAX_QPN + 1, qkey, payload),
        Err(Error::Invalid(InvalidInput::QpnOutOfRange(_)))
    ));
    let other = ctx.alloc_pd().unwrap();
    let foreign = other.create_ah(ctx.gid().unwrap()).unwrap();
    let wr = SendWr::to_ah(1, SendOp::Send, &foreign, b.qpn(), qkey, payload).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    assert!(matches!(
        s.push(wr),
        Err(Error::Invalid(InvalidInput::WrongPd(_)))
    ));
    s.push(SendWr::to_ah(1, SendOp::Send, &ah, b.qpn(), qkey, payload).unwrap())
        .unwrap();
    // SAFETY: `src` lives to the end of the test and is not written after this.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let rc = expect_n(&cqb, 1)[0];
    rc.result().unwrap();
    assert_eq!((rc.wr_id(), rc.byte_len()), (9, 3));
    assert_eq!(&dst.as_slice()[..3], b"abc");
}
