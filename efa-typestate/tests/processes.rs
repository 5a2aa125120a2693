//! Two processes on one host talk through the software device: the parent publishes its
//! endpoint info and an RDMA target; the child (this binary re-run) sends and writes.

mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

#[test]
fn two_processes_send_and_rdma_write() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let qp = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    // RDMA from the child needs an AH for its GID here; on one host both use efa_0's GID.
    let _ah = pd.create_ah(ctx.gid().unwrap()).unwrap();
    let inbox = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 64);
    let mut r = RecvBatch::<2>::new(&qp);
    // SRD does not order the child's SEND and write-with-imm, and receives are consumed
    // in posting order: either may take either receive, so both fit the SEND.
    r.push(1, inbox.sge(0, 32).unwrap()).unwrap();
    r.push(2, inbox.sge(32, 32).unwrap()).unwrap();

    // SAFETY: `inbox` is read only after both receive completions are polled (and their
    // count asserted) below; its Mr owns the buffer and lives to the end of the test.
    unsafe { qp.post_recv(&r) }.unwrap();

    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_side", "--exact", "--nocapture", "--test-threads=1"])
        .env("EFA_TS_CHILD", "child_side")
        .env("EFA_TS_PEER", hex(&qp.endpoint().to_bytes()))
        .env("EFA_TS_TARGET", hex(&target.remote().to_bytes()))
        .output()
        .expect("spawn child");

    let got = poll_n(&cq, 2, Duration::from_secs(20));
    let out = String::from_utf8_lossy(&child.stdout);
    let err = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "child failed\n{out}\n{err}");
    assert!(out.contains("1 passed"), "{out}");
    assert_eq!(got.len(), 2, "{got:?}");
    let child_qpn = got[0].src_qp();
    assert_ne!(child_qpn, qp.qpn(), "a QP of the other process");
    let send = got
        .iter()
        .find(|c| c.opcode() == WcOpcode::RECV)
        .expect("send arrived");
    let at = if send.wr_id() == 1 { 0 } else { 32 };
    assert_eq!(
        &inbox.as_slice()[at..at + send.byte_len() as usize],
        b"hello from the child process"
    );
    let imm = got
        .iter()
        .find(|c| c.opcode() == WcOpcode::RECV_RDMA_WITH_IMM)
        .expect("write arrived");
    assert_eq!(imm.imm(), Some(std::process::id() ^ 0x5555));
    assert_eq!(&target.to_vec()[..16], b"written remotely");
}

#[test]
fn child_side() {
    if std::env::var("EFA_TS_CHILD").as_deref() != Ok("child_side") {
        return; // only meaningful when spawned by the test above
    }
    let peer = EndpointInfo::parse(&unhex(&std::env::var("EFA_TS_PEER").unwrap())).unwrap();
    let target = RemoteBuffer::parse(&unhex(&std::env::var("EFA_TS_TARGET").unwrap())).unwrap();
    let parent_pid = std::os::unix::process::parent_id();
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(512)).unwrap();
    let qp = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_parent = pd.connect(&peer).unwrap();
    let mut msg = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    msg.as_mut_slice()[..29].copy_from_slice(b"hello from the child process\0");
    msg.as_mut_slice()[32..48].copy_from_slice(b"written remotely");
    let mut s = SendBatch::<2>::new(&qp);
    s.send(1, &to_parent, msg.sge(0, 28).unwrap()).unwrap();
    s.write_imm(
        2,
        &to_parent,
        msg.sge(32, 16).unwrap(),
        target.slice(0, 16).unwrap(),
        parent_pid ^ 0x5555,
    )
    .unwrap();
    // SAFETY: `msg` is not written after the post and its Mr lives to the end; both
    // completions are polled on the next line.
    unsafe { qp.post_send(&s) }.unwrap();
    let got = expect_n(&cq, 2);
    assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
}
