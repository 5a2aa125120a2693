//! Work-request batches built in fixed-capacity stack arrays, and the RDMA chunker.
//!
//! A [`SendBatch`] is posted in one `ibv_wr_start … ibv_wr_complete` session (one
//! doorbell); a [`RecvBatch`] in one `ibv_post_recv` chain. Neither allocates. Every
//! send is signaled: the API has no way to ask for an unsignaled one (EFA rejects them).

use arrayvec::ArrayVec;

use crate::ah::Peer;
use crate::error::{InvalidInput, Result};
use crate::flags::flag_set;
use crate::mr::{MemoryRegion, RemoteBuffer, Sge};

flag_set! {
    /// Send operations a QP is created for (`IBV_QP_EX_WITH_*`). Posting an operation
    /// not in the set is refused with [`Error::Unsupported`](crate::Error::Unsupported).
    pub struct SendOps: u64 {
        /// RDMA write.
        const RDMA_WRITE = 1 << 0;
        /// RDMA write with immediate.
        const RDMA_WRITE_WITH_IMM = 1 << 1;
        /// Send.
        const SEND = 1 << 2;
        /// Send with immediate.
        const SEND_WITH_IMM = 1 << 3;
        /// RDMA read.
        const RDMA_READ = 1 << 4;
    }
}

/// The local side of a send or RDMA operation.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// One SGE.
    Sge(Sge<'a>),
    /// A gather list (EFA: up to `max_send_sge` for sends, 1 for RDMA; empty = zero-length send).
    Sges(&'a [Sge<'a>]),
    /// Bytes copied into the work request at post time (up to the QP's `max_inline_data`;
    /// the buffer is free again as soon as the post returns).
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// Total bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sge(s) => s.len() as u64,
            Payload::Sges(l) => l.iter().map(|s| s.len() as u64).sum(),
            Payload::Inline(b) => b.len() as u64,
        }
    }
    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `From` conversions of a buffer enum with `Sge` and `Sges` variants: one SGE, a slice of
/// SGEs, or an array of SGEs.
macro_rules! from_sges {
    ($buffers:ident) => {
        impl<'a> From<Sge<'a>> for $buffers<'a> {
            fn from(s: Sge<'a>) -> Self {
                $buffers::Sge(s)
            }
        }
        impl<'a> From<&'a [Sge<'a>]> for $buffers<'a> {
            fn from(s: &'a [Sge<'a>]) -> Self {
                $buffers::Sges(s)
            }
        }
        impl<'a, const K: usize> From<&'a [Sge<'a>; K]> for $buffers<'a> {
            fn from(s: &'a [Sge<'a>; K]) -> Self {
                $buffers::Sges(s)
            }
        }
    };
}
from_sges!(Payload);

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
    pub(crate) fn op_bit(&self) -> SendOps {
        match self {
            SendOp::Send => SendOps::SEND,
            SendOp::SendImm(_) => SendOps::SEND_WITH_IMM,
            SendOp::Write(_) => SendOps::RDMA_WRITE,
            SendOp::WriteImm(..) => SendOps::RDMA_WRITE_WITH_IMM,
            SendOp::Read(_) => SendOps::RDMA_READ,
        }
    }
}

/// One send work request (always signaled).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) op: SendOp,
    pub(crate) peer: &'a Peer<'a>,
    pub(crate) payload: Payload<'a>,
}

impl<'a> SendWr<'a> {
    /// Builds a work request; RDMA ops are checked to fit their remote buffer, and RDMA
    /// read refuses inline payloads.
    pub fn new(wr_id: u64, op: SendOp, peer: &'a Peer<'a>, payload: Payload<'a>) -> Result<Self> {
        let remote = match op {
            SendOp::Write(r) | SendOp::WriteImm(r, _) | SendOp::Read(r) => Some(r),
            _ => None,
        };
        if let Some(r) = remote {
            let len = payload.len();
            if len > r.len() {
                return Err(InvalidInput::RemoteOutOfBounds {
                    offset: 0,
                    len,
                    buffer_len: r.len(),
                }
                .into());
            }
            if matches!(op, SendOp::Read(_)) && matches!(payload, Payload::Inline(_)) {
                return Err(InvalidInput::InlineRead.into());
            }
        }
        Ok(SendWr {
            wr_id,
            op,
            peer,
            payload,
        })
    }
    /// Work request id (reported in its completion).
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The operation.
    pub fn op(&self) -> SendOp {
        self.op
    }
}

/// Up to `N` send work requests, posted with one doorbell by
/// [`Qp::post_send`](crate::Qp::post_send). Lives on the stack; reuse it with
/// [`clear`](Self::clear).
#[derive(Debug)]
pub struct SendBatch<'a, const N: usize> {
    pub(crate) wrs: ArrayVec<SendWr<'a>, N>,
    pub(crate) ops: SendOps,
}

impl<const N: usize> Default for SendBatch<'_, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, const N: usize> SendBatch<'a, N> {
    /// An empty batch.
    pub const fn new() -> Self {
        SendBatch {
            wrs: ArrayVec::new_const(),
            ops: SendOps::empty(),
        }
    }
    /// Appends a work request; [`InvalidInput::BatchFull`] when full.
    pub fn push(&mut self, wr: SendWr<'a>) -> Result<()> {
        self.wrs.try_push(wr).map_err(|_| InvalidInput::BatchFull)?;
        self.ops |= wr.op.op_bit();
        Ok(())
    }
    /// Appends a send.
    pub fn send(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        payload: impl Into<Payload<'a>>,
    ) -> Result<()> {
        self.push(SendWr::new(wr_id, SendOp::Send, peer, payload.into())?)
    }
    /// Appends a send with immediate data (host order).
    pub fn send_imm(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        payload: impl Into<Payload<'a>>,
        imm: u32,
    ) -> Result<()> {
        self.push(SendWr::new(
            wr_id,
            SendOp::SendImm(imm),
            peer,
            payload.into(),
        )?)
    }
    /// Appends an inline send: `bytes` are copied at post time.
    pub fn send_inline(&mut self, wr_id: u64, peer: &'a Peer<'a>, bytes: &'a [u8]) -> Result<()> {
        self.push(SendWr::new(
            wr_id,
            SendOp::Send,
            peer,
            Payload::Inline(bytes),
        )?)
    }
    /// Appends an RDMA write of `local` to `remote` (whose start it writes).
    pub fn write(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        local: impl Into<Payload<'a>>,
        remote: RemoteBuffer,
    ) -> Result<()> {
        self.push(SendWr::new(
            wr_id,
            SendOp::Write(remote),
            peer,
            local.into(),
        )?)
    }
    /// Appends an RDMA write with immediate.
    pub fn write_imm(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        local: impl Into<Payload<'a>>,
        remote: RemoteBuffer,
        imm: u32,
    ) -> Result<()> {
        self.push(SendWr::new(
            wr_id,
            SendOp::WriteImm(remote, imm),
            peer,
            local.into(),
        )?)
    }
    /// Appends an RDMA read of `remote` into `local`.
    pub fn read(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        local: impl Into<Payload<'a>>,
        remote: RemoteBuffer,
    ) -> Result<()> {
        self.push(SendWr::new(
            wr_id,
            SendOp::Read(remote),
            peer,
            local.into(),
        )?)
    }
    /// Fills the batch with RDMA writes of the next chunks; returns how many were added.
    pub fn fill_writes(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        chunks: &mut RdmaChunks<'a>,
    ) -> usize {
        self.fill(chunks, |local, remote| SendWr {
            wr_id,
            op: SendOp::Write(remote),
            peer,
            payload: Payload::Sge(local),
        })
    }
    /// Fills the batch with RDMA reads of the next chunks; returns how many were added.
    pub fn fill_reads(
        &mut self,
        wr_id: u64,
        peer: &'a Peer<'a>,
        chunks: &mut RdmaChunks<'a>,
    ) -> usize {
        self.fill(chunks, |local, remote| SendWr {
            wr_id,
            op: SendOp::Read(remote),
            peer,
            payload: Payload::Sge(local),
        })
    }
    fn fill(
        &mut self,
        chunks: &mut RdmaChunks<'a>,
        make: impl Fn(Sge<'a>, RemoteBuffer) -> SendWr<'a>,
    ) -> usize {
        let mut n = 0;
        while !self.wrs.is_full() {
            let Some((local, remote)) = chunks.next() else {
                break;
            };
            let wr = make(local, remote);
            self.ops |= wr.op.op_bit();
            self.wrs.push(wr);
            n += 1;
        }
        n
    }
    /// Number of work requests.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }
    /// True if full.
    pub fn is_full(&self) -> bool {
        self.wrs.is_full()
    }
    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.ops = SendOps::empty();
    }
    /// The work requests.
    pub fn iter(&self) -> impl Iterator<Item = &SendWr<'a>> {
        self.wrs.iter()
    }
}

/// The buffers of one receive.
#[derive(Clone, Copy, Debug)]
pub enum RecvBufs<'a> {
    /// One SGE.
    Sge(Sge<'a>),
    /// A scatter list (up to the QP's `max_recv_sge`).
    Sges(&'a [Sge<'a>]),
}

from_sges!(RecvBufs);

/// One receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) bufs: RecvBufs<'a>,
}

/// Up to `N` receives, posted as one `ibv_post_recv` chain by
/// [`Qp::post_recv`](crate::Qp::post_recv).
#[derive(Debug)]
pub struct RecvBatch<'a, const N: usize> {
    pub(crate) wrs: ArrayVec<RecvWr<'a>, N>,
}

impl<const N: usize> Default for RecvBatch<'_, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, const N: usize> RecvBatch<'a, N> {
    /// An empty batch.
    pub const fn new() -> Self {
        RecvBatch {
            wrs: ArrayVec::new_const(),
        }
    }
    /// Appends a receive; [`InvalidInput::BatchFull`] when full.
    pub fn push(&mut self, wr_id: u64, bufs: impl Into<RecvBufs<'a>>) -> Result<()> {
        self.wrs
            .try_push(RecvWr {
                wr_id,
                bufs: bufs.into(),
            })
            .map_err(|_| InvalidInput::BatchFull)?;
        Ok(())
    }
    /// Number of receives.
    pub fn len(&self) -> usize {
        self.wrs.len()
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }
    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.wrs.clear();
    }
}

/// Splits one large RDMA transfer into chunks of at most `max_chunk` bytes (typically
/// the device's `max_rdma_size`), without allocating: yields `(local SGE, remote slice)`
/// pairs in order. Feed it to [`SendBatch::fill_writes`]/[`fill_reads`](SendBatch::fill_reads).
#[derive(Clone, Debug)]
pub struct RdmaChunks<'a> {
    lkey: u32,
    local_addr: u64,
    remote: RemoteBuffer,
    max_chunk: u32,
    done: u64,
    _mr: core::marker::PhantomData<&'a ()>,
}

impl<'a> RdmaChunks<'a> {
    /// Chunks covering all of `remote`, with the local bytes starting at `local_offset`
    /// of `mr`; fails if the local range does not fit `mr` or `max_chunk` is 0.
    pub fn new<M: MemoryRegion + ?Sized>(
        mr: &'a M,
        local_offset: u64,
        remote: RemoteBuffer,
        max_chunk: u32,
    ) -> Result<Self> {
        if max_chunk == 0 {
            return Err(InvalidInput::ZeroChunkSize.into());
        }
        match local_offset.checked_add(remote.len()) {
            Some(end) if end <= mr.len() => {}
            _ => {
                return Err(InvalidInput::SgeOutOfBounds {
                    offset: local_offset,
                    len: remote.len(),
                    region_len: mr.len(),
                }
                .into())
            }
        }
        Ok(RdmaChunks {
            lkey: mr.lkey(),
            local_addr: mr.iova() + local_offset,
            remote,
            max_chunk,
            done: 0,
            _mr: core::marker::PhantomData,
        })
    }
    /// Chunks not yet yielded.
    pub fn remaining(&self) -> u64 {
        let left = self.remote.len() - self.done;
        left.div_ceil(self.max_chunk as u64)
    }
}

impl<'a> Iterator for RdmaChunks<'a> {
    type Item = (Sge<'a>, RemoteBuffer);
    fn next(&mut self) -> Option<Self::Item> {
        let left = self.remote.len() - self.done;
        if left == 0 {
            return None;
        }
        let n = left.min(self.max_chunk as u64);
        let sge = Sge::from_raw_parts(self.local_addr + self.done, n as u32, self.lkey);
        let remote = RemoteBuffer::new(self.remote.addr() + self.done, n, self.remote.rkey());
        self.done += n;
        Some((sge, remote))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let r = self.remaining() as usize;
        (r, Some(r))
    }
}
