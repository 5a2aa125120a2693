//! The direct backend against the provider on other shapes of work: unknown peers and
//! unsolicited writes, 128-byte WQEs, classic CQs, destroyed QPs, UD QPs, empty sends and
//! one-entry reads.

#[macro_use]
mod common;
use std::time::Duration;

use common::direct::*;
use common::*;
use efa_typestate::*;

/// A peer b's PD has no AH for (so its receives report the sender GID, and RDMA to it
/// fails with REMOTE_UNKNOWN_PEER), and an unsolicited write with immediate.
fn unknown_peer_and_unsolicited(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Option<Gid>, Vec<u8>) {
    let (ctx_a, ctx_b) = (open(0), open(1));
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let cqa = ctx_a.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx_b.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::srd().depth(64, 64).backend(backend);
    let a = rts_qp(&pd_a, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd_b, &cqb, &cfg.unsolicited_write_recv(), QKEY_B);
    let to_b = pd_a.connect(&b.endpoint()).unwrap();
    let src = pd_a.register(vec![3u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd_b
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    post_recvs(&b, 8, &[&[dst.sge_all().unwrap()]]);
    post!(a, 1, |s| {
        s.send(1, &to_b, src.sge(0, 4).unwrap()).unwrap();
    })
    .unwrap();
    let mut sent = 1;
    let target = write_target(&pd_b, 64);
    if ctx_a.caps().contains(DeviceCaps::RDMA_WRITE) {
        post!(a, 1, |s| {
            s.write(
                2,
                &to_b,
                src.sge(0, 16).unwrap(),
                target.remote().slice(0, 16).unwrap(),
            )
            .unwrap();
        })
        .unwrap();
        sent += 1;
    }
    let a_done = expect_n(&cqa, sent);
    let b_done = expect_n(&cqb, 1);
    let gid = b_done[0].sender_gid();
    let mut b_seen = sorted(b_done, b.qpn(), a.qpn(), AH_UNKNOWN);
    // Unsolicited: a write with immediate from a peer b knows, no receive posted.
    let pd = &pd_b;
    let c = ctx_b.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let w = rts_qp(pd, &c, &cfg, QKEY_A);
    let to_b2 = pd.connect(&b.endpoint()).unwrap();
    let to_w = pd.connect(&w.endpoint()).unwrap();
    let wsrc = pd.register(vec![7u8; 32], AccessFlags::empty()).unwrap();
    if ctx_b.caps().contains(DeviceCaps::RDMA_WRITE) {
        post!(w, 1, |s| {
            s.write_imm(
                4,
                &to_b2,
                wsrc.sge_all().unwrap(),
                target.remote().slice(32, 32).unwrap(),
                99,
            )
            .unwrap();
        })
        .unwrap();
        expect_n(&c, 1)[0].result().unwrap();
        let r = expect_n(&cqb, 1);
        assert!(r[0].is_unsolicited(), "{r:?}");
        b_seen.extend(sorted(r, b.qpn(), w.qpn(), to_w.ah().number()));
    }
    expect_none(&cqb, Duration::from_millis(20));
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        b_seen,
        gid,
        target.to_vec(),
    )
}

#[test]
fn sender_gid_error_status_and_unsolicited_writes_match_the_provider() {
    let provider = unknown_peer_and_unsolicited(Backend::Provider);
    let direct = unknown_peer_and_unsolicited(Backend::Direct);
    assert_eq!(
        provider.2,
        Some(open(0).gid().unwrap()),
        "sender GID reported"
    );
    assert_eq!(direct, provider);
}

#[test]
fn wide_wqes_of_inline_write_qps_match_the_provider() {
    // A device profile with room for 80 inline bytes: 128-byte WQEs.
    in_child(
        "wide_wqes_of_inline_write_qps_match_the_provider",
        &[(
            "EFA_SIM_PROFILE",
            "inline_buf_size=80,inline_buf_size_ex=80",
        )],
        || {
            let provider = wide(Backend::Provider);
            let direct = wide(Backend::Direct);
            assert_eq!(direct, provider);
        },
    );
}

fn wide(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Vec<u8>, Vec<u8>) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let wide = QpConfig::srd()
        .inline_write()
        .max_inline(80)
        .depth(64, 64)
        .backend(backend);
    let a = rts_qp(&pd, &cqa, &wide, QKEY_A);
    let b = rts_qp(
        &pd,
        &cqb,
        &QpConfig::srd().depth(64, 64).backend(backend),
        QKEY_B,
    );
    assert_eq!(a.wq_layout().unwrap().0.entry_size, 128);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let rbuf = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 256);
    let bytes = &src.as_slice()[3..83];
    post_recvs(&b, 1, &[&[rbuf.sge_all().unwrap()]]);
    post!(a, 4, |s| {
        s.send_inline(1, &to_b, bytes).unwrap();
        s.write(
            2,
            &to_b,
            Payload::Inline(bytes),
            target.remote().slice(100, 80).unwrap(),
        )
        .unwrap();
        s.write(
            3,
            &to_b,
            src.sge(0, 64).unwrap(),
            target.remote().slice(0, 64).unwrap(),
        )
        .unwrap();
    })
    .unwrap();
    let a_done = expect_n(&cqa, 3);
    let b_done = expect_n(&cqb, 1);
    assert_eq!(&rbuf.as_slice()[..80], bytes);
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        sorted(b_done, b.qpn(), a.qpn(), to_a.ah().number()),
        rbuf.as_slice().to_vec(),
        target.to_vec(),
    )
}

/// Sends (one with immediate) and a write with immediate through classic CQs: a's
/// completions by `poll`, b's by `poll_wc` (raw `ibv_wc` entries).
fn classic(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Vec<u8>) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_cq(CqOptions::new(256).backend(backend)).unwrap();
    let cqb = ctx.create_cq(CqOptions::new(256).backend(backend)).unwrap();
    assert_eq!((cqa.backend(), cqb.backend()), (backend, backend));
    let cfg = QpConfig::srd().depth(64, 64).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let dst = pd
        .register(vec![0u8; 1024], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 256);
    let rdma = ctx.caps().contains(DeviceCaps::RDMA_WRITE);
    let r: Vec<Sge<'_>> = (0..3).map(|i| dst.sge(i * 256, 256).unwrap()).collect();
    post_recvs(&b, 50, &[&[r[0]], &[r[1]], &[r[2]]]);
    post!(a, 4, |s| {
        s.send(1, &to_b, src.sge(0, 40).unwrap()).unwrap();
        s.send_imm(2, &to_b, src.sge(40, 60).unwrap(), 0x1234)
            .unwrap();
        if rdma {
            s.write_imm(
                3,
                &to_b,
                src.sge(100, 50).unwrap(),
                target.remote().slice(0, 50).unwrap(),
                77,
            )
            .unwrap();
        }
    })
    .unwrap();
    let n = if rdma { 3 } else { 2 };
    let a_done = expect_n(&cqa, n);
    let mut b_done = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b_done.len() < n && std::time::Instant::now() < deadline {
        let mut got = ArrayVec::<WorkCompletion, 2>::new();
        cqb.poll_wc(&mut got).unwrap();
        b_done.extend(got.iter().map(|w| w.completion()));
    }
    assert_eq!(b_done.len(), n);
    let mut bytes = messages(&b_done, dst.as_slice(), (50, 256, 0));
    bytes.extend(target.to_vec());
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        unordered(sorted(b_done, b.qpn(), a.qpn(), to_a.ah().number())),
        bytes,
    )
}

#[test]
fn classic_cqs_poll_and_poll_wc_match_the_provider() {
    let provider = classic(Backend::Provider);
    let direct = classic(Backend::Direct);
    assert!(provider.1.iter().any(|s| s.imm == Some(0x1234)));
    assert_eq!(direct, provider);
}

/// Completions of a QP destroyed before they were polled are dropped; the CQ carries on
/// for the QPs it still serves.
fn destroyed_qp(backend: Backend) -> Vec<u64> {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(1024).backend(backend))
        .unwrap();
    let cfg = QpConfig::srd().backend(backend);
    let a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cq, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    post_recvs(&b, 20, &[&[dst.sge_all().unwrap()]]);
    post!(a, 1, |s| {
        s.send(10, &to_b, src.sge(0, 8).unwrap()).unwrap();
    })
    .unwrap();
    // Both completions are in the ring (a's send completes after b's receive).
    std::thread::sleep(Duration::from_millis(50));
    drop(b);
    let mut ids: Vec<u64> = poll_n(&cq, 2, Duration::from_millis(200))
        .iter()
        .map(|c| c.wr_id())
        .collect();
    ids.sort();
    ids
}

#[test]
fn completions_of_a_destroyed_qp_are_dropped_alike() {
    let provider = destroyed_qp(Backend::Provider);
    let direct = destroyed_qp(Backend::Direct);
    assert_eq!(provider, vec![10]);
    assert_eq!(direct, provider);
}

/// UD QPs: sends with and without immediate into receives that start with the 40-byte
/// GRH area.
fn ud(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Vec<u8>) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::ud().depth(32, 32).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let dst = pd
        .register(vec![0u8; 1024], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let r: Vec<Sge<'_>> = (0..2).map(|i| dst.sge(i * 512, 512).unwrap()).collect();
    post_recvs(&b, 30, &[&[r[0]], &[r[1]]]);
    post!(a, 2, |s| {
        s.send(1, &to_b, src.sge(0, 100).unwrap()).unwrap();
        s.send_imm(2, &to_b, src.sge(100, 50).unwrap(), 5).unwrap();
    })
    .unwrap();
    let a_done = expect_n(&cqa, 2);
    let b_done = expect_n(&cqb, 2);
    // The GRH area is the device's to fill: only the payloads are compared.
    let bytes = messages(&b_done, dst.as_slice(), (30, 512, 40));
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        unordered(sorted(b_done, b.qpn(), a.qpn(), to_a.ah().number())),
        bytes,
    )
}

#[test]
fn ud_qps_match_the_provider() {
    let provider = ud(Backend::Provider);
    let direct = ud(Backend::Direct);
    assert_eq!(&provider.2[..100], &(0..100u8).collect::<Vec<_>>()[..]);
    assert_eq!(direct, provider);
}

/// A zero-length SEND (an empty gather list) and an RDMA read into a one-entry list.
fn odd_shapes(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Vec<u8>) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::srd().depth(16, 16).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let readable = pd
        .register(vec![0x5au8; 64], AccessFlags::REMOTE_READ)
        .unwrap();
    post_recvs(&b, 1, &[&[dst.sge(0, 32).unwrap()]]);
    let empty = SgeList::<1>::new(&[]).unwrap();
    let one = [dst.sge(32, 16).unwrap()];
    let one = SgeList::<1>::new(&one).unwrap();
    let rdma = ctx.caps().contains(DeviceCaps::RDMA_READ);
    post!(a, 2, |s| {
        s.send(10, &to_b, &empty).unwrap();
        if rdma {
            s.read(11, &to_b, &one, readable.remote().slice(8, 16).unwrap())
                .unwrap();
        }
    })
    .unwrap();
    let a_done = expect_n(&cqa, if rdma { 2 } else { 1 });
    let b_done = expect_n(&cqb, 1);
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        sorted(b_done, b.qpn(), a.qpn(), to_a.ah().number()),
        dst.as_slice().to_vec(),
    )
}

#[test]
fn empty_sends_and_one_entry_reads_match_the_provider() {
    let provider = odd_shapes(Backend::Provider);
    let direct = odd_shapes(Backend::Direct);
    assert_eq!(provider.1[0].byte_len, 0);
    if provider.0.len() == 2 {
        assert_eq!(&provider.2[32..48], &[0x5a; 16][..], "the read landed");
    }
    assert_eq!(direct, provider);
}
