//! Device, port, GID and P_Key queries (model §2.3): the attributes of a software device
//! as rdma-core reports them for EFA.

use super::device::copy_cstr;
use super::layout::{PortAttrV65, COMPAT_PORT_ATTR_LEN};
use super::objects::SimContext;
use crate::model::Device;
use core::ffi::c_int;
use core::ptr;
use efa_sys::verbs as v;
use libc::EINVAL;

/// `ibv_device_attr` from the profile (model §2.3).
pub fn device_attr(d: &Device) -> v::ibv_device_attr {
    let p = &d.profile;
    // SAFETY: plain data, zero is valid for every field.
    let mut a: v::ibv_device_attr = unsafe { core::mem::zeroed() };
    copy_cstr(&mut a.fw_ver, &p.fw_ver);
    a.node_guid = p.node_guid.to_be();
    a.sys_image_guid = 0;
    a.max_mr_size = p.max_mr_size;
    a.page_size_cap = p.page_size_cap;
    a.vendor_id = p.vendor_id;
    a.vendor_part_id = p.vendor_part_id;
    a.hw_ver = p.hw_ver;
    a.max_qp = p.max_qp as c_int;
    a.max_qp_wr = p.max_sq_wr.min(p.max_rq_wr).min(p.max_llq_size / 64) as c_int;
    a.max_sge = p.max_sq_sge.min(p.max_rq_sge) as c_int;
    a.max_sge_rd = p.max_sge_rd as c_int;
    a.max_cq = p.max_cq as c_int;
    a.max_cqe = p.max_cqe as c_int;
    a.max_mr = p.max_mr as c_int;
    a.max_pd = p.max_pd as c_int;
    a.max_ah = p.max_ah as c_int;
    a.max_pkeys = 1;
    a.phys_port_cnt = 1;
    a
}

/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn query_device(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_device_attr,
) -> c_int {
    if ctx.is_null() || attr.is_null() {
        return EINVAL;
    }
    // SAFETY: ctx is ours, attr points to a caller ibv_device_attr.
    unsafe { *attr = device_attr(&SimContext::from_ibv(ctx).device) };
    0
}
export!("IBVERBS_1.1", ibv_query_device => query_device);

pub(super) unsafe extern "C" fn query_device_ex_op(
    ctx: *mut v::ibv_context,
    input: *const v::ibv_query_device_ex_input,
    attr: *mut v::ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: input is NULL or a caller struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return EINVAL;
    }
    if attr.is_null() || attr_size < core::mem::size_of::<v::ibv_device_attr>() {
        return EINVAL;
    }
    // SAFETY: plain data.
    let mut full: v::ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    // SAFETY: ctx is ours.
    full.orig_attr = device_attr(unsafe { &SimContext::from_ibv(ctx).device });
    full.phys_port_cnt_ex = 1;
    let n = attr_size.min(core::mem::size_of::<v::ibv_device_attr_ex>());
    // SAFETY: the caller's buffer holds attr_size bytes; we write n <= attr_size and zero the rest.
    unsafe {
        ptr::write_bytes(attr as *mut u8, 0, attr_size);
        ptr::copy_nonoverlapping(&full as *const _ as *const u8, attr as *mut u8, n);
    }
    0
}

/// Port speed/width from link Gb/s (kd `efa_link_gbps_to_speed_and_width`).
fn speed_width(gbps: u32) -> (u8, u8) {
    const W1X: u8 = 1;
    const W4X: u8 = 2;
    const W8X: u8 = 4;
    const W12X: u8 = 8;
    const SDR: u8 = 1;
    const DDR: u8 = 2;
    const FDR10: u8 = 8;
    const EDR: u8 = 32;
    const HDR: u8 = 64;
    match gbps {
        400.. => (HDR, W8X),
        200.. => (HDR, W4X),
        120.. => (FDR10, W12X),
        100.. => (EDR, W4X),
        60.. => (DDR, W12X),
        50.. => (HDR, W1X),
        40.. => (FDR10, W4X),
        30.. => (SDR, W12X),
        _ => (EDR, W1X),
    }
}

/// `ibv_port_attr` (v65 layout) of port 1 (model §2.3).
pub fn port_attr(d: &Device) -> PortAttrV65 {
    let p = &d.profile;
    // SAFETY: plain data.
    let mut a: PortAttrV65 = unsafe { core::mem::zeroed() };
    let mtu = match p.mtu_bytes {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    };
    let (speed, width) = speed_width(if p.link_gbps == 0 { 100 } else { p.link_gbps });
    a.base.state = 4; // IBV_PORT_ACTIVE
    a.base.max_mtu = mtu;
    a.base.active_mtu = mtu;
    a.base.gid_tbl_len = 1;
    a.base.max_msg_sz = p.mtu_bytes;
    a.base.pkey_tbl_len = 1;
    a.base.lmc = 1;
    a.base.max_vl_num = 1;
    a.base.active_width = width;
    a.base.active_speed = speed;
    a.base.phys_state = 5; // LinkUp
    a.base.link_layer = 0; // IBV_LINK_LAYER_UNSPECIFIED
    a
}

/// `verbs_context->query_port`: length-aware (copies `min(len, 56)`).
pub(super) unsafe extern "C" fn query_port_op(
    ctx: *mut v::ibv_context,
    port: u8,
    attr: *mut v::ibv_port_attr,
    len: usize,
) -> c_int {
    if port != 1 || attr.is_null() {
        return EINVAL;
    }
    // SAFETY: ctx is ours.
    let a = port_attr(unsafe { &SimContext::from_ibv(ctx).device });
    let n = len.min(core::mem::size_of::<PortAttrV65>());
    // SAFETY: the caller's buffer holds len >= n bytes.
    unsafe { ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr as *mut u8, n) };
    0
}

/// Exported `ibv_query_port`: the legacy `_compat_ibv_port_attr` (48 bytes).
pub(super) unsafe extern "C" fn query_port_legacy(
    ctx: *mut v::ibv_context,
    port: u8,
    attr: *mut v::ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded caller contract; the compat struct is 48 bytes.
    unsafe { query_port_op(ctx, port, attr, COMPAT_PORT_ATTR_LEN) }
}
export!("IBVERBS_1.1", ibv_query_port => query_port_legacy);

unsafe extern "C" fn query_gid(
    ctx: *mut v::ibv_context,
    port: u8,
    index: c_int,
    gid: *mut u8,
) -> c_int {
    if ctx.is_null() || gid.is_null() || port != 1 || index != 0 {
        return -1;
    }
    // SAFETY: ctx is ours, gid points to 16 bytes.
    unsafe { ptr::copy_nonoverlapping(SimContext::from_ibv(ctx).device.gid.as_ptr(), gid, 16) };
    0
}
export!("IBVERBS_1.1", ibv_query_gid => query_gid);

unsafe extern "C" fn query_pkey(
    ctx: *mut v::ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    if ctx.is_null() || pkey.is_null() || port != 1 || index != 0 {
        return -1;
    }
    // SAFETY: caller out pointer.
    unsafe { *pkey = 0xffffu16.to_be() };
    0
}
export!("IBVERBS_1.1", ibv_query_pkey => query_pkey);

unsafe extern "C" fn get_pkey_index(ctx: *mut v::ibv_context, port: u8, pkey: u16) -> c_int {
    if ctx.is_null() || port != 1 {
        return -1;
    }
    if pkey == 0xffffu16.to_be() {
        0
    } else {
        super::set_errno(libc::ENOENT);
        -1
    }
}
export!("IBVERBS_1.5", ibv_get_pkey_index => get_pkey_index);

fn fill_gid_entry(d: &Device, e: *mut v::ibv_gid_entry) {
    // SAFETY: caller passes an entry of at least sizeof(ibv_gid_entry) bytes.
    unsafe {
        ptr::write_bytes(e, 0, 1);
        ptr::copy_nonoverlapping(d.gid.as_ptr(), e as *mut u8, 16);
        (*e).gid_index = 0;
        (*e).port_num = 1;
        (*e).gid_type = 0; // IBV_GID_TYPE_IB
        (*e).ndev_ifindex = 0;
    }
}

unsafe extern "C" fn query_gid_ex(
    ctx: *mut v::ibv_context,
    port: u32,
    index: u32,
    entry: *mut v::ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if ctx.is_null()
        || entry.is_null()
        || flags != 0
        || entry_size < core::mem::size_of::<v::ibv_gid_entry>()
    {
        return EINVAL;
    }
    if port != 1 || index != 0 {
        return EINVAL;
    }
    // SAFETY: ctx is ours.
    fill_gid_entry(unsafe { &SimContext::from_ibv(ctx).device }, entry);
    0
}
export!("IBVERBS_1.11", _ibv_query_gid_ex => query_gid_ex);

unsafe extern "C" fn query_gid_table(
    ctx: *mut v::ibv_context,
    entries: *mut v::ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    if ctx.is_null()
        || entries.is_null()
        || flags != 0
        || entry_size < core::mem::size_of::<v::ibv_gid_entry>()
    {
        return -(EINVAL as isize);
    }
    if max_entries < 1 {
        return -(EINVAL as isize);
    }
    // SAFETY: ctx is ours; entries holds max_entries >= 1 entries.
    fill_gid_entry(unsafe { &SimContext::from_ibv(ctx).device }, entries);
    1
}
export!("IBVERBS_1.11", _ibv_query_gid_table => query_gid_table);

unsafe extern "C" fn query_port_speed(
    ctx: *mut v::ibv_context,
    port: u32,
    speed: *mut u64,
) -> c_int {
    if ctx.is_null() || speed.is_null() || port != 1 {
        return EINVAL;
    }
    // SAFETY: ctx is ours; speed is a caller out pointer. Unit: 100 Mb/s.
    unsafe {
        let gbps = SimContext::from_ibv(ctx).device.profile.link_gbps;
        *speed = u64::from(if gbps == 0 { 100 } else { gbps }) * 10;
    }
    0
}
export!("IBVERBS_1.16", ibv_query_port_speed => query_port_speed);

/// `ibv_query_gid_type` (provider-private in rdma-core, imported by `ibv_devinfo`):
/// the one GID is of type IB/RoCEv1 (0), as sysfs reports for EFA.
unsafe extern "C" fn query_gid_type(
    ctx: *mut v::ibv_context,
    port: u8,
    index: u32,
    ty: *mut u32,
) -> c_int {
    if ctx.is_null() || ty.is_null() || port != 1 || index != 0 {
        return EINVAL;
    }
    // SAFETY: caller out pointer.
    unsafe { *ty = 0 };
    0
}
export!("IBVERBS_PRIVATE_34", ibv_query_gid_type => query_gid_type);
