//! [`SendBatch`]: up to `N` send work requests for one QP, checked as they are added.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::marker::PhantomData;
use core::ptr::NonNull;

use super::copy_vec::CopyVec;
use super::limits::Origin;
use super::{Payload, QpLimits, RdmaChunks, SendOp, SendTarget, StagedSend, StoredOp};
use crate::ah::{Ah, Peer};
use crate::endpoint::MAX_QPN;
use crate::error::{InvalidInput, Result};
use crate::ffi;
use crate::mr::RemoteBuffer;
use crate::pd::PdId;

/// Where a send goes, copied out of its [`Peer`] (which the work request borrows).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dest {
    pub(crate) ah: NonNull<ffi::ibv_ah>,
    pub(crate) qpn: u32,
    pub(crate) qkey: u32,
    pub(crate) pd: PdId,
    /// The device AH number (`efadv_query_ah`), for WQEs the direct backend writes.
    pub(crate) ahn: u16,
}

impl Dest {
    #[inline(always)]
    pub(crate) fn of<P>(peer: &Peer<P>) -> Dest {
        Dest::of_ah(peer.ah(), peer.qpn(), peer.qkey())
    }
    #[inline(always)]
    pub(crate) fn of_ah<P>(ah: &Ah<P>, qpn: u32, qkey: u32) -> Dest {
        Dest {
            // SAFETY: a live AH's pointer is never null.
            ah: unsafe { NonNull::new_unchecked(ah.as_ptr()) },
            qpn,
            qkey,
            pd: ah.pd_id(),
            ahn: ah.number(),
        }
    }
    #[cfg(test)]
    pub(crate) fn test(pd: PdId) -> Dest {
        Dest {
            ah: NonNull::dangling(),
            qpn: 1,
            qkey: 2,
            pd,
            ahn: 0,
        }
    }
}

/// One send work request (always signaled). It borrows its peer and payload (`'a`).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) op: StoredOp,
    pub(crate) dest: Dest,
    pub(crate) payload: Payload<'a>,
    _peer: PhantomData<&'a ()>,
}

// SAFETY: the AH pointer is an immutable handle the work request only passes to the
// provider (verbs on AHs are thread-safe); everything else is plain data and borrows.
unsafe impl Send for SendWr<'_> {}
// SAFETY: see above.
unsafe impl Sync for SendWr<'_> {}

impl<'a> SendWr<'a> {
    /// Builds a work request; RDMA operations are checked to fit their remote buffer.
    /// The rest is checked against the QP when it is added to a batch.
    #[inline]
    pub fn new<P>(wr_id: u64, op: SendOp, peer: &'a Peer<P>, payload: Payload<'a>) -> Result<Self> {
        Self::with_dest(wr_id, op, Dest::of(peer), payload)
    }

    /// Builds a work request to remote QP `qpn` (with `qkey`) through `ah`, for callers
    /// that hold an AH apart from any [`Peer`] (bindings whose users name the AH, QP
    /// number and qkey per request); fails as [`Peer::new`] does on a `qpn` over 24 bits.
    /// Checked as [`SendWr::new`]'s requests are.
    #[inline]
    pub fn to_ah<P>(
        wr_id: u64,
        op: SendOp,
        ah: &'a Ah<P>,
        qpn: u32,
        qkey: u32,
        payload: Payload<'a>,
    ) -> Result<Self> {
        if qpn > MAX_QPN {
            return Err(InvalidInput::QpnOutOfRange(qpn).into());
        }
        Self::with_dest(wr_id, op, Dest::of_ah(ah, qpn, qkey), payload)
    }

    #[inline(always)]
    pub(crate) fn with_dest(
        wr_id: u64,
        op: SendOp,
        dest: Dest,
        payload: Payload<'a>,
    ) -> Result<Self> {
        let op = StoredOp::of(op);
        if op.kind.is_rdma() {
            let len = payload.len();
            if len > op.rlen {
                return Err(InvalidInput::RemoteOutOfBounds {
                    offset: 0,
                    len: len.min(u32::MAX as u64) as u32,
                }
                .into());
            }
        }
        Ok(SendWr {
            wr_id,
            op,
            dest,
            payload,
            _peer: PhantomData,
        })
    }
    /// Work request id (reported in its completion).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The operation.
    #[inline]
    pub fn op(&self) -> SendOp {
        self.op.op()
    }
    /// The local side.
    #[inline]
    pub fn payload(&self) -> Payload<'a> {
        self.payload
    }
}

/// Up to `N` send work requests for one QP, posted with one doorbell by
/// [`Qp::post_send`](crate::Qp::post_send). Lives on the stack; reuse it with
/// [`clear`](Self::clear). It borrows the QP, its peers and its SGEs.
#[derive(Debug)]
pub struct SendBatch<'a, const N: usize> {
    pub(crate) limits: &'a QpLimits,
    pub(crate) wrs: CopyVec<StagedSend<'a>, N>,
}

impl<'a, const N: usize> SendBatch<'a, N> {
    /// An empty batch for `qp` (a [`Qp<_, Rts>`](crate::Qp) or a [`DynQp`](crate::DynQp)).
    #[inline]
    pub fn new<Q: SendTarget + ?Sized>(qp: &'a Q) -> Self {
        SendBatch {
            limits: SendTarget::limits(qp),
            wrs: CopyVec::new(),
        }
    }
    /// The limits of the QP the batch is for.
    #[inline]
    pub fn limits(&self) -> &'a QpLimits {
        self.limits
    }
    /// Appends a work request after checking it against the QP: [`InvalidInput::BatchFull`]
    /// at capacity `N`, [`InvalidInput::BatchLargerThanQueue`] at the QP's queue depth,
    /// and the rule it breaks otherwise (see [`QpLimits`]).
    #[inline]
    pub fn push(&mut self, wr: SendWr<'a>) -> Result<()> {
        self.push_from(wr, Origin::User)
    }
    #[inline(always)]
    pub(crate) fn push_from(&mut self, wr: SendWr<'a>, origin: Origin) -> Result<()> {
        if self.wrs.is_full() {
            return Err(InvalidInput::BatchFull.into());
        }
        if self.wrs.len() >= self.limits.max_send_wr as usize {
            return Err(QpLimits::queue_full(self.limits.max_send_wr));
        }
        self.limits.check_send(&wr, origin)?;
        self.wrs.push(StagedSend::of(&wr));
        Ok(())
    }
    #[inline(always)]
    fn add<P>(
        &mut self,
        wr_id: u64,
        op: SendOp,
        peer: &'a Peer<P>,
        payload: Payload<'a>,
    ) -> Result<()> {
        self.push(SendWr::new(wr_id, op, peer, payload)?)
    }
    super::builders::send_builders!(peer: 'a, data: 'a, generics: []);
    /// Fills the batch with RDMA writes of the next chunks, chunk `i` of the transfer
    /// with `wr_id` `base + i`; returns how many were added (stops when the batch or
    /// the QP's queue depth is reached).
    #[inline]
    pub fn fill_writes<P>(
        &mut self,
        base: u64,
        peer: &'a Peer<P>,
        chunks: &mut RdmaChunks<'a>,
    ) -> Result<usize> {
        self.fill_with(peer, chunks, |i| base.wrapping_add(i), SendOp::Write)
    }
    /// Fills the batch with RDMA reads of the next chunks (`wr_id` `base + i`).
    #[inline]
    pub fn fill_reads<P>(
        &mut self,
        base: u64,
        peer: &'a Peer<P>,
        chunks: &mut RdmaChunks<'a>,
    ) -> Result<usize> {
        self.fill_with(peer, chunks, |i| base.wrapping_add(i), SendOp::Read)
    }
    /// Fills the batch with RDMA operations `op` of the next chunks, chunk `i` with
    /// `wr_id` `wr_id(i)` (caller-chosen ids).
    #[inline]
    pub fn fill_with<P>(
        &mut self,
        peer: &'a Peer<P>,
        chunks: &mut RdmaChunks<'a>,
        wr_id: impl Fn(u64) -> u64,
        op: impl Fn(RemoteBuffer) -> SendOp,
    ) -> Result<usize> {
        let dest = Dest::of(peer);
        self.fill_dest(dest, chunks, wr_id, op)
    }
    pub(crate) fn fill_dest(
        &mut self,
        dest: Dest,
        chunks: &mut RdmaChunks<'a>,
        wr_id: impl Fn(u64) -> u64,
        op: impl Fn(RemoteBuffer) -> SendOp,
    ) -> Result<usize> {
        let room = N.min(self.limits.max_send_wr as usize);
        let mut n = 0usize;
        while self.wrs.len() < room {
            let index = chunks.index();
            let Some((local, remote)) = chunks.peek() else {
                break;
            };
            let wr = SendWr::with_dest(wr_id(index), op(remote), dest, Payload::Sge(local))?;
            self.push(wr)?;
            chunks.advance();
            n = n.saturating_add(1); // at most N
        }
        Ok(n)
    }
    /// Number of work requests.
    #[inline]
    pub fn len(&self) -> usize {
        self.wrs.len()
    }
    /// True if empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }
    /// True if full (capacity `N` or the QP's queue depth).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.wrs.len() >= N.min(self.limits.max_send_wr as usize)
    }
    /// Empties the batch for reuse.
    #[inline]
    pub fn clear(&mut self) {
        self.wrs.clear();
    }
    /// The work requests, in order, as the batch holds them once checked.
    pub fn iter(&self) -> impl Iterator<Item = &StagedSend<'a>> {
        self.wrs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, PdObject};
    use crate::mr::{Sge, SgeList};
    use crate::qp::QpType;
    use crate::wr::limits::test_limits;
    use crate::SendOps;

    const PD: PdId = PdId::test(0x5000);
    const OTHER: PdId = PdId::test(0x6000);

    fn sge(len: u32, pd: PdId) -> Sge<'static> {
        Sge::new_checked(0x1000, len, 7, pd)
    }

    fn push<'a>(b: &mut SendBatch<'a, 8>, op: SendOp, dest: Dest, p: Payload<'a>) -> Result<()> {
        b.push(SendWr::with_dest(1, op, dest, p)?)
    }

    #[test]
    fn every_rule_is_a_typed_error_naming_value_and_limit() {
        let limits = test_limits(PD, QpType::Srd);
        let three = SgeList::<3>::new(&[sge(1, PD), sge(1, PD), sge(1, PD)]).unwrap();
        let two = SgeList::<3>::new(&[sge(1, PD), sge(1, PD)]).unwrap();
        let mut b = SendBatch::<8>::new(&limits);
        let d = Dest::test(PD);
        let r = RemoteBuffer::new(0, 1 << 20, 1);
        assert_eq!(
            push(&mut b, SendOp::Send, d, Payload::Sge(sge(8, PD))),
            Ok(())
        );
        let e = |i| Err(Error::Invalid(i));
        assert_eq!(
            push(&mut b, SendOp::Send, d, Payload::Sge(sge(8, OTHER))),
            e(InvalidInput::WrongPd(PdObject::Sge))
        );
        assert_eq!(
            push(
                &mut b,
                SendOp::Send,
                Dest::test(OTHER),
                Payload::Sge(sge(8, PD))
            ),
            e(InvalidInput::WrongPd(PdObject::Peer))
        );
        assert_eq!(
            push(&mut b, SendOp::Send, d, Payload::Inline(&[0; 33])),
            e(InvalidInput::InlineTooLong { len: 33, max: 32 })
        );
        assert_eq!(
            push(&mut b, SendOp::Send, d, Payload::Sge(sge(8193, PD))),
            e(InvalidInput::MessageTooLong {
                len: 8193,
                max: 8192
            })
        );
        assert_eq!(
            push(&mut b, SendOp::Write(r), d, Payload::Sge(sge(4097, PD))),
            e(InvalidInput::RdmaTooLong {
                len: 4097,
                max: 4096
            })
        );
        assert_eq!(
            push(&mut b, SendOp::Write(r), d, Payload::Inline(b"x")),
            e(InvalidInput::InlineWriteNotEnabled)
        );
        assert_eq!(
            push(&mut b, SendOp::Read(r), d, Payload::Inline(b"x")),
            e(InvalidInput::InlineRead)
        );
        assert_eq!(
            push(&mut b, SendOp::Send, d, (&three).into()),
            e(InvalidInput::TooManySges { count: 3, max: 2 })
        );
        assert_eq!(
            push(&mut b, SendOp::Write(r), d, (&two).into()),
            e(InvalidInput::TooManySges { count: 2, max: 1 })
        );
        assert_eq!(push(&mut b, SendOp::Send, d, (&two).into()), Ok(()));
        assert_eq!(b.len(), 2, "nothing refused was added");
    }

    #[test]
    fn operations_follow_the_qp() {
        let ud = test_limits(PD, QpType::Ud);
        let mut b = SendBatch::<8>::new(&ud);
        let d = Dest::test(PD);
        let r = RemoteBuffer::new(0, 64, 1);
        assert_eq!(
            push(&mut b, SendOp::Write(r), d, Payload::Sge(sge(8, PD))),
            Err(Error::Invalid(InvalidInput::RdmaOnUd))
        );
        let mut srd = test_limits(PD, QpType::Srd);
        srd.send_ops = SendOps::SEND;
        let mut b = SendBatch::<8>::new(&srd);
        assert_eq!(
            push(&mut b, SendOp::SendImm(3), d, Payload::Sge(sge(8, PD))),
            Err(Error::Invalid(InvalidInput::SendOpNotEnabled {
                op: SendOps::SEND_WITH_IMM,
                enabled: SendOps::SEND
            }))
        );
        assert_eq!(
            b.push(SendWr::with_dest(1 << 63, SendOp::Send, d, Payload::Inline(b"x")).unwrap()),
            Err(Error::Invalid(InvalidInput::ReservedWrId(1 << 63)))
        );
    }

    #[test]
    fn a_batch_never_outgrows_the_queue() {
        let limits = test_limits(PD, QpType::Srd); // max_send_wr 4
        let mut b = SendBatch::<8>::new(&limits);
        let d = Dest::test(PD);
        for _ in 0..4 {
            push(&mut b, SendOp::Send, d, Payload::Inline(b"x")).unwrap();
        }
        assert!(b.is_full());
        assert_eq!(
            push(&mut b, SendOp::Send, d, Payload::Inline(b"x")),
            Err(Error::Invalid(InvalidInput::BatchLargerThanQueue {
                depth: 4
            }))
        );
        let mut small = SendBatch::<2>::new(&limits);
        small
            .push(SendWr::with_dest(1, SendOp::Send, d, Payload::Inline(b"x")).unwrap())
            .unwrap();
        small
            .push(SendWr::with_dest(2, SendOp::Send, d, Payload::Inline(b"x")).unwrap())
            .unwrap();
        assert_eq!(
            small.push(SendWr::with_dest(3, SendOp::Send, d, Payload::Inline(b"x")).unwrap()),
            Err(Error::Invalid(InvalidInput::BatchFull))
        );
    }

    #[test]
    fn rdma_must_fit_the_remote_buffer() {
        let d = Dest::test(PD);
        let r = RemoteBuffer::new(0, 4, 1);
        assert_eq!(
            SendWr::with_dest(1, SendOp::Write(r), d, Payload::Sge(sge(5, PD))).map(|w| w.wr_id()),
            Err(Error::Invalid(InvalidInput::RemoteOutOfBounds {
                offset: 0,
                len: 5
            }))
        );
    }
}
