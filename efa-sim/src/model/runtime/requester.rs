//! The requester: a WQE the device took from a send queue becomes a request (executed at
//! once on a same-process target, see [`super::direct`], or sent as a datagram), and
//! its completion goes to the QP's send CQ when the responder's answer arrives (or the
//! WR fails: RNR retries exhausted, peer silent, AH destroyed, QP flushed).

use super::stats::bump;
use super::tables::MrTable;
use super::{IdMap, Runtime, INLINE_RDMA, PEER_TIMEOUT, RNR_DELAY, RTO};
use crate::model::mem;
use crate::model::send_queue::Request;
use crate::model::{qp, Pd, Qp, QpType, SendOp, Sge, ACCESS_LOCAL_WRITE, MAX_INLINE, MAX_SEND_SGE};
use crate::provider::send::op_type;
use crate::ring::cqe::Cqe;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Status of an RNR answer.
pub(crate) const STATUS_RNR: u8 = st::REMOTE_ERROR_RNR as u8;

/// What a send completion needs to know about its WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    /// Request id of the WQE.
    pub req_id: u16,
    /// Its op type.
    pub op_type: u8,
    /// It asked for a completion.
    pub signaled: bool,
    /// The AH number it was sent to.
    pub ahn: u16,
}

impl Origin {
    /// The origin of request `r`.
    pub fn of(r: &Request) -> Origin {
        Origin {
            req_id: r.req_id,
            op_type: op_type(r.op),
            signaled: r.signaled,
            ahn: r.ahn,
        }
    }
}

/// Writes the send completion of `o` with `status` (none for a successful unsignaled
/// WQE: errors always complete, as in verbs).
pub(crate) fn complete(qp: &Qp, o: &Origin, status: u8) {
    if status != 0 || o.signaled {
        qp.send_cq()
            .push(&Cqe::send(qp.qpn() as u16, o.req_id, status, o.op_type));
    }
}

/// What a request carries, kept so it can be rebuilt for retransmission.
#[derive(Clone)]
pub(crate) struct Spec {
    pub header: Header,
    /// Local segments (lkey, iova, len), re-validated at every use.
    pub sges: arrayvec::ArrayVec<Sge, MAX_SEND_SGE>,
    pub inline: arrayvec::ArrayVec<u8, MAX_INLINE>,
    /// Whether the data travels in the datagram (SEND, small WRITE).
    pub carries_data: bool,
}

/// A request waiting for its response.
pub(crate) struct Pending {
    qp: Arc<Qp>,
    origin: Origin,
    dest: SocketAddrV4,
    spec: Spec,
    next_tx: Instant,
    last_heard: Instant,
    rnr_left: u8,
    /// This request is one chunk of the pending WR with that id.
    chunk_parent: Option<u64>,
    /// This WR is being moved in chunks (its fast path failed).
    chunking: Option<Chunking>,
}

/// Progress of a WR moved as data-in-datagram chunks.
#[derive(Clone, Copy)]
struct Chunking {
    next_off: u64,
    inflight: u32,
    total: u64,
}

/// Chunks in flight per chunked WR.
const CHUNK_WINDOW: u32 = 8;

/// Requests to (re)send after a table update: (PD, spec, destination).
type Outbox = Vec<(Arc<Pd>, Spec, SocketAddrV4)>;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; wire::MAX_DATAGRAM]);
    /// Requests of one doorbell, bundled per destination.
    static TX: RefCell<(bool, wire::BundleBuf)> = RefCell::new((false, wire::BundleBuf::default()));
}

impl Runtime {
    /// Local range of `sge` inside a live MR of `pd` with `need` access.
    #[inline]
    pub(crate) fn local_range(mrs: &MrTable, pd: &Pd, sge: &Sge, need: u32) -> Option<usize> {
        let mr = mrs.get(sge.lkey)?;
        if !core::ptr::eq(Arc::as_ptr(&mr.pd), pd) {
            return None;
        }
        mr.host_range(sge.addr, sge.length as u64, need)
    }

    /// Executes one WQE the device took from `qp`'s send queue.
    pub(crate) fn start_send(&self, qp: &Qp, r: &Request) {
        let o = Origin::of(r);
        // The AH must be live and belong to the QP's PD.
        let (endpoint, local) = {
            let ahs = self.ahs();
            match ahs.get(r.ahn) {
                Some(e) if e.pd == Arc::as_ptr(qp.pd()) as usize => {
                    let local = if self.config.direct_path() {
                        e.local_runtime()
                    } else {
                        None
                    };
                    (e.endpoint, local)
                }
                _ => return complete(qp, &o, st::LOCAL_ERROR_INVALID_AH as u8),
            }
        };
        let Some((ip, dev)) = endpoint else {
            return complete(qp, &o, st::LOCAL_ERROR_INVALID_AH as u8);
        };
        let Some(dest) = self.ep.addr_of(ip, dev, r.dest_qpn) else {
            return complete(qp, &o, st::LOCAL_ERROR_INVALID_AH as u8);
        };
        let total: u64 = if r.inline.is_empty() {
            r.sges.iter().map(|g| g.length as u64).sum()
        } else {
            r.inline.len() as u64
        };
        let rdma = r.op != SendOp::Send && r.op != SendOp::SendImm;
        if (!rdma && total > self.profile.mtu_bytes as u64)
            || (rdma && total > self.profile.max_rdma_size as u64)
        {
            return complete(qp, &o, st::LOCAL_ERROR_BAD_LENGTH as u8);
        }
        let mut h = Header::new(
            wire::KIND_REQ,
            match r.op {
                SendOp::Send | SendOp::SendImm => Op::Send,
                SendOp::RdmaRead => Op::Read,
                _ => Op::Write,
            },
        );
        h.epoch = self.epoch;
        h.src_gid = self.gid;
        h.src_qpn = qp.qpn() as u16;
        h.dst_qpn = r.dest_qpn as u16;
        h.qkey = r.qkey;
        h.total_len = total as u32;
        if matches!(r.op, SendOp::SendImm | SendOp::RdmaWriteImm) {
            h.flags |= wire::FLAG_IMM;
            h.imm = r.imm;
        }
        if let Some((addr, rkey, _)) = r.remote {
            h.remote_addr = addr;
            h.rkey = rkey;
        }
        // Local keys: every SGE in a live MR of this PD (LOCAL_WRITE for a read target).
        let need = if r.op == SendOp::RdmaRead {
            ACCESS_LOCAL_WRITE
        } else {
            0
        };
        let bulk = rdma && total as usize > INLINE_RDMA;
        let mut spec = Spec {
            header: h,
            sges: r.sges.iter().copied().collect(),
            inline: r.inline.clone(),
            carries_data: !bulk && r.op != SendOp::RdmaRead,
        };
        let mrs = self.mrs();
        let mut first_host = 0usize;
        for (i, g) in r.sges.iter().enumerate() {
            match Self::local_range(&mrs, qp.pd(), g, need) {
                Some(host) if i == 0 => first_host = host,
                Some(_) => {}
                None => {
                    drop(mrs);
                    return complete(qp, &o, st::LOCAL_ERROR_INVALID_LKEY as u8);
                }
            }
        }
        if bulk {
            // One SGE (the WQE format holds one for RDMA); the peer copies from/to it.
            spec.header.flags |= wire::FLAG_FAST;
            spec.header.pid = self.pid;
            spec.header.local_addr = first_host as u64;
        }
        // Direct only when the destination QPN lives in that same-process device (another
        // process can serve the same GID: its QPNs carry its own slot).
        let local = local.filter(|t| t.qp_index(r.dest_qpn).is_some());
        match local {
            Some(target) if qp.qp_type() != QpType::Ud => {
                if self.try_direct(mrs, target, qp, &o, &spec, dest) {
                    return;
                }
            }
            _ => drop(mrs),
        }
        if qp.qp_type() == QpType::Ud {
            spec.header.flags |= wire::FLAG_UD;
            let sent = self.transmit(qp.pd(), &spec, dest);
            let status = if sent {
                0
            } else {
                st::LOCAL_ERROR_INVALID_LKEY as u8
            };
            return complete(qp, &o, status);
        }
        let Some(qp_arc) = qp.arc() else { return };
        let now = Instant::now();
        let req_id = {
            // Allocate the id under the lock that publishes it, so the low
            // watermark (computed under the same lock) never passes a live id.
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let req_id = self.next_req.fetch_add(1, Ordering::Relaxed);
            spec.header.req_id = req_id;
            pend.insert(
                req_id,
                Pending {
                    qp: qp_arc,
                    origin: o,
                    dest,
                    spec: spec.clone(),
                    next_tx: now + RTO,
                    last_heard: now,
                    rnr_left: qp.rnr_retry(),
                    chunk_parent: None,
                    chunking: None,
                },
            );
            req_id
        };
        if !self.transmit(qp.pd(), &spec, dest) {
            self.finish(req_id, st::LOCAL_ERROR_INVALID_LKEY as u8);
        }
    }

    /// Builds and sends the datagram of `spec`; false if a local key went
    /// away (MR deregistered while the WR was outstanding).
    fn transmit(&self, pd: &Pd, spec: &Spec, dest: SocketAddrV4) -> bool {
        SCRATCH.with(|buf| {
            let mut buf = buf.borrow_mut();
            let mrs = self.mrs();
            match self.build_packet(&mrs, pd, spec, &mut buf) {
                Some(len) => {
                    drop(mrs);
                    self.emit(&buf[..len], dest);
                    true
                }
                None => false,
            }
        })
    }

    /// Encodes `spec` (gathering its data from registered memory) into `buf`;
    /// the packet length, or `None` if a local key went away.
    pub(crate) fn build_packet(
        &self,
        mrs: &MrTable,
        pd: &Pd,
        spec: &Spec,
        buf: &mut [u8],
    ) -> Option<usize> {
        let mut h = spec.header;
        if h.flags & wire::FLAG_FAST != 0 {
            // The peer will copy to/from this address: it must still be our
            // registered memory at every (re)transmission.
            let need = if h.op == Op::Read {
                ACCESS_LOCAL_WRITE
            } else {
                0
            };
            h.local_addr = Self::local_range(mrs, pd, spec.sges.first()?, need)? as u64;
        }
        let mut len = wire::HEADER;
        if spec.carries_data {
            if !spec.inline.is_empty() {
                buf[len..len + spec.inline.len()].copy_from_slice(&spec.inline);
                len += spec.inline.len();
            } else {
                for g in &spec.sges {
                    let host = Self::local_range(mrs, pd, g, 0)?;
                    let l = g.length as usize;
                    if len + l > wire::MAX_DATAGRAM {
                        return None;
                    }
                    // SAFETY: host..host+l lies in a live MR (checked under the read lock
                    // the caller holds).
                    unsafe { mem::read_registered(host, &mut buf[len..len + l]) };
                    len += l;
                }
            }
        }
        h.data_len = (len - wire::HEADER) as u32;
        h.watermark = self.low_water.load(Ordering::Relaxed);
        h.encode(buf);
        Some(len)
    }

    /// Sends a packet now, or adds it to this thread's open batch bundle.
    fn emit(&self, pkt: &[u8], dest: SocketAddrV4) {
        TX.with(|tx| {
            let mut tx = tx.borrow_mut();
            let (active, bundle) = &mut *tx;
            if !*active {
                drop(tx);
                self.ep.send(pkt, dest);
                return;
            }
            if bundle.to.is_some_and(|to| to != dest) || !bundle.fits(pkt.len()) {
                if let Some(to) = bundle.to {
                    self.ep.send(bundle.datagram(), to);
                }
                bundle.clear();
            }
            bundle.push(dest, pkt);
        })
    }

    /// Starts bundling this thread's requests (the WQEs of one doorbell).
    pub(crate) fn begin_batch(&self) {
        TX.with(|tx| tx.borrow_mut().0 = true);
    }

    /// Sends the open bundle and stops bundling.
    pub(crate) fn end_batch(&self) {
        TX.with(|tx| {
            let mut tx = tx.borrow_mut();
            let (active, bundle) = &mut *tx;
            *active = false;
            if let Some(to) = bundle.to {
                self.ep.send(bundle.datagram(), to);
            }
            bundle.clear();
        })
    }

    /// Completes pending request `req_id` with `status` (if still pending).
    pub(crate) fn finish(&self, req_id: u64, status: u8) {
        let mut to_send = Outbox::new();
        let done = {
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            self.settle(&mut pend, req_id, status, &mut to_send)
        };
        self.after_settle(done, to_send);
    }

    /// Writes the completion `settle` produced and sends the requests it queued.
    fn after_settle(&self, done: Option<(Arc<Qp>, Origin, u8)>, to_send: Outbox) {
        if let Some((qp, o, status)) = done {
            complete(&qp, &o, status);
        }
        for (pd, spec, dest) in &to_send {
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, st::LOCAL_ERROR_INVALID_LKEY as u8);
            }
        }
    }

    /// Removes request `id` with `status`. A plain WR yields its completion; a
    /// chunk advances (or fails) its parent WR, queueing further chunks or the
    /// write-with-imm commit in `to_send`.
    fn settle(
        &self,
        pend: &mut IdMap<u64, Pending>,
        id: u64,
        status: u8,
        to_send: &mut Outbox,
    ) -> Option<(Arc<Qp>, Origin, u8)> {
        let p = pend.remove(&id)?;
        let Some(parent_id) = p.chunk_parent else {
            return Some((p.qp, p.origin, status));
        };
        if status != 0 {
            pend.retain(|_, c| c.chunk_parent != Some(parent_id));
            let parent = pend.remove(&parent_id)?;
            return Some((parent.qp, parent.origin, status));
        }
        let now = Instant::now();
        let parent = pend.get_mut(&parent_id)?;
        parent.last_heard = now;
        let mut ch = parent.chunking?;
        ch.inflight -= 1;
        let mut next = None;
        if ch.next_off < ch.total {
            let len = (ch.total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            next = Some((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        parent.chunking = Some(ch);
        if ch.inflight == 0 && next.is_none() {
            if parent.spec.header.flags & wire::FLAG_IMM != 0 {
                // All data landed: deliver the immediate with a commit request.
                parent.spec.header.flags =
                    (parent.spec.header.flags & !wire::FLAG_FAST) | wire::FLAG_COMMIT;
                parent.spec.carries_data = false;
                parent.chunking = None;
                parent.next_tx = now + RTO;
                to_send.push((parent.qp.pd().clone(), parent.spec.clone(), parent.dest));
                return None;
            }
            let parent = pend.remove(&parent_id)?;
            return Some((parent.qp, parent.origin, 0));
        }
        if let Some((off, len)) = next {
            self.spawn_chunk(pend, parent_id, off, len, to_send);
        }
        None
    }

    /// Adds chunk `[off, off+len)` of WR `parent_id` as its own request.
    fn spawn_chunk(
        &self,
        pend: &mut IdMap<u64, Pending>,
        parent_id: u64,
        off: u64,
        len: u32,
        to_send: &mut Outbox,
    ) {
        let Some(parent) = pend.get(&parent_id) else {
            return;
        };
        let mut spec = parent.spec.clone();
        spec.header.flags &= !(wire::FLAG_FAST | wire::FLAG_IMM | wire::FLAG_COMMIT);
        spec.header.remote_addr = spec.header.remote_addr.wrapping_add(off);
        spec.header.total_len = len;
        spec.header.pid = 0;
        spec.header.local_addr = 0;
        spec.header.imm = 0;
        if let Some(g) = spec.sges.first_mut() {
            g.addr = g.addr.wrapping_add(off);
            g.length = len;
        }
        spec.carries_data = spec.header.op == Op::Write;
        let now = Instant::now();
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        spec.header.req_id = id;
        let chunk = Pending {
            qp: parent.qp.clone(),
            origin: parent.origin,
            dest: parent.dest,
            spec: spec.clone(),
            next_tx: now + RTO,
            last_heard: now,
            rnr_left: parent.rnr_left,
            chunk_parent: Some(parent_id),
            chunking: None,
        };
        to_send.push((parent.qp.pd().clone(), spec, parent.dest));
        pend.insert(id, chunk);
    }

    /// The responder could not copy with process_vm_*: move WR `id` in chunks.
    fn start_chunking(&self, pend: &mut IdMap<u64, Pending>, id: u64, to_send: &mut Outbox) {
        let Some(p) = pend.get_mut(&id) else { return };
        bump(&self.stats.chunked);
        let total = p.spec.header.total_len as u64;
        let mut ch = Chunking {
            next_off: 0,
            inflight: 0,
            total,
        };
        // The parent itself is not retransmitted while its chunks move.
        p.next_tx = Instant::now() + Duration::from_secs(3600);
        let mut spans = arrayvec::ArrayVec::<(u64, u32), { CHUNK_WINDOW as usize }>::new();
        while ch.next_off < total && ch.inflight < CHUNK_WINDOW {
            let len = (total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            spans.push((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        p.chunking = Some(ch);
        for (off, len) in spans {
            self.spawn_chunk(pend, id, off, len, to_send);
        }
    }

    /// Drops outstanding requests of QP `qpn` without completions.
    pub(crate) fn purge_pending(&self, qpn: u32) {
        let gone: Vec<Pending> = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = p
                .iter()
                .filter(|(_, v)| v.qp.qpn() == qpn)
                .map(|(k, _)| *k)
                .collect();
            ids.into_iter().filter_map(|k| p.remove(&k)).collect()
        };
        drop(gone);
    }

    /// Completes outstanding requests of QP `qpn` with `status`.
    pub(crate) fn flush_pending(&self, qpn: u32, status: u8) {
        self.flush_where(|p| p.qp.qpn() == qpn, status);
    }

    /// Completes outstanding requests sent to device AH `ahn` with FLUSHED.
    pub(crate) fn flush_ah(&self, ahn: u16) {
        self.flush_where(|p| p.origin.ahn == ahn, st::FLUSHED as u8);
    }

    fn flush_where(&self, f: impl Fn(&Pending) -> bool, status: u8) {
        let gone: Vec<Pending> = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = p.iter().filter(|(_, v)| f(v)).map(|(k, _)| *k).collect();
            ids.into_iter().filter_map(|k| p.remove(&k)).collect()
        };
        for p in gone.into_iter().filter(|p| p.chunk_parent.is_none()) {
            complete(&p.qp, &p.origin, status);
        }
    }

    /// A response from `from` to request `h.req_id`.
    pub(crate) fn handle_response(&self, h: &Header, data: &[u8], from: SocketAddrV4) {
        if h.epoch != self.epoch {
            return;
        }
        let now = Instant::now();
        let mut status = h.status;
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pend.get_mut(&h.req_id) else {
            return;
        };
        if p.dest != from {
            return;
        }
        p.last_heard = now;
        if status == STATUS_RNR {
            if p.rnr_left > 0 {
                if p.rnr_left != qp::RNR_RETRY_INFINITE {
                    p.rnr_left -= 1;
                }
                p.next_tx = now + RNR_DELAY;
                drop(pend);
                self.mark_heard(from);
                return;
            }
        } else if status == wire::STATUS_FALLBACK {
            if p.spec.header.flags & wire::FLAG_FAST == 0 || p.chunking.is_some() {
                return; // only a bulk request can fall back; ignore anything else
            }
            let mut to_send = Outbox::new();
            self.start_chunking(&mut pend, h.req_id, &mut to_send);
            drop(pend);
            self.mark_heard(from);
            self.after_settle(None, to_send);
            return;
        } else if p.chunking.is_some() {
            return; // the parent of chunks gets no responses of its own
        } else if status == 0
            && p.spec.header.op == Op::Read
            && p.spec.header.flags & wire::FLAG_FAST == 0
        {
            // Small read: the data came with the response.
            if data.len() != p.spec.header.total_len as usize {
                return; // malformed; keep waiting (retransmission re-reads)
            }
            let mrs = self.mrs();
            let target = p
                .spec
                .sges
                .first()
                .and_then(|g| Self::local_range(&mrs, p.qp.pd(), g, ACCESS_LOCAL_WRITE));
            match target {
                // SAFETY: the range is inside a live MR with LOCAL_WRITE (read lock held).
                Some(host) => unsafe { mem::write_registered(host, data) },
                None if data.is_empty() => {}
                None => status = st::LOCAL_ERROR_INVALID_LKEY as u8,
            }
        }
        let mut to_send = Outbox::new();
        let done = self.settle(&mut pend, h.req_id, status, &mut to_send);
        drop(pend);
        self.mark_heard(from);
        self.after_settle(done, to_send);
    }

    /// Remembers that `from` answered this device (a later silence is status 13, not 15).
    pub(crate) fn mark_heard(&self, from: SocketAddrV4) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        if !heard.contains(&from) {
            heard.insert(from);
        }
    }

    /// Retransmissions, RNR retries and peer timeouts; updates the watermark.
    pub(crate) fn timers(&self) {
        let now = Instant::now();
        let mut resend = Outbox::new();
        let mut expired: Vec<(u64, SocketAddrV4)> = Vec::new();
        {
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut low = self.next_req.load(Ordering::Relaxed);
            for (id, p) in pend.iter_mut() {
                low = low.min(*id);
                if now.duration_since(p.last_heard) > PEER_TIMEOUT {
                    if self.config.trace {
                        eprintln!(
                            "efa-sim trace: expire req {id} lw {} next_tx_in {:?} hdr_wm {}",
                            self.low_water.load(Ordering::Relaxed),
                            p.next_tx.checked_duration_since(now),
                            p.spec.header.watermark
                        );
                    }
                    expired.push((*id, p.dest));
                } else if now >= p.next_tx {
                    p.next_tx = now + RTO;
                    resend.push((p.qp.pd().clone(), p.spec.clone(), p.dest));
                }
            }
            self.low_water.store(low, Ordering::Relaxed);
        }
        for (pd, spec, dest) in &resend {
            bump(&self.stats.retransmits);
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, st::LOCAL_ERROR_INVALID_LKEY as u8);
            }
        }
        for (id, dest) in expired {
            let answered = self
                .heard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&dest);
            let status = if answered {
                st::LOCAL_ERROR_UNRESP_REMOTE
            } else {
                st::LOCAL_ERROR_UNREACH_REMOTE
            };
            self.finish(id, status as u8);
        }
    }

    /// Whether requests are outstanding (the engine then wakes up more often).
    pub(crate) fn has_pending(&self) -> bool {
        !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}
