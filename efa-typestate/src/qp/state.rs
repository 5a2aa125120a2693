//! QP states: the run-time [`QpStateKind`] and the compile-time markers [`Reset`],
//! [`Init`], [`Rtr`] and [`Rts`].

use crate::error::Error;
use crate::ffi::ibv_qp_state;

/// A QP state as the device knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpStateKind {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// SQD.
    Sqd,
    /// SQE.
    Sqe,
    /// ERR.
    Err,
    /// A value this crate does not know (saturated at 255).
    Unknown(u8),
}

impl QpStateKind {
    /// The state of an `ibv_qp_state` value (`IBV_QPS_*`).
    pub fn from_raw(v: u32) -> Self {
        use ibv_qp_state::*;
        match v {
            IBV_QPS_RESET => QpStateKind::Reset,
            IBV_QPS_INIT => QpStateKind::Init,
            IBV_QPS_RTR => QpStateKind::Rtr,
            IBV_QPS_RTS => QpStateKind::Rts,
            IBV_QPS_SQD => QpStateKind::Sqd,
            IBV_QPS_SQE => QpStateKind::Sqe,
            IBV_QPS_ERR => QpStateKind::Err,
            v => QpStateKind::Unknown(v.min(u8::MAX as u32) as u8),
        }
    }
    /// The `ibv_qp_state` value (`IBV_QPS_*`) of this state.
    pub fn to_raw(self) -> u32 {
        use ibv_qp_state::*;
        match self {
            QpStateKind::Reset => IBV_QPS_RESET,
            QpStateKind::Init => IBV_QPS_INIT,
            QpStateKind::Rtr => IBV_QPS_RTR,
            QpStateKind::Rts => IBV_QPS_RTS,
            QpStateKind::Sqd => IBV_QPS_SQD,
            QpStateKind::Sqe => IBV_QPS_SQE,
            QpStateKind::Err => IBV_QPS_ERR,
            QpStateKind::Unknown(v) => v as u32,
        }
    }
    pub(crate) fn can_post_recv(self) -> bool {
        matches!(
            self,
            QpStateKind::Init
                | QpStateKind::Rtr
                | QpStateKind::Rts
                | QpStateKind::Sqd
                | QpStateKind::Sqe
        )
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A compile-time QP state. Sealed: only [`Reset`], [`Init`], [`Rtr`] and [`Rts`].
pub trait QpState: sealed::Sealed {
    /// The run-time state this marker stands for.
    const KIND: QpStateKind;
}

/// States in which receives may be posted (Init, Rtr, Rts).
pub trait RecvReady: QpState {}

/// RESET: just created (or reset). Nothing can be posted.
#[derive(Debug)]
pub struct Reset;
/// INIT: qkey set; receives may be posted.
#[derive(Debug)]
pub struct Init;
/// RTR: ready to receive.
#[derive(Debug)]
pub struct Rtr;
/// RTS: ready to send.
#[derive(Debug)]
pub struct Rts;

impl sealed::Sealed for Reset {}
impl sealed::Sealed for Init {}
impl sealed::Sealed for Rtr {}
impl sealed::Sealed for Rts {}
impl QpState for Reset {
    const KIND: QpStateKind = QpStateKind::Reset;
}
impl QpState for Init {
    const KIND: QpStateKind = QpStateKind::Init;
}
impl QpState for Rtr {
    const KIND: QpStateKind = QpStateKind::Rtr;
}
impl QpState for Rts {
    const KIND: QpStateKind = QpStateKind::Rts;
}
impl RecvReady for Init {}
impl RecvReady for Rtr {}
impl RecvReady for Rts {}

/// A failed transition: the error and the QP, unchanged, in its previous state.
///
/// It converts into [`Error`] (`?` in a function returning this crate's `Result`), and
/// is a `std::error::Error` itself when the QP is (`'static` holders, e.g. `Arc`). A QP
/// that borrows its PD is not `'static`, so to use `?` into `Box<dyn Error>` or
/// `anyhow::Error`, convert first (`.map_err(efa_typestate::Error::from)?`), or use
/// [`Qp::prepare`](crate::Qp::prepare), which returns a plain [`Error`].
#[derive(Debug)]
pub struct TransitionError<Q> {
    /// The QP, still in the state it was in.
    pub qp: Q,
    /// What went wrong.
    pub error: Error,
}

impl<Q> core::fmt::Display for TransitionError<Q> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "QP state transition failed: {}", self.error)
    }
}

#[cfg(feature = "std")]
impl<Q: core::fmt::Debug> std::error::Error for TransitionError<Q> {}

impl<Q> From<TransitionError<Q>> for Error {
    fn from(e: TransitionError<Q>) -> Error {
        e.error
    }
}
