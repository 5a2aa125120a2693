//! [`SendSession`]: work requests checked and handed to the provider one by one, inside
//! one `ibv_wr_start … ibv_wr_complete` session (one doorbell), with nothing staged.
//!
//! A [`SendBatch`](crate::SendBatch) checks every request before the device sees any,
//! and so keeps each one until the post. A session does the same checks, with the same
//! typed errors, but writes each request into the provider's work queue as it is added,
//! as C code using `ibv_wr_*` does: the cost of a batch without its copy. It stays
//! all or nothing: the session is opened and closed by [`Qp::post_with`] around a
//! closure, and a closure that returns an error (or panics) has every request of the
//! session discarded (`ibv_wr_abort`) before the device sees it.

use core::marker::PhantomData;

use super::raw::QpInner;
use super::state::Rts;
use super::Qp;
use crate::ah::Peer;
use crate::error::Result;
use crate::ffi;
use crate::mr::RemoteBuffer;
use crate::wr::{Origin, Payload, QpLimits, SendOp, SendWr, StagedSend};

/// The open posting session of one QP, lent to the closure of [`Qp::post_with`].
///
/// Its methods check a work request exactly as [`SendBatch`](crate::SendBatch)'s do
/// (and fail with the same errors, [`InvalidInput::BatchLargerThanQueue`](crate::InvalidInput::BatchLargerThanQueue)
/// at the QP's queue depth) and then hand it to the provider. A request that fails its
/// checks is not posted; the ones before it are posted if the closure still returns
/// `Ok`.
///
/// A session cannot be kept or leaked (the closure only borrows it), so the provider's
/// send-queue lock it holds is always released; and it cannot be sent to another
/// thread.
pub struct SendSession<'q> {
    pub(super) qp: &'q QpInner,
    // Copies (not reads through `qp`): the optimiser cannot tell that the provider's
    // calls leave the QP's fields alone, and would load every limit again per request.
    pub(super) q: *mut ffi::ibv_qp_ex,
    pub(super) limits: QpLimits,
    pub(super) added: u32,
    /// A direct QP's session (its work requests go to the direct state, not the provider).
    #[cfg(feature = "std")]
    pub(super) direct: Option<crate::direct::backend::DirectSession<'q>>,
    // The provider's SQ lock is held by this thread.
    _not_send: PhantomData<*mut ()>,
}

impl<'q> SendSession<'q> {
    /// Work requests added so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.added as usize
    }
    /// True if none was added.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.added == 0
    }
    /// The limits requests are checked against.
    #[inline]
    pub fn limits(&self) -> &QpLimits {
        &self.limits
    }

    #[inline(always)]
    fn add<P>(
        &mut self,
        wr_id: u64,
        op: SendOp,
        peer: &Peer<P>,
        payload: Payload<'_>,
    ) -> Result<()> {
        self.push(SendWr::new(wr_id, op, peer, payload)?)
    }
    /// Adds a work request after the checks of [`SendBatch::push`](crate::SendBatch::push).
    #[inline(always)]
    pub fn push(&mut self, wr: SendWr<'_>) -> Result<()> {
        let limits = &self.limits;
        if self.added >= limits.max_send_wr {
            return Err(QpLimits::queue_full(limits.max_send_wr));
        }
        limits.check_send(&wr, Origin::User)?;
        #[cfg(feature = "std")]
        if let Some(d) = &mut self.direct {
            // SAFETY: the WR's SGE list and inline bytes are borrowed for this call.
            unsafe { d.push(StagedSend::of(&wr)) }?;
            self.added += 1;
            return Ok(());
        }
        // SAFETY: the session is open on this QP (made only by `post_with`, between
        // start and complete/abort); `wr` was checked against this QP just now; its AH,
        // SGE list and inline bytes are borrowed for this call, and the provider copies
        // them into the WQE before `emit` returns.
        unsafe { self.qp.fns.emit(self.q, &StagedSend::of(&wr)) };
        self.added += 1;
        Ok(())
    }
    crate::wr::send_builders!(peer: '_, data: 'a, generics: ['a,]);
}

impl core::fmt::Debug for SendSession<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendSession")
            .field("qpn", &self.qp.qpn())
            .field("added", &self.added)
            .finish()
    }
}

/// Aborts the session if the closure panics (the normal paths complete or abort it).
struct AbortOnUnwind<'q> {
    qp: &'q QpInner,
    armed: bool,
}

impl Drop for AbortOnUnwind<'_> {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: the session `post_with` opened on this QP is still open.
            unsafe { self.qp.fns.abort(self.qp.qpx) };
        }
    }
}

impl<P> Qp<P, Rts> {
    /// Posts the work requests `build` adds to a [`SendSession`], in one
    /// `ibv_wr_start … ibv_wr_complete` session (one doorbell), each handed to the
    /// provider as it is added (nothing staged). All or nothing: if `build` returns an
    /// error (or panics), or the doorbell fails ([`Error::SendQueueFull`](crate::Error::SendQueueFull)
    /// means: poll completions, then post again), none of them is posted.
    ///
    /// `&mut self`: while the session holds the provider's send-queue lock nothing else
    /// can post to this QP (another post would wait for that lock forever).
    ///
    /// On a [`Backend::Direct`](crate::Backend::Direct) QP the session holds the direct
    /// send queue's lock instead, writes each request into its send-queue slot beyond the
    /// doorbell as it is added (past the first `max_batch`, into a host staging area:
    /// libefa's local queue), and rings the doorbell (every `max_batch` WQEs) when
    /// `build` returns `Ok`.
    ///
    /// Completing this QP's sends needs the same lock, so inside `build` a poll of the
    /// QP's send CQ is refused with [`InvalidInput::PollInSession`](crate::InvalidInput::PollInSession)
    /// (in C, with libefa, it would wait for the lock for ever); other CQs poll, and so
    /// does this one from other threads (they wait for the session to end, so `build`
    /// must not wait for such a poll: joining a thread that polls it never returns, as
    /// joining one that locks a mutex `build` holds).
    ///
    /// ```no_run
    /// # use efa_typestate::*;
    /// # fn f<P, Q, M: RegionMemory>(qp: &mut Qp<P, Rts>, peer: &Peer<Q>, src: &Mr<Q, M>,
    /// #      dst: RemoteBuffer) -> Result<()> {
    /// // SAFETY: `src` is not written until both completions are polled.
    /// unsafe {
    ///     qp.post_with(|s| {
    ///         s.write(1, peer, src.sge(0, 4096)?, dst.slice(0, 4096)?)?;
    ///         s.write(2, peer, src.sge(4096, 4096)?, dst.slice(4096, 4096)?)
    ///     })
    /// }
    /// # }
    /// ```
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send), for every work request posted.
    #[inline(always)]
    pub unsafe fn post_with<R>(
        &mut self,
        build: impl FnOnce(&mut SendSession<'_>) -> Result<R>,
    ) -> Result<R> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_with(build) }
    }
}

impl QpInner {
    /// The session of [`Qp::post_with`] (the state was checked by the caller).
    ///
    /// # Safety
    /// As [`Qp::post_with`]; the QP is in RTS.
    #[inline(always)]
    pub(crate) unsafe fn post_with<R>(
        &mut self,
        build: impl FnOnce(&mut SendSession<'_>) -> Result<R>,
    ) -> Result<R> {
        // Polls of the send CQ on this thread are refused until the session ends: they
        // would wait for the lock the session holds (`cq/in_session.rs`).
        #[cfg(feature = "std")]
        // SAFETY: the `ibv_qp` of this live QP; `send_cq` is a plain field set at creation.
        let _mark =
            crate::cq::in_session::SessionMark::open(unsafe { (*self.qp.as_ptr()).send_cq });
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            let qp = &*self;
            let mut session = SendSession {
                qp,
                q: core::ptr::null_mut(),
                limits: qp.limits,
                added: 0,
                direct: Some(d.qp.begin()),
                _not_send: PhantomData,
            };
            // A panic in `build` drops the session, which forgets its work requests.
            let built = build(&mut session);
            let Some(direct) = session.direct.take() else {
                unreachable!("the direct session is only taken here")
            };
            return match built {
                Ok(r) => direct.commit().map(|()| r),
                Err(e) => {
                    direct.abort();
                    Err(e)
                }
            };
        }
        let qp = &*self;
        let q: *mut ffi::ibv_qp_ex = qp.qpx;
        // SAFETY: this live QP's ibv_qp_ex; `&mut self` means no session is open on it.
        // The guard and the two arms below close it on every path.
        unsafe { qp.fns.start(q) };
        let mut guard = AbortOnUnwind { qp, armed: true };
        let mut session = SendSession {
            qp,
            q,
            limits: qp.limits,
            added: 0,
            #[cfg(feature = "std")]
            direct: None,
            _not_send: PhantomData,
        };
        let built = build(&mut session);
        guard.armed = false;
        match built {
            // SAFETY: the session opened above; the caller's contract covers its WRs.
            Ok(r) => unsafe { qp.fns.complete(q) }.map(|()| r),
            Err(e) => {
                // SAFETY: the session opened above.
                unsafe { qp.fns.abort(q) };
                Err(e)
            }
        }
    }
}
