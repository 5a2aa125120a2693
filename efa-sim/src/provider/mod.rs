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

use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};

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
/// under the queue lock.
pub struct WridPool {
    pool: Box<[u32]>,
    next: u32,
}

impl WridPool {
    /// All `count` indices free.
    pub fn new(count: u32) -> WridPool {
        WridPool {
            pool: (0..count).collect(),
            next: 0,
        }
    }

    /// Frees every index (a QP reset forgets its WRs).
    pub fn reset(&mut self) {
        for (i, p) in self.pool.iter_mut().enumerate() {
            *p = i as u32;
        }
        self.next = 0;
    }

    /// Takes a free index; the caller checked there is room.
    #[inline]
    pub fn take(&mut self) -> u32 {
        let idx = self.pool[self.next as usize];
        self.next += 1;
        idx
    }

    /// Gives back the most recently taken index (a WR dropped before it was posted).
    #[inline]
    pub fn untake(&mut self, n: u32) {
        self.next -= n;
    }

    /// Frees `idx` (its completion was retired).
    #[inline]
    pub fn put(&mut self, idx: u32) {
        if self.next == 0 {
            return; // forgotten by a reset already
        }
        self.next -= 1;
        self.pool[self.next as usize] = idx;
    }
}

#[cfg(test)]
mod tests {
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
        pool.put(ids.index(req[2]));
        pool.put(ids.index(req[0]));
        let again = ids.record(pool.take(), 99);
        assert!(again == req[0] || again == req[2]);
        assert_eq!(ids.wr_id(again), Some(99));
        ids.set_gen(4);
        pool.reset();
        assert_eq!(ids.wr_id(req[1]), None, "stale generation");
    }
}
