//! [`DynQp`]: a QP whose state is tracked at run time, for code that restores QPs,
//! reacts to async errors or drives the state machine from data.

use core::marker::PhantomData;

use super::config::{QpAttr, QpCaps, RtsOptions, WqLayout};
use super::raw::{QpInner, ATTR_QKEY};
use super::session::SendSession;
use super::state::{QpState, QpStateKind, TransitionError};
use super::Qp;
use crate::endpoint::EndpointInfo;
use crate::error::{InvalidInput, Result};
use crate::ffi;
use crate::parent::Keep;
use crate::wr::{QpLimits, RecvBatch, RecvTarget, SendBatch, SendTarget, TargetSealed};

/// A QP whose state is tracked at run time: for code that restores QPs, reacts to
/// async errors or drives the state machine from data. Posting checks the state.
pub struct DynQp<P> {
    inner: QpInner,
    state: QpStateKind,
    _cqs: [Keep; 2],
    _pd: P,
}

impl<P> DynQp<P> {
    pub(crate) fn from_parts(inner: QpInner, state: QpStateKind, cqs: [Keep; 2], pd: P) -> Self {
        DynQp {
            inner,
            state,
            _cqs: cqs,
            _pd: pd,
        }
    }
    /// The state as last set or queried.
    pub fn state(&self) -> QpStateKind {
        self.state
    }
    /// Re-reads the state from the device.
    pub fn refresh_state(&mut self) -> Result<QpStateKind> {
        self.state = self.inner.query()?.state;
        Ok(self.state)
    }
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }
    /// The data path posting to this QP (see [`Qp::backend`]).
    pub fn backend(&self) -> super::Backend {
        self.inner.backend()
    }
    /// Limits granted at creation.
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }
    /// Everything batches are checked against.
    pub fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
    /// Local endpoint info.
    pub fn endpoint(&self) -> EndpointInfo {
        self.inner.endpoint()
    }
    /// Queries the device's view of the QP.
    pub fn query(&self) -> Result<QpAttr> {
        self.inner.query()
    }
    /// The send and receive queues' ring layouts (as [`Qp::wq_layout`]).
    pub fn wq_layout(&self) -> Result<(WqLayout, WqLayout)> {
        self.inner.wq_layout()
    }
    /// Moves to `state` with no optional attributes (RESET→INIT needs [`DynQp::init`]).
    pub fn modify_state(&mut self, state: QpStateKind) -> Result<()> {
        let r = if state == QpStateKind::Rts {
            self.inner.set_rts(RtsOptions::default())
        } else {
            self.inner.set_state(state)
        };
        match r {
            Ok(()) => {
                self.state = state;
                Ok(())
            }
            Err(e) => {
                let _ = self.refresh_state();
                Err(e)
            }
        }
    }
    /// RESET → INIT with `qkey`.
    pub fn init(&mut self, qkey: u32) -> Result<()> {
        self.inner.set_init(qkey)?;
        self.state = QpStateKind::Init;
        Ok(())
    }
    /// Any `ibv_modify_qp`; the tracked state is re-read afterwards.
    pub fn modify(&mut self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        let r = self.inner.modify(attr, mask);
        if mask & ATTR_QKEY != 0 && r.is_ok() {
            self.inner.qkey = attr.qkey;
        }
        let _ = self.refresh_state();
        r
    }
    /// Converts back to a typed QP if it is in state `S`.
    pub fn into_typed<S: QpState>(self) -> Result<Qp<P, S>, TransitionError<Self>> {
        if self.state == S::KIND {
            Ok(Qp {
                inner: self.inner,
                _state: PhantomData,
                _cqs: self._cqs,
                _pd: self._pd,
            })
        } else {
            let error = InvalidInput::WrongQpState {
                expected: S::KIND,
                actual: self.state,
            }
            .into();
            Err(TransitionError { qp: self, error })
        }
    }
    /// Posts sends (a batch built for this QP) if the QP is in RTS (else
    /// [`InvalidInput::WrongQpState`]).
    ///
    /// # Safety
    /// As [`Qp::post_send`].
    pub unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        if self.state != QpStateKind::Rts {
            return Err(InvalidInput::WrongQpState {
                expected: QpStateKind::Rts,
                actual: self.state,
            }
            .into());
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_send(batch) }
    }
    /// Posts what `build` adds to a session ([`Qp::post_with`]) if the QP is in RTS (else
    /// [`InvalidInput::WrongQpState`], and `build` is not called).
    ///
    /// # Safety
    /// As [`Qp::post_with`].
    pub unsafe fn post_with<R>(
        &mut self,
        build: impl FnOnce(&mut SendSession<'_>) -> Result<R>,
    ) -> Result<R> {
        if self.state != QpStateKind::Rts {
            return Err(InvalidInput::WrongQpState {
                expected: QpStateKind::Rts,
                actual: self.state,
            }
            .into());
        }
        // SAFETY: forwarded contract; the QP is in RTS.
        unsafe { self.inner.post_with(build) }
    }
    /// Posts a run of RDMA operations ([`Qp::post_run`]) if the QP is in RTS (else
    /// [`InvalidInput::WrongQpState`], nothing posted).
    ///
    /// # Safety
    /// As [`Qp::post_run`].
    pub unsafe fn post_run(
        &mut self,
        run: &crate::wr::RdmaRun<'_>,
        entries: &crate::wr::RunEntries<'_>,
    ) -> Result<usize, crate::wr::RunError> {
        // SAFETY: forwarded contract.
        unsafe { self.post_run_admit(run, entries, |_| Ok(())) }
    }
    /// [`Qp::post_run_admit`] if the QP is in RTS (else [`InvalidInput::WrongQpState`],
    /// nothing posted).
    ///
    /// # Safety
    /// As [`Qp::post_run`].
    pub unsafe fn post_run_admit(
        &mut self,
        run: &crate::wr::RdmaRun<'_>,
        entries: &crate::wr::RunEntries<'_>,
        admit: impl FnOnce(usize) -> Result<()>,
    ) -> Result<usize, crate::wr::RunError> {
        if self.state != QpStateKind::Rts {
            return Err(crate::Error::from(InvalidInput::WrongQpState {
                expected: QpStateKind::Rts,
                actual: self.state,
            })
            .into());
        }
        // SAFETY: forwarded contract; the QP is in RTS.
        unsafe { self.inner.post_run(run, entries, admit) }
    }
    /// Posts receives (a batch built for this QP) if the QP is in INIT or later (else
    /// [`InvalidInput::WrongQpState`]).
    ///
    /// # Safety
    /// As [`Qp::post_recv`].
    pub unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        if !self.state.can_post_recv() {
            return Err(InvalidInput::WrongQpState {
                expected: QpStateKind::Init,
                actual: self.state,
            }
            .into());
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_recv(batch) }
    }
}

impl<P> TargetSealed for DynQp<P> {}

impl<P> SendTarget for DynQp<P> {
    fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
}

impl<P> RecvTarget for DynQp<P> {
    fn limits(&self) -> &QpLimits {
        &self.inner.limits
    }
}

impl<P> core::fmt::Debug for DynQp<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DynQp")
            .field("qpn", &self.qpn())
            .field("state", &self.state)
            .finish()
    }
}
