//! The direct backend's common WQE, built as eight little-endian words in registers: a
//! 64-byte SEND, RDMA write or RDMA read of one registered buffer (with or without
//! immediate). It is what [`super::wqe::encode_tx_wqe`] writes for the same request
//! (the tests compare every field and shape), without the general encoder's byte
//! buffer, zero-fill and error paths: a checked one-SGE request always fits. Other shapes
//! (gather lists, inline data, 128-byte WQEs) take the general encoder.

use super::bits::{flag8, prep8};
use super::wqe::{
    Destination, TxControl, AH, BUF_HI, BUF_LEN, BUF_LKEY, BUF_LO, CTRL1, CTRL2, DATA, DEST_QP,
    IMM, LENGTH, QKEY, RDMA_LOCAL, REMOTE, REM_HI, REM_LEN, REM_LO, REM_RKEY, REQ_ID,
};
use super::LocalBuf;
use efa_sys::io::{
    send_op_type, TX_BUF_DESC_LKEY_MASK, TX_DESC_SIZE_64, TX_META_DESC_COMP_REQ_MASK,
    TX_META_DESC_FIRST_MASK, TX_META_DESC_HAS_IMM_MASK, TX_META_DESC_LAST_MASK,
    TX_META_DESC_META_DESC_MASK, TX_META_DESC_OP_TYPE_MASK, TX_META_DESC_PHASE_MASK,
};

/// A 64-byte WQE as the words stored into its slot, in order.
pub type WqeWords = [u64; TX_DESC_SIZE_64 / 8];

// The word layout below, checked against the bindings' field offsets: word 0 holds
// req_id, ctrl1, ctrl2, dest_qp_num and length; word 1 the immediate and the AH (ctrl3
// and the byte after it stay 0); word 2 the qkey; word 3 is reserved and req_id_ex (0);
// words 4-7 the payload.
const _: () = assert!(REQ_ID == 0 && CTRL1 == 2 && CTRL2 == 3 && DEST_QP == 4 && LENGTH == 6);
const _: () = assert!(IMM == 8 && AH == 12 && QKEY == 16 && DATA == 32);
const _: () = assert!(REMOTE == 32 && RDMA_LOCAL == 48);
const _: () = assert!(BUF_LEN == 0 && BUF_LKEY == 4 && BUF_LO == 8 && BUF_HI == 12);
const _: () = assert!(REM_LEN == 0 && REM_RKEY == 4 && REM_LO == 8 && REM_HI == 12);

/// The operation of a one-buffer WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneBufOp {
    /// SEND of the buffer.
    Send,
    /// RDMA write of the buffer to (`raddr`, `rkey`).
    Write {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA read from (`raddr`, `rkey`) into the buffer.
    Read {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
}

/// The words of a 64-byte WQE of `op` on `buf`, with immediate `imm` (host order) if
/// given (SEND and write only; a read ignores it, as libefa's has none).
#[inline(always)]
pub fn one_buf_wqe(
    ctl: TxControl,
    dest: Destination,
    op: OneBufOp,
    buf: LocalBuf,
    imm: Option<u32>,
) -> WqeWords {
    let (ty, imm) = match op {
        OneBufOp::Send => (send_op_type::SEND, imm),
        OneBufOp::Write { .. } => (send_op_type::RDMA_WRITE, imm),
        OneBufOp::Read { .. } => (send_op_type::RDMA_READ, None),
    };
    let ctrl1 = TX_META_DESC_META_DESC_MASK
        | prep8(TX_META_DESC_OP_TYPE_MASK, ty)
        | flag8(TX_META_DESC_HAS_IMM_MASK, imm.is_some());
    let ctrl2 = flag8(TX_META_DESC_PHASE_MASK, ctl.phase)
        | TX_META_DESC_FIRST_MASK
        | TX_META_DESC_LAST_MASK
        | flag8(TX_META_DESC_COMP_REQ_MASK, ctl.completion);
    let w0 = u64::from(ctl.req_id)
        | u64::from(ctrl1) << 16
        | u64::from(ctrl2) << 24
        | u64::from(dest.qpn) << 32
        | 1 << 48; // one buffer descriptor
    let w1 = u64::from(imm.unwrap_or(0)) | u64::from(dest.ah) << 32;
    let w2 = u64::from(dest.qkey);
    let local = u64::from(buf.length) | u64::from(buf.lkey & TX_BUF_DESC_LKEY_MASK) << 32;
    match op {
        OneBufOp::Send => [w0, w1, w2, 0, local, buf.addr, 0, 0],
        // The remote length is the local one, as libefa sets it.
        OneBufOp::Write { raddr, rkey } | OneBufOp::Read { raddr, rkey } => [
            w0,
            w1,
            w2,
            0,
            u64::from(buf.length) | u64::from(rkey) << 32,
            raddr,
            local,
            buf.addr,
        ],
    }
}

/// The bytes the words stand for (little-endian), for comparing with the general
/// encoder.
pub fn wqe_bytes(w: &WqeWords) -> [u8; TX_DESC_SIZE_64] {
    let mut out = [0u8; TX_DESC_SIZE_64];
    for (chunk, word) in out.chunks_exact_mut(8).zip(w) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direct::wqe::{encode_tx_wqe, RemoteAddr, TxData, TxOp};

    #[test]
    fn every_one_buffer_shape_is_the_general_encoders_bytes() {
        let buf = LocalBuf {
            addr: 0x1122_3344_5566_7788,
            lkey: 0xff12_3456, // bits above the 24-bit key are masked, as libefa does
            length: 0x0bad_cafe,
        };
        let remote = RemoteAddr {
            addr: 0x8877_6655_4433_2211,
            rkey: 0xdead_beef,
        };
        let dest = Destination {
            qpn: 0x1234,
            ah: 0xabcd,
            qkey: 0x5eed_5eed,
        };
        for (phase, completion, req_id) in
            [(false, true, 0), (true, true, 0xffff), (true, false, 7)]
        {
            let ctl = TxControl {
                req_id,
                phase,
                completion,
            };
            let bufs = [buf];
            let data = TxData::Sges(&bufs);
            let cases = [
                (OneBufOp::Send, None, TxOp::Send { data, imm: None }),
                (
                    OneBufOp::Send,
                    Some(0x0102_0304),
                    TxOp::Send {
                        data,
                        imm: Some(0x0102_0304),
                    },
                ),
                (
                    OneBufOp::Write {
                        raddr: remote.addr,
                        rkey: remote.rkey,
                    },
                    None,
                    TxOp::RdmaWrite {
                        data,
                        remote,
                        imm: None,
                    },
                ),
                (
                    OneBufOp::Write {
                        raddr: remote.addr,
                        rkey: remote.rkey,
                    },
                    Some(u32::MAX),
                    TxOp::RdmaWrite {
                        data,
                        remote,
                        imm: Some(u32::MAX),
                    },
                ),
                (
                    OneBufOp::Read {
                        raddr: remote.addr,
                        rkey: remote.rkey,
                    },
                    None,
                    TxOp::RdmaRead { local: buf, remote },
                ),
            ];
            for (op, imm, general) in cases {
                let mut want = [0x5au8; TX_DESC_SIZE_64];
                encode_tx_wqe(&mut want, ctl, dest, &general).unwrap();
                let got = wqe_bytes(&one_buf_wqe(ctl, dest, op, buf, imm));
                assert_eq!(got, want, "{op:?} {imm:?} {ctl:?}");
            }
        }
    }
}
