//! The provider layer: what rdma-core's libefa does in user space. It owns no queue
//! memory; it writes send WQEs and receive descriptors into the device's rings
//! ([`crate::ring`]), rings their doorbells, and polls completions out of CQ rings by phase
//! bit. Both front ends use it: the C ABI (`crate::abi`, `ibv_post_send`, `ibv_wr_*`,
//! `ibv_poll_cq`, `ibv_start_poll`, ...) and the Rust model API
//! ([`crate::model::Qp::post_send_batch`], [`crate::model::Cq::peek`], ...).
//!
//! * [`send`]: a QP's send queue: the posting rules of model §3.3 (checked here once, for
//!   every front end), request ids and their `wr_id`s, `ibv_wr_*` sessions with latched
//!   errors, doorbells every `max_batch` WQEs.
//! * [`recv`]: a QP's receive queue (model §3.4): descriptors, doorbell.
//! * [`poll`]: a CQ's consumer: phase-bit polling, decoding into [`crate::model::Completion`],
//!   freeing the SQ/RQ slot of a retired completion, the consumer-index doorbell.
//!
//! Locks: a QP's send and receive queues each have a spin lock (libefa's `wqlock`), a CQ
//! has its poll lock (held from `start_poll` to `end_poll`). A poller takes a queue lock
//! only to free the slot of a retired completion; nothing takes a poll lock while holding
//! a queue lock.

pub mod poll;
pub mod recv;
pub mod send;
pub mod session;

use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// A spin lock held across calls (a poll or post session, `start_poll..end_poll`,
/// `wr_start..wr_complete`), like libefa's spin locks. After a short spin a waiter yields
/// its CPU, so a lock held across a long session does not burn a core.
pub struct SpinLock(AtomicBool);

impl Default for SpinLock {
    fn default() -> Self {
        SpinLock::new()
    }
}

impl SpinLock {
    /// An unlocked lock.
    pub const fn new() -> Self {
        SpinLock(AtomicBool::new(false))
    }

    /// Takes the lock.
    #[inline]
    pub fn lock(&self) {
        if self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        self.lock_slow();
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spins = 0u32;
        loop {
            if !self.0.load(Ordering::Relaxed)
                && self
                    .0
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock (the caller holds it).
    #[inline]
    pub fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A value behind a [`SpinLock`] (cheaper than a `Mutex` for the device's short critical
/// sections: one atomic read-modify-write per lock, a plain store to unlock).
pub struct SpinMutex<T> {
    lock: SpinLock,
    value: core::cell::UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, which holds the lock.
unsafe impl<T: Send> Sync for SpinMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SpinMutex<T> {}

impl<T> SpinMutex<T> {
    /// A lock around `value`.
    pub const fn new(value: T) -> SpinMutex<T> {
        SpinMutex {
            lock: SpinLock::new(),
            value: core::cell::UnsafeCell::new(value),
        }
    }

    /// Locks it.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        self.lock.lock();
        SpinGuard(self)
    }

    /// Locks it if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        // `then`, not `then_some`: a guard built for a failed attempt would unlock the
        // holder's lock when dropped (two consumers of one ring, WQEs run twice).
        self.lock.try_lock().then(|| SpinGuard(self))
    }
}

/// Access to a [`SpinMutex`]'s value; unlocks when dropped.
pub struct SpinGuard<'a, T>(&'a SpinMutex<T>);

impl<T> core::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other reference exists.
        unsafe { &*self.0.value.get() }
    }
}

impl<T> core::ops::DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock, so no other reference exists.
        unsafe { &mut *self.0.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.0.lock.unlock();
    }
}

/// Request ids of one work queue and the `wr_id` each stands for (libefa's `wrid` array).
/// The bits above the index carry a generation, new at every QP creation and reset, so a
/// completion left over from an earlier incarnation is recognised and dropped.
///
/// Posters write an entry under the queue lock before the WQE is published; pollers read it
/// without the lock after the completion that names it (the doorbell and the completion's
/// phase bit order the accesses), like libefa's unlocked `wrid` reads.
pub struct WridIds {
    wrid: Box<[AtomicU64]>,
    idx_mask: u16,
    shifted_gen: AtomicU16,
}

impl WridIds {
    /// Room for `count` outstanding WRs, generation `gen`.
    pub fn new(count: u32, gen: u16) -> WridIds {
        let ids = WridIds {
            wrid: (0..count).map(|_| AtomicU64::new(0)).collect(),
            idx_mask: (count.max(1).next_power_of_two() - 1) as u16,
            shifted_gen: AtomicU16::new(0),
        };
        ids.set_gen(gen);
        ids
    }

    /// Starts generation `gen` (the caller holds the queue lock).
    pub fn set_gen(&self, gen: u16) {
        let shift = self.idx_mask.count_ones();
        let g = if shift >= 16 { 0 } else { gen << shift };
        self.shifted_gen.store(g, Ordering::Release);
    }

    /// Records `wr_id` at index `idx`; the request id to put in the WQE.
    #[inline]
    pub fn record(&self, idx: u32, wr_id: u64) -> u16 {
        self.wrid[idx as usize].store(wr_id, Ordering::Relaxed);
        idx as u16 | self.shifted_gen.load(Ordering::Relaxed)
    }

    /// The index of `req_id`.
    #[inline]
    pub fn index(&self, req_id: u16) -> u32 {
        u32::from(req_id & self.idx_mask)
    }

    /// Whether `req_id` belongs to the current generation (and names an index).
    #[inline]
    pub fn is_current(&self, req_id: u16) -> bool {
        req_id & !self.idx_mask == self.shifted_gen.load(Ordering::Acquire)
            && usize::from(req_id & self.idx_mask) < self.wrid.len()
    }

    /// The `wr_id` of `req_id`, if `req_id` belongs to the current generation.
    #[inline]
    pub fn wr_id(&self, req_id: u16) -> Option<u64> {
        if req_id & !self.idx_mask != self.shifted_gen.load(Ordering::Acquire) {
            return None;
        }
        self.wrid
            .get(usize::from(req_id & self.idx_mask))
            .map(|w| w.load(Ordering::Relaxed))
    }
}

/// The free indices of a work queue (libefa's `wrid_idx_pool`): completions arrive out of
/// order (SRD), so an index is taken from a pool rather than following the ring. Used
/// under the queue lock. An index is given back only while it is taken, so a late or
/// repeated retirement (one that raced with a reset) cannot hand it out twice.
pub struct WridPool {
    pool: Box<[u32]>,
    taken: Box<[bool]>,
    next: u32,
}

impl WridPool {
    /// All `count` indices free.
    pub fn new(count: u32) -> WridPool {
        WridPool {
            pool: (0..count).collect(),
            taken: vec![false; count as usize].into_boxed_slice(),
            next: 0,
        }
    }

    /// Frees every index (a QP reset forgets its WRs).
    pub fn reset(&mut self) {
        for (i, p) in self.pool.iter_mut().enumerate() {
            *p = i as u32;
        }
        self.taken.fill(false);
        self.next = 0;
    }

    /// Takes a free index; the caller checked there is room.
    #[inline]
    pub fn take(&mut self) -> u32 {
        let idx = self.pool[self.next as usize];
        self.next += 1;
        self.taken[idx as usize] = true;
        idx
    }

    /// Gives back the `n` most recently taken indices (WRs dropped before they were
    /// posted).
    #[inline]
    pub fn untake(&mut self, n: u32) {
        for i in self.next - n..self.next {
            let idx = self.pool[i as usize];
            self.taken[idx as usize] = false;
        }
        self.next -= n;
    }

    /// Frees `idx` (its completion was retired); false if it was not taken.
    #[inline]
    pub fn put(&mut self, idx: u32) -> bool {
        match self.taken.get_mut(idx as usize) {
            Some(t) if *t && self.next > 0 => {
                *t = false;
                self.next -= 1;
                self.pool[self.next as usize] = idx;
                true
            }
            _ => false,
        }
    }
}

/// Request ids of retired completions on their way back to the queue's pool: the poller
/// (one at a time: the CQ's poll lock) pushes without taking the queue lock, the poster
/// drains them under the queue lock when the pool looks full. Holds as many entries as
/// the queue has request ids, so it cannot overflow.
pub struct RetireRing {
    ids: Box<[AtomicU16]>,
    head: AtomicU32,
    tail: AtomicU32,
}

impl RetireRing {
    /// Room for `count` (a power of two, or rounded up to one) request ids.
    pub fn new(count: u32) -> RetireRing {
        RetireRing {
            ids: (0..count.max(1).next_power_of_two())
                .map(|_| AtomicU16::new(0))
                .collect(),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
        }
    }

    /// Hands back `req_id`; false if the ring is full (the caller frees it under the
    /// queue lock instead). Callers are serialised (the CQ's poll lock).
    #[inline]
    pub fn push(&self, req_id: u16) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        if t.wrapping_sub(self.head.load(Ordering::Acquire)) as usize >= self.ids.len() {
            return false;
        }
        self.ids[t as usize & (self.ids.len() - 1)].store(req_id, Ordering::Relaxed);
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        true
    }

    /// Whether request ids are waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tail.load(Ordering::Acquire) == self.head.load(Ordering::Relaxed)
    }

    /// Takes every waiting request id (the caller holds the queue lock).
    #[inline]
    pub fn drain(&self, mut f: impl FnMut(u16)) {
        let h = self.head.load(Ordering::Relaxed);
        let t = self.tail.load(Ordering::Acquire);
        let mut i = h;
        while i != t {
            f(self.ids[i as usize & (self.ids.len() - 1)].load(Ordering::Relaxed));
            i = i.wrapping_add(1);
        }
        self.head.store(t, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_try_lock_leaves_the_holder_s_lock_held() {
        let m = super::SpinMutex::new(0u32);
        let held = m.lock();
        assert!(m.try_lock().is_none());
        assert!(
            m.try_lock().is_none(),
            "the failed attempt unlocked the holder's lock"
        );
        drop(held);
        assert!(m.try_lock().is_some());
    }

    use super::*;

    #[test]
    fn wrid_pool_hands_out_distinct_ids_and_recycles_out_of_order() {
        let ids = WridIds::new(4, 3);
        let mut pool = WridPool::new(4);
        let req: Vec<u16> = (10..14).map(|w| ids.record(pool.take(), w)).collect();
        let mut idx: Vec<u32> = req.iter().map(|r| ids.index(*r)).collect();
        idx.sort();
        assert_eq!(idx, vec![0, 1, 2, 3]);
        assert!(
            req.iter().all(|r| r >> 2 == 3),
            "generation in the high bits"
        );
        assert_eq!(ids.wr_id(req[2]), Some(12));
        assert!(pool.put(ids.index(req[2])));
        assert!(pool.put(ids.index(req[0])));
        assert!(!pool.put(ids.index(req[0])), "freed twice");
        let again = ids.record(pool.take(), 99);
        assert!(again == req[0] || again == req[2]);
        assert_eq!(ids.wr_id(again), Some(99));
        ids.set_gen(4);
        pool.reset();
        assert_eq!(ids.wr_id(req[1]), None, "stale generation");
        assert!(!pool.put(ids.index(req[1])), "retired after a reset");
    }

    #[test]
    fn retire_ring_hands_back_in_order_and_refuses_overflow() {
        let r = RetireRing::new(3);
        assert!(r.is_empty());
        for id in [5, 6, 7, 8] {
            assert!(r.push(id));
        }
        assert!(!r.push(9), "4 slots");
        let mut got = Vec::new();
        r.drain(|id| got.push(id));
        assert_eq!(got, vec![5, 6, 7, 8]);
        assert!(r.is_empty() && r.push(9));
    }
}
