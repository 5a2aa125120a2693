//! Completion queues. The device writes 32-byte completions into the CQ ring with the
//! phase bit of the current lap; the provider's [`CqPoller`] reads them. The CQ doorbell
//! carries the consumer index (written by the provider after every poll that consumed
//! entries, as libefa does when the CQ has a doorbell) and the arm bit.
//!
//! Overflow (README "CQ overflow"; hardware behaviour unconfirmed, model §3.6): a
//! completion that finds the ring full (by the consumer index of the doorbell) is lost,
//! and the CQ is broken from then on: every later completion for it is lost too. The
//! completions already in the ring stay pollable. No async event is raised (the EFA
//! kernel driver has no path that dispatches `IB_EVENT_CQ_ERR`) and polls report no
//! error (libefa cannot tell): polling finds the ring empty once it is drained. Lost
//! completions are counted in [`crate::model::Stats::cq_overflows`]; their WRs' queue
//! slots are never freed. The device never overwrites an unpolled completion, and a
//! direct consumer that never writes the doorbell sees at most one ring of completions.
//! * Sub-CQs (first-generation EFA: the profile's `sub_cqs_per_cq`, 4 by default for
//!   `vendor_part_id` 0xefa0): the ring holds that many rings of the CQ's depth end to
//!   end, as rdma-core's `create_cq` lays them out. A QP's send completions go to one of
//!   them and its receive completions to another (`Cq::sub_of`); efa-sim's provider polls
//!   them in turn, as libefa does. `efadv_query_cq` describes the first only (rdma-core's
//!   answer) and hands out no CQ doorbell (first-generation devices had none); the device
//!   judges each sub-CQ full by the provider's position in it.
//! * Arming (`ibv_req_notify_cq`, or a doorbell write with the arm bit) fires the
//!   notifier once, at the next completion, or at once if completions are waiting.
//!   Each arm carries the command sequence number (`cmd_sn`, bits 30:29: the events the
//!   consumer has taken so far, libefa's `efa_cq_event` count): an arm with the number
//!   of an arm already answered by an event is a repeat and raises nothing (one event
//!   per arm), and a doorbell write without the arm bit (libefa's polls) leaves an arm
//!   in place.

use super::runtime::stats::bump;
use super::runtime::Runtime;
use super::{profile, Completion, Errno, Qp};
use crate::provider::poll::CqPoller;
use crate::provider::SpinMutex;
use crate::rcu::Guard;
use crate::ring::cqe::{self, Cqe};
use crate::ring::{Cursor, Layout, Ring};
use efa_sys::io::{
    REGS_CQ_DB_ARM_MASK, REGS_CQ_DB_CMD_SN_MASK, REGS_CQ_DB_CMD_SN_SHIFT,
    REGS_CQ_DB_CONSUMER_INDEX_MASK,
};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, Default)]
/// Extended CQ options (efadv_create_cq wc_flags).
pub struct CqOptions {
    /// EFADV_WC_EX_WITH_SGID requested.
    pub with_sgid: bool,
    /// EFADV_WC_EX_WITH_IS_UNSOLICITED requested.
    pub with_unsolicited: bool,
}

/// Most sub-CQs a CQ may have (the profile's `sub_cqs_per_cq`).
pub const MAX_SUB_CQS: usize = 8;

/// The device's producer state: one position per sub-CQ (the first only, without).
struct Producer {
    at: [Cursor; MAX_SUB_CQS],
}

type Notifier = Arc<dyn Fn() + Send + Sync>;

/// Completion queue.
pub struct Cq {
    pub(crate) rt: Arc<Runtime>,
    /// Entries of each sub-CQ (of the CQ, without sub-CQs).
    depth: u32,
    /// Sub-CQs (1: none).
    subs: u32,
    /// With sub-CQs: how far efa-sim's provider consumed each (the device's measure of
    /// room; without sub-CQs the doorbell's consumer index is).
    sub_consumed: [AtomicU16; MAX_SUB_CQS],
    opts: CqOptions,
    ring: Ring,
    prod: SpinMutex<Producer>,
    /// The ring overflowed once: every later completion is lost.
    overflowed: AtomicBool,
    armed: AtomicBool,
    /// The doorbell value the device last acted on (the watcher compares against it).
    seen_db: AtomicU32,
    /// `cmd_sn` of the arm in force (meaningful while `armed`).
    armed_sn: AtomicU32,
    /// `cmd_sn` of the last arm an event answered ([`NO_SN`] before the first).
    answered_sn: AtomicU32,
    notifier: Mutex<Option<Notifier>>,
    users: AtomicU32,
    dead: AtomicBool,
    poller: CqPoller,
}

/// No `cmd_sn` (it has 2 bits).
const NO_SN: u32 = u32::MAX;

impl Cq {
    pub(crate) fn create(
        rt: Arc<Runtime>,
        depth: u32,
        opts: CqOptions,
    ) -> Result<(Arc<Cq>, u32), Errno> {
        let p = &rt.profile;
        // libefa's efadv_create_cq checks the wc_flags before the kernel sees the depth.
        if opts.with_sgid && p.device_caps & profile::CAP_CQ_WITH_SGID == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if opts.with_unsolicited && p.device_caps & profile::CAP_UNSOLICITED_WRITE_RECV == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // rc providers/efa/verbs.c create_cq rounds cqe up to a power of two, then kernel
        // efa_verbs.c efa_create_cq: EINVAL when that exceeds max_cq_depth (`max_cqe`), so a
        // request rounded up past a limit that is not a power of two fails too. (The first
        // test also keeps next_power_of_two from overflowing.)
        if depth > p.max_cqe || depth.max(1).next_power_of_two() > p.max_cqe {
            return Err(libc::EINVAL);
        }
        // Beyond max_cq the device fails the admin CREATE_CQ (no check in the kernel or
        // libefa): kernel efa_com.c efa_com_comp_status_to_errno maps
        // RESOURCE_ALLOCATION_FAILURE to ENOMEM. Which status the device sends is
        // UNCONFIRMED (model §7); ENOMEM is the plausible one.
        let n = rt.cq_count.fetch_add(1, Ordering::AcqRel);
        if n >= p.max_cq {
            rt.cq_count.fetch_sub(1, Ordering::AcqRel);
            return Err(libc::ENOMEM);
        }
        let granted = depth.max(1).next_power_of_two();
        let subs = p.sub_cqs();
        let ring = match Ring::new(granted * subs, cqe::SIZE) {
            Ok(r) => r,
            Err(e) => {
                rt.cq_count.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        };
        let cq = Arc::new(Cq {
            rt,
            depth: granted,
            subs,
            sub_consumed: Default::default(),
            opts,
            ring,
            prod: SpinMutex::new(Producer {
                // The first lap carries phase 1: zeroed memory holds no completion.
                at: [Cursor { count: 0, phase: 1 }; MAX_SUB_CQS],
            }),
            overflowed: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            seen_db: AtomicU32::new(0),
            armed_sn: AtomicU32::new(NO_SN),
            answered_sn: AtomicU32::new(NO_SN),
            notifier: Mutex::new(None),
            users: AtomicU32::new(0),
            dead: AtomicBool::new(false),
            poller: CqPoller::new(),
        });
        Ok((cq, granted))
    }

    /// Granted depth (ring entries).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Options it was created with.
    pub fn options(&self) -> CqOptions {
        self.opts
    }

    /// Whether the device hands out its rings (profile `ring_query`).
    pub fn hands_out_rings(&self) -> bool {
        self.rt.profile.ring_query
    }

    /// The raw completion ring (`efadv_query_cq`). From now on the device also notices
    /// doorbell writes it is not told about (see [`crate::model::watcher`]).
    pub fn ring_layout(self: &Arc<Self>) -> Layout {
        self.rt.watcher.watch_cq(&self.rt, self);
        let mut l = self.ring.layout(self.depth);
        // The first sub-CQ's entries (`ibvcq->cqe`, as rdma-core answers), and no doorbell
        // where there are sub-CQs.
        l.num_entries = self.depth;
        if self.subs > 1 {
            l.doorbell = core::ptr::null_mut();
        }
        l
    }

    /// Sub-CQs (1: none).
    pub fn sub_cqs(&self) -> u32 {
        self.subs
    }

    /// The sub-CQ that completions of QP `qpn` go to (its receive completions when
    /// `recv`): the send and receive completions of one QP on different ones, as the
    /// kernel's `send_sub_cq_idx` / `recv_sub_cq_idx` may place them.
    #[inline(always)]
    pub(crate) fn sub_of(&self, qpn: u16, recv: bool) -> usize {
        if self.subs == 1 {
            return 0;
        }
        (usize::from(qpn) * 2 + usize::from(recv)) & (self.subs as usize - 1)
    }

    /// The ring slot of position `count` of sub-CQ `sub`.
    #[inline(always)]
    pub(crate) fn slot_of(&self, sub: usize, count: u16) -> u32 {
        sub as u32 * self.depth + (u32::from(count) & (self.depth - 1))
    }

    /// efa-sim's provider consumed sub-CQ `sub` up to `count` (with sub-CQs; without, the
    /// doorbell says it).
    #[inline(always)]
    pub(crate) fn sub_consumed_to(&self, sub: usize, count: u16) {
        if let Some(c) = self.sub_consumed.get(sub) {
            c.store(count, Ordering::Release);
        }
    }

    /// The ring.
    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The provider's consumer of this CQ.
    pub(crate) fn poller(&self) -> &CqPoller {
        &self.poller
    }

    /// Oldest unretired completion, or None. Does not retire it.
    pub fn peek(&self) -> Option<Completion> {
        self.poller.lock();
        // SAFETY: the poll lock is held; this is the poller's CQ.
        let c = unsafe {
            match self.poller.current() {
                Some(c) => Some(*c),
                None => self.poller.next(self).copied(),
            }
        };
        self.poller.unlock();
        c
    }

    /// Retires the completion returned by the last `peek` (frees its SQ/RQ slot).
    pub fn retire(&self) {
        self.poller.lock();
        // SAFETY: the poll lock is held; this is the poller's CQ.
        unsafe {
            if self.poller.current().is_some() {
                self.poller.retire(self);
                self.poller.ring_doorbell(self);
            }
        }
        self.poller.unlock();
    }

    /// Polls up to `max` completions, oldest first, as `ibv_poll_cq` does: `f` sees each
    /// one, which is then retired. The poll lock is taken once for all of them and the
    /// consumer index goes to the doorbell once (`peek` + `retire` take the lock twice
    /// per completion). A completion `peek` returned and `retire` did not is the first.
    /// Returns how many were polled.
    pub fn poll(&self, max: usize, mut f: impl FnMut(&Completion)) -> usize {
        let _held = PollSession::open(&self.poller);
        let mut n = 0;
        // SAFETY: the poll lock is held until `_held` drops; this is the poller's CQ.
        unsafe {
            while n < max {
                let c = match self.poller.current() {
                    Some(c) => c,
                    None => match self.poller.next(self) {
                        Some(c) => c,
                        None => break,
                    },
                };
                f(c);
                self.poller.retire(self);
                n += 1;
            }
            if n > 0 {
                self.poller.ring_doorbell(self);
            }
        }
        n
    }

    /// The oldest completion, retired: `peek` and `retire` under one poll lock.
    pub fn take(&self) -> Option<Completion> {
        let mut got = None;
        self.poll(1, |c| got = Some(*c));
        got
    }

    /// Completions waiting (not yet retired).
    pub fn len(&self) -> usize {
        self.poller.lock();
        // SAFETY: the poll lock is held; this is the poller's CQ.
        let n = unsafe { self.poller.waiting(self) };
        self.poller.unlock();
        n
    }

    /// Whether the ring overflowed (completions were lost; none is written any more).
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Acquire)
    }

    /// Whether no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arms a one-shot notification (ibv_req_notify_cq with solicited_only = 0): the
    /// provider writes the CQ doorbell with the arm bit. If completions are already
    /// waiting the notifier fires at once, so an arm-then-poll consumer never misses one.
    pub fn arm(&self) {
        self.poller.arm(self);
        self.rt.pollers_park();
    }

    /// A completion event of this CQ was taken by the consumer (`ibv_get_cq_event`): the
    /// command sequence number its next arm carries moves on (libefa's `efa_cq_event`).
    pub fn event_delivered(&self) {
        self.poller.event_delivered();
    }

    /// Called (from any thread) once per arm when a completion is added.
    pub fn set_notifier(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.notifier.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::from(f));
    }

    /// EBUSY while a QP uses it.
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.rt.cq_count.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub(crate) fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release_user(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    /// How far sub-CQ `sub` was consumed: the consumer index the doorbell last reported
    /// (without sub-CQs), else the provider's position in it.
    #[inline(always)]
    fn consumer_index(&self, sub: usize) -> u16 {
        if self.subs == 1 {
            return (self.ring.doorbell().read() & REGS_CQ_DB_CONSUMER_INDEX_MASK) as u16;
        }
        self.sub_consumed
            .get(sub)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Writes a completion into the next slot (the caller holds the producer lock and
    /// checked there is room): every byte after the first word, then the first word, which
    /// holds the flags with the phase, by one atomic release store (`Ring::publish_slot`).
    #[inline(always)]
    fn write(&self, p: &mut Producer, sub: usize, e: &Cqe) {
        let at = &mut p.at[sub];
        let slot = self.slot_of(sub, at.count);
        // A send completion is the 16-byte efa_io_tx_cdesc; the rest of the slot is unused.
        // Strict mode writes the entry in pieces, its phase last (Ring::publish_slot_torn).
        let publish = if self.rt.strict.is_some() {
            Ring::publish_slot_torn
        } else {
            Ring::publish_slot
        };
        if e.is_recv() {
            publish(&self.ring, slot, &e.encode(at.phase));
        } else {
            publish(&self.ring, slot, &e.encode_common(at.phase));
        }
        at.advance(self.depth);
    }

    /// The device adds a completion (lost if the ring is full, see the module doc).
    #[inline]
    pub(crate) fn push(&self, e: &Cqe) {
        self.push_inline(e)
    }

    /// [`Cq::push`] of a send completion, inlined into the requester (its fields are
    /// known there: no generic encode).
    #[inline(always)]
    pub(crate) fn push_send(&self, qp_num: u16, req_id: u16, status: u8, op_type: u8) {
        self.push_inline(&Cqe::send(qp_num, req_id, status, op_type))
    }

    /// Send completions of one doorbell of `qp_num` (`(req_id, status, op_type)`, in
    /// order), written under one producer lock with one notification: the lock is a
    /// locked instruction per acquisition, and a doorbell of 32 WQEs took it 32 times.
    #[inline]
    pub(crate) fn push_sends(&self, qp_num: u16, done: &[(u16, u8, u8)]) {
        let mut wrote = false;
        {
            let mut p = self.prod.lock();
            for &(req_id, status, op_type) in done {
                wrote |= self.add(&mut p, &Cqe::send(qp_num, req_id, status, op_type));
            }
        }
        if wrote {
            self.notify();
        }
    }

    #[inline(always)]
    fn push_inline(&self, e: &Cqe) {
        let wrote = {
            let mut p = self.prod.lock();
            self.add(&mut p, e)
        };
        if wrote {
            self.notify();
        }
    }

    /// Writes `e` into the ring, or loses it when the ring is full or overflowed before
    /// (the producer lock is held). Returns whether it was written.
    #[inline(always)]
    fn add(&self, p: &mut Producer, e: &Cqe) -> bool {
        let sub = self.sub_of(e.qp_num, e.is_recv());
        let used = u32::from(p.at[sub].count.wrapping_sub(self.consumer_index(sub)));
        if used >= self.depth || self.overflowed.load(Ordering::Relaxed) {
            self.lose();
            return false;
        }
        self.write(p, sub, e);
        true
    }

    /// A completion found the ring full: it is lost and the CQ stays broken.
    #[cold]
    fn lose(&self) {
        self.overflowed.store(true, Ordering::Release);
        bump(&self.rt.stats.cq_overflows);
    }

    /// The doorbell was written with the arm bit (by efa-sim's provider, which calls this
    /// right after its store).
    pub(crate) fn armed_by_doorbell(&self) {
        let db = self.ring.doorbell().read();
        self.seen_db.store(db, Ordering::Release);
        self.arm_request(db);
    }

    /// An arm request of doorbell value `db`: ignored when an event already answered an
    /// arm of its `cmd_sn`, else the CQ is armed (and fires at once if completions wait).
    fn arm_request(&self, db: u32) {
        let sn = (db & REGS_CQ_DB_CMD_SN_MASK) >> REGS_CQ_DB_CMD_SN_SHIFT;
        if self.answered_sn.load(Ordering::Acquire) == sn {
            bump(&self.rt.stats.repeated_arms);
            return;
        }
        self.armed_sn.store(sn, Ordering::Relaxed);
        self.armed.store(true, Ordering::Release);
        let pending = {
            let p = self.prod.lock();
            (0..self.subs as usize).any(|k| p.at[k].count != self.consumer_index(k))
        };
        if pending {
            self.notify();
        }
    }

    /// Acts on a doorbell write the device did not see through the provider (the
    /// watcher, or a direct consumer's `efa_sim_direct_cq_doorbell`/progress call, for
    /// CQs whose ring was handed out). Returns whether it changed. The device samples
    /// the register here, so a consumer that stores an arm and then a poll's write
    /// before either call loses the arm: efa-sim's limit, not the NIC's (a NIC sees
    /// every write).
    pub(crate) fn doorbell_written(&self) -> bool {
        let db = self.ring.doorbell().read();
        if self.seen_db.load(Ordering::Relaxed) == db
            || self.seen_db.swap(db, Ordering::AcqRel) == db
        {
            return false;
        }
        if db & REGS_CQ_DB_ARM_MASK != 0 {
            self.arm_request(db);
        }
        true
    }

    /// A direct consumer found this CQ empty: the device reads its doorbell and does the
    /// device's pending work, as efa-sim's provider poll does. Whether anything happened.
    pub(crate) fn progress(&self) -> bool {
        let db = self.doorbell_written();
        self.rt.progress() || db
    }

    #[inline]
    fn notify(&self) {
        // Most completions find the CQ unarmed: a load, no read-modify-write.
        if self.armed.load(Ordering::Acquire) {
            self.notify_armed();
        }
    }

    #[cold]
    fn notify_armed(&self) {
        if self.armed.swap(false, Ordering::AcqRel) {
            self.answered_sn
                .store(self.armed_sn.load(Ordering::Relaxed), Ordering::Release);
            let f = self
                .notifier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(f) = f {
                f();
            }
        }
    }

    /// The live QP `qpn` if it is attached to this CQ (as receive CQ for `recv`
    /// completions, else as send CQ). The pointer stays valid while the caller holds
    /// this CQ's poll lock: QP destruction takes the poll locks of its CQs first.
    pub(crate) fn attached_qp(&self, qpn: u32, recv: bool) -> Option<*const Qp> {
        let g = Guard::enter();
        let qp = self.rt.qp(qpn, &g)?;
        let cq = if recv { qp.recv_cq() } else { qp.send_cq() };
        core::ptr::eq(Arc::as_ptr(cq), self).then_some(qp as *const Qp)
    }
}

/// The poll lock of a CQ, held until dropped (also when a caller's closure panics).
struct PollSession<'p>(&'p CqPoller);

impl<'p> PollSession<'p> {
    fn open(p: &'p CqPoller) -> PollSession<'p> {
        p.lock();
        PollSession(p)
    }
}

impl Drop for PollSession<'_> {
    fn drop(&mut self) {
        self.0.unlock();
    }
}
