//! Data path on the software device: every opcode, error statuses, batches, channels.

mod common;
use std::time::Duration;

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::*;

/// Two SRD QPs on one device, each with its own CQ, connected both ways.
macro_rules! pair {
    ($ctx:ident, $pd:ident, $cqa:ident, $cqb:ident, $a:ident, $b:ident, $to_b:ident, $to_a:ident) => {
        pair!(
            $ctx,
            $pd,
            $cqa,
            $cqb,
            $a,
            $b,
            $to_b,
            $to_a,
            QpConfig::srd(),
            QpConfig::srd()
        )
    };
    ($ctx:ident, $pd:ident, $cqa:ident, $cqb:ident, $a:ident, $b:ident, $to_b:ident, $to_a:ident, $cfga:expr, $cfgb:expr) => {
        let $ctx = open(0);
        let $pd = $ctx.alloc_pd().unwrap();
        let $cqa = $ctx.create_ext_cq(CqOptions::new(256)).unwrap();
        let $cqb = $ctx
            .create_ext_cq(CqOptions::new(256).unsolicited_flag().sender_gid())
            .unwrap();
        let $a = rts_qp(&$pd, &$cqa, &$cfga, QKEY_A);
        let $b = rts_qp(&$pd, &$cqb, &$cfgb, QKEY_B);
        let $to_b = $pd.connect(&$b.endpoint()).unwrap();
        let $to_a = $pd.connect(&$a.endpoint()).unwrap();
    };
}

/// Posts one receive of `sge` (in any state that accepts receives).
fn recv_one<P: Parent, S: RecvReady>(qp: &Qp<P, S>, wr_id: u64, sge: Sge<'_>) {
    let mut r = RecvBatch::<1>::new(qp);
    r.push(wr_id, sge).unwrap();
    // SAFETY: tests read a receive buffer only after polling its completion, or after
    // resetting or destroying the QP (which ends the device's right to write it).
    unsafe { qp.post_recv(&r) }.unwrap();
}

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
fn rdma_write_lands_without_receiver_completion() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, 512);
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        9,
        &to_b,
        src.sge(16, 100).unwrap(),
        target.remote().slice(200, 100).unwrap(),
    )
    .unwrap();
    // SAFETY: the source bytes of `src` are only read, never written, and only after the
    // completion polled below; its Mr lives to the end of the test.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    c.result().unwrap();
    assert_eq!((c.wr_id(), c.opcode()), (9, WcOpcode::RDMA_WRITE));
    assert_eq!(&target.to_vec()[200..300], &src.as_slice()[16..116]);
    assert!(target.to_vec()[..200].iter().all(|&x| x == 0));
    assert!(target.to_vec()[300..].iter().all(|&x| x == 0));
    expect_none(&cqb, Duration::from_millis(50));
    let _ = (&ctx, &b);
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd.register(vec![0xabu8; 64], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 64);
    let rbuf = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 55, rbuf.sge_all().unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.write_imm(3, &to_b, src.sge(0, 40).unwrap(), target.remote(), 0xfeed)
        .unwrap();
    // SAFETY: `src` (owned by a live Mr) is never written after the post; the send
    // completion is polled just below.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    c.result().unwrap();
    assert_eq!(c.opcode(), WcOpcode::RDMA_WRITE);
    let r = expect_n(&cqb, 1)[0];
    r.result().unwrap();
    assert_eq!(r.opcode(), WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!(r.wr_id(), 55, "the posted receive was consumed");
    assert!(!r.is_unsolicited());
    assert_eq!(r.imm(), Some(0xfeed));
    assert_eq!(r.byte_len(), 40);
    assert_eq!(&target.to_vec()[..40], &[0xab; 40][..]);
    assert!(
        rbuf.as_slice().iter().all(|&x| x == 0),
        "no data goes into the receive buffer"
    );
    let _ = &ctx;
}

#[test]
fn unsolicited_write_with_imm_consumes_no_receive() {
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
        QpConfig::srd().unsolicited_write_recv()
    );
    let src = pd.register(vec![7u8; 32], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 32);
    let mut s = SendBatch::<1>::new(&a);
    s.write_imm(4, &to_b, src.sge_all().unwrap(), target.remote(), 99)
        .unwrap();
    // SAFETY: `src` (owned by a live Mr) is never written after the post; the completion
    // is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let r = expect_n(&cqb, 1)[0];
    r.result().unwrap();
    assert_eq!(r.opcode(), WcOpcode::RECV_RDMA_WITH_IMM);
    assert!(r.is_unsolicited());
    assert_eq!(r.wr_id(), 0);
    assert_eq!(r.imm(), Some(99));
    assert_eq!(target.to_vec(), &[7u8; 32][..]);
    let _ = &ctx;
}

#[test]
fn rdma_read_fetches_remote_bytes() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut remote = pd
        .register(vec![0u8; 128], AccessFlags::REMOTE_READ)
        .unwrap();
    remote.as_mut_slice()[32..64].copy_from_slice(&[0x5a; 32]);
    let local = pd
        .register(vec![0u8; 128], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.read(
        11,
        &to_b,
        local.sge(8, 32).unwrap(),
        remote.remote().slice(32, 32).unwrap(),
    )
    .unwrap();
    // SAFETY: `local`, the RDMA-read destination, is not touched until the completion is
    // polled on the next line; both Mrs own their buffers and live to the end.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    c.result().unwrap();
    assert_eq!(c.wr_id(), 11);
    // rdma-core reports RDMA-read requester completions as IBV_WC_SEND.
    assert!(
        c.opcode() == WcOpcode::SEND || c.opcode() == WcOpcode::RDMA_READ,
        "{:?}",
        c.opcode()
    );
    assert_eq!(&local.as_slice()[8..40], &[0x5a; 32][..]);
    assert!(local.as_slice()[..8].iter().all(|&x| x == 0));
    expect_none(&cqb, Duration::from_millis(30));
    let _ = (&ctx, &b);
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
fn unknown_peer_for_rdma_write_is_status_14_and_sender_gid_for_send() {
    // Two devices: b's PD has no AH for a's GID.
    let ctx_a = open(0);
    let ctx_b = open(1);
    let pd_a = ctx_a.alloc_pd().unwrap();
    let pd_b = ctx_b.alloc_pd().unwrap();
    let cqa = ctx_a.create_ext_cq(CqOptions::new(16)).unwrap();
    let cqb = ctx_b
        .create_ext_cq(CqOptions::new(16).sender_gid())
        .unwrap();
    let a = rts_qp(&pd_a, &cqa, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd_b, &cqb, &QpConfig::srd(), QKEY_B);
    let to_b = pd_a.connect(&b.endpoint()).unwrap();

    let src = pd_a.register(vec![3u8; 16], AccessFlags::empty()).unwrap();
    let target = write_target(&pd_b, 16);
    let mut s = SendBatch::<1>::new(&a);
    s.write(1, &to_b, src.sge_all().unwrap(), target.remote())
        .unwrap();
    // SAFETY: `src` is not written after the post and its Mr lives to the end; the
    // completion is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    assert_eq!(c.efa_status(), EfaStatus::REMOTE_UNKNOWN_PEER);
    assert_eq!(c.status(), WcStatus::REM_OP_ERR);
    let msg = c.into_error().unwrap().to_string();
    assert!(
        msg.contains("remote has no address handle for this sender (EFA status 14)"),
        "{msg}"
    );
    assert!(target.to_vec().iter().all(|&x| x == 0), "nothing written");

    // A two-sided send works without an AH; b learns a's GID from the CQ.
    let dst = pd_b
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 8, dst.sge_all().unwrap());
    s.clear();
    s.send(2, &to_b, src.sge(0, 4).unwrap()).unwrap();
    // SAFETY: as above: `src` stays unwritten and registered; polled next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let r = expect_n(&cqb, 1)[0];
    r.result().unwrap();
    assert_eq!(r.slid(), AH_UNKNOWN);
    assert_eq!(r.sender_ah(), None);
    assert_eq!(r.sender_gid(), Some(ctx_a.gid().unwrap()));
    assert_eq!(r.src_qp(), a.qpn());

    // After b creates an AH for a, the sender is known: slid = that AH, no GID.
    let ah = pd_b.create_ah(ctx_a.gid().unwrap()).unwrap();
    recv_one(&b, 9, dst.sge_all().unwrap());
    // SAFETY: as above: the same batch over `src`, unwritten and registered; polled next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let r = expect_n(&cqb, 1)[0];
    assert_eq!(r.sender_ah(), Some(ah.number()));
    assert_eq!(r.sender_gid(), None);
}

#[test]
fn remote_access_error_without_remote_write_right() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd.register(vec![1u8; 16], AccessFlags::empty()).unwrap();
    let target = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap(); // no REMOTE_WRITE
    let mut s = SendBatch::<1>::new(&a);
    s.write(1, &to_b, src.sge_all().unwrap(), target.remote())
        .unwrap();
    // SAFETY: `src` is not written after the post and its Mr lives to the end; the
    // completion is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    assert_eq!(c.efa_status(), EfaStatus::REMOTE_BAD_ADDRESS);
    assert_eq!(c.status(), WcStatus::REM_ACCESS_ERR);
    assert!(target.to_vec().iter().all(|&x| x == 0));
    let _ = (&ctx, &b);
}

#[test]
fn rnr_when_receiver_posts_nothing() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(16)).unwrap();
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
    let cq = ctx.create_ext_cq(CqOptions::new(256)).unwrap();
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
    let cq = ctx.create_cq(CqOptions::new(64)).unwrap();
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
fn ud_send_and_receive_with_grh_prefix() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(16)).unwrap();
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
    let cq = ctx.create_cq(CqOptions::new(16)).unwrap();
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
    let cq = ctx.create_cq(CqOptions::new(64)).unwrap();
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
        cq.poll(&mut small).unwrap(),
        0,
        "a full buffer takes nothing"
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
        .create_ext_cq_with_channel(&ch, CqOptions::new(16))
        .unwrap();
    let other = ctx.create_cq_with_channel(&ch, CqOptions::new(16)).unwrap();
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
fn dmabuf_registration_is_a_target_and_a_source() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    // A plain file stands in for a dma-buf: the software device maps the fd range.
    let path = std::env::temp_dir().join(format!("efa-ts-dmabuf-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    file.set_len(8192).unwrap();
    let fd = std::os::fd::OwnedFd::from(file.try_clone().unwrap());
    let dmabuf = pd
        .register_dmabuf(
            DmaBufFd::new(fd, 4096, 4096),
            0x2000_0000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    assert_eq!(
        (dmabuf.iova(), dmabuf.len(), dmabuf.offset()),
        (0x2000_0000, 4096, 4096)
    );
    let src = pd
        .register(b"into device memory".to_vec(), AccessFlags::empty())
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        1,
        &to_b,
        src.sge_all().unwrap(),
        dmabuf.remote().slice(10, 18).unwrap(),
    )
    .unwrap();
    // SAFETY: `src` (owned by a live Mr) is never written after the post; the target is
    // the remote dma-buf MR; the completion is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[4096 + 10..4096 + 28], b"into device memory");
    assert!(
        bytes[..4096].iter().all(|&x| x == 0),
        "nothing outside the registered range"
    );

    // And as a send source (SGE addressed by iova).
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 2, dst.sge_all().unwrap());
    s.clear();
    s.send(3, &to_b, dmabuf.sge(10, 18).unwrap()).unwrap();
    // SAFETY: the source range of the dma-buf file is not written after the post and
    // `dmabuf` stays registered until the completion is polled (it is closed only
    // after both completions are in).
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let r = expect_n(&cqb, 1)[0];
    assert_eq!(r.byte_len(), 18);
    assert_eq!(&dst.as_slice()[..18], b"into device memory");
    drop(s);
    let owner = dmabuf.close().unwrap();
    assert_eq!((owner.offset(), owner.len()), (4096, 4096));
    let _ = std::fs::remove_file(&path);
    let _ = &ctx;
}

#[test]
fn inline_rdma_write_on_an_inline_write_qp() {
    pair!(
        ctx,
        pd,
        cqa,
        cqb,
        a,
        b,
        to_b,
        _to_a,
        QpConfig::srd().inline_write(),
        QpConfig::srd()
    );
    let target = write_target(&pd, 64);
    let bytes = *b"inline rdma";
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        1,
        &to_b,
        Payload::Inline(&bytes),
        target.remote().slice(5, 11).unwrap(),
    )
    .unwrap();
    // SAFETY: inline RDMA-write payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cqa, 1)[0];
    c.result().unwrap();
    assert_eq!(&target.to_vec()[5..16], b"inline rdma");

    // Without the flag an inline write is refused while building, naming the rule.
    let plain = rts_qp(&pd, &cqa, &QpConfig::srd(), QKEY_A);
    let mut p = SendBatch::<1>::new(&plain);
    assert_eq!(
        p.write(1, &to_b, Payload::Inline(&bytes), target.remote()),
        Err(Error::Invalid(InvalidInput::InlineWriteNotEnabled))
    );
    // Inline data longer than the QP's maximum: refused, naming length and maximum.
    let long = [0u8; 200];
    let mut s = SendBatch::<1>::new(&a);
    assert_eq!(
        s.send_inline(2, &to_b, &long),
        Err(Error::Invalid(InvalidInput::InlineTooLong {
            len: 200,
            max: a.limits().max_inline_data()
        }))
    );
    assert!(s.is_empty() && p.is_empty());
    expect_none(&cqa, Duration::from_millis(30));
    let _ = (&ctx, &b, &cqb);
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
