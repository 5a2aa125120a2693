//! The hardware queues as provider and device use them: ring layouts, doorbells per
//! `max_batch`, a full CQ losing what it cannot hold, doorbells the device ignores,
//! stale completions after a reset, and a `Config` built by the test instead of the
//! environment. Devices with unique indices keep the counters of each test its own.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::config::Config;
use efa_sim::model::*;
use helpers::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits until `f` holds (panics after `secs`).
fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A side with a CQ of `cq_depth` and a QP of `sq` send slots.
fn side_with(dev: &Arc<Device>, cq_depth: u32, sq: u32, efa_flags: u16) -> Side {
    let pd = dev.alloc_pd().unwrap();
    let (cq, _) = dev.create_cq(cq_depth, CqOptions::default()).unwrap();
    let (qp, _) = pd
        .create_qp(&srd_init(&cq, caps(sq, 16), efa_flags))
        .unwrap();
    to_rts(&qp);
    Side {
        dev: dev.clone(),
        pd,
        cq,
        qp,
    }
}

/// A device `index` whose same-process path is on, whatever the environment says (no
/// faults, `EFA_SIM_DIRECT` ignored).
fn direct_device(index: u32, profile: Profile) -> Arc<Device> {
    let config = Arc::new(Config {
        direct: true,
        faults: Default::default(),
        ..(**Sim::get().config()).clone()
    });
    assert!(config.direct_path());
    Device::standalone_in(index, profile, config).unwrap()
}

/// A QPN of this process's slot that no QP holds (requests to it complete with 9).
fn nobody(s: &Side) -> u32 {
    s.qp.qpn() | 0x1ff
}

#[test]
fn ring_layouts_match_the_queues_and_polling_reports_the_consumer_index() {
    let d = special(40, |_| {});
    let s = side_with(&d, 5, 20, 0);
    let (sq, rq) = s.qp.wq_layout();
    assert_eq!((sq.entry_size, sq.num_entries), (64, 32));
    // max_tx_batch 16 of 64-byte WQEs, below the ring size.
    assert_eq!(sq.max_batch, 16);
    // 16 receive WRs of 2 SGEs: 32 descriptors of 16 bytes.
    assert_eq!((rq.entry_size, rq.num_entries, rq.max_batch), (16, 32, 32));
    assert!(!sq.buffer.is_null() && !rq.buffer.is_null() && sq.buffer != rq.buffer);
    assert_eq!(sq.buffer as usize % 4096, 0, "rings are page aligned");
    let cq = s.cq.ring_layout();
    assert_eq!((cq.entry_size, cq.num_entries), (32, 8));
    // EFADV_QP_FLAGS_INLINE_WRITE forces 128-byte WQEs.
    let wide = side_with(&d, 8, 8, qp::QP_FLAG_INLINE_WRITE);
    assert_eq!(wide.qp.wq_layout().0.entry_size, 128);
    assert_eq!(
        wide.qp.wq_layout().0.max_batch,
        7,
        "8 wide WQEs per batch, never a whole SQ"
    );

    // Three completions polled: the CQ doorbell's consumer index says 3.
    let ah = s.ah_to(&s);
    let wrs: Vec<SendWr> = (0..3)
        .map(|i| wr(&ah, nobody(&s), i, SendOp::Send, &[]))
        .collect();
    s.qp.post_send_batch(&wrs).unwrap();
    for _ in 0..3 {
        assert_eq!(next(&s.cq, 10).status, 9);
    }
    // SAFETY: the doorbell is a live u32 of the CQ's ring (the CQ outlives this read).
    let db = unsafe { std::ptr::read_volatile(cq.doorbell) };
    assert_eq!(db & 0xffff, 3);
}

#[test]
fn the_doorbell_is_rung_every_max_batch_wqes() {
    let d = special(41, |_| {});
    let s = side_with(&d, 64, 64, 0);
    let ah = s.ah_to(&s);
    let wrs: Vec<SendWr> = (0..40)
        .map(|i| wr(&ah, nobody(&s), i, SendOp::Send, &[]))
        .collect();
    let before = d.stats().sq_doorbells;
    s.qp.post_send_batch(&wrs).unwrap();
    assert_eq!(d.stats().sq_doorbells - before, 3, "16 + 16 + 8 WQEs");
    let mut seen: Vec<u64> = (0..40).map(|_| next(&s.cq, 10).wr_id).collect();
    seen.sort();
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
}

#[test]
fn a_full_cq_loses_what_it_cannot_hold_and_stays_broken() {
    let d = special(42, |_| {});
    let s = side_with(&d, 8, 32, 0);
    assert_eq!(s.cq.depth(), 8);
    let ah = s.ah_to(&s);
    let wrs: Vec<SendWr> = (0..20)
        .map(|i| wr(&ah, nobody(&s), i, SendOp::Send, &[]))
        .collect();
    s.qp.post_send_batch(&wrs).unwrap();
    wait_for(10, "12 lost completions", || d.stats().cq_overflows == 12);
    assert!(s.cq.overflowed());
    assert_eq!(s.cq.len(), 8);
    // The oldest eight, in order, each once, none overwritten; the rest never come.
    let got: Vec<(u64, u8)> = (0..8)
        .map(|_| {
            let c = next(&s.cq, 10);
            (c.wr_id, c.status)
        })
        .collect();
    assert_eq!(got, (0..8).map(|i| (i, 9)).collect::<Vec<_>>());
    none_within(&s.cq, 50);
    // The ring is empty now, but the CQ stays broken: the next completion is lost too.
    s.qp.post_send_batch(&wrs[..1]).unwrap();
    wait_for(10, "one more lost completion", || {
        d.stats().cq_overflows == 13
    });
    none_within(&s.cq, 20);
}

#[test]
fn a_cq_polled_as_the_queue_fills_loses_nothing() {
    let d = special(52, |_| {});
    let s = side_with(&d, 8, 32, 0);
    let ah = s.ah_to(&s);
    let (mut sent, mut done) = (0u64, 0u64);
    while done < 200 {
        while sent < 200 && sent - done < 8 {
            s.qp.post_send_batch(&[wr(&ah, nobody(&s), sent, SendOp::Send, &[])])
                .unwrap();
            sent += 1;
        }
        let c = next(&s.cq, 10);
        assert_eq!((c.wr_id, c.status), (done, 9));
        done += 1;
    }
    assert!(!s.cq.overflowed());
    assert_eq!(d.stats().cq_overflows, 0);
}

#[test]
fn doorbells_claiming_more_than_the_ring_are_ignored() {
    let d = special(43, |_| {});
    let s = side_with(&d, 16, 16, 0);
    let (sq, _) = s.qp.wq_layout(); // the watcher looks at this QP from now on
    let bad = d.stats().bad_doorbells;
    // The device's watcher thread loads the doorbell atomically, so a consumer in this
    // process writes it atomically too.
    // SAFETY: the doorbell is a live, aligned u32 of the QP's send ring, only accessed
    // atomically while the QP lives.
    let db = unsafe { AtomicU32::from_ptr(sq.doorbell) };
    db.store(sq.num_entries + 5, Ordering::Release);
    wait_for(5, "the watcher to see the doorbell", || {
        d.stats().bad_doorbells > bad
    });
    none_within(&s.cq, 20);
    // Back to the truth: the provider posts as usual.
    db.store(0, Ordering::Release);
    let ah = s.ah_to(&s);
    s.qp.post_send_batch(&[wr(&ah, nobody(&s), 7, SendOp::Send, &[])])
        .unwrap();
    let c = next(&s.cq, 10);
    assert_eq!((c.wr_id, c.status), (7, 9));
}

#[test]
fn completions_from_before_a_reset_are_dropped() {
    let d = special(44, |_| {});
    let s = side_with(&d, 32, 16, 0);
    let ah = s.ah_to(&s);
    let wrs: Vec<SendWr> = (0..4)
        .map(|i| wr(&ah, nobody(&s), i, SendOp::Send, &[]))
        .collect();
    s.qp.post_send_batch(&wrs).unwrap();
    wait_for(10, "4 completions", || s.cq.len() == 4);
    modify(&s.qp, 1, QpState::Reset).unwrap();
    assert!(
        s.cq.is_empty(),
        "completions of the earlier incarnation are stale"
    );
    to_rts(&s.qp);
    // The reset queue starts over: all 16 slots are free again.
    let wrs: Vec<SendWr> = (100..116)
        .map(|i| wr(&ah, nobody(&s), i, SendOp::Send, &[]))
        .collect();
    s.qp.post_send_batch(&wrs).unwrap();
    let mut seen: Vec<u64> = (0..16).map(|_| next(&s.cq, 10).wr_id).collect();
    seen.sort();
    assert_eq!(seen, (100..116).collect::<Vec<_>>());
}

/// A configuration built in the test (no environment, no re-run): devices without the
/// same-process path move every request in datagrams, with the same results.
#[test]
fn a_config_without_the_direct_path_sends_datagrams() {
    let config = Arc::new(Config {
        direct: false,
        ..(**Sim::get().config()).clone()
    });
    assert!(!config.direct_path());
    let a = Device::standalone_in(45, Profile::default(), config.clone()).unwrap();
    let b = Device::standalone_in(46, Profile::default(), config).unwrap();
    let (sa, sb) = (Side::new(&a, 0), Side::new(&b, 0));
    let buf = Region::new(&sb.pd, 64, ALL_ACCESS);
    let src = Region::new(&sa.pd, 64, ALL_ACCESS);
    src.fill(0, b"over datagrams");
    sb.qp.post_recv(&recv(5, &[buf.sge(0, 64)])).unwrap();
    let ah = sa.ah_to(&sb);
    sa.qp
        .post_send_batch(&[wr(&ah, sb.qp.qpn(), 6, SendOp::Send, &[src.sge(0, 14)])])
        .unwrap();
    assert_eq!(next(&sa.cq, 10).status, 0);
    let c = next(&sb.cq, 10);
    assert_eq!((c.wr_id, c.status, c.byte_len), (5, 0, 14));
    assert_eq!(buf.bytes(0, 14), b"over datagrams");
    assert_eq!(a.stats().direct, 0, "{:?}", a.stats());
}

#[test]
fn a_doorbell_s_completions_are_in_the_cq_when_its_post_returns_in_wqe_order() {
    // The same-process path completes each WQE as it is consumed; the completions of one
    // doorbell reach the CQ together, before the post returns, in WQE order, errors
    // included, also past the 32 the device collects before writing them.
    let profile = Profile {
        max_tx_batch: 0, // one doorbell for all 40
        ..Profile::default()
    };
    let d = direct_device(47, profile);
    let s = side_with(&d, 64, 64, 0);
    let ah = s.ah_to(&s);
    let unknown_lkey = Sge {
        addr: 0x1000,
        length: 8,
        lkey: 0x00ab_cdef,
    };
    let wrs: Vec<SendWr> = (0..40)
        .map(|i| {
            let sges: &[Sge] = if i % 5 == 3 { &[unknown_lkey] } else { &[] };
            wr(&ah, nobody(&s), i, SendOp::Send, sges)
        })
        .collect();
    let doorbells = d.stats().sq_doorbells;
    s.qp.post_send_batch(&wrs).unwrap();
    assert_eq!(d.stats().sq_doorbells - doorbells, 1);
    let mut got = Vec::new();
    s.cq.poll(64, |c| got.push((c.wr_id, c.status)));
    let want: Vec<(u64, u8)> = (0..40)
        .map(|i| {
            let status = if i % 5 == 3 {
                efa_sys::vendor::comp_status::LOCAL_ERROR_INVALID_LKEY as u8
            } else {
                efa_sys::vendor::comp_status::REMOTE_ERROR_BAD_DEST_QPN as u8
            };
            (i, status)
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_destroyed_qp_s_doorbells_and_direct_wqes_stay_counted() {
    // Each send queue keeps its own share of these counters (no locked add per
    // doorbell); the device's counters add them up, and keep them when the QP goes.
    let d = direct_device(48, Profile::default());
    let s = side_with(&d, 64, 64, 0);
    let t = side_with(&d, 64, 64, 0);
    let before = d.stats();
    for side in [&s, &t] {
        let ah = side.ah_to(side);
        let wrs: Vec<SendWr> = (0..3)
            .map(|i| wr(&ah, nobody(side), i, SendOp::Send, &[]))
            .collect();
        side.qp.post_send_batch(&wrs).unwrap();
    }
    let posted = d.stats();
    assert_eq!(posted.sq_doorbells - before.sq_doorbells, 2);
    assert_eq!(posted.direct - before.direct, 6);
    s.qp.destroy().unwrap();
    assert_eq!(d.stats(), posted, "the destroyed QP's counts stay");
    let ah = t.ah_to(&t);
    t.qp.post_send_batch(&[wr(&ah, nobody(&t), 9, SendOp::Send, &[])])
        .unwrap();
    let after = d.stats();
    assert_eq!(after.sq_doorbells - posted.sq_doorbells, 1);
    assert_eq!(after.direct - posted.direct, 1);
}

#[test]
fn one_doorbell_reaches_each_wqe_s_own_destination_and_fails_only_bad_ones() {
    // The device reuses a WQE's route (its AH, and the slot of its destination QPN: the
    // process serving it) for the next WQE of the same doorbell with the same pair: a
    // change of AH, of QPN or of slot, an AH of another PD or a QPN nobody holds, between
    // good WQEs, must each still get their own outcome.
    let profile = Profile {
        max_tx_batch: 0, // one doorbell for all
        ..Profile::default()
    };
    let d = direct_device(49, profile);
    let s = side_with(&d, 64, 64, 0);
    let t = side_with(&d, 64, 64, 0);
    let u = side_with(&d, 64, 64, 0);
    let (to_t, to_u) = (s.ah_to(&t), s.ah_to(&u));
    let foreign = t.ah_to(&t); // of t's PD: unusable on s's QP
    let src = Region::new(&s.pd, 256, ALL_ACCESS);
    let (inbox_t, inbox_u) = (
        Region::new(&t.pd, 256, ALL_ACCESS),
        Region::new(&u.pd, 256, ALL_ACCESS),
    );
    for i in 0..4u64 {
        t.qp.post_recv(&recv(100 + i, &[inbox_t.sge(i as usize * 16, 16)]))
            .unwrap();
        u.qp.post_recv(&recv(200 + i, &[inbox_u.sge(i as usize * 16, 16)]))
            .unwrap();
    }
    // (AH, QPN) of each WQE; its payload is 16 bytes of its own index.
    // A QPN of another slot (a process this test does not start): not same-process, so
    // a datagram that nobody answers (it stays outstanding while the test runs).
    let elsewhere = t.qp.qpn() ^ (1 << efa_sim::transport::QP_INDEX_BITS);
    let plan: [(&Arc<Ah>, u32); 10] = [
        (&to_t, t.qp.qpn()),
        (&to_t, t.qp.qpn()),
        (&foreign, t.qp.qpn()),
        (&to_t, t.qp.qpn()),
        (&to_u, u.qp.qpn()),
        (&to_u, nobody(&u)),
        (&to_u, u.qp.qpn()),
        (&to_t, u.qp.qpn()), // same AH as before, another QPN: reaches u
        (&to_t, t.qp.qpn()),
        (&to_t, elsewhere),
    ];
    let wrs: Vec<SendWr> = plan
        .iter()
        .enumerate()
        .map(|(i, (ah, qpn))| {
            src.fill(i * 16, &[i as u8; 16]);
            wr(ah, *qpn, i as u64, SendOp::Send, &[src.sge(i * 16, 16)])
        })
        .collect();
    let before = d.stats();
    s.qp.post_send_batch(&wrs).unwrap();
    let after = d.stats();
    assert_eq!(after.sq_doorbells - before.sq_doorbells, 1);
    // All but the foreign AH's WQE and the one to the other slot went direct.
    assert_eq!(after.direct - before.direct, 8);
    let mut sent = Vec::new();
    s.cq.poll(64, |c| sent.push((c.wr_id, c.status)));
    use efa_sys::vendor::comp_status as st;
    let want: Vec<(u64, u8)> = (0..9)
        .map(|i| match i {
            2 => (i, st::LOCAL_ERROR_INVALID_AH as u8),
            5 => (i, st::REMOTE_ERROR_BAD_DEST_QPN as u8),
            _ => (i, 0),
        })
        .collect();
    assert_eq!(sent, want);
    // t got WQEs 0, 1, 3, 8 in its receives in order; u got 4, 6, 7.
    for (side, inbox, first, got) in [
        (&t, &inbox_t, 100, &[0u8, 1, 3, 8][..]),
        (&u, &inbox_u, 200, &[4, 6, 7]),
    ] {
        for (k, &i) in got.iter().enumerate() {
            let c = next(&side.cq, 10);
            assert_eq!((c.wr_id, c.status, c.byte_len), (first + k as u64, 0, 16));
            assert_eq!(inbox.bytes(k * 16, 16), [i; 16]);
        }
        none_within(&side.cq, 20);
    }
}

/// Over datagrams, the acknowledgements of two QPs' requests to one peer travel to their
/// device in the same packets; each QP's send CQ gets its own completions, every one.
#[test]
fn acknowledgements_of_two_qps_complete_each_on_its_own_cq() {
    let config = Arc::new(Config {
        direct: false,
        faults: Default::default(),
        ..(**Sim::get().config()).clone()
    });
    let a = Device::standalone_in(50, Profile::default(), config.clone()).unwrap();
    let b = Device::standalone_in(51, Profile::default(), config).unwrap();
    let (s1, s2, rx) = (Side::new(&a, 0), Side::new(&a, 0), Side::new(&b, 0));
    let buf = Region::new(&rx.pd, 64 * 128, ALL_ACCESS);
    for i in 0..128u64 {
        rx.qp
            .post_recv(&recv(i, &[buf.sge(i as usize * 64, 64)]))
            .unwrap();
    }
    let (ah1, ah2) = (s1.ah_to(&rx), s2.ah_to(&rx));
    // Doorbells of 4 from each QP in turn: the responder lists both QPs' ids together.
    for round in 0..16u64 {
        for (s, ah, base) in [(&s1, &ah1, 1000u64), (&s2, &ah2, 2000)] {
            let wrs: Vec<SendWr> = (0..4)
                .map(|k| wr(ah, rx.qp.qpn(), base + round * 4 + k, SendOp::Send, &[]))
                .collect();
            s.qp.post_send_batch(&wrs).unwrap();
        }
    }
    for (s, base) in [(&s1, 1000u64), (&s2, 2000)] {
        let mut got: Vec<u64> = (0..64)
            .map(|_| {
                let c = next(&s.cq, 10);
                assert_eq!(c.status, 0, "{c:?}");
                c.wr_id
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, (base..base + 64).collect::<Vec<_>>());
        none_within(&s.cq, 20);
    }
}

/// With the opt-in trap (`mmio_trap=1`) a consumer's doorbell store is MMIO: the device
/// has acted on it when the store returns, on the storing thread (no watcher, whose
/// first scan comes later).
#[test]
fn a_trapped_doorbell_store_reaches_the_device_before_it_returns() {
    let d = special(53, |p| p.mmio_trap = true);
    let s = side_with(&d, 16, 16, 0);
    let (sq, _) = s.qp.wq_layout();
    // Long enough for the watcher to be asleep between scans.
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: the doorbell is a live, aligned u32 of the QP's send ring, only accessed
    // atomically while the QP lives.
    let db = unsafe { AtomicU32::from_ptr(sq.doorbell) };
    for round in 1..=5u64 {
        let before = d.stats();
        // A different bad value each round: the device counts a stall once per value.
        let bad = sq.num_entries + 4 + round as u32;
        db.store(bad, Ordering::Release);
        let after = d.stats();
        assert_eq!(
            after.bad_doorbells,
            before.bad_doorbells + 1,
            "round {round}: {after:?}"
        );
        assert_eq!(db.load(Ordering::Acquire), bad, "the store landed");
        db.store(0, Ordering::Release);
        std::thread::sleep(Duration::from_millis(3));
    }
    assert_eq!(d.stats().opened_traps, 0);
    // The provider's own doorbells are not trapped: it rings the device directly.
    let ah = s.ah_to(&s);
    s.qp.post_send_batch(&[wr(&ah, nobody(&s), 7, SendOp::Send, &[])])
        .unwrap();
    assert_eq!((next(&s.cq, 10).wr_id, d.stats().trapped_doorbells), (7, 0));
}

/// By default (issue 38: no signal) the doorbell is plain memory: the watcher sees it,
/// later; a consumer that says it stored (`efa_sim_direct_sq_doorbell`, here
/// `Qp::direct_doorbell`) has it consumed before the call returns.
#[test]
fn by_default_the_doorbell_is_plain_memory_the_watcher_or_a_call_consumes() {
    let d = special(54, |_| {});
    assert!(!Profile::default().mmio_trap, "the trap is opt-in");
    let s = side_with(&d, 16, 16, 0);
    let (sq, _) = s.qp.wq_layout();
    let bad = d.stats().bad_doorbells;
    // SAFETY: as above.
    let db = unsafe { AtomicU32::from_ptr(sq.doorbell) };
    db.store(sq.num_entries + 5, Ordering::Release);
    wait_for(5, "the watcher to see the doorbell", || {
        d.stats().bad_doorbells > bad
    });
    assert_eq!(d.stats().opened_traps, 0);
    assert_eq!(d.stats().trapped_doorbells, 0);
    db.store(0, Ordering::Release);
    // Long enough for the watcher to be asleep between scans.
    std::thread::sleep(Duration::from_millis(20));
    for round in 1..=5u32 {
        let before = d.stats().bad_doorbells;
        db.store(sq.num_entries + 5 + round, Ordering::Release);
        s.qp.direct_doorbell();
        assert_eq!(d.stats().bad_doorbells, before + 1, "round {round}");
        db.store(0, Ordering::Release);
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// A store the trap cannot decode (here SSE2's `movd`) opens the page: the store
/// lands, the watcher sees it, and later stores do not trap.
#[cfg(target_arch = "x86_64")]
#[test]
fn an_undecodable_doorbell_store_opens_the_page_and_still_lands() {
    let d = special(55, |p| p.mmio_trap = true);
    let s = side_with(&d, 16, 16, 0);
    let (sq, _) = s.qp.wq_layout();
    let bad = d.stats().bad_doorbells;
    let value = sq.num_entries + 5;
    // SAFETY: `movd [ptr], xmm` stores 4 bytes to the live, aligned doorbell; the xmm
    // register is declared clobbered.
    unsafe {
        core::arch::asm!(
            "movd xmm0, {v:e}",
            "movd dword ptr [{p}], xmm0",
            v = in(reg) value,
            p = in(reg) sq.doorbell,
            out("xmm0") _,
            options(nostack),
        )
    };
    assert_eq!(d.stats().opened_traps, 1);
    wait_for(5, "the watcher to see the doorbell", || {
        d.stats().bad_doorbells > bad
    });
    // SAFETY: as in the tests above.
    let db = unsafe { AtomicU32::from_ptr(sq.doorbell) };
    assert_eq!(db.load(Ordering::Acquire), value);
    db.store(0, Ordering::Release);
    assert_eq!(d.stats().opened_traps, 1, "an open page does not trap");
}
