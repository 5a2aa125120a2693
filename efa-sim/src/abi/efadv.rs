//! efadv device queries (model §1.6, §2.1, §2.2).

use super::layout::{EfadvDeviceAttr, EfadvRqDepthAttr, EfadvSqDepthAttr};
use super::objects::SimContext;
use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr;
use efa_sys::verbs as v;
use libc::EINVAL;

const CAP_RDMA_READ: u32 = 1 << 0;
const CAP_RDMA_WRITE: u32 = 1 << 3;
const SQ_DEPTH_ATTR_INLINE_WRITE: u32 = 1 << 0;
/// Inline bytes a 64-byte WQE carries; more needs a 128-byte WQE.
const INLINE_64B_WQE: u32 = 32;

/// `vext_field_avail`: the field starts inside the caller's `inlen` bytes.
#[inline]
fn avail(field_off: usize, inlen: u32) -> bool {
    field_off < inlen as usize
}

unsafe extern "C" fn efadv_query_device(
    ctx: *mut v::ibv_context,
    attr: *mut EfadvDeviceAttr,
    inlen: u32,
) -> c_int {
    if ctx.is_null() || attr.is_null() {
        return EINVAL;
    }
    if !avail(offset_of!(EfadvDeviceAttr, inline_buf_size_ex), inlen) {
        return EINVAL;
    }
    // SAFETY: ctx is ours.
    let p = &unsafe { SimContext::from_ibv(ctx) }.device.profile;
    let mut a = EfadvDeviceAttr {
        comp_mask: 0,
        max_sq_wr: p.max_sq_wr,
        max_rq_wr: p.max_rq_wr,
        max_sq_sge: p.max_sq_sge,
        max_rq_sge: p.max_rq_sge,
        inline_buf_size: p.inline_buf_size,
        inline_buf_size_ex: p.inline_buf_size_ex,
        device_caps: 0,
        max_rdma_size: 0,
    };
    if avail(offset_of!(EfadvDeviceAttr, device_caps), inlen) {
        a.device_caps = p.device_caps & !(CAP_RDMA_READ | CAP_RDMA_WRITE);
    }
    if avail(offset_of!(EfadvDeviceAttr, max_rdma_size), inlen) {
        a.device_caps |= p.device_caps & (CAP_RDMA_READ | CAP_RDMA_WRITE);
        a.max_rdma_size = p.max_rdma_size;
    }
    let n = (inlen as usize).min(size_of::<EfadvDeviceAttr>());
    // SAFETY: the caller's attr holds inlen bytes: zero all, fill the available part.
    unsafe {
        ptr::write_bytes(attr as *mut u8, 0, inlen as usize);
        ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n);
    }
    0
}
export!("EFA_1.1", efadv_query_device => efadv_query_device);

/// Reads an input struct of `inlen` bytes: bytes beyond ours must be zero.
unsafe fn read_input<T: Copy>(p: *const T, inlen: u32, min_field_off: usize) -> Option<T> {
    let inlen = inlen as usize;
    let ours = size_of::<T>();
    if p.is_null() || inlen <= min_field_off {
        return None;
    }
    // SAFETY: p holds inlen bytes.
    let bytes = unsafe { core::slice::from_raw_parts(p as *const u8, inlen) };
    if inlen > ours && bytes[ours..].iter().any(|b| *b != 0) {
        return None;
    }
    // SAFETY: T is plain data; all-zero is valid; copy the caller's part.
    unsafe {
        let mut t: T = core::mem::zeroed();
        ptr::copy_nonoverlapping(p as *const u8, &mut t as *mut T as *mut u8, inlen.min(ours));
        Some(t)
    }
}

fn rounddown_pow2(x: u32) -> u32 {
    if x == 0 {
        0
    } else {
        1 << (31 - x.leading_zeros())
    }
}

unsafe extern "C" fn get_max_sq_depth(
    ctx: *mut v::ibv_context,
    attr: *const EfadvSqDepthAttr,
    inlen: u32,
) -> c_int {
    if ctx.is_null() {
        return -EINVAL;
    }
    // SAFETY: attr holds inlen bytes.
    let Some(a) =
        (unsafe { read_input(attr, inlen, offset_of!(EfadvSqDepthAttr, max_inline_data)) })
    else {
        return -EINVAL;
    };
    // SAFETY: ctx is ours.
    let p = &unsafe { SimContext::from_ibv(ctx) }.device.profile;
    if a.comp_mask != 0
        || a.max_send_sge > u32::from(p.max_sq_sge)
        || a.max_rdma_sge > p.max_sge_rd
        || a.max_inline_data > u32::from(p.inline_buf_size_ex)
    {
        return -EINVAL;
    }
    let wqe = if a.max_inline_data > INLINE_64B_WQE || a.flags & SQ_DEPTH_ATTR_INLINE_WRITE != 0 {
        128
    } else {
        64
    };
    rounddown_pow2(p.max_llq_size / wqe) as c_int
}
export!("EFA_1.5", efadv_get_max_sq_depth => get_max_sq_depth);

unsafe extern "C" fn get_max_rq_depth(
    ctx: *mut v::ibv_context,
    attr: *const EfadvRqDepthAttr,
    inlen: u32,
) -> c_int {
    if ctx.is_null() {
        return -EINVAL;
    }
    // SAFETY: attr holds inlen bytes.
    let Some(a) = (unsafe { read_input(attr, inlen, offset_of!(EfadvRqDepthAttr, max_recv_sge)) })
    else {
        return -EINVAL;
    };
    // SAFETY: ctx is ours.
    let p = &unsafe { SimContext::from_ibv(ctx) }.device.profile;
    if a.comp_mask != 0 || a.max_recv_sge == 0 || a.max_recv_sge > u32::from(p.max_rq_sge) {
        return -EINVAL;
    }
    (p.max_rq_wr / a.max_recv_sge) as c_int
}
export!("EFA_1.5", efadv_get_max_rq_depth => get_max_rq_depth);
