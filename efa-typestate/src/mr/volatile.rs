//! Copies to and from memory that peers (or the device) may write at any time: volatile
//! accesses, 8 bytes at a time where aligned, so the compiler never assumes the bytes
//! stable and never reads them twice expecting the same value.
//!
//! Writes by the device or a peer happen outside the Rust abstract machine; what a copy
//! races with is at most torn data (some bytes old, some new), never undefined behaviour
//! of this program.
// Indexes here run below the lengths of the slices they index (never caller numbers).
#![allow(clippy::arithmetic_side_effects)]

const WORD: usize = core::mem::size_of::<u64>();

/// Copies `dst.len()` bytes from `src` into `dst`.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes, and not be written by this
/// program during the call.
pub(crate) unsafe fn read_bytes(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let d = dst.as_mut_ptr();
    let mut i = 0;
    // SAFETY: every offset used below is < n, inside both ranges (caller contract).
    unsafe {
        // Byte by byte until the source is word-aligned, then words, then the tail.
        while i < n && (src as usize + i) % WORD != 0 {
            *d.add(i) = src.add(i).read_volatile();
            i += 1;
        }
        while i + WORD <= n {
            let w = src.add(i).cast::<u64>().read_volatile();
            d.add(i).cast::<u64>().write_unaligned(w);
            i += WORD;
        }
        while i < n {
            *d.add(i) = src.add(i).read_volatile();
            i += 1;
        }
    }
}

/// Copies `src` into `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes, not be accessed by this program
/// otherwise during the call, and not overlap `src`.
pub(crate) unsafe fn write_bytes(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let s = src.as_ptr();
    let mut i = 0;
    // SAFETY: every offset used below is < n, inside both ranges (caller contract).
    unsafe {
        while i < n && (dst as usize + i) % WORD != 0 {
            dst.add(i).write_volatile(*s.add(i));
            i += 1;
        }
        while i + WORD <= n {
            let w = s.add(i).cast::<u64>().read_unaligned();
            dst.add(i).cast::<u64>().write_volatile(w);
            i += WORD;
        }
        while i < n {
            dst.add(i).write_volatile(*s.add(i));
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src: [u8; 64] = core::array::from_fn(|i| i as u8 ^ 0xa5);
        for start in 0..9 {
            for len in 0..(64 - start).min(40) {
                let mut out = [0u8; 64];
                // SAFETY: `src[start..start+len]` is valid and not written meanwhile.
                unsafe { read_bytes(src.as_ptr().add(start), &mut out[..len]) };
                assert_eq!(&out[..len], &src[start..start + len]);
                assert!(out[len..].iter().all(|&b| b == 0), "nothing past the end");

                let mut dst = [0u8; 64];
                // SAFETY: `dst[start..start+len]` is valid, exclusive and disjoint from `src`.
                unsafe { write_bytes(dst.as_mut_ptr().add(start), &src[..len]) };
                assert_eq!(&dst[start..start + len], &src[..len]);
                assert!(dst[..start].iter().all(|&b| b == 0));
                assert!(dst[start + len..].iter().all(|&b| b == 0));
            }
        }
    }
}
