//! The objects this library hands to C: public rdma-core struct first, private state after.

use super::layout::{EfadvCq, EfadvQp, QpExV65, VerbsContextV65};
use crate::model::{self, Device};
use core::sync::atomic::AtomicU32;
use efa_sys::verbs as v;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// One `struct ibv_device` per model device (never freed).
#[repr(C)]
pub struct SimDevice {
    pub ibv: v::ibv_device,
    pub model: Arc<Device>,
}

/// An opened device: `verbs_context` (with `ibv_context` last) + private state.
#[repr(C)]
pub struct SimContext {
    pub vctx: VerbsContextV65,
    pub device: Arc<Device>,
}

impl SimContext {
    /// The context that owns `ctx`.
    ///
    /// # Safety
    /// `ctx` must come from `ibv_open_device` of this library.
    #[inline]
    pub unsafe fn from_ibv<'a>(ctx: *mut v::ibv_context) -> &'a SimContext {
        // SAFETY: ctx is the `context` member of a SimContext's verbs_context, which is
        // the first member of the repr(C) SimContext (caller contract).
        unsafe {
            &*((ctx as *mut u8).sub(core::mem::offset_of!(VerbsContextV65, context))
                as *const SimContext)
        }
    }
}

/// What an `ibv_pd` handed out is.
pub enum PdKind {
    /// A protection domain of the device.
    Plain,
    /// A parent domain over `pd` (and optionally a thread domain).
    Parent { pd: *mut SimPd, td: *mut SimTd },
}

/// `struct ibv_pd` + the model PD (for a parent domain: the model PD of its PD).
#[repr(C)]
pub struct SimPd {
    pub ibv: v::ibv_pd,
    pub model: Arc<model::Pd>,
    pub kind: PdKind,
    /// Parent domains that use this PD.
    pub parents: AtomicU32,
}

/// `struct ibv_td`.
#[repr(C)]
pub struct SimTd {
    pub ibv: v::ibv_td,
    pub users: AtomicU32,
}

/// `struct ibv_mr` + the model MR.
#[repr(C)]
pub struct SimMr {
    pub ibv: v::ibv_mr,
    pub model: Arc<model::Mr>,
}

/// `struct ibv_ah` + the model AH.
#[repr(C)]
pub struct SimAh {
    pub ibv: v::ibv_ah,
    pub model: Arc<model::Ah>,
}

/// `struct ibv_comp_channel` + the CQs whose events are pending.
#[repr(C)]
pub struct SimChannel {
    pub ibv: v::ibv_comp_channel,
    /// CQs (as `*mut SimCq` addresses) with an undelivered event, oldest first.
    pub fired: Mutex<VecDeque<usize>>,
    pub users: AtomicU32,
}

/// `struct ibv_cq_ex` (its first 128 bytes are `struct ibv_cq`) + `efadv_cq` + the model
/// CQ (whose poller holds the provider's consumer state).
#[repr(C)]
pub struct SimCq {
    pub ex: v::ibv_cq_ex,
    pub efa: EfadvCq,
    pub model: Arc<model::Cq>,
    pub channel: *mut SimChannel,
    pub read_as_send: bool,
}

impl SimCq {
    /// # Safety
    /// `cq` must come from this library's CQ creators.
    #[inline]
    pub unsafe fn from_ibv<'a>(cq: *mut v::ibv_cq) -> &'a SimCq {
        // SAFETY: ibv_cq is the prefix of ibv_cq_ex, the first member of SimCq.
        unsafe { &*(cq as *const SimCq) }
    }
    /// # Safety
    /// As [`SimCq::from_ibv`].
    #[inline]
    pub unsafe fn from_ex<'a>(cq: *mut v::ibv_cq_ex) -> &'a SimCq {
        // SAFETY: ibv_cq_ex is the first member of SimCq.
        unsafe { &*(cq as *const SimCq) }
    }
}

/// `struct ibv_qp_ex` (v65) + `efadv_qp` + the model QP (whose queues hold the provider's
/// state).
#[repr(C)]
pub struct SimQp {
    pub ex: QpExV65,
    pub efa: EfadvQp,
    pub model: Arc<model::Qp>,
    pub pd: *mut SimPd,
    pub send_cq: *mut SimCq,
    pub recv_cq: *mut SimCq,
    /// Created with SEND_OPS_FLAGS (ibv_qp_to_qp_ex returns it).
    pub is_ex: bool,
    pub sq_sig_all: bool,
}

impl SimQp {
    /// # Safety
    /// `qp` must come from this library's QP creators.
    #[inline]
    pub unsafe fn from_ibv<'a>(qp: *mut v::ibv_qp) -> &'a SimQp {
        // SAFETY: ibv_qp is the first member of ibv_qp_ex, the first member of SimQp.
        unsafe { &*(qp as *const SimQp) }
    }
    /// # Safety
    /// As [`SimQp::from_ibv`].
    #[inline]
    pub unsafe fn from_ex<'a>(qp: *mut v::ibv_qp_ex) -> &'a SimQp {
        // SAFETY: ibv_qp_ex is the first member of SimQp.
        unsafe { &*(qp as *const SimQp) }
    }
    /// # Safety
    /// `efa` is the `efa` member of a SimQp (handed out by efadv_qp_from_ibv_qp_ex).
    #[inline]
    pub unsafe fn from_efa<'a>(efa: *mut EfadvQp) -> &'a SimQp {
        // SAFETY: the caller's pointer is the `efa` member of a live SimQp.
        unsafe { &*((efa as *mut u8).sub(core::mem::offset_of!(SimQp, efa)) as *const SimQp) }
    }
}
