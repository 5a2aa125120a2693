//! Control path on the software device: devices, queries, object creation, state machine.

mod common;
use common::*;
use efa_typestate::sys::verbs::ibv_qp_attr_mask;
use efa_typestate::*;

#[test]
fn lists_efa_devices_and_queries_them() {
    let list = DeviceList::new().unwrap();
    let efa: Vec<_> = list.efa().collect();
    assert!(
        efa.len() >= 2,
        "the sim provides two devices by default: {efa:?}"
    );
    assert_eq!(efa[0].name(), "efa_0");
    assert_eq!(efa[1].name(), "efa_1");
    assert!(list.by_name("efa_1").is_some());
    assert!(list.by_name("mlx5_0").is_none());

    let ctx = open(0);
    assert_eq!(ctx.device_name(), "efa_0");
    let attr = ctx.query_device().unwrap();
    assert_eq!(attr.vendor_id(), 0x1d0f);
    assert!(matches!(attr.vendor_part_id(), 0xefa0..=0xefa4));
    assert_eq!(attr.phys_port_cnt(), 1);

    let efa = ctx.efa_attr().unwrap();
    assert_eq!(efa, ctx.query_efa().unwrap());
    assert!(efa.max_sq_wr > 0 && efa.max_rq_wr > 0);
    assert!(efa.max_rdma_size > 0);
    assert!(
        efa.caps
            .contains(DeviceCaps::RDMA_READ | DeviceCaps::RDMA_WRITE),
        "{:?}",
        efa.caps
    );

    let port = ctx.query_port(1).unwrap();
    assert!(port.is_active());
    assert!(port.max_msg_sz >= 4096);
    assert_eq!(port.gid_tbl_len, 1);

    let gid = ctx.gid().unwrap();
    assert_ne!(gid, Gid::default());
    assert_eq!(ctx.query_gid(1, 0).unwrap(), gid);
    assert!(ctx.query_gid(1, 1).is_err(), "EFA has one GID per port");
    // EFA has port 1 only: any other is refused before the device sees it.
    assert_eq!(
        ctx.query_port(2).unwrap_err(),
        Error::Invalid(InvalidInput::NoSuchPort(2))
    );
    assert_eq!(
        ctx.query_gid(0, 0).unwrap_err(),
        Error::Invalid(InvalidInput::NoSuchPort(0))
    );
    let other = open(1);
    assert_ne!(other.gid().unwrap(), gid, "two devices, two GIDs");
}

#[test]
fn async_fd_is_pollable_and_quiet() {
    let ctx = open(0);
    assert!(ctx.async_fd() >= 0);
    // EFA dispatches no async events in normal operation.
    let ev = ctx
        .wait_async_event(Some(std::time::Duration::from_millis(20)))
        .unwrap();
    assert_eq!(ev, None);
}

#[test]
fn pd_mr_ah_lifecycle_and_close_errors() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(&mut buf[..], AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(mr.len(), 4096);
    assert_eq!(mr.iova(), mr.host_ptr() as u64);
    assert!(
        mr.lkey() < (1 << 24),
        "EFA lkeys are 24-bit: {:#x}",
        mr.lkey()
    );

    let mr2 = pd
        .register_with_iova(vec![0u8; 100], 0x1000_0000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(mr2.iova(), 0x1000_0000);
    let sge = mr2.sge(10, 20).unwrap();
    assert_eq!(sge.addr(), 0x1000_000a);
    assert_eq!(sge.len(), 20);
    assert_eq!(sge.lkey(), mr2.lkey());
    let remote = mr2.remote();
    assert_eq!(
        (remote.addr(), remote.len(), remote.rkey()),
        (0x1000_0000, 100, mr2.rkey())
    );

    // Unsupported access flags are refused by the provider (with LOCAL_WRITE: without it
    // the kernel refuses remote atomic access with EINVAL before the driver looks).
    let bad = pd
        .register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::from_bits_retain(1 << 3),
        )
        .map(drop); // REMOTE_ATOMIC
    assert!(
        bad.unwrap_err().is_unsupported(),
        "remote atomic access must be refused with EOPNOTSUPP"
    );

    let ah = pd.create_ah(ctx.gid().unwrap()).unwrap();
    let ah2 = pd.create_ah(ctx.gid().unwrap()).unwrap();
    assert_eq!(
        ah.number(),
        ah2.number(),
        "same (PD, GID) gives the same AH number"
    );
    assert_ne!(ah.number(), AH_UNKNOWN);

    // Closing a PD that is still in use fails with EBUSY and hands the PD back. Safe code
    // cannot drop a PD before its MRs; a leaked (forgotten, still registered) MR can.
    let pd2 = ctx.alloc_pd().unwrap();
    std::mem::forget(
        pd2.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
            .unwrap(),
    );
    let (pd2, err) = pd2.close().unwrap_err();
    assert_eq!(
        err,
        Error::Verb {
            verb: Verb::DeallocPd,
            errno: Errno::EBUSY
        }
    );
    assert_eq!(
        err.to_string(),
        "ibv_dealloc_pd failed: EBUSY (resource still in use)"
    );
    drop(pd2); // still busy: Drop ignores the failure

    ah.close().unwrap();
    drop(ah2);
    let back = mr2.close().unwrap();
    assert_eq!(back.len(), 100);
    drop(mr);
    pd.close().unwrap();
    drop(buf);
    ctx.close().unwrap();
}

#[test]
fn sge_bounds_are_checked() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .register(vec![0u8; 128], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(mr.sge(0, 128).is_ok());
    assert!(mr.sge(127, 1).is_ok());
    assert!(mr.sge(128, 0).is_ok());
    assert_eq!(
        mr.sge(120, 9).unwrap_err(),
        Error::Invalid(InvalidInput::SgeOutOfBounds {
            offset: 120,
            len: 9
        })
    );
    assert!(matches!(
        mr.sge(u64::MAX, 2),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
    let whole = mr.sge_all().unwrap();
    assert!(whole.slice(100, 28).is_ok());
    assert!(matches!(
        whole.slice(100, 29),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
    ));
    let r = mr.remote();
    assert!(r.slice(0, 128).is_ok());
    assert!(matches!(
        r.slice(1, 128),
        Err(Error::Invalid(InvalidInput::RemoteOutOfBounds { .. }))
    ));
    let msg = mr.sge(120, 9).unwrap_err().to_string();
    assert!(
        msg.contains("SGE [120, 120+9) lies outside its memory region"),
        "{msg}"
    );
}

#[test]
fn efadv_query_mr_is_answered_or_unsupported() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .register(vec![0u8; 128], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let r = mr.query_efa();
    if efa_sim_select::SOFTWARE_DEVICE {
        // efa-sim exports efadv_query_mr (EFA_1.3) and reports no interconnect ids.
        assert_eq!(r.unwrap(), MrInterconnect::default());
    } else if let Err(e) = r {
        assert!(
            e.is_unsupported(),
            "query_mr failed with a non-'unsupported' error: {e}"
        );
    }
}

#[test]
fn qp_state_machine_step_by_step() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    assert!(cq.depth() >= 64);
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd().depth(32, 32))
        .unwrap();
    assert_eq!(qp.state(), QpStateKind::Reset);
    assert_eq!(qp.query().unwrap().state, QpStateKind::Reset);
    let caps = qp.caps();
    assert!(caps.max_send_wr >= 32 && caps.max_recv_wr >= 32, "{caps:?}");
    assert!(caps.max_send_wr.is_power_of_two());

    let qp = qp.init(QKEY_A).unwrap();
    let a = qp.query().unwrap();
    assert_eq!((a.state, a.qkey), (QpStateKind::Init, QKEY_A));
    let qp = qp.rtr().unwrap();
    assert_eq!(qp.query().unwrap().state, QpStateKind::Rtr);
    let qp = qp
        .rts(RtsOptions {
            rnr_retry: Some(RnrRetry::Times(3)),
            sq_psn: 0,
        })
        .unwrap();
    let a = qp.query().unwrap();
    assert_eq!((a.state, a.rnr_retry), (QpStateKind::Rts, 3));
    assert_eq!(a.caps, caps, "query reports the granted caps");

    let ep = qp.endpoint();
    assert_eq!(ep.gid(), ctx.gid().unwrap());
    assert_eq!(ep.qpn(), qp.qpn());
    assert_eq!(ep.qkey(), QKEY_A);

    let qp = qp.reset().unwrap();
    assert_eq!(qp.query().unwrap().state, QpStateKind::Reset);
    let qp = qp.prepare(QKEY_B, None).unwrap();
    let a = qp.query().unwrap();
    assert_eq!(a.state, QpStateKind::Rts);
    assert_eq!(
        RnrRetry::from_raw(a.rnr_retry),
        DEFAULT_RNR_RETRY,
        "finite RNR retry unless asked otherwise"
    );
    assert_eq!(DEFAULT_RNR_RETRY, RnrRetry::Times(3));
    let qp = qp
        .reset()
        .unwrap()
        .prepare(QKEY_B, Some(RnrRetry::Forever))
        .unwrap();
    assert_eq!(
        qp.query().unwrap().rnr_retry,
        7,
        "forever only when asked for"
    );
    qp.close().unwrap();
}

#[test]
fn failed_transition_gives_the_qp_back() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    // rnr_retry is not settable on UD QPs: RTR -> RTS with it fails, the QP comes back in RTR.
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::ud())
        .unwrap()
        .init(QKEY_A)
        .unwrap()
        .rtr()
        .unwrap();
    let err = qp
        .rts(RtsOptions {
            rnr_retry: Some(RnrRetry::Times(3)),
            sq_psn: 0,
        })
        .unwrap_err();
    assert!(
        matches!(
            err.error,
            Error::Verb {
                verb: Verb::ModifyQp,
                errno: Errno::EINVAL
            }
        ),
        "{:?}",
        err.error
    );
    let qp = err.qp;
    assert_eq!(qp.query().unwrap().state, QpStateKind::Rtr);
    let qp = qp.rts(RtsOptions::default()).unwrap();
    assert_eq!(qp.query().unwrap().state, QpStateKind::Rts);

    // Out-of-range rnr_retry is caught before the device sees it.
    let qp2 = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .init(1)
        .unwrap()
        .rtr()
        .unwrap();
    let err = qp2
        .rts(RtsOptions {
            rnr_retry: Some(RnrRetry::Times(8)),
            sq_psn: 0,
        })
        .unwrap_err();
    assert_eq!(
        err.error,
        Error::Invalid(InvalidInput::RnrRetryOutOfRange(8))
    );
    // 7 is "forever" in verbs: it must be asked for by name.
    let err = err
        .qp
        .rts(RtsOptions {
            rnr_retry: Some(RnrRetry::Times(7)),
            sq_psn: 0,
        })
        .unwrap_err();
    assert_eq!(
        err.error,
        Error::Invalid(InvalidInput::RnrRetryOutOfRange(7))
    );
    drop(qp);
}

#[test]
fn dyn_qp_tracks_state_at_run_time() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let mut qp = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap().into_dyn();
    assert_eq!(qp.state(), QpStateKind::Reset);
    let peer = pd.connect(&qp.endpoint()).unwrap();
    let mut sends = SendBatch::<1>::new(&qp);
    sends.send_inline(1, &peer, b"x").unwrap();
    // SAFETY: inline payload; nothing is handed to the device.
    let err = unsafe { qp.post_send(&sends) }.unwrap_err();
    assert_eq!(
        err,
        Error::Invalid(InvalidInput::WrongQpState {
            expected: QpStateKind::Rts,
            actual: QpStateKind::Reset
        })
    );
    // Skipping a state is refused by the device: RESET -> RTR is EINVAL.
    assert!(qp.modify_state(QpStateKind::Rtr).is_err());
    assert_eq!(qp.state(), QpStateKind::Reset);
    qp.init(QKEY_A).unwrap();
    qp.modify_state(QpStateKind::Rtr).unwrap();
    qp.modify_state(QpStateKind::Rts).unwrap();
    assert_eq!(qp.refresh_state().unwrap(), QpStateKind::Rts);
    let qp = qp.into_typed::<Init>().unwrap_err().qp; // wrong state: handed back
    let qp: Qp<_, Rts> = qp.into_typed().unwrap();
    assert_eq!(qp.endpoint().qkey(), QKEY_A);
}

#[test]
fn raw_modify_escape_hatch() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let qp = rts_qp(&pd, &cq, &QpConfig::srd(), 5);
    // SAFETY: ibv_qp_attr is a C struct of integers and nested integer structs/unions,
    // for which all-zero bytes are valid.
    let mut attr: efa_typestate::sys::verbs::ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qkey = 77;
    // SAFETY: RTS -> RTS with a new qkey keeps the state the type claims.
    unsafe { qp.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_QKEY.0) }.unwrap();
    assert_eq!(qp.query().unwrap().qkey, 77);
    // An attribute EFA does not accept (AV) is refused.
    // SAFETY: all-zero bytes are a valid ibv_qp_attr (integers and integer structs/unions).
    let mut attr: efa_typestate::sys::verbs::ibv_qp_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the mask is IBV_QP_AV only (no IBV_QP_STATE), so the call cannot move the
    // QP out of RTS, and EFA refuses it anyway; `attr` is live and writable.
    let err = unsafe { qp.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_AV.0) }.unwrap_err();
    assert!(
        err.is_unsupported() || err.errno() == Some(Errno::EINVAL),
        "{err}"
    );
}

#[test]
fn endpoint_round_trip_and_peer() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .init(0xdead_beef)
        .unwrap();
    let wire = qp.endpoint().to_bytes();
    assert_eq!(&wire[..16], ctx.gid().unwrap().as_bytes());
    assert_eq!(&wire[16..20], &qp.qpn().to_be_bytes());
    assert_eq!(&wire[20..24], &[0xde, 0xad, 0xbe, 0xef]);
    let parsed = EndpointInfo::parse(&wire).unwrap();
    assert_eq!(parsed, qp.endpoint());
    let peer = pd.connect(&parsed).unwrap();
    assert_eq!(peer.qpn(), qp.qpn());
    assert_eq!(peer.qkey(), 0xdead_beef);
    assert_eq!(peer.endpoint(), parsed);
    assert_eq!(peer.ah().gid(), ctx.gid().unwrap());
    assert!(EndpointInfo::parse(&wire[..20]).is_err());
    let mut bad = wire;
    bad[16] = 1; // QPN 0x01xxxxxx
    assert!(matches!(
        EndpointInfo::parse(&bad),
        Err(Error::Invalid(InvalidInput::QpnOutOfRange(_)))
    ));
}

#[test]
fn ud_and_srd_creation_report_granted_caps() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let ud = pd.create_qp(&cq, &cq, &QpConfig::ud().depth(3, 5)).unwrap();
    assert_eq!(ud.qp_type(), QpType::Ud);
    assert_eq!(ud.send_ops(), SendOps::SEND | SendOps::SEND_WITH_IMM);
    let c = ud.caps();
    assert!(c.max_send_wr >= 3 && c.max_recv_wr >= 5, "{c:?}");
    let srd = pd
        .create_qp(
            &cq,
            &cq,
            &QpConfig::srd().service_level(8).unsolicited_write_recv(),
        )
        .unwrap();
    assert!(srd
        .send_ops()
        .contains(SendOps::RDMA_READ | SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM));
    assert_ne!(srd.qpn(), ud.qpn());
    // Too many SGEs for the device: refused before the provider, naming the value and
    // the device's limit.
    let too_many = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 64,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let err = pd
        .create_qp(&cq, &cq, &QpConfig::srd().caps(too_many))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Invalid(InvalidInput::ExceedsDeviceLimit {
            what: DeviceLimit::SendSges,
            value: 64,
            max: 2
        })
    );
    // UD cannot do RDMA, nor have SRD-only options: refused before the device.
    let err = pd
        .create_qp(&cq, &cq, &QpConfig::ud().send_ops(SendOps::RDMA_WRITE))
        .unwrap_err();
    assert_eq!(err, Error::Invalid(InvalidInput::RdmaOnUd));
    let err = pd
        .create_qp(&cq, &cq, &QpConfig::ud().unsolicited_write_recv())
        .unwrap_err();
    assert_eq!(
        err,
        Error::Invalid(InvalidInput::SrdOnly(SrdOnly::UnsolicitedWriteRecv))
    );
    let err = pd
        .create_qp(&cq, &cq, &QpConfig::ud().inline_write())
        .unwrap_err();
    assert_eq!(
        err,
        Error::Invalid(InvalidInput::SrdOnly(SrdOnly::InlineWrite))
    );
}

#[test]
fn layout_queries_describe_the_rings() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    // 512 entries: room for the QP's 256 sends and 256 receives.
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap();
    if efa_sim_select::SOFTWARE_DEVICE {
        // efa-sim emulates the rings: EFA's entry sizes (32-byte CQEs, 64-byte WQEs for
        // 32 inline bytes, 16-byte receive descriptors) at the granted depths; a doorbell
        // batch is the profile's 16 WQEs.
        let l = cq.layout().unwrap();
        assert_eq!((l.entry_size, l.num_entries), (32, 512), "{l:?}");
        assert!(l.buffer != 0 && l.doorbell != 0, "{l:?}");
        let caps = qp.caps();
        let (sq, rq) = qp.wq_layout().unwrap();
        assert_eq!(
            (sq.entry_size, sq.num_entries, sq.max_batch),
            (64, caps.max_send_wr, 16),
            "{sq:?}"
        );
        assert_eq!(
            (rq.entry_size, rq.num_entries, rq.max_batch),
            (
                16,
                caps.max_recv_wr * caps.max_recv_sge,
                caps.max_recv_wr * caps.max_recv_sge
            ),
            "{rq:?}"
        );
        assert!(sq.buffer != 0 && rq.buffer != 0 && sq.buffer != rq.buffer);
        assert!(sq.doorbell != 0 && rq.doorbell != 0 && sq.doorbell != rq.doorbell);
        // A QP whose state is tracked at run time reports the same rings.
        let dynq = qp.into_dyn();
        let (dsq, drq) = dynq.wq_layout().unwrap();
        assert_eq!((dsq.buffer, drq.buffer), (sq.buffer, rq.buffer));
    } else {
        match cq.layout() {
            Ok(l) => assert!(l.entry_size > 0 && l.num_entries > 0, "{l:?}"),
            Err(e) => assert!(e.is_unsupported(), "{e}"),
        }
        match qp.wq_layout() {
            Ok((sq, rq)) => assert!(sq.entry_size > 0 && rq.entry_size > 0, "{sq:?} {rq:?}"),
            Err(e) => assert!(e.is_unsupported(), "{e}"),
        }
    }
}
