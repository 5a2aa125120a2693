//! The CPU side of handing work to the device, as rdma-core's `util/udma_barrier.h` and
//! `util/mmio.h` do it on x86-64 and aarch64: barriers, the copy of WQEs into the send
//! queue in whole 64-byte units, and the doorbell store.
//!
//! On EFA the send queue is device memory mapped write-combining (LLQ): stores to it may
//! be merged and reordered until flushed, so a post is
//! `wc_start()`, `copy_to_llq()` per WQE, `flush_wc_writes()`, `write_doorbell()`.
//! Receive descriptors are host memory the device reads by DMA: `to_device_barrier()`
//! before the RQ doorbell. Completions are host memory the device writes: after a CQE's
//! phase bit is seen, `from_device_barrier()` before the rest of it is read.
//!
//! Under efa-sim the rings are host memory and the "device" is another thread: the same
//! code runs, and the doorbell's release store is what orders the entries before it in
//! Rust's memory model (a store-release is a plain `mov` on x86-64; on aarch64 `stlr`,
//! which the device-memory doorbell accepts and which is at least as ordered as `str`).
//!
//! Other architectures get a sequentially consistent fence for every barrier: it orders
//! normal memory but is not proven to order write-combined or device memory there, so
//! the direct backend must not be enabled where [`DEVICE_BARRIERS_PROVEN`] is false. Under
//! Miri (which runs no inline assembly) the same fence stands in.

use core::sync::atomic::{AtomicU32, Ordering};

/// Whether the barriers below are the ones rdma-core uses on this architecture (x86-64,
/// aarch64: the two EFA exists on). Elsewhere they are conservative stand-ins.
pub const DEVICE_BARRIERS_PROVEN: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Bytes of one write-combining unit: WQEs are copied into the LLQ in whole units.
pub const LLQ_UNIT: usize = 64;

/// Runs `asm` as a barrier: the inline assembly on the proven architectures, a
/// sequentially consistent fence elsewhere and under Miri.
macro_rules! barrier {
    (x86_64: $x86:literal, aarch64: $arm:literal) => {{
        #[cfg(all(not(miri), target_arch = "x86_64"))]
        // SAFETY: a fence instruction (or none): no operands, touches no memory or stack;
        // without `nomem` it is also a compiler barrier, like the C `"memory"` clobber.
        unsafe {
            core::arch::asm!($x86, options(nostack, preserves_flags))
        };
        #[cfg(all(not(miri), target_arch = "aarch64"))]
        // SAFETY: as above, a `dmb`/`dsb` barrier instruction.
        unsafe {
            core::arch::asm!($arm, options(nostack, preserves_flags))
        };
        #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
        core::sync::atomic::fence(Ordering::SeqCst);
    }};
}

/// `udma_to_device_barrier`: stores to host memory the device will DMA from (receive
/// descriptors) must be visible before the MMIO doorbell store that starts the DMA.
/// x86-64: stores are not reordered with later stores (TSO), so a compiler barrier is
/// the whole rule. aarch64: `dmb oshst` orders prior stores before later ones in the
/// outer-shareable domain the device is in.
#[inline(always)]
pub fn to_device_barrier() {
    barrier!(x86_64: "", aarch64: "dmb oshst");
}

/// `udma_from_device_barrier`: after a DMA-written valid bit (a CQE's phase) is observed,
/// later loads must not see older data than that bit. x86-64: `lfence` (loads are not
/// reordered with loads, and it keeps later loads from starting early). aarch64:
/// `dmb oshld` orders the observing load before every later load.
#[inline(always)]
pub fn from_device_barrier() {
    barrier!(x86_64: "lfence", aarch64: "dmb oshld");
}

/// `mmio_flush_writes`: write-combined stores (the WQEs in the LLQ) must be flushed out of
/// the CPU's WC buffers before the doorbell MMIO write, or the device may be told of a
/// WQE it cannot see yet; it also ends write combining (stores before and after it are
/// never merged). x86-64: `sfence`. aarch64: `dsb st` (completes prior stores).
#[inline(always)]
pub fn flush_wc_writes() {
    barrier!(x86_64: "sfence", aarch64: "dsb st");
}

/// `mmio_wc_start`: before the first write-combined store of a post, earlier stores of
/// every memory type (an earlier doorbell, normal memory the WQEs point to) must be
/// ordered before it. rdma-core defines it as `mmio_flush_writes`; so does this.
#[inline(always)]
pub fn wc_start() {
    flush_wc_writes();
}

/// Copies `src` into the LLQ at `dst` as 64-byte units of eight 8-byte stores in address
/// order (`mmio_memcpy_x64`'s x86-64 form; rdma-core's aarch64 form stores each unit with
/// one NEON `st4`/`st64b`, which only changes how the CPU packs the writes). Volatile, so
/// the compiler neither merges, splits nor drops them. `N` must be a multiple of 64.
///
/// # Safety
/// `dst` is valid for `N` bytes of writes, 8-byte aligned (LLQ slots are 64-byte aligned),
/// and no one else reads or writes those bytes during the call (the slot is beyond the
/// doorbell: the device does not read it yet).
#[inline(always)]
pub unsafe fn copy_to_llq<const N: usize>(dst: *mut u8, src: &[u8; N]) {
    const { assert!(N % LLQ_UNIT == 0 && N > 0) };
    debug_assert!(dst as usize % core::mem::align_of::<u64>() == 0);
    let words = dst.cast::<u64>();
    for (i, chunk) in src.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(bytes);
        // SAFETY: `i < N / 8`, so the word lies within the caller's `N` writable, aligned
        // bytes, which nothing else accesses meanwhile.
        unsafe { words.add(i).write_volatile(word) };
    }
}

/// Copies one 64-byte WQE into its LLQ slot ([`copy_to_llq`]).
///
/// # Safety
/// As [`copy_to_llq`] with `N` = 64.
#[inline(always)]
pub unsafe fn copy_wqe_to_llq(dst: *mut u8, src: &[u8; LLQ_UNIT]) {
    // SAFETY: the caller's promise is copy_to_llq's.
    unsafe { copy_to_llq(dst, src) }
}

/// Writes a doorbell register (`mmio_write32`): one 32-bit store, after
/// [`flush_wc_writes`] (SQ) or [`to_device_barrier`] (RQ). A release store: on hardware
/// the barrier before it orders the entries; on efa-sim, whose device thread loads the
/// doorbell with acquire, the release is what publishes them.
///
/// # Safety
/// `db` is a doorbell address from `efadv_query_qp_wqs` / `efadv_query_cq` of a queue
/// that still exists (valid and 4-byte aligned for the store), and every entry the new
/// value announces has been written.
#[inline(always)]
pub unsafe fn write_doorbell(db: *mut u32, value: u32) {
    // SAFETY: `db` is valid and aligned (caller); the register is only ever accessed
    // atomically or by the device.
    unsafe { AtomicU32::from_ptr(db) }.store(value, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Slot([u8; 128]);

    #[test]
    fn llq_copy_writes_whole_units_in_order_and_nothing_else() {
        let mut ring = [Slot([0xee; 128]), Slot([0xee; 128])];
        let mut wqe = [0u8; 64];
        for (i, b) in wqe.iter_mut().enumerate() {
            *b = i as u8;
        }
        wc_start();
        // SAFETY: the slot is 64-byte aligned, 128 bytes long and only used here.
        unsafe { copy_wqe_to_llq(ring[1].0.as_mut_ptr().add(64), &wqe) };
        flush_wc_writes();
        assert_eq!(&ring[1].0[64..], &wqe[..]);
        assert_eq!(&ring[1].0[..64], &[0xee; 64][..]);
        assert_eq!(&ring[0].0[..], &[0xee; 128][..]);
        let wide = [0x42u8; 128];
        // SAFETY: as above, all 128 bytes of slot 0.
        unsafe { copy_to_llq(ring[0].0.as_mut_ptr(), &wide) };
        assert_eq!(ring[0].0, wide);
    }

    #[test]
    fn doorbell_store_and_barriers_run() {
        let db = AtomicU32::new(0);
        to_device_barrier();
        // SAFETY: a live, aligned word.
        unsafe { write_doorbell(db.as_ptr(), 0x1234) };
        from_device_barrier();
        assert_eq!(db.load(Ordering::Acquire), 0x1234);
    }
}
