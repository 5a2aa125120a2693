//! [`KeptSend`]: a send work request a batch checked, kept by the caller to be added
//! again without its checks.
//!
//! For bindings whose users post the same request objects over and over (a Python
//! `SendWR` posted every iteration): the checks of [`SendBatch::push`] depend only on
//! the request and on the QP's [`QpLimits`], so a request checked once for limits equal
//! to a batch's passes them again. What the checks cannot vouch for across calls, that
//! the request is added for such a QP and that the AH and the memory region it names are
//! still alive, is the caller's to ensure ([`SendBatch::push_kept`] is `unsafe`). Only one-SGE requests are kept: an SGE
//! list or inline bytes would point into the caller's staging, gone after the post.

use super::{LocalKind, QpLimits, SendBatch, StagedSend};

/// A one-SGE send request as a batch checked and staged it, and the limits of the QP it
/// was checked for ([`SendBatch::keep_last`]). Plain data: it borrows nothing (its AH
/// and memory region are the keeper's to keep alive).
#[derive(Clone, Copy, Debug)]
pub struct KeptSend {
    staged: StagedSend<'static>,
    limits: QpLimits,
}

// SAFETY: plain data (the AH pointer is only ever passed to the provider, whose verbs on
// AHs are thread-safe), as `SendWr`, which is `Send` and `Sync` for the same reason.
unsafe impl Send for KeptSend {}
// SAFETY: see above.
unsafe impl Sync for KeptSend {}

impl KeptSend {
    /// The work request id.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.staged.wr_id
    }
    /// The limits of the QP it was checked for.
    #[inline]
    pub fn limits(&self) -> &QpLimits {
        &self.limits
    }
}

impl<'a, const N: usize> SendBatch<'a, N> {
    /// The request added last, kept to be added again by [`push_kept`](Self::push_kept)
    /// to a batch for a QP with the same limits; None for an empty batch, or a request
    /// whose payload is not one SGE.
    #[inline]
    pub fn keep_last(&self) -> Option<KeptSend> {
        let last = self.wrs.as_slice().last()?;
        if last.local != LocalKind::Sge {
            return None;
        }
        Some(KeptSend {
            staged: last.unbound(),
            limits: *self.limits,
        })
    }

    /// Adds a request kept by [`keep_last`](Self::keep_last) without checking it again;
    /// false (nothing added) if the batch is full (its capacity or the QP's depth).
    ///
    /// # Safety
    /// - The request was kept from a batch for this batch's QP, or for a QP with equal
    ///   limits ([`KeptSend::limits`]; checked in debug builds): the checks it passed are
    ///   the ones this QP's requests must pass. (Comparing the limits here would cost as
    ///   much as the checks it saves; a caller knows which QP it kept a request for.)
    /// - The AH the request was built with, and the memory region of its SGE, must be the
    ///   live objects they were when it was checked (not destroyed since, not another
    ///   object at the same address) and stay alive until this batch is posted or
    ///   dropped: what a [`SendWr`](super::SendWr)'s borrows guarantee for
    ///   [`push`](Self::push).
    #[inline]
    pub unsafe fn push_kept(&mut self, kept: &KeptSend) -> bool {
        debug_assert_eq!(&kept.limits, self.limits, "kept for a QP of other limits");
        if self.wrs.is_full() || self.wrs.len() >= self.limits.max_send_wr as usize {
            return false;
        }
        self.wrs.push(kept.staged.bound());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mr::{Sge, SgeList};
    use crate::pd::PdId;
    use crate::qp::QpType;
    use crate::wr::limits::test_limits;
    use crate::wr::{Dest, Payload, SendOp, SendWr};
    use crate::RemoteBuffer;

    const PD: PdId = PdId::test(0x5000);

    #[test]
    fn a_kept_request_is_added_again_as_it_was_checked() {
        let limits = test_limits(PD, QpType::Srd);
        let sge = Sge::new_checked(0x1000, 64, 7, PD);
        let write = SendOp::Write(RemoteBuffer::new(0x2000, 64, 9));
        let mut b = SendBatch::<8>::new(&limits);
        assert!(b.keep_last().is_none(), "nothing to keep in an empty batch");
        let wr = SendWr::with_dest(5, write, Dest::test(PD), Payload::Sge(sge)).unwrap();
        b.push(wr).unwrap();
        let kept = b.keep_last().unwrap();
        assert_eq!(kept.wr_id(), 5);
        assert_eq!(kept.limits(), &limits);
        let mut again = SendBatch::<8>::new(&limits);
        // SAFETY: nothing is posted (test limits, dangling test AH never dereferenced).
        assert!(unsafe { again.push_kept(&kept) });
        let (x, y) = (b.iter().next().unwrap(), again.iter().next().unwrap());
        assert_eq!(format!("{x:?}"), format!("{y:?}"));
    }

    #[test]
    fn full_batches_refuse_it() {
        let limits = test_limits(PD, QpType::Srd); // max_send_wr 4
        let sge = Sge::new_checked(0x1000, 8, 7, PD);
        let mut b = SendBatch::<8>::new(&limits);
        b.push(SendWr::with_dest(1, SendOp::Send, Dest::test(PD), Payload::Sge(sge)).unwrap())
            .unwrap();
        let kept = b.keep_last().unwrap();
        let mut small = SendBatch::<2>::new(&limits);
        for _ in 0..2 {
            // SAFETY: as above.
            assert!(unsafe { small.push_kept(&kept) });
        }
        // SAFETY: as above.
        assert!(!unsafe { small.push_kept(&kept) }, "capacity");
        let mut deep = SendBatch::<8>::new(&limits);
        for _ in 0..4 {
            // SAFETY: as above.
            assert!(unsafe { deep.push_kept(&kept) });
        }
        // SAFETY: as above.
        assert!(!unsafe { deep.push_kept(&kept) }, "the QP's depth");
        // Gather lists are not kept (they point into the caller's staging).
        let list = SgeList::<2>::new(&[sge, sge]).unwrap();
        let mut g = SendBatch::<8>::new(&limits);
        g.push(SendWr::with_dest(2, SendOp::Send, Dest::test(PD), (&list).into()).unwrap())
            .unwrap();
        assert!(g.keep_last().is_none());
    }
}
