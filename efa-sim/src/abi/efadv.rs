//! efadv queries (model §1.6, §2.1, §2.2): the device attributes, the queue depth a
//! configuration allows, and the raw rings of a QP or CQ for direct data-path consumers.

use super::layout::{
    EfadvCqAttr, EfadvDeviceAttr, EfadvRqDepthAttr, EfadvSqDepthAttr, EfadvWqAttr,
};
use super::objects::{SimContext, SimCq, SimQp};
use crate::model::{qp, RingLayout};
use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr;
use efa_sys::efadv::{
    EFADV_DEVICE_ATTR_CAPS_RDMA_READ as CAP_RDMA_READ,
    EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE as CAP_RDMA_WRITE, EFADV_SQ_DEPTH_ATTR_INLINE_WRITE,
};
use efa_sys::verbs as v;
use libc::{EINVAL, EOPNOTSUPP};

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
    let inline_write = a.flags & EFADV_SQ_DEPTH_ATTR_INLINE_WRITE != 0;
    qp::max_sq_depth(p, a.max_inline_data, inline_write) as c_int
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

/// The part of a ring description every efadv ring query writes.
fn fill_ring(a: &mut EfadvWqAttr, l: &RingLayout) {
    a.comp_mask = 0;
    a.buffer = l.buffer;
    a.entry_size = l.entry_size;
    a.num_entries = l.num_entries;
    a.doorbell = l.doorbell;
    a.max_batch = l.max_batch;
}

/// `efadv_query_qp_wqs`: the SQ and RQ rings (buffer, entry size, entries, doorbell,
/// max batch; `caps` when covered). `inlen` must cover `max_batch`.
unsafe extern "C" fn efadv_query_qp_wqs(
    qp: *mut v::ibv_qp,
    sq_attr: *mut EfadvWqAttr,
    rq_attr: *mut EfadvWqAttr,
    inlen: u32,
) -> c_int {
    if qp.is_null() || sq_attr.is_null() || rq_attr.is_null() {
        return EINVAL;
    }
    if !avail(offset_of!(EfadvWqAttr, max_batch), inlen) {
        return EINVAL;
    }
    // SAFETY: qp is ours.
    let model = &unsafe { SimQp::from_ibv(qp) }.model;
    if !model.hands_out_rings() {
        return EOPNOTSUPP;
    }
    let (sq, rq) = model.wq_layout();
    let with_caps = avail(offset_of!(EfadvWqAttr, reserved), inlen);
    for (attr, l) in [(sq_attr, sq), (rq_attr, rq)] {
        // SAFETY: the caller's structs hold at least the fields `inlen` covers (rdma-core
        // writes every field through max_batch, and caps/reserved when covered).
        let a = unsafe { &mut *attr };
        fill_ring(a, &l);
        if with_caps {
            a.caps = 0; // no 64-bit request ids
            a.reserved = [0; 2];
        }
    }
    0
}
export!("EFA_1.4", efadv_query_qp_wqs => efadv_query_qp_wqs);

/// `efadv_query_cq`: the completion ring (buffer, entry size, entries; the doorbell when
/// covered). `inlen` must cover `num_entries`.
unsafe extern "C" fn efadv_query_cq(
    cq: *mut v::ibv_cq,
    attr: *mut EfadvCqAttr,
    inlen: u32,
) -> c_int {
    if cq.is_null() || attr.is_null() {
        return EINVAL;
    }
    if !avail(offset_of!(EfadvCqAttr, num_entries), inlen) {
        return EINVAL;
    }
    // SAFETY: cq is ours.
    let model = &unsafe { SimCq::from_ibv(cq) }.model;
    if !model.hands_out_rings() {
        return EOPNOTSUPP;
    }
    let l = model.ring_layout();
    // SAFETY: the caller's struct holds at least the fields `inlen` covers.
    let a = unsafe { &mut *attr };
    a.comp_mask = 0;
    a.buffer = l.buffer;
    a.entry_size = l.entry_size;
    a.num_entries = l.num_entries;
    if avail(offset_of!(EfadvCqAttr, doorbell), inlen) {
        a.doorbell = l.doorbell;
    }
    0
}
export!("EFA_1.4", efadv_query_cq => efadv_query_cq);
