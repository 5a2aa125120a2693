//! Send WQEs (`struct efa_io_tx_wqe` / `efa_io_tx_wqe_128`): built by the provider in a
//! [`WqeBuf`], read back by the device through the same field accessors. Offsets come
//! from the efa-sys layouts; multi-byte fields are little-endian.

use core::mem::offset_of;
use efa_sys::io::{
    efa_io_rdma_req, efa_io_remote_mem_addr, efa_io_tx_buf_desc, efa_io_tx_meta_desc,
    efa_io_tx_wqe, TX_DESC_SIZE_128, TX_DESC_SIZE_64,
};

/// Offset of the payload (buffers, inline data or RDMA request) after the meta descriptor.
pub const DATA: usize = offset_of!(efa_io_tx_wqe, data);
/// Size of one buffer descriptor.
pub const BUF_DESC: usize = core::mem::size_of::<efa_io_tx_buf_desc>();
/// Offset of an RDMA WQE's local buffer (and of inline RDMA-write data).
pub const RDMA_LOCAL: usize = DATA + offset_of!(efa_io_rdma_req, local_mem);

const REQ_ID: usize = offset_of!(efa_io_tx_meta_desc, req_id);
const CTRL1: usize = offset_of!(efa_io_tx_meta_desc, ctrl1);
const CTRL2: usize = offset_of!(efa_io_tx_meta_desc, ctrl2);
/// Offset of the byte holding the WQE's phase bit (`ctrl2` of the meta descriptor).
pub const PHASE_BYTE: usize = CTRL2;
const DEST_QP: usize = offset_of!(efa_io_tx_meta_desc, dest_qp_num);
const LENGTH: usize = offset_of!(efa_io_tx_meta_desc, length);
const IMM: usize = offset_of!(efa_io_tx_meta_desc, immediate_data);
const AH: usize = offset_of!(efa_io_tx_meta_desc, ah);
const CTRL3: usize = offset_of!(efa_io_tx_meta_desc, ctrl3);
const QKEY: usize = offset_of!(efa_io_tx_meta_desc, qkey);
const BUF_LEN: usize = offset_of!(efa_io_tx_buf_desc, length);
const BUF_LKEY: usize = offset_of!(efa_io_tx_buf_desc, lkey);
const BUF_LO: usize = offset_of!(efa_io_tx_buf_desc, buf_addr_lo);
const BUF_HI: usize = offset_of!(efa_io_tx_buf_desc, buf_addr_hi);
const REM_LEN: usize = offset_of!(efa_io_remote_mem_addr, length);
const REM_RKEY: usize = offset_of!(efa_io_remote_mem_addr, rkey);
const REM_LO: usize = offset_of!(efa_io_remote_mem_addr, buf_addr_lo);
const REM_HI: usize = offset_of!(efa_io_remote_mem_addr, buf_addr_hi);

/// One send WQE, large enough for the 128-byte format (a 64-byte WQE uses the first half).
#[derive(Clone, Copy)]
pub struct WqeBuf(pub [u8; TX_DESC_SIZE_128]);

impl Default for WqeBuf {
    fn default() -> Self {
        WqeBuf([0; TX_DESC_SIZE_128])
    }
}

#[inline]
fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
#[inline]
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

impl WqeBuf {
    /// Request id.
    pub fn req_id(&self) -> u16 {
        get16(&self.0, REQ_ID)
    }
    /// `ctrl1` (op type, has_imm, inline_msg, meta_extension, meta_desc).
    pub fn ctrl1(&self) -> u8 {
        self.0[CTRL1]
    }
    /// `ctrl2` (phase, first, last, comp_req).
    pub fn ctrl2(&self) -> u8 {
        self.0[CTRL2]
    }
    /// `ctrl3` (processing hints).
    pub fn ctrl3(&self) -> u8 {
        self.0[CTRL3]
    }
    /// Destination QP number.
    pub fn dest_qp(&self) -> u16 {
        get16(&self.0, DEST_QP)
    }
    /// Inline byte count or buffer descriptor count.
    pub fn length(&self) -> u16 {
        get16(&self.0, LENGTH)
    }
    /// Immediate data (host order).
    pub fn imm(&self) -> u32 {
        get32(&self.0, IMM)
    }
    /// Destination AH number.
    pub fn ah(&self) -> u16 {
        get16(&self.0, AH)
    }
    /// Destination Q_Key.
    pub fn qkey(&self) -> u32 {
        get32(&self.0, QKEY)
    }
    /// Buffer descriptor `i` of a send WQE: (addr, lkey field, length).
    pub fn buf(&self, i: usize) -> (u64, u32, u32) {
        self.buf_at(DATA + i * BUF_DESC)
    }
    /// The local buffer of an RDMA WQE.
    pub fn rdma_local(&self) -> (u64, u32, u32) {
        self.buf_at(RDMA_LOCAL)
    }
    fn buf_at(&self, at: usize) -> (u64, u32, u32) {
        let b = &self.0;
        let addr = u64::from(get32(b, at + BUF_LO)) | u64::from(get32(b, at + BUF_HI)) << 32;
        (addr, get32(b, at + BUF_LKEY), get32(b, at + BUF_LEN))
    }
    /// The remote side of an RDMA WQE: (addr, rkey, length).
    pub fn remote(&self) -> (u64, u32, u32) {
        let b = &self.0;
        let at = DATA;
        let addr = u64::from(get32(b, at + REM_LO)) | u64::from(get32(b, at + REM_HI)) << 32;
        (addr, get32(b, at + REM_RKEY), get32(b, at + REM_LEN))
    }

    /// Zeroes the first `size` bytes (a 64- or 128-byte WQE).
    #[inline]
    pub fn clear(&mut self, size: usize) {
        if size <= TX_DESC_SIZE_64 {
            self.0[..TX_DESC_SIZE_64].fill(0);
        } else {
            self.0.fill(0);
        }
    }
    /// Zeroes bytes `at..size` of a `size`-byte WQE (fixed-length stores for the 64-byte
    /// format rather than a `memset` call).
    #[inline]
    pub fn clear_from(&mut self, at: usize, size: usize) {
        if size <= TX_DESC_SIZE_64 {
            if at == RDMA_LOCAL {
                self.0[RDMA_LOCAL..TX_DESC_SIZE_64].fill(0);
            } else if at == DATA {
                self.0[DATA..TX_DESC_SIZE_64].fill(0);
            } else {
                self.0[at.min(TX_DESC_SIZE_64)..TX_DESC_SIZE_64].fill(0);
            }
        } else {
            self.0[at.min(TX_DESC_SIZE_128)..].fill(0);
        }
    }
    /// Sets the request id.
    pub fn set_req_id(&mut self, v: u16) {
        put16(&mut self.0, REQ_ID, v)
    }
    /// ORs bits into `ctrl1`.
    pub fn or_ctrl1(&mut self, bits: u8) {
        self.0[CTRL1] |= bits
    }
    /// Clears bits of `ctrl1`.
    pub fn clear_ctrl1(&mut self, bits: u8) {
        self.0[CTRL1] &= !bits
    }
    /// ORs bits into `ctrl2`.
    pub fn or_ctrl2(&mut self, bits: u8) {
        self.0[CTRL2] |= bits
    }
    /// Replaces the bits of `mask` in `ctrl3`.
    pub fn set_ctrl3(&mut self, mask: u8, bits: u8) {
        self.0[CTRL3] = (self.0[CTRL3] & !mask) | (bits & mask)
    }
    /// Sets the destination (QP number, AH number, Q_Key).
    pub fn set_dest(&mut self, qpn: u16, ah: u16, qkey: u32) {
        put16(&mut self.0, DEST_QP, qpn);
        put16(&mut self.0, AH, ah);
        put32(&mut self.0, QKEY, qkey);
    }
    /// Sets the length field.
    pub fn set_length(&mut self, v: u16) {
        put16(&mut self.0, LENGTH, v)
    }
    /// Sets the immediate data (host order).
    pub fn set_imm(&mut self, v: u32) {
        put32(&mut self.0, IMM, v)
    }
    /// Sets buffer descriptor `i` of a send WQE.
    pub fn set_buf(&mut self, i: usize, addr: u64, lkey: u32, len: u32) {
        self.set_buf_at(DATA + i * BUF_DESC, addr, lkey, len)
    }
    /// Sets the local buffer of an RDMA WQE.
    pub fn set_rdma_local(&mut self, addr: u64, lkey: u32, len: u32) {
        self.set_buf_at(RDMA_LOCAL, addr, lkey, len)
    }
    fn set_buf_at(&mut self, at: usize, addr: u64, lkey: u32, len: u32) {
        let b = &mut self.0;
        put32(b, at + BUF_LEN, len);
        put32(b, at + BUF_LKEY, lkey & efa_sys::io::TX_BUF_DESC_LKEY_MASK);
        put32(b, at + BUF_LO, addr as u32);
        put32(b, at + BUF_HI, (addr >> 32) as u32);
    }
    /// Sets the remote address and key of an RDMA WQE.
    pub fn set_remote(&mut self, addr: u64, rkey: u32) {
        let b = &mut self.0;
        put32(b, DATA + REM_RKEY, rkey);
        put32(b, DATA + REM_LO, addr as u32);
        put32(b, DATA + REM_HI, (addr >> 32) as u32);
    }
    /// Sets the remote length of an RDMA WQE.
    pub fn set_remote_len(&mut self, len: u32) {
        put32(&mut self.0, DATA + REM_LEN, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efa_sys::io::*;

    #[test]
    fn fields_land_where_the_c_layout_puts_them() {
        let mut w = WqeBuf::default();
        w.set_req_id(0x1234);
        w.or_ctrl1(TX_META_DESC_META_DESC_MASK | send_op_type::RDMA_WRITE);
        w.or_ctrl2(TX_META_DESC_FIRST_MASK | TX_META_DESC_LAST_MASK);
        w.set_dest(0x0203, 0x0405, 0x0a0b_0c0d);
        w.set_length(1);
        w.set_imm(0xdead_beef);
        w.set_remote(0x1111_2222_3333_4444, 0x55);
        w.set_remote_len(4096);
        w.set_rdma_local(0x6666_7777_8888_9999, 0xff12_3456, 4096);
        let b = &w.0;
        assert_eq!(&b[0..2], &[0x34, 0x12]);
        assert_eq!(b[2], 0x82);
        assert_eq!(b[3], 0x0c);
        assert_eq!(&b[4..8], &[0x03, 0x02, 1, 0]);
        assert_eq!(&b[8..12], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&b[12..14], &[0x05, 0x04]);
        assert_eq!(&b[16..20], &0x0a0b_0c0du32.to_le_bytes());
        assert_eq!(&b[32..36], &4096u32.to_le_bytes(), "remote length");
        assert_eq!(&b[36..40], &0x55u32.to_le_bytes(), "rkey");
        assert_eq!(&b[40..48], &0x1111_2222_3333_4444u64.to_le_bytes());
        assert_eq!(&b[52..56], &0x0012_3456u32.to_le_bytes(), "24-bit lkey");
        assert_eq!(w.rdma_local(), (0x6666_7777_8888_9999, 0x12_3456, 4096));
        assert_eq!(w.remote(), (0x1111_2222_3333_4444, 0x55, 4096));
        assert_eq!(
            (w.dest_qp(), w.ah(), w.qkey()),
            (0x0203, 0x0405, 0x0a0b_0c0d)
        );
        w.set_buf(1, 7, 8, 9);
        assert_eq!(w.buf(1), (7, 8, 9));
        assert_eq!(DATA + BUF_DESC, 48);
    }
}
