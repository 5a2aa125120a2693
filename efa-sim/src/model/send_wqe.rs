//! One send WQE as the device reads it: decoded and validated (`Request`), then handed to
//! the requester or completed with its error (`execute`).
//!
//! Choices where the hardware is unconfirmed:
//! * Malformed WQEs complete with an error status (their request id, their op type):
//!   2 (LOCAL_ERROR_QP_INTERNAL_ERROR) when the meta descriptor is not one (`META_DESC`,
//!   `FIRST`, `LAST` missing, `META_EXTENSION` set) or a length field exceeds the WQE
//!   format; 3 (LOCAL_ERROR_UNSUPPORTED_OP) for an unknown op type, RDMA on a UD QP or
//!   without the device capability, an immediate on a read, inline data on a read or on
//!   an RDMA write without `EFADV_QP_FLAGS_INLINE_WRITE`; 6 (LOCAL_ERROR_BAD_LENGTH) when
//!   an RDMA WQE's remote length differs from its local data. Counted in
//!   [`crate::model::Stats::bad_wqes`].
//! * A WQE without `COMP_REQ` completes only on error (verbs' unsignaled semantics).
//! * A WQE of a QP in ERR completes with FLUSHED.

use super::runtime::doorbell::Doorbell;
use super::runtime::request::Origin;
use super::runtime::stats::bump;
use super::runtime::Runtime;
use super::{profile, Qp, QpState, QpType, SendOp, Sge};
use crate::rcu::Guard;
use crate::ring::wqe::{WqeBuf, DATA, RDMA_LOCAL};
use efa_sys::io::{
    send_op_type, TX_DESC_INLINE_MAX_SIZE, TX_DESC_INLINE_MAX_SIZE_128, TX_DESC_NUM_BUFS,
    TX_DESC_NUM_RDMA_BUFS, TX_DESC_SIZE_128, TX_META_DESC_COMP_REQ_MASK, TX_META_DESC_FIRST_MASK,
    TX_META_DESC_HAS_IMM_MASK, TX_META_DESC_INLINE_MSG_MASK, TX_META_DESC_LAST_MASK,
    TX_META_DESC_META_DESC_MASK, TX_META_DESC_META_EXTENSION_MASK, TX_META_DESC_OP_TYPE_MASK,
};
use efa_sys::vendor::comp_status as st;

/// A WQE as the device executes it (inline data borrowed from the WQE copy it was
/// decoded from: no per-WR copy of a 128-byte area).
#[derive(Clone, Debug)]
pub(crate) struct Request<'w> {
    /// Request id (echoed in the completion).
    pub req_id: u16,
    /// Operation.
    pub op: SendOp,
    /// Immediate data, host order (SEND_IMM, WRITE_IMM).
    pub imm: u32,
    /// Destination QPN.
    pub dest_qpn: u32,
    /// Destination AH number.
    pub ahn: u16,
    /// Destination Q_Key.
    pub qkey: u32,
    /// Local buffers: the first `nsge` (a plain array: cheaper to build and move than
    /// an ArrayVec).
    pub sge: [Sge; TX_DESC_NUM_BUFS],
    /// How many of `sge` are used.
    pub nsge: u8,
    /// Bytes of local data (inline or in the buffers), validated against the RDMA
    /// remote length.
    pub total: u64,
    /// Inline data (instead of buffers).
    pub inline: &'w [u8],
    /// RDMA remote memory: (address, rkey, length).
    pub remote: Option<(u64, u32, u32)>,
    /// A completion was requested.
    pub signaled: bool,
}

impl Request<'_> {
    /// The local buffers.
    #[inline]
    pub fn sges(&self) -> &[Sge] {
        &self.sge[..usize::from(self.nsge)]
    }
}

/// Executes one consumed WQE (`size` bytes of `raw`) of `qp` in `state`, its completion
/// collected in `shared`; 1 if it completed on the same-process direct path.
#[inline(always)]
pub(crate) fn execute(
    rt: &Runtime,
    qp: &Qp,
    state: QpState,
    raw: &WqeBuf,
    size: usize,
    g: &Guard,
    shared: &mut Doorbell,
) -> u64 {
    // Matched by reference: the decoded request is not moved again.
    match &decode(raw, size, qp) {
        Ok(r) if state == QpState::Err => {
            shared.complete(qp, &Origin::of(r), st::FLUSHED as u8);
            0
        }
        Ok(r) => u64::from(rt.start_send(qp, r, g, shared)),
        Err((bad, status)) => {
            bump(&rt.stats.bad_wqes);
            shared.complete(qp, bad, *status);
            0
        }
    }
}

/// The operation of a well-formed meta descriptor, or the status it completes with.
#[inline(always)]
fn check(w: &WqeBuf, size: usize, qp: &Qp) -> Result<SendOp, u8> {
    let (c1, c2) = (w.ctrl1(), w.ctrl2());
    let internal = st::LOCAL_ERROR_QP_INTERNAL_ERROR as u8;
    let unsupported = st::LOCAL_ERROR_UNSUPPORTED_OP as u8;
    if c1 & TX_META_DESC_META_DESC_MASK == 0
        || c1 & TX_META_DESC_META_EXTENSION_MASK != 0
        || c2 & TX_META_DESC_FIRST_MASK == 0
        || c2 & TX_META_DESC_LAST_MASK == 0
    {
        return Err(internal);
    }
    let imm = c1 & TX_META_DESC_HAS_IMM_MASK != 0;
    let inline = c1 & TX_META_DESC_INLINE_MSG_MASK != 0;
    let caps = qp.pd().rt.profile.device_caps;
    let srd = qp.qp_type() == QpType::Srd;
    let wide = size == TX_DESC_SIZE_128;
    let op = match c1 & TX_META_DESC_OP_TYPE_MASK {
        send_op_type::SEND if imm => SendOp::SendImm,
        send_op_type::SEND => SendOp::Send,
        send_op_type::RDMA_READ if imm || inline => return Err(unsupported),
        send_op_type::RDMA_READ => SendOp::RdmaRead,
        send_op_type::RDMA_WRITE if imm => SendOp::RdmaWriteImm,
        send_op_type::RDMA_WRITE => SendOp::RdmaWrite,
        _ => return Err(unsupported),
    };
    match op {
        SendOp::RdmaRead if !srd || caps & profile::CAP_RDMA_READ == 0 => Err(unsupported),
        SendOp::RdmaWrite | SendOp::RdmaWriteImm
            if !srd
                || caps & profile::CAP_RDMA_WRITE == 0
                || (inline && (!wide || qp.efa_flags() & super::qp::QP_FLAG_INLINE_WRITE == 0)) =>
        {
            Err(unsupported)
        }
        _ => Ok(op),
    }
}

/// Decodes and validates one WQE of `qp` (`size` bytes of `w`); on error, what its
/// completion needs and its status.
#[inline(always)]
fn decode<'w>(w: &'w WqeBuf, size: usize, qp: &Qp) -> Result<Request<'w>, (Origin, u8)> {
    let signaled = w.ctrl2() & TX_META_DESC_COMP_REQ_MASK != 0;
    // An unknown op type is reported as the nearest known one (the CQE field has 3 bits).
    let op_type = (w.ctrl1() & TX_META_DESC_OP_TYPE_MASK).min(send_op_type::RDMA_WRITE);
    let fail = |status: u32| {
        let o = Origin {
            req_id: w.req_id(),
            op_type,
            signaled,
            ahn: w.ah(),
        };
        (o, status as u8)
    };
    let op = check(w, size, qp).map_err(|s| fail(u32::from(s)))?;
    let rdma = !matches!(op, SendOp::Send | SendOp::SendImm);
    let inline = w.ctrl1() & TX_META_DESC_INLINE_MSG_MASK != 0;
    let len = usize::from(w.length());
    // Built in one expression at the end (straight into the caller's slot).
    let mut sge = [Sge::default(); TX_DESC_NUM_BUFS];
    let mut inline_data: &[u8] = &[];
    let local_len = if inline {
        let (at, room) = match (rdma, size == TX_DESC_SIZE_128) {
            (true, _) => (RDMA_LOCAL, TX_DESC_INLINE_MAX_SIZE_128),
            (false, true) => (DATA, TX_DESC_INLINE_MAX_SIZE_128),
            (false, false) => (DATA, TX_DESC_INLINE_MAX_SIZE),
        };
        if len > room {
            return Err(fail(st::LOCAL_ERROR_QP_INTERNAL_ERROR));
        }
        inline_data = &w.0[at..at + len];
        len as u64
    } else {
        let max = if rdma {
            TX_DESC_NUM_RDMA_BUFS
        } else {
            TX_DESC_NUM_BUFS
        };
        if len > max {
            return Err(fail(st::LOCAL_ERROR_QP_INTERNAL_ERROR));
        }
        let mut total = 0u64;
        for (i, g) in sge.iter_mut().enumerate().take(len) {
            let (addr, lkey, length) = if rdma { w.rdma_local() } else { w.buf(i) };
            *g = Sge { addr, length, lkey };
            total += u64::from(length);
        }
        total
    };
    let remote = if rdma {
        let (addr, rkey, rlen) = w.remote();
        if u64::from(rlen) != local_len {
            return Err(fail(st::LOCAL_ERROR_BAD_LENGTH));
        }
        Some((addr, rkey, rlen))
    } else {
        None
    };
    Ok(Request {
        req_id: w.req_id(),
        op,
        imm: w.imm(),
        dest_qpn: u32::from(w.dest_qp()),
        ahn: w.ah(),
        qkey: w.qkey(),
        sge,
        nsge: if inline { 0 } else { len as u8 },
        total: local_len,
        inline: inline_data,
        remote,
        signaled,
    })
}
