//! Queue pairs (UD and SRD) with compile-time states, and posting.
//!
//! A new QP is [`Qp<P, Reset>`](Qp). Consuming transitions move it through
//! [`Init`] → [`Rtr`] → [`Rts`] (or [`Qp::prepare`] does all three); a failed transition
//! hands the QP back inside [`TransitionError`]. Receives can be posted from `Init` on,
//! sends only in `Rts`: anything else does not compile. [`DynQp`] is the same QP with
//! its state tracked at run time. `P` holds the PD (and the CQs beside it): `&Pd<_>` or
//! `Arc<Pd<_>>` (see [`parent`](crate::parent)).

use core::marker::PhantomData;

use crate::endpoint::EndpointInfo;
use crate::error::{Error, Result};
use crate::ffi;
use crate::parent::Keep;
use crate::wr::{QpLimits, RecvBatch, RecvTarget, SendBatch, SendTarget, TargetSealed};

mod config;
mod create;
mod device_limits;
mod dynamic;
mod raw;
mod run;
mod send_fns;
mod session;
mod state;
#[cfg(feature = "std")]
pub(crate) mod transfer;

pub use config::DEFAULT_RNR_RETRY;
pub use config::{Backend, QpAttr, QpCaps, QpConfig, QpType, RnrRetry, RtsOptions, WqLayout};
pub use dynamic::DynQp;
pub use session::SendSession;
pub use state::{Init, QpState, QpStateKind, RecvReady, Reset, Rtr, Rts, TransitionError};
#[cfg(feature = "std")]
pub use transfer::Transfer;

pub(crate) use device_limits::check_cq_depth;
pub(crate) use raw::{QpInner, EFA_PORT};

/// A queue pair in compile-time state `S`, destroyed on drop. Holds its PD and CQs
/// through `P`, so neither can be dropped before it.
pub struct Qp<P, S: QpState> {
    pub(crate) inner: QpInner,
    _state: PhantomData<S>,
    // Dropped after `inner` (the QP is destroyed before its CQs and PD are released).
    _cqs: [Keep; 2],
    _pd: P,
}

impl<P, S: QpState> Qp<P, S> {
    fn into_state<T: QpState>(self) -> Qp<P, T> {
        Qp {
            inner: self.inner,
            _state: PhantomData,
            _cqs: self._cqs,
            _pd: self._pd,
        }
    }

    /// QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }
    /// UD or SRD.
    #[inline]
    pub fn qp_type(&self) -> QpType {
        self.inner.limits.qp_type
    }
    /// Limits granted at creation.
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }
    /// Everything batches are checked against.
    #[inline]
    pub fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
    /// Send operations enabled at creation.
    #[inline]
    pub fn send_ops(&self) -> crate::SendOps {
        self.inner.limits.send_ops
    }
    /// The state this type says the QP is in.
    pub fn state(&self) -> QpStateKind {
        S::KIND
    }
    /// Local endpoint info to give peers (GID, QPN, and the qkey set at INIT; 0 before).
    #[inline]
    pub fn endpoint(&self) -> EndpointInfo {
        self.inner.endpoint()
    }
    /// Queries the device's view of the QP.
    pub fn query(&self) -> Result<QpAttr> {
        self.inner.query()
    }
    /// The data path posting to this QP ([`Backend::Direct`] or [`Backend::Provider`];
    /// never `Auto`, which is resolved at creation).
    #[inline]
    pub fn backend(&self) -> Backend {
        self.inner.backend()
    }
    /// EFA send/receive ring layout (`efadv_query_qp_wqs`).
    pub fn wq_layout(&self) -> Result<(WqLayout, WqLayout)> {
        self.inner.wq_layout()
    }
    /// The raw QP. Work requests posted through it by other code must not use `wr_id`s
    /// with bit 63 set (they are reserved for [leases](crate::lease)); and nothing may be
    /// posted through it to a [`Backend::Direct`] QP, whose rings only its direct state
    /// drives (the provider's producer indices and request ids would disagree with it).
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.inner.qp.as_ptr()
    }
    /// Back to RESET (posted work requests are forgotten).
    pub fn reset(self) -> Result<Qp<P, Reset>, TransitionError<Self>> {
        match self.inner.set_state(QpStateKind::Reset) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
    /// Forgets the compile-time state (for QPs whose state is only known at run time).
    pub fn into_dyn(self) -> DynQp<P> {
        DynQp::from_parts(self.inner, S::KIND, self._cqs, self._pd)
    }
    /// Raw `ibv_modify_qp` escape hatch.
    ///
    /// # Safety
    /// The call must leave the QP in state `S` (the type still claims it), or the caller
    /// must convert it with [`into_dyn`](Self::into_dyn) before any other use.
    pub unsafe fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        self.inner.modify(attr, mask)
    }
    /// Destroys the QP, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        let Qp {
            inner,
            _state,
            _cqs,
            _pd,
        } = self;
        match inner.destroy() {
            Ok(()) => Ok(()),
            Err((inner, e)) => Err((
                Qp {
                    inner,
                    _state,
                    _cqs,
                    _pd,
                },
                e,
            )),
        }
    }
}

impl<P> Qp<P, Reset> {
    /// RESET → INIT with `qkey` (pkey index 0, port 1).
    pub fn init(mut self, qkey: u32) -> Result<Qp<P, Init>, TransitionError<Self>> {
        match self.inner.set_init(qkey) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }

    /// RESET → INIT → RTR → RTS in one call, with `rnr_retry` (`None`: the finite
    /// [`DEFAULT_RNR_RETRY`] where the device lets it be set, see [`RtsOptions`]). On
    /// failure the QP is destroyed and the error returned: a plain [`Error`], so `?`
    /// works in functions returning `Box<dyn Error>` or `anyhow::Result` whatever holds
    /// the PD (a borrowed QP inside the error would not be `'static`). To get the QP
    /// back instead, use [`try_prepare`](Self::try_prepare).
    pub fn prepare(self, qkey: u32, rnr_retry: Option<RnrRetry>) -> Result<Qp<P, Rts>> {
        self.try_prepare(qkey, rnr_retry).map_err(Error::from)
    }

    /// As [`prepare`](Self::prepare), but on failure the QP is reset and handed back
    /// (as a [`DynQp`] in whatever state it ended up if even that failed).
    pub fn try_prepare(
        self,
        qkey: u32,
        rnr_retry: Option<RnrRetry>,
    ) -> Result<Qp<P, Rts>, TransitionError<DynQp<P>>> {
        let fail = |qp: DynQp<P>, error: Error| {
            let mut qp = qp;
            let _ = qp.modify_state(QpStateKind::Reset);
            Err(TransitionError { qp, error })
        };
        let init = self.init(qkey).map_err(|e| TransitionError {
            qp: e.qp.into_dyn(),
            error: e.error,
        })?;
        let rtr = match init.rtr() {
            Ok(q) => q,
            Err(e) => return fail(e.qp.into_dyn(), e.error),
        };
        match rtr.rts(RtsOptions {
            rnr_retry,
            sq_psn: 0,
        }) {
            Ok(q) => Ok(q),
            Err(e) => fail(e.qp.into_dyn(), e.error),
        }
    }
}

impl<P> Qp<P, Init> {
    /// INIT → RTR.
    pub fn rtr(self) -> Result<Qp<P, Rtr>, TransitionError<Self>> {
        match self.inner.set_state(QpStateKind::Rtr) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

impl<P> Qp<P, Rtr> {
    /// RTR → RTS.
    pub fn rts(self, opts: RtsOptions) -> Result<Qp<P, Rts>, TransitionError<Self>> {
        match self.inner.set_rts(opts) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

impl<P, S: RecvReady> Qp<P, S> {
    /// Posts a batch of receives (built for this QP) as one chain. No allocation.
    ///
    /// # Safety
    /// The device's window over the memory the SGEs name opens with this call and ends,
    /// for each receive, when its completion has been polled from the CQ, or when a
    /// call that resets or destroys the QP has returned, whichever comes first. Within
    /// the window the device may write those bytes at any time, so the caller must not
    /// read or write them (through the `Mr` or otherwise), must keep the memory
    /// allocated and not reuse it, and must keep it registered: dropping, closing or
    /// re-registering the `Mr` is not allowed either, because the device may hand its
    /// key to a later registration, which the receive would then write. (A `mem::forget`
    /// of an `Mr` over owned memory keeps both; over borrowed memory it does not.)
    ///
    /// [`InvalidInput::WrongQp`](crate::InvalidInput::WrongQp) for a batch of another QP;
    /// on [`Error::RecvQueueFull`] the first `posted` receives were posted.
    #[inline(always)]
    pub unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_recv(batch) }
    }
}

impl<P> Qp<P, Rts> {
    /// Posts a batch of sends/RDMA operations (built for this QP) in one
    /// `ibv_wr_start … ibv_wr_complete` session (one doorbell). All or nothing: on error
    /// none of the batch was posted. [`Error::SendQueueFull`] means: poll completions,
    /// then post again.
    ///
    /// # Safety
    /// The device's window over the memory the SGEs name opens with this call and ends,
    /// for each work request, when its completion has been polled from the CQ, or when
    /// a call that resets or destroys the QP has returned, whichever comes first. Within
    /// the window the device may read (sends, RDMA-write sources) or write (RDMA-read
    /// destinations) those bytes at any time: the caller must not write source bytes,
    /// nor read or write destination bytes, and must keep the memory allocated and
    /// registered, as for [`post_recv`](Self::post_recv) (no drop, close or
    /// re-registration of the `Mr`: its key could be reissued). Inline payloads are
    /// copied during the call and are exempt.
    #[inline(always)]
    pub unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_send(batch) }
    }
}

impl<P, S: QpState> TargetSealed for Qp<P, S> {}

impl<P> SendTarget for Qp<P, Rts> {
    #[inline]
    fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
}

impl<P, S: RecvReady> RecvTarget for Qp<P, S> {
    #[inline]
    fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
}

impl<P, S: QpState> core::fmt::Debug for Qp<P, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("type", &self.inner.limits.qp_type)
            .field("state", &S::KIND)
            .field("caps", &self.inner.caps)
            .finish()
    }
}
