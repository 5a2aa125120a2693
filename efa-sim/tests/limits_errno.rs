//! Device limits as the real stack enforces them: every create one beyond a profile limit
//! fails with the errno libefa or the EFA kernel driver returns for it, and exactly at the
//! limit it succeeds. Each test runs on a standalone device with a small profile (unique
//! indices 50..=59 in this binary); the sources of each errno are cited at the checks in
//! `src/model` (qp_init.rs `grant`, cq.rs, pd.rs, qp.rs, runtime/tables.rs).

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;
use std::sync::Arc;

const EINVAL: i32 = libc::EINVAL;
const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
const ENOMEM: i32 = libc::ENOMEM;

/// Requested QP capacities.
fn qcaps(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32, inline: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: inline,
    }
}

/// A PD and a CQ on `d` to create QPs with.
fn pd_cq(d: &Arc<Device>) -> (Arc<Pd>, Arc<Cq>) {
    let pd = d.alloc_pd().expect("pd");
    let (cq, _) = d.create_cq(16, CqOptions::default()).expect("cq");
    (pd, cq)
}

/// Creates an SRD QP with `c`; on success returns the granted caps (and destroys it).
fn try_qp(pd: &Arc<Pd>, cq: &Arc<Cq>, c: QpCaps) -> Result<QpCaps, i32> {
    let (qp, g) = pd.create_qp(&srd_init(cq, c, 0))?;
    qp.destroy().unwrap();
    Ok(g)
}

/// The device for the QP capacity tests: none of them reaches a count limit.
fn caps_dev() -> Arc<Device> {
    static DEV: std::sync::OnceLock<Arc<Device>> = std::sync::OnceLock::new();
    DEV.get_or_init(|| {
        special(50, |p| {
            p.max_sq_wr = 16;
            p.max_rq_wr = 32;
            p.max_sq_sge = 1;
            p.max_rq_sge = 2;
            p.inline_buf_size_ex = 40;
        })
    })
    .clone()
}

#[test]
fn max_sq_wr_limits_the_send_queue_depth() {
    // The LLQ (4096 64-byte WQEs) would allow more: max_sq_wr is the kernel's check.
    let (pd, cq) = pd_cq(&caps_dev());
    let g = try_qp(&pd, &cq, qcaps(16, 1, 1, 1, 0)).unwrap();
    assert_eq!(g.max_send_wr, 16);
    assert_eq!(try_qp(&pd, &cq, qcaps(17, 1, 1, 1, 0)).err(), Some(EINVAL));
}

#[test]
fn max_rq_wr_counts_descriptors() {
    let (pd, cq) = pd_cq(&caps_dev());
    // One SGE per WR: 32 WRs.
    assert_eq!(
        try_qp(&pd, &cq, qcaps(8, 32, 1, 1, 0)).unwrap().max_recv_wr,
        32
    );
    assert_eq!(try_qp(&pd, &cq, qcaps(8, 33, 1, 1, 0)).err(), Some(EINVAL));
    // Two SGEs per WR: 16 WRs.
    assert_eq!(
        try_qp(&pd, &cq, qcaps(8, 16, 1, 2, 0)).unwrap().max_recv_wr,
        16
    );
    assert_eq!(try_qp(&pd, &cq, qcaps(8, 17, 1, 2, 0)).err(), Some(EINVAL));
}

#[test]
fn max_sq_sge() {
    let (pd, cq) = pd_cq(&caps_dev());
    try_qp(&pd, &cq, qcaps(8, 8, 1, 1, 0)).unwrap();
    assert_eq!(try_qp(&pd, &cq, qcaps(8, 8, 2, 1, 0)).err(), Some(EINVAL));
}

#[test]
fn max_rq_sge() {
    let (pd, cq) = pd_cq(&caps_dev());
    try_qp(&pd, &cq, qcaps(8, 8, 1, 2, 0)).unwrap();
    assert_eq!(try_qp(&pd, &cq, qcaps(8, 8, 1, 3, 0)).err(), Some(EINVAL));
}

#[test]
fn max_inline_data_is_inline_buf_size_ex() {
    let (pd, cq) = pd_cq(&caps_dev());
    let g = try_qp(&pd, &cq, qcaps(8, 8, 1, 1, 40)).unwrap();
    assert_eq!(g.max_inline_data, 40);
    assert_eq!(try_qp(&pd, &cq, qcaps(8, 8, 1, 1, 41)).err(), Some(EINVAL));
}

#[test]
fn max_llq_size_limits_the_send_queue_by_wqe_size() {
    // 512 LLQ bytes: 8 64-byte WQEs, or 4 128-byte ones (inline beyond 32 bytes).
    let d = special(51, |p| {
        p.max_llq_size = 512;
        p.min_sq_wr = 1;
        p.inline_buf_size_ex = 80;
    });
    let (pd, cq) = pd_cq(&d);
    assert_eq!(
        try_qp(&pd, &cq, qcaps(8, 1, 1, 1, 32)).unwrap().max_send_wr,
        8
    );
    assert_eq!(try_qp(&pd, &cq, qcaps(9, 1, 1, 1, 32)).err(), Some(EINVAL));
    assert_eq!(
        try_qp(&pd, &cq, qcaps(4, 1, 1, 1, 33)).unwrap().max_send_wr,
        4
    );
    assert_eq!(try_qp(&pd, &cq, qcaps(5, 1, 1, 1, 33)).err(), Some(EINVAL));
}

#[test]
fn depths_rounded_up_past_a_limit_fail() {
    // libefa rounds SQ, RQ and CQ depths up to powers of two before the kernel compares
    // them with the device's limits: with limits of 24, 16 is the deepest that works.
    let d = special(52, |p| {
        p.max_sq_wr = 24;
        p.max_rq_wr = 24;
        p.max_cqe = 24;
        p.min_sq_wr = 1;
    });
    let (pd, cq) = pd_cq(&d);
    assert_eq!(
        try_qp(&pd, &cq, qcaps(16, 16, 1, 1, 0))
            .unwrap()
            .max_send_wr,
        16
    );
    assert_eq!(try_qp(&pd, &cq, qcaps(17, 1, 1, 1, 0)).err(), Some(EINVAL));
    assert_eq!(try_qp(&pd, &cq, qcaps(24, 1, 1, 1, 0)).err(), Some(EINVAL));
    // 17 receive WRs pass libefa's check (≤ 24 descriptors) but become 32.
    assert_eq!(try_qp(&pd, &cq, qcaps(1, 17, 1, 1, 0)).err(), Some(EINVAL));
    let (c16, n) = d.create_cq(16, CqOptions::default()).unwrap();
    assert_eq!(n, 16);
    c16.destroy().unwrap();
    for depth in [17, 24] {
        assert_eq!(
            d.create_cq(depth, CqOptions::default()).err(),
            Some(EINVAL),
            "{depth}"
        );
    }
}

#[test]
fn max_cqe_and_the_order_of_the_cq_checks() {
    let d = special(53, |p| {
        p.max_cqe = 16;
        p.device_caps &= !0x4; // no CQ_WITH_SGID
    });
    let (cq, n) = d.create_cq(16, CqOptions::default()).unwrap();
    assert_eq!(n, 16);
    cq.destroy().unwrap();
    assert_eq!(d.create_cq(17, CqOptions::default()).err(), Some(EINVAL));
    // libefa refuses the wc_flags before the kernel sees the depth.
    let sgid = CqOptions {
        with_sgid: true,
        with_unsolicited: false,
    };
    assert_eq!(d.create_cq(17, sgid).err(), Some(EOPNOTSUPP));
}

#[test]
fn max_cq() {
    let d = special(54, |p| p.max_cq = 2);
    let (a, _) = d.create_cq(8, CqOptions::default()).unwrap();
    let (b, _) = d.create_cq(8, CqOptions::default()).unwrap();
    assert_eq!(d.create_cq(8, CqOptions::default()).err(), Some(ENOMEM));
    b.destroy().unwrap();
    let (c, _) = d.create_cq(8, CqOptions::default()).unwrap();
    for cq in [a, c] {
        cq.destroy().unwrap();
    }
}

#[test]
fn max_qp() {
    let d = special(55, |p| p.max_qp = 2);
    let (pd, cq) = pd_cq(&d);
    let c = qcaps(8, 8, 1, 1, 0);
    let (a, _) = pd.create_qp(&srd_init(&cq, c, 0)).unwrap();
    let (b, _) = pd.create_qp(&srd_init(&cq, c, 0)).unwrap();
    assert_eq!(pd.create_qp(&srd_init(&cq, c, 0)).err(), Some(ENOMEM));
    b.destroy().unwrap();
    let (b, _) = pd.create_qp(&srd_init(&cq, c, 0)).unwrap();
    for qp in [a, b] {
        qp.destroy().unwrap();
    }
}

#[test]
fn max_pd() {
    let d = special(56, |p| p.max_pd = 2);
    let a = d.alloc_pd().unwrap();
    let b = d.alloc_pd().unwrap();
    assert_eq!(d.alloc_pd().err(), Some(ENOMEM));
    b.dealloc().unwrap();
    let b = d.alloc_pd().unwrap();
    for pd in [a, b] {
        pd.dealloc().unwrap();
    }
}

#[test]
fn max_mr() {
    let d = special(57, |p| p.max_mr = 2);
    let pd = d.alloc_pd().unwrap();
    let a = Region::new(&pd, 4096, ACCESS_LOCAL_WRITE);
    let b = Region::new(&pd, 4096, ACCESS_LOCAL_WRITE);
    let mut mem = vec![0u8; 4096];
    // SAFETY: `mem` outlives the attempt (which registers nothing).
    let third = unsafe { pd.reg_mr(mem.as_mut_ptr() as usize, 4096, 0, ACCESS_LOCAL_WRITE) };
    assert_eq!(third.err(), Some(ENOMEM));
    drop(b);
    let b = Region::new(&pd, 4096, ACCESS_LOCAL_WRITE);
    drop((a, b));
    pd.dealloc().unwrap();
}

#[test]
fn max_mr_size() {
    let d = special(58, |p| p.max_mr_size = 8192);
    let pd = d.alloc_pd().unwrap();
    let at = Region::new(&pd, 8192, ACCESS_LOCAL_WRITE);
    assert_eq!(at.mr.len(), 8192);
    let mut mem = vec![0u8; 8193];
    let addr = mem.as_mut_ptr() as usize;
    // SAFETY: `mem` outlives the attempt (which registers nothing).
    let over = unsafe { pd.reg_mr(addr, 8193, addr as u64, ACCESS_LOCAL_WRITE) };
    assert_eq!(over.err(), Some(EINVAL));
    drop(at);
    pd.dealloc().unwrap();
}

#[test]
fn max_ah_counts_device_ahs() {
    let d = special(59, |p| p.max_ah = 2);
    let pd = d.alloc_pd().unwrap();
    let gid = |i| gid_for(std::net::Ipv4Addr::new(127, 0, 0, 1), i);
    let a = pd.create_ah(&gid(60)).unwrap();
    let b = pd.create_ah(&gid(61)).unwrap();
    assert_eq!(pd.create_ah(&gid(62)).err(), Some(ENOMEM));
    // The same (PD, GID) again shares the device AH: no new one needed.
    let a2 = pd.create_ah(&gid(60)).unwrap();
    assert_eq!(a2.number(), a.number());
    b.destroy().unwrap();
    let c = pd.create_ah(&gid(62)).unwrap();
    for ah in [a, a2, c] {
        ah.destroy().unwrap();
    }
    pd.dealloc().unwrap();
}
