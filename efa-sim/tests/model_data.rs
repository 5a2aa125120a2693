//! Data path between devices of one process: every opcode with its bytes,
//! completion fields, and every error status of model §3.5/§4.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn pair(flags_b: u16) -> (Side, Side) {
    (Side::new(&dev(0), 0), Side::new(&dev(1), flags_b))
}

fn rdma(
    ah: &std::sync::Arc<Ah>,
    qpn: u32,
    id: u64,
    op: SendOp,
    local: Sge,
    remote: (u64, u32),
) -> SendWr {
    let mut w = wr(ah, qpn, id, op, &[local]);
    w.remote = Some(remote);
    w
}

#[test]
fn send_and_send_imm_scatter_into_two_sges() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 4096, ALL_ACCESS);
    let dst = Region::new(&b.pd, 4096, ALL_ACCESS);
    let data = pattern(3000, 7);
    src.fill(0, &data);
    b.qp.post_recv(&recv(11, &[dst.sge(0, 1000), dst.sge(2000, 2000)]))
        .unwrap();
    a.qp.post_send_batch(&[wr(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::Send,
        &[src.sge(0, 1500), src.sge(1500, 1500)],
    )])
    .unwrap();
    let s = next(&a.cq, 10);
    assert_eq!(
        (s.wr_id, s.status, s.kind, s.qp_num),
        (1, 0, CompletionKind::Send, a.qp.qpn())
    );
    let r = next(&b.cq, 10);
    assert_eq!(
        (r.wr_id, r.status, r.kind, r.byte_len),
        (11, 0, CompletionKind::Recv, 3000)
    );
    assert_eq!(
        (r.src_qp, r.slid, r.imm_be, r.unsolicited),
        (a.qp.qpn(), 0xffff, None, false)
    );
    assert_eq!(r.qp_num, b.qp.qpn());
    assert_eq!(r.sgid, None, "CQ without with_sgid");
    assert_eq!(dst.bytes(0, 1000), data[..1000]);
    assert_eq!(dst.bytes(2000, 2000), data[1000..]);
    assert_eq!(dst.bytes(1000, 1000), vec![0; 1000], "gap untouched");
    // SEND_IMM: imm bit-exact; receiver now knows the sender (AH) → slid.
    let back = b.ah_to(&a);
    b.qp.post_recv(&recv(12, &[dst.sge(0, 64)])).unwrap();
    let mut w = wr(&ah, b.qp.qpn(), 2, SendOp::SendImm, &[src.sge(0, 10)]);
    w.imm_be = 0x0102_0304u32.to_be();
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!(
        (r.wr_id, r.byte_len, r.imm_be),
        (12, 10, Some(0x0102_0304u32.to_be()))
    );
    assert_eq!(r.slid, back.number());
}

#[test]
fn same_process_requests_take_the_direct_path_unless_disabled() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    b.qp.post_recv(&recv(1, &[])).unwrap();
    let before = a.dev.stats().direct;
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let used = a.dev.stats().direct > before;
    assert_eq!(used, std::env::var_os("EFA_SIM_DIRECT").is_none());
}

#[test]
fn inline_zero_length_and_loopback() {
    let d = dev(0);
    let a = Side::new(&d, 0);
    let b = Side::new(&d, 0); // same device: loopback through the device's own endpoint
    let ah = a.ah_to(&b);
    let dst = Region::new(&b.pd, 64, ALL_ACCESS);
    b.qp.post_recv(&recv(1, &[dst.sge(0, 64)])).unwrap();
    b.qp.post_recv(&recv(2, &[dst.sge(0, 64)])).unwrap();
    let mut w = wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[]);
    w.payload = Payload::Inline(b"inline-hello".iter().copied().collect());
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!(r.byte_len, 12);
    assert_eq!(dst.bytes(0, 12), b"inline-hello");
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!((r.wr_id, r.byte_len, r.status), (2, 0, 0));
}

#[test]
fn sgid_reported_only_for_unknown_sender_on_sgid_cq() {
    let a = Side::new(&dev(0), 0);
    let opts = CqOptions {
        with_sgid: true,
        with_unsolicited: false,
    };
    let b = Side::with_opts(&dev(1), 0, opts, QpType::Srd);
    let ah = a.ah_to(&b);
    let dst = Region::new(&b.pd, 64, ALL_ACCESS);
    b.qp.post_recv(&recv(1, &[dst.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    next(&a.cq, 10);
    let r = next(&b.cq, 10);
    assert_eq!((r.slid, r.sgid), (0xffff, Some(dev(0).gid)));
    let back = b.ah_to(&a);
    b.qp.post_recv(&recv(2, &[dst.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[])])
        .unwrap();
    next(&a.cq, 10);
    let r = next(&b.cq, 10);
    assert_eq!((r.slid, r.sgid), (back.number(), None));
}

#[test]
fn rdma_write_write_imm_and_read() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a); // responder must know the requester for RDMA
    let local = Region::new(&a.pd, 8192, ALL_ACCESS);
    let remote = Region::new(&b.pd, 8192, ALL_ACCESS);
    let data = pattern(5000, 3);
    local.fill(0, &data);
    let rk = (remote.addr() + 100, remote.mr.rkey());
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::RdmaWrite,
        local.sge(0, 5000),
        rk,
    )])
    .unwrap();
    let c = next(&a.cq, 10);
    assert_eq!(
        (c.wr_id, c.status, c.kind),
        (1, 0, CompletionKind::RdmaWrite)
    );
    assert_eq!(remote.bytes(100, 5000), data);
    none_within(&b.cq, 20); // no responder completion for plain write
                            // Write with imm consumes a receive WR (its wr_id), byte_len = write length.
    b.qp.post_recv(&recv(77, &[])).unwrap();
    let mut w = rdma(
        &ah,
        b.qp.qpn(),
        2,
        SendOp::RdmaWriteImm,
        local.sge(0, 300),
        (remote.addr() + 4000, remote.mr.rkey()),
    );
    w.imm_be = 0xa1b2_c3d4;
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).kind, CompletionKind::RdmaWrite);
    let r = next(&b.cq, 10);
    assert_eq!(
        (r.wr_id, r.kind, r.byte_len, r.imm_be, r.unsolicited),
        (
            77,
            CompletionKind::RecvRdmaWithImm,
            300,
            Some(0xa1b2_c3d4),
            false
        )
    );
    assert_eq!(r.src_qp, a.qp.qpn());
    assert_eq!(remote.bytes(4000, 300), data[..300]);
    // Read back into another place.
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        3,
        SendOp::RdmaRead,
        local.sge(6000, 2000),
        (remote.addr() + 100, remote.mr.rkey()),
    )])
    .unwrap();
    let c = next(&a.cq, 10);
    assert_eq!(
        (c.wr_id, c.status, c.kind),
        (3, 0, CompletionKind::RdmaRead)
    );
    assert_eq!(local.bytes(6000, 2000), data[..2000]);
}

#[test]
fn bulk_rdma_one_mib_fast_path() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    const MIB: usize = 1 << 20;
    let local = Region::new(&a.pd, 2 * MIB, ALL_ACCESS);
    let remote = Region::new(&b.pd, MIB, ALL_ACCESS);
    let data = pattern(MIB, 9);
    local.fill(0, &data);
    let (vm_before, direct_before) = (b.dev.stats().process_vm, a.dev.stats().direct);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::RdmaWrite,
        local.sge(0, MIB as u32),
        (remote.addr(), remote.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 5).status, 0);
    assert!(remote.bytes(0, MIB) == data);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        2,
        SendOp::RdmaRead,
        local.sge(MIB, MIB as u32),
        (remote.addr(), remote.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 5).status, 0);
    assert!(local.bytes(MIB, MIB) == data);
    // Over datagrams both copies went through process_vm_*; the direct path copies
    // between the two MRs itself, without a syscall.
    let (vm, direct) = (b.dev.stats().process_vm, a.dev.stats().direct);
    if std::env::var_os("EFA_SIM_DIRECT").is_none() {
        // (Other tests share the devices' counters: at least our two.)
        assert!(direct >= direct_before + 2, "{:?}", a.dev.stats());
    } else {
        assert!(vm >= vm_before + 2, "{:?}", b.dev.stats());
    }
}

#[test]
fn unsolicited_write_with_imm_consumes_no_receive() {
    let a = Side::new(&dev(0), 0);
    let opts = CqOptions {
        with_sgid: false,
        with_unsolicited: true,
    };
    let b = Side::with_opts(&dev(1), 1, opts, QpType::Srd);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    let local = Region::new(&a.pd, 64, ALL_ACCESS);
    let remote = Region::new(&b.pd, 64, ALL_ACCESS);
    local.fill(0, b"unsolicited!");
    b.qp.post_recv(&recv(5, &[])).unwrap();
    let mut w = rdma(
        &ah,
        b.qp.qpn(),
        1,
        SendOp::RdmaWriteImm,
        local.sge(0, 12),
        (remote.addr(), remote.mr.rkey()),
    );
    w.imm_be = 42;
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!(
        (r.wr_id, r.unsolicited, r.imm_be, r.byte_len),
        (0, true, Some(42), 12)
    );
    assert_eq!(remote.bytes(0, 12), b"unsolicited!");
    // The posted receive is still there for a SEND.
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 2, SendOp::Send, &[])])
        .unwrap();
    next(&a.cq, 10);
    assert_eq!(next(&b.cq, 10).wr_id, 5);
}

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
fn ud_send_has_grh_prefix_and_drops_without_receive() {
    let a = Side::with_opts(&dev(0), 0, CqOptions::default(), QpType::Ud);
    let b = Side::with_opts(&dev(1), 0, CqOptions::default(), QpType::Ud);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 128, ALL_ACCESS);
    let dst = Region::new(&b.pd, 128, ALL_ACCESS);
    dst.fill(0, &[0xcc; 128]);
    src.fill(0, b"ud payload");
    // No receive posted: dropped silently, sender still succeeds.
    let drops = b.dev.stats().ud_drops;
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[src.sge(0, 10)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while b.dev.stats().ud_drops == drops {
        assert!(std::time::Instant::now() < deadline, "drop not counted");
        std::thread::yield_now();
    }
    b.qp.post_recv(&recv(7, &[dst.sge(0, 128)])).unwrap();
    let mut w = wr(&ah, b.qp.qpn(), 2, SendOp::SendImm, &[src.sge(0, 10)]);
    w.imm_be = 9;
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    let r = next(&b.cq, 10);
    assert_eq!(
        (r.wr_id, r.byte_len, r.imm_be, r.src_qp),
        (7, 50, Some(9), a.qp.qpn())
    );
    assert_eq!(dst.bytes(40, 10), b"ud payload");
    // RDMA on UD is refused at post time.
    let mut w = wr(&ah, b.qp.qpn(), 3, SendOp::RdmaWrite, &[src.sge(0, 1)]);
    w.remote = Some((dst.addr(), dst.mr.rkey()));
    assert_eq!(a.qp.post_send_batch(&[w]), Err(libc::EINVAL));
}

#[test]
fn dmabuf_mr_maps_the_fd_and_carries_data() {
    let (a, b) = pair(0);
    let ah = a.ah_to(&b);
    // A sealed efa-sim memfd stands in for a dma-buf: mmap-able, so the data path works.
    // SAFETY: plain syscalls with valid arguments; the fd is closed below.
    let fd = unsafe { libc::memfd_create(c"efa-sim-dmabuf".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: valid fd.
    assert_eq!(unsafe { libc::ftruncate(fd, 8192) }, 0);
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: valid fd, an int seal argument.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) }, 0);
    let mr =
        b.pd.reg_dmabuf_mr(4096, 4096, 0x10_0000, fd, ALL_ACCESS)
            .unwrap();
    assert_eq!(mr.memory(), MrMemory::Mapped);
    let info = *mr.dmabuf().unwrap();
    assert_eq!(
        (info.offset, info.size, info.exporter),
        (4096, 8192, Exporter::File)
    );
    assert_eq!((mr.iova(), mr.len()), (0x10_0000, 4096));
    b.qp.post_recv(&recv(
        1,
        &[Sge {
            addr: 0x10_0000 + 8,
            length: 64,
            lkey: mr.lkey(),
        }],
    ))
    .unwrap();
    let src = Region::new(&a.pd, 64, ALL_ACCESS);
    src.fill(0, b"into a dma-buf");
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[src.sge(0, 14)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).byte_len, 14);
    let mut back = [0u8; 14];
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::pread(fd, back.as_mut_ptr().cast(), 14, 4096 + 8) };
    assert_eq!(n, 14);
    assert_eq!(&back, b"into a dma-buf");
    mr.dereg().unwrap();
    // Past the file's end, or an iova in another place of its page than the offset: the
    // kernel's EINVAL.
    assert_eq!(
        b.pd.reg_dmabuf_mr(4096, 4097, 0x10_0000, fd, ALL_ACCESS)
            .err(),
        Some(libc::EINVAL)
    );
    assert_eq!(
        b.pd.reg_dmabuf_mr(4096, 64, 0x10_0008, fd, ALL_ACCESS)
            .err(),
        Some(libc::EINVAL)
    );
    // An fd that is no dma-buf (a pipe) is EINVAL, a closed one EBADF, as the kernel's
    // dma_buf_get answers.
    let mut pipe = [0i32; 2];
    // SAFETY: valid out array.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    assert_eq!(
        a.pd.reg_dmabuf_mr(0, 64, 0, pipe[0], ALL_ACCESS).err(),
        Some(libc::EINVAL)
    );
    // SAFETY: closing fds we own.
    unsafe {
        libc::close(fd);
        libc::close(pipe[0]);
        libc::close(pipe[1]);
    }
    assert_eq!(
        a.pd.reg_dmabuf_mr(0, 64, 0, fd, ALL_ACCESS).err(),
        Some(libc::EBADF)
    );
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

/// Garbage and forged datagrams must never panic the engine, touch memory
/// outside registered MRs, or deliver anything; they are counted as malformed.
#[test]
fn malformed_and_forged_packets_are_harmless() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 4096, ALL_ACCESS);
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = ("127.0.0.1", port);
    let before = b.dev.stats().malformed;
    // Random bytes of many lengths (deterministic LCG).
    let mut x = 0x1234_5678u64;
    for len in [0usize, 1, 7, 95, 96, 97, 200, 1500, 9000] {
        let buf: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        sock.send_to(&buf, to).unwrap();
    }
    // A header whose data_len disagrees with the datagram.
    let mut h = wire::Header::new(wire::KIND_REQ, wire::Op::Write);
    h.dst_qpn = b.qp.qpn() as u16;
    h.qkey = QKEY;
    h.src_gid = a.dev.gid;
    h.rkey = target.mr.rkey();
    h.remote_addr = target.addr();
    h.total_len = 64;
    h.data_len = 1000;
    let mut buf = vec![0u8; wire::HEADER + 64];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    // A forged fast-path write naming this process and unregistered memory.
    h.flags = wire::FLAG_FAST;
    h.pid = std::process::id();
    h.local_addr = 0x1000;
    h.total_len = 4096;
    h.data_len = 0;
    h.req_id = 77;
    h.epoch = 5;
    let mut buf = vec![0u8; wire::HEADER];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    // A bundle whose item length runs past the end.
    let mut bundle = wire::BUNDLE_MAGIC.to_le_bytes().to_vec();
    bundle.extend_from_slice(&3u32.to_le_bytes());
    bundle.extend_from_slice(&500u32.to_le_bytes());
    bundle.extend_from_slice(&[0u8; 20]);
    sock.send_to(&bundle, to).unwrap();
    // The device still works and nothing was written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while b.dev.stats().malformed < before + 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "malformed packets not counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(target.bytes(0, 4096), vec![0; 4096]);
    none_within(&b.cq, 20);
    let ah = a.ah_to(&b);
    b.qp.post_recv(&recv(1, &[target.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).wr_id, 1);
}

/// A successful write is acknowledged in an acknowledgement packet only when its
/// requester says it understands them (`FLAG_TAKES_ACKS`, set by every efa-sim
/// requester); a requester without the flag (an older efa-sim) gets a response.
#[test]
fn a_requester_without_the_acks_flag_gets_responses() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 4096, ALL_ACCESS);
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    for (req_id, flags, kind) in [
        (31u64, 0u8, wire::KIND_RESP),
        (32, wire::FLAG_TAKES_ACKS, wire::KIND_ACKS),
    ] {
        let mut h = wire::Header::new(wire::KIND_REQ, wire::Op::Write);
        h.flags = flags;
        h.dst_qpn = b.qp.qpn() as u16;
        h.qkey = QKEY;
        h.src_gid = a.dev.gid;
        h.rkey = target.mr.rkey();
        h.remote_addr = target.addr() + req_id;
        h.total_len = 8;
        h.data_len = 8;
        h.epoch = 9;
        h.req_id = req_id;
        let mut buf = vec![0u8; wire::HEADER + 8];
        h.encode(&mut buf);
        buf[wire::HEADER..].copy_from_slice(&req_id.to_le_bytes());
        sock.send_to(&buf, to).unwrap();
        let mut resp = vec![0u8; wire::MAX_DATAGRAM];
        let n = sock.recv(&mut resp).expect("an answer");
        let items: Vec<&[u8]> = match wire::bundle_items(&resp[..n]) {
            Some(items) => items.collect(),
            None => vec![&resp[..n]],
        };
        let (r, data) = wire::Header::decode(items[0]).expect("well-formed answer");
        assert_eq!((r.kind, r.epoch, r.status), (kind, 9, 0), "{r:?}");
        if kind == wire::KIND_ACKS {
            assert_eq!(wire::acked_ids(data).collect::<Vec<_>>(), vec![req_id]);
        } else {
            assert_eq!(r.req_id, req_id);
        }
        assert_eq!(target.bytes(req_id as usize, 8), req_id.to_le_bytes());
    }
}

/// Sends `h` (no data) from `sock` to `to` and returns the status of the
/// response to it (panics if none comes within 2 s).
fn forge(
    sock: &std::net::UdpSocket,
    to: std::net::SocketAddrV4,
    h: &efa_sim::model::transport::wire::Header,
) -> u8 {
    use efa_sim::model::transport::wire;
    let mut buf = vec![0u8; wire::HEADER];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let mut resp = vec![0u8; wire::MAX_DATAGRAM];
    loop {
        let n = sock
            .recv(&mut resp)
            .expect("no response to a forged request");
        let items: Vec<&[u8]> = match wire::bundle_items(&resp[..n]) {
            Some(items) => items.collect(),
            None => vec![&resp[..n]],
        };
        for item in items {
            let (r, _) = wire::Header::decode(item).expect("well-formed response");
            if r.req_id == h.req_id && r.epoch == h.epoch {
                return r.status;
            }
        }
    }
}

/// Forged bulk (process_vm_*) requests: whatever pid and address they name,
/// and whichever source they come from, the responder never copies to or
/// from memory that the named process did not itself put in the request.
/// Without proof of the sender it answers FALLBACK (data must come in
/// datagrams) and moves nothing: not our registered memory of another MR,
/// not our unregistered memory, not another process's memory.
#[test]
fn forged_bulk_requests_never_reach_process_memory() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 64 << 10, ALL_ACCESS);
    let target_bytes = pattern(64 << 10, 3);
    target.fill(0, &target_bytes);
    // Registered memory of this process that the forger names as "its" buffer.
    let secret = Region::new(&a.pd, 64 << 10, ALL_ACCESS);
    let secret_bytes = pattern(64 << 10, 77);
    secret.fill(0, &secret_bytes);
    // Unregistered memory of this process.
    let plain = vec![0x5au8; 64 << 10];
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    let before = b.dev.stats();
    let base = |op: wire::Op, pid: u32, local: u64, src_qpn: u16, id: u64| {
        let mut h = wire::Header::new(wire::KIND_REQ, op);
        h.flags = wire::FLAG_FAST;
        h.dst_qpn = b.qp.qpn() as u16;
        h.qkey = QKEY;
        h.src_gid = a.dev.gid;
        h.src_qpn = src_qpn;
        h.rkey = target.mr.rkey();
        h.remote_addr = target.addr();
        h.total_len = 32 << 10;
        h.pid = pid;
        h.local_addr = local;
        h.epoch = 0xf0f0;
        h.req_id = id;
        h
    };
    // 1. From an arbitrary port, claiming to be our requester QP: this
    //    process (registered / unregistered memory) and our parent process.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = std::process::id();
    let parent = std::os::unix::process::parent_id();
    let mut id = 1000;
    let mut sent = 0;
    for (pid, local) in [
        (me, secret.addr()),
        (parent, secret.addr()),
        (parent, plain.as_ptr() as u64),
    ] {
        for op in [wire::Op::Write, wire::Op::Read] {
            id += 1;
            let st = forge(&sock, to, &base(op, pid, local, a.qp.qpn() as u16, id));
            assert_eq!(st, wire::STATUS_FALLBACK, "pid {pid} op {op:?}");
            sent += 1;
        }
    }
    // 2. From the very address a QP of a *free* slot would use (so source
    //    address and GID/QPN agree), naming this process: the slot's owner
    //    record does not name us, so no proof.
    let my_slot = transport::slot_of_qpn(a.qp.qpn());
    //    The slot's lock is held meanwhile, so no other process claims it.
    let (free_slot, _slot_lock, sock2) = (0..transport::SLOTS)
        .filter(|s| *s != my_slot)
        .find_map(|s| {
            use std::os::fd::AsRawFd;
            let path = format!("{}/slot-{s}", a.dev.config().lock_dir.display());
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .ok()?;
            // SAFETY: flock on a valid, owned fd; non-blocking.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return None;
            }
            let p = transport::port_for(a.dev.config().port_base, a.dev.index, s)?;
            std::net::UdpSocket::bind(("127.0.0.1", p))
                .ok()
                .map(|k| (s, f, k))
        })
        .expect("a free slot");
    for op in [wire::Op::Write, wire::Op::Read] {
        id += 1;
        let qpn = (free_slot << transport::QP_INDEX_BITS | 1) as u16;
        let st = forge(&sock2, to, &base(op, me, secret.addr(), qpn, id));
        assert_eq!(st, wire::STATUS_FALLBACK, "free slot {free_slot} op {op:?}");
        sent += 1;
    }
    // Nothing moved in either direction, nothing completed.
    assert!(target.bytes(0, 64 << 10) == target_bytes);
    assert!(secret.bytes(0, 64 << 10) == secret_bytes);
    assert!(plain.iter().all(|b| *b == 0x5a));
    let after = b.dev.stats();
    assert!(after.unproven >= before.unproven + sent, "{after:?}");
    none_within(&b.cq, 20);
    none_within(&a.cq, 1);
    // A bad rkey is still reported as such (the fallback answer reveals no more
    // than a genuine requester would learn).
    let mut h = base(
        wire::Op::Write,
        me,
        secret.addr(),
        a.qp.qpn() as u16,
        id + 1,
    );
    h.rkey ^= 0x40;
    assert_eq!(forge(&sock, to, &h), 7);
    // Genuine bulk traffic still takes the fast path (or the direct path's copy).
    let ah = a.ah_to(&b);
    let (vm_before, direct_before) = (b.dev.stats().process_vm, a.dev.stats().direct);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        9,
        SendOp::RdmaWrite,
        secret.sge(0, 32 << 10),
        (target.addr(), target.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 5).status, 0);
    assert!(target.bytes(0, 32 << 10) == secret_bytes[..32 << 10]);
    if std::env::var_os("EFA_SIM_DIRECT").is_none() {
        assert!(a.dev.stats().direct > direct_before);
    } else {
        assert!(b.dev.stats().process_vm > vm_before);
    }
}

/// Same-process requests normally take the direct path (no datagrams); this
/// re-runs every other test of this file over the datagram path
/// (`EFA_SIM_DIRECT=0`), so both paths must give the same results.
#[test]
fn whole_suite_also_passes_over_datagrams() {
    if std::env::var_os("EFA_SIM_DIRECT").is_some() {
        return; // we are the re-run
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--skip",
            "whole_suite_also_passes_over_datagrams",
            "--test-threads=4",
        ])
        .env("EFA_SIM_DIRECT", "0")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "datagram-path run failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("test result: ok"), "{text}");
    assert!(!text.contains(" 0 passed"), "nothing ran: {text}");
}
