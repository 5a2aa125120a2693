//! Device list, open/close, device/port/GID/P_Key queries, async events.

use super::layout::{slot, VerbsContextV65, VCTX_SLOTS};
use super::objects::{SimContext, SimDevice};
use super::query::{query_device, query_device_ex_op, query_port_legacy, query_port_op};
use super::{cq, leak, null_with, pd, poll, qp, stubs};
use crate::model::{Device, Sim};
use core::ffi::{c_char, c_int, c_void};
use core::ptr;
use efa_sys::verbs as v;
use libc::{EINVAL, ENODEV};
use std::sync::{Arc, OnceLock};

/// Node type / transport of an EFA device (model §1.2).
const IBV_NODE_UNSPECIFIED: i32 = v::ibv_node_type::IBV_NODE_UNSPECIFIED;
const IBV_TRANSPORT_UNSPECIFIED: i32 = v::ibv_transport_type::IBV_TRANSPORT_UNSPECIFIED;

pub(super) fn copy_cstr(dst: &mut [c_char], s: &str) {
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
        ops.poll_cq = Some(poll::poll_cq);
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
