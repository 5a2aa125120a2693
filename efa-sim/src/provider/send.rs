//! A QP's send queue, provider side (libefa's `efa_sq`): checks each WR against the
//! posting rules (model §3.3), encodes it as a send WQE straight into the device's SQ
//! ring, and rings the doorbell for every `max_batch` WQEs when the session commits.
//! WQEs of an open session sit beyond the doorbell, invisible to the device, so aborting
//! only rewinds the producer position.

pub use super::session::Session;
use super::{RetireRing, SpinLock, WridIds, WridPool};
use crate::model::{Errno, QpState, QpType, SendOp};
use crate::ring::wqe::WqeBuf;
use crate::ring::Cursor;
use core::cell::UnsafeCell;
use efa_sys::io::{
    send_op_type, TX_DESC_INLINE_MAX_SIZE, TX_DESC_INLINE_MAX_SIZE_128, TX_DESC_NUM_BUFS,
    TX_DESC_NUM_RDMA_BUFS, TX_DESC_SIZE_128,
};
use efa_sys::verbs::{ibv_qp_create_send_ops_flags as ops, ibv_send_flags};
use libc::{EINVAL, ENOMEM};

const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;
const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;

/// The AH number no AH has: the device completes a WQE naming it with INVALID_AH.
pub use crate::ring::cqe::NO_AH;

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

/// The WR being built in a session (its WQE is [`SendState::wqe`]).
#[derive(Clone, Copy)]
pub(super) struct Current {
    pub(super) op: SendOp,
    /// Producer position before this WR (its ring slot and phase).
    pub(super) before: Cursor,
    pub(super) addressed: bool,
}

pub(super) struct SendState {
    pub(super) pc: Cursor,
    pub(super) posted: u32,
    pub(super) completed: u32,
    pub(super) pool: WridPool,
    pub(super) gen: u16,
    pub(super) session_start: Cursor,
    pub(super) pending: u32,
    pub(super) err: Errno,
    pub(super) cur: Option<Current>,
    /// The WQE of the WR being built (only its first `wqe_size` bytes are used), kept
    /// here rather than moved with every call.
    pub(super) wqe: WqeBuf,
}

/// A send queue's provider state.
pub struct SendQueue {
    pub(super) lock: SpinLock,
    st: UnsafeCell<SendState>,
    pub(super) ids: WridIds,
    /// Retired request ids not yet back in the pool (the poller does not take the lock).
    retired: RetireRing,
    pub(super) cfg: SqConfig,
}

// SAFETY: `st` is only reached through a `Session` (the lock is held) or under the lock;
// `ids` and `retired` are atomics; `cfg` is immutable.
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
                wqe: WqeBuf::default(),
            }),
            ids: WridIds::new(cfg.entries, gen),
            retired: RetireRing::new(cfg.entries),
            cfg,
        }
    }

    /// The queue's configuration.
    pub fn config(&self) -> &SqConfig {
        &self.cfg
    }

    /// Opens a session (`wr_start`, or one `ibv_post_send` list): takes the queue lock,
    /// held until [`Session::commit`] or [`Session::abort`].
    #[inline]
    pub fn begin(&self) -> Session<'_> {
        self.lock.lock();
        // SAFETY: the lock is held now and until the session ends.
        let s = unsafe { &mut *self.st.get() };
        s.session_start = s.pc;
        s.pending = 0;
        s.err = 0;
        s.cur = None;
        Session::new(self, s)
    }

    /// The session this thread opened with [`SendQueue::begin`].
    ///
    /// # Safety
    /// This thread called `begin` on this queue and has not ended that session since, and
    /// no other `Session` of it is alive (the `ibv_wr_*` contract: one session per QP, all
    /// calls from the thread that opened it).
    pub unsafe fn resume(&self) -> Session<'_> {
        // SAFETY: the caller holds the session (and so the lock), see above.
        Session::new(self, unsafe { &mut *self.st.get() })
    }

    /// The `wr_id` a completion's request id stands for (None: an earlier generation).
    #[inline]
    pub fn wr_id(&self, req_id: u16) -> Option<u64> {
        self.ids.wr_id(req_id)
    }

    /// Frees the slot of a retired completion: handed to the next poster, without the
    /// queue lock (callers are serialised by the send CQ's poll lock).
    #[inline(always)]
    pub fn retire(&self, req_id: u16) {
        if !self.retired.push(req_id) {
            self.lock.lock();
            // SAFETY: the lock is held.
            let s = unsafe { &mut *self.st.get() };
            self.drain_retired(s);
            self.free(s, req_id);
            self.lock.unlock();
        }
    }

    /// Puts the slot of `req_id` back (the lock is held): only a WR of the current
    /// generation that is still taken.
    #[inline(always)]
    fn free(&self, s: &mut SendState, req_id: u16) {
        if self.ids.is_current(req_id) && s.pool.put(self.ids.index(req_id)) {
            s.completed = s.completed.wrapping_add(1);
        }
    }

    /// Takes back every retired slot (the lock is held).
    fn drain_retired(&self, s: &mut SendState) {
        if !self.retired.is_empty() {
            self.retired.drain(|id| self.free(s, id));
        }
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
        self.retired.drain(|_| {});
        s.pool.reset();
        s.gen = s.gen.wrapping_add(1);
        self.ids.set_gen(s.gen);
        self.lock.unlock();
    }

    /// The posting rules 1–4 of model §3.3 for one more WR (`extra` already staged).
    #[inline]
    pub(super) fn admit(
        &self,
        s: &mut SendState,
        state: QpState,
        flags: u32,
        extra: u32,
    ) -> Result<(), Errno> {
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
            // Looks full: slots retired since the last look come back first.
            self.drain_retired(s);
            if s.posted.wrapping_sub(s.completed) + extra >= self.cfg.entries {
                return Err(ENOMEM);
            }
        }
        Ok(())
    }

    /// Whether this QP may post `op`: legacy `ibv_post_send` only SEND/SEND_IMM; RDMA
    /// needs SRD, the device capability and (with send ops flags) the op's `WITH_*` bit.
    #[inline]
    pub(super) fn allowed(&self, op: SendOp, legacy: bool) -> Result<(), Errno> {
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
    pub(super) fn inline_room(&self, op: SendOp) -> usize {
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
        // SAFETY: the lock is held.
        let s = unsafe { &mut *self.st.get() };
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
