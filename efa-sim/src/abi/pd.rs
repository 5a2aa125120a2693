//! Protection domains, thread/parent domains, memory regions, address handles.

use super::layout::{AhAttr, EfadvAhAttr, EfadvMrAttr};
use super::objects::{PdKind, SimAh, SimContext, SimMr, SimPd, SimTd};
use super::{leak, null_with};
use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};
use efa_sys::verbs as v;
use libc::{EBUSY, EINVAL, EOPNOTSUPP};

unsafe extern "C" fn alloc_pd(ctx: *mut v::ibv_context) -> *mut v::ibv_pd {
    if ctx.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: ctx is ours.
    let sim = unsafe { SimContext::from_ibv(ctx) };
    match sim.device.alloc_pd() {
        Ok(model) => {
            let pd = leak(SimPd {
                ibv: v::ibv_pd {
                    context: ctx,
                    handle: u32::from(model.number()),
                },
                model,
                kind: PdKind::Plain,
                parents: AtomicU32::new(0),
            });
            pd as *mut v::ibv_pd
        }
        Err(e) => null_with(e),
    }
}
export!("IBVERBS_1.1", ibv_alloc_pd => alloc_pd);

unsafe extern "C" fn dealloc_pd(pd: *mut v::ibv_pd) -> c_int {
    if pd.is_null() {
        return EINVAL;
    }
    let sim = pd as *mut SimPd;
    // SAFETY: pd came from alloc_pd/alloc_parent_domain; we own the allocation.
    unsafe {
        match (*sim).kind {
            PdKind::Plain => {
                if (*sim).parents.load(Ordering::Acquire) != 0 {
                    return EBUSY;
                }
                if let Err(e) = (*sim).model.dealloc() {
                    return e;
                }
            }
            PdKind::Parent { pd, td } => {
                (*pd).parents.fetch_sub(1, Ordering::AcqRel);
                if !td.is_null() {
                    (*td).users.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_dealloc_pd => dealloc_pd);

/// `verbs_context->alloc_td` (EFA: `comp_mask` must be 0).
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn alloc_td_op(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_td_init_attr,
) -> *mut v::ibv_td {
    // SAFETY: attr is a caller struct.
    if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
        return null_with(EINVAL);
    }
    leak(SimTd {
        ibv: v::ibv_td { context: ctx },
        users: AtomicU32::new(0),
    }) as *mut v::ibv_td
}

/// `verbs_context->dealloc_td` (EBUSY while a parent domain uses it).
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn dealloc_td_op(td: *mut v::ibv_td) -> c_int {
    let sim = td as *mut SimTd;
    // SAFETY: td came from alloc_td_op.
    unsafe {
        if (*sim).users.load(Ordering::Acquire) != 0 {
            return EBUSY;
        }
        drop(Box::from_raw(sim));
    }
    0
}

const PARENT_DOMAIN_PD_CONTEXT: u32 =
    v::ibv_parent_domain_init_attr_mask::IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT.0;

/// `verbs_context->alloc_parent_domain`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn alloc_parent_domain_op(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_parent_domain_init_attr,
) -> *mut v::ibv_pd {
    if attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct; pd/td are ours when non-NULL.
    unsafe {
        let a = &*attr;
        if a.pd.is_null() {
            return null_with(EINVAL);
        }
        if a.comp_mask & !PARENT_DOMAIN_PD_CONTEXT != 0 {
            return null_with(EOPNOTSUPP);
        }
        let base = a.pd as *mut SimPd;
        if !matches!((*base).kind, PdKind::Plain) {
            return null_with(EINVAL); // no nesting
        }
        let td = a.td as *mut SimTd;
        (*base).parents.fetch_add(1, Ordering::AcqRel);
        if !td.is_null() {
            (*td).users.fetch_add(1, Ordering::AcqRel);
        }
        leak(SimPd {
            ibv: v::ibv_pd {
                context: ctx,
                handle: (*base).ibv.handle,
            },
            model: (*base).model.clone(),
            kind: PdKind::Parent { pd: base, td },
            parents: AtomicU32::new(0),
        }) as *mut v::ibv_pd
    }
}

fn make_mr(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    r: Result<std::sync::Arc<crate::model::Mr>, i32>,
) -> *mut v::ibv_mr {
    match r {
        Ok(model) => {
            // SAFETY: pd is ours.
            let context = unsafe { (*pd).context };
            let ibv = v::ibv_mr {
                context,
                pd,
                addr,
                length: len,
                handle: model.lkey(),
                lkey: model.lkey(),
                rkey: model.rkey(),
            };
            leak(SimMr { ibv, model }) as *mut v::ibv_mr
        }
        Err(e) => null_with(e),
    }
}

unsafe extern "C" fn reg_mr_iova2(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut v::ibv_mr {
    if pd.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: pd is ours.
    let model = unsafe { &(*(pd as *mut SimPd)).model };
    // SAFETY: ibv_reg_mr's contract: the caller keeps [addr, addr+len) valid (and
    // writable for write access) until ibv_dereg_mr, which is what the model needs.
    let r = unsafe { model.reg_mr(addr as usize, len, iova, access) };
    make_mr(pd, addr, len, r)
}
export!("IBVERBS_1.8", ibv_reg_mr_iova2 => reg_mr_iova2);

unsafe extern "C" fn reg_mr_iova(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut v::ibv_mr {
    // SAFETY: same contract.
    unsafe { reg_mr_iova2(pd, addr, len, iova, access as u32) }
}
export!("IBVERBS_1.7", ibv_reg_mr_iova => reg_mr_iova);

unsafe extern "C" fn reg_mr(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut v::ibv_mr {
    // SAFETY: same contract.
    unsafe { reg_mr_iova2(pd, addr, len, addr as u64, access as u32) }
}
export!("IBVERBS_1.1", ibv_reg_mr => reg_mr);

unsafe extern "C" fn reg_dmabuf_mr(
    pd: *mut v::ibv_pd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut v::ibv_mr {
    if pd.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: pd is ours.
    let model = unsafe { &(*(pd as *mut SimPd)).model };
    // rdma-core reports a dma-buf MR's `addr` as its offset into the dma-buf.
    make_mr(
        pd,
        offset as usize as *mut c_void,
        len,
        model.reg_dmabuf_mr(offset, len, iova, fd, access as u32),
    )
}
export!("IBVERBS_1.12", ibv_reg_dmabuf_mr => reg_dmabuf_mr);

unsafe extern "C" fn dereg_mr(mr: *mut v::ibv_mr) -> c_int {
    if mr.is_null() {
        return EINVAL;
    }
    let sim = mr as *mut SimMr;
    // SAFETY: mr came from make_mr.
    unsafe {
        if let Err(e) = (*sim).model.dereg() {
            return e;
        }
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_dereg_mr => dereg_mr);

/// `ibv_rereg_mr`: EFA has no rereg; libibverbs' dummy sets errno and returns
/// `IBV_REREG_MR_ERR_INPUT`.
unsafe extern "C" fn rereg_mr() -> c_int {
    super::set_errno(EOPNOTSUPP);
    -1 // IBV_REREG_MR_ERR_INPUT
}
export!("IBVERBS_1.1", ibv_rereg_mr => rereg_mr);

unsafe extern "C" fn efadv_query_mr(
    mr: *mut v::ibv_mr,
    attr: *mut EfadvMrAttr,
    inlen: u32,
) -> c_int {
    if mr.is_null() || attr.is_null() {
        return EINVAL;
    }
    if inlen as usize <= core::mem::offset_of!(EfadvMrAttr, rdma_recv_ic_id) {
        return EINVAL;
    }
    // SAFETY: the caller's attr holds inlen bytes. Interconnect ids are not emulated:
    // validity 0 says none is reported.
    unsafe { ptr::write_bytes(attr as *mut u8, 0, inlen as usize) };
    0
}
export!("EFA_1.3", efadv_query_mr => efadv_query_mr);

/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub(crate) unsafe extern "C" fn create_ah(pd: *mut v::ibv_pd, attr: *mut AhAttr) -> *mut v::ibv_ah {
    if pd.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: pd is ours, attr a caller struct.
    unsafe {
        let sim = &*(pd as *mut SimPd);
        match sim.model.create_ah(&(*attr).dgid) {
            Ok(model) => leak(SimAh {
                ibv: v::ibv_ah {
                    context: (*pd).context,
                    pd,
                    handle: u32::from(model.number()),
                },
                model,
            }) as *mut v::ibv_ah,
            Err(e) => null_with(e),
        }
    }
}
export!("IBVERBS_1.1", ibv_create_ah => create_ah);

unsafe extern "C" fn destroy_ah(ah: *mut v::ibv_ah) -> c_int {
    if ah.is_null() {
        return EINVAL;
    }
    let sim = ah as *mut SimAh;
    // SAFETY: ah came from create_ah.
    unsafe {
        if let Err(e) = (*sim).model.destroy() {
            return e;
        }
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_destroy_ah => destroy_ah);

unsafe extern "C" fn efadv_query_ah(
    ah: *mut v::ibv_ah,
    attr: *mut EfadvAhAttr,
    inlen: u32,
) -> c_int {
    if ah.is_null() || attr.is_null() {
        return EINVAL;
    }
    if inlen as usize <= core::mem::offset_of!(EfadvAhAttr, ahn) {
        return EINVAL;
    }
    // SAFETY: attr holds inlen bytes; ah is ours.
    unsafe {
        ptr::write_bytes(attr as *mut u8, 0, inlen as usize);
        (*attr).ahn = (*(ah as *mut SimAh)).model.number();
    }
    0
}
export!("EFA_1.1", efadv_query_ah => efadv_query_ah);
