//! The direct path's encoders against efa-sim's provider (issue 26): for each operation,
//! one work request is posted through the safe API, the bytes the provider wrote into the
//! SQ / RQ ring are read back and compared with what `efa_typestate::direct` encodes for
//! the same request (same request id and phase); each completion is decoded from the CQ
//! ring before it is polled, and compared with what the poll returns.

#[macro_use]
mod common;
use std::mem::offset_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use efa_typestate::direct::cqe::{decode_cqe, is_pending, Cqe, FLAGS};
use efa_typestate::direct::rx::{encode_rx_wqe, RX_DESC_SIZE};
use efa_typestate::direct::wqe::*;
use efa_typestate::direct::LocalBuf;
use efa_typestate::sys::io::*;
use efa_typestate::*;

/// Copies ring entry `n` (modulo the ring) out of a ring at `buffer`.
fn entry(buffer: usize, entry_size: u32, num_entries: u32, n: u32) -> Vec<u8> {
    let at = buffer + ((n % num_entries) * entry_size) as usize;
    // SAFETY: the ring lives as long as its queue, which the caller holds; entry `n` lies
    // within it, and the provider wrote it on this thread during the post.
    (0..entry_size as usize)
        .map(|i| unsafe { ((at + i) as *const u8).read_volatile() })
        .collect()
}

/// A send or receive ring and how many entries the provider has produced into it.
struct Produced {
    ring: WqLayout,
    count: u32,
}

impl Produced {
    /// The (send, receive) rings of a QP, nothing produced yet.
    fn of(rings: (WqLayout, WqLayout)) -> (Produced, Produced) {
        (
            Produced {
                ring: rings.0,
                count: 0,
            },
            Produced {
                ring: rings.1,
                count: 0,
            },
        )
    }
    fn take(&mut self) -> (Vec<u8>, u32) {
        let n = self.count;
        self.count += 1;
        (
            entry(
                self.ring.buffer,
                self.ring.entry_size,
                self.ring.num_entries,
                n,
            ),
            n,
        )
    }

    /// Checks the WQE of the post just made; returns its request id.
    fn check_wqe(&mut self, dest: Destination, op: TxOp<'_>) -> u16 {
        let (ring, n) = self.take();
        let req_id = u16::from_le_bytes([ring[0], ring[1]]);
        assert_eq!(offset_of!(efa_io_tx_meta_desc, req_id), 0);
        let phase = ring[offset_of!(efa_io_tx_meta_desc, ctrl2)] & TX_META_DESC_PHASE_MASK != 0;
        // The SQ's first lap has phase 0 and each lap flips it (libefa's wq->phase).
        assert_eq!(
            phase,
            (n / self.ring.num_entries) % 2 == 1,
            "phase of SQ entry {n}"
        );
        let ctl = TxControl {
            req_id,
            phase,
            completion: true,
        };
        let ours = match self.ring.entry_size as usize {
            TX_DESC_SIZE_64 => {
                let mut w = [0u8; TX_DESC_SIZE_64];
                encode_tx_wqe(&mut w, ctl, dest, &op).unwrap();
                w.to_vec()
            }
            TX_DESC_SIZE_128 => {
                let mut w = [0u8; TX_DESC_SIZE_128];
                encode_tx_wqe_128(&mut w, ctl, dest, &op).unwrap();
                w.to_vec()
            }
            other => panic!("SQ entry size {other}"),
        };
        assert_eq!(hex(&ours), hex(&ring), "SQ entry {n} for {op:?}");
        req_id
    }

    /// Checks the descriptors of the receive just posted; returns its request id.
    fn check_recv(&mut self, bufs: &[LocalBuf]) -> u16 {
        assert_eq!(self.ring.entry_size as usize, RX_DESC_SIZE);
        let mut ours = [[0u8; RX_DESC_SIZE]; 4];
        let first = entry(
            self.ring.buffer,
            self.ring.entry_size,
            self.ring.num_entries,
            self.count,
        );
        let req_id = u16::from_le_bytes([first[8], first[9]]);
        assert_eq!(offset_of!(efa_io_rx_desc, req_id), 8);
        let n = encode_rx_wqe(&mut ours, req_id, bufs).unwrap();
        for d in &ours[..n] {
            let (ring, at) = self.take();
            assert_eq!(hex(d), hex(&ring), "RQ descriptor {at} of {bufs:?}");
        }
        req_id
    }
}

/// Reads completions straight from a CQ ring, ahead of the safe API's poll.
struct CqTap {
    ring: CqLayout,
    consumed: u32,
    reports_sender_gid: bool,
}

impl CqTap {
    fn new<C: CompletionQueue>(cq: &C, reports_sender_gid: bool) -> CqTap {
        CqTap {
            ring: cq.layout().unwrap(),
            consumed: 0,
            reports_sender_gid,
        }
    }

    /// Waits for the next entry (phase 1 on the first lap, flipped each lap) and decodes it.
    fn next(&mut self) -> Cqe {
        let phase = (self.consumed / self.ring.num_entries) % 2 == 0;
        let size = self.ring.entry_size;
        let at = self.ring.buffer + ((self.consumed % self.ring.num_entries) * size) as usize;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // SAFETY: the CQ ring lives while the CQ does; entries are 8-aligned and their
            // first word is published by the device with one release store.
            let head = unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Ordering::Acquire);
            if is_pending(head.to_le_bytes()[FLAGS], phase) {
                break;
            }
            assert!(Instant::now() < deadline, "no CQE at {}", self.consumed);
            std::thread::sleep(Duration::from_micros(20));
        }
        let bytes = entry(self.ring.buffer, size, self.ring.num_entries, self.consumed);
        self.consumed += 1;
        decode_cqe(&bytes, self.reports_sender_gid).unwrap()
    }
}

/// The poll's view of a completion must be the CQE's, mapped as libefa maps it.
fn check_completion(cqe: &Cqe, c: &Completion) {
    let k = &cqe.common;
    assert_eq!(
        c.efa_status(),
        EfaStatus(u32::from(k.status)),
        "{cqe:?} {c:?}"
    );
    assert_eq!(c.qp_num(), u32::from(k.qp_num), "{cqe:?} {c:?}");
    assert_eq!(c.is_unsolicited(), k.unsolicited, "{cqe:?} {c:?}");
    match (&cqe.recv, k.op_type) {
        (None, send_op_type::RDMA_WRITE) => assert_eq!(c.opcode(), WcOpcode::RDMA_WRITE),
        // libefa reports RDMA reads as SEND; efa-sim as RDMA_READ unless told to copy that.
        (None, send_op_type::RDMA_READ) => {
            assert!(
                matches!(c.opcode(), WcOpcode::RDMA_READ | WcOpcode::SEND),
                "{c:?}"
            )
        }
        (None, op) => assert_eq!((op, c.opcode()), (send_op_type::SEND, WcOpcode::SEND)),
        (Some(r), op) => {
            let opcode = if op == send_op_type::RDMA_WRITE {
                WcOpcode::RECV_RDMA_WITH_IMM
            } else {
                WcOpcode::RECV
            };
            assert_eq!(c.opcode(), opcode, "{cqe:?} {c:?}");
            assert_eq!((c.byte_len(), c.imm()), (r.length, r.imm), "{cqe:?} {c:?}");
            assert_eq!(
                (c.src_qp(), c.slid()),
                (u32::from(r.src_qp), r.ah),
                "{cqe:?}"
            );
            assert_eq!(c.sender_gid().map(|g| g.0), r.sender_gid, "{cqe:?} {c:?}");
        }
    }
    assert_eq!(
        k.queue_type,
        if cqe.recv.is_some() {
            queue_type::RECV
        } else {
            queue_type::SEND
        }
    );
}

/// Decodes the next CQE of `tap`, then polls `cq` and compares; returns the CQE.
fn complete<C: CompletionQueue>(tap: &mut CqTap, cq: &C) -> Cqe {
    let cqe = tap.next();
    let c = expect_n(cq, 1)[0];
    check_completion(&cqe, &c);
    cqe
}

fn local(s: Sge<'_>) -> LocalBuf {
    LocalBuf {
        addr: s.addr(),
        lkey: s.lkey(),
        length: s.len(),
    }
}

fn remote(r: RemoteBuffer) -> RemoteAddr {
    RemoteAddr {
        addr: r.addr(),
        rkey: r.rkey(),
    }
}

fn dest<P>(peer: &Peer<P>) -> Destination {
    Destination {
        qpn: u16::try_from(peer.qpn()).unwrap(),
        ah: peer.ah().number(),
        qkey: peer.qkey(),
    }
}

/// Posts the one work request `build` adds to a batch for `qp`.
macro_rules! post_one {
    ($qp:expr, |$s:ident| $build:expr) => {{
        let mut $s = SendBatch::<1>::new(&$qp);
        $build.unwrap();
        // SAFETY: every buffer posted in these tests belongs to a registered Mr that lives
        // to the end of the test and is neither written nor read before the completion
        // of the request is polled (inline payloads are copied during the call).
        unsafe { $qp.post_send(&$s) }.unwrap();
    }};
}

/// Posts one receive of `bufs` (one SGE or two).
fn post_recv<P, S: RecvReady>(qp: &Qp<P, S>, wr_id: u64, bufs: &[Sge<'_>]) {
    let mut r = RecvBatch::<1>::new(qp);
    let list;
    if let [one] = bufs {
        r.push(wr_id, *one).unwrap();
    } else {
        list = SgeList::<2>::new(bufs).unwrap();
        r.push(wr_id, &list).unwrap();
    }
    // SAFETY: as in `post_one!`: the receive buffers are read only after the completion.
    unsafe { qp.post_recv(&r) }.unwrap();
}

#[test]
fn sends_and_receives_match_the_provider_byte_for_byte() {
    // The provider's WQEs are read back from the ring after the device consumed them:
    // on the default device, since strict mode poisons consumed slots.
    in_child_without(
        "sends_and_receives_match_the_provider_byte_for_byte",
        &[],
        &["EFA_SIM_PROFILE"],
        sends_and_receives_match_the_provider_byte_for_byte_body,
    );
}

fn sends_and_receives_match_the_provider_byte_for_byte_body() {
    let cfg = QpConfig::srd().sges(2, 2);
    pair!(ctx, pd, cqa, cqb, a, b, to_b, to_a, cfg, cfg);
    let (mut a_sq, _) = Produced::of(a.wq_layout().unwrap());
    let (_, mut b_rq) = Produced::of(b.wq_layout().unwrap());
    assert_eq!(a_sq.ring.entry_size as usize, TX_DESC_SIZE_64);
    let (mut a_cq, mut b_cq) = (CqTap::new(&cqa, false), CqTap::new(&cqb, true));
    let src = pd
        .register(
            (0..=255u8).cycle().take(4096).collect::<Vec<u8>>(),
            AccessFlags::empty(),
        )
        .unwrap();
    let dst = pd
        .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let inline_len = (a.limits().max_inline_data() as usize).min(TX_DESC_INLINE_MAX_SIZE);
    let inline = &src.as_slice()[7..7 + inline_len];
    let (s1, s2) = (src.sge(0, 100).unwrap(), src.sge(1000, 50).unwrap());
    let two = SgeList::<2>::new(&[s1, s2]).unwrap();
    for round in 0..4u64 {
        let at = round * 1024;
        let (r1, r2) = (dst.sge(at, 120).unwrap(), dst.sge(at + 512, 300).unwrap());
        let rbufs: &[Sge<'_>] = if round % 2 == 0 { &[r1] } else { &[r1, r2] };
        post_recv(&b, 100 + round, rbufs);
        let rx_id = b_rq.check_recv(&rbufs.iter().map(|s| local(*s)).collect::<Vec<_>>());
        let (l1, l2) = (local(s1), local(s2));
        let op = match round {
            0 => {
                post_one!(a, |s| s.send(round, &to_b, s1));
                TxOp::Send {
                    data: TxData::Sges(&[l1]),
                    imm: None,
                }
            }
            1 => {
                post_one!(a, |s| s.send(round, &to_b, &two));
                TxOp::Send {
                    data: TxData::Sges(&[l1, l2]),
                    imm: None,
                }
            }
            2 => {
                post_one!(a, |s| s.send_imm(round, &to_b, s2, 0x0a0b_0c0d));
                TxOp::Send {
                    data: TxData::Sges(&[l2]),
                    imm: Some(0x0a0b_0c0d),
                }
            }
            _ => {
                post_one!(a, |s| s.send_inline(round, &to_b, inline));
                TxOp::Send {
                    data: TxData::Inline(inline),
                    imm: None,
                }
            }
        };
        let tx_id = a_sq.check_wqe(dest(&to_b), op);
        assert_eq!(complete(&mut a_cq, &cqa).common.req_id, tx_id);
        let r = complete(&mut b_cq, &cqb);
        assert_eq!(r.common.req_id, rx_id);
        let recv = r.recv.unwrap();
        assert_eq!(
            (recv.ah, u32::from(recv.src_qp)),
            (to_a.ah().number(), a.qpn())
        );
    }
    let _ = &ctx;
}

#[test]
fn rdma_wqes_match_the_provider_byte_for_byte() {
    // The provider's WQEs are read back from the ring after the device consumed them:
    // on the default device, since strict mode poisons consumed slots.
    in_child_without(
        "rdma_wqes_match_the_provider_byte_for_byte",
        &[],
        &["EFA_SIM_PROFILE"],
        rdma_wqes_match_the_provider_byte_for_byte_body,
    );
}

fn rdma_wqes_match_the_provider_byte_for_byte_body() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    if !ctx
        .caps()
        .contains(DeviceCaps::RDMA_WRITE | DeviceCaps::RDMA_READ)
    {
        return;
    }
    let (mut a_sq, _) = Produced::of(a.wq_layout().unwrap());
    let (_, mut b_rq) = Produced::of(b.wq_layout().unwrap());
    let (mut a_cq, mut b_cq) = (CqTap::new(&cqa, false), CqTap::new(&cqb, true));
    // Longer than 16 bits: the receive CQE carries the high length bits in its extension.
    const LONG: u64 = 70_000;
    let src = pd
        .register(vec![0x5au8; LONG as usize], AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, LONG as usize);
    let readable = pd
        .register(vec![0xc3u8; 256], AccessFlags::REMOTE_READ)
        .unwrap();
    let sink = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let rbuf = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let to = dest(&to_b);

    let (l, r) = (
        src.sge(10, 1000).unwrap(),
        target.remote().slice(64, 1000).unwrap(),
    );
    post_one!(a, |s| s.write(1, &to_b, l, r));
    let op = TxOp::RdmaWrite {
        data: TxData::Sges(&[local(l)]),
        remote: remote(r),
        imm: None,
    };
    let id = a_sq.check_wqe(to, op);
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);

    post_recv(&b, 7, &[rbuf.sge_all().unwrap()]);
    let rx_id = b_rq.check_recv(&[local(rbuf.sge_all().unwrap())]);
    let (l, r) = (src.sge(0, LONG).unwrap(), target.remote());
    post_one!(a, |s| s.write_imm(2, &to_b, l, r, 0xfeed_beef));
    let op = TxOp::RdmaWrite {
        data: TxData::Sges(&[local(l)]),
        remote: remote(r),
        imm: Some(0xfeed_beef),
    };
    let id = a_sq.check_wqe(to, op);
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);
    let w = complete(&mut b_cq, &cqb);
    assert_eq!(
        (w.common.req_id, w.recv.unwrap().length),
        (rx_id, LONG as u32)
    );

    let (l, r) = (
        sink.sge(8, 200).unwrap(),
        readable.remote().slice(16, 200).unwrap(),
    );
    post_one!(a, |s| s.read(3, &to_b, l, r));
    let id = a_sq.check_wqe(
        to,
        TxOp::RdmaRead {
            local: local(l),
            remote: remote(r),
        },
    );
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);
    assert_eq!(&sink.as_slice()[8..208], &[0xc3; 200][..]);
}

#[test]
fn wide_wqes_of_an_inline_write_qp_match_the_provider() {
    // A device profile with room for 80 inline bytes (efa-sim's default has 32).
    in_child(
        "wide_wqes_of_an_inline_write_qp_match_the_provider",
        &[(
            "EFA_SIM_PROFILE",
            "inline_buf_size=80,inline_buf_size_ex=80",
        )],
        wide_wqes,
    );
}

fn wide_wqes() {
    // Inline writes need the 128-byte format; so do more than 32 inline bytes.
    let max = TX_DESC_INLINE_MAX_SIZE_128 as u32;
    // 128-byte WQEs halve the deepest send queue the LLQ allows: stay well below it.
    let wide = QpConfig::srd().inline_write().max_inline(max).depth(64, 64);
    pair!(
        ctx,
        pd,
        cqa,
        cqb,
        a,
        b,
        to_b,
        _to_a,
        wide,
        QpConfig::srd().depth(64, 64)
    );
    if !ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
        return;
    }
    let (mut a_sq, _) = Produced::of(a.wq_layout().unwrap());
    let (_, mut b_rq) = Produced::of(b.wq_layout().unwrap());
    assert_eq!(a_sq.ring.entry_size as usize, TX_DESC_SIZE_128);
    let (mut a_cq, mut b_cq) = (CqTap::new(&cqa, false), CqTap::new(&cqb, true));
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let rbuf = pd
        .register(vec![0u8; 256], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 256);
    let to = dest(&to_b);
    let n = (a.limits().max_inline_data() as usize).min(TX_DESC_INLINE_MAX_SIZE_128);
    assert!(
        n > TX_DESC_INLINE_MAX_SIZE,
        "a 128-byte WQE carries more than 32 inline bytes"
    );
    let bytes = &src.as_slice()[3..3 + n];

    post_recv(&b, 1, &[rbuf.sge_all().unwrap()]);
    let rx_id = b_rq.check_recv(&[local(rbuf.sge_all().unwrap())]);
    post_one!(a, |s| s.send_inline(1, &to_b, bytes));
    let id = a_sq.check_wqe(
        to,
        TxOp::Send {
            data: TxData::Inline(bytes),
            imm: None,
        },
    );
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);
    assert_eq!(complete(&mut b_cq, &cqb).common.req_id, rx_id);
    assert_eq!(&rbuf.as_slice()[..n], bytes);

    let r = target.remote().slice(100, n as u64).unwrap();
    post_one!(a, |s| s.write(2, &to_b, Payload::Inline(bytes), r));
    let op = TxOp::RdmaWrite {
        data: TxData::Inline(bytes),
        remote: remote(r),
        imm: None,
    };
    let id = a_sq.check_wqe(to, op);
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);
    assert_eq!(&target.to_vec()[100..100 + n], bytes);

    let l = src.sge(0, 64).unwrap();
    post_one!(a, |s| s.send_imm(3, &to_b, l, 77));
    post_recv(&b, 2, &[rbuf.sge_all().unwrap()]);
    b_rq.check_recv(&[local(rbuf.sge_all().unwrap())]);
    let id = a_sq.check_wqe(
        to,
        TxOp::Send {
            data: TxData::Sges(&[local(l)]),
            imm: Some(77),
        },
    );
    assert_eq!(complete(&mut a_cq, &cqa).common.req_id, id);
    assert_eq!(complete(&mut b_cq, &cqb).recv.unwrap().imm, Some(77));
}

#[test]
fn phases_flip_every_lap_of_the_send_receive_and_completion_rings() {
    // The provider's WQEs are read back from the ring after the device consumed them:
    // on the default device, since strict mode poisons consumed slots.
    in_child_without(
        "phases_flip_every_lap_of_the_send_receive_and_completion_rings",
        &[],
        &["EFA_SIM_PROFILE"],
        phases_flip_every_lap_of_the_send_receive_and_completion_rings_body,
    );
}

fn phases_flip_every_lap_of_the_send_receive_and_completion_rings_body() {
    let small = QpConfig::srd().depth(8, 8);
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let (cqa, cqb) = (
        ctx.create_ext_cq(CqOptions::new(16)).unwrap(),
        ctx.create_ext_cq(CqOptions::new(16)).unwrap(),
    );
    let a = rts_qp(&pd, &cqa, &small, QKEY_A);
    let b = rts_qp(&pd, &cqb, &small, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let (mut a_sq, _) = Produced::of(a.wq_layout().unwrap());
    let (_, mut b_rq) = Produced::of(b.wq_layout().unwrap());
    let (mut a_cq, mut b_cq) = (CqTap::new(&cqa, false), CqTap::new(&cqb, false));
    let laps = 3 * a_sq
        .ring
        .num_entries
        .max(b_rq.ring.num_entries)
        .max(a_cq.ring.num_entries);
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..laps {
        post_recv(&b, u64::from(i), &[dst.sge_all().unwrap()]);
        let rx_id = b_rq.check_recv(&[local(dst.sge_all().unwrap())]);
        let l = src.sge(0, 1 + u64::from(i) % 63).unwrap();
        post_one!(a, |s| s.send_imm(u64::from(i), &to_b, l, i));
        let id = a_sq.check_wqe(
            dest(&to_b),
            TxOp::Send {
                data: TxData::Sges(&[local(l)]),
                imm: Some(i),
            },
        );
        let sent = complete(&mut a_cq, &cqa);
        let got = complete(&mut b_cq, &cqb);
        assert_eq!((sent.common.req_id, got.common.req_id), (id, rx_id));
        // The device's phase: 1 on the first lap of the CQ, flipped on each later lap.
        assert_eq!(
            sent.common.phase,
            (i / a_cq.ring.num_entries) % 2 == 0,
            "CQE {i}"
        );
        assert_eq!(got.recv.unwrap().length, l.len());
    }
}

#[test]
fn sender_gid_and_error_status_of_an_unknown_peer_match_the_poll() {
    // The provider's WQEs are read back from the ring after the device consumed them:
    // on the default device, since strict mode poisons consumed slots.
    in_child_without(
        "sender_gid_and_error_status_of_an_unknown_peer_match_the_poll",
        &[],
        &["EFA_SIM_PROFILE"],
        sender_gid_and_error_status_of_an_unknown_peer_match_the_poll_body,
    );
}

fn sender_gid_and_error_status_of_an_unknown_peer_match_the_poll_body() {
    // Two devices: b's PD has no AH for a's GID.
    let (ctx_a, ctx_b) = (open(0), open(1));
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let cqa = ctx_a.create_ext_cq(CqOptions::new(1024)).unwrap();
    let cqb = ctx_b
        .create_ext_cq(CqOptions::new(1024).sender_gid())
        .unwrap();
    let a = rts_qp(&pd_a, &cqa, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd_b, &cqb, &QpConfig::srd(), QKEY_B);
    let to_b = pd_a.connect(&b.endpoint()).unwrap();
    let (mut a_sq, _) = Produced::of(a.wq_layout().unwrap());
    let (_, mut b_rq) = Produced::of(b.wq_layout().unwrap());
    let (mut a_cq, mut b_cq) = (CqTap::new(&cqa, false), CqTap::new(&cqb, true));
    let src = pd_a.register(vec![3u8; 16], AccessFlags::empty()).unwrap();
    let dst = pd_b
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();

    post_recv(&b, 8, &[dst.sge_all().unwrap()]);
    let rx_id = b_rq.check_recv(&[local(dst.sge_all().unwrap())]);
    let l = src.sge(0, 4).unwrap();
    post_one!(a, |s| s.send(2, &to_b, l));
    a_sq.check_wqe(
        dest(&to_b),
        TxOp::Send {
            data: TxData::Sges(&[local(l)]),
            imm: None,
        },
    );
    complete(&mut a_cq, &cqa);
    let r = complete(&mut b_cq, &cqb);
    let recv = r.recv.unwrap();
    assert_eq!((r.common.req_id, recv.ah), (rx_id, AH_UNKNOWN));
    assert_eq!(recv.sender_gid, Some(ctx_a.gid().unwrap().0));

    if ctx_a.caps().contains(DeviceCaps::RDMA_WRITE) {
        let target = write_target(&pd_b, 16);
        post_one!(a, |s| s.write(1, &to_b, l, target.remote()));
        let op = TxOp::RdmaWrite {
            data: TxData::Sges(&[local(l)]),
            remote: remote(target.remote()),
            imm: None,
        };
        a_sq.check_wqe(dest(&to_b), op);
        let e = complete(&mut a_cq, &cqa);
        assert_eq!(
            EfaStatus(u32::from(e.common.status)),
            EfaStatus::REMOTE_UNKNOWN_PEER
        );
    }
}
