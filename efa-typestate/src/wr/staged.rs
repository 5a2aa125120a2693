//! [`StagedSend`]: a send work request as a batch keeps it once it has been checked.
//!
//! A [`SendWr`] carries what the checks need (the PDs of its peer and memory, the
//! length of its remote buffer); once [`SendBatch::push`](super::SendBatch::push) has
//! checked it against the QP, only what the provider's `ibv_wr_*` calls take is kept:
//! 64 bytes of plain words instead of 96, so that building a batch stores (and posting
//! reads back) no more than C's hand-made staging does.

use core::marker::PhantomData;
use core::ptr::NonNull;

use super::{OpKind, Payload, SendOps, SendWr};
use crate::ffi;

/// What the local side of a staged send is (which `ibv_wr_set_*` call takes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum LocalKind {
    /// One SGE: `addr`, `len`, `lkey`.
    Sge,
    /// A gather list: `addr` points at `len` `ibv_sge`s.
    Sges,
    /// Inline bytes: `addr` points at `len` bytes.
    Inline,
}

/// A send work request as a [`SendBatch`](super::SendBatch) holds it once checked
/// ([`SendBatch::iter`](super::SendBatch::iter)): what the provider's `ibv_wr_*` calls
/// take, borrowing (`'a`) its peer's AH, SGE list or inline bytes.
///
/// Pairs of 32-bit values are kept packed in one word each (`len_lkey`, `rkey_imm`), so
/// that a request is written with eight stores: neighbouring fields stored separately
/// cost more than C's staging, since the optimiser does not merge stores of registers.
#[derive(Clone, Copy, Debug)]
pub struct StagedSend<'a> {
    pub(crate) wr_id: u64,
    pub(crate) raddr: u64,
    /// The SGE's address, or the address of the SGE array or inline bytes (a pointer
    /// cast to an integer, which exposes its provenance for the cast back at post
    /// time: one word for both, as the WQE has).
    addr: u64,
    pub(crate) ah: NonNull<ffi::ibv_ah>,
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
    /// Low half: the SGE's length, or the number of SGEs or inline bytes; high half: the
    /// SGE's key (0 for the other kinds).
    len_lkey: u64,
    /// Low half: the remote key; high half: the immediate (host order).
    rkey_imm: u64,
    /// The device AH number of the destination (direct backend).
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    pub(crate) ahn: u16,
    pub(crate) kind: OpKind,
    pub(crate) local: LocalKind,
    _borrows: PhantomData<&'a [u8]>,
}

/// Two 32-bit values in one word, `lo` in the low half.
#[inline(always)]
fn pack(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

static_assertions::const_assert!(core::mem::size_of::<StagedSend<'static>>() <= 64);

impl<'a> StagedSend<'a> {
    /// The staged form of `wr` (checked by the caller).
    #[inline(always)]
    pub(crate) fn of(wr: &SendWr<'a>) -> StagedSend<'a> {
        let (local, addr, len, lkey) = match wr.payload {
            Payload::Sge(s) => (LocalKind::Sge, s.addr(), s.len(), s.lkey()),
            // The lengths are at most the QP's SGE count and inline size (checked).
            Payload::Sges(l) => (
                LocalKind::Sges,
                l.raw().as_ptr() as usize as u64,
                l.len() as u32,
                0,
            ),
            Payload::Inline(b) => (
                LocalKind::Inline,
                b.as_ptr() as usize as u64,
                b.len() as u32,
                0,
            ),
        };
        StagedSend {
            wr_id: wr.wr_id,
            ah: wr.dest.ah,
            qpn: wr.dest.qpn,
            qkey: wr.dest.qkey,
            raddr: wr.op.raddr,
            addr,
            len_lkey: pack(len, lkey),
            rkey_imm: pack(wr.op.rkey, wr.op.imm),
            ahn: wr.dest.ahn,
            kind: wr.op.kind,
            local,
            _borrows: PhantomData,
        }
    }
    /// The same request with its borrows forgotten (`wr::kept`: the keeper answers for
    /// what it names).
    #[inline(always)]
    pub(crate) fn unbound(&self) -> StagedSend<'static> {
        StagedSend {
            _borrows: PhantomData,
            ..*self
        }
    }
    /// A kept request, for a batch that borrows (`'b`) what it names again.
    #[inline(always)]
    pub(crate) fn bound<'b>(&self) -> StagedSend<'b> {
        StagedSend {
            _borrows: PhantomData,
            ..*self
        }
    }
    /// A one-SGE RDMA request of a run ([`RdmaRun`](super::RdmaRun)), checked by the
    /// caller: `len` bytes at device address `addr` (key `lkey`) and at `raddr` (key
    /// `rkey`) of `dest`.
    /// (Only the direct backend, which needs std, stages them.)
    #[cfg(feature = "std")]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rdma(
        wr_id: u64,
        kind: OpKind,
        dest: &super::Dest,
        (raddr, rkey, imm): (u64, u32, u32),
        (addr, len, lkey): (u64, u32, u32),
    ) -> StagedSend<'a> {
        StagedSend {
            wr_id,
            ah: dest.ah,
            qpn: dest.qpn,
            qkey: dest.qkey,
            raddr,
            addr,
            len_lkey: pack(len, lkey),
            rkey_imm: pack(rkey, imm),
            ahn: dest.ahn,
            kind,
            local: LocalKind::Sge,
            _borrows: PhantomData,
        }
    }
    /// The work request id.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The operation (its send-ops bit).
    #[inline]
    pub fn op(&self) -> SendOps {
        self.kind.op_bit()
    }
    /// The remote address an RDMA operation starts at (`None` for sends).
    #[inline]
    pub fn remote_addr(&self) -> Option<u64> {
        self.kind.is_rdma().then_some(self.raddr)
    }
    /// The device address of a one-SGE payload (`None` for SGE lists and inline data).
    #[inline]
    pub fn sge_addr(&self) -> Option<u64> {
        (self.local == LocalKind::Sge).then_some(self.addr)
    }
    /// The length of a one-SGE payload (`None` for SGE lists and inline data).
    #[inline]
    pub fn sge_len(&self) -> Option<u32> {
        (self.local == LocalKind::Sge).then_some(self.len())
    }
    /// The SGE's address (for [`LocalKind::Sge`]).
    #[inline(always)]
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }
    /// The SGE's length, or the number of SGEs or inline bytes.
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len_lkey as u32
    }
    /// The SGE's key (for [`LocalKind::Sge`]).
    #[inline(always)]
    pub(crate) fn lkey(&self) -> u32 {
        (self.len_lkey >> 32) as u32
    }
    /// The remote key (RDMA operations).
    #[inline(always)]
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey_imm as u32
    }
    /// The immediate, host order (operations with immediate).
    #[inline(always)]
    pub(crate) fn imm(&self) -> u32 {
        (self.rkey_imm >> 32) as u32
    }
    /// The SGE array (for [`LocalKind::Sges`]).
    #[inline(always)]
    pub(crate) fn sge_list(&self) -> *const ffi::ibv_sge {
        self.addr as usize as *const _
    }
    /// The inline bytes (for [`LocalKind::Inline`]).
    #[inline(always)]
    pub(crate) fn inline_bytes(&self) -> *const u8 {
        self.addr as usize as *const _
    }
}
