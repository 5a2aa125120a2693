//! [`RdmaRun`] and [`RunEntries`]: a run of RDMA operations sharing their local
//! registration, destination, remote buffer and operation, given as arrays of offsets
//! and lengths, so that what they share is checked once and each entry only for its
//! ranges ([`Qp::post_run`](crate::Qp::post_run)).
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::fmt;
use core::marker::PhantomData;

use super::send::Dest;
use super::{OpKind, QpLimits};
use crate::ah::{Ah, Peer};
use crate::endpoint::MAX_QPN;
use crate::error::{Error, InvalidInput, PdObject, Result, RunArray};
use crate::mr::{check_iova, MemoryRegion, RemoteBuffer};
use crate::pd::PdId;
use crate::qp::QpType;

/// The operation of every work request of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOp {
    /// RDMA write from the local registration into the remote buffer.
    Write,
    /// RDMA write with immediate (entry `i` carries `imm[i]`, see [`RunEntries::imm`]).
    WriteImm,
    /// RDMA read from the remote buffer into the local registration.
    Read,
}

impl RunOp {
    #[inline]
    fn kind(self) -> OpKind {
        match self {
            RunOp::Write => OpKind::Write,
            RunOp::WriteImm => OpKind::WriteImm,
            RunOp::Read => OpKind::Read,
        }
    }
}

/// What every work request of a run shares: the operation, one local registration, one
/// destination (AH, remote QP number and qkey) and one remote buffer, plus the largest
/// work request (longer entries are split). Made once per run (it borrows the
/// registration and the AH, which so stay open while it lives) and checked against the
/// QP once per post by [`Qp::post_run`](crate::Qp::post_run).
#[derive(Clone, Copy, Debug)]
pub struct RdmaRun<'a> {
    pub(crate) kind: OpKind,
    pub(crate) iova: u64,
    pub(crate) mr_len: u64,
    pub(crate) lkey: u32,
    pub(crate) mr_pd: PdId,
    pub(crate) dest: Dest,
    pub(crate) raddr: u64,
    pub(crate) rlen: u64,
    pub(crate) rkey: u32,
    /// Bytes per work request at most (`u32::MAX`: the QP's `max_rdma_size`).
    pub(crate) max_chunk: u32,
    _borrows: PhantomData<&'a ()>,
}

impl<'a> RdmaRun<'a> {
    /// A run of `op` between `local` and `remote` at `peer`. Fails with
    /// [`InvalidInput::Deregistered`] for a registration that is gone, and
    /// [`InvalidInput::AddressWraps`] for a remote buffer (or a device-address region)
    /// that runs past the end of the address space.
    #[inline]
    pub fn new<M: MemoryRegion + ?Sized, P>(
        op: RunOp,
        local: &'a M,
        peer: &'a Peer<P>,
        remote: RemoteBuffer,
    ) -> Result<Self> {
        Self::with_dest(op, local, Dest::of(peer), remote)
    }

    /// As [`new`](Self::new), to remote QP `qpn` (with `qkey`) through `ah`, for callers
    /// that hold an AH apart from any [`Peer`]; fails as [`Peer::new`] does on a `qpn`
    /// over 24 bits.
    #[inline]
    pub fn to_ah<M: MemoryRegion + ?Sized, P>(
        op: RunOp,
        local: &'a M,
        ah: &'a Ah<P>,
        qpn: u32,
        qkey: u32,
        remote: RemoteBuffer,
    ) -> Result<Self> {
        if qpn > MAX_QPN {
            return Err(InvalidInput::QpnOutOfRange(qpn).into());
        }
        Self::with_dest(op, local, Dest::of_ah(ah, qpn, qkey), remote)
    }

    fn with_dest<M: MemoryRegion + ?Sized>(
        op: RunOp,
        local: &'a M,
        dest: Dest,
        remote: RemoteBuffer,
    ) -> Result<Self> {
        if local.as_mr_ptr().is_null() {
            return Err(InvalidInput::Deregistered.into());
        }
        // Every SGE is `iova + offset` with `offset + len <= mr_len`, and every remote
        // address `raddr + offset` likewise: neither wraps once these hold.
        check_iova(local.iova(), local.len())?;
        remote.end()?;
        Ok(RdmaRun {
            kind: op.kind(),
            iova: local.iova(),
            mr_len: local.len(),
            lkey: local.lkey(),
            mr_pd: local.pd_id(),
            dest,
            raddr: remote.addr(),
            rlen: remote.len(),
            rkey: remote.rkey(),
            max_chunk: u32::MAX,
            _borrows: PhantomData,
        })
    }

    /// Splits entries into work requests of at most `bytes` (default, and upper bound:
    /// the QP's `max_rdma_size`); each piece carries its entry's `wr_id` (and immediate),
    /// so an entry completes once per piece. 0 is [`InvalidInput::ZeroChunkSize`].
    #[inline]
    pub fn max_chunk(mut self, bytes: u32) -> Result<Self> {
        if bytes == 0 {
            return Err(InvalidInput::ZeroChunkSize.into());
        }
        self.max_chunk = bytes;
        Ok(self)
    }

    /// The operation.
    #[inline]
    pub fn op(&self) -> RunOp {
        match self.kind {
            OpKind::WriteImm => RunOp::WriteImm,
            OpKind::Read => RunOp::Read,
            _ => RunOp::Write,
        }
    }

    /// The largest work request on a QP with `limits`.
    #[inline]
    pub fn chunk(&self, limits: &QpLimits) -> u32 {
        self.max_chunk.min(limits.max_rdma).max(1)
    }

    /// How many work requests `entries` make on a QP with `limits` (an entry of 0 bytes
    /// counts 0: posting refuses it). What [`Qp::post_run`](crate::Qp::post_run) posts
    /// when it succeeds, for callers that must account for them first.
    #[inline]
    pub fn work_requests(&self, limits: &QpLimits, entries: &RunEntries<'_>) -> usize {
        let chunk = self.chunk(limits);
        // One compare per entry (vectorised) when no entry needs splitting.
        let longest = entries.lengths.iter().copied().max().unwrap_or(0);
        if longest <= chunk {
            return entries.lengths.iter().filter(|&&l| l != 0).count();
        }
        entries
            .lengths
            .iter()
            .map(|&l| l.div_ceil(chunk) as usize)
            .fold(0usize, |a, b| a.saturating_add(b))
    }

    /// The checks of the shared parts against the QP: an SRD QP, the operation enabled,
    /// the registration and the AH of the QP's PD.
    #[inline]
    pub(crate) fn check(&self, limits: &QpLimits) -> Result<()> {
        if limits.qp_type != QpType::Srd {
            return Err(InvalidInput::RdmaOnUd.into());
        }
        let op = self.kind.op_bit();
        if !limits.send_ops.contains(op) {
            return Err(InvalidInput::SendOpNotEnabled {
                op,
                enabled: limits.send_ops,
            }
            .into());
        }
        if self.mr_pd != limits.pd {
            return Err(InvalidInput::WrongPd(PdObject::Sge).into());
        }
        if self.dest.pd != limits.pd {
            return Err(InvalidInput::WrongPd(PdObject::Peer).into());
        }
        Ok(())
    }
}

/// The entries of a run, as arrays of one item per entry: entry `i` moves `lengths[i]`
/// bytes between the run's registration at `local_offsets[i]` and its remote buffer at
/// `remote_offsets[i]`, with `wr_id` `wr_ids[i]` (or `i` without [`wr_ids`](Self::wr_ids))
/// and, for [`RunOp::WriteImm`], immediate `imm[i]`. The arrays are checked to be as long
/// as each other here; every entry's ranges when it is posted.
#[derive(Clone, Copy, Debug)]
pub struct RunEntries<'e> {
    pub(crate) local_offsets: &'e [u64],
    pub(crate) remote_offsets: &'e [u64],
    pub(crate) lengths: &'e [u32],
    pub(crate) wr_ids: Option<&'e [u64]>,
    pub(crate) imm: Option<&'e [u32]>,
}

fn same_len(array: RunArray, len: usize, entries: usize) -> Result<()> {
    if len != entries {
        let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        return Err(InvalidInput::RunArrayLength {
            array,
            len: sat(len),
            entries: sat(entries),
        }
        .into());
    }
    Ok(())
}

impl<'e> RunEntries<'e> {
    /// Entries of the three arrays; [`InvalidInput::RunArrayLength`] unless they are as
    /// long as `local_offsets`.
    #[inline]
    pub fn new(
        local_offsets: &'e [u64],
        remote_offsets: &'e [u64],
        lengths: &'e [u32],
    ) -> Result<Self> {
        let n = local_offsets.len();
        same_len(RunArray::RemoteOffsets, remote_offsets.len(), n)?;
        same_len(RunArray::Lengths, lengths.len(), n)?;
        Ok(RunEntries {
            local_offsets,
            remote_offsets,
            lengths,
            wr_ids: None,
            imm: None,
        })
    }
    /// Entry `i`'s `wr_id` is `wr_ids[i]` (each checked not to have the bit reserved for
    /// [leases](crate::lease), [`InvalidInput::ReservedWrId`]).
    #[inline]
    pub fn wr_ids(mut self, wr_ids: &'e [u64]) -> Result<Self> {
        same_len(RunArray::WrIds, wr_ids.len(), self.len())?;
        self.wr_ids = Some(wr_ids);
        Ok(self)
    }
    /// Entry `i` carries immediate `imm[i]` (host order), for [`RunOp::WriteImm`].
    #[inline]
    pub fn imm(mut self, imm: &'e [u32]) -> Result<Self> {
        same_len(RunArray::Imm, imm.len(), self.len())?;
        self.imm = Some(imm);
        Ok(self)
    }
    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.local_offsets.len()
    }
    /// True if there is none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.local_offsets.is_empty()
    }
}

/// Why [`Qp::post_run`](crate::Qp::post_run) posted nothing: the error, and the entry
/// it is about (`None` for the run's shared parts, the QP, or the queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunError {
    /// The index of the entry that failed its checks.
    pub entry: Option<usize>,
    /// What is wrong.
    pub error: Error,
}

impl RunError {
    #[cold]
    pub(crate) fn at(entry: usize, error: impl Into<Error>) -> RunError {
        RunError {
            entry: Some(entry),
            error: error.into(),
        }
    }
}

impl From<Error> for RunError {
    #[inline]
    fn from(error: Error) -> Self {
        RunError { entry: None, error }
    }
}

impl From<InvalidInput> for RunError {
    #[inline]
    fn from(e: InvalidInput) -> Self {
        Error::from(e).into()
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.entry {
            Some(i) => write!(f, "entry {i}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
