//! Extended verbs that dispatch through `struct verbs_context`, done right.
//!
//! rdma-sys 0.3's `verbs_get_ctx` compares `ibv_context.abi_compat` with `u32::MAX`, but
//! libibverbs (and any stand-in) marks an extended context with `UINTPTR_MAX`
//! (`__VERBS_ABI_IS_EXTENDED`). On 64-bit targets rdma-sys therefore never finds the
//! extended ops: its `ibv_create_cq_ex`, `ibv_create_qp_ex` (beyond a plain PD mask),
//! `ibv_alloc_td`, `ibv_alloc_parent_domain`, `ibv_modify_cq` fail with `EOPNOTSUPP`, and its
//! `ibv_query_device_ex`/`___ibv_query_port` silently fall back to the legacy calls.
//!
//! The functions here follow rdma-core's `verbs.h` and return like C (NULL with `errno`, or an
//! errno value). [`crate::verbs`] re-exports them under the C names, shadowing rdma-sys's.
//!
//! rdma-sys's other helpers built on the same check always report "unsupported"
//! (`ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_advise_mr`, `ibv_alloc_dm`, `ibv_free_dm`,
//! `ibv_reg_dm_mr`, `ibv_alloc_null_mr`, `ibv_create_flow*`, `ibv_destroy_flow*`,
//! `ibv_create_wq`, `ibv_modify_wq`, `ibv_destroy_wq`, `ibv_post_wq_recv`,
//! `ibv_create_rwq_ind_table`, `ibv_destroy_rwq_ind_table`, `ibv_create_srq_ex`,
//! `ibv_get_srq_num`, `ibv_post_srq_ops`, `ibv_open_qp`, `ibv_modify_qp_rate_limit`,
//! `ibv_query_rt_values_ex`, `ibv_*_counters`). EFA implements none of those ops, so on EFA
//! their answer happens to match the real one; they are not re-implemented here.
//!
//! Only the byte distance of each op from the embedded `ibv_context` matters; it is the same in
//! every rdma-core version (members are only ever prepended), so rdma-sys's rdma-core 44
//! `verbs_context` is used for offsets while providers may allocate a newer, larger one.

use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr::{addr_of, null_mut};
use rdma_sys::{
    _compat_ibv_port_attr, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device_attr_ex,
    ibv_modify_cq_attr, ibv_parent_domain_init_attr, ibv_pd, ibv_port_attr, ibv_qp,
    ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_qp_init_attr_mask, ibv_query_device_ex_input,
    ibv_td, ibv_td_init_attr, verbs_context,
};
use static_assertions::const_assert_eq;

/// `__VERBS_ABI_IS_EXTENDED`: the `ibv_context.abi_compat` value of an extended context.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// Distance from the start of rdma-core 44's `verbs_context` to its embedded `ibv_context`.
const CONTEXT_OFFSET: usize = offset_of!(verbs_context, context);
const_assert_eq!(CONTEXT_OFFSET, 320);
// 648 bytes on x86_64; the embedded `ibv_context` holds a `pthread_mutex_t`.
const_assert_eq!(size_of::<verbs_context>(), 648 + crate::layout::MUTEX_SHIFT);
// `sz` sits right before `context` in every version.
const_assert_eq!(offset_of!(verbs_context, sz), CONTEXT_OFFSET - 8);

/// `verbs_get_ctx`: the `verbs_context` around `ctx`, or NULL if `ctx` is not extended.
///
/// # Safety
/// `ctx` must point to a live `ibv_context`.
#[inline]
pub unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: the caller guarantees `ctx` is live; only the `abi_compat` field is read.
    if unsafe { (*ctx).abi_compat } as usize != VERBS_ABI_IS_EXTENDED {
        return null_mut();
    }
    // An extended context is always embedded at the end of a `verbs_context`.
    ctx.cast::<u8>()
        .wrapping_sub(CONTEXT_OFFSET)
        .cast::<verbs_context>()
}

/// `verbs_get_ctx_op`: the context's `verbs_context` if it is extended, large enough to hold
/// `op`, and `op` is set; else NULL.
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        // SAFETY: every user is an `unsafe fn` whose caller guarantees the context is live.
        let vctx = unsafe { verbs_get_ctx($ctx) };
        if vctx.is_null() {
            null_mut()
        } else {
            // Bytes from `op` to the end of the (rdma-core 44) struct; the provider's `sz` must
            // cover them, or `op` lies before the start of its allocation.
            let needed = size_of::<verbs_context>() - offset_of!(verbs_context, $op);
            // SAFETY: `sz` is right before the embedded context, present in every version.
            let sz = unsafe { addr_of!((*vctx).sz).read() };
            // SAFETY: `sz` says the provider's struct reaches back to `op`.
            if sz < needed || unsafe { addr_of!((*vctx).$op).read() }.is_none() {
                null_mut()
            } else {
                vctx
            }
        }
    }};
}

fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}

/// `ibv_create_cq_ex`: creates an extended CQ. Returns NULL with `errno` set on failure
/// (`EOPNOTSUPP` if the context has no extended CQ support).
///
/// # Safety
/// `context` must be a live device context and `cq_attr` a valid `ibv_cq_init_attr_ex`.
#[inline]
pub unsafe fn ibv_create_cq_ex(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let vctx = verbs_get_ctx_op!(context, create_cq_ex);
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: the op is present (checked above); arguments as promised by the caller.
    unsafe { ((*vctx).create_cq_ex.unwrap_unchecked())(context, cq_attr) }
}

/// `ibv_create_qp_ex`: creates a QP from extended attributes (a plain `IBV_QP_INIT_ATTR_PD`
/// mask goes to `ibv_create_qp`). Returns NULL with `errno` set on failure.
///
/// # Safety
/// `context` must be a live device context and `qp_init_attr_ex` a valid
/// `ibv_qp_init_attr_ex` whose `pd` belongs to `context`.
#[inline]
pub unsafe fn ibv_create_qp_ex(
    context: *mut ibv_context,
    qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: `qp_init_attr_ex` is valid (caller).
    let mask = unsafe { (*qp_init_attr_ex).comp_mask };
    if mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
        // SAFETY: `ibv_qp_init_attr_ex` starts with the members of `ibv_qp_init_attr`.
        return unsafe {
            rdma_sys::ibv_create_qp(
                (*qp_init_attr_ex).pd,
                qp_init_attr_ex.cast::<ibv_qp_init_attr>(),
            )
        };
    }
    let vctx = verbs_get_ctx_op!(context, create_qp_ex);
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: the op is present; arguments as promised by the caller.
    unsafe { ((*vctx).create_qp_ex.unwrap_unchecked())(context, qp_init_attr_ex) }
}

/// `ibv_query_device_ex`: extended device attributes, falling back to `ibv_query_device` when
/// the provider lacks the extended query. Returns 0 or a positive errno (`EINVAL` if
/// `input->comp_mask` is not 0).
///
/// # Safety
/// `context` must be a live device context, `input` NULL or valid, `attr` valid for writes.
#[inline]
pub unsafe fn ibv_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: `input` is NULL or valid (caller).
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    let vctx = verbs_get_ctx_op!(context, query_device_ex);
    if !vctx.is_null() {
        // SAFETY: the op is present; arguments as promised by the caller.
        let ret = unsafe {
            ((*vctx).query_device_ex.unwrap_unchecked())(
                context,
                input,
                attr,
                size_of::<ibv_device_attr_ex>(),
            )
        };
        if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
            return ret;
        }
    }
    // SAFETY: `attr` is valid for writes (caller); all-zero bytes are a valid attr.
    unsafe {
        attr.write_bytes(0, 1);
        rdma_sys::ibv_query_device(context, addr_of!((*attr).orig_attr).cast_mut())
    }
}

/// `ibv_query_port` (the C macro `___ibv_query_port`): port attributes through the
/// length-aware provider op, falling back to the exported legacy symbol. Returns 0 or an errno.
///
/// # Safety
/// `context` must be a live device context and `port_attr` valid for writes.
#[inline]
pub unsafe fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    let vctx = verbs_get_ctx_op!(context, query_port);
    if vctx.is_null() {
        // SAFETY: `port_attr` is valid for writes (caller) and starts with the legacy layout.
        return unsafe {
            port_attr.write_bytes(0, 1);
            rdma_sys::ibv_query_port(context, port_num, port_attr.cast::<_compat_ibv_port_attr>())
        };
    }
    // SAFETY: the op is present; arguments as promised by the caller.
    unsafe {
        ((*vctx).query_port.unwrap_unchecked())(
            context,
            port_num,
            port_attr,
            size_of::<ibv_port_attr>(),
        )
    }
}

/// Same as [`ibv_query_port`], under the name of the C inline behind the macro.
///
/// # Safety
/// As [`ibv_query_port`].
#[inline]
pub unsafe fn ___ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: same contract.
    unsafe { ibv_query_port(context, port_num, port_attr) }
}

/// `ibv_alloc_td`: allocates a thread domain. Returns NULL with `errno` set on failure.
///
/// # Safety
/// `context` must be a live device context and `init_attr` valid.
#[inline]
pub unsafe fn ibv_alloc_td(
    context: *mut ibv_context,
    init_attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    let vctx = verbs_get_ctx_op!(context, alloc_td);
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: the op is present; arguments as promised by the caller.
    unsafe { ((*vctx).alloc_td.unwrap_unchecked())(context, init_attr) }
}

/// `ibv_dealloc_td`: frees a thread domain. Returns 0 or an errno.
///
/// # Safety
/// `td` must be a live thread domain not used by any object.
#[inline]
pub unsafe fn ibv_dealloc_td(td: *mut ibv_td) -> c_int {
    let vctx = verbs_get_ctx_op!((*td).context, dealloc_td);
    if vctx.is_null() {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: the op is present; argument as promised by the caller.
    unsafe { ((*vctx).dealloc_td.unwrap_unchecked())(td) }
}

/// `ibv_alloc_parent_domain`: allocates a parent domain. Returns NULL with `errno` set on failure.
///
/// # Safety
/// `context` must be a live device context and `attr` valid.
#[inline]
pub unsafe fn ibv_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    let vctx = verbs_get_ctx_op!(context, alloc_parent_domain);
    if vctx.is_null() {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    // SAFETY: the op is present; arguments as promised by the caller.
    unsafe { ((*vctx).alloc_parent_domain.unwrap_unchecked())(context, attr) }
}

/// `ibv_modify_cq`: changes CQ moderation. Returns 0 or an errno (`EOPNOTSUPP` on EFA).
///
/// # Safety
/// `cq` must be a live CQ and `attr` valid.
#[inline]
pub unsafe fn ibv_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int {
    let vctx = verbs_get_ctx_op!((*cq).context, modify_cq);
    if vctx.is_null() {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: the op is present; arguments as promised by the caller.
    unsafe { ((*vctx).modify_cq.unwrap_unchecked())(cq, attr) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::c_void;
    use core::mem::MaybeUninit;

    const FAKE_CQ: usize = 0x1000;

    unsafe extern "C" fn fake_create_cq_ex(
        _ctx: *mut ibv_context,
        _attr: *mut ibv_cq_init_attr_ex,
    ) -> *mut ibv_cq_ex {
        FAKE_CQ as *mut ibv_cq_ex
    }

    unsafe extern "C" fn fake_query_port(
        _ctx: *mut ibv_context,
        port: u8,
        attr: *mut ibv_port_attr,
        len: usize,
    ) -> c_int {
        // SAFETY: the wrapper under test forwards a valid attr.
        unsafe { (*attr).gid_tbl_len = i32::from(port) * 100 + len as i32 };
        0
    }

    unsafe extern "C" fn fake_query_device_ex(
        _ctx: *mut ibv_context,
        _input: *const ibv_query_device_ex_input,
        attr: *mut ibv_device_attr_ex,
        len: usize,
    ) -> c_int {
        // SAFETY: the wrapper under test forwards a valid attr.
        unsafe { (*attr).orig_attr.max_qp = len as i32 };
        0
    }

    /// An all-zero rdma-core 44 `verbs_context`, marked extended.
    fn extended_context() -> verbs_context {
        // SAFETY: `verbs_context` is plain data (pointers, integers, Options of fn pointers,
        // opaque pthread bytes); all-zero is a valid value of each.
        let mut vctx: verbs_context = unsafe { MaybeUninit::zeroed().assume_init() };
        vctx.context.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
        vctx.sz = size_of::<verbs_context>();
        vctx
    }

    #[test]
    fn create_cq_ex_dispatches_on_uintptr_max_where_rdma_sys_does_not() {
        let mut vctx = extended_context();
        vctx.create_cq_ex = Some(fake_create_cq_ex);
        // SAFETY: all-zero attrs are valid; the fake op ignores them.
        let mut attr: ibv_cq_init_attr_ex = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: `vctx` is a live, extended context with the op set.
        let cq = unsafe { ibv_create_cq_ex(&mut vctx.context, &mut attr) };
        assert_eq!(cq as usize, FAKE_CQ);
        // rdma-sys 0.3 compares abi_compat with u32::MAX and reports "unsupported" instead.
        // If this starts failing, rdma-sys was fixed and this module could go.
        // SAFETY: as above.
        assert!(unsafe { rdma_sys::ibv_create_cq_ex(&mut vctx.context, &mut attr) }.is_none());
    }

    #[test]
    fn missing_op_or_short_context_or_legacy_context_gives_eopnotsupp() {
        // SAFETY: all-zero attrs are valid; nothing is called.
        let mut attr: ibv_cq_init_attr_ex = unsafe { MaybeUninit::zeroed().assume_init() };

        let mut no_op = extended_context();
        // SAFETY: live extended context.
        assert!(unsafe { ibv_create_cq_ex(&mut no_op.context, &mut attr) }.is_null());
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EOPNOTSUPP);

        // `sz` too small: the provider's struct does not reach back to `create_cq_ex`.
        let mut short = extended_context();
        short.create_cq_ex = Some(fake_create_cq_ex);
        short.sz = size_of::<verbs_context>() - offset_of!(verbs_context, create_cq_ex) - 1;
        // SAFETY: resetting this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: live extended context.
        assert!(unsafe { ibv_create_cq_ex(&mut short.context, &mut attr) }.is_null());
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EOPNOTSUPP);

        // Not extended at all.
        let mut legacy = extended_context();
        legacy.create_cq_ex = Some(fake_create_cq_ex);
        legacy.context.abi_compat = null_mut();
        // SAFETY: live (legacy) context.
        assert!(unsafe { ibv_create_cq_ex(&mut legacy.context, &mut attr) }.is_null());

        // Ops returning an errno report EOPNOTSUPP directly.
        let mut no_modify = extended_context();
        // SAFETY: all-zero is a valid `ibv_cq`; only its `context` is read.
        let mut cq: ibv_cq = unsafe { MaybeUninit::zeroed().assume_init() };
        cq.context = &mut no_modify.context;
        assert_eq!(
            // SAFETY: `cq` and its context are live; the op is absent so nothing is called.
            unsafe { ibv_modify_cq(&mut cq, null_mut()) },
            libc::EOPNOTSUPP
        );
    }

    #[test]
    fn query_port_and_query_device_ex_pass_this_crates_struct_sizes() {
        let mut vctx = extended_context();
        vctx.query_port = Some(fake_query_port);
        vctx.query_device_ex = Some(fake_query_device_ex);
        // SAFETY: all-zero attrs are valid.
        let mut port: ibv_port_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        assert_eq!(
            // SAFETY: live extended context with the op set.
            unsafe { ibv_query_port(&mut vctx.context, 1, &mut port) },
            0
        );
        assert_eq!(port.gid_tbl_len as usize, 100 + size_of::<ibv_port_attr>());

        // SAFETY: all-zero attrs are valid.
        let mut dev: ibv_device_attr_ex = unsafe { MaybeUninit::zeroed().assume_init() };
        assert_eq!(
            // SAFETY: as above.
            unsafe { ibv_query_device_ex(&mut vctx.context, core::ptr::null(), &mut dev) },
            0
        );
        assert_eq!(
            dev.orig_attr.max_qp as usize,
            size_of::<ibv_device_attr_ex>()
        );

        let input = ibv_query_device_ex_input { comp_mask: 1 };
        assert_eq!(
            // SAFETY: as above; rejected before any call.
            unsafe { ibv_query_device_ex(&mut vctx.context, &input, &mut dev) },
            libc::EINVAL
        );
    }
}
