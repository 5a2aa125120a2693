//! Both poll protocols (model §1.4): legacy `ibv_poll_cq` and the `ibv_cq_ex` session
//! (`start_poll`, `next_poll`, `end_poll`, the `read_*` functions, `efadv_wc_read_sgid`,
//! `efadv_wc_is_unsolicited`), on the provider's CQ poller.

use super::layout::{EfadvCq, Wc};
use super::objects::SimCq;
use crate::model::{Completion, CompletionKind, EfaStatus};
use core::ffi::c_int;
use core::ptr;
use efa_sys::verbs as v;
use efa_sys::verbs::ibv_wc_opcode as op;
use libc::{EINVAL, ENOENT};

const IBV_WC_WITH_IMM: u32 = v::ibv_wc_flags::IBV_WC_WITH_IMM.0;

/// `ibv_wc_status` for a raw EFA status (model §4).
#[inline]
pub fn wc_status(s: EfaStatus) -> u32 {
    efa_sys::vendor::to_ibv_wc_status(u32::from(s))
}

/// `ibv_wc_opcode` of a completion.
#[inline]
pub(super) fn wc_opcode(c: &Completion, read_as_send: bool) -> u32 {
    match c.kind {
        CompletionKind::Send => op::IBV_WC_SEND,
        CompletionKind::RdmaRead if read_as_send => op::IBV_WC_SEND,
        CompletionKind::RdmaRead => op::IBV_WC_RDMA_READ,
        CompletionKind::RdmaWrite => op::IBV_WC_RDMA_WRITE,
        CompletionKind::Recv => op::IBV_WC_RECV,
        CompletionKind::RecvRdmaWithImm => op::IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

/// `ibv_context_ops.poll_cq`: legacy `ibv_wc` fill rules (model §1.4).
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut v::ibv_wc) -> c_int {
    // SAFETY: cq is ours.
    let sim = unsafe { SimCq::from_ibv(cq) };
    let wc = wc as *mut Wc;
    let mut i = 0usize;
    let n = sim.model.poll(n.max(0) as usize, |c| {
        // SAFETY: the caller's array holds n entries and `poll` hands out at most n;
        // only the fields EFA writes are touched.
        let w = unsafe { &mut *wc.add(i) };
        i += 1;
        w.wr_id = c.wr_id;
        w.status = wc_status(c.status);
        w.opcode = wc_opcode(c, sim.read_as_send);
        w.vendor_err = u32::from(c.status);
        w.qp_num = c.qp_num;
        w.wc_flags = 0;
        if c.is_recv() {
            w.byte_len = c.byte_len;
            w.src_qp = c.src_qp;
            w.sl = 0;
            w.slid = c.slid;
            if let Some(imm) = c.imm_be {
                w.imm_data = imm;
                w.wc_flags = IBV_WC_WITH_IMM;
            }
        }
    });
    n as c_int
}

/// Puts the cursor's completion into the `ibv_cq_ex` plain fields; ENOENT without one.
///
/// The fields are written through `cq`, the consumer's own pointer: never through a
/// pointer derived from a `&SimCq`, which the compiler may take for memory that does not
/// change (an optimised build then dropped the writes, and every polled `wr_id` read 0).
///
/// # Safety
/// `cq` is ours and the poll lock is held by this thread (session protocol).
#[inline]
unsafe fn publish(cq: *mut v::ibv_cq_ex, c: Option<Completion>) -> c_int {
    match c {
        Some(c) => {
            // SAFETY: status/wr_id are plain fields of our CQ, written only under the poll
            // lock (the caller holds it); `cq` is valid (caller contract).
            unsafe {
                (*cq).status = wc_status(c.status);
                (*cq).wr_id = c.wr_id;
            }
            0
        }
        None => ENOENT,
    }
}

pub(super) unsafe extern "C" fn start_poll(
    cq: *mut v::ibv_cq_ex,
    attr: *mut v::ibv_poll_cq_attr,
) -> c_int {
    // SAFETY: attr is NULL or a caller struct.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return EINVAL;
    }
    // SAFETY: cq is ours.
    let sim = unsafe { SimCq::from_ex(cq) };
    let p = sim.model.poller();
    p.lock();
    // SAFETY: the poll lock is held; the poller belongs to this CQ.
    let c = unsafe { p.next(&sim.model).copied() };
    if c.is_none() {
        p.unlock();
        return ENOENT;
    }
    // SAFETY: poll lock held; cq is ours.
    unsafe { publish(cq, c) }
}

pub(super) unsafe extern "C" fn next_poll(cq: *mut v::ibv_cq_ex) -> c_int {
    // SAFETY: cq is ours; the caller holds the session from start_poll.
    let sim = unsafe { SimCq::from_ex(cq) };
    let p = sim.model.poller();
    // SAFETY: the poll lock is held by the caller's session.
    unsafe {
        p.retire(&sim.model);
        let c = p.next(&sim.model).copied();
        publish(cq, c)
    }
}

pub(super) unsafe extern "C" fn end_poll(cq: *mut v::ibv_cq_ex) {
    // SAFETY: cq is ours; session held.
    let sim = unsafe { SimCq::from_ex(cq) };
    let p = sim.model.poller();
    // SAFETY: the poll lock is held by the caller's session.
    unsafe {
        if p.current().is_some() {
            p.retire(&sim.model);
            p.ring_doorbell(&sim.model);
        }
    }
    p.unlock();
}

/// The completion under the cursor (valid between a successful start/next_poll and the
/// next call); zeros when read outside a session (a consumer bug) rather than a crash.
///
/// # Safety
/// `cq` is ours; the caller is inside a successful poll session.
#[inline]
unsafe fn cur<'a>(cq: *mut v::ibv_cq_ex) -> (&'a SimCq, Completion) {
    // SAFETY: cq is ours; the caller holds the poll lock (session).
    unsafe {
        let sim = SimCq::from_ex(cq);
        let c = sim.model.poller().current().copied().unwrap_or(EMPTY);
        (sim, c)
    }
}

/// What the read functions report outside a session.
const EMPTY: Completion = Completion {
    wr_id: 0,
    status: 0,
    kind: CompletionKind::Send,
    byte_len: 0,
    imm_be: None,
    qp_num: 0,
    src_qp: 0,
    slid: 0,
    unsolicited: false,
    sgid: None,
};

pub(super) unsafe extern "C" fn read_opcode(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    let (sim, c) = unsafe { cur(cq) };
    wc_opcode(&c, sim.read_as_send)
}
pub(super) unsafe extern "C" fn read_vendor_err(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    u32::from(unsafe { cur(cq) }.1.status)
}
pub(super) unsafe extern "C" fn read_byte_len(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    let c = unsafe { cur(cq) }.1;
    if c.is_recv() {
        c.byte_len
    } else {
        0
    }
}
pub(super) unsafe extern "C" fn read_imm_data(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { cur(cq) }.1.imm_be.unwrap_or(0)
}
pub(super) unsafe extern "C" fn read_qp_num(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    unsafe { cur(cq) }.1.qp_num
}
pub(super) unsafe extern "C" fn read_src_qp(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    let c = unsafe { cur(cq) }.1;
    if c.is_recv() {
        c.src_qp
    } else {
        0
    }
}
pub(super) unsafe extern "C" fn read_wc_flags(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    let c = unsafe { cur(cq) }.1;
    if c.is_recv() && c.imm_be.is_some() {
        IBV_WC_WITH_IMM
    } else {
        0
    }
}
pub(super) unsafe extern "C" fn read_slid(cq: *mut v::ibv_cq_ex) -> u32 {
    // SAFETY: forwarded contract.
    let c = unsafe { cur(cq) }.1;
    if c.is_recv() {
        u32::from(c.slid)
    } else {
        0
    }
}
pub(super) unsafe extern "C" fn read_sl(_cq: *mut v::ibv_cq_ex) -> u8 {
    0
}
pub(super) unsafe extern "C" fn read_dlid_path_bits(_cq: *mut v::ibv_cq_ex) -> u8 {
    0
}

#[inline]
unsafe fn cq_of_efa<'a>(efa: *mut EfadvCq) -> &'a SimCq {
    // SAFETY: efa is the `efa` member of a SimCq (handed out by efadv_cq_from_ibv_cq_ex).
    unsafe { &*((efa as *mut u8).sub(core::mem::offset_of!(SimCq, efa)) as *const SimCq) }
}

pub(super) unsafe extern "C" fn wc_read_sgid(efa: *mut EfadvCq, sgid: *mut v::ibv_gid) -> c_int {
    // SAFETY: efa is ours; inside a poll session.
    let sim = unsafe { cq_of_efa(efa) };
    // SAFETY: poll lock held by the caller's session.
    match unsafe { sim.model.poller().current() }.and_then(|c| c.sgid) {
        Some(g) if !sgid.is_null() => {
            // SAFETY: sgid points to 16 bytes.
            unsafe { ptr::copy_nonoverlapping(g.as_ptr(), sgid as *mut u8, 16) };
            0
        }
        _ => -ENOENT,
    }
}

pub(super) unsafe extern "C" fn wc_is_unsolicited(efa: *mut EfadvCq) -> bool {
    // SAFETY: efa is ours; inside a poll session.
    let sim = unsafe { cq_of_efa(efa) };
    // SAFETY: poll lock held by the caller's session.
    unsafe { sim.model.poller().current() }.is_some_and(|c| c.unsolicited)
}
