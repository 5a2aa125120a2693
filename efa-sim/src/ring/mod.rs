//! The hardware queues: rings in host memory in EFA's entry formats
//! ([`efa_sys::io`]), each with a doorbell word. They are the one place the provider
//! layer ([`crate::provider`], what libefa does) and the device ([`crate::model`]) meet:
//! the provider writes send WQEs and receive descriptors and rings the queue's doorbell;
//! the device reads them, and writes completions with a phase bit that the provider polls.
//! Consumers that drive the rings themselves get the same memory from
//! `efadv_query_qp_wqs` / `efadv_query_cq`.
//!
//! * [`Ring`]: page-aligned, zero-filled memory of `entries × entry_size` bytes plus a
//!   doorbell on its own cache line; addresses stay valid until the queue is destroyed.
//! * [`wqe`]: send WQEs (64 or 128 bytes: meta descriptor + buffers, inline data or an
//!   RDMA request), [`rx`]: 16-byte receive descriptors, [`cqe`]: 32-byte completions
//!   (16-byte send completions, extended receive completions).
//!
//! Ring memory is shared with code outside Rust's view (another thread of a C consumer
//! writes WQEs while the device reads), so entries are only ever copied in and out with
//! volatile accesses, and every field the device reads is validated before use.
//!
//! Handoffs between threads are atomic accesses with release/acquire ordering, never
//! volatile ones with fences (those would race in Rust's memory model, and fences order
//! only atomic accesses): WQEs and receive descriptors are published by the doorbell
//! (an atomic word); a completion by its first word, which holds the phase bit and is
//! stored last, whole, by one atomic release store ([`Ring::publish_slot`]), and loaded
//! by the poller with acquire ([`Ring::load_head`]) before the rest of the entry is read.
//! A WQE whose phase a direct consumer fixes in place is read after an acquire load of
//! its phase byte ([`Ring::load_byte`]). The bytes in memory are EFA's formats unchanged.

pub mod cqe;
pub mod mmio;
pub mod rx;
pub mod wqe;

use crate::model::Errno;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Spins between the stores of [`Ring::publish_slot_torn`] (a few hundred nanoseconds:
/// long enough for a consumer on another core to read in between).
const TORN_PAUSE_SPINS: u32 = 64;

/// The host page size (the kernel's `PAGE_SIZE`, at least 4 KiB), read once.
pub fn host_page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).unwrap_or(0).max(4096)
    })
}

/// A doorbell register: one 32-bit word on its own cache line, followed by a canary word
/// that only a store wider than the register changes (strict mode's check that doorbells
/// are 32-bit stores, `crate::model::ring_rules`).
#[repr(C, align(64))]
pub struct Doorbell(AtomicU32, AtomicU32);

/// What the word after a doorbell holds until a wider store overwrites it.
const CANARY: u32 = 0xdb32_c0de;

impl Doorbell {
    /// A register holding 0, its canary in place.
    fn new() -> Doorbell {
        Doorbell(AtomicU32::new(0), AtomicU32::new(CANARY))
    }
    /// Whether a store wider than 32 bits reached the register since the last call (its
    /// canary was overwritten); puts the canary back.
    pub fn take_wide_store(&self) -> bool {
        self.1.load(Ordering::Acquire) != CANARY && self.1.swap(CANARY, Ordering::AcqRel) != CANARY
    }
    /// The value last written (acquire: entries written before it are visible).
    #[inline]
    pub fn read(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
    /// Writes the register (release: entries written before become visible first).
    #[inline]
    pub fn write(&self, v: u32) {
        self.0.store(v, Ordering::Release)
    }
    /// The address consumers write to.
    pub fn as_ptr(&self) -> *mut u32 {
        self.0.as_ptr()
    }
}

/// Where a queue's ring and doorbell are, for consumers that drive it themselves
/// (`efadv_query_qp_wqs`, `efadv_query_cq`). Valid until the queue is destroyed.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// First entry (NULL for a queue without entries).
    pub buffer: *mut u8,
    /// Bytes per entry.
    pub entry_size: u32,
    /// Entries.
    pub num_entries: u32,
    /// The doorbell register.
    pub doorbell: *mut u32,
    /// Most entries per doorbell write.
    pub max_batch: u32,
}

/// One queue's memory: `entries` slots of `entry_size` bytes (both powers of two, or no
/// entries at all) and its doorbell.
pub struct Ring {
    mem: Option<NonNull<u8>>,
    len: usize,
    entry_size: usize,
    /// log2 of `entry_size` (entry sizes are powers of two).
    entry_shift: u32,
    entries: u32,
    doorbell: DoorbellHome,
}

/// Where a ring's doorbell register lives.
enum DoorbellHome {
    /// Plain memory: consumers' stores are seen when someone looks.
    Heap(Box<Doorbell>),
    /// A trapped page: a consumer's store reaches the device at once ([`mmio`]).
    Mmio(mmio::MmioPage),
}

// SAFETY: the ring is plain memory accessed only through volatile copies and an atomic
// doorbell; the mapping is owned by this value and unmapped only in Drop.
unsafe impl Send for Ring {}
// SAFETY: as above; concurrent access is the ring protocol itself (producer/consumer).
unsafe impl Sync for Ring {}

impl Ring {
    /// Maps a zero-filled ring (ENOMEM if the mapping fails). `entries == 0` gives a ring
    /// without memory (a QP without receive queue).
    pub fn new(entries: u32, entry_size: usize) -> Result<Ring, Errno> {
        Self::with_doorbell(entries, entry_size, false)
    }

    /// [`Ring::new`] with the doorbell in a trapped page ([`mmio`]) where one can be
    /// mapped (else in plain memory, as `new`'s).
    pub fn new_mmio(entries: u32, entry_size: usize) -> Result<Ring, Errno> {
        Self::with_doorbell(entries, entry_size, true)
    }

    fn with_doorbell(entries: u32, entry_size: usize, mmio: bool) -> Result<Ring, Errno> {
        debug_assert!(entries == 0 || entries.is_power_of_two());
        if !entry_size.is_power_of_two() {
            return Err(libc::EINVAL);
        }
        let len = entries as usize * entry_size;
        let mem = if len == 0 {
            None
        } else {
            // SAFETY: a fresh anonymous private mapping; no existing memory is touched and
            // failure is reported as MAP_FAILED.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(libc::ENOMEM);
            }
            NonNull::new(p.cast::<u8>())
        };
        Ok(Ring {
            mem,
            len,
            entry_size,
            entry_shift: entry_size.trailing_zeros(),
            entries,
            doorbell: match mmio.then(mmio::MmioPage::new).flatten() {
                Some(page) => DoorbellHome::Mmio(page),
                None => DoorbellHome::Heap(Box::new(Doorbell::new())),
            },
        })
        .inspect(|r: &Ring| {
            // A trapped page starts zeroed: its register gets its canary too.
            r.doorbell().1.store(CANARY, Ordering::Release);
        })
    }

    /// The ring's layout for a direct consumer, allowing `max_batch` entries per doorbell.
    pub fn layout(&self, max_batch: u32) -> Layout {
        Layout {
            buffer: self.as_ptr(),
            entry_size: self.entry_size as u32,
            num_entries: self.entries,
            doorbell: match &self.doorbell {
                DoorbellHome::Heap(d) => d.as_ptr(),
                DoorbellHome::Mmio(page) => page.user_address().cast(),
            },
            max_batch,
        }
    }

    /// Number of slots.
    #[inline]
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Bytes per slot.
    #[inline]
    pub fn entry_size(&self) -> usize {
        self.entry_size
    }

    /// The queue's doorbell.
    #[inline]
    pub fn doorbell(&self) -> &Doorbell {
        match &self.doorbell {
            DoorbellHome::Heap(d) => d,
            // SAFETY: the register is at the start of the page-aligned writable view
            // (alignment 64 holds), zero-initialised (a valid AtomicU32), and lives as
            // long as the page, which `self` owns.
            DoorbellHome::Mmio(page) => unsafe { &*page.register().cast::<Doorbell>() },
        }
    }

    /// Stores to the consumer's doorbell address reach `listener` from now on; false
    /// for a ring whose doorbell is in plain memory (nothing to arm).
    pub fn arm_doorbell(&self, listener: std::sync::Weak<dyn mmio::DoorbellListener>) -> bool {
        match &self.doorbell {
            DoorbellHome::Mmio(page) => {
                page.arm(listener);
                true
            }
            DoorbellHome::Heap(_) => false,
        }
    }

    /// Start of the ring (NULL without entries), as handed to direct consumers.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    /// Start of slot `index` (taken modulo the ring size), or None without entries.
    #[inline]
    fn slot(&self, index: u32) -> Option<*mut u8> {
        let base = self.mem?;
        let i = (index & (self.entries - 1)) as usize;
        // SAFETY: i < entries and entry_size == 1 << entry_shift, so the slot lies inside the mapping of entries * entry_size.
        Some(unsafe { base.as_ptr().add(i << self.entry_shift) })
    }

    /// Copies `bytes` (at most one slot) into slot `index`.
    #[inline(always)]
    pub fn write_slot(&self, index: u32, bytes: &[u8]) {
        let Some(dst) = self.slot(index) else { return };
        let n = bytes.len().min(self.entry_size);
        // SAFETY: dst..dst+n is inside the mapping (slots are 8-byte aligned: page-aligned
        // ring, entry sizes multiples of 8); `bytes` is a distinct Rust buffer.
        unsafe { copy_to_ring(bytes.as_ptr(), dst, n) };
    }

    /// Copies slot `index` (at most `out.len()` bytes) out of the ring.
    #[inline(always)]
    pub fn read_slot(&self, index: u32, out: &mut [u8]) {
        let Some(src) = self.slot(index) else {
            out.fill(0);
            return;
        };
        let n = out.len().min(self.entry_size);
        // SAFETY: src..src+n is inside the mapping (8-byte aligned slot); `out` is a
        // distinct Rust buffer.
        unsafe { copy_from_ring(src, out.as_mut_ptr(), n) };
    }

    /// Publishes an entry whose first 8 bytes carry its valid bit (a completion's phase):
    /// copies `bytes` (8 to one slot's worth, a multiple of 8) into slot `index`, every
    /// word but the first with volatile stores, then the first word with one atomic
    /// release store. A reader that loads that word with [`Ring::load_head`] and sees the
    /// new valid bit sees the rest of the entry and everything written before it (a
    /// receive buffer's data). The first word is never written non-atomically, so a
    /// poller may load it at any time.
    #[inline(always)]
    pub fn publish_slot(&self, index: u32, bytes: &[u8]) {
        let Some(dst) = self.slot(index) else { return };
        let n = bytes.len().min(self.entry_size);
        assert!(n >= 8, "an entry published by its first word has one");
        debug_assert_eq!(n % 8, 0);
        let head = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
        // SAFETY: 8 <= n, and dst+8..dst+n is inside the mapping and 8-byte aligned
        // (page-aligned ring, entry sizes multiples of 8); `bytes` is a distinct Rust
        // buffer of at least n bytes.
        unsafe { copy_to_ring(bytes.as_ptr().add(8), dst.add(8), n - 8) };
        // SAFETY: the slot's first word is 8-byte aligned inside the live mapping (owned by
        // this Ring), and every party in this process accesses it atomically while it may
        // race: the writer here, pollers through `load_head`; the plain reads of
        // `read_slot` happen only after `load_head` saw this store.
        unsafe { &*dst.cast::<AtomicU64>() }.store(head, Ordering::Release);
    }

    /// Strict mode's [`Ring::publish_slot`]: the entry's words one store at a time, from
    /// the last to the second, with a pause after each, and only then its first word (with
    /// the phase bit) by the same release store. A consumer that reads any part of the
    /// entry before its phase bit says the entry is new sees a mix of this completion and
    /// the previous lap's, as it may on a NIC whose DMA write lands in pieces; one that
    /// checks the phase first (rdma-core's order) sees the whole entry.
    pub fn publish_slot_torn(&self, index: u32, bytes: &[u8]) {
        let Some(dst) = self.slot(index) else { return };
        let n = bytes.len().min(self.entry_size);
        assert!(n >= 8, "an entry published by its first word has one");
        for w in (1..n / 8).rev() {
            // SAFETY: word `w` of the slot (8 * w + 8 <= n), inside the mapping and 8-byte
            // aligned; `bytes` is a distinct Rust buffer of at least n bytes.
            unsafe { copy_to_ring(bytes.as_ptr().add(8 * w), dst.add(8 * w), 8) };
            for _ in 0..TORN_PAUSE_SPINS {
                core::hint::spin_loop();
            }
            #[cfg(test)]
            tests::paused(self, index);
        }
        let head = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
        // SAFETY: as in `publish_slot`.
        unsafe { &*dst.cast::<AtomicU64>() }.store(head, Ordering::Release);
    }

    /// The first 8 bytes of slot `index` (an entry [`Ring::publish_slot`] writes), loaded
    /// with acquire ordering: when they show a new entry, the rest of it may be read.
    #[inline(always)]
    pub fn load_head(&self, index: u32) -> u64 {
        let Some(p) = self.slot(index) else { return 0 };
        // SAFETY: the slot's first word is 8-byte aligned inside the live mapping; the
        // device writes it only by atomic stores (`publish_slot`), so this load never
        // races with a non-atomic write in this process.
        unsafe { &*p.cast::<AtomicU64>() }.load(Ordering::Acquire)
    }

    /// One byte of slot `index` at `offset` (a WQE's phase byte), loaded with acquire
    /// ordering: a direct consumer that rewrites an entry's phase in place with an atomic
    /// release store (the entry already announced by the doorbell) publishes the rest of
    /// the entry with it.
    #[inline(always)]
    pub fn load_byte(&self, index: u32, offset: usize) -> u8 {
        debug_assert!(offset < self.entry_size);
        let Some(p) = self.slot(index) else { return 0 };
        // SAFETY: offset < entry_size, so the byte is inside the live mapping (AtomicU8
        // has alignment 1); in this process it is written non-atomically only by the
        // provider before the doorbell that made the device read it (ordered by the
        // doorbell's release/acquire), and otherwise only by atomic stores.
        unsafe { &*p.add(offset).cast::<AtomicU8>() }.load(Ordering::Acquire)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if let Some(p) = self.mem {
            // SAFETY: exactly the mapping made in `new`; nothing references it any more.
            unsafe { libc::munmap(p.as_ptr().cast(), self.len) };
        }
    }
}

/// Copies `n` bytes of a Rust buffer into ring memory: volatile 8-byte stores on the
/// ring side (shared with code outside Rust's view), plain loads from the buffer.
///
/// # Safety
/// `src..src+n` must be readable, `dst..dst+n` writable and 8-byte aligned at `dst`, and
/// the ranges disjoint.
#[inline(always)]
unsafe fn copy_to_ring(src: *const u8, dst: *mut u8, n: usize) {
    debug_assert_eq!(dst as usize % 8, 0);
    // The entry sizes of the queues (16-byte send completions, 32-byte completions,
    // 64- and 128-byte WQEs; 8 and 24: the completions after their first word) as
    // straight-line word copies.
    match n {
        // SAFETY: forwarded contract (n bytes at both ends).
        8 => return unsafe { words_to_ring::<1>(src, dst) },
        // SAFETY: as above.
        16 => return unsafe { words_to_ring::<2>(src, dst) },
        // SAFETY: as above.
        24 => return unsafe { words_to_ring::<3>(src, dst) },
        // SAFETY: as above.
        32 => return unsafe { words_to_ring::<4>(src, dst) },
        // SAFETY: as above.
        64 => return unsafe { words_to_ring::<8>(src, dst) },
        _ => {}
    }
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, inside both ranges (caller); the source may be unaligned,
        // the destination is aligned (caller).
        unsafe {
            let w = core::ptr::read_unaligned(src.add(i).cast::<u64>());
            core::ptr::write_volatile(dst.add(i).cast::<u64>(), w);
        }
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, inside both ranges (caller).
        unsafe { core::ptr::write_volatile(dst.add(i), *src.add(i)) };
        i += 1;
    }
}

/// Copies `n` bytes of ring memory into a Rust buffer: volatile 8-byte loads on the ring
/// side, plain stores into the buffer.
///
/// # Safety
/// `src..src+n` must be readable and 8-byte aligned at `src`, `dst..dst+n` writable, and
/// the ranges disjoint.
#[inline(always)]
unsafe fn copy_from_ring(src: *const u8, dst: *mut u8, n: usize) {
    debug_assert_eq!(src as usize % 8, 0);
    match n {
        // SAFETY: forwarded contract (n bytes at both ends).
        16 => return unsafe { words_from_ring::<2>(src, dst) },
        // SAFETY: as above.
        32 => return unsafe { words_from_ring::<4>(src, dst) },
        // SAFETY: as above.
        64 => return unsafe { words_from_ring::<8>(src, dst) },
        _ => {}
    }
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: as in `copy_to_ring`, with the roles swapped.
        unsafe {
            let w = core::ptr::read_volatile(src.add(i).cast::<u64>());
            core::ptr::write_unaligned(dst.add(i).cast::<u64>(), w);
        }
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, inside both ranges (caller).
        unsafe { *dst.add(i) = core::ptr::read_volatile(src.add(i)) };
        i += 1;
    }
}

/// `W` 8-byte words into ring memory (volatile stores), unrolled.
///
/// # Safety
/// As [`copy_to_ring`] with `n = 8 * W`.
#[inline(always)]
unsafe fn words_to_ring<const W: usize>(src: *const u8, dst: *mut u8) {
    for i in 0..W {
        // SAFETY: word i lies inside both ranges (caller); the destination is aligned.
        unsafe {
            let w = core::ptr::read_unaligned(src.add(8 * i).cast::<u64>());
            core::ptr::write_volatile(dst.add(8 * i).cast::<u64>(), w);
        }
    }
}

/// `W` 8-byte words out of ring memory (volatile loads), unrolled.
///
/// # Safety
/// As [`copy_from_ring`] with `n = 8 * W`.
#[inline(always)]
unsafe fn words_from_ring<const W: usize>(src: *const u8, dst: *mut u8) {
    for i in 0..W {
        // SAFETY: word i lies inside both ranges (caller); the source is aligned.
        unsafe {
            let w = core::ptr::read_volatile(src.add(8 * i).cast::<u64>());
            core::ptr::write_unaligned(dst.add(8 * i).cast::<u64>(), w);
        }
    }
}

/// Producer/consumer position on a ring: a 16-bit counter as the doorbells carry it, and
/// the phase of the current lap (toggled whenever the counter wraps to slot 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Entries produced (or consumed) so far, modulo 2^16.
    pub count: u16,
    /// Phase bit of the current lap.
    pub phase: u8,
}

impl Cursor {
    /// Moves past one entry of a ring of `entries` slots.
    #[inline]
    pub fn advance(&mut self, entries: u32) {
        self.count = self.count.wrapping_add(1);
        if u32::from(self.count) & (entries - 1) == 0 {
            self.phase ^= 1;
        }
    }
}

#[cfg(test)]
mod tests;
