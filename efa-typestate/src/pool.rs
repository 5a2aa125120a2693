//! [`BufferPool`]: one registration cut into equal slots, handed out as [`Slot`] leases
//! for safe posting ([`lease`](crate::lease)). Taking and returning a slot is one atomic
//! operation on a bitmap; nothing allocates after the pool is made.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::context::Context;
use crate::error::{InvalidInput, Result};
use crate::mr::{AccessFlags, MemoryRegion, Mr, Sge};
use crate::parent::Parent;
use crate::pd::Pd;

const BITS: usize = u64::BITS as usize;

/// `count` slots of `slot_size` bytes in one `LOCAL_WRITE` registration (so a slot can
/// be a send source, a receive buffer or an RDMA-read destination). The registration is
/// private: slot bytes are reachable only through the [`Slot`] that holds them, and not
/// at all while that slot is posted. Holds its PD through `P`.
///
/// Dropped while a slot is out (only possible for a slot whose ticket was dropped or
/// forgotten: a live slot holds the pool), the pool leaks its registration and memory
/// instead of releasing them: the slot may still be posted ([`lease`](crate::lease)).
pub struct BufferPool<P> {
    // Dropped only when every slot is back (see `Drop`).
    mr: core::mem::ManuallyDrop<Mr<P, std::vec::Vec<u8>>>,
    slot_size: usize,
    free: FreeSlots,
}

/// Which slots are free: one bit each, set when free. Claiming clears a bit with a CAS,
/// returning sets it; nothing allocates after creation.
struct FreeSlots {
    words: std::boxed::Box<[AtomicU64]>,
    count: usize,
}

impl FreeSlots {
    fn new(count: usize) -> FreeSlots {
        let words = (0..count.div_ceil(BITS))
            .map(|w| {
                let n = (count - w * BITS).min(BITS);
                AtomicU64::new(if n == BITS { u64::MAX } else { (1u64 << n) - 1 })
            })
            .collect();
        FreeSlots { words, count }
    }
    fn available(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
    fn claim(&self) -> Option<u32> {
        for (w, word) in self.words.iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            while bits != 0 {
                let bit = bits.trailing_zeros();
                let rest = bits & !(1 << bit);
                // Acquire: the previous holder's writes to the slot happen before ours.
                match word.compare_exchange_weak(bits, rest, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return Some((w * BITS) as u32 + bit),
                    Err(now) => bits = now,
                }
            }
        }
        None
    }
    /// The word holding slot `index`'s bit (heap memory that never moves).
    fn word(&self, index: u32) -> &AtomicU64 {
        &self.words[index as usize / BITS]
    }
}

/// Returns slot `index` through its bitmap word.
fn release(word: &AtomicU64, index: u32) {
    // Release: our writes to the slot happen before the next holder's.
    word.fetch_or(1u64 << (index as usize % BITS), Ordering::Release);
}

impl<P> BufferPool<P> {
    /// Registers `count` zeroed slots of `slot_size` bytes in `pd` (`&Pd<_>` or
    /// `Arc<Pd<_>>`).
    pub fn new<C>(pd: P, slot_size: usize, count: usize) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        let Some(bytes) = slot_size.checked_mul(count) else {
            return Err(InvalidInput::LengthTooLarge(u64::MAX).into());
        };
        if slot_size as u64 > u32::MAX as u64 {
            return Err(InvalidInput::LengthTooLarge(slot_size as u64).into());
        }
        let mr = Mr::new(pd, std::vec![0u8; bytes], AccessFlags::LOCAL_WRITE)?;
        Ok(BufferPool {
            mr: core::mem::ManuallyDrop::new(mr),
            slot_size,
            free: FreeSlots::new(count),
        })
    }
    /// The local key of the pool's one registration (every slot's SGE carries it).
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.free.count
    }
    /// True if the pool has no slots.
    pub fn is_empty(&self) -> bool {
        self.free.count == 0
    }
    /// Slots not taken right now.
    pub fn available(&self) -> usize {
        self.free.available()
    }
    /// Takes a free slot, borrowing the pool: [`Slot::take`].
    pub fn take(&self) -> Option<Slot<&Self>> {
        Slot::take(self)
    }

    fn offset(&self, index: u32) -> usize {
        index as usize * self.slot_size
    }
}

impl<P> Drop for BufferPool<P> {
    fn drop(&mut self) {
        // A slot still out was abandoned or forgotten while posted: the device may still
        // write it, so its registration (and key) and memory stay for good.
        if self.free.available() == self.free.count {
            // SAFETY: dropped exactly once, here; never used again.
            unsafe { core::mem::ManuallyDrop::drop(&mut self.mr) };
        }
    }
}

impl<P> core::fmt::Debug for BufferPool<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BufferPool")
            .field("slot_size", &self.slot_size)
            .field("count", &self.free.count)
            .field("available", &self.available())
            .finish()
    }
}

/// One slot of a [`BufferPool`], held exclusively: its bytes are this value's. Dropping
/// it returns the slot to the pool. Holds the pool through `H` (`&BufferPool<_>` or
/// `Arc<BufferPool<_>>`). Post it with
/// [`Qp::post_send_lease`](crate::Qp::post_send_lease) /
/// [`post_recv_lease`](crate::Qp::post_recv_lease).
pub struct Slot<H> {
    // The slot's bytes and its bit in the pool's bitmap: both live in heap blocks the
    // pool owns, which do not move and outlive `pool` (dropped last).
    bytes: core::ptr::NonNull<u8>,
    len: usize,
    word: core::ptr::NonNull<AtomicU64>,
    index: u32,
    // What the slot's SGE needs (the pool's registration is never re-registered).
    addr: u64,
    lkey: u32,
    pd: crate::pd::PdId,
    pool: core::mem::ManuallyDrop<H>,
}

// SAFETY: the slot's bytes are exclusively this value's (like a `Box<[u8]>`) and the
// bitmap word is an atomic; the holder follows its own Send/Sync.
unsafe impl<H: Send> Send for Slot<H> {}
// SAFETY: `&Slot` gives only shared access to the bytes.
unsafe impl<H: Sync> Sync for Slot<H> {}

impl<H: Parent<Target = BufferPool<P>>, P> Slot<H> {
    /// Takes a free slot of `pool`, or `None` if all are taken.
    pub fn take(pool: H) -> Option<Self> {
        let index = pool.free.claim()?;
        let offset = pool.offset(index);
        // SAFETY: `offset + slot_size <= count * slot_size`: inside the registration.
        let bytes = unsafe { core::ptr::NonNull::new_unchecked(pool.mr.host_ptr().add(offset)) };
        let word = core::ptr::NonNull::from(pool.free.word(index));
        Some(Slot {
            bytes,
            len: pool.slot_size,
            word,
            index,
            addr: pool.mr.iova() + offset as u64,
            lkey: pool.mr.lkey(),
            pd: pool.mr.pd_id(),
            pool: core::mem::ManuallyDrop::new(pool),
        })
    }
}

impl<H> Slot<H> {
    /// The slot's number in its pool.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// The slot's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the slot's part of the pool's registration, held exclusively by this
        // token (claimed from the bitmap); not posted (a posted slot is inside its
        // ticket); no peer may write the pool (no REMOTE_WRITE).
        unsafe { core::slice::from_raw_parts(self.bytes.as_ptr(), self.len) }
    }
    /// The slot's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusively through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.bytes.as_ptr(), self.len) }
    }
    /// The SGE of the whole slot (its range was checked when the pool was made).
    pub(crate) fn sge(&self) -> Sge<'_> {
        Sge::new_checked(self.addr, self.len as u32, self.lkey, self.pd)
    }
    /// Gives up the slot without returning it to the pool (its work request may still
    /// be in flight); the pool holder is released. The slot's bit stays taken, so the
    /// pool will leak its registration rather than release it.
    pub(crate) fn lose(self) {
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the holder is dropped once.
        unsafe { core::mem::ManuallyDrop::drop(&mut me.pool) };
    }
}

impl<H> Drop for Slot<H> {
    fn drop(&mut self) {
        // SAFETY: the bitmap word lives as long as the pool, which `pool` keeps alive
        // until the next line.
        release(unsafe { self.word.as_ref() }, self.index);
        // SAFETY: the holder is dropped exactly once, here.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.pool) };
    }
}

impl<H> core::fmt::Debug for Slot<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Slot").field("index", &self.index).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_claimed_once_and_comes_back() {
        for count in [0usize, 1, 63, 64, 65, 130] {
            let free = FreeSlots::new(count);
            assert_eq!(free.available(), count);
            let mut seen = std::vec::Vec::new();
            while let Some(i) = free.claim() {
                seen.push(i);
            }
            seen.sort();
            assert_eq!(seen, (0..count as u32).collect::<std::vec::Vec<_>>());
            assert_eq!(free.available(), 0);
            for &i in seen.iter().rev() {
                release(free.word(i), i);
            }
            assert_eq!(free.available(), count);
        }
    }

    #[test]
    fn concurrent_claims_never_share_a_slot() {
        let free = FreeSlots::new(100);
        let claimed: std::vec::Vec<std::vec::Vec<u32>> = std::thread::scope(|s| {
            let workers: std::vec::Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = std::vec::Vec::new();
                        while let Some(i) = free.claim() {
                            mine.push(i);
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut all: std::vec::Vec<u32> = claimed.into_iter().flatten().collect();
        all.sort();
        assert_eq!(all, (0..100).collect::<std::vec::Vec<_>>());
    }
}
