//! Little-endian field access at fixed offsets and mask-based bit fields, the Rust form
//! of rdma-core's `EFA_SET` / `EFA_GET` (the shift is the mask's lowest set bit).

/// Writes `v` little-endian at `at`.
#[inline(always)]
pub(super) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at `at`.
#[inline(always)]
pub(super) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a 64-bit address as the `lo` / `hi` 32-bit words EFA descriptors use.
#[inline(always)]
pub(super) fn put_addr(b: &mut [u8], lo: usize, hi: usize, addr: u64) {
    put_u32(b, lo, addr as u32);
    put_u32(b, hi, (addr >> 32) as u32);
}

/// Reads a little-endian `u16` at `at`.
#[inline(always)]
pub(super) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Reads a little-endian `u32` at `at`.
#[inline(always)]
pub(super) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a 64-bit address from its `lo` / `hi` words.
#[inline(always)]
pub(super) fn get_addr(b: &[u8], lo: usize, hi: usize) -> u64 {
    u64::from(get_u32(b, lo)) | (u64::from(get_u32(b, hi)) << 32)
}

/// `value` placed in the bits of `mask` (bits of `value` that do not fit are dropped, as
/// `EFA_SET` drops them).
#[inline(always)]
pub(super) const fn prep8(mask: u8, value: u8) -> u8 {
    (value << mask.trailing_zeros()) & mask
}

/// The bits of `mask` in `word`, shifted down.
#[inline(always)]
pub(super) const fn get8(mask: u8, word: u8) -> u8 {
    (word & mask) >> mask.trailing_zeros()
}

/// `value` placed in the bits of `mask`.
#[inline(always)]
pub(super) const fn prep32(mask: u32, value: u32) -> u32 {
    (value << mask.trailing_zeros()) & mask
}

/// The bits of `mask` in `word`, shifted down.
#[inline(always)]
pub(super) const fn get32(mask: u32, word: u32) -> u32 {
    (word & mask) >> mask.trailing_zeros()
}

/// `mask` if `on`, else 0 (one-bit flags).
#[inline(always)]
pub(super) const fn flag8(mask: u8, on: bool) -> u8 {
    if on {
        mask
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_their_masks() {
        assert_eq!(prep8(0x70, 5), 0x50);
        assert_eq!(prep8(0x70, 0xff), 0x70, "overflowing bits are dropped");
        assert_eq!(get8(0x70, 0xd5), 5);
        assert_eq!(prep32(0x6000_0000, 3), 0x6000_0000);
        assert_eq!(get32(0x6000_0000, 0xffff_ffff), 3);
        for v in 0..=u8::MAX {
            assert_eq!(get8(0x06, prep8(0x06, v)), v & 3);
        }
        let mut b = [0u8; 12];
        put_addr(&mut b, 4, 8, 0x0102_0304_0506_0708);
        assert_eq!(&b[4..8], &[8, 7, 6, 5]);
        assert_eq!(get_addr(&b, 4, 8), 0x0102_0304_0506_0708);
        put_u16(&mut b, 0, 0xbeef);
        assert_eq!(get_u16(&b, 0), 0xbeef);
    }
}
