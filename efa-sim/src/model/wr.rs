//! What front ends hand to the provider and get back: work requests and completions.

use super::{Ah, EfaStatus, Gid};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// Send opcode.
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA read.
    RdmaRead,
    /// RDMA write.
    RdmaWrite,
    /// RDMA write with immediate.
    RdmaWriteImm,
}

/// Scatter/gather element; the layout of `struct ibv_sge`, so a C SGE list is one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// Address (IOVA of the MR named by `lkey`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

static_assertions::assert_eq_size!(Sge, efa_sys::verbs::ibv_sge);
static_assertions::const_assert_eq!(
    core::mem::offset_of!(Sge, lkey),
    core::mem::offset_of!(efa_sys::verbs::ibv_sge, lkey)
);

/// Most SGEs a [`SendWr`] can hold; a WQE has room for
/// [`efa_sys::io::TX_DESC_NUM_BUFS`], which the provider enforces.
pub const MAX_SEND_SGE: usize = 16;
/// Most bytes of inline data (128-byte WQE).
pub const MAX_INLINE: usize = efa_sys::io::TX_DESC_INLINE_MAX_SIZE_128;
/// Most SGEs a receive WR can carry in any profile.
pub const MAX_RECV_SGE: usize = 16;

#[derive(Clone, Debug)]
/// Where a send WR's data comes from.
pub enum Payload {
    /// Registered memory.
    Sges(arrayvec::ArrayVec<Sge, MAX_SEND_SGE>),
    /// Bytes copied at post time.
    Inline(arrayvec::ArrayVec<u8, MAX_INLINE>),
}

/// One send work request, as staged by `ibv_post_send` or an `ibv_wr_*` session.
#[derive(Clone, Debug)]
pub struct SendWr {
    /// Caller's id, reported in the completion.
    pub wr_id: u64,
    /// Opcode.
    pub op: SendOp,
    /// IBV_SEND_* bits as given (the model enforces model §3.3 rule 2/3).
    pub send_flags: u32,
    /// Immediate data exactly as the caller gave it (network byte order).
    pub imm_be: u32,
    /// Destination address handle.
    pub ah: Arc<Ah>,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
    /// Data.
    pub payload: Payload,
    /// (remote iova, rkey) for RDMA ops.
    pub remote: Option<(u64, u32)>,
}

#[derive(Clone, Debug)]
/// One receive work request.
pub struct RecvWr {
    /// Caller's id, reported in the completion.
    pub wr_id: u64,
    /// Buffers, filled in order.
    pub sges: arrayvec::ArrayVec<Sge, MAX_RECV_SGE>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// What a completion reports.
pub enum CompletionKind {
    /// Requester: SEND/SEND_IMM done.
    Send,
    /// Requester: RDMA read done (ABI maps per `read_completes_as_send`).
    RdmaRead,
    /// Requester: RDMA write(+imm) done.
    RdmaWrite,
    /// Responder: a SEND/SEND_IMM arrived.
    Recv,
    /// Responder: write-with-imm arrived.
    RecvRdmaWithImm,
}

/// One completion as the provider decodes it from the CQ ring; the ABI layer maps it to
/// ibv_wc / ibv_cq_ex reads (status table of model §4, `vendor_err` = `status`).
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    /// wr_id of the WR (0 for unsolicited write-with-imm).
    pub wr_id: u64,
    /// Raw EFA status (model §4), 0 = OK.
    pub status: EfaStatus,
    /// Kind.
    pub kind: CompletionKind,
    /// Bytes received (receive kinds; 0 for requester kinds).
    pub byte_len: u32,
    /// Immediate (network byte order) when present.
    pub imm_be: Option<u32>,
    /// Local QPN.
    pub qp_num: u32,
    /// Sender QPN (receive kinds).
    pub src_qp: u32,
    /// Receiver-side AH number of the sender, 0xFFFF if unknown.
    pub slid: u16,
    /// Write-with-imm that consumed no receive WR.
    pub unsolicited: bool,
    /// Sender GID when slid == 0xFFFF and the CQ was created with_sgid.
    pub sgid: Option<Gid>,
}

impl Completion {
    /// Whether this completes a receive (of a SEND or a write with immediate).
    pub fn is_recv(&self) -> bool {
        matches!(
            self.kind,
            CompletionKind::Recv | CompletionKind::RecvRdmaWithImm
        )
    }
}
