//! Queue pairs: UD via ibv_create_qp(_ex), SRD via efadv; modify/query/destroy.

use super::layout::{EfadvQp, EfadvQpInitAttr, QpExV65};
use super::objects::{SimCq, SimPd, SimQp};
use super::{leak, null_with, post};
use crate::model::{ModifyQp, QpCaps, QpInit, QpType};
use core::ffi::c_int;
use core::ptr;
use efa_sys::efadv::{EFADV_QP_DRIVER_TYPE_SRD, EFADV_WR_EX_WITH_PROCESSING_HINTS};
use efa_sys::verbs as v;
use efa_sys::verbs::ibv_qp_attr_mask as mask_bit;
use efa_sys::verbs::ibv_qp_init_attr_mask as init_mask;
use efa_sys::verbs::ibv_qp_type::{IBV_QPT_DRIVER, IBV_QPT_UD};
use libc::{EINVAL, EOPNOTSUPP};

const INIT_ATTR_PD: u32 = init_mask::IBV_QP_INIT_ATTR_PD.0;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = init_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;

/// Creation shared by every QP entry point (model §3.1). `efa` is Some for SRD.
unsafe fn create(
    ctx: *mut v::ibv_context,
    attr: &mut v::ibv_qp_init_attr_ex,
    efa: Option<&EfadvQpInitAttr>,
) -> *mut v::ibv_qp {
    let qp_type = match efa {
        Some(e) => {
            if e.driver_qp_type != EFADV_QP_DRIVER_TYPE_SRD {
                return null_with(EOPNOTSUPP);
            }
            if e.wr_flags & !EFADV_WR_EX_WITH_PROCESSING_HINTS != 0 {
                return null_with(EOPNOTSUPP);
            }
            QpType::Srd
        }
        None => {
            if attr.qp_type != IBV_QPT_UD {
                return null_with(EOPNOTSUPP);
            }
            QpType::Ud
        }
    };
    if attr.comp_mask & !(INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS) != 0 {
        return null_with(EOPNOTSUPP);
    }
    if attr.comp_mask & INIT_ATTR_PD == 0 || attr.pd.is_null() {
        return null_with(EINVAL);
    }
    let is_ex = attr.comp_mask & INIT_ATTR_SEND_OPS_FLAGS != 0;
    if attr.send_cq.is_null() || attr.recv_cq.is_null() || !attr.srq.is_null() {
        return null_with(EINVAL);
    }
    let pd = attr.pd as *mut SimPd;
    let (send_cq, recv_cq) = (attr.send_cq as *mut SimCq, attr.recv_cq as *mut SimCq);
    let efa_flags = efa.map(|e| e.flags).unwrap_or(0);
    // SAFETY: pd and the CQs are ours.
    let init = unsafe {
        QpInit {
            qp_type,
            send_cq: (*send_cq).model.clone(),
            recv_cq: (*recv_cq).model.clone(),
            caps: QpCaps {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_send_sge: attr.cap.max_send_sge,
                max_recv_sge: attr.cap.max_recv_sge,
                max_inline_data: attr.cap.max_inline_data,
            },
            sq_sig_all: attr.sq_sig_all != 0,
            send_ops_flags: is_ex.then_some(attr.send_ops_flags),
            efa_flags,
            sl: efa.map(|e| e.sl).unwrap_or(0),
        }
    };
    // SAFETY: pd is ours.
    let (model, granted) = match unsafe { (*pd).model.create_qp(&init) } {
        Ok(x) => x,
        Err(e) => return null_with(e),
    };
    attr.cap.max_send_wr = granted.max_send_wr;
    attr.cap.max_recv_wr = granted.max_recv_wr;
    attr.cap.max_send_sge = granted.max_send_sge;
    attr.cap.max_recv_sge = granted.max_recv_sge;
    attr.cap.max_inline_data = granted.max_inline_data;

    // SAFETY: plain data; zeroed mutex/cond are the static initialisers.
    let mut ex: QpExV65 = unsafe { core::mem::zeroed() };
    let b = &mut ex.base;
    b.qp_base.context = ctx;
    b.qp_base.qp_context = attr.qp_context;
    b.qp_base.pd = attr.pd;
    b.qp_base.send_cq = attr.send_cq;
    b.qp_base.recv_cq = attr.recv_cq;
    b.qp_base.qp_num = model.qpn();
    b.qp_base.handle = model.qpn();
    b.qp_base.state = 0; // RESET
    b.qp_base.qp_type = if qp_type == QpType::Srd {
        IBV_QPT_DRIVER
    } else {
        IBV_QPT_UD
    };
    if is_ex {
        post::fill_wr_ops(b, attr.send_ops_flags);
    }
    let hints = efa
        .map(|e| e.wr_flags & EFADV_WR_EX_WITH_PROCESSING_HINTS != 0)
        .unwrap_or(false);
    let qp = leak(SimQp {
        ex,
        efa: EfadvQp {
            comp_mask: 0,
            wr_set_processing_hints: hints.then_some(post::wr_set_processing_hints as _),
        },
        model,
        pd,
        send_cq,
        recv_cq,
        is_ex,
        sq_sig_all: attr.sq_sig_all != 0,
    });
    qp as *mut v::ibv_qp
}

/// Copies the legacy `ibv_qp_init_attr` prefix into an `_ex` with `comp_mask = PD`.
fn ex_from_legacy(pd: *mut v::ibv_pd, a: &v::ibv_qp_init_attr) -> v::ibv_qp_init_attr_ex {
    // SAFETY: plain data.
    let mut ex: v::ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    ex.qp_context = a.qp_context;
    ex.send_cq = a.send_cq;
    ex.recv_cq = a.recv_cq;
    ex.srq = a.srq;
    ex.cap = a.cap;
    ex.qp_type = a.qp_type;
    ex.sq_sig_all = a.sq_sig_all;
    ex.comp_mask = INIT_ATTR_PD;
    ex.pd = pd;
    ex
}

unsafe extern "C" fn create_qp(
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
) -> *mut v::ibv_qp {
    if pd.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct; pd is ours.
    unsafe {
        let mut ex = ex_from_legacy(pd, &*attr);
        let qp = create((*pd).context, &mut ex, None);
        if !qp.is_null() {
            (*attr).cap = ex.cap;
        }
        qp
    }
}
export!("IBVERBS_1.1", ibv_create_qp => create_qp);

/// `verbs_context->create_qp_ex`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn create_qp_ex_op(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_qp_init_attr_ex,
) -> *mut v::ibv_qp {
    if ctx.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct.
    unsafe { create(ctx, &mut *attr, None) }
}

/// Reads a caller's `efadv_qp_init_attr` of `inlen` bytes (model §1.6 rules).
unsafe fn read_efa_attr(p: *const EfadvQpInitAttr, inlen: u32) -> Result<EfadvQpInitAttr, c_int> {
    let inlen = inlen as usize;
    let ours = core::mem::size_of::<EfadvQpInitAttr>();
    if p.is_null() || inlen <= core::mem::offset_of!(EfadvQpInitAttr, driver_qp_type) {
        return Err(EINVAL);
    }
    // SAFETY: p holds inlen bytes.
    let bytes = unsafe { core::slice::from_raw_parts(p as *const u8, inlen) };
    if inlen > ours && bytes[ours..].iter().any(|b| *b != 0) {
        return Err(EINVAL);
    }
    let mut a = EfadvQpInitAttr::default();
    // SAFETY: copy min(inlen, ours) bytes into a zeroed struct.
    unsafe {
        ptr::copy_nonoverlapping(p as *const u8, &mut a as *mut _ as *mut u8, inlen.min(ours))
    };
    if a.comp_mask != 0 || a.reserved != 0 {
        return Err(EINVAL);
    }
    Ok(a)
}

unsafe extern "C" fn efadv_create_qp_ex(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_qp_init_attr_ex,
    efa_attr: *mut EfadvQpInitAttr,
    inlen: u32,
) -> *mut v::ibv_qp {
    if ctx.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct.
    let attr = unsafe { &mut *attr };
    if attr.qp_type != IBV_QPT_DRIVER {
        return null_with(EINVAL);
    }
    // SAFETY: efa_attr holds inlen bytes.
    match unsafe { read_efa_attr(efa_attr, inlen) } {
        // SAFETY: ctx is ours.
        Ok(e) => unsafe { create(ctx, attr, Some(&e)) },
        Err(e) => null_with(e),
    }
}
export!("EFA_1.1", efadv_create_qp_ex => efadv_create_qp_ex);

unsafe extern "C" fn efadv_create_driver_qp(
    pd: *mut v::ibv_pd,
    attr: *mut v::ibv_qp_init_attr,
    driver_qp_type: u32,
) -> *mut v::ibv_qp {
    if pd.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct; pd is ours.
    unsafe {
        if (*attr).qp_type != IBV_QPT_DRIVER {
            return null_with(EINVAL);
        }
        let mut ex = ex_from_legacy(pd, &*attr);
        let efa = EfadvQpInitAttr {
            driver_qp_type,
            ..Default::default()
        };
        let qp = create((*pd).context, &mut ex, Some(&efa));
        if !qp.is_null() {
            (*attr).cap = ex.cap;
        }
        qp
    }
}
export!("EFA_1.0", efadv_create_driver_qp => efadv_create_driver_qp);

unsafe extern "C" fn destroy_qp(qp: *mut v::ibv_qp) -> c_int {
    if qp.is_null() {
        return EINVAL;
    }
    let sim = qp as *mut SimQp;
    // SAFETY: qp came from create; we own it.
    unsafe {
        if let Err(e) = (*sim).model.destroy() {
            return e;
        }
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_destroy_qp => destroy_qp);

unsafe extern "C" fn modify_qp(
    qp: *mut v::ibv_qp,
    attr: *mut v::ibv_qp_attr,
    mask: c_int,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return EINVAL;
    }
    // SAFETY: qp is ours; attr a caller struct.
    unsafe {
        let a = &*attr;
        let m = ModifyQp {
            mask: mask as u32,
            state: a.qp_state,
            cur_state: a.cur_qp_state,
            qkey: a.qkey,
            pkey_index: a.pkey_index,
            port_num: a.port_num,
            sq_psn: a.sq_psn,
            rnr_retry: a.rnr_retry,
            en_sqd_async_notify: a.en_sqd_async_notify,
        };
        let sim = SimQp::from_ibv(qp);
        if let Err(e) = sim.model.modify(&m) {
            return e;
        }
        if mask as u32 & mask_bit::IBV_QP_STATE.0 != 0 {
            (*qp).state = a.qp_state;
        }
    }
    0
}
export!("IBVERBS_1.1", ibv_modify_qp => modify_qp);

unsafe extern "C" fn query_qp(
    qp: *mut v::ibv_qp,
    attr: *mut v::ibv_qp_attr,
    mask: c_int,
    init: *mut v::ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() {
        return EINVAL;
    }
    let supported = mask_bit::IBV_QP_STATE.0
        | mask_bit::IBV_QP_PKEY_INDEX.0
        | mask_bit::IBV_QP_PORT.0
        | mask_bit::IBV_QP_QKEY.0
        | mask_bit::IBV_QP_SQ_PSN.0
        | mask_bit::IBV_QP_CAP.0
        | mask_bit::IBV_QP_RNR_RETRY.0;
    if mask as u32 & !supported != 0 {
        return EOPNOTSUPP;
    }
    // SAFETY: qp is ours; attr/init are caller structs.
    unsafe {
        let sim = SimQp::from_ibv(qp);
        let q = sim.model.query();
        ptr::write_bytes(attr, 0, 1);
        let a = &mut *attr;
        a.qp_state = q.state as u32;
        a.cur_qp_state = q.state as u32;
        a.qkey = q.qkey;
        a.sq_psn = q.sq_psn;
        a.rnr_retry = q.rnr_retry;
        a.sq_draining = u8::from(q.sq_draining);
        a.port_num = 1;
        a.pkey_index = 0;
        a.cap = v::ibv_qp_cap {
            max_send_wr: q.caps.max_send_wr,
            max_recv_wr: q.caps.max_recv_wr,
            max_send_sge: q.caps.max_send_sge,
            max_recv_sge: q.caps.max_recv_sge,
            max_inline_data: q.caps.max_inline_data,
        };
        if !init.is_null() {
            ptr::write_bytes(init, 0, 1);
            let i = &mut *init;
            i.qp_context = (*qp).qp_context;
            i.send_cq = (*qp).send_cq;
            i.recv_cq = (*qp).recv_cq;
            i.cap = a.cap;
            i.qp_type = (*qp).qp_type;
            i.sq_sig_all = c_int::from(sim.sq_sig_all);
        }
        (*qp).state = a.qp_state;
    }
    0
}
export!("IBVERBS_1.1", ibv_query_qp => query_qp);

unsafe extern "C" fn qp_to_qp_ex(qp: *mut v::ibv_qp) -> *mut v::ibv_qp_ex {
    if qp.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: qp is ours.
    if unsafe { SimQp::from_ibv(qp) }.is_ex {
        qp as *mut v::ibv_qp_ex
    } else {
        ptr::null_mut()
    }
}
export!("IBVERBS_1.6", ibv_qp_to_qp_ex => qp_to_qp_ex);

unsafe extern "C" fn efadv_qp_from_ibv_qp_ex(qp: *mut v::ibv_qp_ex) -> *mut EfadvQp {
    // SAFETY: qp is ours.
    unsafe { core::ptr::addr_of_mut!((*(qp as *mut SimQp)).efa) }
}
export!("EFA_1.6", efadv_qp_from_ibv_qp_ex => efadv_qp_from_ibv_qp_ex);

/// No in-order guarantee is reported: the software device copies whole messages but
/// makes no promise about the order in which bytes of one message become visible.
unsafe extern "C" fn query_qp_data_in_order(_qp: *mut v::ibv_qp, _op: u32, _flags: u32) -> c_int {
    0
}
export!("IBVERBS_1.14", ibv_query_qp_data_in_order => query_qp_data_in_order);
