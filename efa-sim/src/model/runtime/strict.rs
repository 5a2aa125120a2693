//! Strict mode (`EFA_SIM_PROFILE=strict`, the profile key `strict`): the device gives up
//! every order SRD does not promise, so that code relying on one fails on efa-sim too.
//!
//! * **Doorbell permutation.** The WQEs one doorbell brings (at most [`WINDOW`]
//!   consecutive WQEs of the QP per window: a larger doorbell is cut into windows) are
//!   executed in a random permutation. A WQE that a later-posted WQE of its window
//!   overtook is *held*: the device executes it [`HOLD_MIN_US`]..=[`HOLD_MAX_US`] µs
//!   later (the engine thread, or a poller of one of the device's CQs, runs it once
//!   due). So the body of an RDMA write posted with the write-with-immediate that
//!   announces it in one doorbell lands, half of the time, only after the announcement
//!   completed at the target (and its send completion came first at the initiator);
//!   SENDs of one doorbell arrive in any order. This happens where the requester
//!   consumes the doorbell, so on every path alike: the same-process direct path,
//!   shared memory, UDP, `process_vm` copies and datagram chunks. Each WR's own data
//!   still lands before its own completion at both ends (SRD guarantees that).
//! * **Lone holds.** A WQE that nothing overtook is held all the same with probability
//!   `LONE_HOLD` (1/8), so that later doorbells overtake it: WQEs of different doorbells
//!   change order too.
//! * **The `reorder` fault knob** without strict mode: a fraction `reorder` of the
//!   windows is permuted as above (no lone holds).
//! * **Delays.** Every datagram of the device is held back a random 0..=1 ms with
//!   probability 0.5 (`reorder=0.5` of `EFA_SIM_FAULTS`, unless `EFA_SIM_FAULTS` sets
//!   `reorder` itself; the other fault knobs combine as usual). The same-process direct
//!   path stays on (faults alone turn it off).
//! * **Receives** are consumed in posting (ring) order, as SRD does (model §3.5): a later
//!   message may land in an earlier posted buffer, which the permutation above makes
//!   happen.
//!
//! The permutation and hold times come from one random stream per device, seeded from
//! the `seed=` of `EFA_SIM_FAULTS` (0 when `EFA_SIM_FAULTS` is unset, 0x5eed when it is
//! set without `seed=`) and the device index: one posting thread with the same seed
//! gets the same permutations run after run (thread interleavings and the datagram
//! delays, which follow the fault stream, still vary). A Rust test can restart the
//! stream with [`crate::model::Device::reseed_strict`].

use super::doorbell::Doorbell;
use super::Runtime;
use crate::model::send_queue::execute;
use crate::model::{Qp, QpState};
use crate::rcu::Guard;
use crate::ring::wqe::WqeBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most consecutive WQEs of one QP one permutation covers (a doorbell's WQEs, cut into
/// windows of this size).
pub const WINDOW: usize = 64;
/// Shortest hold of an overtaken WQE.
pub const HOLD_MIN_US: u64 = 50;
/// Longest hold of an overtaken WQE.
pub const HOLD_MAX_US: u64 = 1000;
/// The `reorder` probability strict mode gives the device's datagrams.
pub const DATAGRAM_REORDER: f64 = 0.5;
/// Strict mode: probability that a WQE no later one overtook is held all the same, so
/// that WQEs of different doorbells change order too.
pub const LONE_HOLD: f64 = 0.125;

/// Most held WQEs one [`Runtime::run_held`] call executes.
const DUE_BATCH: usize = 16;

/// The WQEs of one window, in posting order.
pub(crate) type Window = arrayvec::ArrayVec<WqeBuf, WINDOW>;

/// A WQE an overtaking one pushed back: executed by [`super::Runtime::run_held`] when due.
#[derive(Clone, Copy)]
pub(crate) struct Held {
    pub due: Instant,
    pub qpn: u32,
    /// Which send queue (QPNs are reused): [`crate::model::send_queue::DeviceSq`]'s id.
    pub sq: u64,
    /// Its resets when the WQE was consumed: a WQE held across a reset is dropped.
    pub resets: u64,
    pub wqe: WqeBuf,
    pub size: usize,
}

/// The strict-mode state of one device.
pub(crate) struct Strict {
    /// Probability that a window is permuted (1 in strict mode, `reorder` of
    /// `EFA_SIM_FAULTS` otherwise).
    permute: f64,
    /// Probability that a WQE no later one overtook is held all the same (strict mode:
    /// [`LONE_HOLD`]; 0 otherwise).
    lone: f64,
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

impl Strict {
    /// The strict-mode state of device `index` (`permute`, `lone`: see the fields).
    pub fn new(seed: u64, index: u32, permute: f64, lone: f64) -> Strict {
        Strict {
            permute,
            lone,
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

    /// The execution order of a window of `n` WQEs: a random permutation (Fisher-Yates)
    /// with probability `permute`, else posting order.
    pub fn permutation(&self, n: usize) -> arrayvec::ArrayVec<u8, WINDOW> {
        let mut order: arrayvec::ArrayVec<u8, WINDOW> = (0..n.min(WINDOW) as u8).collect();
        if !self.coin(self.permute) {
            return order;
        }
        for i in (1..order.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        order
    }

    /// When a WQE overtaken now is due.
    pub fn due(&self) -> Instant {
        let us = HOLD_MIN_US + self.next() % (HOLD_MAX_US - HOLD_MIN_US + 1);
        Instant::now() + Duration::from_micros(us)
    }

    /// Holds `h` until it is due.
    pub fn hold(&self, h: Held) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.push(h);
        self.count.store(held.len(), Ordering::Release);
    }

    /// Whether WQEs are held.
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Takes up to [`DUE_BATCH`] held WQEs due now, in the order they are due (no
    /// allocation: pollers run this on the caller's thread).
    fn take_due(&self) -> arrayvec::ArrayVec<Held, DUE_BATCH> {
        let now = Instant::now();
        let mut due = arrayvec::ArrayVec::<Held, DUE_BATCH>::new();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|h| {
            if h.due > now || due.is_full() {
                return true;
            }
            due.push(*h);
            false
        });
        self.count.store(held.len(), Ordering::Release);
        drop(held);
        due.sort_unstable_by_key(|h| h.due);
        due
    }
}

/// Executes the WQEs of `window` (of the send queue `sq` of `qp`, WQEs of `size` bytes,
/// `qp` in `state` after `resets` resets) in a permutation of `s`; one overtaken by a
/// later-posted WQE of the window is held (executed later by [`Runtime::run_held`]).
/// Returns how many completed on the direct path.
pub(crate) fn permuted(
    rt: &Runtime,
    qp: &Qp,
    (s, window, (sq, size, state, resets)): (&Strict, &mut Window, (u64, usize, QpState, u64)),
    g: &Guard,
    shared: &mut Doorbell,
) -> u64 {
    let mut direct = 0;
    let mut latest: Option<u8> = None;
    for i in s.permutation(window.len()) {
        let wqe = &window[usize::from(i)];
        // Overtaken by a later-posted WQE, or (strict mode) held at random: then later
        // doorbells overtake it too.
        let overtaken = latest.is_some_and(|l| l > i);
        if state != QpState::Err && (overtaken || s.coin(s.lone)) {
            s.hold(Held {
                due: s.due(),
                qpn: qp.qpn(),
                sq,
                resets,
                wqe: *wqe,
                size,
            });
            rt.ep.kick();
            continue;
        }
        latest = latest.max(Some(i));
        direct += execute(rt, qp, state, wqe, size, g, shared);
    }
    window.clear();
    direct
}

impl Runtime {
    /// Strict mode: executes the held WQEs that are due; how many ran.
    pub(crate) fn run_held(&self) -> usize {
        let Some(s) = self.strict.as_ref().filter(|s| s.any()) else {
            return 0;
        };
        let due = s.take_due();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_seeded_and_cover_both_orders() {
        let a = Strict::new(7, 0, 1.0, 0.0);
        let b = Strict::new(7, 0, 1.0, 0.0);
        let pa: Vec<_> = (0..50).map(|_| a.permutation(5)).collect();
        let pb: Vec<_> = (0..50).map(|_| b.permutation(5)).collect();
        assert_eq!(pa, pb);
        for p in &pa {
            let mut s = p.clone();
            s.sort_unstable();
            assert_eq!(&s[..], &[0, 1, 2, 3, 4]);
        }
        let c = Strict::new(7, 1, 1.0, 0.0);
        assert_ne!(pa, (0..50).map(|_| c.permutation(5)).collect::<Vec<_>>());
        let swapped = (0..1000).filter(|_| a.permutation(2)[0] == 1).count();
        assert!((400..600).contains(&swapped), "{swapped}");
        a.reseed(7, 0);
        assert_eq!(a.permutation(5), pa[0]);
    }

    #[test]
    fn the_reorder_knob_permutes_that_fraction_of_windows() {
        let never = Strict::new(3, 0, 0.0, 0.0);
        assert!((0..1000).all(|_| never.permutation(2)[0] == 0));
        // reorder=0.3: a permuted two-WQE window is inverted half of the time.
        let some = Strict::new(3, 0, 0.3, 0.0);
        let swapped = (0..4000).filter(|_| some.permutation(2)[0] == 1).count();
        assert!((480..720).contains(&swapped), "{swapped}");
        let lone = Strict::new(3, 0, 1.0, LONE_HOLD);
        let held = (0..8000).filter(|_| lone.coin(lone.lone)).count();
        assert!((800..1200).contains(&held), "{held}");
    }
}
