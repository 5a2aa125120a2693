//! Completion queues (legacy and extended) and completion channels; the poll protocols
//! are in [`super::poll`].

use super::layout::{EfadvCq, EfadvCqInitAttr};
use super::objects::{PdKind, SimChannel, SimContext, SimCq, SimPd};
use super::poll::*;
use super::{leak, null_with};
use crate::model::CqOptions;
use core::ffi::{c_int, c_void};
use core::ptr;
use core::sync::atomic::{AtomicU32, Ordering};
use efa_sys::efadv::{EFADV_WC_EX_WITH_IS_UNSOLICITED, EFADV_WC_EX_WITH_SGID};
use efa_sys::verbs as v;
use efa_sys::verbs::ibv_create_cq_wc_flags as wcf;
use libc::{EBUSY, EINVAL, EOPNOTSUPP};
use std::collections::VecDeque;
use std::sync::Mutex;

/// `IBV_WC_STANDARD_FLAGS`: the `IBV_WC_EX_WITH_*` bits EFA supports.
const WC_STANDARD_FLAGS: u64 = (wcf::IBV_WC_EX_WITH_BYTE_LEN.0
    | wcf::IBV_WC_EX_WITH_IMM.0
    | wcf::IBV_WC_EX_WITH_QP_NUM.0
    | wcf::IBV_WC_EX_WITH_SRC_QP.0
    | wcf::IBV_WC_EX_WITH_SLID.0
    | wcf::IBV_WC_EX_WITH_SL.0
    | wcf::IBV_WC_EX_WITH_DLID_PATH_BITS.0) as u64;
const CQ_INIT_ATTR_MASK_FLAGS: u32 = v::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0;
const CQ_INIT_ATTR_MASK_PD: u32 = v::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_PD.0;
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 =
    v::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_SINGLE_THREADED.0;

unsafe fn create(
    ctx: *mut v::ibv_context,
    attr: &v::ibv_cq_init_attr_ex,
    efa: &EfadvCqInitAttr,
) -> *mut v::ibv_cq_ex {
    // SAFETY: ctx is ours (caller contract).
    let sim = unsafe { SimContext::from_ibv(ctx) };
    let profile = &sim.device.profile;
    if attr.wc_flags & !WC_STANDARD_FLAGS != 0 {
        return null_with(EOPNOTSUPP);
    }
    if attr.comp_mask & !(CQ_INIT_ATTR_MASK_FLAGS | CQ_INIT_ATTR_MASK_PD) != 0 {
        return null_with(EOPNOTSUPP);
    }
    if attr.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0
        && attr.flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0
    {
        return null_with(EOPNOTSUPP);
    }
    if attr.comp_mask & CQ_INIT_ATTR_MASK_PD != 0 {
        let pd = attr.parent_domain as *mut SimPd;
        // SAFETY: a non-NULL pd is ours.
        if pd.is_null() || !matches!(unsafe { &(*pd).kind }, PdKind::Parent { .. }) {
            return null_with(EINVAL);
        }
    }
    if !attr.channel.is_null() && !profile.cq_notifications {
        return null_with(EOPNOTSUPP);
    }
    if attr.comp_vector >= profile.num_comp_vectors.max(1) {
        return null_with(EINVAL);
    }
    let opts = CqOptions {
        with_sgid: efa.wc_flags & EFADV_WC_EX_WITH_SGID != 0,
        with_unsolicited: efa.wc_flags & EFADV_WC_EX_WITH_IS_UNSOLICITED != 0,
    };
    let (model, depth) = match sim.device.create_cq(attr.cqe, opts) {
        Ok(x) => x,
        Err(e) => return null_with(e),
    };
    // SAFETY: plain data; zeroed pthread mutex/cond are the static initialisers.
    let mut ex: v::ibv_cq_ex = unsafe { core::mem::zeroed() };
    ex.context = ctx;
    ex.channel = attr.channel;
    ex.cq_context = attr.cq_context;
    ex.cqe = depth as c_int;
    let wf = attr.wc_flags;
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_vendor_err);
    ex.read_wc_flags = Some(read_wc_flags);
    let has = |f: wcf| wf & f.0 as u64 != 0;
    ex.read_byte_len = has(wcf::IBV_WC_EX_WITH_BYTE_LEN).then_some(read_byte_len as _);
    ex.read_imm_data = has(wcf::IBV_WC_EX_WITH_IMM).then_some(read_imm_data as _);
    ex.read_qp_num = has(wcf::IBV_WC_EX_WITH_QP_NUM).then_some(read_qp_num as _);
    ex.read_src_qp = has(wcf::IBV_WC_EX_WITH_SRC_QP).then_some(read_src_qp as _);
    ex.read_slid = has(wcf::IBV_WC_EX_WITH_SLID).then_some(read_slid as _);
    ex.read_sl = has(wcf::IBV_WC_EX_WITH_SL).then_some(read_sl as _);
    ex.read_dlid_path_bits =
        has(wcf::IBV_WC_EX_WITH_DLID_PATH_BITS).then_some(read_dlid_path_bits as _);
    let channel = attr.channel as *mut SimChannel;
    let cq = leak(SimCq {
        ex,
        efa: EfadvCq {
            comp_mask: 0,
            wc_read_sgid: opts.with_sgid.then_some(wc_read_sgid as _),
            wc_is_unsolicited: opts.with_unsolicited.then_some(wc_is_unsolicited as _),
        },
        model,
        channel,
        read_as_send: profile.read_completes_as_send,
    });
    if !channel.is_null() {
        // SAFETY: channel is ours; it outlives the CQ (destroy_comp_channel is EBUSY while used).
        unsafe {
            (*channel).users.fetch_add(1, Ordering::AcqRel);
            (*channel).ibv.refcnt += 1;
        }
        let (cq_addr, ch_addr) = (cq as usize, channel as usize);
        // SAFETY: cq is alive until destroy_cq, which destroys the model CQ (dropping
        // this notifier) before freeing.
        unsafe { &*cq }.model.set_notifier(Box::new(move || {
            // SAFETY: see above; the channel outlives the CQ.
            let ch = unsafe { &*(ch_addr as *const SimChannel) };
            if let Ok(mut q) = ch.fired.lock() {
                q.push_back(cq_addr);
            }
            let one = 1u64;
            // SAFETY: write 8 bytes to the channel's eventfd.
            unsafe { libc::write(ch.ibv.fd, &one as *const u64 as *const c_void, 8) };
        }));
    }
    cq as *mut v::ibv_cq_ex
}

/// `verbs_context->create_cq_ex`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn create_cq_ex_op(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_cq_init_attr_ex,
) -> *mut v::ibv_cq_ex {
    if ctx.is_null() || attr.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: attr is a caller struct.
    unsafe { create(ctx, &*attr, &EfadvCqInitAttr::default()) }
}

unsafe extern "C" fn create_cq(
    ctx: *mut v::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut v::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut v::ibv_cq {
    if ctx.is_null() || cqe < 0 || comp_vector < 0 {
        return null_with(EINVAL);
    }
    // SAFETY: plain data.
    let mut attr: v::ibv_cq_init_attr_ex = unsafe { core::mem::zeroed() };
    attr.cqe = cqe as u32;
    attr.cq_context = cq_context;
    attr.channel = channel;
    attr.comp_vector = comp_vector as u32;
    attr.wc_flags = WC_STANDARD_FLAGS;
    // SAFETY: ctx is ours.
    unsafe { create(ctx, &attr, &EfadvCqInitAttr::default()) as *mut v::ibv_cq }
}
export!("IBVERBS_1.1", ibv_create_cq => create_cq);

unsafe extern "C" fn efadv_create_cq(
    ctx: *mut v::ibv_context,
    attr: *mut v::ibv_cq_init_attr_ex,
    efa_attr: *mut EfadvCqInitAttr,
    inlen: u32,
) -> *mut v::ibv_cq_ex {
    if ctx.is_null() || attr.is_null() || efa_attr.is_null() {
        return null_with(EINVAL);
    }
    let inlen = inlen as usize;
    let ours = core::mem::size_of::<EfadvCqInitAttr>();
    if inlen <= core::mem::offset_of!(EfadvCqInitAttr, wc_flags) {
        return null_with(EINVAL);
    }
    // SAFETY: efa_attr holds inlen bytes.
    let bytes = unsafe { core::slice::from_raw_parts(efa_attr as *const u8, inlen) };
    if inlen > ours && bytes[ours..].iter().any(|b| *b != 0) {
        return null_with(EINVAL);
    }
    let mut efa = EfadvCqInitAttr::default();
    // SAFETY: copy the caller's min(inlen, ours) bytes into a zeroed struct.
    unsafe {
        ptr::copy_nonoverlapping(
            efa_attr as *const u8,
            &mut efa as *mut _ as *mut u8,
            inlen.min(ours),
        )
    };
    if efa.comp_mask != 0 {
        return null_with(EINVAL);
    }
    // The capability checks are the model's (CQ creation); unknown bits are not.
    if efa.wc_flags & !(EFADV_WC_EX_WITH_SGID | EFADV_WC_EX_WITH_IS_UNSOLICITED) != 0 {
        return null_with(EOPNOTSUPP);
    }
    if efa.flags != 0 {
        // EXT_MEM_DMABUF: CQ rings are not emulated.
        return null_with(EOPNOTSUPP);
    }
    // SAFETY: attr is a caller struct.
    unsafe { create(ctx, &*attr, &efa) }
}
export!("EFA_1.2", efadv_create_cq => efadv_create_cq);

unsafe extern "C" fn efadv_cq_from_ibv_cq_ex(cq: *mut v::ibv_cq_ex) -> *mut EfadvCq {
    // SAFETY: cq is ours.
    unsafe { core::ptr::addr_of_mut!((*(cq as *mut SimCq)).efa) }
}
export!("EFA_1.2", efadv_cq_from_ibv_cq_ex => efadv_cq_from_ibv_cq_ex);

unsafe extern "C" fn destroy_cq(cq: *mut v::ibv_cq) -> c_int {
    if cq.is_null() {
        return EINVAL;
    }
    let sim = cq as *mut SimCq;
    // SAFETY: cq came from create; we own it.
    unsafe {
        if let Err(e) = (*sim).model.destroy() {
            return e;
        }
        let ch = (*sim).channel;
        if !ch.is_null() {
            // The notifier must not reach this CQ or its channel any more.
            (*sim).model.set_notifier(Box::new(|| {}));
            if let Ok(mut q) = (*ch).fired.lock() {
                q.retain(|c| *c != sim as usize);
            }
            (*ch).users.fetch_sub(1, Ordering::AcqRel);
            (*ch).ibv.refcnt -= 1;
        }
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.1", ibv_destroy_cq => destroy_cq);

unsafe extern "C" fn create_comp_channel(ctx: *mut v::ibv_context) -> *mut v::ibv_comp_channel {
    if ctx.is_null() {
        return null_with(EINVAL);
    }
    // SAFETY: plain syscall. Semaphore mode: one read = one CQ event.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return ptr::null_mut();
    }
    leak(SimChannel {
        ibv: v::ibv_comp_channel {
            context: ctx,
            fd,
            refcnt: 0,
        },
        fired: Mutex::new(VecDeque::new()),
        users: AtomicU32::new(0),
    }) as *mut v::ibv_comp_channel
}
export!("IBVERBS_1.0", ibv_create_comp_channel => create_comp_channel);

unsafe extern "C" fn destroy_comp_channel(ch: *mut v::ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return EINVAL;
    }
    let sim = ch as *mut SimChannel;
    // SAFETY: ch came from create_comp_channel.
    unsafe {
        if (*sim).users.load(Ordering::Acquire) != 0 {
            return EBUSY;
        }
        libc::close((*sim).ibv.fd);
        drop(Box::from_raw(sim));
    }
    0
}
export!("IBVERBS_1.0", ibv_destroy_comp_channel => destroy_comp_channel);

unsafe extern "C" fn get_cq_event(
    ch: *mut v::ibv_comp_channel,
    cq_out: *mut *mut v::ibv_cq,
    ctx_out: *mut *mut c_void,
) -> c_int {
    if ch.is_null() {
        super::set_errno(EINVAL);
        return -1;
    }
    let sim = ch as *mut SimChannel;
    let mut n = 0u64;
    // SAFETY: blocking (or O_NONBLOCK, as the caller set) read of our eventfd.
    if unsafe { libc::read((*sim).ibv.fd, &mut n as *mut u64 as *mut c_void, 8) } != 8 {
        return -1;
    }
    // SAFETY: sim is ours.
    let cq = match unsafe { (*sim).fired.lock() } {
        Ok(mut q) => q.pop_front(),
        Err(_) => None,
    };
    let Some(cq) = cq else {
        super::set_errno(libc::EAGAIN);
        return -1;
    };
    let cq = cq as *mut v::ibv_cq;
    // SAFETY: cq is alive (destroy purges the queue): the event moves its doorbell's
    // command sequence number on (libefa's efa_cq_event).
    unsafe { SimCq::from_ibv(cq) }.model.event_delivered();
    // SAFETY: out pointers from the caller; cq is alive (destroy purges the queue).
    unsafe {
        if !cq_out.is_null() {
            *cq_out = cq;
        }
        if !ctx_out.is_null() {
            *ctx_out = (*cq).cq_context;
        }
    }
    0
}
export!("IBVERBS_1.1", ibv_get_cq_event => get_cq_event);

unsafe extern "C" fn ack_cq_events(cq: *mut v::ibv_cq, nevents: u32) {
    if cq.is_null() {
        return;
    }
    // SAFETY: cq is ours; the counter is only written here (consumer-serialised in rdma-core
    // under cq->mutex; we use an atomic view of the same u32).
    unsafe {
        let p = &(*cq).comp_events_completed as *const u32 as *const AtomicU32;
        (*p).fetch_add(nevents, Ordering::AcqRel);
    }
}
export!("IBVERBS_1.1", ibv_ack_cq_events => ack_cq_events);

/// `ibv_context_ops.req_notify_cq`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn req_notify_cq(cq: *mut v::ibv_cq, solicited_only: c_int) -> c_int {
    if solicited_only != 0 {
        return EOPNOTSUPP;
    }
    // SAFETY: cq is ours.
    unsafe { SimCq::from_ibv(cq) }.model.arm();
    0
}
