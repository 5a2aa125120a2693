//! An open `ibv_wr_*` session (or one `ibv_post_send` list) of a send queue: builds WQEs
//! in the next ring slots (beyond the doorbell, invisible to the device), latches the
//! first error, and on commit rings the doorbell every `max_batch` WQEs.

use super::send::{is_rdma, op_type, Current, SendQueue, SendState, NO_AH};
use crate::model::{Ah, Errno, Pd, QpState, SendOp, Sge};
use crate::ring::wqe::{WqeBuf, DATA, RDMA_LOCAL};
use crate::ring::Ring;
use efa_sys::io::{
    TX_DESC_NUM_BUFS, TX_DESC_NUM_RDMA_BUFS, TX_META_DESC_COMP_REQ_MASK, TX_META_DESC_FIRST_MASK,
    TX_META_DESC_HAS_IMM_MASK, TX_META_DESC_INLINE_MSG_MASK, TX_META_DESC_LAST_MASK,
    TX_META_DESC_META_DESC_MASK, TX_META_DESC_PHASE_MASK, TX_META_DESC_PROCESSING_HINTS_MASK,
};
use libc::EINVAL;

/// An open session of a send queue (the queue lock is held).
pub struct Session<'a> {
    q: &'a SendQueue,
    s: &'a mut SendState,
}

impl<'a> Session<'a> {
    pub(super) fn new(q: &'a SendQueue, s: &'a mut SendState) -> Session<'a> {
        Session { q, s }
    }

    /// The session's latched error (0 = none).
    #[inline]
    pub fn error(&self) -> Errno {
        self.s.err
    }

    /// Latches the first error of an `ibv_wr_*` session.
    #[inline]
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
    #[inline(always)]
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
        let w = &mut s.wqe;
        w.clear(q.cfg.wqe_size);
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
            op,
            before,
            addressed: false,
        });
        Ok(())
    }

    /// The WR being built and its WQE.
    #[inline]
    fn cur(&mut self) -> Result<(&mut Current, &mut WqeBuf), Errno> {
        let s = &mut *self.s;
        Ok((s.cur.as_mut().ok_or(EINVAL)?, &mut s.wqe))
    }

    /// The opcode of the WR being built.
    pub fn op(&self) -> Option<SendOp> {
        self.s.cur.as_ref().map(|c| c.op)
    }

    /// Sets the RDMA remote address (`wr_rdma_*` opcodes).
    #[inline]
    pub fn set_remote(&mut self, addr: u64, rkey: u32) -> Result<(), Errno> {
        self.cur()?.1.set_remote(addr, rkey);
        Ok(())
    }

    /// Sets the destination. An AH that is destroyed or belongs to another PD is sent as
    /// [`NO_AH`]: the device completes the WQE with INVALID_AH, as it would for a bad AH
    /// number.
    #[inline]
    pub fn set_addr(&mut self, ah: &Ah, pd: &Pd, qpn: u32, qkey: u32) -> Result<(), Errno> {
        let ahn = if ah.usable_in(pd) { ah.number() } else { NO_AH };
        let (c, w) = self.cur()?;
        w.set_dest(qpn as u16, ahn, qkey);
        c.addressed = true;
        Ok(())
    }

    /// Sets the local buffers. `counted`: `wr_set_sge_list`/`ibv_post_send` (at most the
    /// QP's `max_send_sge`, or 1 for RDMA); `wr_set_sge` has no count check.
    #[inline]
    pub fn set_sges(&mut self, sges: &[Sge], counted: bool) -> Result<(), Errno> {
        let max_send = self.q.cfg.max_send_sge as usize;
        let size = self.q.cfg.wqe_size;
        let (c, w) = self.cur()?;
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
        // The last payload call wins: clear what an earlier one wrote (not the RDMA
        // remote address the opcode call set).
        w.clear_from(if rdma { RDMA_LOCAL } else { DATA }, size);
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
        let (c, w) = self.cur()?;
        if len > q.inline_room(c.op) {
            return Err(EINVAL);
        }
        let rdma = is_rdma(c.op);
        let at = if rdma { RDMA_LOCAL } else { DATA };
        w.clear_from(at, q.cfg.wqe_size);
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
            .1
            .set_ctrl3(TX_META_DESC_PROCESSING_HINTS_MASK, hints);
        Ok(())
    }

    /// Finishes the WR being built: it must have a destination. Writes it into its ring
    /// slot (beyond the doorbell until the session commits).
    #[inline(always)]
    pub fn end_wr(&mut self, ring: &Ring) -> Result<(), Errno> {
        let size = self.q.cfg.wqe_size;
        let Some(c) = self.s.cur.as_ref() else {
            return Ok(());
        };
        if !c.addressed {
            return Err(EINVAL);
        }
        ring.write_slot(u32::from(c.before.count), &self.s.wqe.0[..size]);
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
    #[inline]
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
