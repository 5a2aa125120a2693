//! Queue pairs: creation checks and granted sizes (model §3.1), the queues (an SQ and an
//! RQ ring, their device side and their provider side), state changes (§3.2), posting
//! (§3.3–§3.4, through the provider), destroy.

use super::qp_init::grant;
pub use super::qp_init::{max_sq_depth, wqe_size, QpCaps, QpInit, QpType};
use super::qp_state::{next_state, ATTR_QKEY, ATTR_RNR_RETRY, ATTR_SQ_PSN};
use super::recv_queue::DeviceRq;
use super::send_queue::DeviceSq;
use super::{
    profile, Cq, Errno, ModifyQp, Payload, Pd, QpAttrs, QpState, RecvWr, SendWr,
    MAX_QPS_PER_PROCESS,
};
use crate::provider::recv::{RecvQueue, RqConfig};
use crate::provider::send::{is_rdma, CheckPayload, SendQueue, SqConfig, WrCheck};
use crate::ring::{Layout, Ring};
use crate::transport;
use efa_sys::efadv::{EFADV_QP_FLAGS_INLINE_WRITE, EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV};
use efa_sys::io::TX_DESC_SIZE_64;
use efa_sys::verbs::ibv_qp_create_send_ops_flags as ops;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// `EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV`.
pub const QP_FLAG_UNSOLICITED_WRITE_RECV: u16 = EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV;
/// `EFADV_QP_FLAGS_INLINE_WRITE`.
pub const QP_FLAG_INLINE_WRITE: u16 = EFADV_QP_FLAGS_INLINE_WRITE;

/// Default `rnr_retry` of SRD QPs: 7 = retry forever.
pub const RNR_RETRY_INFINITE: u8 = 7;

/// The `IBV_QP_EX_WITH_*` bit of `op`.
fn with_bit(op: ops) -> u64 {
    op.0 as u64
}

/// Queue pair.
pub struct Qp {
    me: Weak<Qp>,
    pd: Arc<Pd>,
    qpn: u32,
    qp_type: QpType,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    caps: QpCaps,
    efa_flags: u16,
    state: AtomicU32,
    qkey: AtomicU32,
    sq_psn: AtomicU32,
    rnr_retry: AtomicU8,
    sq_dev: DeviceSq,
    rq_dev: DeviceRq,
    sq: SendQueue,
    rq: RecvQueue,
    /// Serialises `ibv_modify_qp` calls.
    modify_lock: Mutex<()>,
    /// The rings were handed to a consumer (`efadv_query_qp_wqs`): the watcher looks at
    /// this QP's doorbell.
    exposed: AtomicBool,
    /// The send queue's doorbell is a trapped page: its stores reach the device on the
    /// storing thread, and the watcher acts only on news that outlived one of its scans
    /// (else it could take a doorbell's work between the store and the trap's own
    /// consumption; see `sq_needs_watcher`).
    sq_trapped: AtomicBool,
    /// The trapped doorbell's value when the watcher last saw news it left alone.
    watch_mark: AtomicU32,
    dead: AtomicBool,
}

impl Qp {
    pub(crate) fn create(pd: &Arc<Pd>, init: &QpInit) -> Result<(Arc<Qp>, QpCaps), Errno> {
        let rt = &pd.rt;
        let p = &rt.profile;
        let caps = p.device_caps;
        if pd.is_dead() {
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
        if let Some(f) = init.send_ops_flags {
            let mut allowed =
                with_bit(ops::IBV_QP_EX_WITH_SEND) | with_bit(ops::IBV_QP_EX_WITH_SEND_WITH_IMM);
            if init.qp_type == QpType::Srd {
                if caps & profile::CAP_RDMA_READ != 0 {
                    allowed |= with_bit(ops::IBV_QP_EX_WITH_RDMA_READ);
                }
                if caps & profile::CAP_RDMA_WRITE != 0 {
                    allowed |= with_bit(ops::IBV_QP_EX_WITH_RDMA_WRITE)
                        | with_bit(ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
                }
            }
            if f & !allowed != 0 {
                return Err(libc::EOPNOTSUPP);
            }
        }
        // 4. CQs must belong to this device.
        if !Arc::ptr_eq(&init.send_cq.rt, rt) || !Arc::ptr_eq(&init.recv_cq.rt, rt) {
            return Err(libc::EINVAL);
        }
        if init.send_cq.is_dead() || init.recv_cq.is_dead() {
            return Err(libc::EINVAL);
        }
        // 5. limits (every failure EINVAL; sources at `grant`).
        let c = init.caps;
        let inline_write = init.efa_flags & QP_FLAG_INLINE_WRITE != 0;
        let wqe = wqe_size(c.max_inline_data, inline_write);
        let (granted, rq_descs) = grant(p, &c, inline_write)?;
        let sq = granted.max_send_wr;
        // libefa: max_tx_batch * 64 bytes per doorbell, and never the whole queue.
        let mut max_batch = match p.max_tx_batch {
            0 => u32::from(u16::MAX),
            b => u32::from(b) * TX_DESC_SIZE_64 as u32 / wqe as u32,
        };
        if p.min_sq_wr > 0 {
            max_batch = max_batch.min(sq - 1);
        }
        let sq_ring = if p.mmio_trap && p.ring_query {
            Ring::new_mmio(sq, wqe)?
        } else {
            Ring::new(sq, wqe)?
        };
        let rq_ring = Ring::new(rq_descs, crate::ring::rx::SIZE)?;
        let limit = p.max_qp.min(MAX_QPS_PER_PROCESS);
        let qp = {
            let mut live = rt.qps.writer.lock().unwrap_or_else(|e| e.into_inner());
            // Beyond max_qp the device fails the admin CREATE_QP (no check in the kernel or
            // libefa): kernel efa_com.c efa_com_comp_status_to_errno maps
            // RESOURCE_ALLOCATION_FAILURE to ENOMEM. Which status the device sends is
            // UNCONFIRMED (model §7); ENOMEM is the plausible one.
            if *live >= limit {
                return Err(libc::ENOMEM);
            }
            // Reuse indices round-robin so a destroyed QPN is not reused at once.
            let start = rt.next_qp_index.load(Ordering::Relaxed);
            let idx = (0..MAX_QPS_PER_PROCESS)
                .map(|i| 1 + (start + i) % MAX_QPS_PER_PROCESS)
                .find(|i| rt.qps.is_vacant(*i as usize))
                .ok_or(libc::ENOMEM)?;
            rt.next_qp_index.store(idx, Ordering::Relaxed);
            let qpn = (rt.ep.slot() << transport::QP_INDEX_BITS) | idx;
            let gen = rt.next_qp_gen(idx as usize);
            let sq_cfg = SqConfig {
                entries: sq,
                wqe_size: wqe,
                max_batch,
                max_send_sge: c.max_send_sge,
                max_inline: c.max_inline_data,
                inline_write,
                sq_sig_all: init.sq_sig_all,
                qp_type: init.qp_type,
                send_ops: init.send_ops_flags,
                rdma_read: caps & profile::CAP_RDMA_READ != 0,
                rdma_write: caps & profile::CAP_RDMA_WRITE != 0,
            };
            let rq_cfg = RqConfig {
                descriptors: rq_descs,
                wrs: granted.max_recv_wr,
                max_sge: c.max_recv_sge,
            };
            let qp = Arc::new_cyclic(|me| Qp {
                me: me.clone(),
                pd: pd.clone(),
                qpn,
                qp_type: init.qp_type,
                send_cq: init.send_cq.clone(),
                recv_cq: init.recv_cq.clone(),
                caps: granted,
                efa_flags: init.efa_flags,
                state: AtomicU32::new(QpState::Reset as u32),
                qkey: AtomicU32::new(0),
                sq_psn: AtomicU32::new(0),
                // SRD retries RNR forever until told otherwise (libfabric efa_base_ep.h);
                // a device without the RNR_RETRY cap reports an RNR at once (SRD.txt).
                rnr_retry: AtomicU8::new(if p.device_caps & profile::CAP_RNR_RETRY != 0 {
                    RNR_RETRY_INFINITE
                } else {
                    0
                }),
                sq_dev: DeviceSq::new(sq_ring),
                rq_dev: DeviceRq::new(rq_ring, p.max_rq_sge as usize),
                sq: SendQueue::new(sq_cfg, gen),
                rq: RecvQueue::new(rq_cfg, gen),
                modify_lock: Mutex::new(()),
                exposed: AtomicBool::new(false),
                sq_trapped: AtomicBool::new(false),
                watch_mark: AtomicU32::new(NO_MARK),
                dead: AtomicBool::new(false),
            });
            rt.qps.set(idx as usize, qp.clone());
            *live += 1;
            qp
        };
        pd.add_user();
        init.send_cq.add_user();
        init.recv_cq.add_user();
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

    /// Granted capacities.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }
    pub(crate) fn send_cq(&self) -> &Arc<Cq> {
        &self.send_cq
    }
    pub(crate) fn recv_cq(&self) -> &Arc<Cq> {
        &self.recv_cq
    }
    pub(crate) fn qkey(&self) -> u32 {
        self.qkey.load(Ordering::Acquire)
    }
    pub(crate) fn rnr_retry(&self) -> u8 {
        self.rnr_retry.load(Ordering::Acquire)
    }
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }
    /// A counted reference (for work outstanding on the datagram path).
    pub(crate) fn arc(&self) -> Option<Arc<Qp>> {
        self.me.upgrade()
    }
    pub(crate) fn sq_dev(&self) -> &DeviceSq {
        &self.sq_dev
    }
    pub(crate) fn rq_dev(&self) -> &DeviceRq {
        &self.rq_dev
    }
    pub(crate) fn sq_provider(&self) -> &SendQueue {
        &self.sq
    }
    pub(crate) fn rq_provider(&self) -> &RecvQueue {
        &self.rq
    }

    /// The device looks at the send queue's doorbell (the provider rang it, or the
    /// watcher saw a consumer ring it).
    pub(crate) fn sq_doorbell(&self) -> bool {
        self.sq_dev.process(&self.pd.rt, self)
    }

    /// [`Qp::sq_doorbell`] for a doorbell store the device saw as such (strict mode
    /// holds it to `max_batch`).
    fn sq_doorbell_observed(&self) -> bool {
        let max_batch = self.sq.config().max_batch;
        self.sq_dev.process_observed(&self.pd.rt, self, max_batch)
    }

    /// Whether the device hands out its rings (profile `ring_query`).
    pub fn hands_out_rings(&self) -> bool {
        self.pd.rt.profile.ring_query
    }

    /// The raw send and receive rings (`efadv_query_qp_wqs`). From now on the device
    /// also notices doorbells it is not told about (see [`crate::model::watcher`]).
    pub fn wq_layout(&self) -> (Layout, Layout) {
        if !self.exposed.swap(true, Ordering::AcqRel) {
            self.pd.rt.watcher.start(&self.pd.rt);
            let me: std::sync::Weak<dyn crate::ring::mmio::DoorbellListener> = self.me.clone();
            if self.sq_dev.ring().arm_doorbell(me) {
                self.sq_trapped.store(true, Ordering::Release);
            }
        }
        let rq = self.rq_dev.ring();
        // Receive descriptors are not batched: one doorbell may cover the whole ring.
        (
            self.sq_dev.ring().layout(self.sq.config().max_batch),
            rq.layout(rq.entries()),
        )
    }

    /// Whether the watcher should have the device look at the send queue now: its rings
    /// were handed out and its doorbell announces WQEs not consumed. Where the doorbell is
    /// a trapped page, only news already there, unchanged, at the watcher's previous look:
    /// a WQE whose phase the consumer fixed in place after its doorbell (no store
    /// announces that), never the store the trap is consuming right now.
    pub(crate) fn sq_needs_watcher(&self) -> bool {
        if !self.exposed.load(Ordering::Acquire) {
            return false;
        }
        if !self.sq_dev.has_news() {
            self.watch_mark.store(NO_MARK, Ordering::Relaxed);
            return false;
        }
        if !self.sq_trapped.load(Ordering::Acquire) {
            return true;
        }
        let db = self.sq_dev.ring().doorbell().read();
        self.watch_mark.swap(db, Ordering::Relaxed) == db
    }

    /// `ibv_modify_qp` (model §3.2): EOPNOTSUPP for attributes EFA does not
    /// support, EINVAL for illegal transitions or attribute sets.
    pub fn modify(&self, m: &ModifyQp) -> Result<(), Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        let _guard = self.modify_lock.lock().unwrap_or_else(|e| e.into_inner());
        let tracked = self.state();
        let rnr_cap = self.pd.rt.profile.device_caps & profile::CAP_RNR_RETRY != 0;
        let new = next_state(tracked, m, self.qp_type, rnr_cap)?;
        if m.mask & ATTR_QKEY != 0 {
            self.qkey.store(m.qkey, Ordering::Release);
        }
        if m.mask & ATTR_SQ_PSN != 0 {
            self.sq_psn.store(m.sq_psn & 0xff_ffff, Ordering::Release);
        }
        if m.mask & ATTR_RNR_RETRY != 0 {
            // No layer rejects rnr_retry > 7: kernel efa_verbs.c efa_modify_qp hands the u8
            // to the device, whose answer is UNCONFIRMED; kept as the 3-bit IB field.
            self.rnr_retry.store(m.rnr_retry & 7, Ordering::Release);
        }
        match new {
            QpState::Reset if tracked != QpState::Reset => {
                // Forget posted WRs (rdma-core resets its ring indices), then accept none.
                self.state.store(new as u32, Ordering::Release);
                self.sq_dev.quiesce();
                self.pd.rt.purge_pending(self.qpn);
                self.sq.reset();
                self.rq.reset();
                self.sq_dev.reset();
                self.rq_dev.reset();
            }
            QpState::Err if tracked != QpState::Err => {
                // Outstanding sends and posted receives complete with FLUSHED.
                self.state.store(new as u32, Ordering::Release);
                self.sq_dev.settle();
                self.pd
                    .rt
                    .flush_pending(self.qpn, efa_sys::vendor::comp_status::FLUSHED as u8);
                self.sq_doorbell();
                self.rq_dev.flush(&self.pd.rt, self);
            }
            _ => {
                self.state.store(new as u32, Ordering::Release);
                if new == QpState::Rts {
                    // WQEs rung before RTS waited in the ring.
                    self.sq_doorbell();
                }
            }
        }
        Ok(())
    }

    /// `ibv_query_qp` view.
    pub fn query(&self) -> QpAttrs {
        QpAttrs {
            state: self.state(),
            qkey: self.qkey(),
            sq_psn: self.sq_psn.load(Ordering::Acquire),
            rnr_retry: self.rnr_retry(),
            sq_draining: false,
            caps: self.caps,
        }
    }

    /// Checks one WR against the posting rules (model §3.3 rules 1–4: state, signaled,
    /// flags, room for `already_staged + 1` WRs, plus the opcode and payload rules)
    /// without posting it.
    pub fn check_send(&self, wr: &SendWr, already_staged: usize) -> Result<(), Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        let payload = match &wr.payload {
            Payload::Sges(s) => CheckPayload::Sges(s.len()),
            Payload::Inline(d) => CheckPayload::Inline(d.len()),
        };
        let c = WrCheck {
            op: wr.op,
            flags: wr.send_flags,
            payload,
            has_remote: wr.remote.is_some(),
            _wr: core::marker::PhantomData,
        };
        self.sq.check(&c, self.state(), already_staged as u32)
    }

    /// Posts all WRs or none (like an `ibv_wr_start` … `ibv_wr_complete` session): the
    /// provider writes their WQEs into the SQ ring and rings the doorbell (per
    /// `max_batch`); the device consumes them right away on this thread.
    pub fn post_send_batch(&self, wrs: &[SendWr]) -> Result<(), Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        let state = self.state();
        let ring = self.sq_dev.ring();
        let mut s = self.sq.begin();
        for wr in wrs {
            let r = s
                .wr(state, wr.op, wr.wr_id, wr.send_flags, wr.imm_be, false)
                .and_then(|()| s.set_addr(&wr.ah, &self.pd, wr.remote_qpn, wr.remote_qkey))
                .and_then(|()| match wr.remote {
                    Some((addr, rkey)) => s.set_remote(addr, rkey),
                    None if is_rdma(wr.op) => Err(libc::EINVAL),
                    None => Ok(()),
                })
                .and_then(|()| match &wr.payload {
                    Payload::Sges(g) => s.set_sges(g, true),
                    Payload::Inline(d) => s.set_inline(d.len(), |dst| dst.copy_from_slice(d)),
                })
                .and_then(|()| s.end_wr(ring));
            if let Err(e) = r {
                s.abort();
                return Err(e);
            }
        }
        s.commit(ring, || {
            self.sq_doorbell();
        })
    }

    /// Posts one receive (model §3.4); EINVAL in RESET/ERR or too many SGEs, ENOMEM when full.
    /// SGE lengths above 65535 are clamped to 65535 (16-bit descriptor field).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        self.rq
            .post(
                self.rq_dev.ring(),
                self.state(),
                [Ok((wr.wr_id, &wr.sges[..]))],
            )
            .map_err(|(_, e)| e)
    }

    /// Destroys the QP: its QPN stops receiving at once, send WRs still outstanding are
    /// purged (no completion), posted receives are dropped, and completions of it still
    /// in its CQs are skipped by the provider (rdma-core rejects completions of a
    /// destroyed QP; efa-sim drops them).
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        // Pollers keep pointers to QPs of their CQ while they hold its poll lock: take
        // both (in address order) before the QP leaves the table.
        let (a, b) = (
            Arc::as_ptr(&self.send_cq) as usize,
            Arc::as_ptr(&self.recv_cq) as usize,
        );
        let (first, second) = if a <= b {
            (&self.send_cq, &self.recv_cq)
        } else {
            (&self.recv_cq, &self.send_cq)
        };
        first.poller().lock();
        if a != b {
            second.poller().lock();
        }
        let gone = {
            let rt = &self.pd.rt;
            let mut live = rt.qps.writer.lock().unwrap_or_else(|e| e.into_inner());
            let idx = (self.qpn & ((1 << transport::QP_INDEX_BITS) - 1)) as usize;
            let gone = rt.qps.take(idx);
            *live -= u32::from(gone.is_some());
            gone
        };
        // SAFETY: both poll locks are held (taken above).
        unsafe {
            first.poller().forget_qp(self);
            second.poller().forget_qp(self);
        }
        if a != b {
            second.poller().unlock();
        }
        first.poller().unlock();
        // Its counts join the device's (it is no longer found in the table).
        self.sq_dev.fold_counts(&self.pd.rt);
        // Requests executing on this QP (inside read sections) finish before it goes.
        crate::model::runtime::tables::retire(gone);
        self.pd.rt.purge_pending(self.qpn);
        self.send_cq.release_user();
        self.recv_cq.release_user();
        self.pd.release_user();
        Ok(())
    }
}

impl Qp {
    /// A direct consumer stored to the send queue's doorbell and says so
    /// (`efa_sim_direct_sq_doorbell`): the device consumes it now, on that thread.
    pub fn direct_doorbell(&self) {
        if self.exposed.load(Ordering::Acquire) && self.sq_doorbell_observed() {
            super::runtime::stats::bump(&self.pd.rt.stats.called_doorbells);
        }
    }
}

/// No doorbell value seen (a doorbell holds a 16-bit producer index).
const NO_MARK: u32 = u32::MAX;

/// The send queue's doorbell as MMIO: a consumer's store arrives here, on its thread.
impl crate::ring::mmio::DoorbellListener for Qp {
    fn doorbell_written(&self) {
        if self.sq_doorbell_observed() {
            super::runtime::stats::bump(&self.pd.rt.stats.trapped_doorbells);
        }
    }
    fn trap_opened(&self) {
        self.sq_trapped.store(false, Ordering::Release);
        super::runtime::stats::bump(&self.pd.rt.stats.opened_traps);
    }
}
