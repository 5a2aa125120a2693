//! What EFA does not support, answered exactly as libibverbs' dummy ops would:
//! int-returning verbs give `EOPNOTSUPP`, creators give `NULL` with `errno = EOPNOTSUPP`.
//! None give ENOSYS. Used both for unfilled `verbs_context`/`ibv_context_ops` slots and
//! for exported functions the device cannot support.

use super::{null_with, set_errno};
use core::ffi::{c_int, c_void};
use efa_sys::verbs as v;
use libc::EOPNOTSUPP;

/// Int-returning op slot: `EOPNOTSUPP` (arguments ignored, any arity).
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn op_int() -> c_int {
    EOPNOTSUPP
}

/// Pointer-returning op slot: `NULL`, errno `EOPNOTSUPP`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn op_ptr() -> *mut c_void {
    null_with(EOPNOTSUPP)
}

/// Void op slot: does nothing.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn op_void() {}

/// Word value of [`op_int`] for a slot table.
pub fn int_slot() -> usize {
    op_int as *const () as usize
}
/// Word value of [`op_ptr`] for a slot table.
pub fn ptr_slot() -> usize {
    op_ptr as *const () as usize
}
/// Word value of [`op_void`] for a slot table.
pub fn void_slot() -> usize {
    op_void as *const () as usize
}

/// `ibv_context_ops.alloc_mw`: EFA has no memory windows.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn alloc_mw(_pd: *mut v::ibv_pd, _ty: u32) -> *mut v::ibv_mw {
    null_with(EOPNOTSUPP)
}
/// `ibv_context_ops.bind_mw`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn bind_mw(
    _qp: *mut v::ibv_qp,
    _mw: *mut v::ibv_mw,
    _b: *mut v::ibv_mw_bind,
) -> c_int {
    EOPNOTSUPP
}
/// `ibv_context_ops.dealloc_mw`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn dealloc_mw(_mw: *mut v::ibv_mw) -> c_int {
    EOPNOTSUPP
}
/// `ibv_context_ops.post_srq_recv`: EFA has no SRQ.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn post_srq_recv(
    _srq: *mut v::ibv_srq,
    _wr: *mut v::ibv_recv_wr,
    _bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    EOPNOTSUPP
}

// --- exported verbs EFA does not support ------------------------------------------------
// Declared here with their default version; the stub's C signature is compatible with
// every caller because the C calling conventions of x86_64 (SysV) and aarch64 (AAPCS64)
// let a callee ignore its arguments: they travel in registers or in the caller's frame.

unsafe extern "C" fn int_eopnotsupp() -> c_int {
    EOPNOTSUPP
}
unsafe extern "C" fn null_eopnotsupp() -> *mut c_void {
    null_with(EOPNOTSUPP)
}
unsafe extern "C" fn minus_one_eopnotsupp() -> c_int {
    set_errno(EOPNOTSUPP);
    -1
}
unsafe extern "C" fn nothing() {}

// SRQ, multicast, resize, ECE, import, DM, DMA handles, buffers, completion counters.
export!("IBVERBS_1.1", ibv_create_srq => null_eopnotsupp);
export!("IBVERBS_1.1", ibv_modify_srq => int_eopnotsupp);
export!("IBVERBS_1.1", ibv_query_srq => int_eopnotsupp);
export!("IBVERBS_1.1", ibv_destroy_srq => int_eopnotsupp);
export!("IBVERBS_1.1", ibv_attach_mcast => int_eopnotsupp);
export!("IBVERBS_1.1", ibv_detach_mcast => int_eopnotsupp);
export!("IBVERBS_1.1", ibv_resize_cq => int_eopnotsupp);
export!("IBVERBS_1.10", ibv_import_device => null_eopnotsupp);
export!("IBVERBS_1.10", ibv_import_mr => null_eopnotsupp);
export!("IBVERBS_1.10", ibv_import_pd => null_eopnotsupp);
export!("IBVERBS_1.10", ibv_unimport_mr => nothing);
export!("IBVERBS_1.10", ibv_unimport_pd => nothing);
export!("IBVERBS_1.10", ibv_query_ece => int_eopnotsupp);
export!("IBVERBS_1.10", ibv_set_ece => int_eopnotsupp);
export!("IBVERBS_1.13", ibv_import_dm => null_eopnotsupp);
export!("IBVERBS_1.13", ibv_unimport_dm => nothing);
export!("IBVERBS_1.15", ibv_alloc_dmah => null_eopnotsupp);
export!("IBVERBS_1.15", ibv_dealloc_dmah => int_eopnotsupp);
export!("IBVERBS_1.15", ibv_reg_mr_ex => null_eopnotsupp);
export!("IBVERBS_1.16", ibv_dm_export_dmabuf_fd => minus_one_eopnotsupp);
export!("IBVERBS_1.17", ibv_alloc_buf => null_eopnotsupp);
export!("IBVERBS_1.17", ibv_free_buf => nothing);
export!("IBVERBS_1.17", ibv_reg_buf_mr => null_eopnotsupp);
export!("IBVERBS_1.18", ibv_export_buf_dmabuf_fd => minus_one_eopnotsupp);
export!("IBVERBS_1.18", _ibv_query_comp_cntr_caps => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_create_comp_cntr => null_eopnotsupp);
export!("IBVERBS_1.18", ibv_destroy_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_set_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_set_err_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_inc_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_inc_err_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_read_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_read_err_comp_cntr => int_eopnotsupp);
export!("IBVERBS_1.18", ibv_qp_attach_comp_cntr => int_eopnotsupp);
export!("EFA_1.7", efadv_create_comp_cntr => null_eopnotsupp);
// Ring access for direct data path consumers: rings are not emulated (README).
