//! Queue pairs: creation checks and granted sizes (model §3.1), the
//! `ibv_modify_qp` state machine (§3.2), posting rules (§3.3–§3.4), destroy.

use super::*;

/// `IBV_QP_EX_WITH_RDMA_WRITE`.
pub const WITH_RDMA_WRITE: u64 = 1 << 0;
/// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
pub const WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
/// `IBV_QP_EX_WITH_SEND`.
pub const WITH_SEND: u64 = 1 << 2;
/// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
pub const WITH_SEND_WITH_IMM: u64 = 1 << 3;
/// `IBV_QP_EX_WITH_RDMA_READ`.
pub const WITH_RDMA_READ: u64 = 1 << 4;

/// `EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV`.
pub const QP_FLAG_UNSOLICITED_WRITE_RECV: u16 = 1 << 0;
/// `EFADV_QP_FLAGS_INLINE_WRITE`.
pub const QP_FLAG_INLINE_WRITE: u16 = 1 << 1;

/// `IBV_SEND_SIGNALED`.
pub const SEND_SIGNALED: u32 = 1 << 1;
/// `IBV_SEND_INLINE`.
pub const SEND_INLINE: u32 = 1 << 3;

/// `IBV_QP_*` attribute mask bits EFA accepts.
pub const ATTR_STATE: u32 = 1 << 0;
/// `IBV_QP_CUR_STATE`.
pub const ATTR_CUR_STATE: u32 = 1 << 1;
/// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
pub const ATTR_EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
/// `IBV_QP_PKEY_INDEX`.
pub const ATTR_PKEY_INDEX: u32 = 1 << 4;
/// `IBV_QP_PORT`.
pub const ATTR_PORT: u32 = 1 << 5;
/// `IBV_QP_QKEY`.
pub const ATTR_QKEY: u32 = 1 << 6;
/// `IBV_QP_RNR_RETRY`.
pub const ATTR_RNR_RETRY: u32 = 1 << 11;
/// `IBV_QP_SQ_PSN`.
pub const ATTR_SQ_PSN: u32 = 1 << 16;
const ATTR_ALL: u32 = ATTR_STATE
    | ATTR_CUR_STATE
    | ATTR_EN_SQD_ASYNC_NOTIFY
    | ATTR_PKEY_INDEX
    | ATTR_PORT
    | ATTR_QKEY
    | ATTR_RNR_RETRY
    | ATTR_SQ_PSN;

/// Default `rnr_retry` of SRD QPs: 7 = retry forever.
pub const RNR_RETRY_INFINITE: u8 = 7;

impl QpState {
    fn from_u32(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// (required, optional) attribute bits of a legal transition, model §3.2.
fn transition(from: QpState, to: QpState, t: QpType) -> Option<(u32, u32)> {
    use QpState::*;
    let rnr = if t == QpType::Srd { ATTR_RNR_RETRY } else { 0 };
    Some(match (from, to) {
        (Reset, Reset) => (0, 0),
        (Reset, Init) => (ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY, 0),
        (Init, Init) => (0, ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY),
        (Init, Rtr) => (0, ATTR_PKEY_INDEX | ATTR_QKEY),
        (Rtr, Rts) => (ATTR_SQ_PSN, ATTR_CUR_STATE | ATTR_QKEY | rnr),
        (Rts, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Rts, Sqd) => (0, ATTR_EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Sqd, Sqd) => (0, ATTR_PKEY_INDEX | ATTR_QKEY),
        (Sqe, Rts) => (0, ATTR_CUR_STATE | ATTR_QKEY),
        (Init | Rtr | Rts | Sqd | Sqe | Err, Reset | Err) => (0, 0),
        _ => return None,
    })
}

fn rounddown_pow2(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        1 << (31 - v.leading_zeros())
    }
}

impl Qp {
    pub(crate) fn create(pd: &Arc<Pd>, init: &QpInit) -> Result<(Arc<Qp>, QpCaps), Errno> {
        let rt = &pd.rt;
        let p = &rt.profile;
        let caps = p.device_caps;
        if pd.dead.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        // 1. efadv flags (cap-gated), SRD only.
        let known = QP_FLAG_UNSOLICITED_WRITE_RECV | QP_FLAG_INLINE_WRITE;
        if init.efa_flags & !known != 0
            || (init.efa_flags & QP_FLAG_UNSOLICITED_WRITE_RECV != 0
                && caps & profile::CAP_UNSOLICITED_WRITE_RECV == 0)
            || (init.efa_flags & QP_FLAG_INLINE_WRITE != 0 && caps & profile::CAP_RDMA_WRITE == 0)
            || (init.efa_flags != 0 && init.qp_type == QpType::Ud)
        {
            return Err(libc::EOPNOTSUPP);
        }
        // 3. send ops.
        if let Some(ops) = init.send_ops_flags {
            let mut allowed = WITH_SEND | WITH_SEND_WITH_IMM;
            if init.qp_type == QpType::Srd {
                if caps & profile::CAP_RDMA_READ != 0 {
                    allowed |= WITH_RDMA_READ;
                }
                if caps & profile::CAP_RDMA_WRITE != 0 {
                    allowed |= WITH_RDMA_WRITE | WITH_RDMA_WRITE_WITH_IMM;
                }
            }
            if ops & !allowed != 0 {
                return Err(libc::EOPNOTSUPP);
            }
        }
        // 4. CQs must belong to this device.
        if !Arc::ptr_eq(&init.send_cq.rt, rt) || !Arc::ptr_eq(&init.recv_cq.rt, rt) {
            return Err(libc::EINVAL);
        }
        if init.send_cq.dead.load(Ordering::Acquire) || init.recv_cq.dead.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        // 5. limits.
        let c = init.caps;
        let wide = c.max_inline_data > 32 || init.efa_flags & QP_FLAG_INLINE_WRITE != 0;
        let wqe = if wide { 128 } else { 64 };
        let rq_sge = c.max_recv_sge.max(1);
        if c.max_send_sge > p.max_sq_sge as u32
            || c.max_recv_sge > p.max_rq_sge as u32
            || c.max_send_wr > rounddown_pow2(p.max_llq_size / wqe)
            || c.max_recv_wr > p.max_rq_wr / rq_sge
            || c.max_inline_data > p.inline_buf_size_ex as u32
        {
            return Err(libc::EINVAL);
        }
        // Granted sizes (rc efa_setup_qp).
        let sq = c.max_send_wr.max(p.min_sq_wr).max(1).next_power_of_two();
        let rq_wr = if c.max_recv_wr == 0 {
            0
        } else {
            (rq_sge * c.max_recv_wr).next_power_of_two() / rq_sge
        };
        let granted = QpCaps {
            max_send_wr: sq,
            max_recv_wr: rq_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        };
        let limit = p.max_qp.min(MAX_QPS_PER_PROCESS);
        let qp = {
            let mut qps = rt.qps.write().unwrap_or_else(|e| e.into_inner());
            let live = qps.iter().filter(|q| q.is_some()).count() as u32;
            if live >= limit {
                return Err(libc::ENOMEM);
            }
            // Reuse indices round-robin so a destroyed QPN is not reused at once.
            let start = rt.next_qp_index.load(Ordering::Relaxed);
            let idx = (0..MAX_QPS_PER_PROCESS)
                .map(|i| 1 + (start + i) % MAX_QPS_PER_PROCESS)
                .find(|i| qps[*i as usize].is_none())
                .ok_or(libc::ENOMEM)?;
            rt.next_qp_index.store(idx, Ordering::Relaxed);
            let qpn = (rt.ep.slot() << transport::QP_INDEX_BITS) | idx;
            let qp = Arc::new_cyclic(|me| Qp {
                me: me.clone(),
                pd: pd.clone(),
                qpn,
                qp_type: init.qp_type,
                send_cq: init.send_cq.clone(),
                recv_cq: init.recv_cq.clone(),
                caps: granted,
                sq_sig_all: init.sq_sig_all,
                send_ops_flags: init.send_ops_flags,
                efa_flags: init.efa_flags,
                state: AtomicU32::new(QpState::Reset as u32),
                qkey: AtomicU32::new(0),
                sq_psn: AtomicU32::new(0),
                rnr_retry: AtomicU8::new(RNR_RETRY_INFINITE),
                sq_inflight: AtomicU32::new(0),
                rq_inflight: AtomicU32::new(0),
                rq: Mutex::new(VecDeque::with_capacity(rq_wr as usize)),
                post_lock: Mutex::new(()),
                dead: AtomicBool::new(false),
            });
            qps[idx as usize] = Some(qp.clone());
            qp
        };
        pd.users.fetch_add(1, Ordering::AcqRel);
        init.send_cq.users.fetch_add(1, Ordering::AcqRel);
        init.recv_cq.users.fetch_add(1, Ordering::AcqRel);
        Ok((qp, granted))
    }

    /// QP number (16 bits, never 0).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// UD or SRD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        QpState::from_u32(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    /// The `EFADV_QP_FLAGS_*` it was created with.
    pub fn efa_flags(&self) -> u16 {
        self.efa_flags
    }

    /// `ibv_modify_qp` (model §3.2): EOPNOTSUPP for attributes EFA does not
    /// support, EINVAL for illegal transitions or attribute sets.
    pub fn modify(&self, m: &ModifyQp) -> Result<(), Errno> {
        if self.dead.load(Ordering::Acquire) {
            return Err(libc::EINVAL);
        }
        if m.mask & !ATTR_ALL != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let _guard = self.post_lock.lock().unwrap_or_else(|e| e.into_inner());
        let tracked = self.state();
        let cur = if m.mask & ATTR_CUR_STATE != 0 {
            if !matches!(
                tracked,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            ) {
                return Err(libc::EINVAL);
            }
            QpState::from_u32(m.cur_state).ok_or(libc::EINVAL)?
        } else {
            tracked
        };
        let new = if m.mask & ATTR_STATE != 0 {
            QpState::from_u32(m.state).ok_or(libc::EINVAL)?
        } else {
            cur
        };
        let (required, optional) = transition(cur, new, self.qp_type).ok_or(libc::EINVAL)?;
        if m.mask & required != required || m.mask & !(required | optional | ATTR_STATE) != 0 {
            return Err(libc::EINVAL);
        }
        if m.mask & ATTR_PORT != 0 && m.port_num != 1 {
            return Err(libc::EOPNOTSUPP);
        }
        if m.mask & ATTR_PKEY_INDEX != 0 && m.pkey_index != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if m.mask & ATTR_RNR_RETRY != 0
            && self.pd.rt.profile.device_caps & profile::CAP_RNR_RETRY == 0
        {
            return Err(libc::EOPNOTSUPP);
        }
        if m.mask & ATTR_QKEY != 0 {
            self.qkey.store(m.qkey, Ordering::Release);
        }
        if m.mask & ATTR_SQ_PSN != 0 {
            self.sq_psn.store(m.sq_psn & 0xff_ffff, Ordering::Release);
        }
        if m.mask & ATTR_RNR_RETRY != 0 {
            self.rnr_retry.store(m.rnr_retry & 7, Ordering::Release);
        }
        self.state.store(new as u32, Ordering::Release);
        match new {
            QpState::Err if tracked != QpState::Err => self.flush(),
            QpState::Reset if tracked != QpState::Reset => self.forget(),
            _ => {}
        }
        Ok(())
    }

    /// `ibv_query_qp` view.
    pub fn query(&self) -> QpAttrs {
        QpAttrs {
            state: self.state(),
            qkey: self.qkey.load(Ordering::Acquire),
            sq_psn: self.sq_psn.load(Ordering::Acquire),
            rnr_retry: self.rnr_retry.load(Ordering::Acquire),
            sq_draining: false,
            caps: self.caps,
        }
    }

    /// Checks one WR against model §3.3 rules 1–4 (state, signaled, flags, room for
    /// `already_staged + 1` WRs) plus the opcode rules, without posting it.
    pub fn check_send(&self, wr: &SendWr, already_staged: usize) -> Result<(), Errno> {
        if self.dead.load(Ordering::Acquire) || !matches!(self.state(), QpState::Rts | QpState::Sqd)
        {
            return Err(libc::EINVAL);
        }
        if !self.sq_sig_all && wr.send_flags & SEND_SIGNALED == 0 {
            return Err(libc::EINVAL);
        }
        if wr.send_flags & !(SEND_SIGNALED | SEND_INLINE) != 0 {
            return Err(libc::EINVAL);
        }
        let caps = self.pd.rt.profile.device_caps;
        let rdma = matches!(
            wr.op,
            SendOp::RdmaRead | SendOp::RdmaWrite | SendOp::RdmaWriteImm
        );
        if rdma {
            let (cap, with) = match wr.op {
                SendOp::RdmaRead => (profile::CAP_RDMA_READ, WITH_RDMA_READ),
                SendOp::RdmaWrite => (profile::CAP_RDMA_WRITE, WITH_RDMA_WRITE),
                _ => (profile::CAP_RDMA_WRITE, WITH_RDMA_WRITE_WITH_IMM),
            };
            if self.qp_type != QpType::Srd
                || caps & cap == 0
                || self.send_ops_flags.is_some_and(|f| f & with == 0)
                || wr.remote.is_none()
            {
                return Err(libc::EINVAL);
            }
        } else if let Some(f) = self.send_ops_flags {
            let with = if wr.op == SendOp::Send {
                WITH_SEND
            } else {
                WITH_SEND_WITH_IMM
            };
            if f & with == 0 {
                return Err(libc::EINVAL);
            }
        }
        match &wr.payload {
            Payload::Sges(sges) => {
                let max = if rdma {
                    1
                } else {
                    self.caps.max_send_sge as usize
                };
                if sges.len() > max {
                    return Err(libc::EINVAL);
                }
            }
            Payload::Inline(data) => {
                if data.len() > self.caps.max_inline_data as usize
                    || wr.op == SendOp::RdmaRead
                    || (rdma && self.efa_flags & QP_FLAG_INLINE_WRITE == 0)
                {
                    return Err(libc::EINVAL);
                }
            }
        }
        let inflight = self.sq_inflight.load(Ordering::Acquire) as usize;
        if inflight + already_staged + 1 > self.caps.max_send_wr as usize {
            return Err(libc::ENOMEM);
        }
        Ok(())
    }

    /// Posts all WRs or none (an `ibv_wr_complete` session or one legacy WR).
    pub fn post_send_batch(&self, wrs: &[SendWr]) -> Result<(), Errno> {
        let me = self.me.upgrade().ok_or(libc::EINVAL)?;
        {
            let _guard = self.post_lock.lock().unwrap_or_else(|e| e.into_inner());
            for (i, wr) in wrs.iter().enumerate() {
                self.check_send(wr, i)?;
            }
            self.sq_inflight
                .fetch_add(wrs.len() as u32, Ordering::AcqRel);
        }
        let rt = &self.pd.rt;
        if wrs.len() > 1 {
            rt.begin_batch();
        }
        for wr in wrs {
            rt.start_send(&me, wr);
        }
        if wrs.len() > 1 {
            rt.end_batch();
        }
        Ok(())
    }

    /// Posts one receive (model §3.4); EINVAL in RESET/ERR or too many SGEs, ENOMEM when full.
    /// SGE lengths above 65535 are clamped to 65535 (16-bit descriptor field).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Errno> {
        if self.dead.load(Ordering::Acquire)
            || matches!(self.state(), QpState::Reset | QpState::Err)
        {
            return Err(libc::EINVAL);
        }
        if wr.sges.len() > self.caps.max_recv_sge as usize {
            return Err(libc::EINVAL);
        }
        let mut rq = self.rq.lock().unwrap_or_else(|e| e.into_inner());
        if self.rq_inflight.load(Ordering::Acquire) >= self.caps.max_recv_wr {
            return Err(libc::ENOMEM);
        }
        let mut wr = wr.clone();
        for s in wr.sges.iter_mut() {
            s.length = s.length.min(65535);
        }
        rq.push_back(wr);
        self.rq_inflight.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Destroys the QP: its QPN stops receiving at once, send WRs still
    /// outstanding are purged (no completion, like rdma-core which rejects
    /// completions of a destroyed QP), posted receives are dropped and waiting
    /// completions of this QP are removed from its CQs.
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        let rt = &self.pd.rt;
        {
            let mut qps = rt.qps.write().unwrap_or_else(|e| e.into_inner());
            let idx = (self.qpn & ((1 << transport::QP_INDEX_BITS) - 1)) as usize;
            qps[idx] = None;
        }
        rt.purge_pending(self.qpn);
        self.rq.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.send_cq.purge_qp(self.qpn);
        self.recv_cq.purge_qp(self.qpn);
        self.send_cq.users.fetch_sub(1, Ordering::AcqRel);
        self.recv_cq.users.fetch_sub(1, Ordering::AcqRel);
        self.pd.users.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Moving to ERR completes outstanding sends and posted receives with
    /// status 1 (FLUSHED).
    fn flush(&self) {
        let Some(me) = self.me.upgrade() else { return };
        self.pd.rt.flush_pending(self.qpn, 1);
        let drained: Vec<RecvWr> = self
            .rq
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for wr in drained {
            self.recv_cq.push(
                Completion {
                    wr_id: wr.wr_id,
                    status: 1,
                    kind: CompletionKind::Recv,
                    byte_len: 0,
                    imm_be: None,
                    qp_num: self.qpn,
                    src_qp: 0,
                    slid: 0xffff,
                    unsolicited: false,
                    sgid: None,
                },
                cq::Slot::Rq(me.clone()),
            );
        }
    }

    /// Moving to RESET forgets posted WRs (rdma-core resets its ring indices).
    fn forget(&self) {
        self.pd.rt.purge_pending(self.qpn);
        self.rq.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.send_cq.purge_qp(self.qpn);
        self.recv_cq.purge_qp(self.qpn);
        self.sq_inflight.store(0, Ordering::Release);
        self.rq_inflight.store(0, Ordering::Release);
    }
}
