//! Receive descriptors (`struct efa_io_rx_desc`, 16 bytes): one per receive SGE; a
//! receive WQE is a run of them from one with `FIRST` set to one with `LAST` set.

use core::mem::offset_of;
use efa_sys::io::{efa_io_rx_desc, RX_DESC_FIRST_MASK, RX_DESC_LAST_MASK, RX_DESC_LKEY_MASK};

/// Size of one descriptor.
pub const SIZE: usize = core::mem::size_of::<efa_io_rx_desc>();

const LO: usize = offset_of!(efa_io_rx_desc, buf_addr_lo);
const HI: usize = offset_of!(efa_io_rx_desc, buf_addr_hi);
const REQ_ID: usize = offset_of!(efa_io_rx_desc, req_id);
const LENGTH: usize = offset_of!(efa_io_rx_desc, length);
const LKEY_CTRL: usize = offset_of!(efa_io_rx_desc, lkey_ctrl);

/// A decoded receive descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDesc {
    /// Buffer address.
    pub addr: u64,
    /// Request id (meaningful in the WQE's first descriptor).
    pub req_id: u16,
    /// Buffer length (16-bit field).
    pub length: u16,
    /// Local key (24 bits).
    pub lkey: u32,
    /// First descriptor of its WQE.
    pub first: bool,
    /// Last descriptor of its WQE.
    pub last: bool,
}

impl RxDesc {
    /// The 16 ring bytes of this descriptor.
    pub fn encode(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[LO..LO + 4].copy_from_slice(&(self.addr as u32).to_le_bytes());
        b[HI..HI + 4].copy_from_slice(&((self.addr >> 32) as u32).to_le_bytes());
        b[REQ_ID..REQ_ID + 2].copy_from_slice(&self.req_id.to_le_bytes());
        b[LENGTH..LENGTH + 2].copy_from_slice(&self.length.to_le_bytes());
        let mut ctrl = self.lkey & RX_DESC_LKEY_MASK;
        if self.first {
            ctrl |= RX_DESC_FIRST_MASK;
        }
        if self.last {
            ctrl |= RX_DESC_LAST_MASK;
        }
        b[LKEY_CTRL..LKEY_CTRL + 4].copy_from_slice(&ctrl.to_le_bytes());
        b
    }

    /// Decodes 16 ring bytes.
    #[inline]
    pub fn decode(b: &[u8; SIZE]) -> RxDesc {
        let w = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let h = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let ctrl = w(LKEY_CTRL);
        RxDesc {
            addr: u64::from(w(LO)) | u64::from(w(HI)) << 32,
            req_id: h(REQ_ID),
            length: h(LENGTH),
            lkey: ctrl & RX_DESC_LKEY_MASK,
            first: ctrl & RX_DESC_FIRST_MASK != 0,
            last: ctrl & RX_DESC_LAST_MASK != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_c_offsets() {
        let d = RxDesc {
            addr: 0x0102_0304_0506_0708,
            req_id: 0x0a0b,
            length: 0xffff,
            lkey: 0x00ab_cdef,
            first: true,
            last: true,
        };
        let b = d.encode();
        assert_eq!(&b[0..4], &0x0506_0708u32.to_le_bytes());
        assert_eq!(&b[8..10], &[0x0b, 0x0a]);
        assert_eq!(b[15], 0xc0, "first|last in the top bits of lkey_ctrl");
        assert_eq!(RxDesc::decode(&b), d);
    }
}
