//! [`RecvBatch`]: up to `N` receives for one QP, checked as they are added.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use super::copy_vec::CopyVec;
use super::limits::Origin;
use super::{QpLimits, RecvBufs, RecvTarget};
use crate::error::{InvalidInput, Result};

/// One receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) bufs: RecvBufs<'a>,
}

impl RecvWr<'_> {
    /// Work request id (reported in its completion).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
}

/// Up to `N` receives for one QP, posted as one `ibv_post_recv` chain by
/// [`Qp::post_recv`](crate::Qp::post_recv). It borrows the QP and its SGEs.
#[derive(Debug)]
pub struct RecvBatch<'a, const N: usize> {
    pub(crate) limits: &'a QpLimits,
    pub(crate) wrs: CopyVec<RecvWr<'a>, N>,
}

impl<'a, const N: usize> RecvBatch<'a, N> {
    /// An empty batch for `qp` (a [`Qp`](crate::Qp) in INIT, RTR or RTS, or a
    /// [`DynQp`](crate::DynQp)).
    #[inline]
    pub fn new<Q: RecvTarget + ?Sized>(qp: &'a Q) -> Self {
        RecvBatch {
            limits: RecvTarget::limits(qp),
            wrs: CopyVec::new(),
        }
    }
    /// Appends a receive after checking it against the QP: [`InvalidInput::BatchFull`]
    /// at capacity `N`, [`InvalidInput::BatchLargerThanQueue`] at the QP's queue depth,
    /// [`InvalidInput::WrongPd`] for memory of another PD,
    /// [`InvalidInput::TooManySges`] beyond `max_recv_sge`.
    #[inline]
    pub fn push(&mut self, wr_id: u64, bufs: impl Into<RecvBufs<'a>>) -> Result<()> {
        self.push_from(wr_id, bufs.into(), Origin::User)
    }
    #[inline(always)]
    pub(crate) fn push_from(
        &mut self,
        wr_id: u64,
        bufs: RecvBufs<'a>,
        origin: Origin,
    ) -> Result<()> {
        if self.wrs.is_full() {
            return Err(InvalidInput::BatchFull.into());
        }
        if self.wrs.len() >= self.limits.max_recv_wr as usize {
            return Err(QpLimits::queue_full(self.limits.max_recv_wr));
        }
        self.limits.check_recv(wr_id, &bufs, origin)?;
        self.wrs.push(RecvWr { wr_id, bufs });
        Ok(())
    }
    /// Number of receives.
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
        self.wrs.len() >= N.min(self.limits.max_recv_wr as usize)
    }
    /// Empties the batch for reuse.
    #[inline]
    pub fn clear(&mut self) {
        self.wrs.clear();
    }
    /// The receives.
    pub fn iter(&self) -> impl Iterator<Item = &RecvWr<'a>> {
        self.wrs.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, PdObject};
    use crate::mr::{Sge, SgeList};
    use crate::pd::PdId;
    use crate::qp::QpType;
    use crate::wr::limits::test_limits;

    #[test]
    fn receives_are_checked_against_the_qp() {
        let pd = PdId::test(0x10);
        let limits = test_limits(pd, QpType::Srd); // max_recv_wr 4, max_recv_sge 2
        let s = Sge::new_checked(0x100, 64, 3, pd);
        let three = SgeList::<3>::new(&[s, s, s]).unwrap();
        let mut b = RecvBatch::<8>::new(&limits);
        b.push(1, s).unwrap();
        assert_eq!(
            b.push(2, Sge::new_checked(0x100, 64, 3, PdId::test(0x20))),
            Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Sge)))
        );
        assert_eq!(
            b.push(3, &three),
            Err(Error::Invalid(InvalidInput::TooManySges {
                count: 3,
                max: 2
            }))
        );
        assert_eq!(
            b.push(u64::MAX, s),
            Err(Error::Invalid(InvalidInput::ReservedWrId(u64::MAX)))
        );
        for id in 4..7 {
            b.push(id, s).unwrap();
        }
        assert_eq!(
            b.push(9, s),
            Err(Error::Invalid(InvalidInput::BatchLargerThanQueue {
                depth: 4
            }))
        );
        let ids: arrayvec::ArrayVec<u64, 8> = b.iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids.as_slice(), &[1, 4, 5, 6]);
    }
}
