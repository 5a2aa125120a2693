//! Device model through its Rust API: devices, objects, creation checks,
//! the ibv_modify_qp state machine and posting rules (model §2–§3).

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

const EINVAL: i32 = libc::EINVAL;
const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
const ENOMEM: i32 = libc::ENOMEM;
const EBUSY: i32 = libc::EBUSY;

#[test]
fn devices_have_names_gids_and_default_profile() {
    let sim = Sim::get();
    assert!(sim.error().is_none());
    let d = sim.devices();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].name, "efa_0");
    assert_eq!(d[1].name, "efa_1");
    assert_ne!(d[0].gid, d[1].gid);
    assert_eq!(&d[0].gid[..2], &[0xfe, 0x80]);
    let p = &d[0].profile;
    assert_eq!(
        (p.vendor_id, p.vendor_part_id, p.hw_ver),
        (0x1d0f, 0xefa2, 0xefa2)
    );
    assert!(p.fw_ver.starts_with("efa-sim"));
    assert_eq!(p.device_caps, 0x1f);
    assert_eq!((p.max_sq_sge, p.max_rq_sge, p.max_sge_rd), (2, 2, 1));
    assert_eq!(p.max_rdma_size, 1 << 30);
    assert_eq!(p.max_llq_size / 64, 4096);
}

#[test]
fn pd_busy_while_used_mr_keys_and_access_rules() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let r = Region::new(&pd, 4096, ALL_ACCESS);
    assert!(r.mr.lkey() < (1 << 24) && r.mr.lkey() != 0);
    assert_eq!(r.mr.lkey(), r.mr.rkey());
    assert_eq!(pd.dealloc(), Err(EBUSY));
    let mut buf = [0u8; 64];
    // Optional-range bits are dropped; unknown bits are refused.
    // SAFETY: buf outlives the MR (dereg below).
    let mr = unsafe {
        pd.reg_mr(
            buf.as_mut_ptr() as usize,
            64,
            0,
            ACCESS_LOCAL_WRITE | 0x0010_0000,
        )
    }
    .unwrap();
    assert_eq!(mr.access(), ACCESS_LOCAL_WRITE);
    mr.dereg().unwrap();
    // SAFETY: as above.
    let e = unsafe {
        pd.reg_mr(
            buf.as_mut_ptr() as usize,
            64,
            0,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_ATOMIC,
        )
    }
    .err();
    assert_eq!(e, Some(EOPNOTSUPP), "the EFA driver has no atomics");
    drop(r);
    pd.dealloc().unwrap();
}

#[test]
fn remote_access_is_gated_by_caps() {
    let d = special(20, |p| p.device_caps = 0);
    let pd = d.alloc_pd().unwrap();
    let mut buf = [0u8; 64];
    for a in [ACCESS_REMOTE_READ, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE] {
        assert_eq!(
            // SAFETY: buf outlives the (never created) MR.
            unsafe { pd.reg_mr(buf.as_mut_ptr() as usize, 64, 0, a) }.err(),
            Some(EOPNOTSUPP)
        );
    }
}

#[test]
fn ah_same_pd_gid_same_number_refcounted() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let pd2 = d.alloc_pd().unwrap();
    let g = dev(1).gid;
    let a1 = pd.create_ah(&g).unwrap();
    let a2 = pd.create_ah(&g).unwrap();
    assert_eq!(a1.number(), a2.number());
    assert_ne!(a1.number(), 0xffff);
    let other = pd2.create_ah(&g).unwrap();
    assert_ne!(other.number(), a1.number(), "AH scope is (PD, GID)");
    a1.destroy().unwrap();
    let a3 = pd.create_ah(&g).unwrap();
    assert_eq!(a3.number(), a2.number(), "still alive through a2");
    assert_eq!(pd.dealloc(), Err(EBUSY));
    for a in [a2, a3, other] {
        a.destroy().unwrap();
    }
    pd.dealloc().unwrap();
    pd2.dealloc().unwrap();
}

#[test]
fn cq_depth_power_of_two_and_limits() {
    let d = dev(0);
    let (cq, n) = d.create_cq(100, CqOptions::default()).unwrap();
    assert_eq!(n, 128);
    assert_eq!(cq.depth(), 128);
    assert_eq!(
        d.create_cq(d.profile.max_cqe + 1, CqOptions::default())
            .err(),
        Some(EINVAL)
    );
    let nosgid = special(21, |p| p.device_caps = 0);
    let o = CqOptions {
        with_sgid: true,
        with_unsolicited: false,
    };
    assert_eq!(nosgid.create_cq(8, o).err(), Some(EOPNOTSUPP));
    let o = CqOptions {
        with_sgid: false,
        with_unsolicited: true,
    };
    assert_eq!(nosgid.create_cq(8, o).err(), Some(EOPNOTSUPP));
    cq.destroy().unwrap();
}

#[test]
fn cq_busy_while_qp_uses_it() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let (qp, _) = pd.create_qp(&srd_init(&cq, caps(8, 8), 0)).unwrap();
    assert_eq!(cq.destroy(), Err(EBUSY));
    assert_eq!(pd.dealloc(), Err(EBUSY));
    qp.destroy().unwrap();
    cq.destroy().unwrap();
    pd.dealloc().unwrap();
}

#[test]
fn qp_creation_checks_and_granted_caps() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    // Granted sizes: SQ rounded up to a power of two (≥ min_sq_wr), RQ by descriptors.
    let (qp, g) = pd
        .create_qp(&srd_init(
            &cq,
            QpCaps {
                max_send_wr: 100,
                max_recv_wr: 3,
                max_send_sge: 1,
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            0,
        ))
        .unwrap();
    assert_eq!(g.max_send_wr, 128);
    assert_eq!(g.max_recv_wr, 4); // roundup(2*3)=8 descriptors / 2
    assert_eq!(qp.query().caps.max_send_wr, 128);
    assert_eq!(qp.query().state, QpState::Reset);
    assert_eq!(qp.query().rnr_retry, 7);
    assert_ne!(qp.qpn(), 0);
    assert!(qp.qpn() <= 0xffff);
    let (small, g) = pd.create_qp(&srd_init(&cq, caps(1, 1), 0)).unwrap();
    assert_eq!(g.max_send_wr, d.profile.min_sq_wr);
    // Limits → EINVAL.
    let bad = [
        QpCaps {
            max_send_sge: 3,
            ..caps(8, 8)
        },
        QpCaps {
            max_recv_sge: 3,
            ..caps(8, 8)
        },
        QpCaps {
            max_inline_data: 33,
            ..caps(8, 8)
        },
        caps(8192, 8),          // > 4096 64-byte WQEs
        caps(8, 32768 / 2 + 1), // > max_rq_wr / max_recv_sge
    ];
    for c in bad {
        assert_eq!(
            pd.create_qp(&srd_init(&cq, c, 0)).err(),
            Some(EINVAL),
            "{c:?}"
        );
    }
    // 4096 fits with 64-byte WQEs, but not with INLINE_WRITE's 128-byte WQEs.
    let (q4096, g) = pd.create_qp(&srd_init(&cq, caps(4096, 8), 0)).unwrap();
    assert_eq!(g.max_send_wr, 4096);
    assert_eq!(
        pd.create_qp(&srd_init(&cq, caps(4096, 8), 2)).err(),
        Some(EINVAL)
    );
    // Send ops: UD only SEND/SEND_IMM; SRD RDMA ops gated by caps.
    let mut ud = srd_init(&cq, caps(8, 8), 0);
    ud.qp_type = QpType::Ud;
    ud.send_ops_flags = Some(0x1);
    assert_eq!(pd.create_qp(&ud).err(), Some(EOPNOTSUPP));
    ud.send_ops_flags = Some(0xc);
    let (udqp, _) = pd.create_qp(&ud).unwrap();
    let mut atomics = srd_init(&cq, caps(8, 8), 0);
    atomics.send_ops_flags = Some(1 << 5);
    assert_eq!(pd.create_qp(&atomics).err(), Some(EOPNOTSUPP));
    // Unknown efadv flag bits.
    assert_eq!(
        pd.create_qp(&srd_init(&cq, caps(8, 8), 0x4)).err(),
        Some(EOPNOTSUPP)
    );
    // Capability-gated flags and ops on a device without them.
    let bare = special(22, |p| p.device_caps = 0);
    let bpd = bare.alloc_pd().unwrap();
    let (bcq, _) = bare.create_cq(8, CqOptions::default()).unwrap();
    assert_eq!(
        bpd.create_qp(&srd_init(&bcq, caps(8, 8), 1)).err(),
        Some(EOPNOTSUPP),
        "unsolicited"
    );
    assert_eq!(
        bpd.create_qp(&srd_init(&bcq, caps(8, 8), 2)).err(),
        Some(EOPNOTSUPP),
        "inline write"
    );
    assert_eq!(
        bpd.create_qp(&srd_init(&bcq, caps(8, 8), 0)).err(),
        Some(EOPNOTSUPP),
        "rdma ops"
    );
    // A CQ of another device.
    let mut foreign = srd_init(&cq, caps(8, 8), 0);
    foreign.send_ops_flags = Some(0xc);
    assert_eq!(bpd.create_qp(&foreign).err(), Some(EINVAL));
    for q in [qp, small, q4096, udqp] {
        q.destroy().unwrap();
    }
}

const STATE: u32 = 1;
const CUR: u32 = 2;
const SQD_NOTIFY: u32 = 4;
const PKEY: u32 = 16;
const PORT: u32 = 32;
const QKEY_M: u32 = 64;
const RNR: u32 = 1 << 11;
const PSN: u32 = 1 << 16;

fn fresh(t: QpType) -> (std::sync::Arc<Qp>, std::sync::Arc<Pd>) {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let mut init = srd_init(&cq, caps(8, 8), 0);
    init.qp_type = t;
    if t == QpType::Ud {
        init.send_ops_flags = None;
    }
    (pd.create_qp(&init).unwrap().0, pd)
}

/// Drives a fresh QP to `s` along legal transitions.
fn drive(qp: &Qp, s: QpState) {
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
    const ERR: QpState = QpState::Err;
    let path: &[(u32, QpState)] = match s {
        Reset => &[],
        Init => &[(STATE | PKEY | PORT | QKEY_M, Init)],
        Rtr => &[(STATE | PKEY | PORT | QKEY_M, Init), (STATE, Rtr)],
        Rts => &[
            (STATE | PKEY | PORT | QKEY_M, Init),
            (STATE, Rtr),
            (STATE | PSN, Rts),
        ],
        Sqd => &[
            (STATE | PKEY | PORT | QKEY_M, Init),
            (STATE, Rtr),
            (STATE | PSN, Rts),
            (STATE, Sqd),
        ],
        Sqe => unreachable!(),
        ERR => &[(STATE | PKEY | PORT | QKEY_M, Init), (STATE, ERR)],
    };
    for (m, st) in path {
        modify(qp, *m, *st).unwrap();
    }
}

#[test]
fn modify_qp_transition_table() {
    use QpState::{Init, Reset, Rtr, Rts, Sqd};
    const ERR: QpState = QpState::Err;
    // (from, to, mask, expected) for SRD.
    let cases: &[(QpState, QpState, u32, Result<(), i32>)] = &[
        (Reset, Init, STATE | PKEY | PORT | QKEY_M, Ok(())),
        (Reset, Init, STATE | PKEY | PORT, Err(EINVAL)), // missing QKEY
        (Reset, Reset, STATE, Ok(())),
        (Reset, Rtr, STATE, Err(EINVAL)),
        (Reset, ERR, STATE, Err(EINVAL)),
        (Init, Init, STATE | QKEY_M, Ok(())),
        (Init, Rtr, STATE, Ok(())),
        (Init, Rtr, STATE | PORT, Err(EINVAL)), // PORT not optional there
        (Init, Rts, STATE | PSN, Err(EINVAL)),
        (Rtr, Rts, STATE, Err(EINVAL)), // SQ_PSN required
        (Rtr, Rts, STATE | PSN | RNR, Ok(())),
        (Rtr, Rtr, STATE, Err(EINVAL)),
        (Rts, Rts, STATE | QKEY_M, Ok(())),
        (Rts, Rts, STATE | RNR, Err(EINVAL)), // RNR only RTR→RTS
        (Rts, Sqd, STATE | SQD_NOTIFY, Ok(())),
        (Rts, Rtr, STATE, Err(EINVAL)),
        (Sqd, Rts, STATE | QKEY_M, Ok(())),
        (Sqd, Sqd, STATE | QKEY_M, Ok(())),
        (Init, Reset, STATE, Ok(())),
        (Rts, ERR, STATE, Ok(())),
        (ERR, Reset, STATE, Ok(())),
        (ERR, Init, STATE | PKEY | PORT | QKEY_M, Err(EINVAL)),
        (Rts, Rts, STATE | CUR, Ok(())),
    ];
    for (from, to, mask, want) in cases {
        let (qp, _pd) = fresh(QpType::Srd);
        drive(&qp, *from);
        let m = ModifyQp {
            mask: *mask,
            state: *to as u32,
            cur_state: *from as u32,
            port_num: 1,
            qkey: 5,
            ..Default::default()
        };
        assert_eq!(qp.modify(&m), *want, "{from:?} -> {to:?} mask {mask:#x}");
        let now = qp.query().state;
        assert_eq!(now, if want.is_ok() { *to } else { *from });
        qp.destroy().unwrap();
    }
}

#[test]
fn modify_qp_attribute_errors() {
    use QpState::{Init, Reset, Rtr, Rts};
    let (qp, _pd) = fresh(QpType::Srd);
    // Unsupported attribute bits → EOPNOTSUPP (AV = 1<<7, PATH_MTU = 1<<8, TIMEOUT 1<<9).
    for bit in [1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 3] {
        let m = ModifyQp {
            mask: STATE | PKEY | PORT | QKEY_M | bit,
            state: Init as u32,
            port_num: 1,
            ..Default::default()
        };
        assert_eq!(qp.modify(&m), Err(EOPNOTSUPP), "bit {bit:#x}");
    }
    // PORT != 1 and PKEY_INDEX != 0 → EOPNOTSUPP.
    let m = ModifyQp {
        mask: STATE | PKEY | PORT | QKEY_M,
        state: Init as u32,
        port_num: 2,
        ..Default::default()
    };
    assert_eq!(qp.modify(&m), Err(EOPNOTSUPP));
    let m = ModifyQp {
        mask: STATE | PKEY | PORT | QKEY_M,
        state: Init as u32,
        port_num: 1,
        pkey_index: 1,
        ..Default::default()
    };
    assert_eq!(qp.modify(&m), Err(EOPNOTSUPP));
    // CUR_STATE only legal from RTR/RTS/SQD/SQE.
    let m = ModifyQp {
        mask: STATE | CUR | PKEY | PORT | QKEY_M,
        state: Init as u32,
        cur_state: Reset as u32,
        port_num: 1,
        ..Default::default()
    };
    assert_eq!(qp.modify(&m), Err(EINVAL));
    // Values land: qkey, sq_psn (24 bits), rnr_retry.
    drive(&qp, Rtr);
    let m = ModifyQp {
        mask: STATE | PSN | RNR | QKEY_M,
        state: Rts as u32,
        sq_psn: 0x1234_5678,
        rnr_retry: 3,
        qkey: 0x77,
        ..Default::default()
    };
    qp.modify(&m).unwrap();
    let a = qp.query();
    assert_eq!(
        (a.state, a.qkey, a.sq_psn, a.rnr_retry),
        (Rts, 0x77, 0x34_5678, 3)
    );
    // UD: RNR_RETRY not allowed on RTR→RTS.
    let (ud, _pd2) = fresh(QpType::Ud);
    drive(&ud, Rtr);
    let m = ModifyQp {
        mask: STATE | PSN | RNR,
        state: Rts as u32,
        ..Default::default()
    };
    assert_eq!(ud.modify(&m), Err(EINVAL));
    // RNR_RETRY on a device without the cap → EOPNOTSUPP.
    let d = special(23, |p| p.device_caps = 0x1f & !0x2);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(8, CqOptions::default()).unwrap();
    let (q, _) = pd.create_qp(&srd_init(&cq, caps(8, 8), 0)).unwrap();
    drive(&q, Rtr);
    assert_eq!(q.modify(&m), Err(EOPNOTSUPP));
}

#[test]
fn posting_rules() {
    let a = Side::new(&dev(0), 0);
    let b = Side::new(&dev(1), 0);
    let ah = a.ah_to(&b);
    let r = Region::new(&a.pd, 256, ALL_ACCESS);
    let send = wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[r.sge(0, 8)]);
    a.qp.check_send(&send, 0).unwrap();
    // Unsignaled (sq_sig_all = 0) → EINVAL; FENCE/SOLICITED flags → EINVAL.
    let mut w = send.clone();
    w.send_flags = 0;
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    for f in [1u32, 4, 16] {
        w.send_flags = SIGNALED | f;
        assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL), "flag {f}");
    }
    // Too many SGEs; RDMA needs at most 1 SGE and a remote address.
    let w = wr(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::Send,
        &[r.sge(0, 1), r.sge(1, 1), r.sge(2, 1)],
    );
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    let mut w = wr(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::RdmaWrite,
        &[r.sge(0, 1), r.sge(1, 1)],
    );
    w.remote = Some((0, 1));
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    let w = wr(&ah, b.qp.qpn(), 1, SendOp::RdmaWrite, &[r.sge(0, 1)]);
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL), "no remote");
    // Inline limits: > max_inline → EINVAL; inline RDMA write needs INLINE_WRITE; read never.
    let mut w = send.clone();
    w.payload = Payload::Inline((0..33u8).collect());
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    w.payload = Payload::Inline((0..8u8).collect());
    a.qp.check_send(&w, 0).unwrap();
    w.op = SendOp::RdmaWrite;
    w.remote = Some((0, 1));
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    w.op = SendOp::RdmaRead;
    assert_eq!(a.qp.check_send(&w, 0), Err(EINVAL));
    // Room: SQ of 256 → staged 256 fails.
    assert_eq!(a.qp.check_send(&send, 255), Ok(()));
    assert_eq!(a.qp.check_send(&send, 256), Err(ENOMEM));
    // All-or-nothing batch: a bad WR at the end posts nothing.
    let mut bad = send.clone();
    bad.send_flags = 0;
    assert_eq!(a.qp.post_send_batch(&[send.clone(), bad]), Err(EINVAL));
    none_within(&a.cq, 50);
    // State: not RTS/SQD → EINVAL.
    modify(&a.qp, 1, QpState::Err).unwrap();
    assert_eq!(a.qp.check_send(&send, 0), Err(EINVAL));
}

#[test]
fn post_recv_rules_and_sq_full_until_retired() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let (qp, g) = pd
        .create_qp(&srd_init(
            &cq,
            QpCaps {
                max_send_wr: 8,
                max_recv_wr: 4,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            0,
        ))
        .unwrap();
    assert_eq!(g.max_recv_wr, 4);
    let r = Region::new(&pd, 4096, ALL_ACCESS);
    assert_eq!(qp.post_recv(&recv(1, &[r.sge(0, 8)])), Err(EINVAL), "RESET");
    modify(&qp, 1 | 16 | 32 | 64, QpState::Init).unwrap();
    assert_eq!(
        qp.post_recv(&recv(1, &[r.sge(0, 8), r.sge(8, 8)])),
        Err(EINVAL),
        "too many SGEs"
    );
    for i in 0..4 {
        qp.post_recv(&recv(i, &[r.sge(0, 8)])).unwrap();
    }
    assert_eq!(qp.post_recv(&recv(9, &[r.sge(0, 8)])), Err(ENOMEM));
    // ERR flushes posted receives (status 1); slots free only after retire.
    modify(&qp, 1, QpState::Err).unwrap();
    assert_eq!(qp.post_recv(&recv(9, &[r.sge(0, 8)])), Err(EINVAL), "ERR");
    for i in 0..4 {
        let c = next(&cq, 10);
        assert_eq!((c.wr_id, c.status, c.kind), (i, 1, CompletionKind::Recv));
    }
}

#[test]
fn sq_slot_freed_only_on_retire() {
    let a = Side::new(&dev(0), 0);
    let b = Side::new(&dev(1), 0);
    let d = dev(0);
    let pd = &a.pd;
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let (qp, g) = pd.create_qp(&srd_init(&cq, caps(8, 8), 0)).unwrap();
    to_rts(&qp);
    let ah = a.ah_to(&b);
    let r = Region::new(pd, 64, ALL_ACCESS);
    for i in 0..g.max_recv_wr.min(256) as u64 {
        b.qp.post_recv(&recv(i, &[])).ok();
    }
    let wrs: Vec<SendWr> = (0..g.max_send_wr as u64)
        .map(|i| wr(&ah, b.qp.qpn(), i, SendOp::Send, &[r.sge(0, 0)]))
        .collect();
    qp.post_send_batch(&wrs).unwrap();
    let one = wr(&ah, b.qp.qpn(), 99, SendOp::Send, &[r.sge(0, 0)]);
    assert_eq!(qp.post_send_batch(std::slice::from_ref(&one)), Err(ENOMEM));
    // Wait until every completion has arrived but none retired: still full.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while cq.len() < g.max_send_wr as usize {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(qp.post_send_batch(std::slice::from_ref(&one)), Err(ENOMEM));
    let c = next(&cq, 1);
    assert_eq!(c.status, 0);
    qp.post_send_batch(std::slice::from_ref(&one)).unwrap();
}

#[test]
fn rq_slot_freed_only_on_retire() {
    let a = Side::new(&dev(0), 0);
    let d = dev(1);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let (qp, g) = pd.create_qp(&srd_init(&cq, caps(8, 4), 0)).unwrap();
    to_rts(&qp);
    assert_eq!(g.max_recv_wr, 4);
    let r = Region::new(&pd, 64, ALL_ACCESS);
    for i in 0..4 {
        qp.post_recv(&recv(i, &[r.sge(0, 8)])).unwrap();
    }
    assert_eq!(qp.post_recv(&recv(9, &[r.sge(0, 8)])), Err(ENOMEM));
    let ah = a.pd.create_ah(&d.gid).unwrap();
    a.qp.post_send_batch(&[wr(&ah, qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 5).status, 0);
    // The receive completed (its WQE consumed) but is not retired: still full.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while cq.is_empty() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(qp.post_recv(&recv(9, &[r.sge(0, 8)])), Err(ENOMEM));
    let c = next(&cq, 1);
    assert_eq!((c.wr_id, c.status, c.kind), (0, 0, CompletionKind::Recv));
    qp.post_recv(&recv(9, &[r.sge(0, 8)])).unwrap();
    assert_eq!(qp.post_recv(&recv(10, &[r.sge(0, 8)])), Err(ENOMEM));
}

#[test]
fn poll_hands_out_up_to_max_in_order_and_retires_each() {
    let d = dev(0);
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64, CqOptions::default()).unwrap();
    let (qp, _) = pd.create_qp(&srd_init(&cq, caps(8, 8), 0)).unwrap();
    let r = Region::new(&pd, 4096, ALL_ACCESS);
    modify(&qp, 1 | 16 | 32 | 64, QpState::Init).unwrap();
    for i in 0..6 {
        qp.post_recv(&recv(i, &[r.sge(0, 8)])).unwrap();
    }
    // ERR flushes the six receives (status 1).
    modify(&qp, 1, QpState::Err).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while cq.len() < 6 {
        assert!(std::time::Instant::now() < deadline, "{} flushed", cq.len());
        std::thread::yield_now();
    }
    // A completion peeked and not retired is the first one polled.
    assert_eq!(cq.peek().map(|c| c.wr_id), Some(0));
    let mut seen = Vec::new();
    assert_eq!(cq.poll(4, |c| seen.push((c.wr_id, c.status))), 4);
    assert_eq!(seen, [(0, 1), (1, 1), (2, 1), (3, 1)]);
    assert_eq!(cq.len(), 2);
    // A consumer that panics leaves the CQ usable, and the completion it was handed
    // unretired.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cq.poll(2, |_| panic!("the consumer failed"))
    }));
    assert!(panicked.is_err());
    assert_eq!(cq.take().map(|c| (c.wr_id, c.status)), Some((4, 1)));
    assert_eq!(cq.poll(8, |c| seen.push((c.wr_id, c.status))), 1);
    assert_eq!(seen.last(), Some(&(5, 1)));
    assert_eq!(cq.poll(8, |c| panic!("nothing is left: {c:?}")), 0);
    assert!(cq.take().is_none());
    assert!(cq.is_empty());
}
