//! Posting: legacy `ibv_post_send`/`ibv_post_recv` and the `ibv_wr_*` session ops
//! (model §3.3–3.4). No allocation per call: sessions stage into a Vec sized at QP
//! creation; errors inside a session are latched and returned by `wr_complete`.

use super::layout::{EfadvQp, SendWrC};
use super::objects::{PartialWr, SimAh, SimQp};
use crate::model::{Payload, RecvWr, SendOp, SendWr, Sge, MAX_INLINE, MAX_RECV_SGE, MAX_SEND_SGE};
use arrayvec::ArrayVec;
use core::ffi::{c_int, c_void};
use efa_sys::verbs as v;
use libc::EINVAL;

/// WRs of one legacy `ibv_post_send` list posted as one model batch.
const LEGACY_BATCH: usize = 16;
const WR_SEND: u32 = 2;
const WR_SEND_WITH_IMM: u32 = 3;
const SEND_INLINE: u32 = 1 << 3;
const WITH_RDMA_WRITE: u64 = 1 << 0;
const WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
const WITH_SEND: u64 = 1 << 2;
const WITH_SEND_WITH_IMM: u64 = 1 << 3;
const WITH_RDMA_READ: u64 = 1 << 4;

/// Installs the `ibv_qp_ex` ops EFA fills for `send_ops_flags` (others stay NULL).
pub fn fill_wr_ops(q: &mut v::ibv_qp_ex, flags: u64) {
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_send = (flags & WITH_SEND != 0).then_some(wr_send as _);
    q.wr_send_imm = (flags & WITH_SEND_WITH_IMM != 0).then_some(wr_send_imm as _);
    q.wr_rdma_read = (flags & WITH_RDMA_READ != 0).then_some(wr_rdma_read as _);
    q.wr_rdma_write = (flags & WITH_RDMA_WRITE != 0).then_some(wr_rdma_write as _);
    q.wr_rdma_write_imm = (flags & WITH_RDMA_WRITE_WITH_IMM != 0).then_some(wr_rdma_write_imm as _);
}

/// `ibv_context_ops.post_send`: SEND / SEND_WITH_IMM only; first bad WR → `*bad_wr`.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn post_send(
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_send_wr,
    bad_wr: *mut *mut v::ibv_send_wr,
) -> c_int {
    let (wr, bad_wr) = (wr as *mut SendWrC, bad_wr as *mut *mut SendWrC);
    // SAFETY: qp is ours.
    let sim = unsafe { SimQp::from_ibv(qp) };
    // Valid WRs of the list are posted in groups (one model batch: one datagram
    // per destination), as rdma-core rings one doorbell per list.
    let mut staged = ArrayVec::<SendWr, LEGACY_BATCH>::new();
    let mut group_head = wr;
    let fail = |at: *mut SendWrC, e: c_int| {
        if !bad_wr.is_null() {
            // SAFETY: caller out pointer.
            unsafe { *bad_wr = at };
        }
        e
    };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the caller's WR list.
        let w = unsafe { &*cur };
        if staged.is_full() {
            if let Err(e) = sim.model.post_send_batch(&staged) {
                return fail(group_head, e);
            }
            staged.clear();
            group_head = cur;
        }
        // SAFETY: as above; sg_list holds num_sge entries.
        let r = unsafe { legacy_send_wr(sim, w) }
            .and_then(|swr| sim.model.check_send(&swr, staged.len()).map(|()| swr));
        match r {
            Ok(swr) => staged.push(swr),
            Err(e) => {
                // The WRs before the bad one are posted, as by rdma-core.
                if !staged.is_empty() {
                    if let Err(e) = sim.model.post_send_batch(&staged) {
                        return fail(group_head, e);
                    }
                }
                return fail(cur, e);
            }
        }
        cur = w.next;
    }
    if !staged.is_empty() {
        if let Err(e) = sim.model.post_send_batch(&staged) {
            return fail(group_head, e);
        }
    }
    0
}

unsafe fn legacy_send_wr(sim: &SimQp, w: &SendWrC) -> Result<SendWr, c_int> {
    let op = match w.opcode {
        WR_SEND => SendOp::Send,
        WR_SEND_WITH_IMM => SendOp::SendImm,
        _ => return Err(EINVAL),
    };
    if w.num_sge < 0 {
        return Err(EINVAL);
    }
    let n = w.num_sge as usize;
    let sges: &[v::ibv_sge] = if n == 0 || w.sg_list.is_null() {
        &[]
    } else {
        // SAFETY: sg_list holds num_sge entries (caller contract).
        unsafe { core::slice::from_raw_parts(w.sg_list, n) }
    };
    let payload = if w.send_flags & SEND_INLINE != 0 {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(sim.caps.max_inline_data) || total as usize > MAX_INLINE {
            return Err(EINVAL);
        }
        let mut data = ArrayVec::<u8, MAX_INLINE>::new();
        for s in sges {
            if s.length == 0 {
                continue; // a zero-length SGE may carry any address, even NULL
            }
            if s.addr == 0 {
                return Err(EINVAL);
            }
            // SAFETY: inline data is read from the caller's buffers at post time; the
            // SGE names `length` readable bytes at a non-NULL `addr` (caller contract).
            let bytes =
                unsafe { core::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
            data.try_extend_from_slice(bytes).map_err(|_| EINVAL)?;
        }
        Payload::Inline(data)
    } else {
        if n > sim.caps.max_send_sge as usize || n > MAX_SEND_SGE {
            return Err(EINVAL);
        }
        Payload::Sges(
            sges.iter()
                .map(|s| Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                })
                .collect(),
        )
    };
    let ah = w.wr_ah_or_addr as *mut SimAh;
    if ah.is_null() {
        return Err(EINVAL);
    }
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        send_flags: w.send_flags,
        imm_be: w.imm_data,
        // SAFETY: the AH is ours (caller contract).
        ah: unsafe { (*ah).model.clone() },
        remote_qpn: w.wr_qpn_or_rkey,
        remote_qkey: w.wr_qkey,
        payload,
        remote: None,
    })
}

/// `ibv_context_ops.post_recv`: first bad WR → `*bad_wr`.
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
    let sim = unsafe { SimQp::from_ibv(qp) };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the caller's WR list.
        let w = unsafe { &*cur };
        let r = if w.num_sge < 0 || w.num_sge as usize > MAX_RECV_SGE {
            Err(EINVAL)
        } else {
            let sges: &[v::ibv_sge] = if w.num_sge == 0 || w.sg_list.is_null() {
                &[]
            } else {
                // SAFETY: sg_list holds num_sge entries.
                unsafe { core::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }
            };
            let rwr = RecvWr {
                wr_id: w.wr_id,
                sges: sges
                    .iter()
                    .map(|s| Sge {
                        addr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    })
                    .collect(),
            };
            sim.model.post_recv(&rwr)
        };
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: caller out pointer.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

// --- ibv_wr_* session ------------------------------------------------------------------

/// The QP and its session. Only valid between `wr_start` and `wr_complete/abort`
/// (the SQ lock is held by this thread), which is the rdma-core contract.
#[inline]
unsafe fn session<'a>(qp: *mut v::ibv_qp_ex) -> (&'a SimQp, &'a mut super::objects::Session) {
    // SAFETY: qp is ours and the caller holds the session lock (see above).
    unsafe {
        let sim = &*(qp as *const SimQp);
        (sim, &mut *sim.session.get())
    }
}

/// Moves the WR under construction into the staged list, validating it.
fn finish_current(sim: &SimQp, s: &mut super::objects::Session) {
    let Some(p) = s.cur.take() else { return };
    if s.err != 0 {
        return;
    }
    let Some(ah) = p.ah else {
        s.err = EINVAL;
        return;
    };
    let wr = SendWr {
        wr_id: p.wr_id,
        op: p.op,
        send_flags: p.flags,
        imm_be: p.imm_be,
        ah,
        remote_qpn: p.remote_qpn,
        remote_qkey: p.remote_qkey,
        payload: p.payload,
        remote: p.remote,
    };
    if let Err(e) = sim.model.check_send(&wr, s.staged.len()) {
        s.err = e;
        return;
    }
    s.staged.push(wr);
}

#[inline]
unsafe fn open_wr(qp: *mut v::ibv_qp_ex, op: SendOp, imm_be: u32, remote: Option<(u64, u32)>) {
    // SAFETY: inside the caller's session.
    let (sim, s) = unsafe { session(qp) };
    finish_current(sim, s);
    if s.err != 0 {
        return;
    }
    // SAFETY: wr_id / wr_flags are plain fields the caller set before this call.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    s.cur = Some(PartialWr {
        wr_id,
        op,
        flags,
        imm_be,
        ah: None,
        remote_qpn: 0,
        remote_qkey: 0,
        payload: Payload::Sges(ArrayVec::new()),
        remote,
    });
}

unsafe extern "C" fn wr_start(qp: *mut v::ibv_qp_ex) {
    // SAFETY: qp is ours.
    let sim = unsafe { &*(qp as *const SimQp) };
    sim.sq_lock.lock();
    // SAFETY: lock just taken.
    let s = unsafe { &mut *sim.session.get() };
    s.staged.clear();
    s.cur = None;
    s.err = 0;
}

unsafe extern "C" fn wr_complete(qp: *mut v::ibv_qp_ex) -> c_int {
    // SAFETY: inside the caller's session.
    let (sim, s) = unsafe { session(qp) };
    finish_current(sim, s);
    let r = if s.err != 0 {
        s.err
    } else {
        match sim.model.post_send_batch(&s.staged) {
            Ok(()) => 0,
            Err(e) => e,
        }
    };
    s.staged.clear();
    s.err = 0;
    sim.sq_lock.unlock();
    r
}

unsafe extern "C" fn wr_abort(qp: *mut v::ibv_qp_ex) {
    // SAFETY: inside the caller's session.
    let (sim, s) = unsafe { session(qp) };
    s.staged.clear();
    s.cur = None;
    s.err = 0;
    sim.sq_lock.unlock();
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

/// The WR the last opcode call opened, or None (latching EINVAL) if there is none.
#[inline]
fn current(s: &mut super::objects::Session) -> Option<&mut PartialWr> {
    if s.err != 0 {
        return None;
    }
    if s.cur.is_none() {
        s.err = EINVAL;
        return None;
    }
    s.cur.as_mut()
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut v::ibv_qp_ex,
    ah: *mut v::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: inside the caller's session.
    let (_, s) = unsafe { session(qp) };
    if ah.is_null() {
        if s.err == 0 {
            s.err = EINVAL;
        }
        return;
    }
    if let Some(p) = current(s) {
        // SAFETY: the AH is ours.
        p.ah = Some(unsafe { (*(ah as *mut SimAh)).model.clone() });
        p.remote_qpn = remote_qpn;
        p.remote_qkey = remote_qkey;
    }
}

fn is_rdma(op: SendOp) -> bool {
    matches!(
        op,
        SendOp::RdmaRead | SendOp::RdmaWrite | SendOp::RdmaWriteImm
    )
}

unsafe extern "C" fn wr_set_sge(qp: *mut v::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: inside the caller's session.
    let (_, s) = unsafe { session(qp) };
    if let Some(p) = current(s) {
        let mut v = ArrayVec::new();
        v.push(Sge { addr, length, lkey });
        p.payload = Payload::Sges(v);
    }
}

unsafe extern "C" fn wr_set_sge_list(
    qp: *mut v::ibv_qp_ex,
    num_sge: usize,
    list: *const v::ibv_sge,
) {
    // SAFETY: inside the caller's session.
    let (sim, s) = unsafe { session(qp) };
    let max = sim.caps.max_send_sge as usize;
    let Some(p) = current(s) else { return };
    let limit = if is_rdma(p.op) {
        1
    } else {
        max.min(MAX_SEND_SGE)
    };
    if num_sge > limit || (num_sge > 0 && list.is_null()) {
        s.err = EINVAL;
        return;
    }
    let sges: &[v::ibv_sge] = if num_sge == 0 {
        &[]
    } else {
        // SAFETY: list holds num_sge entries.
        unsafe { core::slice::from_raw_parts(list, num_sge) }
    };
    p.payload = Payload::Sges(
        sges.iter()
            .map(|g| Sge {
                addr: g.addr,
                length: g.length,
                lkey: g.lkey,
            })
            .collect(),
    );
}

/// Inline payload allowed for this WR? (SEND always; RDMA WRITE only with INLINE_WRITE.)
fn inline_allowed(sim: &SimQp, op: SendOp) -> bool {
    match op {
        SendOp::Send | SendOp::SendImm => true,
        SendOp::RdmaWrite | SendOp::RdmaWriteImm => sim.inline_write,
        SendOp::RdmaRead => false,
    }
}

unsafe fn set_inline(qp: *mut v::ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    // SAFETY: inside the caller's session.
    let (sim, s) = unsafe { session(qp) };
    let max = sim.caps.max_inline_data as usize;
    let Some(p) = current(s) else { return };
    // Saturating: lengths come from C and must not overflow (and panic) here.
    let total = bufs.iter().fold(0usize, |t, b| t.saturating_add(b.1));
    if !inline_allowed(sim, p.op) || total > max || total > MAX_INLINE {
        s.err = EINVAL;
        return;
    }
    let mut data = ArrayVec::<u8, MAX_INLINE>::new();
    if bufs.iter().any(|&(addr, len)| len != 0 && addr.is_null()) {
        s.err = EINVAL;
        return;
    }
    for &(addr, len) in bufs {
        if len == 0 {
            continue;
        }
        // SAFETY: the caller's buffer holds len bytes; inline data is copied now.
        let bytes = unsafe { core::slice::from_raw_parts(addr, len) };
        // Cannot fail: total <= MAX_INLINE.
        let _ = data.try_extend_from_slice(bytes);
    }
    p.payload = Payload::Inline(data);
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
    if num_buf > MAX_INLINE {
        // SAFETY: inside the caller's session.
        let (_, s) = unsafe { session(qp) };
        if s.err == 0 {
            s.err = EINVAL;
        }
        return;
    }
    let mut bufs = ArrayVec::<(*const u8, usize), MAX_INLINE>::new();
    for i in 0..num_buf {
        // SAFETY: list holds num_buf entries.
        let b = unsafe { &*list.add(i) };
        bufs.push((b.addr as *const u8, b.length));
    }
    // SAFETY: forwarded contract.
    unsafe { set_inline(qp, &bufs) }
}

/// `efadv_qp->wr_set_processing_hints`: only sets WQE hint bits on hardware; nothing
/// observable to emulate.
///
/// # Safety
/// Called through rdma-core's contract for this entry point: object pointers come
/// from this library, buffers are valid for the documented sizes.
pub unsafe extern "C" fn wr_set_processing_hints(_qp: *mut EfadvQp, _hints: u32) {}
