//! Completion entries: every CQ slot is 32 bytes (`struct efa_io_rx_cdesc_ex`, the size
//! rdma-core allocates CQs with); a send completion (`efa_io_tx_cdesc`) uses the first 16.
//! The device publishes the first 8 bytes, whose flags byte carries the phase bit, last
//! and whole ([`crate::ring::Ring::publish_slot`]); pollers load that word first
//! ([`crate::ring::Ring::load_head`]) and take the flags from it ([`head_flags`]).

use core::mem::offset_of;
use efa_sys::io::{
    efa_io_cdesc_common, efa_io_rx_cdesc, efa_io_rx_cdesc_ex, queue_type, send_op_type,
    CDESC_COMMON_HAS_IMM_MASK, CDESC_COMMON_OP_TYPE_MASK, CDESC_COMMON_OP_TYPE_SHIFT,
    CDESC_COMMON_PHASE_MASK, CDESC_COMMON_Q_TYPE_MASK, CDESC_COMMON_Q_TYPE_SHIFT,
    CDESC_COMMON_UNSOLICITED_MASK,
};

/// The AH number that names no AH: a receive completion's `ah` for a sender the receiver
/// has no AH for, and what a WQE naming no valid AH carries.
pub const NO_AH: u16 = 0xffff;

/// Bytes per CQ slot.
pub const SIZE: usize = core::mem::size_of::<efa_io_rx_cdesc_ex>();
/// Bytes of a send completion (`struct efa_io_tx_cdesc`) at the start of its slot.
pub const SEND_SIZE: usize = core::mem::size_of::<efa_sys::io::efa_io_tx_cdesc>();
/// Offset of the flags byte (phase bit).
pub const FLAGS: usize = offset_of!(efa_io_cdesc_common, flags);

const REQ_ID: usize = offset_of!(efa_io_cdesc_common, req_id);
const STATUS: usize = offset_of!(efa_io_cdesc_common, status);
const QP_NUM: usize = offset_of!(efa_io_cdesc_common, qp_num);
const LENGTH: usize = offset_of!(efa_io_rx_cdesc, length);
const AH: usize = offset_of!(efa_io_rx_cdesc, ah);
const SRC_QP: usize = offset_of!(efa_io_rx_cdesc, src_qp_num);
const IMM: usize = offset_of!(efa_io_rx_cdesc, imm);
const EXT: usize = offset_of!(efa_io_rx_cdesc_ex, u);

/// A completion as the device reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Request id of the completed WQE (receive: of its first descriptor).
    pub req_id: u16,
    /// Raw EFA status.
    pub status: u8,
    /// [`queue_type`].
    pub q_type: u8,
    /// [`send_op_type`].
    pub op_type: u8,
    /// Immediate data present (receive).
    pub has_imm: bool,
    /// Write-with-immediate that consumed no receive WQE.
    pub unsolicited: bool,
    /// Local QP number.
    pub qp_num: u16,
    /// Received bytes (receive; 16 bits for SEND, 32 bits for RDMA write with immediate).
    pub length: u32,
    /// Receiver-side AH number of the sender, 0xFFFF if unknown (receive).
    pub ah: u16,
    /// Sender QP number (receive).
    pub src_qp: u16,
    /// Immediate data, host order (receive).
    pub imm: u32,
    /// Sender GID (receive from an unknown AH on a CQ that reports it).
    pub src_gid: Option<[u8; 16]>,
}

impl Cqe {
    /// A send-queue completion.
    pub fn send(qp_num: u16, req_id: u16, status: u8, op_type: u8) -> Cqe {
        Cqe {
            req_id,
            status,
            q_type: queue_type::SEND,
            op_type,
            qp_num,
            ..Cqe::default()
        }
    }

    /// Whether this is a receive-queue completion.
    pub fn is_recv(&self) -> bool {
        self.q_type == queue_type::RECV
    }

    /// The first [`SEND_SIZE`] slot bytes with `phase` in the flags byte: all of a send
    /// completion, the common part of a receive completion.
    #[inline]
    pub fn encode_common(&self, phase: u8) -> [u8; SEND_SIZE] {
        let mut b = [0u8; SEND_SIZE];
        b[REQ_ID..REQ_ID + 2].copy_from_slice(&self.req_id.to_le_bytes());
        b[STATUS] = self.status;
        let mut flags = (phase & CDESC_COMMON_PHASE_MASK)
            | ((self.q_type << CDESC_COMMON_Q_TYPE_SHIFT) & CDESC_COMMON_Q_TYPE_MASK)
            | ((self.op_type << CDESC_COMMON_OP_TYPE_SHIFT) & CDESC_COMMON_OP_TYPE_MASK);
        if self.has_imm {
            flags |= CDESC_COMMON_HAS_IMM_MASK;
        }
        if self.unsolicited {
            flags |= CDESC_COMMON_UNSOLICITED_MASK;
        }
        b[FLAGS] = flags;
        b[QP_NUM..QP_NUM + 2].copy_from_slice(&self.qp_num.to_le_bytes());
        b
    }

    /// The 32 slot bytes with `phase` in the flags byte.
    #[inline]
    pub fn encode(&self, phase: u8) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[..SEND_SIZE].copy_from_slice(&self.encode_common(phase));
        if self.is_recv() {
            b[LENGTH..LENGTH + 2].copy_from_slice(&(self.length as u16).to_le_bytes());
            b[AH..AH + 2].copy_from_slice(&self.ah.to_le_bytes());
            b[SRC_QP..SRC_QP + 2].copy_from_slice(&self.src_qp.to_le_bytes());
            b[IMM..IMM + 4].copy_from_slice(&self.imm.to_le_bytes());
            if self.op_type == send_op_type::RDMA_WRITE {
                b[EXT..EXT + 2].copy_from_slice(&((self.length >> 16) as u16).to_le_bytes());
            } else if let Some(g) = self.src_gid {
                b[EXT..EXT + 16].copy_from_slice(&g);
            }
        }
        b
    }

    /// Decodes a slot; `with_src_addr`: the CQ reports sender GIDs of unknown AHs.
    #[inline]
    pub fn decode(b: &[u8; SIZE], with_src_addr: bool) -> Cqe {
        let h = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let flags = b[FLAGS];
        let mut c = Cqe {
            req_id: h(REQ_ID),
            status: b[STATUS],
            q_type: (flags & CDESC_COMMON_Q_TYPE_MASK) >> CDESC_COMMON_Q_TYPE_SHIFT,
            op_type: (flags & CDESC_COMMON_OP_TYPE_MASK) >> CDESC_COMMON_OP_TYPE_SHIFT,
            has_imm: flags & CDESC_COMMON_HAS_IMM_MASK != 0,
            unsolicited: flags & CDESC_COMMON_UNSOLICITED_MASK != 0,
            qp_num: h(QP_NUM),
            ..Cqe::default()
        };
        if c.is_recv() {
            c.length = u32::from(h(LENGTH));
            c.ah = h(AH);
            c.src_qp = h(SRC_QP);
            c.imm = u32::from_le_bytes([b[IMM], b[IMM + 1], b[IMM + 2], b[IMM + 3]]);
            if c.op_type == send_op_type::RDMA_WRITE {
                c.length |= u32::from(h(EXT)) << 16;
            } else if with_src_addr && c.ah == NO_AH {
                let mut g = [0u8; 16];
                g.copy_from_slice(&b[EXT..EXT + 16]);
                c.src_gid = Some(g);
            }
        }
        c
    }
}

/// The flags byte in a slot's first word as [`crate::ring::Ring::load_head`] returns it
/// (the word is published whole, so the flags byte is read from it, not loaded alone).
#[inline(always)]
pub fn head_flags(head: u64) -> u8 {
    const { assert!(FLAGS < 8) };
    head.to_ne_bytes()[FLAGS]
}

/// Whether a slot's flags byte says receive queue.
#[inline]
pub fn is_recv_flags(flags: u8) -> bool {
    (flags & CDESC_COMMON_Q_TYPE_MASK) >> CDESC_COMMON_Q_TYPE_SHIFT == queue_type::RECV
}

/// The phase bit of a slot's flags byte.
#[inline]
pub fn phase_of(flags: u8) -> u8 {
    flags & CDESC_COMMON_PHASE_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_completion_round_trips_with_high_length_or_gid() {
        let w = Cqe {
            req_id: 9,
            status: 0,
            q_type: queue_type::RECV,
            op_type: send_op_type::RDMA_WRITE,
            has_imm: true,
            unsolicited: true,
            qp_num: 0x202,
            length: 0x0003_0004,
            ah: 7,
            src_qp: 0x303,
            imm: 0x1122_3344,
            src_gid: None,
        };
        let b = w.encode(1);
        assert_eq!(b[FLAGS], 0x01 | 0x04 | 0x08 | 0x20 | 0x80);
        assert_eq!(&b[6..8], &[4, 0], "length bits 15:0");
        assert_eq!(&b[16..18], &[3, 0], "length_hi in the extension");
        assert_eq!(Cqe::decode(&b, true), w);
        let s = Cqe {
            op_type: send_op_type::SEND,
            length: 100,
            ah: 0xffff,
            has_imm: false,
            unsolicited: false,
            src_gid: Some([0xab; 16]),
            ..w
        };
        let b = s.encode(0);
        assert_eq!(phase_of(b[FLAGS]), 0);
        assert_eq!(Cqe::decode(&b, true), s);
        assert_eq!(Cqe::decode(&b, false).src_gid, None);
        let t = Cqe::send(5, 6, 10, send_op_type::RDMA_READ);
        let b = t.encode(1);
        assert_eq!(b[FLAGS], 0x01 | 0x02 | 0x10);
        assert_eq!(Cqe::decode(&b, false), t);
        assert!(
            b[6..].iter().all(|x| *x == 0),
            "send completions use 6 bytes"
        );
    }
}
