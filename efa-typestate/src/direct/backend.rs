//! The direct backend's state (issue 26): per QP, the send and receive queues' producer
//! positions and request-id slots; per CQ, the consumer position and the table of the
//! direct QPs it serves. Posting writes WQEs / receive descriptors into the rings with the
//! slice-1 encoders and rings the doorbells; polling reads CQEs by phase bit.
//!
//! # Where the state lives and why it is thread-safe
//!
//! A [`DirectQp`] is shared (`Arc`) by its QP and by the table of each CQ it completes on.
//! Each queue's mutable state (producer count, phase, slots) sits behind its own
//! [`Mutex`], taken for a whole post: posts to one queue are serialised as libefa's SQ/RQ
//! locks serialise them, so `Qp::post_send(&self)` stays callable from several threads.
//! A [`DirectCq`]'s consumer count, phase and QP table sit behind the CQ's mutex, taken for a
//! whole poll (as libefa's CQ lock). A poll frees a request-id slot by taking the queue's
//! mutex inside the CQ's: the only nesting is CQ → queue, so no lock-order cycle exists.
//! Every `wr_id` is written and read under its queue's mutex.
//!
//! # Stale completions
//!
//! A request id is a slot index with a generation in the bits above it (as libefa's and
//! efa-sim's providers make them). The generation is new for every direct QP (a global
//! counter, so a later QP that gets the same QP number does not recognise an earlier one's
//! completions) and at every reset. A completion whose generation is not the queue's, or
//! whose slot is not taken, is consumed (the consumer index moves on) and dropped, as
//! efa-sim's provider drops them; so is one naming a QP number the CQ has no direct QP for
//! (a destroyed QP).
//!
//! # Doorbells
//!
//! * SQ: WQEs are copied into the (write-combined) ring after `wc_start`, in 64-byte
//!   units; every `max_batch` WQEs and at the end of a post the stores are flushed and
//!   the doorbell is written with the 16-bit producer count (libefa's `wr_complete`). A
//!   batch that rings before its end is encoded once beforehand, so it stays all or
//!   nothing; a `post_with` session stages its WQEs in host memory until it commits
//!   (libefa's local queue).
//! * RQ: one descriptor per SGE, then `to_device_barrier` and the doorbell with the
//!   descriptor count, once per post.
//! * CQ: rdma-core's libefa writes the CQ doorbell (consumer index, `cmd_sn`, arm bit 0)
//!   after every poll that consumed entries, when the CQ has a doorbell (`cq->db`, which
//!   the kernel gives on devices that report `EFA_CREATE_CQ_RESP_DB_OFF`), and with the arm
//!   bit to arm it (`efa_poll_cq`, `efa_end_poll`, `efa_arm_cq` in `providers/efa/verbs.c`);
//!   libfabric's efa-direct does the same. So does this (`cmd_sn` 0: a direct CQ has no
//!   channel, so no event is ever acknowledged). efa-sim judges a CQ full by that index.
//!
//! No allocation happens after creation: the slot tables and the session staging area are
//! allocated with the QP, and the CQ's table grows only when a QP is created.

use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arrayvec::ArrayVec;

use super::barrier::{
    copy_to_llq, flush_wc_writes, from_device_barrier, to_device_barrier, wc_start, write_doorbell,
    DEVICE_BARRIERS_PROVEN,
};
use super::cqe::{decode_cqe, is_pending, CqDoorbell, CQE_SIZE, FLAGS};
use super::rx::{encode_rx_wqe, RX_DESC_SIZE};
use super::wqe::{
    encode_tx_wqe, encode_tx_wqe_128, Destination, RemoteAddr, TxControl, TxData, TxOp,
};
use super::LocalBuf;
use crate::cq::{Completion, CompletionFlags, CqLayout, WcOpcode, WcStatus};
use crate::endpoint::Gid;
use crate::error::{DirectError, Error, Result, RingKind};
use crate::ffi;
use crate::qp::WqLayout;
use crate::wr::{LocalKind, OpKind, RecvBufs, RecvWr, StagedSend};
use efa_sys::io::{queue_type, send_op_type, TX_DESC_SIZE_128, TX_DESC_SIZE_64};

/// Most receive SGEs one receive may have on the direct path (rdma-core's EFA limit).
pub const MAX_RECV_SGE: usize = 16;
/// Largest CQ entry the poller copies out.
const MAX_CQE: usize = 64;

/// Generations handed to new direct QPs.
static NEXT_GEN: AtomicU16 = AtomicU16::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while posting or polling leaves the state consistent at every step where
    // it could unwind (no encoder panics), so a poisoned lock is taken over.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Request-id slots of one work queue (libefa's `wrid` array and `wrid_idx_pool`).
struct Slots {
    wrid: Box<[u64]>,
    taken: Box<[bool]>,
    /// Free indices in `free[taken_count..]`, the next one at `free[taken_count]`.
    free: Box<[u32]>,
    taken_count: u32,
    idx_bits: u32,
    gen: u16,
}

impl Slots {
    fn new(count: u32, gen: u16) -> Slots {
        let n = count as usize;
        Slots {
            wrid: vec![0; n].into_boxed_slice(),
            taken: vec![false; n].into_boxed_slice(),
            free: (0..count).collect(),
            taken_count: 0,
            idx_bits: count.max(1).next_power_of_two().trailing_zeros(),
            gen,
        }
    }
    fn capacity(&self) -> u32 {
        self.free.len() as u32
    }
    fn outstanding(&self) -> u32 {
        self.taken_count
    }
    fn gen_bits(&self) -> u16 {
        if self.idx_bits >= 16 {
            0
        } else {
            self.gen << self.idx_bits
        }
    }
    fn idx_mask(&self) -> u16 {
        if self.idx_bits >= 16 {
            u16::MAX
        } else {
            (1u16 << self.idx_bits) - 1
        }
    }
    /// Takes a free slot for `wr_id`; the caller checked there is one.
    fn take(&mut self, wr_id: u64) -> u16 {
        let idx = self.free[self.taken_count as usize];
        self.taken_count += 1;
        self.taken[idx as usize] = true;
        self.wrid[idx as usize] = wr_id;
        // idx < capacity <= 2^idx_bits <= 2^16.
        idx as u16 | self.gen_bits()
    }
    /// Gives back the `n` slots taken last (a post that failed before its doorbell).
    fn untake(&mut self, n: u32) {
        for i in self.taken_count - n..self.taken_count {
            let idx = self.free[i as usize];
            self.taken[idx as usize] = false;
        }
        self.taken_count -= n;
    }
    /// The `wr_id` of a completion's request id, freeing its slot; None for a request
    /// id of another generation or of a slot not taken (a stale completion).
    fn complete(&mut self, req_id: u16) -> Option<u64> {
        let mask = self.idx_mask();
        if req_id & !mask != self.gen_bits() {
            return None;
        }
        let idx = usize::from(req_id & mask);
        match self.taken.get_mut(idx) {
            Some(t) if *t => {
                *t = false;
                self.taken_count -= 1;
                self.free[self.taken_count as usize] = idx as u32;
                Some(self.wrid[idx])
            }
            _ => None,
        }
    }
    /// Forgets every request (a QP reset): all slots free, a new generation.
    fn reset(&mut self) {
        for (i, f) in self.free.iter_mut().enumerate() {
            *f = i as u32;
        }
        self.taken.fill(false);
        self.taken_count = 0;
        self.gen = self.gen.wrapping_add(1);
    }
}

/// A producer position: entries produced (modulo 2^32) and the phase of the current lap.
struct Producer {
    count: u32,
    phase: bool,
}

impl Producer {
    fn advance(&mut self, entries: u32) {
        self.count = self.count.wrapping_add(1);
        if self.count % entries == 0 {
            self.phase = !self.phase;
        }
    }
    /// The doorbell value: libefa writes its 16-bit producer counter.
    fn doorbell(count: u32) -> u32 {
        count & 0xffff
    }
}

struct SqState {
    pc: Producer,
    slots: Slots,
    /// Host copies of the WQEs of an open session (`post_with`), one SQ entry each, by
    /// ring slot: libefa's `local_queue`. They reach the SQ when the session commits.
    staged: Box<[u8]>,
}

struct RqState {
    pc: Producer,
    slots: Slots,
}

/// One ring as the direct path drives it.
#[derive(Clone, Copy, Debug)]
struct Ring {
    buffer: usize,
    entry_size: u32,
    entries: u32,
    doorbell: usize,
}

impl Ring {
    fn slot(&self, count: u32) -> usize {
        self.buffer + ((count % self.entries) * self.entry_size) as usize
    }
}

/// The direct state of one QP: its send and receive queues.
pub struct DirectQp {
    qpn: u32,
    sq: Ring,
    max_batch: u32,
    rq: Ring,
    sq_state: Mutex<SqState>,
    rq_state: Mutex<RqState>,
}

impl core::fmt::Debug for DirectQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DirectQp")
            .field("qpn", &self.qpn)
            .field("sq", &self.sq)
            .field("rq", &self.rq)
            .finish()
    }
}

fn unsupported(r: RingKind) -> Error {
    DirectError::UnsupportedRing(r).into()
}

/// Checks the architecture before any ring is touched.
pub(crate) fn check_barriers() -> Result<()> {
    if !DEVICE_BARRIERS_PROVEN {
        return Err(DirectError::BarriersUnproven.into());
    }
    Ok(())
}

impl DirectQp {
    /// The direct state of QP `qpn` with rings `sq`/`rq` (from `efadv_query_qp_wqs`) and
    /// `recv_wrs` receive WRs (granted `max_recv_wr`).
    pub(crate) fn new(
        qpn: u32,
        sq: WqLayout,
        rq: WqLayout,
        recv_wrs: u32,
    ) -> Result<Arc<DirectQp>> {
        check_barriers()?;
        let sq_ok = matches!(sq.entry_size as usize, TX_DESC_SIZE_64 | TX_DESC_SIZE_128)
            && sq.num_entries.is_power_of_two()
            && sq.num_entries <= 1 << 15
            && sq.buffer != 0
            && sq.buffer % 64 == 0
            && sq.doorbell != 0
            && sq.doorbell % 4 == 0;
        if !sq_ok {
            return Err(unsupported(RingKind::Send));
        }
        let rq_ok = rq.num_entries == 0
            || (rq.entry_size as usize == RX_DESC_SIZE
                && rq.num_entries.is_power_of_two()
                && rq.num_entries <= 1 << 15
                && rq.buffer != 0
                && rq.buffer % 8 == 0
                && rq.doorbell != 0
                && rq.doorbell % 4 == 0);
        if !rq_ok {
            return Err(unsupported(RingKind::Recv));
        }
        let recv_wrs = if rq.num_entries == 0 { 0 } else { recv_wrs };
        let gen = NEXT_GEN.fetch_add(1, Ordering::Relaxed);
        let ring = |w: WqLayout| Ring {
            buffer: w.buffer,
            entry_size: w.entry_size,
            entries: w.num_entries.max(1),
            doorbell: w.doorbell,
        };
        Ok(Arc::new(DirectQp {
            qpn,
            sq: ring(sq),
            max_batch: if sq.max_batch == 0 {
                u32::MAX
            } else {
                sq.max_batch
            },
            rq: ring(rq),
            // libefa's SQ starts in phase 0, its pool has one slot per SQ entry.
            sq_state: Mutex::new(SqState {
                pc: Producer {
                    count: 0,
                    phase: false,
                },
                slots: Slots::new(sq.num_entries, gen),
                staged: vec![0; (sq.num_entries * sq.entry_size) as usize].into_boxed_slice(),
            }),
            rq_state: Mutex::new(RqState {
                pc: Producer {
                    count: 0,
                    phase: false,
                },
                slots: Slots::new(recv_wrs, gen),
            }),
        }))
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Forgets every posted request (the QP went to RESET): both queues start at index 0
    /// again (the phase carries on, as libefa's and the device's do), with a new
    /// generation of request ids.
    pub(crate) fn reset(&self) {
        let mut sq = lock(&self.sq_state);
        sq.pc.count = 0;
        sq.slots.reset();
        drop(sq);
        let mut rq = lock(&self.rq_state);
        rq.pc.count = 0;
        rq.slots.reset();
    }

    /// Posts checked send work requests: all or nothing. As libefa's `wr_complete` copies
    /// its staged WQEs: each WQE is encoded and copied into the next SQ slot (beyond the
    /// doorbell, where the device does not read), and every `max_batch` WQEs and at the
    /// end the write-combined stores are flushed and the doorbell is written with the
    /// producer count. A batch that rings before its end is encoded once beforehand, so
    /// that no WQE of it can be refused after a doorbell.
    ///
    /// # Safety
    /// The QP is live (its rings mapped), in RTS, driven only by this state; `wrs` were
    /// checked against it and borrow live SGE lists and inline bytes; the caller's
    /// `post_send` contract covers the memory the WQEs name.
    pub(crate) unsafe fn post_send(&self, wrs: &[StagedSend<'_>]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut st = lock(&self.sq_state);
        let n = u32::try_from(wrs.len()).map_err(|_| Error::SendQueueFull)?;
        if st.slots.outstanding() + n > st.slots.capacity() {
            return Err(Error::SendQueueFull);
        }
        let mut w = [0u8; TX_DESC_SIZE_128];
        if n > self.max_batch {
            let ctl = TxControl {
                req_id: 0,
                phase: false,
                completion: true,
            };
            for wr in wrs {
                // SAFETY: forwarded: `wr`'s borrows are live for the call.
                unsafe { self.encode_wqe(&mut w, ctl, wr) }?;
            }
        }
        // The producer position of the last doorbell, and the WQEs written since.
        let (mut rung, mut rung_phase, mut pending) = (st.pc.count, st.pc.phase, 0u32);
        wc_start();
        for wr in wrs {
            let req_id = st.slots.take(wr.wr_id);
            let ctl = TxControl {
                req_id,
                phase: st.pc.phase,
                completion: true,
            };
            // SAFETY: forwarded: `wr`'s borrows are live for the call.
            if let Err(e) = unsafe { self.encode_wqe(&mut w, ctl, wr) } {
                // Only reached before any doorbell of this batch (a batch that rings
                // earlier was encoded beforehand): the WQEs written lie beyond the doorbell.
                st.slots.untake(pending + 1);
                st.pc.count = rung;
                st.pc.phase = rung_phase;
                return Err(e);
            }
            let at = self.sq.slot(st.pc.count);
            // SAFETY: `at` is the SQ slot at the producer position, of the live ring,
            // beyond the doorbell (the device does not read it); the SQ lock is held.
            unsafe { self.copy_wqe(at, &w) };
            st.pc.advance(self.sq.entries);
            pending += 1;
            if pending == self.max_batch {
                flush_wc_writes();
                // SAFETY: the SQ doorbell of this live QP; every WQE up to the producer
                // count is written and flushed.
                unsafe {
                    write_doorbell(
                        self.sq.doorbell as *mut u32,
                        Producer::doorbell(st.pc.count),
                    )
                };
                (rung, rung_phase, pending) = (st.pc.count, st.pc.phase, 0);
                wc_start();
            }
        }
        if pending > 0 {
            flush_wc_writes();
            // SAFETY: as above.
            unsafe {
                write_doorbell(
                    self.sq.doorbell as *mut u32,
                    Producer::doorbell(st.pc.count),
                )
            };
        }
        Ok(())
    }

    /// Opens a posting session ([`DirectSession`]): holds the SQ lock until it ends.
    pub(crate) fn begin(&self) -> DirectSession<'_> {
        let st = lock(&self.sq_state);
        DirectSession {
            qp: self,
            start: st.pc.count,
            start_phase: st.pc.phase,
            st,
            pending: 0,
            latched: None,
            open: true,
        }
    }

    /// Copies an encoded WQE (the first `entry_size` bytes of `w`) into the SQ slot `at`.
    ///
    /// # Safety
    /// `at` is an SQ slot of this live QP beyond the doorbell, the SQ lock is held.
    unsafe fn copy_wqe(&self, at: usize, w: &[u8; TX_DESC_SIZE_128]) {
        if self.sq.entry_size as usize == TX_DESC_SIZE_128 {
            // SAFETY: `at` is a 128-byte, 64-aligned slot (checked at creation) nobody
            // else reads or writes meanwhile (caller).
            unsafe { copy_to_llq(at as *mut u8, w) };
        } else if let Some(w64) = w.first_chunk::<TX_DESC_SIZE_64>() {
            // SAFETY: as above, a 64-byte slot.
            unsafe { copy_to_llq(at as *mut u8, w64) };
        }
    }

    /// Encodes `wr` into `w` (its first `entry_size` bytes).
    ///
    /// # Safety
    /// `wr`'s SGE list / inline bytes are live.
    unsafe fn encode_wqe(
        &self,
        w: &mut [u8; TX_DESC_SIZE_128],
        ctl: TxControl,
        wr: &StagedSend<'_>,
    ) -> Result<()> {
        let mut sges = [LocalBuf::default(); 2];
        let data = match wr.local {
            LocalKind::Sge => {
                sges[0] = LocalBuf {
                    addr: wr.addr(),
                    lkey: wr.lkey(),
                    length: wr.len(),
                };
                TxData::Sges(&sges[..1])
            }
            LocalKind::Sges => {
                let k = wr.len() as usize;
                if k > sges.len() {
                    return Err(DirectError::WqeFormat.into());
                }
                let list: &[ffi::ibv_sge] = if k == 0 {
                    &[]
                } else {
                    // SAFETY: a staged SGE list points at `len` live `ibv_sge`s the batch
                    // borrows.
                    unsafe { core::slice::from_raw_parts(wr.sge_list(), k) }
                };
                for (d, s) in sges.iter_mut().zip(list) {
                    *d = LocalBuf {
                        addr: s.addr,
                        lkey: s.lkey,
                        length: s.length,
                    };
                }
                TxData::Sges(&sges[..k])
            }
            LocalKind::Inline => {
                let k = wr.len() as usize;
                let bytes: &[u8] = if k == 0 {
                    &[]
                } else {
                    // SAFETY: staged inline bytes point at `len` live bytes the batch
                    // borrows.
                    unsafe { core::slice::from_raw_parts(wr.inline_bytes(), k) }
                };
                TxData::Inline(bytes)
            }
        };
        let remote = RemoteAddr {
            addr: wr.raddr,
            rkey: wr.rkey(),
        };
        let op = match wr.kind {
            OpKind::Send => TxOp::Send { data, imm: None },
            OpKind::SendImm => TxOp::Send {
                data,
                imm: Some(wr.imm()),
            },
            OpKind::Write => TxOp::RdmaWrite {
                data,
                remote,
                imm: None,
            },
            OpKind::WriteImm => TxOp::RdmaWrite {
                data,
                remote,
                imm: Some(wr.imm()),
            },
            OpKind::Read => match data {
                TxData::Sges([local]) => TxOp::RdmaRead {
                    local: *local,
                    remote,
                },
                _ => return Err(DirectError::WqeFormat.into()),
            },
        };
        let dest = Destination {
            // EFA QP numbers fit 16 bits (libefa stores the low 16 bits too).
            qpn: wr.qpn as u16,
            ah: wr.ahn,
            qkey: wr.qkey,
        };
        let r = if self.sq.entry_size as usize == TX_DESC_SIZE_128 {
            encode_tx_wqe_128(w, ctl, dest, &op)
        } else if let Some(w64) = w.first_chunk_mut::<TX_DESC_SIZE_64>() {
            encode_tx_wqe(w64, ctl, dest, &op)
        } else {
            Ok(())
        };
        r.map_err(|_| DirectError::WqeFormat.into())
    }

    /// Posts checked receives in order until the queue is full
    /// ([`Error::RecvQueueFull`] with the number posted), then rings the RQ doorbell once.
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send), for receives (the QP may be in INIT or later).
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // Checked first, so that such a batch posts nothing.
        for wr in wrs {
            let k = match &wr.bufs {
                RecvBufs::Sge(_) => 1,
                RecvBufs::Sges(l) => l.len(),
            };
            if k == 0 {
                return Err(DirectError::EmptyReceive.into());
            }
            if k > MAX_RECV_SGE {
                return Err(DirectError::WqeFormat.into());
            }
        }
        let mut st = lock(&self.rq_state);
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            if st.slots.outstanding() >= st.slots.capacity() {
                result = Err(Error::RecvQueueFull { posted });
                break;
            }
            let mut bufs = [LocalBuf::default(); MAX_RECV_SGE];
            let k = match &wr.bufs {
                RecvBufs::Sge(s) => {
                    bufs[0] = LocalBuf {
                        addr: s.addr(),
                        lkey: s.lkey(),
                        length: s.len(),
                    };
                    1
                }
                RecvBufs::Sges(l) => {
                    for (d, s) in bufs.iter_mut().zip(l.raw()) {
                        *d = LocalBuf {
                            addr: s.addr,
                            lkey: s.lkey,
                            length: s.length,
                        };
                    }
                    l.len()
                }
            };
            let req_id = st.slots.take(wr.wr_id);
            let mut descs = [[0u8; RX_DESC_SIZE]; MAX_RECV_SGE];
            // 1..=MAX_RECV_SGE buffers (checked above): cannot fail.
            let Ok(k) = encode_rx_wqe(&mut descs[..k], req_id, &bufs[..k]) else {
                st.slots.untake(1);
                result = Err(DirectError::WqeFormat.into());
                break;
            };
            for d in &descs[..k] {
                let at = self.rq.slot(st.pc.count);
                // SAFETY: a 16-byte, 8-aligned descriptor slot of the live RQ ring beyond
                // its doorbell (the device does not read it yet), written under the RQ lock.
                unsafe { write_words(at, d) };
                st.pc.advance(self.rq.entries);
            }
            posted += 1;
        }
        if posted > 0 {
            to_device_barrier();
            // SAFETY: the RQ doorbell of this live QP; every descriptor up to it is written.
            unsafe {
                write_doorbell(
                    self.rq.doorbell as *mut u32,
                    Producer::doorbell(st.pc.count),
                )
            };
        }
        result
    }

    /// The `wr_id` of a completion of this QP, freeing its slot (None: stale).
    fn complete(&self, recv: bool, req_id: u16) -> Option<u64> {
        if recv {
            lock(&self.rq_state).slots.complete(req_id)
        } else {
            lock(&self.sq_state).slots.complete(req_id)
        }
    }
}

/// A direct QP's posting session (`Qp::post_with`), as libefa's `ibv_wr_start` …
/// `ibv_wr_complete`: each work request is encoded into the host staging area as it is
/// added; [`commit`](Self::commit) copies them into the SQ with the doorbell rule of
/// `post_send`, [`abort`](Self::abort) (or a drop, e.g. on a panic) forgets them. The
/// device sees nothing before the commit, so a session is all or nothing.
pub(crate) struct DirectSession<'q> {
    qp: &'q DirectQp,
    st: MutexGuard<'q, SqState>,
    start: u32,
    start_phase: bool,
    pending: u32,
    /// The first error of the session (a full queue): the commit fails with it.
    latched: Option<Error>,
    open: bool,
}

impl DirectSession<'_> {
    /// Adds one checked work request; a full queue is latched and reported by the commit
    /// (as libefa's `ibv_wr_complete` reports ENOMEM).
    ///
    /// # Safety
    /// `wr`'s SGE list / inline bytes are live for the call.
    pub(crate) unsafe fn push(&mut self, wr: &StagedSend<'_>) -> Result<()> {
        if self.latched.is_some() {
            return Ok(());
        }
        let st = &mut *self.st;
        if st.slots.outstanding() >= st.slots.capacity() {
            self.latched = Some(Error::SendQueueFull);
            return Ok(());
        }
        let req_id = st.slots.take(wr.wr_id);
        let ctl = TxControl {
            req_id,
            phase: st.pc.phase,
            completion: true,
        };
        let mut w = [0u8; TX_DESC_SIZE_128];
        // SAFETY: forwarded.
        if let Err(e) = unsafe { self.qp.encode_wqe(&mut w, ctl, wr) } {
            st.slots.untake(1);
            return Err(e);
        }
        let size = self.qp.sq.entry_size as usize;
        let at = (st.pc.count % self.qp.sq.entries) as usize * size;
        st.staged[at..at + size].copy_from_slice(&w[..size]);
        st.pc.advance(self.qp.sq.entries);
        self.pending += 1;
        Ok(())
    }

    /// Posts the session's work requests (or reports its latched error, posting none).
    pub(crate) fn commit(mut self) -> Result<()> {
        if let Some(e) = self.latched {
            self.abort_in_place();
            return Err(e);
        }
        self.open = false;
        let qp = self.qp;
        let st = &mut *self.st;
        let size = qp.sq.entry_size as usize;
        let mut since = 0u32;
        wc_start();
        for i in 0..self.pending {
            let count = self.start.wrapping_add(i);
            let from = (count % qp.sq.entries) as usize * size;
            let mut w = [0u8; TX_DESC_SIZE_128];
            w[..size].copy_from_slice(&st.staged[from..from + size]);
            // SAFETY: the SQ slot of producer count `count`, written by nobody else (the
            // SQ lock is held) and beyond the doorbell.
            unsafe { qp.copy_wqe(qp.sq.slot(count), &w) };
            since += 1;
            if since == qp.max_batch || i + 1 == self.pending {
                flush_wc_writes();
                let db = Producer::doorbell(count.wrapping_add(1));
                // SAFETY: the SQ doorbell of this live QP; every WQE up to it is written
                // and flushed.
                unsafe { write_doorbell(qp.sq.doorbell as *mut u32, db) };
                since = 0;
                wc_start();
            }
        }
        Ok(())
    }

    /// Forgets the session's work requests.
    pub(crate) fn abort(mut self) {
        self.abort_in_place();
    }

    fn abort_in_place(&mut self) {
        if self.open {
            self.open = false;
            let st = &mut *self.st;
            st.slots.untake(self.pending);
            st.pc.count = self.start;
            st.pc.phase = self.start_phase;
            self.pending = 0;
        }
    }
}

impl Drop for DirectSession<'_> {
    fn drop(&mut self) {
        self.abort_in_place();
    }
}

/// Writes `bytes` (a multiple of 8 long) at `at` as volatile 8-byte stores.
///
/// # Safety
/// `at` is valid for `N` bytes of writes, 8-aligned, and nobody reads them meanwhile.
unsafe fn write_words<const N: usize>(at: usize, bytes: &[u8; N]) {
    for (i, c) in bytes.chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        // SAFETY: word `i` lies within the caller's `N` bytes.
        unsafe {
            (at as *mut u64)
                .add(i)
                .write_volatile(u64::from_ne_bytes(w))
        };
    }
}

struct CqState {
    cc: u32,
    phase: bool,
    qps: Vec<Arc<DirectQp>>,
    /// Index in `qps` of the QP of the last completion (most polls see one QP).
    last: usize,
}

/// The direct state of one CQ.
pub struct DirectCq {
    ring: Ring,
    sender_gid: bool,
    unsolicited: bool,
    st: Mutex<CqState>,
}

impl core::fmt::Debug for DirectCq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DirectCq")
            .field("ring", &self.ring)
            .finish()
    }
}

impl DirectCq {
    /// The direct state of a CQ with ring `layout` (`efadv_query_cq`); `sender_gid` and
    /// `unsolicited`: what the CQ was created to report.
    pub(crate) fn new(
        layout: CqLayout,
        sender_gid: bool,
        unsolicited: bool,
    ) -> Result<Arc<DirectCq>> {
        check_barriers()?;
        let e = layout.entry_size as usize;
        let ok = (CQE_SIZE..=MAX_CQE).contains(&e)
            && e % 8 == 0
            && layout.num_entries.is_power_of_two()
            && layout.buffer != 0
            && layout.buffer % 8 == 0
            && layout.doorbell % 4 == 0;
        if !ok {
            return Err(unsupported(RingKind::Completion));
        }
        Ok(Arc::new(DirectCq {
            ring: Ring {
                buffer: layout.buffer,
                entry_size: layout.entry_size,
                entries: layout.num_entries,
                doorbell: layout.doorbell,
            },
            sender_gid,
            unsolicited,
            // libefa's sub-CQs start in phase 1 (the ring starts zeroed).
            st: Mutex::new(CqState {
                cc: 0,
                phase: true,
                qps: Vec::new(),
                last: 0,
            }),
        }))
    }

    /// Serves `qp` from now on (QP creation).
    pub(crate) fn register(&self, qp: &Arc<DirectQp>) {
        lock(&self.st).qps.push(Arc::clone(qp));
    }

    /// Stops serving `qp` (QP destruction, after the device forgot it): its completions
    /// still in the ring are dropped when polled.
    pub(crate) fn unregister(&self, qp: &Arc<DirectQp>) {
        let mut st = lock(&self.st);
        st.qps.retain(|q| !Arc::ptr_eq(q, qp));
        st.last = 0;
    }

    /// Arms the CQ for one completion event: the doorbell with the consumer index and the
    /// arm bit (`efa_arm_cq`; no events are ever acknowledged on a direct CQ, which has no
    /// channel, so `cmd_sn` stays 0).
    pub(crate) fn arm(&self) {
        if self.ring.doorbell == 0 {
            return;
        }
        let st = lock(&self.st);
        let db = CqDoorbell {
            consumer_index: st.cc as u16,
            cmd_sn: 0,
            arm: true,
        };
        // SAFETY: the doorbell of this live CQ (it outlives its direct state's users).
        unsafe { write_doorbell(self.ring.doorbell as *mut u32, db.encode()) };
    }

    /// Appends up to `out`'s room of completions; returns how many. Completions of other
    /// generations, of slots not taken and of QPs this CQ does not serve are consumed and
    /// dropped. Writes the consumer index to the CQ doorbell (when the CQ has one) after
    /// consuming entries, as libefa's `efa_poll_cq` / `efa_end_poll` do.
    pub(crate) fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        if out.is_full() {
            return Err(crate::cq::no_room(N));
        }
        Ok(self.poll_each(out.remaining_capacity(), |c| out.push(c)))
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many (see
    /// [`poll`](Self::poll)).
    pub(crate) fn poll_each(&self, max: usize, mut f: impl FnMut(Completion)) -> usize {
        let mut st = lock(&self.st);
        let size = self.ring.entry_size as usize;
        let mut n = 0;
        let mut consumed = 0u32;
        while n < max {
            let at = self.ring.slot(st.cc);
            // SAFETY: the entry lies in the live CQ ring and is 8-aligned (checked at
            // creation); the device publishes an entry's first 8 bytes (with the phase
            // bit) with one store, last, so the load sees all of it or none.
            let head = unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Ordering::Acquire);
            if !is_pending(head.to_le_bytes()[FLAGS], st.phase) {
                break;
            }
            from_device_barrier();
            let mut raw = [0u8; MAX_CQE];
            for (i, w) in raw[..size].chunks_exact_mut(8).enumerate() {
                // SAFETY: word `i` of the entry, within the ring; the device finished
                // writing the entry before publishing its phase (ordered by the barrier).
                let v = unsafe { (at as *const u64).add(i).read_volatile() };
                w.copy_from_slice(&v.to_ne_bytes());
            }
            st.cc = st.cc.wrapping_add(1);
            if st.cc % self.ring.entries == 0 {
                st.phase = !st.phase;
            }
            consumed += 1;
            let Some(cqe) = decode_cqe(&raw[..size], self.sender_gid) else {
                continue;
            };
            let k = &cqe.common;
            let qpn = u32::from(k.qp_num);
            let found = match st.qps.get(st.last) {
                Some(q) if q.qpn == qpn => Some(st.last),
                _ => st.qps.iter().position(|q| q.qpn == qpn),
            };
            let Some(i) = found else { continue };
            st.last = i;
            let qp = &st.qps[i];
            let recv = k.queue_type == queue_type::RECV;
            let wr_id = if recv && k.unsolicited {
                Some(0)
            } else {
                qp.complete(recv, k.req_id)
            };
            let Some(wr_id) = wr_id else { continue };
            let status = WcStatus(efa_sys::vendor::to_ibv_wc_status(u32::from(k.status)));
            let c = match cqe.recv {
                None => {
                    let opcode = if k.op_type == send_op_type::RDMA_WRITE {
                        WcOpcode::RDMA_WRITE
                    } else {
                        // libefa reports RDMA-read requester completions as SEND.
                        WcOpcode::SEND
                    };
                    Completion::direct(wr_id, status, opcode, u32::from(k.status), qpn)
                }
                Some(r) => {
                    let opcode = if k.op_type == send_op_type::RDMA_WRITE {
                        WcOpcode::RECV_RDMA_WITH_IMM
                    } else {
                        WcOpcode::RECV
                    };
                    let mut flags = CompletionFlags::empty();
                    if r.imm.is_some() {
                        flags |= CompletionFlags::WITH_IMM;
                    }
                    if self.unsolicited && k.unsolicited && opcode == WcOpcode::RECV_RDMA_WITH_IMM {
                        flags |= CompletionFlags::UNSOLICITED;
                    }
                    let mut c = Completion::direct(wr_id, status, opcode, u32::from(k.status), qpn);
                    c.set_recv(
                        r.length,
                        u32::from(r.src_qp),
                        r.ah,
                        flags,
                        r.imm,
                        r.sender_gid.map(Gid),
                    );
                    c
                }
            };
            f(c);
            n += 1;
        }
        if consumed > 0 && self.ring.doorbell != 0 {
            let db = CqDoorbell {
                consumer_index: st.cc as u16,
                cmd_sn: 0,
                arm: false,
            };
            // SAFETY: the doorbell of this live CQ.
            unsafe { write_doorbell(self.ring.doorbell as *mut u32, db.encode()) };
        }
        n
    }
}

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;
