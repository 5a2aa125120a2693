//! Limits checked before the device: single SGEs on QPs granted none, creation
//! parameters beyond the device's (named with the value and the limit), and CQs too
//! small for the QP they serve. All on the software device's default profile (max_sq_sge
//! 2, max_rq_sge 2, inline 32 bytes, 4096-entry LLQ, max_rq_wr 32768, max_cqe 32768)
//! unless a child process sets `EFA_SIM_PROFILE`.

mod common;
use common::*;
use efa_typestate::*;

fn exceeds(what: DeviceLimit, value: u32, max: u32) -> Error {
    Error::Invalid(InvalidInput::ExceedsDeviceLimit { what, value, max })
}

fn too_small(cq: CqRole, depth: u32, needed: u32) -> Error {
    Error::Invalid(InvalidInput::CqTooSmall { cq, depth, needed })
}

fn none_granted() -> Error {
    Error::Invalid(InvalidInput::TooManySges { count: 1, max: 0 })
}

// ---- (a) one SGE on a QP granted no SGEs ---------------------------------------------

#[test]
fn single_sge_receive_on_a_qp_without_receive_sges_is_refused_before_posting() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd().depth(8, 8).sges(1, 0))
        .unwrap()
        .init(QKEY_A)
        .unwrap();
    assert_eq!(qp.limits().max_recv_sge(), 0);
    let buf = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    // Batch path.
    let mut r = RecvBatch::<2>::new(&qp);
    assert_eq!(r.push(1, buf.sge(0, 64).unwrap()), Err(none_granted()));
    assert!(r.is_empty(), "the refused receive was not added");
    // Lease path: the lease comes back with the same error.
    let rejected = qp
        .post_recv_lease(
            pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
                .unwrap(),
        )
        .unwrap_err();
    assert_eq!(rejected.error, none_granted());
    assert_eq!(rejected.lease.len(), 64);
}

#[test]
fn single_sge_send_on_a_qp_without_send_sges_is_refused_on_every_path() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
    let cfg = QpConfig::srd().depth(8, 8).sges(0, 1);
    let mut a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd().depth(8, 8), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    assert_eq!(a.limits().max_send_sge(), 0);
    let src = pd.register(vec![7u8; 64], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 64);

    // Batch path.
    let mut s = SendBatch::<4>::new(&a);
    assert_eq!(
        s.send(1, &to_b, src.sge(0, 16).unwrap()),
        Err(none_granted())
    );
    assert!(s.is_empty(), "the refused send was not added");
    // Inline sends use no SGE; an RDMA write takes its one SGE whatever max_send_sge
    // says (the device's max_sge_rd): both still accepted.
    s.send_inline(2, &to_b, b"inline").unwrap();
    s.write(3, &to_b, src.sge(0, 16).unwrap(), target.remote())
        .unwrap();
    assert_eq!(s.len(), 2);

    // Session path: refused, and the closure's error discards the session.
    // SAFETY: nothing is posted (the only request is refused and the session aborted).
    let err = unsafe { a.post_with(|sess| sess.send(4, &to_b, src.sge(0, 16)?)) }.unwrap_err();
    assert_eq!(err, none_granted());

    // Lease path: the lease comes back with the same error.
    let rejected = a
        .post_send_lease(
            &to_b,
            SendOp::Send,
            pd.register(vec![1u8; 32], AccessFlags::empty()).unwrap(),
            16,
        )
        .unwrap_err();
    assert_eq!(rejected.error, none_granted());
    expect_none(&cq, std::time::Duration::from_millis(20));
}

// ---- (b) creation parameters beyond the device's limits ------------------------------

#[test]
fn qp_parameters_beyond_the_device_name_the_parameter_value_and_limit() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(32768)).unwrap();
    let efa = ctx.efa_attr().unwrap();
    assert_eq!((efa.max_sq_sge, efa.max_rq_sge), (2, 2));
    assert_eq!(efa.inline_buf_size_ex, 32);
    let create = |cfg: QpConfig| pd.create_qp(&cq, &cq, &cfg).map(drop).unwrap_err();

    // The LLQ holds 4096 64-byte send WQEs.
    let e = create(QpConfig::srd().depth(4097, 64));
    assert_eq!(e, exceeds(DeviceLimit::SendDepth, 4097, 4096));
    assert_eq!(
        e.to_string(),
        "send queue depth (max_send_wr) of 4097 exceeds the device's limit of 4096"
    );
    pd.create_qp(&cq, &cq, &QpConfig::srd().depth(4096, 64))
        .unwrap();
    // 128-byte WQEs (inline write) halve it: libefa's efadv_get_max_sq_depth is asked.
    assert!(ctx.caps().contains(DeviceCaps::RDMA_WRITE));
    assert_eq!(
        create(QpConfig::srd().depth(4096, 64).inline_write()),
        exceeds(DeviceLimit::SendDepth, 4096, 2048)
    );
    // Receive depth: max_rq_wr descriptors, divided among the SGEs of a receive.
    assert_eq!(
        create(QpConfig::srd().depth(64, 32769)),
        exceeds(DeviceLimit::RecvDepth, 32769, 32768)
    );
    assert_eq!(
        create(QpConfig::srd().depth(64, 16385).sges(1, 2)),
        exceeds(DeviceLimit::RecvDepth, 16385, 16384)
    );
    let e = create(QpConfig::srd().sges(5, 5));
    assert_eq!(e, exceeds(DeviceLimit::SendSges, 5, 2));
    assert_eq!(
        e.to_string(),
        "SGEs per send (max_send_sge) of 5 exceeds the device's limit of 2"
    );
    assert_eq!(
        create(QpConfig::srd().sges(1, 3)),
        exceeds(DeviceLimit::RecvSges, 3, 2)
    );
    let e = create(QpConfig::srd().max_inline(4096));
    assert_eq!(e, exceeds(DeviceLimit::InlineData, 4096, 32));
    assert_eq!(
        e.to_string(),
        "inline data (max_inline_data) of 4096 exceeds the device's limit of 32"
    );
    // UD QPs are checked the same way; so are explicit caps.
    assert_eq!(
        create(QpConfig::ud().depth(4097, 64)),
        exceeds(DeviceLimit::SendDepth, 4097, 4096)
    );
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 64,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    assert_eq!(
        create(QpConfig::srd().caps(caps)),
        exceeds(DeviceLimit::SendSges, 64, 2)
    );
}

#[test]
fn cq_beyond_max_cqe_names_the_value_and_the_limit() {
    let ctx = open(0);
    let max = ctx.query_device().unwrap().max_cqe();
    assert_eq!(max, 32768);
    let e = ctx
        .create_ext_cq(CqOptions::new(1_000_000))
        .map(drop)
        .unwrap_err();
    assert_eq!(e, exceeds(DeviceLimit::CqEntries, 1_000_000, 32768));
    assert_eq!(
        e.to_string(),
        "CQ entries (cqe) of 1000000 exceeds the device's limit of 32768"
    );
    assert_eq!(
        ctx.create_cq(CqOptions::new(32769)).map(drop).unwrap_err(),
        exceeds(DeviceLimit::CqEntries, 32769, 32768)
    );
    ctx.create_cq(CqOptions::new(32768)).unwrap();
}

#[test]
fn limits_follow_the_device_profile() {
    in_child(
        "limits_follow_the_device_profile",
        &[("EFA_SIM_PROFILE", "max_cqe=64,max_sq_sge=1,max_rq_wr=128")],
        || {
            let ctx = open(0);
            assert_eq!(
                ctx.create_ext_cq(CqOptions::new(65)).map(drop).unwrap_err(),
                exceeds(DeviceLimit::CqEntries, 65, 64)
            );
            let cq = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let create = |cfg: QpConfig| pd.create_qp(&cq, &cq, &cfg).map(drop).unwrap_err();
            assert_eq!(
                create(QpConfig::srd().depth(8, 8).sges(2, 1)),
                exceeds(DeviceLimit::SendSges, 2, 1)
            );
            assert_eq!(
                create(QpConfig::srd().depth(8, 129)),
                exceeds(DeviceLimit::RecvDepth, 129, 128)
            );
        },
    );
}

// ---- (c) CQs too small for the QP ----------------------------------------------------

#[test]
fn send_and_receive_cqs_must_hold_the_qps_depths() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_ext_cq(CqOptions::new(16)).unwrap();
    let big = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    assert_eq!((small.depth(), big.depth()), (16, 1024));
    let cfg = QpConfig::srd().depth(1024, 16);
    let e = pd.create_qp(&small, &big, &cfg).map(drop).unwrap_err();
    assert_eq!(e, too_small(CqRole::Send, 16, 1024));
    assert_eq!(
        e.to_string(),
        "send CQ of 16 entries cannot hold the QP's 1024 outstanding send work requests"
    );
    let cfg = QpConfig::srd().depth(16, 1024);
    let e = pd.create_qp(&big, &small, &cfg).map(drop).unwrap_err();
    assert_eq!(e, too_small(CqRole::Recv, 16, 1024));
    assert_eq!(
        e.to_string(),
        "receive CQ of 16 entries cannot hold the QP's 1024 outstanding receive work requests"
    );
    // Exactly enough is enough.
    let qp = pd
        .create_qp(&small, &big, &QpConfig::srd().depth(16, 1024))
        .unwrap();
    assert_eq!((qp.caps().max_send_wr, qp.caps().max_recv_wr), (16, 1024));
}

#[test]
fn a_shared_cq_must_hold_both_depths() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let e = pd
        .create_qp(&cq, &cq, &QpConfig::srd().depth(1024, 1024))
        .map(drop)
        .unwrap_err();
    assert_eq!(e, too_small(CqRole::Shared, 1024, 2048));
    assert_eq!(
        e.to_string(),
        "shared send/receive CQ of 1024 entries cannot hold the QP's 2048 outstanding \
         send and receive work requests"
    );
    // A 16-entry CQ under the default 256-deep queues (the case that overflows on
    // hardware).
    let tiny = ctx.create_cq(CqOptions::new(16)).unwrap();
    assert_eq!(
        pd.create_qp(&tiny, &tiny, &QpConfig::srd())
            .map(drop)
            .unwrap_err(),
        too_small(CqRole::Shared, 16, 512)
    );
    pd.create_qp(&cq, &cq, &QpConfig::srd().depth(512, 512))
        .unwrap();
}

#[test]
fn cq_checks_use_the_granted_depths() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let recv = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
    assert_eq!(cq.depth(), 1024);
    // The device rounds a 1025-deep send queue up to 2048: that many sends can be
    // outstanding, so the check counts 2048, not the 1025 asked for.
    assert_eq!(
        pd.create_qp(&cq, &recv, &QpConfig::srd().depth(1025, 8))
            .map(drop)
            .unwrap_err(),
        too_small(CqRole::Send, 1024, 2048)
    );
    // 1000 is granted as 1024, which the CQ holds.
    let qp = pd
        .create_qp(&cq, &recv, &QpConfig::srd().depth(1000, 8))
        .unwrap();
    assert_eq!(qp.caps().max_send_wr, 1024);
}

#[test]
fn new_bounding_cqs_accepts_small_cqs_and_keeps_every_other_check() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let tiny = ctx.create_cq(CqOptions::new(16)).unwrap();
    // The QP `create_qp` refuses (too_small(Shared, 16, 512)) is made, as libefa makes it.
    let qp = Qp::new_bounding_cqs(&pd, &tiny, &tiny, &QpConfig::srd()).unwrap();
    assert_eq!((qp.caps().max_send_wr, qp.caps().max_recv_wr), (256, 256));
    // Device limits are still checked before the device sees the request.
    let e = Qp::new_bounding_cqs(&pd, &tiny, &tiny, &QpConfig::srd().depth(1 << 20, 8))
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Invalid(InvalidInput::ExceedsDeviceLimit {
                what: DeviceLimit::SendDepth,
                value: 1048576,
                ..
            })
        ),
        "{e:?}"
    );
}
