//! Receive descriptors (`struct efa_io_rx_desc`, 16 bytes): a receive WQE is one
//! descriptor per SGE, the first carrying the request id and `FIRST`, the last `LAST`,
//! as libefa's `efa_post_recv` writes them.

use super::bits::{get_addr, get_u16, get_u32, put_addr, put_u16, put_u32};
use super::LocalBuf;
use core::mem::{offset_of, size_of};
use efa_sys::io::{efa_io_rx_desc, RX_DESC_FIRST_MASK, RX_DESC_LAST_MASK, RX_DESC_LKEY_MASK};

/// Bytes of one descriptor (one RQ ring entry).
pub const RX_DESC_SIZE: usize = size_of::<efa_io_rx_desc>();

const LO: usize = offset_of!(efa_io_rx_desc, buf_addr_lo);
const HI: usize = offset_of!(efa_io_rx_desc, buf_addr_hi);
const REQ_ID: usize = offset_of!(efa_io_rx_desc, req_id);
const LENGTH: usize = offset_of!(efa_io_rx_desc, length);
const LKEY_CTRL: usize = offset_of!(efa_io_rx_desc, lkey_ctrl);

/// One receive descriptor's fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDesc {
    /// Buffer address.
    pub addr: u64,
    /// Local key (24 bits are kept).
    pub lkey: u32,
    /// Buffer length: the field has 16 bits.
    pub length: u16,
    /// Request id (libefa writes it in the first descriptor of a WQE, 0 in the others).
    pub req_id: u16,
    /// First descriptor of its WQE.
    pub first: bool,
    /// Last descriptor of its WQE.
    pub last: bool,
}

impl RxDesc {
    /// Writes the descriptor into `out`.
    #[inline]
    pub fn encode(&self, out: &mut [u8; RX_DESC_SIZE]) {
        put_addr(out, LO, HI, self.addr);
        put_u16(out, REQ_ID, self.req_id);
        put_u16(out, LENGTH, self.length);
        let mut ctrl = self.lkey & RX_DESC_LKEY_MASK;
        if self.first {
            ctrl |= RX_DESC_FIRST_MASK;
        }
        if self.last {
            ctrl |= RX_DESC_LAST_MASK;
        }
        put_u32(out, LKEY_CTRL, ctrl);
    }

    /// Reads a descriptor.
    #[inline]
    pub fn decode(b: &[u8; RX_DESC_SIZE]) -> RxDesc {
        let ctrl = get_u32(b, LKEY_CTRL);
        RxDesc {
            addr: get_addr(b, LO, HI),
            lkey: ctrl & RX_DESC_LKEY_MASK,
            length: get_u16(b, LENGTH),
            req_id: get_u16(b, REQ_ID),
            first: ctrl & RX_DESC_FIRST_MASK != 0,
            last: ctrl & RX_DESC_LAST_MASK != 0,
        }
    }
}

/// The descriptor length of a buffer of `len` bytes: libefa clamps it to the 16-bit field
/// (`min(length, UINT16_MAX)`), so a longer buffer receives at most 65535 bytes.
#[inline]
pub fn rx_desc_length(len: u32) -> u16 {
    u16::try_from(len).unwrap_or(u16::MAX)
}

/// Why a receive does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxError {
    /// No buffers: libefa writes no descriptor for such a receive (it would never
    /// complete), efa-sim writes one of length 0; the direct path refuses it.
    NoBuffers,
    /// More buffers than `out` has descriptors.
    TooManyBuffers {
        /// Buffers given.
        given: usize,
        /// Descriptors `out` holds.
        room: usize,
    },
}

/// Encodes a receive WQE of `bufs` into the first `bufs.len()` descriptors of `out`
/// (each is copied into the next RQ slot, wrapping around the ring); returns how many.
pub fn encode_rx_wqe(
    out: &mut [[u8; RX_DESC_SIZE]],
    req_id: u16,
    bufs: &[LocalBuf],
) -> Result<usize, RxError> {
    if bufs.is_empty() {
        return Err(RxError::NoBuffers);
    }
    if bufs.len() > out.len() {
        return Err(RxError::TooManyBuffers {
            given: bufs.len(),
            room: out.len(),
        });
    }
    let last = bufs.len() - 1;
    for (i, (slot, b)) in out.iter_mut().zip(bufs).enumerate() {
        let d = RxDesc {
            addr: b.addr,
            lkey: b.lkey,
            length: rx_desc_length(b.length),
            req_id: if i == 0 { req_id } else { 0 },
            first: i == 0,
            last: i == last,
        };
        *slot = [0; RX_DESC_SIZE];
        d.encode(slot);
    }
    Ok(bufs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_has_the_c_byte_image_and_round_trips() {
        let d = RxDesc {
            addr: 0x0102_0304_0506_0708,
            lkey: 0x00ab_cdef,
            length: 0xffff,
            req_id: 0x0a0b,
            first: true,
            last: true,
        };
        let mut b = [0u8; RX_DESC_SIZE];
        d.encode(&mut b);
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[8..10], &[0x0b, 0x0a]);
        assert_eq!(&b[10..12], &[0xff, 0xff]);
        assert_eq!(
            &b[12..16],
            &[0xef, 0xcd, 0xab, 0xc0],
            "first|last above the lkey"
        );
        assert_eq!(RxDesc::decode(&b), d);
    }

    #[test]
    fn wqes_round_trip_over_many_values() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let rounds = if cfg!(miri) { 64 } else { 20_000 };
        for round in 0..rounds {
            let n = 1 + round % 4;
            let mut bufs = [LocalBuf::default(); 4];
            for b in bufs.iter_mut() {
                let r = next();
                *b = LocalBuf {
                    addr: next(),
                    lkey: r as u32,
                    length: (r >> 32) as u32 >> (r % 32),
                };
            }
            let req_id = next() as u16;
            let mut out = [[0xa5u8; RX_DESC_SIZE]; 4];
            assert_eq!(encode_rx_wqe(&mut out, req_id, &bufs[..n]), Ok(n));
            for (i, b) in bufs[..n].iter().enumerate() {
                let d = RxDesc::decode(&out[i]);
                assert_eq!(d.addr, b.addr);
                assert_eq!(d.lkey, b.lkey & RX_DESC_LKEY_MASK);
                assert_eq!(u32::from(d.length), b.length.min(u32::from(u16::MAX)));
                assert_eq!(d.req_id, if i == 0 { req_id } else { 0 });
                assert_eq!((d.first, d.last), (i == 0, i == n - 1));
            }
            assert!(
                out[n..].iter().all(|d| d == &[0xa5; RX_DESC_SIZE]),
                "untouched"
            );
        }
    }

    #[test]
    fn empty_or_oversized_receives_are_refused() {
        let mut out = [[0u8; RX_DESC_SIZE]; 1];
        assert_eq!(encode_rx_wqe(&mut out, 0, &[]), Err(RxError::NoBuffers));
        let two = [LocalBuf::default(); 2];
        let err = Err(RxError::TooManyBuffers { given: 2, room: 1 });
        assert_eq!(encode_rx_wqe(&mut out, 0, &two), err);
        assert_eq!(rx_desc_length(70_000), u16::MAX);
        assert_eq!(rx_desc_length(65_535), 65_535);
    }
}
