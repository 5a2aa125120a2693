//! The `ibv_modify_qp` state machine (model §3.2): states, the attribute set of a
//! modify call, and which transitions take which attributes.

use super::{Errno, QpCaps, QpType};
use efa_sys::verbs::ibv_qp_attr_mask as mask;

/// `IBV_QP_STATE`.
pub const ATTR_STATE: u32 = mask::IBV_QP_STATE.0;
/// `IBV_QP_CUR_STATE`.
pub const ATTR_CUR_STATE: u32 = mask::IBV_QP_CUR_STATE.0;
/// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
pub const ATTR_EN_SQD_ASYNC_NOTIFY: u32 = mask::IBV_QP_EN_SQD_ASYNC_NOTIFY.0;
/// `IBV_QP_PKEY_INDEX`.
pub const ATTR_PKEY_INDEX: u32 = mask::IBV_QP_PKEY_INDEX.0;
/// `IBV_QP_PORT`.
pub const ATTR_PORT: u32 = mask::IBV_QP_PORT.0;
/// `IBV_QP_QKEY`.
pub const ATTR_QKEY: u32 = mask::IBV_QP_QKEY.0;
/// `IBV_QP_RNR_RETRY`.
pub const ATTR_RNR_RETRY: u32 = mask::IBV_QP_RNR_RETRY.0;
/// `IBV_QP_SQ_PSN`.
pub const ATTR_SQ_PSN: u32 = mask::IBV_QP_SQ_PSN.0;
/// Every attribute EFA accepts in `ibv_modify_qp`; others are EOPNOTSUPP.
pub const ATTR_ALL: u32 = ATTR_STATE
    | ATTR_CUR_STATE
    | ATTR_EN_SQD_ASYNC_NOTIFY
    | ATTR_PKEY_INDEX
    | ATTR_PORT
    | ATTR_QKEY
    | ATTR_RNR_RETRY
    | ATTR_SQ_PSN;

/// ibv_qp_state numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpState {
    /// IBV_QPS_RESET.
    Reset = 0,
    /// IBV_QPS_INIT.
    Init = 1,
    /// IBV_QPS_RTR.
    Rtr = 2,
    /// IBV_QPS_RTS.
    Rts = 3,
    /// IBV_QPS_SQD.
    Sqd = 4,
    /// IBV_QPS_SQE.
    Sqe = 5,
    /// IBV_QPS_ERR.
    Err = 6,
}

/// Decoded ibv_modify_qp input: `mask` is the raw IBV_QP_* mask, fields valid per mask.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModifyQp {
    /// Raw `IBV_QP_*` attribute mask.
    pub mask: u32,
    /// Target state (ibv_qp_state) if STATE is set.
    pub state: u32,
    /// Assumed current state if CUR_STATE is set.
    pub cur_state: u32,
    /// Q_Key if QKEY is set.
    pub qkey: u32,
    /// P_Key index if PKEY_INDEX is set (must be 0).
    pub pkey_index: u16,
    /// Port if PORT is set (must be 1).
    pub port_num: u8,
    /// Send PSN if SQ_PSN is set (24 bits kept).
    pub sq_psn: u32,
    /// RNR retry count if RNR_RETRY is set (7 = infinite).
    pub rnr_retry: u8,
    /// SQD async notify flag (no effect).
    pub en_sqd_async_notify: u8,
}

#[derive(Clone, Copy, Debug)]
/// `ibv_query_qp` result.
pub struct QpAttrs {
    /// Current state.
    pub state: QpState,
    /// Current Q_Key.
    pub qkey: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Always false (SQD is immediate).
    pub sq_draining: bool,
    /// Granted capacities.
    pub caps: QpCaps,
}

impl QpState {
    /// The state with `ibv_qp_state` number `v`.
    pub fn from_u32(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// (required, optional) attribute bits of a legal transition, model §3.2.
pub fn transition(from: QpState, to: QpState, t: QpType) -> Option<(u32, u32)> {
    use QpState::*;
    let rnr = if t == QpType::Srd { ATTR_RNR_RETRY } else { 0 };
    Some(match (from, to) {
        (Reset, Reset) => (0, 0),
        (Reset, Init) => (ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY, 0),
        (Init, Init) => (0, ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY),
        (Init, Rtr) => (0, ATTR_PKEY_INDEX | ATTR_QKEY),
        (Rtr, Rts) => (ATTR_SQ_PSN, ATTR_CUR_STATE | ATTR_QKEY | rnr),
        (Rts, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Rts, Sqd) => (0, ATTR_EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Sqd, Sqd) => (0, ATTR_PKEY_INDEX | ATTR_QKEY),
        (Sqe, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Init | Rtr | Rts | Sqd | Sqe | Err, Reset | Err) => (0, 0),
        _ => return None,
    })
}

/// The state `m` moves a QP of type `t` from `tracked` to, if the call is legal
/// (model §3.2): EOPNOTSUPP for attributes EFA does not support (or a port other than 1,
/// a P_Key index other than 0, `RNR_RETRY` without the capability), EINVAL for illegal
/// transitions or attribute sets.
pub fn next_state(
    tracked: QpState,
    m: &ModifyQp,
    t: QpType,
    rnr_retry_cap: bool,
) -> Result<QpState, Errno> {
    if m.mask & !ATTR_ALL != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let cur = if m.mask & ATTR_CUR_STATE != 0 {
        if !matches!(
            tracked,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return Err(libc::EINVAL);
        }
        QpState::from_u32(m.cur_state).ok_or(libc::EINVAL)?
    } else {
        tracked
    };
    let new = if m.mask & ATTR_STATE != 0 {
        QpState::from_u32(m.state).ok_or(libc::EINVAL)?
    } else {
        cur
    };
    let (required, optional) = transition(cur, new, t).ok_or(libc::EINVAL)?;
    if m.mask & required != required || m.mask & !(required | optional | ATTR_STATE) != 0 {
        return Err(libc::EINVAL);
    }
    if m.mask & ATTR_PORT != 0 && m.port_num != 1 {
        return Err(libc::EOPNOTSUPP);
    }
    if m.mask & ATTR_PKEY_INDEX != 0 && m.pkey_index != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if m.mask & ATTR_RNR_RETRY != 0 && !rnr_retry_cap {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(new)
}
