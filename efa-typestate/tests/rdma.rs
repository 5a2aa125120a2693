//! RDMA on the software device: write, write with immediate (solicited and unsolicited),
//! read, inline write, remote access errors, unknown peers, dma-buf registrations.

#[macro_use]
mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

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
fn unknown_peer_for_rdma_write_is_status_14_and_sender_gid_for_send() {
    // Two devices: b's PD has no AH for a's GID.
    let ctx_a = open(0);
    let ctx_b = open(1);
    let pd_a = ctx_a.alloc_pd().unwrap();
    let pd_b = ctx_b.alloc_pd().unwrap();
    let cqa = ctx_a.create_ext_cq(CqOptions::new(1024)).unwrap();
    let cqb = ctx_b
        .create_ext_cq(CqOptions::new(1024).sender_gid())
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
fn dmabuf_registration_is_a_target_and_a_source() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    // A sealed efa-sim memfd stands in for a dma-buf: the software device maps the fd
    // range (it refuses plain files and unsealed memfds, as the kernel refuses non-dma-bufs).
    let file = sealed_memfd(8192);
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
    let mut bytes = vec![0u8; 8192];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0).unwrap();
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
    let owner = dmabuf.close().unwrap();
    assert_eq!((owner.offset(), owner.len()), (4096, 4096));
    let _ = &ctx;
}

/// An `efa-sim` memfd of `len` bytes sealed against shrinking (what the software device
/// takes as a stand-in dma-buf).
fn sealed_memfd(len: u64) -> std::fs::File {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: NUL-terminated name and flags; returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"efa-sim-ts-dmabuf".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: the fd was just created and is owned by nobody else.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(len).unwrap();
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd with an int seal argument.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    assert_eq!(rc, 0, "F_ADD_SEALS");
    file
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
