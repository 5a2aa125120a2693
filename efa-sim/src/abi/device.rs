//! Device list, open/close, device/port/GID/P_Key queries, async events.

use super::layout::{slot, PortAttrV65, VerbsContextV65, COMPAT_PORT_ATTR_LEN, VCTX_SLOTS};
use super::objects::{SimContext, SimDevice};
use super::{cq, leak, null_with, pd, qp, stubs};
use crate::model::{Device, Sim};
use core::ffi::{c_char, c_int, c_void};
use core::ptr;
use efa_sys::verbs as v;
use libc::{EINVAL, ENODEV};
use std::sync::{Arc, OnceLock};

/// Node type / transport of an EFA device (model §1.2).
const IBV_NODE_UNSPECIFIED: i32 = 7;
const IBV_TRANSPORT_UNSPECIFIED: i32 = 4;

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// The process's `ibv_device`s, one per model device, built on first use.
pub fn devices() -> &'static [SimDevice] {
    static DEVICES: OnceLock<Vec<SimDevice>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        Sim::get()
            .devices()
            .iter()
            .map(|d| {
                // SAFETY: ibv_device is plain data; all-zero is a valid value (NULL _ops).
                let mut ibv: v::ibv_device = unsafe { core::mem::zeroed() };
                ibv.node_type = IBV_NODE_UNSPECIFIED;
                ibv.transport_type = IBV_TRANSPORT_UNSPECIFIED;
                copy_cstr(&mut ibv.name, &d.name);
                copy_cstr(&mut ibv.dev_name, &format!("uverbs{}", d.index));
                copy_cstr(&mut ibv.dev_path, &crate::sysfs::dev_path(d.index));
                copy_cstr(&mut ibv.ibdev_path, &crate::sysfs::ibdev_path(&d.name));
                SimDevice {
                    ibv,
                    model: d.clone(),
                }
            })
            .collect()
    })
}

fn model_of(dev: *mut v::ibv_device) -> Option<&'static Arc<Device>> {
    devices()
        .iter()
        .find(|d| ptr::eq(&d.ibv, dev))
        .map(|d| &d.model)
}

unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut v::ibv_device {
    let devs = devices();
    // SAFETY: calloc'd array of len+1 pointers, NULL-terminated; freed by free_device_list.
    let list = unsafe { libc::calloc(devs.len() + 1, core::mem::size_of::<usize>()) }
        as *mut *mut v::ibv_device;
    if list.is_null() {
        return null_with(libc::ENOMEM);
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: i < len; the devices live forever.
        unsafe { *list.add(i) = &d.ibv as *const v::ibv_device as *mut v::ibv_device };
    }
    if !num.is_null() {
        // SAFETY: caller-provided out pointer.
        unsafe { *num = devs.len() as c_int };
    }
    list
}
export!("IBVERBS_1.1", ibv_get_device_list => get_device_list);

unsafe extern "C" fn free_device_list(list: *mut *mut v::ibv_device) {
    // SAFETY: list came from get_device_list (calloc).
    unsafe { libc::free(list as *mut c_void) }
}
export!("IBVERBS_1.1", ibv_free_device_list => free_device_list);

unsafe extern "C" fn get_device_name(dev: *mut v::ibv_device) -> *const c_char {
    if dev.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: dev points to one of our ibv_devices.
    unsafe { (*dev).name.as_ptr() }
}
export!("IBVERBS_1.1", ibv_get_device_name => get_device_name);

unsafe extern "C" fn get_device_guid(dev: *mut v::ibv_device) -> u64 {
    model_of(dev)
        .map(|d| d.profile.node_guid.to_be())
        .unwrap_or(0)
}
export!("IBVERBS_1.1", ibv_get_device_guid => get_device_guid);

unsafe extern "C" fn get_device_index(dev: *mut v::ibv_device) -> c_int {
    model_of(dev).map(|d| d.index as c_int).unwrap_or(-1)
}
export!("IBVERBS_1.9", ibv_get_device_index => get_device_index);

/// Fills every verbs_context / ibv_context_ops slot: real ops where EFA has them,
/// libibverbs-dummy-like stubs elsewhere (no slot is ever NULL, model §1.2).
fn fill_ops(vctx: &mut VerbsContextV65) {
    let int = stubs::int_slot();
    let ptrs = stubs::ptr_slot();
    let void = stubs::void_slot();
    let mut s = [int; VCTX_SLOTS];
    for i in [
        slot::ALLOC_BUF,
        slot::REG_MR_EX,
        slot::ALLOC_DMAH,
        slot::ALLOC_NULL_MR,
        slot::CREATE_COUNTERS,
        slot::REG_DM_MR,
        slot::ALLOC_DM,
        slot::CREATE_FLOW_ACTION_ESP,
        slot::CREATE_RWQ_IND_TABLE,
        slot::CREATE_WQ,
        slot::IBV_CREATE_FLOW,
        slot::OPEN_QP,
        slot::CREATE_SRQ_EX,
        slot::OPEN_XRCD,
    ] {
        s[i] = ptrs;
    }
    s[slot::FREE_BUF] = void;
    s[slot::ABI_PLACEHOLDER1] = void;
    s[slot::ABI_PLACEHOLDER2] = void;
    s[slot::PRIV] = 0;
    s[slot::ABI_PLACEHOLDER3] = 0;
    s[slot::QUERY_PORT] = query_port_op as *const () as usize;
    s[slot::QUERY_DEVICE_EX] = query_device_ex_op as *const () as usize;
    s[slot::CREATE_CQ_EX] = cq::create_cq_ex_op as *const () as usize;
    s[slot::CREATE_QP_EX] = qp::create_qp_ex_op as *const () as usize;
    s[slot::ALLOC_TD] = pd::alloc_td_op as *const () as usize;
    s[slot::DEALLOC_TD] = pd::dealloc_td_op as *const () as usize;
    s[slot::ALLOC_PARENT_DOMAIN] = pd::alloc_parent_domain_op as *const () as usize;
    vctx.slots = s;
    vctx.sz = core::mem::size_of::<VerbsContextV65>();

    // ibv_context_ops: 32 pointers. Compat slots are never called by modern consumers.
    let ops = &mut vctx.context.ops;
    // SAFETY: transmute of a fn item to the bindgen Option<fn> of the compatible slot
    // type; the stubs ignore their arguments (SysV ABI) and return the slot's type.
    unsafe {
        let pz: Option<unsafe extern "C" fn() -> *mut c_void> = Some(stubs::op_ptr);
        ops._compat_query_device = Some(query_device);
        ops._compat_query_port = Some(core::mem::transmute::<
            unsafe extern "C" fn(*mut v::ibv_context, u8, *mut v::ibv_port_attr) -> c_int,
            unsafe extern "C" fn(*mut v::ibv_context, u8, *mut v::_compat_ibv_port_attr) -> c_int,
        >(query_port_legacy));
        ops._compat_alloc_pd = pz;
        ops._compat_dealloc_pd = pz;
        ops._compat_reg_mr = pz;
        ops._compat_rereg_mr = pz;
        ops._compat_dereg_mr = pz;
        ops.alloc_mw = Some(stubs::alloc_mw);
        ops.bind_mw = Some(stubs::bind_mw);
        ops.dealloc_mw = Some(stubs::dealloc_mw);
        ops._compat_create_cq = pz;
        ops.poll_cq = Some(cq::poll_cq);
        ops.req_notify_cq = Some(cq::req_notify_cq);
        ops._compat_cq_event = pz;
        ops._compat_resize_cq = pz;
        ops._compat_destroy_cq = pz;
        ops._compat_create_srq = pz;
        ops._compat_modify_srq = pz;
        ops._compat_query_srq = pz;
        ops._compat_destroy_srq = pz;
        ops.post_srq_recv = Some(stubs::post_srq_recv);
        ops._compat_create_qp = pz;
        ops._compat_query_qp = pz;
        ops._compat_modify_qp = pz;
        ops._compat_destroy_qp = pz;
        ops.post_send = Some(super::post::post_send);
        ops.post_recv = Some(super::post::post_recv);
        ops._compat_create_ah = pz;
        ops._compat_destroy_ah = pz;
        ops._compat_attach_mcast = pz;
        ops._compat_detach_mcast = pz;
        ops._compat_async_event = pz;
    }
}

unsafe extern "C" fn open_device(dev: *mut v::ibv_device) -> *mut v::ibv_context {
    let Some(model) = model_of(dev) else {
        return null_with(ENODEV);
    };
    // A real pollable fd that never becomes readable: EFA dispatches no async events.
    // SAFETY: plain syscall.
    let async_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if async_fd < 0 {
        return ptr::null_mut(); // errno set by eventfd
    }
    // SAFETY: verbs_context/ibv_context are plain data (pointers, ints, a pthread mutex
    // whose all-zero pattern is PTHREAD_MUTEX_INITIALIZER on glibc).
    let mut vctx: VerbsContextV65 = unsafe { core::mem::zeroed() };
    fill_ops(&mut vctx);
    vctx.context.device = dev;
    vctx.context.cmd_fd = -1;
    vctx.context.async_fd = async_fd;
    vctx.context.num_comp_vectors = model.profile.num_comp_vectors.max(1) as c_int;
    vctx.context.abi_compat = usize::MAX as *mut c_void;
    let ctx = leak(SimContext {
        vctx,
        device: model.clone(),
    });
    // SAFETY: just allocated.
    unsafe { &mut (*ctx).vctx.context }
}
export!("IBVERBS_1.1", ibv_open_device => open_device);

unsafe extern "C" fn close_device(ctx: *mut v::ibv_context) -> c_int {
    if ctx.is_null() {
        return EINVAL;
    }
    // SAFETY: ctx came from open_device; we own the SimContext allocation.
    unsafe {
        let sim = SimContext::from_ibv(ctx) as *const SimContext as *mut SimContext;
        libc::close((*ctx).async_fd);
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_close_device => close_device);

unsafe extern "C" fn get_async_event(ctx: *mut v::ibv_context, event: *mut c_void) -> c_int {
    let _ = event;
    // EFA raises no async events: block on the (never signalled) fd like the real
    // library; with O_NONBLOCK the read fails with EAGAIN and we return -1.
    let mut buf = 0u64;
    // SAFETY: reading 8 bytes from our eventfd into a local.
    let n = unsafe { libc::read((*ctx).async_fd, &mut buf as *mut u64 as *mut c_void, 8) };
    if n < 0 {
        return -1;
    }
    // An eventfd write by someone else: nothing to report.
    super::set_errno(libc::EAGAIN);
    -1
}
export!("IBVERBS_1.1", ibv_get_async_event => get_async_event);

unsafe extern "C" fn ack_async_event(_event: *mut c_void) {}
export!("IBVERBS_1.1", ibv_ack_async_event => ack_async_event);

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

unsafe extern "C" fn query_device_ex_op(
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
unsafe extern "C" fn query_port_op(
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
unsafe extern "C" fn query_port_legacy(
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
