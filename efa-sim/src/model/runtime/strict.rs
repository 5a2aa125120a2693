//! Strict mode (`EFA_SIM_PROFILE=strict`, the profile key `strict`): the device breaks
//! every order SRD does not promise, deliberately and in every run, so that code relying
//! on one fails on efa-sim the first time it runs.
//!
//! * **Each doorbell runs in reverse.** The WQEs one doorbell brings (at most
//!   [`WINDOW`] consecutive WQEs of the QP per window: a larger doorbell is cut into
//!   windows) execute last-posted first. The last-posted one (the window's *lead*) is
//!   held [`GRACE_US`] µs, so that a doorbell rung right after overtakes it; every
//!   earlier one is held until [`OVERTAKE_US`] µs after the lead ran (when the lead went
//!   over datagrams, whose completion needs a round trip: [`DATAGRAM_OVERTAKE_US`]), then
//!   they run in reverse posting order, [`STEP_US`] apart. So the body of an RDMA write
//!   posted with the write-with-immediate or SEND that announces it in one doorbell
//!   lands only after the announcement completed, at both ends, in every run.
//! * **Later doorbells overtake earlier ones.** When a doorbell of a QP comes while
//!   WQEs of earlier doorbells of that QP are still held, those are pushed back behind
//!   the new window's WQEs. So a write announced by a SEND of a separate doorbell posted
//!   before the write's completion lands after the announcement too; SENDs posted back
//!   to back arrive newest first.
//! * **Who runs a held WQE.** A poller of one of the device's CQs runs it once due; the
//!   engine thread (for consumers that never call into efa-sim) a lead
//!   [`ENGINE_LEAD_LAG_US`] and an overtaken WQE [`ENGINE_LAG_MS`] later. A program
//!   that waits for the write's completion polls its send CQ; one that reads the body on
//!   the announcement alone does not poll the initiator's device before it reads, so
//!   the body is still missing when the scheduler delays the reading thread by
//!   milliseconds.
//! * **Bounded.** No WQE is held more than [`MAX_HOLD_MS`] ms after it was consumed (a
//!   stream that never pauses gets order back there), and a held WQE runs even if no
//!   later one ever comes. A QP moved to ERR completes its held WQEs with FLUSHED; a
//!   reset or destroy drops them.
//! * **What SRD guarantees still holds.** Each WR's own data lands before its own
//!   completion at both ends, on every path (the same-process direct path, shared
//!   memory, UDP, `process_vm` copies, datagram chunks), because the whole WQE is held,
//!   not its completion.
//! * **Receives** are consumed in posting (ring) order, as SRD does (model §3.5): with the
//!   reversal, a peer's later message lands in the earlier posted buffer, and a QP's
//!   messages to one target arrive newest first.
//! * **Delays.** Every datagram of the device is held back a random 0..=1 ms with
//!   probability 0.5 (`reorder=0.5` of `EFA_SIM_FAULTS`, unless `EFA_SIM_FAULTS` sets
//!   `reorder` itself; the other fault knobs combine as usual). The same-process direct
//!   path stays on (faults alone turn it off).
//!
//! **The `reorder` fault knob** without strict mode is the seeded, random explorer: a
//! fraction `reorder` of the windows runs in a random permutation; a WQE a later-posted
//! one overtook is held [`HOLD_MIN_US`]..=[`HOLD_MAX_US`] µs. The permutation and hold
//! times come from one random stream per device, seeded from the `seed=` of
//! `EFA_SIM_FAULTS` (0x5eed when set without `seed=`) and the device index; a Rust test
//! can restart it with [`crate::model::Device::reseed_strict`].

use super::doorbell::Doorbell;
use super::Runtime;
use crate::model::send_wqe::execute;
use crate::model::{Qp, QpState};
use crate::rcu::Guard;
use crate::ring::wqe::WqeBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most consecutive WQEs of one QP one window covers (a doorbell's WQEs, cut into
/// windows of this size).
pub const WINDOW: usize = 64;
/// Strict mode: how long a window's lead (its last-posted WQE, which runs first) is held,
/// so that a doorbell rung right after it overtakes it.
pub const GRACE_US: u64 = 200;
/// Strict mode: how long after a lead ran on the same-process direct path (where it
/// completed at both ends before it returned) the WQEs it overtook run at the earliest:
/// well past a waiting poller's longest nap (efa's `CompletionQueue::wait` sleeps up to
/// 1 ms between polls) and a loaded machine's scheduling delays (2 ms: a target that
/// reads at once then still read early in about 1 run of 100 on a shared 2-core
/// machine), so that the target sees the lead's completion, and acts on it, first.
pub const OVERTAKE_US: u64 = 5000;
/// Strict mode: the same after a lead that went over datagrams (its completion needs a
/// round trip, each way delayed up to 1 ms by strict mode's datagram delays).
pub const DATAGRAM_OVERTAKE_US: u64 = 8000;
/// Strict mode: spacing of the overtaken WQEs of one window (they run in reverse
/// posting order).
pub const STEP_US: u64 = 20;
/// Strict mode: how much later than a poller of one of the device's CQs the engine
/// thread runs an overtaken WQE. A program that waits for the write's completion polls
/// its send CQ and so runs it when due; one that reads the body on the announcement
/// alone does not poll the initiator's CQ before it reads, so a target thread the
/// scheduler delays by milliseconds still reads first.
pub const ENGINE_LAG_MS: u64 = 50;
/// Strict mode: the same for a lead: a poller runs it after [`GRACE_US`], the engine
/// thread this much later (so a program preempted between two post calls still has its
/// second doorbell overtake the first, unless it polls the device in between).
pub const ENGINE_LEAD_LAG_US: u64 = 2000;
/// Longest any WQE is held after it was consumed (strict mode pushes held WQEs back
/// behind later doorbells; this bounds it).
pub const MAX_HOLD_MS: u64 = 60;
/// `reorder` knob: shortest hold of an overtaken WQE.
pub const HOLD_MIN_US: u64 = 50;
/// `reorder` knob: longest hold of an overtaken WQE.
pub const HOLD_MAX_US: u64 = 1000;
/// The `reorder` probability strict mode gives the device's datagrams.
pub const DATAGRAM_REORDER: f64 = 0.5;

/// Most held WQEs one [`Runtime::run_held`] call executes.
const DUE_BATCH: usize = 16;

/// The WQEs of one window, in posting order.
pub(crate) type Window = arrayvec::ArrayVec<WqeBuf, WINDOW>;

/// A WQE held back: executed by [`super::Runtime::run_held`] when due.
#[derive(Clone, Copy)]
pub(crate) struct Held {
    pub due: Instant,
    /// When it was consumed (strict mode never holds it past [`MAX_HOLD_MS`] after).
    pub since: Instant,
    /// Strict mode: its window's lead; the queue's other held WQEs run only
    /// [`OVERTAKE_US`] (or [`DATAGRAM_OVERTAKE_US`]) after it ran.
    pub lead: bool,
    pub qpn: u32,
    /// Which send queue (QPNs are reused): [`crate::model::send_queue::DeviceSq`]'s id.
    pub sq: u64,
    /// Its resets when the WQE was consumed: a WQE held across a reset is dropped.
    pub resets: u64,
    pub wqe: WqeBuf,
    pub size: usize,
}

/// The strict-mode (or `reorder` knob) state of one device.
pub(crate) struct Strict {
    /// `None`: strict mode, the adversarial order. `Some(p)`: the `reorder` knob, a
    /// fraction `p` of the windows in a random permutation.
    random: Option<f64>,
    rng: AtomicU64,
    held: Mutex<Vec<Held>>,
    count: AtomicUsize,
}

/// Start of the random stream of device `index` for `seed`.
fn start(seed: u64, index: u32) -> u64 {
    seed ^ u64::from(index)
        .wrapping_add(1)
        .wrapping_mul(0xd1b5_4a32_d192_ed03)
}

const fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

impl Strict {
    /// Strict mode's state for device `index` (`seed` only seeds what the `reorder`
    /// knob would: strict mode's order is the same in every run).
    pub fn adversarial(seed: u64, index: u32) -> Strict {
        Strict::new(seed, index, None)
    }

    /// The `reorder` knob's state for device `index`: a fraction `permute` of the
    /// windows in a seeded random permutation.
    pub fn random(seed: u64, index: u32, permute: f64) -> Strict {
        Strict::new(seed, index, Some(permute))
    }

    fn new(seed: u64, index: u32, random: Option<f64>) -> Strict {
        Strict {
            random,
            rng: AtomicU64::new(start(seed, index)),
            held: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// Restarts the random stream as if the device had started with `seed`.
    pub fn reseed(&self, seed: u64, index: u32) {
        self.rng.store(start(seed, index), Ordering::Relaxed);
    }

    /// Next pseudo-random number (splitmix64).
    fn next(&self) -> u64 {
        let mut z = self
            .rng
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (always for `p >= 1`, never for `p <= 0`).
    fn coin(&self, p: f64) -> bool {
        p >= 1.0 || (p > 0.0 && ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64)
    }

    /// The `reorder` knob's execution order of a window of `n` WQEs: a random
    /// permutation (Fisher-Yates) with probability `p`, else posting order.
    pub fn permutation(&self, n: usize, p: f64) -> arrayvec::ArrayVec<u8, WINDOW> {
        let mut order: arrayvec::ArrayVec<u8, WINDOW> = (0..n.min(WINDOW) as u8).collect();
        if !self.coin(p) {
            return order;
        }
        for i in (1..order.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    }

    /// When a WQE held now (or held again: its QP cannot run it yet) is due.
    pub fn due(&self) -> Instant {
        let wait = match self.random {
            None => GRACE_US,
            Some(_) => HOLD_MIN_US + self.next() % (HOLD_MAX_US - HOLD_MIN_US + 1),
        };
        Instant::now() + us(wait)
    }

    /// Holds `h` until it is due.
    pub fn hold(&self, h: Held) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.push(h);
        self.count.store(held.len(), Ordering::Release);
    }

    /// Strict mode: pushes the held WQEs of queue `sq` (consumed after `resets` resets)
    /// back, all by one amount so that they keep their order, until the first is due at
    /// `after` or later; none past [`MAX_HOLD_MS`] after it was consumed. They are
    /// overtaken now: none is a lead any more.
    pub fn defer(&self, sq: u64, resets: u64, after: Instant) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mine = |h: &&mut Held| h.sq == sq && h.resets == resets;
        let Some(first) = held.iter_mut().filter(mine).map(|h| h.due).min() else {
            return;
        };
        let by = after.saturating_duration_since(first);
        for h in held.iter_mut().filter(mine) {
            h.due = (h.due + by).min(h.since + Duration::from_millis(MAX_HOLD_MS));
            h.lead = false;
        }
    }

    /// Whether WQEs are held.
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// When `h` may run: when due, except that strict mode lets the engine thread
    /// (`polled` false) run a lead only [`ENGINE_LEAD_LAG_US`] later and an overtaken
    /// WQE [`ENGINE_LAG_MS`] later (never past [`MAX_HOLD_MS`] after it was consumed).
    fn ready(&self, h: &Held, polled: bool) -> Instant {
        if polled || self.random.is_some() {
            return h.due;
        }
        let lag = match h.lead {
            true => us(ENGINE_LEAD_LAG_US),
            false => Duration::from_millis(ENGINE_LAG_MS),
        };
        let cap = h.since + Duration::from_millis(MAX_HOLD_MS);
        (h.due + lag).min(cap.max(h.due))
    }

    /// When the engine thread may run the first held WQE (`None`: none held).
    pub fn next_due(&self) -> Option<Instant> {
        if !self.any() {
            return None;
        }
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.iter().map(|h| self.ready(h, false)).min()
    }

    /// Takes up to [`DUE_BATCH`] held WQEs that may run now (for a poller of one of the
    /// device's CQs when `polled`, else for the engine thread), at most the first due of
    /// each queue (running a lead pushes the rest of its queue back), in the order they
    /// are due (no allocation: pollers run this on the caller's thread).
    fn take_due(&self, polled: bool) -> arrayvec::ArrayVec<Held, DUE_BATCH> {
        let now = Instant::now();
        let mut due = arrayvec::ArrayVec::<Held, DUE_BATCH>::new();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // The first due of each queue among those due now.
        for h in held.iter().filter(|h| self.ready(h, polled) <= now) {
            let full = due.is_full();
            match due.iter_mut().find(|d| d.sq == h.sq) {
                Some(d) if d.due > h.due => *d = *h,
                Some(_) => {}
                None if !full => due.push(*h),
                None => {}
            }
        }
        held.retain(|h| {
            !due.iter().any(|d| {
                d.sq == h.sq
                    && d.resets == h.resets
                    && d.due == h.due
                    && d.wqe.req_id() == h.wqe.req_id()
            })
        });
        self.count.store(held.len(), Ordering::Release);
        drop(held);
        due.sort_unstable_by_key(|h| h.due);
        due
    }
}

/// Executes the WQEs of `window` (of the send queue `sq` of `qp`, WQEs of `size` bytes,
/// `qp` in `state` after `resets` resets): strict mode holds them all, the lead first
/// (see the module docs); the `reorder` knob runs them in a permutation and holds one
/// a later-posted WQE overtook. Returns how many completed on the direct path.
pub(crate) fn permuted(
    rt: &Runtime,
    qp: &Qp,
    (s, window, (sq, size, state, resets)): (&Strict, &mut Window, (u64, usize, QpState, u64)),
    g: &Guard,
    shared: &mut Doorbell,
) -> u64 {
    let now = Instant::now();
    let held = |due: Instant, lead: bool, wqe: &WqeBuf| Held {
        due,
        since: now,
        lead,
        qpn: qp.qpn(),
        sq,
        resets,
        wqe: *wqe,
        size,
    };
    let mut direct = 0;
    match s.random {
        // A QP in ERR completes its WQEs at once (FLUSHED), in posting order.
        _ if state == QpState::Err || window.is_empty() => {
            for wqe in window.iter() {
                direct += execute(rt, qp, state, wqe, size, g, shared);
            }
        }
        None => {
            // The lead first, after the grace; the rest in reverse posting order once the
            // lead has run (`Runtime::run_held` pushes them back further then).
            let lead = now + us(GRACE_US);
            let rest = lead + us(OVERTAKE_US);
            let n = window.len();
            // Earlier doorbells' held WQEs of this queue go behind this window's.
            s.defer(sq, resets, rest + us(STEP_US * n as u64));
            for (k, wqe) in window.iter().rev().enumerate() {
                let due = match k {
                    0 => lead,
                    _ => rest + us(STEP_US * (k as u64 - 1)),
                };
                s.hold(held(due, k == 0, wqe));
            }
            rt.ep.kick();
        }
        Some(p) => {
            let mut latest: Option<u8> = None;
            for i in s.permutation(window.len(), p) {
                let wqe = &window[usize::from(i)];
                if latest.is_some_and(|l| l > i) {
                    // Overtaken by a later-posted WQE.
                    s.hold(held(s.due(), false, wqe));
                    rt.ep.kick();
                    continue;
                }
                latest = latest.max(Some(i));
                direct += execute(rt, qp, state, wqe, size, g, shared);
            }
        }
    }
    window.clear();
    direct
}

impl Runtime {
    /// Executes the held WQEs that may run now (`polled`: for a poller of one of the
    /// device's CQs; else for the engine thread); how many ran.
    pub(crate) fn run_held(&self, polled: bool) -> usize {
        let Some(s) = self.strict.as_ref().filter(|s| s.any()) else {
            return 0;
        };
        let due = s.take_due(polled);
        let ran = due.len();
        for h in due {
            let g = Guard::enter();
            if let Some(qp) = self.qp(h.qpn, &g) {
                if qp.sq_dev().id == h.sq {
                    qp.sq_dev().run_held(self, qp, (s, h), &g);
                }
            }
        }
        ran
    }

    /// Whether strict mode holds WQEs (the engine keeps its timer running).
    #[inline]
    pub(crate) fn has_held(&self) -> bool {
        self.strict.as_ref().is_some_and(Strict::any)
    }

    /// When the engine thread may run the first held WQE (it sleeps no longer than that).
    pub(crate) fn held_due(&self) -> Option<Instant> {
        self.strict.as_ref().and_then(Strict::next_due)
    }
}

/// After the lead `h` ran (on the direct path when `direct`), when the rest of its queue
/// may run at the earliest.
pub(crate) fn after_lead(direct: bool) -> Instant {
    Instant::now()
        + us(if direct {
            OVERTAKE_US
        } else {
            DATAGRAM_OVERTAKE_US
        })
}

#[cfg(test)]
#[path = "strict_tests.rs"]
mod tests;
