//! Send WQE encoders: `struct efa_io_tx_wqe` (64 bytes) and `efa_io_tx_wqe_128`, filled
//! the way libefa's `efa_send_wr_*` / `efa_post_send` fill them, so that a WQE written by
//! the direct backend is byte-for-byte the one libefa (and efa-sim's provider) writes.
//!
//! Every WQE is one whole transaction: `META_DESC`, `FIRST` and `LAST` are always set,
//! `META_EXTENSION` never, and the processing hints are zero. The immediate is taken in
//! host order (libefa converts the verbs big-endian value with `be32toh`).

use super::bits::{flag8, prep8, put_addr, put_u16, put_u32};
use super::LocalBuf;
use core::mem::{offset_of, size_of};
use efa_sys::io::{
    efa_io_rdma_req, efa_io_rdma_req_128, efa_io_remote_mem_addr, efa_io_tx_buf_desc,
    efa_io_tx_meta_desc, efa_io_tx_wqe, efa_io_tx_wqe_128, send_op_type, TX_BUF_DESC_LKEY_MASK,
    TX_DESC_INLINE_MAX_SIZE, TX_DESC_INLINE_MAX_SIZE_128, TX_DESC_NUM_BUFS, TX_DESC_NUM_RDMA_BUFS,
    TX_DESC_SIZE_128, TX_DESC_SIZE_64, TX_META_DESC_COMP_REQ_MASK, TX_META_DESC_FIRST_MASK,
    TX_META_DESC_HAS_IMM_MASK, TX_META_DESC_INLINE_MSG_MASK, TX_META_DESC_LAST_MASK,
    TX_META_DESC_META_DESC_MASK, TX_META_DESC_OP_TYPE_MASK, TX_META_DESC_PHASE_MASK,
};

pub(super) const REQ_ID: usize = offset_of!(efa_io_tx_meta_desc, req_id);
pub(super) const CTRL1: usize = offset_of!(efa_io_tx_meta_desc, ctrl1);
pub(super) const CTRL2: usize = offset_of!(efa_io_tx_meta_desc, ctrl2);
pub(super) const DEST_QP: usize = offset_of!(efa_io_tx_meta_desc, dest_qp_num);
pub(super) const LENGTH: usize = offset_of!(efa_io_tx_meta_desc, length);
pub(super) const IMM: usize = offset_of!(efa_io_tx_meta_desc, immediate_data);
pub(super) const AH: usize = offset_of!(efa_io_tx_meta_desc, ah);
pub(super) const QKEY: usize = offset_of!(efa_io_tx_meta_desc, qkey);
/// Start of the payload union (buffers, inline data or RDMA request).
pub(super) const DATA: usize = offset_of!(efa_io_tx_wqe, data);
/// Stride of the send buffer descriptors.
pub(super) const BUF_DESC: usize = size_of::<efa_io_tx_buf_desc>();
pub(super) const BUF_LEN: usize = offset_of!(efa_io_tx_buf_desc, length);
pub(super) const BUF_LKEY: usize = offset_of!(efa_io_tx_buf_desc, lkey);
pub(super) const BUF_LO: usize = offset_of!(efa_io_tx_buf_desc, buf_addr_lo);
pub(super) const BUF_HI: usize = offset_of!(efa_io_tx_buf_desc, buf_addr_hi);
/// The remote side of an RDMA WQE.
pub(super) const REMOTE: usize = DATA + offset_of!(efa_io_rdma_req, remote_mem);
pub(super) const REM_LEN: usize = offset_of!(efa_io_remote_mem_addr, length);
pub(super) const REM_RKEY: usize = offset_of!(efa_io_remote_mem_addr, rkey);
pub(super) const REM_LO: usize = offset_of!(efa_io_remote_mem_addr, buf_addr_lo);
pub(super) const REM_HI: usize = offset_of!(efa_io_remote_mem_addr, buf_addr_hi);
/// The local buffer of an RDMA WQE, and (128-byte WQEs) the inline data of an RDMA write.
pub(super) const RDMA_LOCAL: usize = DATA + offset_of!(efa_io_rdma_req, local_mem);

// The 128-byte format puts its payload, and an RDMA request's local side, where the
// 64-byte one does: one set of offsets serves both.
const _: () = assert!(DATA == offset_of!(efa_io_tx_wqe_128, data));
const _: () = assert!(RDMA_LOCAL == DATA + offset_of!(efa_io_rdma_req_128, local));
const _: () = assert!(DATA + TX_DESC_INLINE_MAX_SIZE == TX_DESC_SIZE_64);
const _: () = assert!(DATA + TX_DESC_INLINE_MAX_SIZE_128 <= TX_DESC_SIZE_128);
const _: () = assert!(RDMA_LOCAL + TX_DESC_INLINE_MAX_SIZE_128 <= TX_DESC_SIZE_128);

/// The ring-slot part of every WQE: its request id, phase and completion request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxControl {
    /// Request id, echoed in the completion.
    pub req_id: u16,
    /// The producer's phase for the slot: the parity of the laps around the ring.
    pub phase: bool,
    /// Ask for a completion (libefa always does).
    pub completion: bool,
}

/// Where a WQE goes: the destination QP, the local AH number for its address, its Q_Key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Destination {
    /// Remote QP number (EFA QP numbers fit 16 bits).
    pub qpn: u16,
    /// Device AH number (`efadv_query_ah`'s `ahn`).
    pub ah: u16,
    /// Remote Q_Key.
    pub qkey: u32,
}

/// Remote memory of an RDMA operation (its length is the local length, as libefa sets it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// The local side of a SEND or RDMA write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxData<'a> {
    /// Registered buffers (SEND: up to [`TX_DESC_NUM_BUFS`]; RDMA: up to
    /// [`TX_DESC_NUM_RDMA_BUFS`]; none: a zero-length SEND).
    Sges(&'a [LocalBuf]),
    /// Bytes copied into the WQE.
    Inline(&'a [u8]),
}

/// One send operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxOp<'a> {
    /// SEND, with immediate data (host order) if given.
    Send {
        /// Payload.
        data: TxData<'a>,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA write, with immediate data (host order) if given.
    RdmaWrite {
        /// Payload (inline only in a 128-byte WQE, as libefa allows it).
        data: TxData<'a>,
        /// Where it is written.
        remote: RemoteAddr,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA read of `remote` into `local`.
    RdmaRead {
        /// Where the bytes land.
        local: LocalBuf,
        /// Where they are read from.
        remote: RemoteAddr,
    },
}

/// Why a request does not fit a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeError {
    /// More buffers than the WQE format holds.
    TooManySges {
        /// Buffers given.
        given: usize,
        /// Most the format holds.
        max: usize,
    },
    /// More inline bytes than the WQE format holds.
    InlineTooLong {
        /// Bytes given.
        len: usize,
        /// Most the format holds.
        max: usize,
    },
    /// Inline RDMA write in a 64-byte WQE (libefa offers it only in 128-byte WQEs).
    InlineWriteNeedsWideWqe,
    /// The local lengths add up past `u32::MAX`.
    LengthOverflow,
}

/// Encodes a 64-byte WQE (`struct efa_io_tx_wqe`) into `out`, overwriting all of it.
#[inline]
pub fn encode_tx_wqe(
    out: &mut [u8; TX_DESC_SIZE_64],
    ctl: TxControl,
    dest: Destination,
    op: &TxOp<'_>,
) -> Result<(), WqeError> {
    encode(out, TX_DESC_INLINE_MAX_SIZE, ctl, dest, op)
}

/// Encodes a 128-byte WQE (`struct efa_io_tx_wqe_128`) into `out`, overwriting all of it.
#[inline]
pub fn encode_tx_wqe_128(
    out: &mut [u8; TX_DESC_SIZE_128],
    ctl: TxControl,
    dest: Destination,
    op: &TxOp<'_>,
) -> Result<(), WqeError> {
    encode(out, TX_DESC_INLINE_MAX_SIZE_128, ctl, dest, op)
}

/// The WQE op type of `op`.
pub fn op_type(op: &TxOp<'_>) -> u8 {
    match op {
        TxOp::Send { .. } => send_op_type::SEND,
        TxOp::RdmaWrite { .. } => send_op_type::RDMA_WRITE,
        TxOp::RdmaRead { .. } => send_op_type::RDMA_READ,
    }
}

/// Everything is checked before the first byte is written, so `out` is only touched by
/// a request that fits.
#[inline(always)]
fn encode(
    out: &mut [u8],
    inline_max: usize,
    ctl: TxControl,
    dest: Destination,
    op: &TxOp<'_>,
) -> Result<(), WqeError> {
    let (data, imm, remote) = match op {
        TxOp::Send { data, imm } => (*data, *imm, None),
        TxOp::RdmaWrite { data, remote, imm } => (*data, *imm, Some(*remote)),
        TxOp::RdmaRead { local, remote } => (
            TxData::Sges(core::slice::from_ref(local)),
            None,
            Some(*remote),
        ),
    };
    let is_rdma = remote.is_some();
    let remote_len = match data {
        TxData::Sges(bufs) => {
            let max = if is_rdma {
                TX_DESC_NUM_RDMA_BUFS
            } else {
                TX_DESC_NUM_BUFS
            };
            if bufs.len() > max {
                return Err(WqeError::TooManySges {
                    given: bufs.len(),
                    max,
                });
            }
            bufs.iter()
                .try_fold(0u32, |sum, b| sum.checked_add(b.length))
                .ok_or(WqeError::LengthOverflow)?
        }
        TxData::Inline(bytes) => {
            if is_rdma && inline_max != TX_DESC_INLINE_MAX_SIZE_128 {
                return Err(WqeError::InlineWriteNeedsWideWqe);
            }
            if bytes.len() > inline_max {
                return Err(WqeError::InlineTooLong {
                    len: bytes.len(),
                    max: inline_max,
                });
            }
            // Fits: at most TX_DESC_INLINE_MAX_SIZE_128 bytes.
            bytes.len() as u32
        }
    };

    out.fill(0);
    let inline = matches!(data, TxData::Inline(_));
    out[CTRL1] = TX_META_DESC_META_DESC_MASK
        | prep8(TX_META_DESC_OP_TYPE_MASK, op_type(op))
        | flag8(TX_META_DESC_HAS_IMM_MASK, imm.is_some())
        | flag8(TX_META_DESC_INLINE_MSG_MASK, inline);
    out[CTRL2] = flag8(TX_META_DESC_PHASE_MASK, ctl.phase)
        | TX_META_DESC_FIRST_MASK
        | TX_META_DESC_LAST_MASK
        | flag8(TX_META_DESC_COMP_REQ_MASK, ctl.completion);
    put_u16(out, REQ_ID, ctl.req_id);
    put_u16(out, DEST_QP, dest.qpn);
    put_u16(out, AH, dest.ah);
    put_u32(out, QKEY, dest.qkey);
    put_u32(out, IMM, imm.unwrap_or(0));

    let local = if is_rdma { RDMA_LOCAL } else { DATA };
    match data {
        TxData::Sges(bufs) => {
            // Buffer count; checked above against TX_DESC_NUM_BUFS.
            put_u16(out, LENGTH, bufs.len() as u16);
            for (i, b) in bufs.iter().enumerate() {
                put_buf(out, local + i * BUF_DESC, b);
            }
        }
        TxData::Inline(bytes) => {
            // Byte count; checked above against the inline area.
            put_u16(out, LENGTH, bytes.len() as u16);
            out[local..local + bytes.len()].copy_from_slice(bytes);
        }
    }
    if let Some(r) = remote {
        put_u32(out, REMOTE + REM_LEN, remote_len);
        put_u32(out, REMOTE + REM_RKEY, r.rkey);
        put_addr(out, REMOTE + REM_LO, REMOTE + REM_HI, r.addr);
    }
    Ok(())
}

#[inline(always)]
fn put_buf(out: &mut [u8], at: usize, b: &LocalBuf) {
    put_u32(out, at + BUF_LEN, b.length);
    put_u32(out, at + BUF_LKEY, b.lkey & TX_BUF_DESC_LKEY_MASK);
    put_addr(out, at + BUF_LO, at + BUF_HI, b.addr);
}

#[cfg(test)]
#[path = "wqe_tests.rs"]
mod tests;
