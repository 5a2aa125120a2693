//! Data path between devices of one process: every error status of model §3.5/§4, and
//! what each leaves untouched.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

#[test]
fn local_errors_bad_lkey_other_pd_and_lengths() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    let mine = Region::new(&a.pd, 16384, ALL_ACCESS);
    let other_pd = a.dev.alloc_pd().unwrap();
    let foreign = Region::new(&other_pd, 64, ALL_ACCESS);
    let remote = Region::new(&b.pd, 16384, ALL_ACCESS);
    let q = b.qp.qpn();
    // Unknown lkey, range outside the MR, MR of another PD → 5.
    let bad = Sge {
        addr: mine.addr(),
        length: 8,
        lkey: 0xabcdef,
    };
    for (i, sge) in [bad, mine.sge(16380, 8), foreign.sge(0, 8)]
        .into_iter()
        .enumerate()
    {
        a.qp.post_send_batch(&[wr(&ah, q, i as u64, SendOp::Send, &[sge])])
            .unwrap();
        let c = next(&a.cq, 10);
        assert_eq!((c.wr_id, c.status), (i as u64, 5), "{sge:?}");
    }
    // Read into memory without LOCAL_WRITE → 5.
    let ro = Region::new(&a.pd, 64, ACCESS_REMOTE_READ);
    a.qp.post_send_batch(&[rdma(
        &ah,
        q,
        9,
        SendOp::RdmaRead,
        ro.sge(0, 8),
        (remote.addr(), remote.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 10).status, 5);
    // SEND larger than the MTU → 6.
    a.qp.post_send_batch(&[wr(&ah, q, 10, SendOp::Send, &[mine.sge(0, 8193)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 6);
    // AH of another PD → 4.
    let stray = other_pd.create_ah(&b.dev.gid).unwrap();
    a.qp.post_send_batch(&[wr(&stray, q, 11, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 4);
    none_within(&b.cq, 20);
}

#[test]
fn rdma_above_max_rdma_size_is_loc_len_and_moves_nothing() {
    let small = special(30, |p| p.max_rdma_size = 4096);
    let a = Side::new(&small, 0);
    let b = Side::new(&dev(1), 0);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    let local = Region::new(&a.pd, 8192, ALL_ACCESS);
    let remote = Region::new(&b.pd, 8192, ALL_ACCESS);
    local.fill(0, &[0xee; 8192]);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::RdmaWrite,
        local.sge(0, 4097),
        (remote.addr(), remote.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 10).status, 6);
    assert_eq!(remote.bytes(0, 8192), vec![0; 8192]);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        2,
        SendOp::RdmaWrite,
        local.sge(0, 4096),
        (remote.addr(), remote.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(remote.bytes(0, 4096), vec![0xee; 4096]);
}

#[test]
fn remote_access_errors_touch_nothing() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    let local = Region::new(&a.pd, 65536, ALL_ACCESS);
    local.fill(0, &[0x5a; 65536]);
    let remote = Region::new(&b.pd, 65536, ALL_ACCESS);
    let no_write = Region::new(&b.pd, 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ);
    let no_read = Region::new(&b.pd, 4096, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE);
    no_read.fill(0, &[0x11; 4096]);
    let other_pd = b.dev.alloc_pd().unwrap();
    let foreign = Region::new(&other_pd, 4096, ALL_ACCESS);
    let q = b.qp.qpn();
    let cases = [
        (SendOp::RdmaWrite, (remote.addr(), 0xfff_fff0), 100u32), // unknown rkey
        (
            SendOp::RdmaWrite,
            (remote.addr() + 65000, remote.mr.rkey()),
            1000,
        ), // past the end
        (SendOp::RdmaWrite, (remote.addr() - 1, remote.mr.rkey()), 10), // before the start
        (SendOp::RdmaWrite, (no_write.addr(), no_write.mr.rkey()), 10),
        (SendOp::RdmaWrite, (foreign.addr(), foreign.mr.rkey()), 10), // MR of another PD
        (SendOp::RdmaWrite, (remote.addr(), remote.mr.rkey()), 40000), // bulk, past the end
        (SendOp::RdmaRead, (no_read.addr(), no_read.mr.rkey()), 10),
        (
            SendOp::RdmaRead,
            (remote.addr() + 60000, remote.mr.rkey()),
            40000,
        ), // bulk read past end
    ];
    let remote_at = remote.addr() + 30000;
    let cases = cases.iter().map(|(op, rk, len)| {
        (
            *op,
            if *len == 40000 && *op == SendOp::RdmaWrite {
                (remote_at, rk.1)
            } else {
                *rk
            },
            *len,
        )
    });
    for (i, (op, rk, len)) in cases.enumerate() {
        let l = Region::new(&a.pd, len as usize, ALL_ACCESS);
        l.fill(0, &vec![0x77; len as usize]);
        a.qp.post_send_batch(&[rdma(&ah, q, i as u64, op, l.sge(0, len), rk)])
            .unwrap();
        let c = next(&a.cq, 10);
        assert_eq!(
            (c.wr_id, c.status),
            (i as u64, 7),
            "case {i}: {op:?} {rk:x?} {len}"
        );
        if op == SendOp::RdmaRead {
            assert_eq!(
                l.bytes(0, len as usize),
                vec![0x77; len as usize],
                "read target untouched"
            );
        }
    }
    assert_eq!(
        remote.bytes(0, 65536),
        vec![0; 65536],
        "not one byte written"
    );
    assert_eq!(no_write.bytes(0, 4096), vec![0; 4096]);
    assert_eq!(foreign.bytes(0, 4096), vec![0; 4096]);
    none_within(&b.cq, 20);
}

#[test]
fn unknown_peer_for_rdma_is_status_14() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b); // but b has no AH for a
    let local = Region::new(&a.pd, 64, ALL_ACCESS);
    let remote = Region::new(&b.pd, 64, ALL_ACCESS);
    local.fill(0, &[1; 64]);
    for (i, op) in [SendOp::RdmaWrite, SendOp::RdmaRead, SendOp::RdmaWriteImm]
        .into_iter()
        .enumerate()
    {
        a.qp.post_send_batch(&[rdma(
            &ah,
            b.qp.qpn(),
            i as u64,
            op,
            local.sge(0, 64),
            (remote.addr(), remote.mr.rkey()),
        )])
        .unwrap();
        assert_eq!(next(&a.cq, 10).status, 14, "{op:?}");
    }
    assert_eq!(remote.bytes(0, 64), vec![0; 64]);
    // SEND does not need it.
    b.qp.post_recv(&recv(1, &[])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 9, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
}

#[test]
fn rnr_retries_then_status_10_or_success_once_posted() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    // A QP with rnr_retry = 2.
    let (cq, _) = a.dev.create_cq(16, CqOptions::default()).unwrap();
    let (qp, _) = a.pd.create_qp(&srd_init(&cq, caps(8, 8), 0)).unwrap();
    modify(&qp, 1 | 16 | 32 | 64, QpState::Init).unwrap();
    modify(&qp, 1, QpState::Rtr).unwrap();
    qp.modify(&ModifyQp {
        mask: 1 | (1 << 16) | (1 << 11),
        state: QpState::Rts as u32,
        rnr_retry: 2,
        ..Default::default()
    })
    .unwrap();
    qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&cq, 10).status, 10);
    // Default rnr_retry 7 = forever: the send waits until a receive shows up,
    // longer than the peer timeout (RNR answers prove the peer alive).
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[])])
        .unwrap();
    none_within(&a.cq, runtime::PEER_TIMEOUT.as_millis() as u64 + 300);
    b.qp.post_recv(&recv(3, &[])).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).wr_id, 3);
    // Write-with-imm needs a receive too.
    let _known = b.ah_to(&a);
    let l = Region::new(&a.pd, 8, ALL_ACCESS);
    let r = Region::new(&b.pd, 8, ALL_ACCESS);
    qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        4,
        SendOp::RdmaWriteImm,
        l.sge(0, 8),
        (r.addr(), r.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&cq, 10).status, 10);
}

#[test]
fn receive_too_small_is_11_and_keeps_the_receive() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 256, ALL_ACCESS);
    let dst = Region::new(&b.pd, 256, ALL_ACCESS);
    src.fill(0, &pattern(256, 1));
    b.qp.post_recv(&recv(1, &[dst.sge(0, 16)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[src.sge(0, 17)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 11);
    none_within(&b.cq, 20);
    assert_eq!(dst.bytes(0, 16), vec![0; 16]);
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[src.sge(0, 16)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!((r.wr_id, r.byte_len), (1, 16));
}

#[test]
fn receive_sge_without_local_write_is_5_and_7() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let ro = Region::new(&b.pd, 64, ACCESS_REMOTE_READ);
    b.qp.post_recv(&recv(1, &[ro.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    // Zero bytes need no access: succeeds.
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).status, 0);
    let src = Region::new(&a.pd, 64, ALL_ACCESS);
    b.qp.post_recv(&recv(2, &[ro.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[src.sge(0, 8)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 7);
    let r = next(&b.cq, 10);
    assert_eq!((r.wr_id, r.status), (2, 5));
}

#[test]
fn dest_qp_missing_or_in_error_is_9() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    a.qp.post_send_batch(&[wr(&ah, (b.qp.qpn() & !0x1ff) | 0x1ff, 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 9, "no such QP");
    modify(&b.qp, 1, QpState::Err).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 9, "QP in ERR");
    let gone = b.qp.qpn();
    b.qp.destroy().unwrap();
    a.qp.post_send_batch(&[wr(&ah, gone, 3, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 9, "destroyed QP");
}

#[test]
fn qkey_mismatch_is_dropped_counted_and_times_out() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    b.qp.post_recv(&recv(1, &[])).unwrap();
    let before = b.dev.stats().qkey_violations;
    let mut w = wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[]);
    w.remote_qkey = 0xbad;
    let t = std::time::Instant::now();
    a.qp.post_send_batch(&[w]).unwrap();
    let c = next(&a.cq, 10);
    assert!(c.status == 13 || c.status == 15, "{c:?}");
    assert!(t.elapsed() < std::time::Duration::from_millis(5000));
    assert!(b.dev.stats().qkey_violations > before);
    none_within(&b.cq, 10);
}

#[test]
fn modify_to_err_flushes_outstanding_sends() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap(); // RNR forever
    none_within(&a.cq, 20);
    modify(&a.qp, 1, QpState::Err).unwrap();
    let c = next(&a.cq, 10);
    assert_eq!((c.wr_id, c.status), (1, 1));
}

#[test]
fn ah_destroy_flushes_its_outstanding_wrs() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap(); // RNR forever
    none_within(&a.cq, 20);
    ah.destroy().unwrap();
    let c = next(&a.cq, 10);
    assert_eq!((c.wr_id, c.status), (1, 1));
}

#[test]
fn qp_destroy_purges_outstanding_work() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    none_within(&a.cq, 20);
    a.qp.destroy().unwrap();
    none_within(&a.cq, 50);
    assert!(a.cq.is_empty());
}

#[test]
fn peer_qp_destroyed_with_wr_outstanding_completes_with_9() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap(); // RNR, retried forever
    none_within(&a.cq, 30);
    b.qp.destroy().unwrap();
    let t = std::time::Instant::now();
    let c = next(&a.cq, 10);
    assert_eq!((c.wr_id, c.status), (1, 9));
    assert!(
        t.elapsed() < std::time::Duration::from_millis(3000),
        "{:?}",
        t.elapsed()
    );
}

/// Same-process requests normally take the direct path (no datagrams); this
/// re-runs every other test of this file over the datagram path
/// (`EFA_SIM_DIRECT=0`), so both paths must give the same results.
#[test]
fn whole_suite_also_passes_over_datagrams() {
    rerun_over_datagrams("whole_suite_also_passes_over_datagrams");
}
