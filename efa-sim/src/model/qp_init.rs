//! What QP creation takes and the sizes it grants (model §3.1): transport type,
//! capacities, the creation input, and libefa's WQE and queue sizing.

use super::{Cq, Errno, Profile};
use efa_sys::io::{TX_DESC_INLINE_MAX_SIZE, TX_DESC_SIZE_128, TX_DESC_SIZE_64};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// QP transport type.
pub enum QpType {
    /// Unreliable datagram.
    Ud,
    /// Scalable reliable datagram (efadv driver QP).
    Srd,
}

#[derive(Clone, Copy, Debug, Default)]
/// QP capacities (requested or granted).
pub struct QpCaps {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes.
    pub max_inline_data: u32,
}

/// QP creation input (ibv_qp_init_attr_ex + efadv_qp_init_attr).
pub struct QpInit {
    /// UD or SRD.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: Arc<Cq>,
    /// CQ for receive completions.
    pub recv_cq: Arc<Cq>,
    /// Requested capacities.
    pub caps: QpCaps,
    /// Every WR signaled implicitly.
    pub sq_sig_all: bool,
    /// IBV_QP_EX_WITH_* bits when created with SEND_OPS_FLAGS, else None.
    pub send_ops_flags: Option<u64>,
    /// EFADV_QP_FLAGS_* (UNSOLICITED_WRITE_RECV, INLINE_WRITE).
    pub efa_flags: u16,
    /// Service level (0 = default; accepted, no effect).
    pub sl: u8,
}

pub(crate) fn rounddown_pow2(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        1 << (31 - v.leading_zeros())
    }
}

/// Send WQE size for a QP with `max_inline` inline bytes (128 if more than a 64-byte WQE
/// holds, or with `EFADV_QP_FLAGS_INLINE_WRITE`), as libefa sizes it.
pub fn wqe_size(max_inline: u32, inline_write: bool) -> usize {
    if max_inline as usize > TX_DESC_INLINE_MAX_SIZE || inline_write {
        TX_DESC_SIZE_128
    } else {
        TX_DESC_SIZE_64
    }
}

/// The deepest send queue a QP with these inline settings can have
/// (`efadv_get_max_sq_depth`): the LLQ bytes in WQEs of that size, rounded down to a power
/// of two.
pub fn max_sq_depth(p: &Profile, max_inline: u32, inline_write: bool) -> u32 {
    rounddown_pow2(p.max_llq_size / wqe_size(max_inline, inline_write) as u32)
}

/// The checks `ibv_create_qp` makes on the requested capacities beyond the device's limits,
/// in the stack's order, and the sizes it grants (rc `efa_setup_qp`). Every failure is
/// EINVAL; libefa checks the request, the kernel then checks what libefa will grant.
/// Returns the granted capacities and the RQ's descriptor count.
pub(crate) fn grant(p: &Profile, c: &QpCaps, inline_write: bool) -> Result<(QpCaps, u32), Errno> {
    let rq_sge = c.max_recv_sge.max(1);
    // rc providers/efa/verbs.c efa_check_qp_limits: EINVAL for each of the next five.
    if c.max_send_sge > u32::from(p.max_sq_sge) || c.max_recv_sge > u32::from(p.max_rq_sge) {
        return Err(libc::EINVAL);
    }
    // (rc efa_calc_sq_max_depth: the LLQ bytes in WQEs of this QP's size, rounded down.)
    if c.max_send_wr > max_sq_depth(p, c.max_inline_data, inline_write) {
        return Err(libc::EINVAL);
    }
    // (rc efa_calc_rq_max_depth: max_rq_wr counts descriptors, max_recv_sge per WR.)
    if c.max_recv_wr > p.max_rq_wr / rq_sge {
        return Err(libc::EINVAL);
    }
    if c.max_inline_data > u32::from(p.inline_buf_size_ex) {
        return Err(libc::EINVAL);
    }
    // rc efa_setup_qp: SQ slots rounded up to a power of two (at least min_sq_wr), RQ
    // descriptors rounded up to a power of two; these replace the request in `attr->cap`
    // before the kernel sees it.
    let sq = c.max_send_wr.max(p.min_sq_wr).max(1).next_power_of_two();
    let rq_descs = match c.max_recv_wr {
        0 => 0,
        wr => (rq_sge * wr).next_power_of_two(),
    };
    let granted = QpCaps {
        max_send_wr: sq,
        max_recv_wr: rq_descs / rq_sge,
        ..*c
    };
    // kernel efa_verbs.c efa_qp_validate_cap: EINVAL when the granted send WRs exceed
    // max_sq_depth (`max_sq_wr`) or the granted receive WRs max_rq_depth (`max_rq_wr`): a
    // request rounded up past a limit that is not a power of two fails here. (Its SGE and
    // inline checks repeat libefa's above.)
    if granted.max_send_wr > p.max_sq_wr || granted.max_recv_wr > p.max_rq_wr {
        return Err(libc::EINVAL);
    }
    Ok((granted, rq_descs))
}
