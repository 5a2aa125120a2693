//! The device side of a send queue: the SQ ring and the device's consumer position. On
//! a doorbell the device reads the WQEs between its position and the doorbell value,
//! validates each, and hands it to the requester (`Runtime::start_send`). The
//! consuming thread is whoever noticed the doorbell: the provider's posting thread
//! (right after its doorbell write) or the doorbell watcher (a consumer that rings
//! doorbells itself); one at a time, the other returns at once.
//!
//! Choices where the hardware is unconfirmed:
//! * A WQE whose phase bit is not the current lap's has not been written yet (or is left
//!   over from an earlier lap): the device stops there and looks again at the next
//!   doorbell (counted in [`crate::model::Stats::stale_wqes`]).
//! * A doorbell claiming more new WQEs than the ring holds is ignored
//!   ([`crate::model::Stats::bad_doorbells`]).
//! * Malformed WQEs complete with an error status, and a WQE without `COMP_REQ`
//!   completes only on error ([`super::send_wqe`] decodes and checks each WQE).
//! * WQEs are executed in RTS and SQD; in ERR they complete with FLUSHED; in other
//!   states they wait in the ring.

use super::runtime::doorbell::Doorbell;
use super::runtime::stats::bump;
use super::runtime::strict;
use super::runtime::Runtime;
use super::send_wqe::execute;
use super::{Qp, QpState};
use crate::provider::SpinMutex;
use crate::rcu::Guard;
use crate::ring::wqe::{WqeBuf, PHASE_BYTE};
use crate::ring::{Cursor, Ring};
use efa_sys::io::TX_META_DESC_PHASE_MASK;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

/// The store a [`DeviceSq::process_observed`] call judges: its value `db`, the value of
/// the store observed before it (`previous`), and the most WQEs a store may announce.
#[derive(Clone, Copy)]
struct Limit {
    max_batch: u32,
    previous: u16,
    db: u16,
}

impl Limit {
    /// Which of the `new` WQEs after the consumer position `at` the `max_batch` rule
    /// rejects, as the range `(first, last]` of their ordinals in the pass (from 1): this
    /// store's beyond its first `max_batch`. WQEs announced by earlier stores come before
    /// this store's, those of later stores (another thread's, whose calls found this one
    /// consuming) after them, and neither is judged; nothing is when the device has
    /// already consumed past this store.
    fn rejected(self, at: u16, new: u32) -> (u32, u32) {
        let upto = u32::from(self.db.wrapping_sub(at));
        if upto > new {
            return (0, 0);
        }
        // This store's WQEs: after the previous store's value, or after the position
        // where the device consumed past that.
        let own = u32::from(self.db.wrapping_sub(self.previous)).min(upto);
        ((upto - own).saturating_add(self.max_batch), upto)
    }
}

struct Consumer {
    at: Cursor,
    /// Where the device last stopped at a stale WQE (counted once per stall).
    stalled: Option<u16>,
    /// The QP left the device's table: its counts go to the device's from now on.
    folded: bool,
    /// Resets (and the start of a reset): strict mode drops WQEs held across one.
    resets: u64,
    /// Strict mode's window of consumed WQEs (8 KiB: kept off the stack of every
    /// consumer, allocated at the first strict doorbell).
    window: Option<Box<strict::Window>>,
}

/// The device side of a send queue.
pub(crate) struct DeviceSq {
    ring: Ring,
    at: SpinMutex<Consumer>,
    /// Mirror of the consumer position for lock-free "anything new?" checks.
    consumed: AtomicU16,
    /// The doorbell value of the last store the device saw as such
    /// ([`DeviceSq::process_observed`]), recorded whether or not that call could consume:
    /// the next store announces only the WQEs after it.
    observed: AtomicU16,
    /// This queue's share of [`crate::model::Stats::sq_doorbells`] and `direct`, written
    /// only by the consumer (under `at`) with a plain load and store: a locked add to the
    /// device's counters cost two full barriers per doorbell. [`Runtime::stats`] adds
    /// them up.
    doorbells: AtomicU64,
    direct: AtomicU64,
    /// Unique in the process (QPNs are reused): names the queue of a held WQE.
    pub(crate) id: u64,
}

/// Ids of [`DeviceSq`]s.
static NEXT_SQ_ID: AtomicU64 = AtomicU64::new(1);

impl DeviceSq {
    /// A queue over `ring`.
    pub fn new(ring: Ring) -> DeviceSq {
        DeviceSq {
            ring,
            at: SpinMutex::new(Consumer {
                at: Cursor::default(),
                stalled: None,
                folded: false,
                resets: 0,
                window: None,
            }),
            id: NEXT_SQ_ID.fetch_add(1, Ordering::Relaxed),
            consumed: AtomicU16::new(0),
            observed: AtomicU16::new(0),
            doorbells: AtomicU64::new(0),
            direct: AtomicU64::new(0),
        }
    }

    /// The doorbells that brought WQEs, and the WQEs executed on the same-process path,
    /// counted here and not yet in the device's counters.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.doorbells.load(Ordering::Relaxed),
            self.direct.load(Ordering::Relaxed),
        )
    }

    /// The QP leaves the device: its counts move to the device's counters, and later
    /// ones (a doorbell consumed while it was being destroyed) go there directly.
    pub fn fold_counts(&self, rt: &Runtime) {
        let mut c = self.at.lock();
        c.folded = true;
        let (doorbells, direct) = self.counts();
        rt.stats
            .sq_doorbells
            .fetch_add(doorbells, Ordering::Relaxed);
        rt.stats.direct.fetch_add(direct, Ordering::Relaxed);
        self.doorbells.store(0, Ordering::Relaxed);
        self.direct.store(0, Ordering::Relaxed);
    }

    /// Counts a doorbell that brought WQEs, `direct` of them executed on the
    /// same-process path (the caller holds the consumer lock `c`).
    #[inline]
    fn count(&self, c: &Consumer, rt: &Runtime, direct: u64) {
        if c.folded {
            bump(&rt.stats.sq_doorbells);
            rt.stats.direct.fetch_add(direct, Ordering::Relaxed);
            return;
        }
        let add = |a: &AtomicU64, n: u64| a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.doorbells, 1);
        if direct > 0 {
            add(&self.direct, direct);
        }
    }

    /// The ring (the provider and direct consumers write it).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Whether the doorbell announces WQEs the device has not consumed.
    pub fn has_news(&self) -> bool {
        self.ring.doorbell().read() as u16 != self.consumed.load(Ordering::Acquire)
    }

    /// Moving to RESET: consumer position 0 (the phase carries on, as the provider's
    /// does), doorbell 0.
    pub fn reset(&self) {
        let mut c = self.at.lock();
        c.at.count = 0;
        c.stalled = None;
        c.resets += 1;
        self.ring.doorbell().write(0);
        self.consumed.store(0, Ordering::Release);
        self.observed.store(0, Ordering::Release);
    }

    /// A reset begins: WQEs held by strict mode are dropped from now on, and one that
    /// executes now has finished when this returns (before the QP's requests are purged).
    pub fn quiesce(&self) {
        self.at.lock().resets += 1;
    }

    /// Waits until no held WQE of this queue executes (the QP went to ERR: later ones see
    /// it and complete with FLUSHED).
    pub fn settle(&self) {
        drop(self.at.lock());
    }

    /// Strict mode: executes the held WQE `h` of this queue, unless the QP was reset or
    /// destroyed since it was consumed (then it is dropped, as the ring's WQEs are); in a
    /// state that executes no WQEs it is held again.
    pub(crate) fn run_held(
        &self,
        rt: &Runtime,
        qp: &Qp,
        (s, h): (&strict::Strict, strict::Held),
        g: &Guard,
    ) {
        let c = self.at.lock();
        if c.folded || c.resets != h.resets {
            return;
        }
        let state = qp.state();
        if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
            drop(c);
            return s.hold(strict::Held { due: s.due(), ..h });
        }
        let mut shared = Doorbell::default();
        let direct = execute(rt, qp, state, &h.wqe, h.size, g, &mut shared);
        shared.flush(qp);
        rt.stats.direct.fetch_add(direct, Ordering::Relaxed);
        if h.lead && state != QpState::Err {
            // Strict mode: what the lead overtook runs only once it has completed.
            s.defer(self.id, h.resets, strict::after_lead(direct > 0));
        }
        drop(c);
        // A doorbell rung meanwhile found the queue busy.
        if self.has_news() {
            self.process(rt, qp);
        }
    }

    /// Consumes the WQEs the doorbell announces. Returns whether it consumed any.
    /// Never inlined: efa-bench's instruction counts take the device's work out of the
    /// posting thread's by this symbol.
    #[inline(never)]
    pub fn process(&self, rt: &Runtime, qp: &Qp) -> bool {
        self.process_limited(rt, qp, None)
    }

    /// [`DeviceSq::process`] for a doorbell store the device saw as such (a consumer's
    /// call after its store, or the trap): in strict mode the WQEs this store announces
    /// beyond `max_batch` are rejected (`super::ring_rules`). A store announces the WQEs
    /// between the previous store's value and its own, not those between the device's
    /// position and it: when the previous store's call found another thread consuming
    /// (the watcher, a poller running held WQEs) and that thread had read the doorbell
    /// before the store, the WQEs of both stores are still new here, and a producer that
    /// rang every `max_batch` (rdma-core's `efa_post_send`) did nothing wrong. Only the
    /// first pass is limited: doorbells rung while it ran are looked at together, as the
    /// watcher does.
    pub fn process_observed(&self, rt: &Runtime, qp: &Qp, max_batch: u32) -> bool {
        let limit = rt.strict.is_some().then(|| {
            let db = self.ring.doorbell().read() as u16;
            let previous = self.observed.swap(db, Ordering::AcqRel);
            Limit {
                max_batch,
                previous,
                db,
            }
        });
        self.process_limited(rt, qp, limit)
    }

    fn process_limited(&self, rt: &Runtime, qp: &Qp, mut limit: Option<Limit>) -> bool {
        let mut any = false;
        loop {
            let Some(mut guard) = self.at.try_lock() else {
                return any; // another thread is consuming; it looks again when done
            };
            let c = &mut *guard;
            let state = qp.state();
            if !matches!(state, QpState::Rts | QpState::Sqd | QpState::Err) {
                return any;
            }
            let db = self.ring.doorbell().read() as u16;
            let entries = self.ring.entries();
            let new = u32::from(db.wrapping_sub(c.at.count));
            if new == 0 {
                return any;
            }
            if new > entries {
                if c.stalled != Some(db) {
                    bump(&rt.stats.bad_doorbells);
                    c.stalled = Some(db);
                }
                return any;
            }
            let mut consumed = 0u32;
            let mut direct = 0u64;
            // One read section and one datagram bundle per doorbell, not per WQE.
            let g = Guard::enter();
            let mut shared = Doorbell::default();
            // A single WQE has nothing to bundle with (and skips two thread-local
            // look-ups).
            let bundle = new > 1;
            if bundle {
                rt.begin_batch();
            }
            let mut raw = WqeBuf::default();
            let size = self.ring.entry_size();
            // Strict mode's rules for consumer-written rings (super::ring_rules).
            let strict_rings = rt.strict.is_some();
            let rejected = limit.take().map_or((0, 0), |l| l.rejected(c.at.count, new));
            // Strict: a doorbell store wider than the 32-bit register announces nothing.
            let wide = strict_rings && self.ring.doorbell().take_wide_store();
            while c.at.count != db {
                let slot = u32::from(c.at.count);
                // The phase byte first, by an acquire load: a direct consumer may fix a
                // stale phase in place after the doorbell, publishing the WQE with it.
                let stale =
                    self.ring.load_byte(slot, PHASE_BYTE) & TX_META_DESC_PHASE_MASK != c.at.phase;
                if stale && !strict_rings {
                    if c.stalled != Some(c.at.count) {
                        bump(&rt.stats.stale_wqes);
                        c.stalled = Some(c.at.count);
                    }
                    break;
                }
                self.ring.read_slot(slot, &mut raw.0[..size]);
                if strict_rings {
                    super::ring_rules::poison(&self.ring, slot, size, c.at.phase);
                }
                c.at.advance(entries);
                c.stalled = None;
                consumed += 1;
                self.consumed.store(c.at.count, Ordering::Release);
                if stale {
                    bump(&rt.stats.stale_wqes);
                    super::ring_rules::reject(rt, qp, &raw, &mut shared);
                    continue;
                }
                if wide {
                    bump(&rt.stats.wide_doorbells);
                    super::ring_rules::reject(rt, qp, &raw, &mut shared);
                    continue;
                }
                if consumed > rejected.0 && consumed <= rejected.1 {
                    bump(&rt.stats.batch_overruns);
                    super::ring_rules::reject(rt, qp, &raw, &mut shared);
                    continue;
                }
                if let Some(s) = &rt.strict {
                    // Strict mode: the WQEs of this doorbell, executed in a permutation.
                    let window = c.window.get_or_insert_with(Default::default);
                    window.push(raw);
                    if window.is_full() {
                        let at = (self.id, size, state, c.resets);
                        direct += strict::permuted(rt, qp, (s, window, at), &g, &mut shared);
                    }
                    continue;
                }
                direct += execute(rt, qp, state, &raw, size, &g, &mut shared);
            }
            if let (Some(s), Some(window)) = (&rt.strict, c.window.as_mut()) {
                let at = (self.id, size, state, c.resets);
                direct += strict::permuted(rt, qp, (s, window, at), &g, &mut shared);
            }
            // The doorbell's completions go into the CQ before its datagrams leave and
            // before another thread may consume the ring.
            shared.flush(qp);
            if bundle {
                rt.end_batch();
            }
            drop(g);
            if consumed > 0 {
                any = true;
                self.count(c, rt, direct);
            }
            drop(guard);
            // A doorbell rung while we held the position found it busy: look again.
            if self.ring.doorbell().read() as u16 == db {
                return any;
            }
        }
    }
}

#[cfg(test)]
#[path = "send_queue_tests.rs"]
mod tests;
