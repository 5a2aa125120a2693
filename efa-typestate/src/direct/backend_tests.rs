//! The direct state over rings in host memory, with this test as the device: WQEs and
//! descriptors land at the producer positions with the doorbell rule, completions (in any
//! order, stale ones, unknown QPs) map to their `wr_id`s once, and the CQ doorbell follows
//! the consumer. Pure (no FFI): it runs under Miri too.

use super::*;
use crate::direct::rx::RxDesc;
use crate::mr::Sge;
use crate::pd::PdId;
use crate::qp::QpType;
use crate::wr::{test_limits, Dest, Payload, RecvBatch, SendBatch, SendOp, SendWr};
use core::mem::offset_of;
use core::sync::atomic::AtomicU64;
use efa_sys::io::{
    efa_io_cdesc_common, efa_io_rx_cdesc, efa_io_tx_meta_desc, CDESC_COMMON_HAS_IMM_MASK,
    CDESC_COMMON_OP_TYPE_SHIFT, CDESC_COMMON_Q_TYPE_SHIFT, TX_META_DESC_PHASE_MASK,
};

#[test]
fn slots_recycle_and_recognise_stale_ids() {
    let mut s = Slots::new(4, 3);
    let a = s.take(10);
    let b = s.take(11);
    assert_eq!(a >> 2, 3, "generation in the high bits");
    assert_eq!(s.outstanding(), 2);
    assert_eq!(s.complete(b), Some(11));
    assert_eq!(s.complete(b), None, "a slot is freed once");
    let c = s.take(12);
    assert_eq!(c, b, "the freed slot is handed out next");
    s.reset();
    assert_eq!(s.complete(a), None, "earlier generation");
    assert_eq!(s.outstanding(), 0);
    for i in 0..4 {
        s.take(i);
    }
    assert_eq!(s.outstanding(), s.capacity());
    s.untake(2);
    assert_eq!(s.outstanding(), 2);
}

#[test]
fn producer_flips_phase_every_lap() {
    let mut p = Producer {
        count: 0,
        phase: false,
    };
    for _ in 0..4 {
        p.advance(4);
    }
    assert!(p.phase);
    assert_eq!(Producer::doorbell(0x1_0005), 5);
}

/// Ring memory (page aligned, as the device's).
#[repr(C, align(4096))]
pub(super) struct Page([u8; 4096]);

/// A fake device: the rings and doorbells of one QP and its CQ. The pages are kept as
/// raw pointers (as memory mapped from a device is): every access, the direct state's
/// and the test's, goes through them.
pub(super) struct Device {
    sq: *mut Page,
    rq: *mut Page,
    pub(super) cq: *mut Page,
    /// SQ, RQ and CQ doorbells.
    dbs: Box<[AtomicU32Cell; 3]>,
}

#[repr(C, align(64))]
struct AtomicU32Cell(core::sync::atomic::AtomicU32);

pub(super) const QPN: u32 = 7;
const SQ_ENTRIES: u32 = 8;
const RQ_ENTRIES: u32 = 16;
pub(super) const CQ_ENTRIES: u32 = 8;
const MAX_BATCH: u32 = 3;

impl Device {
    pub(super) fn new() -> Device {
        let page = || Box::into_raw(Box::new(Page([0; 4096])));
        Device {
            sq: page(),
            rq: page(),
            cq: page(),
            dbs: Box::new([const { AtomicU32Cell(core::sync::atomic::AtomicU32::new(0)) }; 3]),
        }
    }
    fn addr(p: *mut Page) -> usize {
        p as usize
    }
    fn db_addr(&self, i: usize) -> usize {
        self.dbs[i].0.as_ptr() as usize
    }
    pub(super) fn db(&self, i: usize) -> u32 {
        self.dbs[i].0.load(Ordering::Acquire)
    }
    pub(super) fn qp_and_cq(&self) -> (Arc<DirectQp>, Arc<DirectCq>) {
        let sq = WqLayout {
            buffer: Self::addr(self.sq),
            entry_size: 64,
            num_entries: SQ_ENTRIES,
            doorbell: self.db_addr(0),
            max_batch: MAX_BATCH,
        };
        let rq = WqLayout {
            buffer: Self::addr(self.rq),
            entry_size: 16,
            num_entries: RQ_ENTRIES,
            doorbell: self.db_addr(1),
            max_batch: RQ_ENTRIES,
        };
        let cq = CqLayout {
            buffer: Self::addr(self.cq),
            entry_size: 32,
            num_entries: CQ_ENTRIES,
            doorbell: self.db_addr(2),
        };
        let qp = DirectQp::new(core::ptr::null_mut(), QPN, sq, rq, 4).unwrap();
        let cq = DirectCq::new(core::ptr::null_mut(), cq, false, false, false).unwrap();
        cq.register(&qp);
        (qp, cq)
    }
    /// Reads SQ entry `n` (modulo the ring).
    pub(super) fn sq_entry(&self, n: u32) -> [u8; 64] {
        let at = (n % SQ_ENTRIES) as usize * 64;
        // SAFETY: the page is live; the direct state wrote it with volatile stores on
        // this thread.
        unsafe { (self.sq.cast::<u8>().add(at) as *const [u8; 64]).read_volatile() }
    }
    /// Reads RQ descriptor `n`.
    fn rq_desc(&self, n: u32) -> [u8; 16] {
        let at = (n % RQ_ENTRIES) as usize * 16;
        // SAFETY: as above.
        unsafe { (self.rq.cast::<u8>().add(at) as *const [u8; 16]).read_volatile() }
    }
    /// Writes CQ entry `n` as the device does: the body, then the first 8 bytes (with the
    /// phase) in one release store.
    pub(super) fn complete(&self, n: u32, e: [u8; 32]) {
        let at = (n % CQ_ENTRIES) as usize * 32;
        let base = self.cq.cast::<u8>();
        // SAFETY: the entry lies in the live page; the poller reads it only after the
        // release store of its first word (and only on this thread here).
        unsafe {
            for (i, c) in e.chunks_exact(8).enumerate().skip(1) {
                let w = u64::from_ne_bytes(c.try_into().unwrap());
                (base.add(at) as *mut u64).add(i).write_volatile(w);
            }
            let head = u64::from_ne_bytes(e[..8].try_into().unwrap());
            AtomicU64::from_ptr(base.add(at) as *mut u64).store(head, Ordering::Release);
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        for p in [self.sq, self.rq, self.cq] {
            // SAFETY: made by `Box::into_raw` in `new`, freed once, after every user (the
            // direct state is dropped before the device in each test).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A completion entry: `recv` gives (length, imm) for a receive.
pub(super) fn cqe(
    n: u32,
    qpn: u16,
    req_id: u16,
    status: u8,
    recv: Option<(u16, Option<u32>)>,
) -> [u8; 32] {
    let mut e = [0u8; 32];
    let phase = (n / CQ_ENTRIES) % 2 == 0;
    let q = if recv.is_some() {
        queue_type::RECV
    } else {
        queue_type::SEND
    };
    let mut flags = u8::from(phase)
        | q << CDESC_COMMON_Q_TYPE_SHIFT
        | send_op_type::SEND << CDESC_COMMON_OP_TYPE_SHIFT;
    e[offset_of!(efa_io_cdesc_common, req_id)..][..2].copy_from_slice(&req_id.to_le_bytes());
    e[offset_of!(efa_io_cdesc_common, status)] = status;
    e[offset_of!(efa_io_cdesc_common, qp_num)..][..2].copy_from_slice(&qpn.to_le_bytes());
    if let Some((len, imm)) = recv {
        e[offset_of!(efa_io_rx_cdesc, length)..][..2].copy_from_slice(&len.to_le_bytes());
        e[offset_of!(efa_io_rx_cdesc, src_qp_num)..][..2].copy_from_slice(&9u16.to_le_bytes());
        e[offset_of!(efa_io_rx_cdesc, ah)..][..2].copy_from_slice(&3u16.to_le_bytes());
        if let Some(imm) = imm {
            flags |= CDESC_COMMON_HAS_IMM_MASK;
            e[offset_of!(efa_io_rx_cdesc, imm)..][..4].copy_from_slice(&imm.to_le_bytes());
        }
    }
    e[offset_of!(efa_io_cdesc_common, flags)] = flags;
    e
}

pub(super) fn req_id_of(wqe: &[u8; 64]) -> u16 {
    u16::from_le_bytes([wqe[0], wqe[1]])
}

pub(super) const PD: PdId = PdId::test(0x70);

pub(super) fn poll_all(cq: &DirectCq) -> Vec<Completion> {
    let mut out = ArrayVec::<Completion, 16>::new();
    cq.poll(&mut out, || Ok(())).unwrap();
    out.to_vec()
}

/// Posts `n` (at most 4) inline sends with ids `first..`.
pub(super) fn post(qp: &DirectQp, limits: &crate::wr::QpLimits, first: u64, n: u64) -> Result<()> {
    let mut b = SendBatch::<4>::new(limits);
    for id in first..first + n {
        b.push(
            SendWr::with_dest(id, SendOp::Send, Dest::test(PD), Payload::Inline(b"hello")).unwrap(),
        )
        .unwrap();
    }
    // SAFETY: the rings are the test's live pages; the inline bytes are static.
    unsafe { qp.post_send(b.wrs.as_slice()) }
}

#[test]
fn sends_land_at_the_producer_and_complete_once_in_any_order() {
    let dev = Device::new();
    let (qp, cq) = dev.qp_and_cq();
    let limits = test_limits(PD, QpType::Srd);
    post(&qp, &limits, 100, 4).unwrap();
    assert_eq!(dev.db(0), 4, "SQ doorbell: the producer count");
    post(&qp, &limits, 104, 2).unwrap();
    assert_eq!(dev.db(0), 6);
    let ids: Vec<u16> = (0..6).map(|n| req_id_of(&dev.sq_entry(n))).collect();
    for n in 0..6 {
        assert_eq!(
            dev.sq_entry(n)[offset_of!(efa_io_tx_meta_desc, ctrl2)] & TX_META_DESC_PHASE_MASK,
            0,
            "first lap: phase 0"
        );
    }
    // Six outstanding of eight: three more do not fit, and nothing of them is written.
    assert_eq!(post(&qp, &limits, 200, 3), Err(Error::SendQueueFull));
    assert_eq!(dev.db(0), 6);

    // Out of order, a duplicate, a stale generation and an unknown QP among them.
    let entries = [
        cqe(0, QPN as u16, ids[2], 0, None),
        cqe(1, QPN as u16, ids[0], 0, None),
        cqe(2, QPN as u16, ids[0], 0, None),
        cqe(3, QPN as u16, ids[1] ^ 0x8000, 0, None),
        cqe(4, 99, ids[1], 0, None),
        cqe(5, QPN as u16, ids[5], 7, None),
    ];
    for (n, e) in entries.iter().enumerate() {
        dev.complete(n as u32, *e);
    }
    let got = poll_all(&cq);
    let wr: Vec<u64> = got.iter().map(|c| c.wr_id()).collect();
    assert_eq!(wr, [102, 100, 105]);
    assert_eq!(got[2].efa_status(), crate::EfaStatus(7));
    assert_eq!(got[2].status().0, efa_sys::vendor::to_ibv_wc_status(7));
    assert!(got
        .iter()
        .all(|c| c.opcode() == WcOpcode::SEND && c.qp_num() == QPN));
    assert_eq!(
        CqDoorbell::decode(dev.db(2)).consumer_index,
        6,
        "all six consumed"
    );
    assert!(poll_all(&cq).is_empty());

    // Three slots came back: the ring wraps (phase 1 from entry 8 on).
    post(&qp, &limits, 106, 3).unwrap();
    assert_eq!(dev.db(0), 9);
    assert_eq!(
        dev.sq_entry(8)[offset_of!(efa_io_tx_meta_desc, ctrl2)] & TX_META_DESC_PHASE_MASK,
        1
    );
    // The CQ wraps too: entries 6..=9, the last two in phase 0.
    let pending = [ids[1], ids[3], ids[4], req_id_of(&dev.sq_entry(6))];
    for (i, id) in pending.iter().enumerate() {
        dev.complete(6 + i as u32, cqe(6 + i as u32, QPN as u16, *id, 0, None));
    }
    let wr: Vec<u64> = poll_all(&cq).iter().map(|c| c.wr_id()).collect();
    assert_eq!(wr, [101, 103, 104, 106]);
    assert_eq!(CqDoorbell::decode(dev.db(2)).consumer_index, 10);

    // A reset forgets the rest (107, 108): their completions are stale afterwards.
    let late = [req_id_of(&dev.sq_entry(7)), req_id_of(&dev.sq_entry(8))];
    qp.reset();
    dev.complete(10, cqe(10, QPN as u16, late[0], 0, None));
    dev.complete(11, cqe(11, QPN as u16, late[1], 0, None));
    assert!(poll_all(&cq).is_empty());
    post(&qp, &limits, 300, 4).unwrap();
    assert_eq!(dev.db(0), 4, "the producer starts over after a reset");
    cq.unregister(&qp);
}

#[test]
fn receives_write_descriptors_and_complete_with_their_fields() {
    let dev = Device::new();
    let (qp, cq) = dev.qp_and_cq();
    let limits = test_limits(PD, QpType::Srd);
    let s1 = Sge::new_checked(0x1000, 100, 0x11, PD);
    let s2 = Sge::new_checked(0x2000, 200, 0x22, PD);
    let two = crate::SgeList::<2>::new(&[s1, s2]).unwrap();
    let mut b = RecvBatch::<4>::new(&limits);
    b.push(1, s1).unwrap();
    b.push(2, &two).unwrap();
    // SAFETY: the rings are the test's live pages; the buffers are never touched.
    unsafe { qp.post_recv(b.wrs.as_slice()) }.unwrap();
    assert_eq!(dev.db(1), 3, "RQ doorbell: descriptors");
    let d: Vec<RxDesc> = (0..3).map(|n| RxDesc::decode(&dev.rq_desc(n))).collect();
    assert_eq!(
        (d[0].addr, d[0].length, d[0].first, d[0].last),
        (0x1000, 100, true, true)
    );
    assert_eq!((d[1].addr, d[1].first, d[1].last), (0x1000, true, false));
    assert_eq!(
        (d[2].addr, d[2].req_id, d[2].first, d[2].last),
        (0x2000, 0, false, true)
    );
    // Two more receives fill the four WR slots; a fifth is refused, naming the posted.
    let mut b = RecvBatch::<4>::new(&limits);
    b.push(3, s1).unwrap();
    b.push(4, s1).unwrap();
    b.push(5, s1).unwrap();
    // SAFETY: as above.
    let r = unsafe { qp.post_recv(b.wrs.as_slice()) };
    assert_eq!(r, Err(Error::RecvQueueFull { posted: 2 }));
    assert_eq!(dev.db(1), 5);

    dev.complete(
        0,
        cqe(0, QPN as u16, d[1].req_id, 0, Some((150, Some(0xabcd)))),
    );
    dev.complete(1, cqe(1, QPN as u16, d[0].req_id, 0, Some((10, None))));
    let got = poll_all(&cq);
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].wr_id(), got[0].byte_len(), got[0].imm()),
        (2, 150, Some(0xabcd))
    );
    assert_eq!(
        (got[0].src_qp(), got[0].slid(), got[0].opcode()),
        (9, 3, WcOpcode::RECV)
    );
    assert_eq!((got[1].wr_id(), got[1].imm()), (1, None));
    // A slot came back: one more receive goes in.
    let mut b = RecvBatch::<4>::new(&limits);
    b.push(6, s1).unwrap();
    // SAFETY: as above.
    unsafe { qp.post_recv(b.wrs.as_slice()) }.unwrap();
}

#[test]
fn a_full_output_is_an_error_and_a_short_one_leaves_the_rest() {
    let dev = Device::new();
    let (qp, cq) = dev.qp_and_cq();
    let limits = test_limits(PD, QpType::Srd);
    post(&qp, &limits, 1, 3).unwrap();
    for n in 0..3 {
        let id = req_id_of(&dev.sq_entry(n));
        dev.complete(n, cqe(n, QPN as u16, id, 0, None));
    }
    let mut one = ArrayVec::<Completion, 1>::new();
    assert_eq!(cq.poll(&mut one, || Ok(())), Ok(1));
    assert_eq!(CqDoorbell::decode(dev.db(2)).consumer_index, 1);
    assert!(matches!(
        cq.poll(&mut one, || Ok(())),
        Err(Error::Invalid(_))
    ));
    let rest: Vec<u64> = poll_all(&cq).iter().map(|c| c.wr_id()).collect();
    assert_eq!((one[0].wr_id(), rest), (1, vec![2, 3]));
}

#[test]
fn rings_of_unsupported_shapes_are_typed_errors() {
    let dev = Device::new();
    let sq = WqLayout {
        buffer: Device::addr(dev.sq),
        entry_size: 64,
        num_entries: SQ_ENTRIES,
        doorbell: dev.db_addr(0),
        max_batch: MAX_BATCH,
    };
    let rq = WqLayout {
        buffer: Device::addr(dev.rq),
        entry_size: 16,
        num_entries: RQ_ENTRIES,
        doorbell: dev.db_addr(1),
        max_batch: 0,
    };
    let cq = CqLayout {
        buffer: Device::addr(dev.cq),
        entry_size: 32,
        num_entries: CQ_ENTRIES,
        doorbell: dev.db_addr(2),
    };
    let bad = |r| Err(Error::Direct(DirectError::UnsupportedRing(r)));
    let qp = |sq, rq| DirectQp::new(core::ptr::null_mut(), QPN, sq, rq, 4).map(|_| ());
    assert_eq!(qp(sq, rq), Ok(()));
    assert_eq!(
        qp(
            WqLayout {
                entry_size: 32,
                ..sq
            },
            rq
        ),
        bad(RingKind::Send)
    );
    assert_eq!(
        qp(
            WqLayout {
                num_entries: 6,
                ..sq
            },
            rq
        ),
        bad(RingKind::Send)
    );
    assert_eq!(qp(WqLayout { doorbell: 0, ..sq }, rq), bad(RingKind::Send));
    assert_eq!(
        qp(
            WqLayout {
                buffer: sq.buffer + 8,
                ..sq
            },
            rq
        ),
        bad(RingKind::Send)
    );
    assert_eq!(
        qp(
            sq,
            WqLayout {
                entry_size: 32,
                ..rq
            }
        ),
        bad(RingKind::Recv)
    );
    assert_eq!(
        qp(
            sq,
            WqLayout {
                num_entries: 0,
                ..rq
            }
        ),
        Ok(()),
        "a QP without receive queue"
    );
    let cq_of = |c| DirectCq::new(core::ptr::null_mut(), c, false, false, false).map(|_| ());
    assert_eq!(cq_of(cq), Ok(()));
    assert_eq!(
        cq_of(CqLayout {
            entry_size: 8,
            ..cq
        }),
        bad(RingKind::Completion)
    );
    assert_eq!(
        cq_of(CqLayout {
            entry_size: 128,
            ..cq
        }),
        bad(RingKind::Completion)
    );
    assert_eq!(
        cq_of(CqLayout {
            num_entries: 12,
            ..cq
        }),
        bad(RingKind::Completion)
    );
    assert_eq!(
        cq_of(CqLayout { doorbell: 0, ..cq }),
        Ok(()),
        "a CQ without doorbell (older devices): polled without writing one"
    );
}
