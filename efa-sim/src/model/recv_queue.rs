//! The device side of a receive queue: the RQ ring and the device's consumer position.
//! Nothing happens on an RQ doorbell; when a message arrives the device reads the
//! doorbell (the descriptors posted so far) and takes the receive WQE at its position:
//! descriptors from one with `FIRST` set to one with `LAST` set.
//!
//! Choices where the hardware is unconfirmed:
//! * A WQE whose first descriptor lacks `FIRST`, that runs past the posted descriptors
//!   or past the device's `max_rq_sge` without `LAST`, is malformed: the device consumes
//!   it (up to its `LAST`, or what was posted) and completes it with status 2
//!   (LOCAL_ERROR_QP_INTERNAL_ERROR); the sender gets status 12
//!   (REMOTE_ERROR_BAD_STATUS). Counted in [`crate::model::Stats::bad_wqes`].
//! * A doorbell claiming more descriptors than the ring holds is ignored (as if
//!   nothing new was posted) and counted in [`crate::model::Stats::bad_doorbells`].

use super::runtime::stats::bump;
use super::runtime::Runtime;
use super::Qp;
use crate::ring::cqe::{Cqe, NO_AH};
use crate::ring::rx::{self, RxDesc};
use crate::ring::{Cursor, Ring};
use arrayvec::ArrayVec;
use efa_sys::io::{queue_type, send_op_type};
use efa_sys::vendor::comp_status as st;
use std::sync::{Mutex, MutexGuard};

/// Most descriptors one receive WQE may span.
pub const MAX_WQE_DESCS: usize = super::profile::MAX_RQ_SGE as usize;

/// The buffers of a receive WQE, in order (filled by [`DeviceRq::head`] into the
/// caller's value, so the few hundred bytes are not moved around).
pub(crate) type RxBufs = ArrayVec<RxDesc, MAX_WQE_DESCS>;

/// A receive WQE at the head of the queue (its buffers went to the caller's [`RxBufs`]).
pub(crate) struct RxWqe {
    /// Request id of its first descriptor.
    pub req_id: u16,
    /// The consumer position after it.
    pub next: Cursor,
}

/// What the head of the queue holds (on the stack of the one delivery that looks).
pub(crate) enum Head {
    /// Nothing posted.
    Empty,
    /// A well-formed WQE.
    Wqe(RxWqe),
    /// A malformed one: its request id and the position after it.
    Malformed(u16, Cursor),
}

/// The device side of a receive queue.
pub(crate) struct DeviceRq {
    ring: Ring,
    at: Mutex<Cursor>,
    max_descs: usize,
}

impl DeviceRq {
    /// A queue over `ring` whose WQEs span at most `max_descs` descriptors.
    pub fn new(ring: Ring, max_descs: usize) -> DeviceRq {
        DeviceRq {
            ring,
            at: Mutex::new(Cursor::default()),
            max_descs: max_descs.clamp(1, MAX_WQE_DESCS),
        }
    }

    /// The ring (provider side and direct consumers write it).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The consumer position, locked (one message is delivered at a time).
    pub fn lock(&self) -> MutexGuard<'_, Cursor> {
        self.at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The WQE at position `at`; a well-formed one's buffers go to `bufs` (cleared first).
    #[inline]
    pub fn head(&self, rt: &Runtime, at: &Cursor, bufs: &mut RxBufs) -> Head {
        bufs.clear();
        let entries = self.ring.entries();
        if entries == 0 {
            return Head::Empty;
        }
        let posted = (self.ring.doorbell().read() as u16).wrapping_sub(at.count) as u32;
        if posted == 0 {
            return Head::Empty;
        }
        if posted > entries {
            bump(&rt.stats.bad_doorbells);
            return Head::Empty;
        }
        let mut pos = *at;
        let mut raw = [0u8; rx::SIZE];
        let mut req_id = 0;
        for i in 0..posted.min(self.max_descs as u32) {
            self.ring.read_slot(u32::from(pos.count), &mut raw);
            pos.advance(entries);
            let d = RxDesc::decode(&raw);
            if i == 0 {
                if !d.first {
                    return Head::Malformed(d.req_id, pos);
                }
                req_id = d.req_id;
            } else if d.first {
                // A new WQE began before this one ended: the next WQE starts there.
                let mut back = *at;
                for _ in 0..i {
                    back.advance(entries);
                }
                return Head::Malformed(req_id, back);
            }
            bufs.push(d);
            if d.last {
                return Head::Wqe(RxWqe { req_id, next: pos });
            }
        }
        Head::Malformed(req_id, pos)
    }

    /// Whether a receive WQE (well-formed or not) is posted.
    pub fn has_posted(&self, rt: &Runtime) -> bool {
        let at = self.lock();
        !matches!(self.head(rt, &at, &mut RxBufs::new()), Head::Empty)
    }

    /// Moving to ERR: every posted receive WQE completes with FLUSHED.
    pub fn flush(&self, rt: &Runtime, qp: &Qp) {
        let mut at = self.lock();
        let mut bufs = RxBufs::new();
        loop {
            let (req_id, next) = match self.head(rt, &at, &mut bufs) {
                Head::Empty => break,
                Head::Wqe(w) => (w.req_id, w.next),
                Head::Malformed(r, next) => (r, next),
            };
            *at = next;
            qp.recv_cq().push(&Cqe {
                req_id,
                status: st::FLUSHED as u8,
                q_type: queue_type::RECV,
                op_type: send_op_type::SEND,
                qp_num: qp.qpn() as u16,
                ah: NO_AH,
                ..Cqe::default()
            });
        }
    }

    /// Moving to RESET: the queue is empty (the provider starts again at descriptor 0;
    /// the phase carries on).
    pub fn reset(&self) {
        let mut at = self.lock();
        at.count = 0;
        self.ring.doorbell().write(0);
    }
}
