//! The direct backend's state (issue 26): per QP, the send and receive queues' producer
//! positions and request-id slots; per CQ, the consumer position and the table of the
//! direct QPs it serves. Posting writes WQEs / receive descriptors into the rings with the
//! slice-1 encoders and rings the doorbells; polling reads CQEs by phase bit.
//!
//! # Where the state lives and why it is thread-safe
//!
//! A [`DirectQp`] is shared (`Arc`) by its QP and by the table of each CQ it completes on.
//! Each queue's mutable state (producer count, phase, slots) sits behind its own
//! `SpinLock` (`spin.rs`), taken for a whole post: posts to one queue are serialised as libefa's SQ/RQ
//! spin locks serialise them, so `Qp::post_send(&self)` stays callable from several threads.
//! A [`DirectCq`]'s consumer count, phase and QP table sit behind the CQ's lock, taken for a
//! whole poll (as libefa's CQ lock). A poll frees a request-id slot by taking the queue's
//! lock inside the CQ's: the only nesting is CQ → queue, so no lock-order cycle exists.
//! Every `wr_id` is written and read under its queue's lock.
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
//!   nothing. A `post_with` session stores its first `max_batch` WQEs straight into the
//!   ring (beyond the doorbell, which only its commit writes) and stages later ones in
//!   host memory until it commits (libefa's local queue).
//! * RQ: one descriptor per SGE, then `to_device_barrier` and the doorbell with the
//!   descriptor count, once per post.
//! * CQ: rdma-core's libefa writes the CQ doorbell (consumer index, `cmd_sn`, arm bit 0)
//!   after every poll that consumed entries, when the CQ has a doorbell (`cq->db`, which
//!   the kernel gives on devices that report `EFA_CREATE_CQ_RESP_DB_OFF`), and with the arm
//!   bit to arm it (`efa_poll_cq`, `efa_end_poll`, `efa_arm_cq` in `providers/efa/verbs.c`);
//!   libfabric's efa-direct does the same. So does this, with `cmd_sn` counting the CQ's
//!   delivered events (`events`). efa-sim judges a CQ full by that index.
//!
//! No allocation happens after creation: the slot tables and the session staging area are
//! allocated with the QP, and the CQ's table grows only when a QP is created.

use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use spin::{SpinGuard, SpinLock};

use arrayvec::ArrayVec;

use super::barrier::{
    copy_to_llq, flush_wc_writes, from_device_barrier, to_device_barrier, wc_start, write_doorbell,
    DEVICE_BARRIERS_PROVEN,
};
use super::cqe::{decode_cqe_words, is_pending, CqDoorbell, CQE_SIZE, FLAGS};
use super::fast::{one_buf_wqe, wqe_bytes, OneBufOp, WqeWords};
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

mod cq;
pub(crate) mod events;
mod recv;
mod session;
mod sim;
mod slots;
mod spin;
pub use cq::DirectCq;
pub(crate) use session::DirectSession;
use slots::{Producer, Slots};

/// Most receive SGEs one receive may have on the direct path (rdma-core's EFA limit).
pub const MAX_RECV_SGE: usize = 16;
/// Largest CQ entry the poller copies out.
const MAX_CQE: usize = 64;

/// Generations handed to new direct QPs.
static NEXT_GEN: AtomicU16 = AtomicU16::new(0);

/// Takes a std mutex (the list of CQs with channels); a poisoned one is taken over.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct SqState {
    pc: Producer,
    slots: Slots,
    /// Host copies of the WQEs of an open session (`post_with`) past its first
    /// `max_batch`, one SQ entry each, by ring slot: libefa's `local_queue`. They reach
    /// the SQ when the session commits.
    /// As 8-byte words, `entry_size / 8` per entry.
    staged: Box<[u64]>,
}

struct RqState {
    pc: Producer,
    slots: Slots,
}

/// One ring as the direct path drives it. Its entry count and entry size are powers of
/// two (checked at creation), so a slot is a mask and a shift away.
#[derive(Clone, Copy, Debug)]
struct Ring {
    buffer: usize,
    entry_size: u32,
    entries: u32,
    doorbell: usize,
    /// `entries - 1`.
    mask: u32,
    /// `log2(entry_size)`.
    shift: u32,
}

impl Ring {
    /// A ring of `entries` entries of `entry_size` bytes (both powers of two).
    fn new(buffer: usize, entry_size: u32, entries: u32, doorbell: usize) -> Ring {
        debug_assert!(entries.is_power_of_two() && entry_size.is_power_of_two());
        Ring {
            buffer,
            entry_size,
            entries,
            doorbell,
            mask: entries.wrapping_sub(1),
            shift: entry_size.trailing_zeros(),
        }
    }

    #[inline(always)]
    fn slot(&self, count: u32) -> usize {
        self.buffer + (((count & self.mask) as usize) << self.shift)
    }
}

/// The direct state of one QP: its send and receive queues.
pub struct DirectQp {
    qpn: u32,
    /// efa-sim's doorbell call (none on rdma-core).
    sim: sim::SqHook,
    sq: Ring,
    max_batch: u32,
    rq: Ring,
    sq_state: SpinLock<SqState>,
    rq_state: SpinLock<RqState>,
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

/// Stores a WQE's words into its SQ slot, in order (write-combined into whole 64-byte
/// units on hardware; flushed by `flush_wc_writes` before the doorbell).
///
/// # Safety
/// `at` is a 64-byte, 8-aligned SQ slot nobody else reads or writes meanwhile.
#[inline(always)]
unsafe fn store_wqe(at: usize, words: &WqeWords) {
    for (i, w) in words.iter().enumerate() {
        // SAFETY: word `i` lies within the caller's slot.
        unsafe { (at as *mut u64).add(i).write_volatile(*w) };
    }
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
        qp: *mut ffi::ibv_qp,
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
        let ring = |w: WqLayout| {
            // An RQ without entries (checked above) gets a one-entry ring it never uses.
            let size = if w.num_entries == 0 { 1 } else { w.entry_size };
            Ring::new(w.buffer, size, w.num_entries.max(1), w.doorbell)
        };
        Ok(Arc::new(DirectQp {
            qpn,
            sim: sim::SqHook::new(qp),
            sq: ring(sq),
            max_batch: if sq.max_batch == 0 {
                u32::MAX
            } else {
                sq.max_batch
            },
            rq: ring(rq),
            // libefa's SQ starts in phase 0, its pool has one slot per SQ entry.
            sq_state: SpinLock::new(SqState {
                pc: Producer {
                    count: 0,
                    phase: false,
                },
                slots: Slots::new(sq.num_entries, gen),
                staged: vec![0; (sq.num_entries * sq.entry_size / 8) as usize].into_boxed_slice(),
            }),
            rq_state: SpinLock::new(RqState {
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
        let mut sq = self.sq_state.lock();
        sq.pc.count = 0;
        sq.slots.reset();
        drop(sq);
        let mut rq = self.rq_state.lock();
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
        let mut st = self.sq_state.lock();
        let n = u32::try_from(wrs.len()).map_err(|_| Error::SendQueueFull)?;
        if st.slots.outstanding().saturating_add(n) > st.slots.capacity() {
            return Err(Error::SendQueueFull);
        }
        if n > self.max_batch {
            let mut w = [0u8; TX_DESC_SIZE_128];
            let ctl = TxControl {
                req_id: 0,
                phase: false,
                completion: true,
            };
            // Requests of the fast shape always fit; the others are encoded once first.
            for wr in wrs.iter().filter(|wr| self.fast_wqe(ctl, wr).is_none()) {
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
            let at = self.sq.slot(st.pc.count);
            if let Some(words) = self.fast_wqe(ctl, wr) {
                // SAFETY: `at` is the 64-byte, 64-aligned SQ slot at the producer
                // position of the live ring, beyond the doorbell; the SQ lock is held.
                unsafe { store_wqe(at, &words) };
            } else {
                let mut w = [0u8; TX_DESC_SIZE_128];
                // SAFETY: forwarded: `wr`'s borrows are live for the call.
                if let Err(e) = unsafe { self.encode_wqe(&mut w, ctl, wr) } {
                    // Only reached before any doorbell of this batch (a batch that rings
                    // earlier was encoded beforehand): the WQEs written lie beyond the
                    // doorbell.
                    st.slots.untake(pending + 1);
                    st.pc.count = rung;
                    st.pc.phase = rung_phase;
                    return Err(e);
                }
                // SAFETY: `at` is the SQ slot at the producer position, of the live
                // ring, beyond the doorbell (the device does not read it); the SQ lock is
                // held.
                unsafe { self.copy_wqe(at, &w) };
            }
            st.pc.advance(self.sq.entries);
            pending += 1;
            if pending == self.max_batch {
                flush_wc_writes();
                self.ring_sq(st.pc.count);
                (rung, rung_phase, pending) = (st.pc.count, st.pc.phase, 0);
                wc_start();
            }
        }
        if pending > 0 {
            flush_wc_writes();
            self.ring_sq(st.pc.count);
        }
        Ok(())
    }

    /// Writes the SQ doorbell with producer count `count` (the caller holds the SQ lock
    /// and has written and flushed every WQE up to it), then tells efa-sim, if that is
    /// the device.
    #[inline(always)]
    fn ring_sq(&self, count: u32) {
        // SAFETY: the SQ doorbell of this live QP (checked non-null and aligned at
        // creation); the WQEs it announces are in place (the caller's contract).
        unsafe { write_doorbell(self.sq.doorbell as *mut u32, Producer::doorbell(count)) };
        self.sim.rung();
    }

    /// The words of `wr`'s WQE when it has the common shape (one SGE, a 64-byte SQ, a
    /// little-endian CPU), else None (the general encoder takes it).
    #[inline(always)]
    fn fast_wqe(&self, ctl: TxControl, wr: &StagedSend<'_>) -> Option<WqeWords> {
        if !cfg!(target_endian = "little")
            || self.sq.entry_size as usize != TX_DESC_SIZE_64
            || !matches!(wr.local, LocalKind::Sge)
        {
            return None;
        }
        let (raddr, rkey) = (wr.raddr, wr.rkey());
        let (op, imm) = match wr.kind {
            OpKind::Send => (OneBufOp::Send, None),
            OpKind::SendImm => (OneBufOp::Send, Some(wr.imm())),
            OpKind::Write => (OneBufOp::Write { raddr, rkey }, None),
            OpKind::WriteImm => (OneBufOp::Write { raddr, rkey }, Some(wr.imm())),
            OpKind::Read => (OneBufOp::Read { raddr, rkey }, None),
        };
        let dest = Destination {
            // EFA QP numbers fit 16 bits (libefa stores the low 16 bits too).
            qpn: wr.qpn as u16,
            ah: wr.ahn,
            qkey: wr.qkey,
        };
        let buf = LocalBuf {
            addr: wr.addr(),
            lkey: wr.lkey(),
            length: wr.len(),
        };
        Some(one_buf_wqe(ctl, dest, op, buf, imm))
    }

    /// Opens a posting session ([`DirectSession`]): holds the SQ lock until it ends.
    pub(crate) fn begin(&self) -> DirectSession<'_> {
        let st = self.sq_state.lock();
        // The session's first WQEs are stored into the ring as they are added.
        wc_start();
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

    /// The `wr_id` of a completion of this QP, freeing its slot (None: stale).
    #[inline(always)]
    fn complete(&self, recv: bool, req_id: u16) -> Option<u64> {
        if recv {
            self.rq_state.lock().slots.complete(req_id)
        } else {
            self.sq_state.lock().slots.complete(req_id)
        }
    }
}

#[cfg(test)]
#[path = "../cq_order_tests.rs"]
mod cq_order_tests;
#[cfg(test)]
#[path = "../backend_tests.rs"]
mod tests;
