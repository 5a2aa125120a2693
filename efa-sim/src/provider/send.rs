//! A QP's send queue, provider side (libefa's `efa_sq`): checks each WR against the
//! posting rules (model §3.3), encodes it as a send WQE straight into the device's SQ
//! ring, and rings the doorbell for every `max_batch` WQEs when the session commits.
//! WQEs of an open session sit beyond the doorbell, invisible to the device, so aborting
//! only rewinds the producer position.

use super::{SpinLock, WridIds, WridPool};
use crate::model::{Ah, Errno, Pd, QpState, QpType, SendOp, Sge};
use crate::ring::wqe::{WqeBuf, DATA, RDMA_LOCAL};
use crate::ring::{Cursor, Ring};
use core::cell::UnsafeCell;
use efa_sys::io::{
    send_op_type, TX_DESC_INLINE_MAX_SIZE, TX_DESC_INLINE_MAX_SIZE_128, TX_DESC_NUM_BUFS,
    TX_DESC_NUM_RDMA_BUFS, TX_DESC_SIZE_128, TX_META_DESC_COMP_REQ_MASK, TX_META_DESC_FIRST_MASK,
    TX_META_DESC_HAS_IMM_MASK, TX_META_DESC_INLINE_MSG_MASK, TX_META_DESC_LAST_MASK,
    TX_META_DESC_META_DESC_MASK, TX_META_DESC_PHASE_MASK, TX_META_DESC_PROCESSING_HINTS_MASK,
};
use efa_sys::verbs::{ibv_qp_create_send_ops_flags as ops, ibv_send_flags};
use libc::{EINVAL, ENOMEM};

const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;
const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;

/// The AH number no AH has: the device completes a WQE naming it with INVALID_AH.
pub const NO_AH: u16 = 0xffff;

/// Fixed properties of a send queue, decided at QP creation.
#[derive(Clone, Copy, Debug)]
pub struct SqConfig {
    /// Ring slots (a power of two).
    pub entries: u32,
    /// 64 or 128.
    pub wqe_size: usize,
    /// Most WQEs per doorbell.
    pub max_batch: u32,
    /// The QP's `max_send_sge`.
    pub max_send_sge: u32,
    /// The QP's `max_inline_data`.
    pub max_inline: u32,
    /// Created with `EFADV_QP_FLAGS_INLINE_WRITE`.
    pub inline_write: bool,
    /// Every WR signaled implicitly.
    pub sq_sig_all: bool,
    /// UD or SRD.
    pub qp_type: QpType,
    /// `IBV_QP_EX_WITH_*` when created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub send_ops: Option<u64>,
    /// The device has the RDMA read capability.
    pub rdma_read: bool,
    /// The device has the RDMA write capability.
    pub rdma_write: bool,
}

/// The WR being built in a session.
struct Current {
    wqe: WqeBuf,
    op: SendOp,
    /// Producer position before this WR (its ring slot and phase).
    before: Cursor,
    addressed: bool,
}

struct SendState {
    pc: Cursor,
    posted: u32,
    completed: u32,
    pool: WridPool,
    gen: u16,
    session_start: Cursor,
    pending: u32,
    err: Errno,
    cur: Option<Current>,
}

/// A send queue's provider state.
pub struct SendQueue {
    lock: SpinLock,
    st: UnsafeCell<SendState>,
    ids: WridIds,
    cfg: SqConfig,
}

// SAFETY: `st` is only reached through a `Session` (the lock is held) or by `retire`
// under the lock; `ids` is atomics; `cfg` is immutable.
unsafe impl Sync for SendQueue {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl Send for SendQueue {}

/// Whether `op` is an RDMA operation.
pub fn is_rdma(op: SendOp) -> bool {
    matches!(
        op,
        SendOp::RdmaRead | SendOp::RdmaWrite | SendOp::RdmaWriteImm
    )
}

/// The WQE op type of `op`.
pub fn op_type(op: SendOp) -> u8 {
    match op {
        SendOp::Send | SendOp::SendImm => send_op_type::SEND,
        SendOp::RdmaRead => send_op_type::RDMA_READ,
        SendOp::RdmaWrite | SendOp::RdmaWriteImm => send_op_type::RDMA_WRITE,
    }
}

impl SendQueue {
    /// An empty queue of generation `gen`.
    pub fn new(cfg: SqConfig, gen: u16) -> SendQueue {
        SendQueue {
            lock: SpinLock::new(),
            st: UnsafeCell::new(SendState {
                pc: Cursor::default(),
                posted: 0,
                completed: 0,
                pool: WridPool::new(cfg.entries),
                gen,
                session_start: Cursor::default(),
                pending: 0,
                err: 0,
                cur: None,
            }),
            ids: WridIds::new(cfg.entries, gen),
            cfg,
        }
    }

    /// The queue's configuration.
    pub fn config(&self) -> &SqConfig {
        &self.cfg
    }

    /// Opens a session (`wr_start`, or one `ibv_post_send` list): takes the queue lock,
    /// held until [`Session::commit`] or [`Session::abort`].
    pub fn begin(&self) -> Session<'_> {
        self.lock.lock();
        // SAFETY: the lock is held now and until the session ends.
        let s = unsafe { &mut *self.st.get() };
        s.session_start = s.pc;
        s.pending = 0;
        s.err = 0;
        s.cur = None;
        Session { q: self, s }
    }

    /// The session this thread opened with [`SendQueue::begin`].
    ///
    /// # Safety
    /// This thread called `begin` on this queue and has not ended that session since, and
    /// no other `Session` of it is alive (the `ibv_wr_*` contract: one session per QP, all
    /// calls from the thread that opened it).
    pub unsafe fn resume(&self) -> Session<'_> {
        // SAFETY: the caller holds the session (and so the lock), see above.
        Session {
            q: self,
            s: unsafe { &mut *self.st.get() },
        }
    }

    /// The `wr_id` a completion's request id stands for (None: an earlier generation).
    #[inline]
    pub fn wr_id(&self, req_id: u16) -> Option<u64> {
        self.ids.wr_id(req_id)
    }

    /// Frees the slot of a retired completion.
    pub fn retire(&self, req_id: u16) {
        self.lock.lock();
        // SAFETY: the lock is held.
        let s = unsafe { &mut *self.st.get() };
        s.completed = s.completed.wrapping_add(1);
        s.pool.put(self.ids.index(req_id));
        self.lock.unlock();
    }

    /// Forgets every WR (a reset): producer position 0, new generation. The device resets
    /// its consumer position at the same time (rdma-core resets its ring indices on
    /// RESET; the phase carries on, as in libefa).
    pub fn reset(&self) {
        self.lock.lock();
        // SAFETY: the lock is held.
        let s = unsafe { &mut *self.st.get() };
        s.pc.count = 0;
        s.posted = 0;
        s.completed = 0;
        s.pool.reset();
        s.gen = s.gen.wrapping_add(1);
        self.ids.set_gen(s.gen);
        self.lock.unlock();
    }

    /// The posting rules 1–4 of model §3.3 for one more WR (`extra` already staged).
    fn admit(&self, s: &SendState, state: QpState, flags: u32, extra: u32) -> Result<(), Errno> {
        if !matches!(state, QpState::Rts | QpState::Sqd) {
            return Err(EINVAL);
        }
        if !self.cfg.sq_sig_all && flags & SIGNALED == 0 {
            return Err(EINVAL);
        }
        if flags & !(SIGNALED | INLINE) != 0 {
            return Err(EINVAL);
        }
        if s.posted.wrapping_sub(s.completed) + extra >= self.cfg.entries {
            return Err(ENOMEM);
        }
        Ok(())
    }

    /// Whether this QP may post `op`: legacy `ibv_post_send` only SEND/SEND_IMM; RDMA
    /// needs SRD, the device capability and (with send ops flags) the op's `WITH_*` bit.
    fn allowed(&self, op: SendOp, legacy: bool) -> Result<(), Errno> {
        let c = &self.cfg;
        let with = match op {
            SendOp::Send => ops::IBV_QP_EX_WITH_SEND,
            SendOp::SendImm => ops::IBV_QP_EX_WITH_SEND_WITH_IMM,
            SendOp::RdmaRead => ops::IBV_QP_EX_WITH_RDMA_READ,
            SendOp::RdmaWrite => ops::IBV_QP_EX_WITH_RDMA_WRITE,
            SendOp::RdmaWriteImm => ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        }
        .0 as u64;
        if is_rdma(op) {
            let cap = if op == SendOp::RdmaRead {
                c.rdma_read
            } else {
                c.rdma_write
            };
            if legacy || c.qp_type != QpType::Srd || !cap {
                return Err(EINVAL);
            }
        }
        if !legacy && c.send_ops.is_some_and(|f| f & with == 0) {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Inline bytes a WQE for `op` can carry on this QP (0: inline not allowed).
    fn inline_room(&self, op: SendOp) -> usize {
        let c = &self.cfg;
        let area = if c.wqe_size == TX_DESC_SIZE_128 {
            TX_DESC_INLINE_MAX_SIZE_128
        } else {
            TX_DESC_INLINE_MAX_SIZE
        };
        let allowed = match op {
            SendOp::Send | SendOp::SendImm => true,
            SendOp::RdmaWrite | SendOp::RdmaWriteImm => c.inline_write,
            SendOp::RdmaRead => false,
        };
        if allowed {
            area.min(c.max_inline as usize)
        } else {
            0
        }
    }

    /// Checks a complete WR against every posting rule without posting it (`extra` WRs
    /// of the caller's batch come before it): what a session would answer.
    pub fn check(&self, wr: &WrCheck<'_>, state: QpState, extra: u32) -> Result<(), Errno> {
        self.lock.lock();
        // SAFETY: the lock is held; only read.
        let s = unsafe { &*self.st.get() };
        let r = self.admit(s, state, wr.flags, extra);
        self.lock.unlock();
        r?;
        self.allowed(wr.op, false)?;
        match wr.payload {
            CheckPayload::Sges(n) => {
                let max = if is_rdma(wr.op) {
                    TX_DESC_NUM_RDMA_BUFS
                } else {
                    (self.cfg.max_send_sge as usize).min(TX_DESC_NUM_BUFS)
                };
                if n > max {
                    return Err(EINVAL);
                }
            }
            CheckPayload::Inline(len) => {
                if len > self.inline_room(wr.op) {
                    return Err(EINVAL);
                }
            }
        }
        if is_rdma(wr.op) && !wr.has_remote {
            return Err(EINVAL);
        }
        Ok(())
    }
}

/// What [`SendQueue::check`] needs to know about a WR.
pub struct WrCheck<'a> {
    /// Opcode.
    pub op: SendOp,
    /// `IBV_SEND_*` flags.
    pub flags: u32,
    /// Payload shape.
    pub payload: CheckPayload,
    /// RDMA remote address given.
    pub has_remote: bool,
    /// Ties the check to the caller's WR.
    pub _wr: core::marker::PhantomData<&'a ()>,
}

/// The payload shape of a WR under check.
pub enum CheckPayload {
    /// This many SGEs.
    Sges(usize),
    /// This many inline bytes.
    Inline(usize),
}

/// An open session of a send queue (the queue lock is held).
pub struct Session<'a> {
    q: &'a SendQueue,
    s: &'a mut SendState,
}

impl Session<'_> {
    /// The session's latched error (0 = none).
    pub fn error(&self) -> Errno {
        self.s.err
    }

    /// Latches the first error of an `ibv_wr_*` session.
    pub fn latch(&mut self, r: Result<(), Errno>) {
        if let Err(e) = r {
            if self.s.err == 0 {
                self.s.err = e;
            }
        }
    }

    /// Starts an `ibv_post_send` WR: `op` is None for an opcode EFA does not post there
    /// (EINVAL after the common rules, like libefa).
    pub fn wr_legacy(
        &mut self,
        state: QpState,
        op: Option<SendOp>,
        wr_id: u64,
        flags: u32,
        imm_be: u32,
    ) -> Result<(), Errno> {
        match op {
            Some(op) => self.wr(state, op, wr_id, flags, imm_be, true),
            None => {
                self.q.admit(self.s, state, flags, 0)?;
                Err(EINVAL)
            }
        }
    }

    /// Starts a WR: the posting rules, then a WQE with its request id in the next ring
    /// slot (`legacy`: `ibv_post_send`, SEND/SEND_IMM only). `imm_be` is the verbs
    /// immediate (network order); the WQE carries it in host order.
    pub fn wr(
        &mut self,
        state: QpState,
        op: SendOp,
        wr_id: u64,
        flags: u32,
        imm_be: u32,
        legacy: bool,
    ) -> Result<(), Errno> {
        let (q, s) = (self.q, &mut *self.s);
        q.admit(s, state, flags, 0)?;
        q.allowed(op, legacy)?;
        let mut w = WqeBuf::default();
        w.or_ctrl1(TX_META_DESC_META_DESC_MASK | op_type(op));
        if matches!(op, SendOp::SendImm | SendOp::RdmaWriteImm) {
            w.set_imm(u32::from_be(imm_be));
            w.or_ctrl1(TX_META_DESC_HAS_IMM_MASK);
        }
        w.or_ctrl2(
            (s.pc.phase & TX_META_DESC_PHASE_MASK)
                | TX_META_DESC_FIRST_MASK
                | TX_META_DESC_LAST_MASK
                | TX_META_DESC_COMP_REQ_MASK,
        );
        let idx = s.pool.take();
        w.set_req_id(q.ids.record(idx, wr_id));
        let before = s.pc;
        s.posted = s.posted.wrapping_add(1);
        s.pc.advance(q.cfg.entries);
        s.pending += 1;
        s.cur = Some(Current {
            wqe: w,
            op,
            before,
            addressed: false,
        });
        Ok(())
    }

    fn cur(&mut self) -> Result<&mut Current, Errno> {
        self.s.cur.as_mut().ok_or(EINVAL)
    }

    /// The opcode of the WR being built.
    pub fn op(&self) -> Option<SendOp> {
        self.s.cur.as_ref().map(|c| c.op)
    }

    /// Sets the RDMA remote address (`wr_rdma_*` opcodes).
    pub fn set_remote(&mut self, addr: u64, rkey: u32) -> Result<(), Errno> {
        self.cur()?.wqe.set_remote(addr, rkey);
        Ok(())
    }

    /// Sets the destination. An AH that is destroyed or belongs to another PD is sent as
    /// [`NO_AH`]: the device completes the WQE with INVALID_AH, as it would for a bad AH
    /// number.
    pub fn set_addr(&mut self, ah: &Ah, pd: &Pd, qpn: u32, qkey: u32) -> Result<(), Errno> {
        let ahn = if ah.usable_in(pd) { ah.number() } else { NO_AH };
        let c = self.cur()?;
        c.wqe.set_dest(qpn as u16, ahn, qkey);
        c.addressed = true;
        Ok(())
    }

    /// Sets the local buffers. `counted`: `wr_set_sge_list`/`ibv_post_send` (at most the
    /// QP's `max_send_sge`, or 1 for RDMA); `wr_set_sge` has no count check.
    pub fn set_sges(&mut self, sges: &[Sge], counted: bool) -> Result<(), Errno> {
        let max_send = self.q.cfg.max_send_sge as usize;
        let c = self.cur()?;
        let rdma = is_rdma(c.op);
        let fits = if rdma {
            TX_DESC_NUM_RDMA_BUFS
        } else {
            TX_DESC_NUM_BUFS
        };
        let limit = if counted && !rdma {
            max_send.min(fits)
        } else {
            fits
        };
        if sges.len() > limit {
            return Err(EINVAL);
        }
        let w = &mut c.wqe;
        // The last payload call wins: clear what an earlier one wrote (not the RDMA
        // remote address the opcode call set).
        w.0[if rdma { RDMA_LOCAL } else { DATA }..].fill(0);
        w.clear_ctrl1(TX_META_DESC_INLINE_MSG_MASK);
        w.set_length(sges.len() as u16);
        if rdma {
            let total = sges.iter().fold(0u32, |t, g| t.wrapping_add(g.length));
            if let Some(g) = sges.first() {
                w.set_rdma_local(g.addr, g.lkey, g.length);
            }
            w.set_remote_len(total);
        } else {
            for (i, g) in sges.iter().enumerate() {
                w.set_buf(i, g.addr, g.lkey, g.length);
            }
        }
        Ok(())
    }

    /// Sets inline data of `len` bytes, copied in by `fill` (given exactly `len` bytes of
    /// the WQE's inline area). SEND always; RDMA write only with `INLINE_WRITE`; never
    /// more than the QP's `max_inline_data`.
    pub fn set_inline(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), Errno> {
        let q = self.q;
        let c = self.cur()?;
        if len > q.inline_room(c.op) {
            return Err(EINVAL);
        }
        let rdma = is_rdma(c.op);
        let at = if rdma { RDMA_LOCAL } else { DATA };
        let w = &mut c.wqe;
        w.0[at..].fill(0);
        fill(&mut w.0[at..at + len]);
        w.or_ctrl1(TX_META_DESC_INLINE_MSG_MASK);
        w.set_length(len as u16);
        if rdma {
            w.set_remote_len(len as u32);
        }
        Ok(())
    }

    /// Sets the processing hints (`efadv_wr_set_processing_hints`).
    pub fn set_hints(&mut self, hints: u8) -> Result<(), Errno> {
        self.cur()?
            .wqe
            .set_ctrl3(TX_META_DESC_PROCESSING_HINTS_MASK, hints);
        Ok(())
    }

    /// Finishes the WR being built: it must have a destination. Writes it into its ring
    /// slot (beyond the doorbell until the session commits).
    pub fn end_wr(&mut self, ring: &Ring) -> Result<(), Errno> {
        let size = self.q.cfg.wqe_size;
        let Some(c) = self.s.cur.as_ref() else {
            return Ok(());
        };
        if !c.addressed {
            return Err(EINVAL);
        }
        ring.write_slot(u32::from(c.before.count), &c.wqe.0[..size]);
        self.s.cur = None;
        Ok(())
    }

    /// Drops the WR being built (it failed a check): its slot and request id go back.
    pub fn drop_wr(&mut self) {
        if let Some(c) = self.s.cur.take() {
            let s = &mut *self.s;
            s.pc = c.before;
            s.posted = s.posted.wrapping_sub(1);
            s.pool.untake(1);
            s.pending -= 1;
        }
    }

    /// Ends the session and makes its WRs visible to the device: the doorbell is written
    /// for every `max_batch` WQEs and the device is told after each (`ring_doorbell`).
    /// With a latched error nothing is posted and the error is returned.
    pub fn commit(mut self, ring: &Ring, mut ring_doorbell: impl FnMut()) -> Result<(), Errno> {
        let mut r = self.end_wr(ring);
        if self.s.err != 0 {
            r = Err(self.s.err);
        }
        if r.is_err() {
            self.drop_wr();
            self.rewind();
        } else {
            let s = &mut *self.s;
            let batch = self.q.cfg.max_batch.max(1);
            let mut done = 0;
            while done < s.pending {
                done += (s.pending - done).min(batch);
                ring.doorbell()
                    .write(u32::from(s.session_start.count.wrapping_add(done as u16)));
                ring_doorbell();
            }
            s.pending = 0;
            s.session_start = s.pc;
        }
        self.q.lock.unlock();
        r
    }

    /// Ends the session without posting anything (`wr_abort`).
    pub fn abort(mut self) {
        self.drop_wr();
        self.rewind();
        self.q.lock.unlock();
    }

    /// Takes back every WR of the session.
    fn rewind(&mut self) {
        let s = &mut *self.s;
        s.posted = s.posted.wrapping_sub(s.pending);
        s.pool.untake(s.pending);
        s.pc = s.session_start;
        s.pending = 0;
        s.cur = None;
    }
}
