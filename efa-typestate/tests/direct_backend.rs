//! The direct backend (issue 26) against the provider: the same workload runs through a
//! pair of provider QPs and a pair of direct QPs on efa-sim, and the completions (status,
//! wr_id, opcode, byte_len, immediate, flags, sender GID, QP numbers) and the bytes that
//! landed are compared. Also: full queues, many laps of small rings, an error completion,
//! reset, and the typed errors of the backend choice.

#[macro_use]
mod common;
use std::time::Duration;

use common::direct::*;
use common::*;
use efa_typestate::*;

/// What one run of the workload produced.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    a: Vec<Seen>,
    b: Vec<Seen>,
    /// The messages that landed, each read from the receive that took it, sorted: SRD
    /// does not order messages and receives are taken in posting order, so which
    /// receive holds which message differs from run to run.
    landed: Vec<Vec<u8>>,
    written: Vec<u8>,
    read: Vec<u8>,
    backends: [Backend; 4],
}

/// SEND with one and two SGEs, inline, with immediate, RDMA write, write with
/// immediate, read, and a write with a bad rkey; through a pair of `backend` QPs.
fn workload(backend: Backend) -> Outcome {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::srd().sges(2, 2).depth(64, 64).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let backends = [a.backend(), b.backend(), cqa.backend(), cqb.backend()];
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let rdma = ctx
        .caps()
        .contains(DeviceCaps::RDMA_WRITE | DeviceCaps::RDMA_READ);

    let src = pd
        .register(
            (0..=255u8).cycle().take(8192).collect::<Vec<u8>>(),
            AccessFlags::empty(),
        )
        .unwrap();
    let dst = pd
        .register(vec![0u8; 8192], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 4096);
    let readable = pd
        .register(vec![0xc3u8; 512], AccessFlags::REMOTE_READ)
        .unwrap();
    let sink = pd
        .register(vec![0u8; 512], AccessFlags::LOCAL_WRITE)
        .unwrap();

    // Five receives on b: four for the sends, one for the write with immediate.
    let r: Vec<Sge<'_>> = (0..6).map(|i| dst.sge(i * 1024, 700).unwrap()).collect();
    let r2 = dst.sge(6 * 1024, 300).unwrap();
    post_recvs(&b, 100, &[&[r[0]], &[r[1], r2], &[r[2]], &[r[3]], &[r[4]]]);

    let (s1, s2) = (src.sge(0, 100).unwrap(), src.sge(1000, 500).unwrap());
    let two = SgeList::<2>::new(&[s1, s2]).unwrap();
    let inline_len = (a.limits().max_inline_data() as usize).min(32);
    let inline = &src.as_slice()[7..7 + inline_len];
    post!(a, 8, |s| {
        s.send(1, &to_b, s1).unwrap();
        s.send(2, &to_b, &two).unwrap();
        s.send_inline(3, &to_b, inline).unwrap();
        s.send_imm(4, &to_b, s2, 0x0a0b_0c0d).unwrap();
    })
    .unwrap();
    let mut sent = 4;
    let mut received = 4;
    if rdma {
        let l = src.sge(2000, 1500).unwrap();
        post!(a, 4, |s| {
            s.write(5, &to_b, l, target.remote().slice(100, 1500).unwrap())
                .unwrap();
            s.write_imm(
                6,
                &to_b,
                src.sge(10, 200).unwrap(),
                target.remote().slice(2000, 200).unwrap(),
                0xfeed_beef,
            )
            .unwrap();
            s.read(
                7,
                &to_b,
                sink.sge(8, 300).unwrap(),
                readable.remote().slice(16, 300).unwrap(),
            )
            .unwrap();
        })
        .unwrap();
        sent += 3;
        received += 1;
    }
    let mut a_done = expect_n(&cqa, sent);
    let b_done = expect_n(&cqb, received);
    // Receive 100 + i is `r[i]`, and receive 101 also `r2` (see above).
    let mut landed: Vec<Vec<u8>> = b_done
        .iter()
        .filter(|c| c.opcode() == WcOpcode::RECV)
        .map(|c| {
            let i = (c.wr_id() - 100) as usize;
            let len = c.byte_len() as usize;
            let mut m = dst.as_slice()[i * 1024..i * 1024 + len.min(700)].to_vec();
            if len > 700 {
                assert_eq!(i, 1, "only receive 101 has a second buffer");
                m.extend_from_slice(&dst.as_slice()[6 * 1024..6 * 1024 + len - 700]);
            }
            m
        })
        .collect();
    landed.sort();
    let mut ids: Vec<u64> = b_done.iter().map(|c| c.wr_id()).collect();
    ids.sort();
    assert_eq!(ids, (100..100 + received as u64).collect::<Vec<_>>());
    if rdma {
        // A bad rkey: the write completes with an error status.
        let bad = RemoteBuffer::new(target.remote().addr(), 64, target.remote().rkey() ^ 0x55);
        post!(a, 1, |s| {
            s.write(8, &to_b, src.sge(0, 64).unwrap(), bad).unwrap();
        })
        .unwrap();
        let e = expect_n(&cqa, 1);
        assert_ne!(e[0].status(), WcStatus::SUCCESS, "{e:?}");
        a_done.extend(e);
    }
    expect_none(&cqa, Duration::from_millis(20));
    Outcome {
        a: sorted(a_done, a.qpn(), b.qpn(), 0),
        // Which receive took which message varies: the receive side is compared
        // without its wr_ids (every one of them is checked to be a posted one above).
        b: {
            let mut b: Vec<Seen> = sorted(b_done, b.qpn(), a.qpn(), to_a.ah().number())
                .into_iter()
                .map(|s| Seen { wr_id: 0, ..s })
                .collect();
            b.sort();
            b
        },
        landed,
        written: target.to_vec(),
        read: sink.as_slice().to_vec(),
        backends,
    }
}

#[test]
fn direct_and_provider_complete_the_same_workload_alike() {
    let provider = workload(Backend::Provider);
    let direct = workload(Backend::Direct);
    assert_eq!(provider.backends, [Backend::Provider; 4]);
    assert_eq!(direct.backends, [Backend::Direct; 4]);
    assert!(provider.a.len() >= 4 && provider.b.len() >= 4);
    assert!(provider
        .b
        .iter()
        .all(|s| s.slid_is_peer_ah && s.src_is_peer));
    assert_eq!(direct.a, provider.a, "send-side completions");
    assert_eq!(direct.b, provider.b, "receive-side completions");
    assert!(direct.landed == provider.landed, "received bytes differ");
    assert!(direct.written == provider.written, "written bytes differ");
    assert!(direct.read == provider.read, "read bytes differ");
    // And the workload did move bytes: the first SEND's 100.
    assert!(direct.landed.contains(&(0..100u8).collect::<Vec<_>>()));
}

#[test]
fn auto_is_the_provider_where_the_rings_are_refused() {
    let profile = "ring_query=0";
    in_child(
        "auto_is_the_provider_where_the_rings_are_refused",
        &[("EFA_SIM_PROFILE", profile)],
        || {
            let ctx = open(0);
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
            let classic = ctx.create_cq(CqOptions::new(1024)).unwrap();
            assert_eq!(cq.backend(), Backend::Provider);
            assert_eq!(classic.backend(), Backend::Provider);
            let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
            let b = rts_qp(&pd, &classic, &QpConfig::srd(), QKEY_B);
            assert_eq!(
                (a.backend(), b.backend()),
                (Backend::Provider, Backend::Provider)
            );
            // ... and it works: a message from a to b.
            let inbox = pd
                .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
                .unwrap();
            recv_one(&b, 9, inbox.sge(0, 64).unwrap());
            let src = pd
                .register(b"over the provider".to_vec(), AccessFlags::empty())
                .unwrap();
            let to_b = pd.connect(&b.endpoint()).unwrap();
            post!(a, 1, |s| {
                s.send(1, &to_b, src.sge(0, 17).unwrap()).unwrap();
            })
            .unwrap();
            assert_eq!(expect_n(&cq, 1)[0].status(), WcStatus::SUCCESS);
            assert_eq!(expect_n(&classic, 1)[0].wr_id(), 9);
            assert_eq!(&inbox.as_slice()[..17], b"over the provider");
            // Asking for the direct path explicitly names why it cannot be had.
            assert_eq!(
                ctx.create_ext_cq(CqOptions::new(64).backend(Backend::Direct))
                    .map(|_| ())
                    .unwrap_err(),
                Error::Direct(DirectError::RingsUnavailable(Verb::EfadvQueryCq))
            );
        },
    );
}

/// Posts single RDMA writes (or sends, which `b` has receives for) until the send queue
/// is full; returns how many went in and the error that stopped it.
fn fill_send_queue(backend: Backend) -> (u32, Error, u32) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::srd().depth(8, 64).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![9u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64 * 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..64 {
        post_recvs(&b, i, &[&[dst.sge(i * 64, 64).unwrap()]]);
    }
    let mut n = 0;
    let err = loop {
        match post!(a, 1, |s| {
            s.send(n.into(), &to_b, src.sge(0, 8).unwrap()).unwrap();
        }) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
        assert!(n <= 64, "the send queue never filled");
    };
    // Polling frees the slots: the queue takes as many again.
    expect_n(&cqa, n as usize);
    let mut again = 0;
    while again < n {
        post!(a, 1, |s| {
            s.send(again.into(), &to_b, src.sge(0, 8).unwrap()).unwrap();
        })
        .unwrap();
        again += 1;
    }
    expect_n(&cqa, n as usize);
    expect_n(&cqb, 2 * n as usize);
    (n, err, a.wq_layout().unwrap().0.num_entries)
}

#[test]
fn a_full_send_queue_is_the_same_typed_error() {
    let (pn, pe, entries) = fill_send_queue(Backend::Provider);
    let (dn, de, _) = fill_send_queue(Backend::Direct);
    assert_eq!(pe, Error::SendQueueFull);
    assert_eq!(de, pe);
    assert_eq!(dn, pn);
    assert_eq!(dn, entries, "outstanding == ring entries is full");
}

/// Posts receives until the receive queue is full; returns how many went in.
fn fill_recv_queue(backend: Backend) -> (u32, Error) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cfg = QpConfig::srd().depth(8, 8).backend(backend);
    let b = rts_qp(&pd, &cq, &cfg, QKEY_B);
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut n = 0;
    loop {
        let mut r = RecvBatch::<2>::new(&b);
        r.push(n.into(), dst.sge_all().unwrap()).unwrap();
        r.push(u64::from(n) + 1000, dst.sge_all().unwrap()).unwrap();
        // SAFETY: the buffer is never read.
        match unsafe { b.post_recv(&r) } {
            Ok(()) => n += 2,
            Err(Error::RecvQueueFull { posted }) => {
                return (n + posted as u32, Error::RecvQueueFull { posted })
            }
            Err(e) => return (n, e),
        }
        assert!(n <= 64, "the receive queue never filled");
    }
}

#[test]
fn a_full_receive_queue_is_the_same_typed_error() {
    let provider = fill_recv_queue(Backend::Provider);
    let direct = fill_recv_queue(Backend::Direct);
    assert!(matches!(provider.1, Error::RecvQueueFull { .. }));
    assert_eq!(direct, provider);
}

/// Many laps of small rings: 8-deep queues, a 16-entry CQ, batches of 8 sends with
/// immediates (more than a doorbell's batch), each checked for data and ids.
/// The doorbell word at `addr` (from `wq_layout` / `layout`).
fn doorbell(addr: usize) -> u32 {
    assert_ne!(addr, 0);
    // SAFETY: a doorbell of a live queue of the caller's, 4-aligned; only read here, and
    // written only atomically (the producer's release store) or by efa-sim.
    unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) }
        .load(std::sync::atomic::Ordering::Acquire)
}

/// Each receive's (wr_id, immediate, byte_len, opcode), and the final doorbell words.
type Laps = (Vec<(u64, u32, u32)>, [u32; 4]);

fn laps(backend: Backend) -> Laps {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(16, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(16, backend, false)).unwrap();
    let cfg = QpConfig::srd().depth(8, 8).backend(backend);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let (sq, rq) = a.wq_layout().unwrap();
    assert!(sq.num_entries <= 8 && rq.num_entries <= 16, "{sq:?} {rq:?}");
    // A batch of 8 takes more than one doorbell.
    assert!(sq.max_batch < 8, "{sq:?}");
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let dst = pd
        .register(vec![0u8; 8 * 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut log = Vec::new();
    for round in 0..40u64 {
        let bufs: Vec<Sge<'_>> = (0..8).map(|i| dst.sge(i * 64, 64).unwrap()).collect();
        let lists: Vec<&[Sge<'_>]> = bufs.chunks(1).collect();
        post_recvs(&b, round * 8, &lists);
        post!(a, 8, |s| {
            for i in 0..8u64 {
                let id = round * 8 + i;
                let len = 1 + (id % 60);
                s.send_imm(id, &to_b, src.sge(id % 128, len).unwrap(), id as u32)
                    .unwrap();
            }
        })
        .unwrap();
        let mut sent: Vec<u64> = expect_n(&cqa, 8).iter().map(|c| c.wr_id()).collect();
        sent.sort();
        assert_eq!(sent, (round * 8..round * 8 + 8).collect::<Vec<_>>());
        let got = expect_n(&cqb, 8);
        for c in &got {
            assert_eq!(c.status(), WcStatus::SUCCESS);
            let id = u64::from(c.imm().unwrap());
            let len = 1 + (id % 60);
            assert_eq!(c.byte_len() as u64, len);
            let slot = (c.wr_id() - round * 8) as usize;
            let at = &dst.as_slice()[slot * 64..slot * 64 + len as usize];
            let off = (id % 128) as usize;
            assert_eq!(
                at,
                &src.as_slice()[off..off + len as usize],
                "round {round}"
            );
            // Which receive took which message varies (SRD does not order them).
            log.push((id, c.byte_len(), c.opcode().0));
        }
    }
    log.sort();
    // The doorbells as the last post / poll left them: the SQ's and RQ's producer counts
    // (16 bits), the CQs' consumer indices.
    let dbs = [
        doorbell(sq.doorbell),
        doorbell(b.wq_layout().unwrap().1.doorbell),
        doorbell(cqa.layout().unwrap().doorbell),
        doorbell(cqb.layout().unwrap().doorbell),
    ];
    (log, dbs)
}

#[test]
fn small_rings_wrap_many_times_alike() {
    let provider = laps(Backend::Provider);
    let direct = laps(Backend::Direct);
    assert_eq!(direct.0.len(), 320);
    assert_eq!(direct.0, provider.0);
    assert_eq!(direct.1, [320, 320, 320, 320], "doorbells");
    assert_eq!(direct.1, provider.1, "doorbells");
}

#[test]
fn a_reset_direct_qp_forgets_its_requests_and_runs_again() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx
        .create_ext_cq(cq_opts(64, Backend::Direct, false))
        .unwrap();
    let cqb = ctx
        .create_ext_cq(cq_opts(64, Backend::Direct, false))
        .unwrap();
    let cfg = QpConfig::srd().depth(8, 8).backend(Backend::Direct);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![5u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    // Three sends in flight and polled, one receive left posted, then a reset.
    post_recvs(&b, 1, &[&[dst.sge_all().unwrap()]]);
    post!(a, 1, |s| {
        s.send(10, &to_b, src.sge(0, 8).unwrap()).unwrap();
    })
    .unwrap();
    expect_n(&cqa, 1);
    expect_n(&cqb, 1);
    post_recvs(&b, 2, &[&[dst.sge_all().unwrap()]]);
    let b = b.reset().unwrap().prepare(QKEY_B, None).unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    // After the reset the ring starts over; a fresh receive gets the next message.
    post_recvs(&b, 3, &[&[dst.sge_all().unwrap()]]);
    post!(a, 1, |s| {
        s.send(11, &to_b, src.sge(0, 16).unwrap()).unwrap();
    })
    .unwrap();
    assert_eq!(expect_n(&cqa, 1)[0].wr_id(), 11);
    let got = expect_n(&cqb, 1);
    assert_eq!((got[0].wr_id(), got[0].byte_len()), (3, 16));
    expect_none(&cqb, Duration::from_millis(20));
}

#[test]
fn backend_mismatches_are_typed_errors() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let direct = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Direct))
        .unwrap();
    let provider = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Provider))
        .unwrap();
    let d = QpConfig::srd().backend(Backend::Direct);
    let p = QpConfig::srd().backend(Backend::Provider);
    let err = |r: Result<Qp<_, Reset>>| r.map(|_| ()).unwrap_err();
    assert_eq!(
        err(pd.create_qp(&provider, &provider, &d)),
        Error::Direct(DirectError::CqNotDirect(CqRole::Shared))
    );
    assert_eq!(
        err(pd.create_qp(&direct, &provider, &d)),
        Error::Direct(DirectError::CqNotDirect(CqRole::Recv))
    );
    assert_eq!(
        err(pd.create_qp(&direct, &direct, &p)),
        Error::Direct(DirectError::CqIsDirect(CqRole::Shared))
    );
    assert_eq!(
        err(pd.create_qp(&provider, &direct, &QpConfig::srd())),
        Error::Direct(DirectError::CqIsDirect(CqRole::Recv)),
        "auto on mixed CQs is the provider, which a direct CQ does not serve"
    );
    let mut qp = pd
        .create_qp(&direct, &direct, &d)
        .unwrap()
        .prepare(QKEY_A, None)
        .unwrap();
    assert_eq!(qp.backend(), Backend::Direct);
    // SAFETY: nothing is posted.
    assert_eq!(unsafe { qp.post_with(|s| Ok(s.len())) }, Ok(0));
    let msg = Error::Direct(DirectError::CqNotDirect(CqRole::Send)).to_string();
    assert!(msg.contains("not direct"), "{msg}");
}
