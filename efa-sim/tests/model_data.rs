//! Data path between devices of one process: every opcode with its bytes and its
//! completion fields. Error statuses are in model_error_statuses.rs, forged datagrams in
//! model_forged_packets.rs.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

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

/// Same-process requests normally take the direct path (no datagrams); this
/// re-runs every other test of this file over the datagram path
/// (`EFA_SIM_DIRECT=0`), so both paths must give the same results.
#[test]
fn whole_suite_also_passes_over_datagrams() {
    rerun_over_datagrams("whole_suite_also_passes_over_datagrams");
}
