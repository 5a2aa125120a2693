//! Completion entries, as the device writes them (`struct efa_io_tx_cdesc`,
//! `efa_io_rx_cdesc`, `efa_io_rx_cdesc_ex`), read the way libefa's `efa_poll_cq` /
//! `efa_process_ex_cqe` read them; and the CQ doorbell word (`efa_update_cq_doorbell`).
//!
//! A poller owns a slot once its phase bit equals the poller's phase for the lap
//! ([`is_pending`]); only then, after [`super::barrier::from_device_barrier`], may the rest
//! of the entry be read. The first lap's phase is 1 (the ring starts zeroed).

use super::bits::{get32, get8, get_u16, get_u32, prep32};
use crate::AH_UNKNOWN;
use core::mem::{offset_of, size_of};
use efa_sys::io::{
    efa_io_cdesc_common, efa_io_rx_cdesc, efa_io_rx_cdesc_ex, efa_io_rx_cdesc_rdma_write,
    efa_io_tx_cdesc, queue_type, send_op_type, CDESC_COMMON_HAS_IMM_MASK,
    CDESC_COMMON_OP_TYPE_MASK, CDESC_COMMON_PHASE_MASK, CDESC_COMMON_Q_TYPE_MASK,
    CDESC_COMMON_UNSOLICITED_MASK, REGS_CQ_DB_ARM_MASK, REGS_CQ_DB_CMD_SN_MASK,
    REGS_CQ_DB_CONSUMER_INDEX_MASK,
};

/// Bytes of a basic completion (send, or receive without extension).
pub const CQE_SIZE: usize = size_of::<efa_io_tx_cdesc>();
/// Bytes of an extended receive completion (the entry size rdma-core gives every CQ).
pub const CQE_SIZE_EX: usize = size_of::<efa_io_rx_cdesc_ex>();
/// Bytes of the part every completion has (`struct efa_io_cdesc_common`).
pub const COMMON_SIZE: usize = size_of::<efa_io_cdesc_common>();
/// Offset of the flags byte, which holds the phase bit.
pub const FLAGS: usize = offset_of!(efa_io_cdesc_common, flags);

const REQ_ID: usize = offset_of!(efa_io_cdesc_common, req_id);
const STATUS: usize = offset_of!(efa_io_cdesc_common, status);
const QP_NUM: usize = offset_of!(efa_io_cdesc_common, qp_num);
const LENGTH: usize = offset_of!(efa_io_rx_cdesc, length);
const AH: usize = offset_of!(efa_io_rx_cdesc, ah);
const SRC_QP: usize = offset_of!(efa_io_rx_cdesc, src_qp_num);
const IMM: usize = offset_of!(efa_io_rx_cdesc, imm);
const EXT: usize = offset_of!(efa_io_rx_cdesc_ex, u);
const LENGTH_HI: usize = EXT + offset_of!(efa_io_rx_cdesc_rdma_write, length_hi);
const GID_LEN: usize = 16;

const _: () = assert!(CQE_SIZE == size_of::<efa_io_rx_cdesc>());
const _: () = assert!(EXT + GID_LEN == CQE_SIZE_EX);

/// Whether the entry whose flags byte is `flags` is the device's newest for a poller in
/// phase `phase` (`efa_cqe_is_pending`).
#[inline(always)]
pub fn is_pending(flags: u8, phase: bool) -> bool {
    (flags & CDESC_COMMON_PHASE_MASK != 0) == phase
}

/// The part every completion has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqeCommon {
    /// Request id of the completed WQE (receive: of its first descriptor).
    pub req_id: u16,
    /// Raw EFA status (`vendor_err`; [`efa_sys::vendor::comp_status`]).
    pub status: u8,
    /// The device's phase for the slot.
    pub phase: bool,
    /// [`queue_type`] (send or receive).
    pub queue_type: u8,
    /// [`send_op_type`].
    pub op_type: u8,
    /// Immediate data present (receive).
    pub has_imm: bool,
    /// Write with immediate that consumed no receive WQE.
    pub unsolicited: bool,
    /// Local QP number.
    pub qp_num: u16,
}

/// What only receive completions carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvFields {
    /// Bytes received: 16 bits, 32 for RDMA write with immediate on an extended entry.
    pub length: u32,
    /// The receiver's AH number for the sender, [`AH_UNKNOWN`] if it has none.
    pub ah: u16,
    /// Sender QP number.
    pub src_qp: u16,
    /// Immediate data, host order, when the entry has one.
    pub imm: Option<u32>,
    /// Sender GID: extended entries from an unknown AH, on CQs that report it.
    pub sender_gid: Option<[u8; GID_LEN]>,
}

/// A decoded completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Common part.
    pub common: CqeCommon,
    /// Receive part (None for a send completion).
    pub recv: Option<RecvFields>,
}

/// Decodes the common part from an entry's first bytes.
#[inline]
pub fn decode_common(entry: &[u8; COMMON_SIZE]) -> CqeCommon {
    let flags = entry[FLAGS];
    CqeCommon {
        req_id: get_u16(entry, REQ_ID),
        status: entry[STATUS],
        phase: flags & CDESC_COMMON_PHASE_MASK != 0,
        queue_type: get8(CDESC_COMMON_Q_TYPE_MASK, flags),
        op_type: get8(CDESC_COMMON_OP_TYPE_MASK, flags),
        has_imm: flags & CDESC_COMMON_HAS_IMM_MASK != 0,
        unsolicited: flags & CDESC_COMMON_UNSOLICITED_MASK != 0,
        qp_num: get_u16(entry, QP_NUM),
    }
}

/// Decodes one CQ entry of `entry.len()` bytes (the CQ's entry size: 16, or 32 with the
/// receive extension); `reports_sender_gid`: the CQ was created to report sender GIDs.
/// None when the entry is shorter than a basic completion.
#[inline]
pub fn decode_cqe(entry: &[u8], reports_sender_gid: bool) -> Option<Cqe> {
    let head = entry.first_chunk::<COMMON_SIZE>()?;
    if entry.len() < CQE_SIZE {
        return None;
    }
    let common = decode_common(head);
    if common.queue_type != queue_type::RECV {
        return Some(Cqe { common, recv: None });
    }
    let extended = entry.len() >= CQE_SIZE_EX;
    let is_write = common.op_type == send_op_type::RDMA_WRITE;
    let mut length = u32::from(get_u16(entry, LENGTH));
    if is_write && extended {
        length |= u32::from(get_u16(entry, LENGTH_HI)) << 16;
    }
    let ah = get_u16(entry, AH);
    // The extension holds the GID or the high length bits, never both.
    let sender_gid = (reports_sender_gid && extended && !is_write && ah == AH_UNKNOWN)
        .then(|| entry[EXT..EXT + GID_LEN].try_into().ok())
        .flatten();
    let recv = RecvFields {
        length,
        ah,
        src_qp: get_u16(entry, SRC_QP),
        imm: common.has_imm.then(|| get_u32(entry, IMM)),
        sender_gid,
    };
    Some(Cqe {
        common,
        recv: Some(recv),
    })
}

// The word layout of [`decode_cqe_words`], checked against the bindings: word 0 holds
// req_id, status, flags, qp_num and (receive) length; word 1 the AH, the source QP and
// the immediate; words 2 and 3 the extension (the high length bits, or the GID).
const _: () = assert!(REQ_ID == 0 && STATUS == 2 && FLAGS == 3 && QP_NUM == 4 && LENGTH == 6);
const _: () = assert!(AH == 8 && SRC_QP == 10 && IMM == 12 && EXT == 16);
const _: () = assert!(LENGTH_HI / 8 == 2);

/// The `u16` at byte `at` of a little-endian word list.
#[inline(always)]
fn word_u16(w: u64, at: usize) -> u16 {
    (w >> ((at % 8) * 8)) as u16
}

/// [`decode_cqe`] of an entry of `entry_size` bytes read as little-endian 8-byte words:
/// `head` is word 0 (the one that holds the phase), `word(i)` reads word `i` (only the
/// words the entry's kind needs are read: word 1 for receives, words 2 and 3 for an
/// extended receive's high length bits or sender GID). None as `decode_cqe`.
#[inline(always)]
pub fn decode_cqe_words(
    entry_size: usize,
    head: u64,
    mut word: impl FnMut(usize) -> u64,
    reports_sender_gid: bool,
) -> Option<Cqe> {
    if entry_size < CQE_SIZE {
        return None;
    }
    let flags = (head >> (FLAGS * 8)) as u8;
    let common = CqeCommon {
        req_id: word_u16(head, REQ_ID),
        status: (head >> (STATUS * 8)) as u8,
        phase: flags & CDESC_COMMON_PHASE_MASK != 0,
        queue_type: get8(CDESC_COMMON_Q_TYPE_MASK, flags),
        op_type: get8(CDESC_COMMON_OP_TYPE_MASK, flags),
        has_imm: flags & CDESC_COMMON_HAS_IMM_MASK != 0,
        unsolicited: flags & CDESC_COMMON_UNSOLICITED_MASK != 0,
        qp_num: word_u16(head, QP_NUM),
    };
    if common.queue_type != queue_type::RECV {
        return Some(Cqe { common, recv: None });
    }
    let w1 = word(1);
    let extended = entry_size >= CQE_SIZE_EX;
    let is_write = common.op_type == send_op_type::RDMA_WRITE;
    let mut length = u32::from(word_u16(head, LENGTH));
    let ah = word_u16(w1, AH);
    let mut sender_gid = None;
    if extended && is_write {
        length |= u32::from(word_u16(word(LENGTH_HI / 8), LENGTH_HI)) << 16;
    } else if extended && reports_sender_gid && ah == AH_UNKNOWN {
        let mut g = [0u8; GID_LEN];
        g[..8].copy_from_slice(&word(EXT / 8).to_le_bytes());
        g[8..].copy_from_slice(&word(EXT / 8 + 1).to_le_bytes());
        sender_gid = Some(g);
    }
    Some(Cqe {
        common,
        recv: Some(RecvFields {
            length,
            ah,
            src_qp: word_u16(w1, SRC_QP),
            imm: common.has_imm.then_some((w1 >> ((IMM % 8) * 8)) as u32),
            sender_gid,
        }),
    })
}

/// The CQ doorbell word (`EFA_IO_REGS_CQ_DB_*`): written to acknowledge consumed entries
/// and, with `arm`, to ask for one completion event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqDoorbell {
    /// Entries consumed so far, modulo 2^16.
    pub consumer_index: u16,
    /// CQ events acknowledged so far, modulo 4 (libefa's `cmd_sn & 0x3`).
    pub cmd_sn: u8,
    /// Arm the CQ.
    pub arm: bool,
}

impl CqDoorbell {
    /// The 32-bit register value.
    #[inline]
    pub fn encode(self) -> u32 {
        let mut db = prep32(
            REGS_CQ_DB_CONSUMER_INDEX_MASK,
            u32::from(self.consumer_index),
        );
        db |= prep32(REGS_CQ_DB_CMD_SN_MASK, u32::from(self.cmd_sn));
        if self.arm {
            db |= REGS_CQ_DB_ARM_MASK;
        }
        db
    }

    /// Reads a register value back (`cmd_sn` keeps its 2 bits).
    #[inline]
    pub fn decode(db: u32) -> CqDoorbell {
        CqDoorbell {
            // The mask keeps 16 bits.
            consumer_index: get32(REGS_CQ_DB_CONSUMER_INDEX_MASK, db) as u16,
            // The mask keeps 2 bits.
            cmd_sn: get32(REGS_CQ_DB_CMD_SN_MASK, db) as u8,
            arm: db & REGS_CQ_DB_ARM_MASK != 0,
        }
    }
}

#[cfg(test)]
#[path = "cqe_tests.rs"]
mod tests;
