//! Posting: legacy `ibv_post_send`/`ibv_post_recv` and the `ibv_wr_*` session ops
//! (model §3.3–3.4). Each call translates its C arguments and hands them to the
//! provider ([`crate::provider`]), which checks the rules, writes WQEs and descriptors
//! into the rings and rings the doorbells. No allocation per call.

use super::layout::{EfadvQp, SendWrC};
use super::objects::{SimAh, SimQp};
use crate::model::{Qp, SendOp, Sge, MAX_INLINE};
use crate::provider::send::Session;
use core::ffi::{c_int, c_void};
use efa_sys::verbs as v;
use efa_sys::verbs::ibv_qp_create_send_ops_flags as ops;
use efa_sys::verbs::ibv_wr_opcode as wr_op;
use libc::EINVAL;

/// Installs the `ibv_qp_ex` ops EFA fills for `send_ops_flags` (others stay NULL).
pub fn fill_wr_ops(q: &mut v::ibv_qp_ex, flags: u64) {
    let has = |op: ops| flags & op.0 as u64 != 0;
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_send = has(ops::IBV_QP_EX_WITH_SEND).then_some(wr_send as _);
    q.wr_send_imm = has(ops::IBV_QP_EX_WITH_SEND_WITH_IMM).then_some(wr_send_imm as _);
    q.wr_rdma_read = has(ops::IBV_QP_EX_WITH_RDMA_READ).then_some(wr_rdma_read as _);
    q.wr_rdma_write = has(ops::IBV_QP_EX_WITH_RDMA_WRITE).then_some(wr_rdma_write as _);
    q.wr_rdma_write_imm =
        has(ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM).then_some(wr_rdma_write_imm as _);
}

/// A C SGE list as model SGEs (the same layout). EINVAL for a negative count or a NULL
/// list with entries.
///
/// # Safety
/// A non-NULL `list` holds `n` entries that stay valid for `'a`.
unsafe fn sges<'a>(list: *const v::ibv_sge, n: i64) -> Result<&'a [Sge], c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: Sge is repr(C) with ibv_sge's layout (asserted in model::wr); the caller
    // promises `n` entries.
    Ok(unsafe { core::slice::from_raw_parts(list.cast::<Sge>(), n as usize) })
}

/// Copies `parts` (address, length) of caller memory into `dst`, which is exactly as long
/// as all parts together.
///
/// # Safety
/// Every part with a non-zero length names that many readable bytes.
unsafe fn gather(parts: impl Iterator<Item = (*const u8, usize)>, dst: &mut [u8]) {
    let mut at = 0;
    for (addr, len) in parts {
        if len == 0 {
            continue; // a zero-length part may carry any address, even NULL
        }
        // SAFETY: the caller's part holds len readable bytes; dst has room (total).
        unsafe { core::ptr::copy_nonoverlapping(addr, dst[at..at + len].as_mut_ptr(), len) };
        at += len;
    }
}

/// Translates one legacy WR into the session (no state change on error: the caller
/// drops the WR being built).
///
/// # Safety
/// `w` is a valid `ibv_send_wr` whose SGE list and AH follow rdma-core's contract.
unsafe fn legacy_wr(s: &mut Session<'_>, q: &Qp, w: &SendWrC) -> Result<(), c_int> {
    let op = match w.opcode {
        wr_op::IBV_WR_SEND => Some(SendOp::Send),
        wr_op::IBV_WR_SEND_WITH_IMM => Some(SendOp::SendImm),
        _ => None, // EFA posts nothing else here (EINVAL after the common rules)
    };
    s.wr_legacy(q.state(), op, w.wr_id, w.send_flags, w.imm_data)?;
    let ah = w.wr_ah_or_addr as *const SimAh;
    if ah.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: a non-NULL AH of a WR is one this library created (caller contract).
    s.set_addr(unsafe { &(*ah).model }, q.pd(), w.wr_qpn_or_rkey, w.wr_qkey)?;
    // SAFETY: sg_list holds num_sge entries (caller contract).
    let list = unsafe { sges(w.sg_list, i64::from(w.num_sge)) }?;
    if w.send_flags & v::ibv_send_flags::IBV_SEND_INLINE.0 != 0 {
        if list.iter().any(|g| g.addr == 0 && g.length != 0) {
            return Err(EINVAL);
        }
        let total = list
            .iter()
            .fold(0usize, |t, g| t.saturating_add(g.length as usize));
        let parts = list
            .iter()
            .map(|g| (g.addr as *const u8, g.length as usize));
        // SAFETY: inline data is read from the caller's buffers at post time; each SGE
        // names `length` readable bytes (non-NULL when non-empty, checked above).
        s.set_inline(total, |dst| unsafe { gather(parts, dst) })?;
    } else {
        s.set_sges(list, true)?;
    }
    s.end_wr(q.sq_dev().ring())
}

/// `ibv_context_ops.post_send`: the WRs before the first bad one are posted, the bad one
/// goes to `*bad_wr` with its error.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn post_send(
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_send_wr,
    bad_wr: *mut *mut v::ibv_send_wr,
) -> c_int {
    // SAFETY: qp is ours.
    let q = &unsafe { SimQp::from_ibv(qp) }.model;
    let mut s = q.sq_provider().begin();
    let mut cur = wr as *mut SendWrC;
    let mut failed = None;
    while !cur.is_null() {
        // SAFETY: the caller's WR list.
        let w = unsafe { &*cur };
        // SAFETY: forwarded caller contract for this WR.
        if let Err(e) = unsafe { legacy_wr(&mut s, q, w) } {
            s.drop_wr();
            failed = Some((cur, e));
            break;
        }
        cur = w.next;
    }
    let r = s.commit(q.sq_dev().ring(), || {
        q.sq_doorbell();
    });
    match (failed, r) {
        (Some((at, e)), _) => {
            if !bad_wr.is_null() {
                // SAFETY: caller out pointer.
                unsafe { *bad_wr = at as *mut v::ibv_send_wr };
            }
            e
        }
        (None, Err(e)) => e,
        (None, Ok(())) => 0,
    }
}

/// `ibv_context_ops.post_recv`: first bad WR → `*bad_wr`, the ones before it posted.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn post_recv(
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_recv_wr,
    bad_wr: *mut *mut v::ibv_recv_wr,
) -> c_int {
    // SAFETY: qp is ours.
    let q = &unsafe { SimQp::from_ibv(qp) }.model;
    let mut cur = wr;
    let list = core::iter::from_fn(|| {
        if cur.is_null() {
            return None;
        }
        // SAFETY: the caller's WR list; sg_list holds num_sge entries.
        let w = unsafe { &*cur };
        cur = w.next;
        // SAFETY: as above.
        Some(unsafe { sges(w.sg_list, i64::from(w.num_sge)) }.map(|g| (w.wr_id, g)))
    });
    match q.rq_provider().post(q.rq_dev().ring(), q.state(), list) {
        Ok(()) => 0,
        Err((i, e)) => {
            if !bad_wr.is_null() {
                let mut at = wr;
                for _ in 0..i {
                    // SAFETY: the first i WRs were walked above, so they are list members.
                    at = unsafe { (*at).next };
                }
                // SAFETY: caller out pointer.
                unsafe { *bad_wr = at };
            }
            e
        }
    }
}

// --- ibv_wr_* session ------------------------------------------------------------------

/// The QP and its open session. Only valid between `wr_start` and `wr_complete/abort`,
/// from the thread that called `wr_start` (the rdma-core contract).
///
/// # Safety
/// `qp` is ours and the caller is inside its session.
#[inline]
unsafe fn session<'a>(qp: *mut v::ibv_qp_ex) -> (&'a Qp, Session<'a>) {
    // SAFETY: qp is ours (caller contract).
    let q = &unsafe { SimQp::from_ex(qp) }.model;
    // SAFETY: the caller holds the session opened by wr_start on this thread.
    (q, unsafe { q.sq_provider().resume() })
}

/// An opcode call: finishes the previous WR, starts one (`wr_id`/`wr_flags` are read
/// now, as EFA does), sets the RDMA address.
///
/// # Safety
/// Inside the caller's session.
unsafe fn open_wr(qp: *mut v::ibv_qp_ex, op: SendOp, imm_be: u32, remote: Option<(u64, u32)>) {
    // SAFETY: inside the caller's session.
    let (q, mut s) = unsafe { session(qp) };
    if s.error() != 0 {
        return;
    }
    // SAFETY: wr_id / wr_flags are plain fields the caller set before this call.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    let r = s
        .end_wr(q.sq_dev().ring())
        .and_then(|()| s.wr(q.state(), op, wr_id, flags, imm_be, false))
        .and_then(|()| match remote {
            Some((addr, rkey)) => s.set_remote(addr, rkey),
            None => Ok(()),
        });
    s.latch(r);
}

unsafe extern "C" fn wr_start(qp: *mut v::ibv_qp_ex) {
    // SAFETY: qp is ours. The session stays open (its lock held) until complete/abort.
    let _ = unsafe { SimQp::from_ex(qp) }.model.sq_provider().begin();
}

unsafe extern "C" fn wr_complete(qp: *mut v::ibv_qp_ex) -> c_int {
    // SAFETY: inside the caller's session.
    let (q, s) = unsafe { session(qp) };
    match s.commit(q.sq_dev().ring(), || {
        q.sq_doorbell();
    }) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

unsafe extern "C" fn wr_abort(qp: *mut v::ibv_qp_ex) {
    // SAFETY: inside the caller's session.
    let (_, s) = unsafe { session(qp) };
    s.abort();
}

unsafe extern "C" fn wr_send(qp: *mut v::ibv_qp_ex) {
    // SAFETY: forwarded contract.
    unsafe { open_wr(qp, SendOp::Send, 0, None) }
}
unsafe extern "C" fn wr_send_imm(qp: *mut v::ibv_qp_ex, imm: u32) {
    // SAFETY: forwarded contract.
    unsafe { open_wr(qp, SendOp::SendImm, imm, None) }
}
unsafe extern "C" fn wr_rdma_read(qp: *mut v::ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: forwarded contract.
    unsafe { open_wr(qp, SendOp::RdmaRead, 0, Some((addr, rkey))) }
}
unsafe extern "C" fn wr_rdma_write(qp: *mut v::ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: forwarded contract.
    unsafe { open_wr(qp, SendOp::RdmaWrite, 0, Some((addr, rkey))) }
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut v::ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: forwarded contract.
    unsafe { open_wr(qp, SendOp::RdmaWriteImm, imm, Some((addr, rkey))) }
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut v::ibv_qp_ex,
    ah: *mut v::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: inside the caller's session.
    let (q, mut s) = unsafe { session(qp) };
    if s.error() != 0 {
        return;
    }
    let r = if ah.is_null() {
        Err(EINVAL)
    } else {
        // SAFETY: a non-NULL AH is one this library created (caller contract).
        let ah = unsafe { &(*(ah as *const SimAh)).model };
        s.set_addr(ah, q.pd(), remote_qpn, remote_qkey)
    };
    s.latch(r);
}

unsafe extern "C" fn wr_set_sge(qp: *mut v::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: inside the caller's session.
    let (_, mut s) = unsafe { session(qp) };
    if s.error() == 0 {
        let r = s.set_sges(&[Sge { addr, length, lkey }], false);
        s.latch(r);
    }
}

unsafe extern "C" fn wr_set_sge_list(
    qp: *mut v::ibv_qp_ex,
    num_sge: usize,
    list: *const v::ibv_sge,
) {
    // SAFETY: inside the caller's session.
    let (_, mut s) = unsafe { session(qp) };
    if s.error() != 0 {
        return;
    }
    let n = i64::try_from(num_sge).unwrap_or(i64::MAX);
    // SAFETY: list holds num_sge entries (caller contract).
    let r = unsafe { sges(list, n) }.and_then(|g| s.set_sges(g, true));
    s.latch(r);
}

/// Sets inline data from caller buffers.
///
/// # Safety
/// Inside the caller's session; every part with a non-zero length names that many
/// readable bytes.
unsafe fn set_inline(qp: *mut v::ibv_qp_ex, parts: &[(*const u8, usize)]) {
    // SAFETY: inside the caller's session.
    let (_, mut s) = unsafe { session(qp) };
    if s.error() != 0 {
        return;
    }
    if parts.iter().any(|&(addr, len)| len != 0 && addr.is_null()) {
        return s.latch(Err(EINVAL));
    }
    // Saturating: lengths come from C and must not overflow (and panic) here.
    let total = parts.iter().fold(0usize, |t, p| t.saturating_add(p.1));
    // SAFETY: forwarded caller contract; set_inline only calls this with `total` bytes.
    let r = s.set_inline(total, |dst| unsafe { gather(parts.iter().copied(), dst) });
    s.latch(r);
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut v::ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: forwarded contract.
    unsafe { set_inline(qp, &[(addr as *const u8, length)]) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut v::ibv_qp_ex,
    num_buf: usize,
    list: *const v::ibv_data_buf,
) {
    if num_buf > MAX_INLINE || (num_buf > 0 && list.is_null()) {
        // SAFETY: inside the caller's session.
        let (_, mut s) = unsafe { session(qp) };
        return s.latch(Err(EINVAL));
    }
    let mut bufs = arrayvec::ArrayVec::<(*const u8, usize), MAX_INLINE>::new();
    for i in 0..num_buf {
        // SAFETY: list holds num_buf entries.
        let b = unsafe { &*list.add(i) };
        bufs.push((b.addr as *const u8, b.length));
    }
    // SAFETY: forwarded contract.
    unsafe { set_inline(qp, &bufs) }
}

/// `efadv_qp->wr_set_processing_hints`: the hint bits of the WQE being built.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: `efa` comes from
/// `efadv_qp_from_ibv_qp_ex` of a QP of this library, inside its `ibv_wr_*` session.
pub unsafe extern "C" fn wr_set_processing_hints(efa: *mut EfadvQp, hints: u32) {
    // SAFETY: efa is the efadv_qp of one of our QPs (caller contract).
    let sim = unsafe { SimQp::from_efa(efa) };
    // SAFETY: inside the caller's session.
    let mut s = unsafe { sim.model.sq_provider().resume() };
    if s.error() == 0 {
        let bits = if hints & efa_sys::efadv::EFADV_WR_PROCESSING_HINT_BURST_PPS_SENSITIVE != 0 {
            efa_sys::io::PROCESSING_HINT_BURST_PPS_SENSITIVE
        } else {
            0
        };
        let r = s.set_hints(bits);
        s.latch(r);
    }
}
