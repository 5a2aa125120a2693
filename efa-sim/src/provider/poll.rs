//! A CQ's consumer, provider side (libefa's `efa_cq` polling): reads the next slot of the
//! CQ ring while its phase bit matches the current lap, decodes it into a
//! [`Completion`], and frees the SQ/RQ slot of the WR when the completion is retired
//! (`next_poll`, `end_poll`, or within `ibv_poll_cq`). The consumer index goes to the CQ
//! doorbell before a WR's slot is freed (and after a poll that consumed entries): the
//! device loses a completion that finds the ring full by that index (see
//! [`crate::model::Cq`]), so a CQ at least as deep as the WRs that can be outstanding on
//! it never overflows, even while the application posts as it polls.
//!
//! Completions of a QP that no longer exists, of another incarnation (the request id's
//! generation), or of a QP not attached to this CQ are dropped as they are read (libefa
//! reports them as EINVAL, which consumers ignore; efa-sim purges them).

use super::SpinLock;
use crate::model::cq::MAX_SUB_CQS;
use crate::model::{Completion, CompletionKind, Cq, Qp};
use crate::ring::cqe::{self, Cqe};
use crate::ring::Cursor;
use core::cell::UnsafeCell;
use efa_sys::io::{send_op_type, REGS_CQ_DB_ARM_MASK, REGS_CQ_DB_CMD_SN_SHIFT};

/// Which work queue slot a retired completion frees.
#[derive(Clone, Copy)]
enum Owner {
    None,
    Sq(*const Qp),
    Rq(*const Qp),
}

/// The completion under the cursor and what retiring it frees.
#[derive(Clone, Copy)]
struct Current {
    c: Completion,
    req_id: u16,
    owner: Owner,
}

struct PollState {
    /// Consumer positions, one per sub-CQ (the first only, without sub-CQs).
    ci: [Cursor; MAX_SUB_CQS],
    /// Entries consumed in all (libefa's `cq->cc`): the doorbell's consumer index.
    cc: u16,
    /// The sub-CQ looked at first by the next poll (libefa's `next_poll_idx`).
    next_sub: usize,
    /// The consumer index last written to the doorbell.
    told: u16,
    cur: Option<Current>,
    cmd_sn: u8,
    /// The QP the last send (`[0]`) and receive (`[1]`) completion named, found attached
    /// to this CQ: (QPN, QP). Saves the table lookup for runs of one QP's completions;
    /// `Qp::destroy` clears it (under this poll lock) before the QP can go away.
    seen: [(u16, *const Qp); 2],
}

/// A CQ's provider state: its poll lock and consumer position.
pub struct CqPoller {
    lock: SpinLock,
    st: UnsafeCell<PollState>,
}

// SAFETY: `st` is only touched with the poll lock held (callers promise it in the
// `unsafe fn`s); the raw QP pointers it keeps are used under the same lock, which QP
// destruction takes before a QP can go away (see `Qp::destroy`).
unsafe impl Sync for CqPoller {}
// SAFETY: as above.
unsafe impl Send for CqPoller {}

impl Default for CqPoller {
    fn default() -> Self {
        CqPoller::new()
    }
}

impl CqPoller {
    /// A consumer at slot 0, expecting phase 1 (the device's first lap).
    pub fn new() -> CqPoller {
        CqPoller {
            lock: SpinLock::new(),
            st: UnsafeCell::new(PollState {
                ci: [Cursor { count: 0, phase: 1 }; MAX_SUB_CQS],
                cc: 0,
                next_sub: 0,
                told: 0,
                cur: None,
                cmd_sn: 0,
                seen: [(0, core::ptr::null()); 2],
            }),
        }
    }

    /// Takes the poll lock (a poll session).
    #[inline]
    pub fn lock(&self) {
        self.lock.lock()
    }

    /// Releases the poll lock.
    #[inline]
    pub fn unlock(&self) {
        self.lock.unlock()
    }

    /// # Safety
    /// The caller holds the poll lock.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn st(&self) -> &mut PollState {
        // SAFETY: the caller holds the poll lock, so this is the only reference.
        unsafe { &mut *self.st.get() }
    }

    /// The completion under the cursor.
    ///
    /// # Safety
    /// The caller holds the poll lock.
    #[inline]
    pub unsafe fn current(&self) -> Option<&Completion> {
        // SAFETY: forwarded.
        unsafe { self.st() }.cur.as_ref().map(|c| &c.c)
    }

    /// Moves the cursor to the next completion of `cq` (None: the ring has none). The
    /// previous one must have been retired.
    ///
    /// # Safety
    /// The caller holds the poll lock; `cq` is the CQ this poller belongs to.
    #[inline(always)]
    pub unsafe fn next(&self, cq: &Cq) -> Option<&Completion> {
        // SAFETY: forwarded.
        let st = unsafe { self.st() };
        let ring = cq.ring();
        let (subs, depth) = (cq.sub_cqs() as usize, cq.depth());
        let mut raw = [0u8; cqe::SIZE];
        let mut progressed = false;
        loop {
            // The next pending entry, the sub-CQs in turn from `next_sub` (libefa's
            // round robin; one sub-CQ without them).
            let mut found = None;
            for i in 0..subs {
                let k = (st.next_sub + i) & (subs - 1);
                let slot = cq.slot_of(k, st.ci[k].count);
                let flags = cqe::head_flags(ring.load_head(slot));
                if cqe::phase_of(flags) == st.ci[k].phase {
                    found = Some((k, slot, flags));
                    break;
                }
            }
            let Some((k, slot, flags)) = found else {
                st.cur = None;
                // Nothing here: drive the device's inbound path ourselves (once), so
                // completions of frames already waiting appear without a thread hop.
                if !progressed {
                    progressed = true;
                    if cq.rt.progress() {
                        continue;
                    }
                }
                return None;
            };
            st.next_sub = (k + 1) & (subs - 1);
            // A send completion is 16 bytes; the rest of its slot is not read.
            let len = if cqe::is_recv_flags(flags) {
                cqe::SIZE
            } else {
                cqe::SEND_SIZE
            };
            ring.read_slot(slot, &mut raw[..len]);
            st.ci[k].advance(depth);
            st.cc = st.cc.wrapping_add(1);
            let e = Cqe::decode(&raw, cq.options().with_sgid);
            if let Some(qp) = attached(st, cq, e.qp_num, e.is_recv()) {
                if let Some(cur) = decode(qp, &e) {
                    st.cur = Some(cur);
                    return st.cur.as_ref().map(|c| &c.c);
                }
            }
            // Skipped (stale, or its QP gone): no retire will tell the device that its
            // slot is free, so tell it now (it loses completions that find the ring full).
            tell(st, cq, false);
        }
    }

    /// Retires the completion under the cursor (frees its WR's slot). The doorbell learns
    /// the consumer index first: a WR posted into the freed slot completes into a ring
    /// the device knows has room.
    ///
    /// # Safety
    /// The caller holds the poll lock; `cq` is the CQ this poller belongs to.
    #[inline(always)]
    pub unsafe fn retire(&self, cq: &Cq) {
        // SAFETY: forwarded.
        let st = unsafe { self.st() };
        if let Some(cur) = st.cur.take() {
            if st.told != st.cc {
                tell(st, cq, false);
            }
            match cur.owner {
                Owner::None => {}
                // SAFETY: the QP was attached to this CQ when read and cannot be destroyed
                // while the poll lock is held.
                Owner::Sq(qp) => unsafe { &*qp }.sq_provider().retire(cur.req_id),
                // SAFETY: as above.
                Owner::Rq(qp) => unsafe { &*qp }.rq_provider().retire(cur.req_id),
            }
        }
    }

    /// Tells the device how far the consumer got (CQ doorbell, consumer index).
    ///
    /// # Safety
    /// The caller holds the poll lock.
    #[inline]
    pub unsafe fn ring_doorbell(&self, cq: &Cq) {
        // SAFETY: forwarded.
        let st = unsafe { self.st() };
        tell(st, cq, false);
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`): the doorbell with the
    /// arm bit, then the device looks at it.
    pub fn arm(&self, cq: &Cq) {
        self.lock();
        // SAFETY: the lock is held.
        let st = unsafe { self.st() };
        cq.ring().doorbell().write(db_value(st, true));
        self.unlock();
        cq.armed_by_doorbell();
    }

    /// Forgets `qp` (it is being destroyed): later completions naming its QPN are looked
    /// up in the device's table again, and find it gone.
    ///
    /// # Safety
    /// The caller holds the poll lock.
    pub unsafe fn forget_qp(&self, qp: *const Qp) {
        // SAFETY: forwarded.
        let st = unsafe { self.st() };
        for s in &mut st.seen {
            if core::ptr::eq(s.1, qp) {
                *s = (0, core::ptr::null());
            }
        }
    }

    /// Counts a delivered CQ event (`ibv_get_cq_event`): the doorbell's command sequence
    /// number moves on, as libefa's `efa_cq_event` does.
    pub fn event_delivered(&self) {
        self.lock();
        // SAFETY: the lock is held.
        let st = unsafe { self.st() };
        st.cmd_sn = st.cmd_sn.wrapping_add(1);
        self.unlock();
    }

    /// Completions waiting: the one under the cursor plus the valid ones in the ring.
    ///
    /// # Safety
    /// The caller holds the poll lock; `cq` is the CQ this poller belongs to.
    pub unsafe fn waiting(&self, cq: &Cq) -> usize {
        // SAFETY: forwarded.
        let st = unsafe { self.st() };
        let ring = cq.ring();
        let mut n = usize::from(st.cur.is_some());
        let mut raw = [0u8; cqe::SIZE];
        for k in 0..cq.sub_cqs() as usize {
            let mut at = st.ci[k];
            for _ in 0..cq.depth() {
                let slot = cq.slot_of(k, at.count);
                if cqe::phase_of(cqe::head_flags(ring.load_head(slot))) != at.phase {
                    break;
                }
                ring.read_slot(slot, &mut raw);
                at.advance(cq.depth());
                let e = Cqe::decode(&raw, cq.options().with_sgid);
                if cq
                    .attached_qp(u32::from(e.qp_num), e.is_recv())
                    .is_some_and(|qp| decode(qp, &e).is_some())
                {
                    n += 1;
                }
            }
        }
        n
    }
}

/// Tells the device how far the consumer got: the doorbell's consumer index (entries
/// consumed in all, as libefa writes it) and, with sub-CQs, the position in each.
#[inline(always)]
fn tell(st: &mut PollState, cq: &Cq, arm: bool) {
    st.told = st.cc;
    let subs = cq.sub_cqs() as usize;
    if subs > 1 {
        for (k, at) in st.ci.iter().enumerate().take(subs) {
            cq.sub_consumed_to(k, at.count);
        }
    }
    cq.ring().doorbell().write(db_value(st, arm));
}

/// The CQ doorbell word: consumer index, command sequence number, arm bit.
fn db_value(st: &PollState, arm: bool) -> u32 {
    let mut v = u32::from(st.cc) | (u32::from(st.cmd_sn & 3) << REGS_CQ_DB_CMD_SN_SHIFT);
    if arm {
        v |= REGS_CQ_DB_ARM_MASK;
    }
    v
}

/// The live QP `qpn` attached to `cq` (as receive CQ when `recv`), remembered in `st`
/// for the next completion of the same QP. The pointer is valid while the caller holds
/// the poll lock (QP destruction takes it first, and clears `st.seen`).
#[inline(always)]
fn attached(st: &mut PollState, cq: &Cq, qpn: u16, recv: bool) -> Option<*const Qp> {
    let seen = &mut st.seen[usize::from(recv)];
    if seen.0 == qpn && !seen.1.is_null() {
        // SAFETY: remembered under this poll lock; destruction clears it under the same
        // lock before the QP can be dropped.
        return (!unsafe { &*seen.1 }.is_dead()).then_some(seen.1);
    }
    let qp = cq.attached_qp(u32::from(qpn), recv)?;
    *seen = (qpn, qp);
    Some(qp)
}

/// The completion `e` of `qp` stands for, or None when it is stale (another
/// incarnation).
#[inline(always)]
fn decode(qp: *const Qp, e: &Cqe) -> Option<Current> {
    // SAFETY: the caller found the QP live and attached to this CQ while holding the
    // poll lock, which QP destruction takes first.
    let q = unsafe { &*qp };
    let (wr_id, owner) = if !e.is_recv() {
        (q.sq_provider().wr_id(e.req_id)?, Owner::Sq(qp))
    } else if e.unsolicited {
        (0, Owner::None)
    } else {
        (q.rq_provider().wr_id(e.req_id)?, Owner::Rq(qp))
    };
    let kind = match (e.is_recv(), e.op_type) {
        (false, send_op_type::RDMA_WRITE) => CompletionKind::RdmaWrite,
        (false, send_op_type::RDMA_READ) => CompletionKind::RdmaRead,
        (false, _) => CompletionKind::Send,
        (true, send_op_type::RDMA_WRITE) => CompletionKind::RecvRdmaWithImm,
        (true, _) => CompletionKind::Recv,
    };
    let recv = e.is_recv();
    Some(Current {
        c: Completion {
            wr_id,
            status: e.status,
            kind,
            byte_len: if recv { e.length } else { 0 },
            imm_be: (recv && e.has_imm).then(|| e.imm.to_be()),
            qp_num: u32::from(e.qp_num),
            src_qp: if recv { u32::from(e.src_qp) } else { 0 },
            slid: if recv { e.ah } else { cqe::NO_AH },
            unsolicited: e.unsolicited,
            sgid: e.src_gid,
        },
        req_id: e.req_id,
        owner,
    })
}
