//! Work-request batches built in fixed-capacity stack arrays, checked against the QP they
//! are built for, and the RDMA chunker.
//!
//! A batch is made for one QP ([`SendBatch::new`], [`RecvBatch::new`]) and borrows it.
//! Every work request is checked when it is added, with one compare per rule, against
//! the limits the QP was created with ([`QpLimits`]): the PD of every SGE and peer,
//! the send operations, inline size, SGE count, message and RDMA size, the queue depth.
//! Posting then only checks that the batch is this QP's (a pointer compare) and hands
//! the batch to the device: a [`SendBatch`] in one `ibv_wr_start … ibv_wr_complete`
//! session (one doorbell), a [`RecvBatch`] in one `ibv_post_recv` chain. Neither
//! allocates. Every send is signaled: the API has no way to ask for an unsignaled one
//! (EFA rejects them).

use crate::flags::flag_set;
use crate::mr::{RemoteBuffer, Sge, SgeList, Sges};

mod builders;
mod chunks;
mod copy_vec;
mod kept;
mod limits;
mod recv;
mod run;
mod send;
mod staged;

pub use chunks::RdmaChunks;
pub use kept::KeptSend;
pub use limits::QpLimits;
pub use recv::{RecvBatch, RecvWr};
pub use run::{RdmaRun, RunEntries, RunError, RunOp};
pub use send::{SendBatch, SendWr};

pub(crate) use builders::send_builders;
#[cfg(test)]
pub(crate) use limits::test_limits;
pub(crate) use limits::Origin;
pub(crate) use send::Dest;
pub(crate) use staged::LocalKind;
pub use staged::StagedSend;

flag_set! {
    /// Send operations a QP is created for (`IBV_QP_EX_WITH_*`). Adding an operation
    /// not in the set to a batch is refused with
    /// [`InvalidInput::SendOpNotEnabled`](crate::InvalidInput::SendOpNotEnabled).
    pub struct SendOps: u32 {
        /// RDMA write.
        const RDMA_WRITE = crate::ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0;
        /// RDMA write with immediate.
        const RDMA_WRITE_WITH_IMM =
            crate::ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0;
        /// Send.
        const SEND = crate::ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0;
        /// Send with immediate.
        const SEND_WITH_IMM = crate::ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND_WITH_IMM.0;
        /// RDMA read.
        const RDMA_READ = crate::ffi::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ.0;
    }
}

/// The local side of a send or RDMA operation.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// One SGE.
    Sge(Sge<'a>),
    /// A gather list (EFA: up to `max_send_sge` for sends, 1 for RDMA; empty = zero-length
    /// send); made from an [`SgeList`].
    Sges(Sges<'a>),
    /// Bytes copied into the work request at post time (up to the QP's `max_inline_data`;
    /// the buffer is free again as soon as the post returns).
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// Total bytes.
    #[inline]
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sge(s) => s.len() as u64,
            Payload::Sges(l) => l.total_len(),
            Payload::Inline(b) => b.len() as u64,
        }
    }
    /// True for zero bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `From` conversions of a buffer enum with `Sge` and `Sges` variants: one SGE, or a
/// borrowed [`SgeList`].
macro_rules! from_sges {
    ($buffers:ident) => {
        impl<'a> From<Sge<'a>> for $buffers<'a> {
            #[inline]
            fn from(s: Sge<'a>) -> Self {
                $buffers::Sge(s)
            }
        }
        impl<'a> From<Sges<'a>> for $buffers<'a> {
            #[inline]
            fn from(s: Sges<'a>) -> Self {
                $buffers::Sges(s)
            }
        }
        impl<'a, 'mr: 'a, const K: usize> From<&'a SgeList<'mr, K>> for $buffers<'a> {
            #[inline]
            fn from(s: &'a SgeList<'mr, K>) -> Self {
                $buffers::Sges(s.as_sges())
            }
        }
    };
}
from_sges!(Payload);

/// The buffers of one receive.
#[derive(Clone, Copy, Debug)]
pub enum RecvBufs<'a> {
    /// One SGE.
    Sge(Sge<'a>),
    /// A scatter list (up to the QP's `max_recv_sge`), made from an [`SgeList`].
    Sges(Sges<'a>),
}

from_sges!(RecvBufs);

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// Two-sided send.
    Send,
    /// Send with 32-bit immediate (host order; converted to network order on the wire).
    SendImm(u32),
    /// RDMA write into the peer's buffer.
    Write(RemoteBuffer),
    /// RDMA write with immediate (the peer gets a completion).
    WriteImm(RemoteBuffer, u32),
    /// RDMA read from the peer's buffer.
    Read(RemoteBuffer),
}

impl SendOp {
    /// The send-ops bit a QP needs for this operation.
    #[inline]
    pub fn op_bit(&self) -> SendOps {
        match self {
            SendOp::Send => SendOps::SEND,
            SendOp::SendImm(_) => SendOps::SEND_WITH_IMM,
            SendOp::Write(_) => SendOps::RDMA_WRITE,
            SendOp::WriteImm(..) => SendOps::RDMA_WRITE_WITH_IMM,
            SendOp::Read(_) => SendOps::RDMA_READ,
        }
    }
    /// The remote buffer of an RDMA operation.
    #[inline]
    pub fn remote(&self) -> Option<RemoteBuffer> {
        match *self {
            SendOp::Write(r) | SendOp::WriteImm(r, _) | SendOp::Read(r) => Some(r),
            SendOp::Send | SendOp::SendImm(_) => None,
        }
    }
}

/// A [`SendOp`] as a work request stores it: the kind, the immediate and the remote
/// range apart, native order and aligned (a [`RemoteBuffer`] is kept in its wire
/// format, big-endian and unaligned), so that building and posting copy and read plain
/// words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredOp {
    pub(crate) kind: OpKind,
    /// Host order.
    pub(crate) imm: u32,
    pub(crate) rkey: u32,
    pub(crate) raddr: u64,
    pub(crate) rlen: u64,
}

/// The kind of a [`SendOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum OpKind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
}

impl OpKind {
    /// True for RDMA operations (which have a remote range).
    #[inline(always)]
    pub(crate) fn is_rdma(self) -> bool {
        matches!(self, OpKind::Write | OpKind::WriteImm | OpKind::Read)
    }
    /// The send-ops bit a QP needs for it.
    #[inline(always)]
    pub(crate) fn op_bit(self) -> SendOps {
        match self {
            OpKind::Send => SendOps::SEND,
            OpKind::SendImm => SendOps::SEND_WITH_IMM,
            OpKind::Write => SendOps::RDMA_WRITE,
            OpKind::WriteImm => SendOps::RDMA_WRITE_WITH_IMM,
            OpKind::Read => SendOps::RDMA_READ,
        }
    }
}

impl StoredOp {
    #[inline(always)]
    pub(crate) fn of(op: SendOp) -> StoredOp {
        let (kind, imm, remote) = match op {
            SendOp::Send => (OpKind::Send, 0, None),
            SendOp::SendImm(imm) => (OpKind::SendImm, imm, None),
            SendOp::Write(r) => (OpKind::Write, 0, Some(r)),
            SendOp::WriteImm(r, imm) => (OpKind::WriteImm, imm, Some(r)),
            SendOp::Read(r) => (OpKind::Read, 0, Some(r)),
        };
        let (raddr, rlen, rkey) = remote.map_or((0, 0, 0), |r| (r.addr(), r.len(), r.rkey()));
        StoredOp {
            kind,
            imm,
            rkey,
            raddr,
            rlen,
        }
    }
    /// The operation it was made from.
    #[inline]
    pub(crate) fn op(&self) -> SendOp {
        let r = RemoteBuffer::new(self.raddr, self.rlen, self.rkey);
        match self.kind {
            OpKind::Send => SendOp::Send,
            OpKind::SendImm => SendOp::SendImm(self.imm),
            OpKind::Write => SendOp::Write(r),
            OpKind::WriteImm => SendOp::WriteImm(r, self.imm),
            OpKind::Read => SendOp::Read(r),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A QP send batches can be built for: [`Qp<_, Rts>`](crate::Qp) and
/// [`DynQp`](crate::DynQp). Sealed.
pub trait SendTarget: sealed::Sealed {
    /// The limits batches are checked against.
    fn limits(&self) -> &QpLimits;
}

/// A QP receive batches can be built for: a [`Qp`](crate::Qp) in INIT, RTR or RTS, and
/// [`DynQp`](crate::DynQp). Sealed.
pub trait RecvTarget: sealed::Sealed {
    /// The limits batches are checked against.
    fn limits(&self) -> &QpLimits;
}

pub(crate) use sealed::Sealed as TargetSealed;
