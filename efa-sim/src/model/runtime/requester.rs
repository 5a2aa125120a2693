//! The requester: a WQE the device took from a send queue becomes a request (executed at
//! once on a same-process target, see [`super::direct`], or sent as a datagram), and
//! its completion goes to the QP's send CQ when the responder's answer arrives (or the
//! WR fails: RNR retries exhausted, peer silent, AH destroyed, QP flushed).

use super::chunks::ChunkRole;
use super::doorbell::Doorbell;
use super::pending::PendingTable;
use super::request::{complete, Local, Origin, Outbox, Pending, Spec};
use super::tables::MrTable;
use super::{Runtime, INLINE_RDMA};
use crate::model::mem::{self, Data, Place};
use crate::model::send_wqe::Request;
use crate::model::{Pd, Qp, QpType, SendOp, Sge, ACCESS_LOCAL_WRITE};
use crate::rcu::Guard;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Requests outstanding from which new ones ask for lazy acknowledgements
/// ([`wire::FLAG_ACK_LAZY`]): with this many in flight, acknowledgements in groups of
/// [`wire::ACK_BATCH`] keep the window open.
const LAZY_OUTSTANDING: usize = 64;

/// Status of an RNR answer.
pub(crate) const STATUS_RNR: u8 = st::REMOTE_ERROR_RNR as u8;

thread_local! {
    /// Where a request is rebuilt for its retransmission (first transmissions are built
    /// in place in `TX`).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; wire::MAX_DATAGRAM]);
    /// Requests of one doorbell, bundled per destination.
    static TX: RefCell<(bool, wire::BundleBuf)> = RefCell::new((false, wire::BundleBuf::default()));
}

impl Runtime {
    /// Local range of `sge` inside a live MR of `pd` with `need` access (valid while `g`
    /// is open).
    #[inline]
    pub(crate) fn local_range(
        mrs: &MrTable,
        pd: &Pd,
        sge: &Sge,
        need: u32,
        g: &Guard,
    ) -> Option<Place> {
        let mr = mrs.get(sge.lkey, g)?;
        if !core::ptr::eq(&*mr.pd, pd) {
            return None;
        }
        mr.place(sge.addr, sge.length as u64, need)
    }

    /// Executes one WQE the device took from `qp`'s send queue inside the consumer's read
    /// section `g` (one per doorbell); true if it completed on the same-process direct
    /// path. `db` is what the WQEs of this doorbell share (the route, the peer marked
    /// heard, the completions written together).
    #[inline]
    pub(crate) fn start_send(
        &self,
        qp: &Qp,
        r: &Request<'_>,
        g: &Guard,
        db: &mut Doorbell,
    ) -> bool {
        let o = Origin::of(r);
        let route = match db.route {
            Some(route) if route.serves(r) => route,
            _ => match self.route(qp, r, g) {
                Some(route) => *db.route.insert(route),
                None => return db.failed(qp, &o, st::LOCAL_ERROR_INVALID_AH as u8),
            },
        };
        let dest = route.dest;
        let total = r.total;
        let rdma = r.op != SendOp::Send && r.op != SendOp::SendImm;
        if (!rdma && total > self.profile.mtu_bytes as u64)
            || (rdma && total > self.profile.max_rdma_size as u64)
        {
            return db.failed(qp, &o, st::LOCAL_ERROR_BAD_LENGTH as u8);
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
        h.flags = wire::FLAG_TAKES_ACKS;
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
        let mut hosts =
            arrayvec::ArrayVec::<(usize, usize), { efa_sys::io::TX_DESC_NUM_BUFS }>::new();
        let mut first = None;
        let mut all_host = true;
        for sge in r.sges() {
            match Self::local_range(self.mrs(), qp.pd(), sge, need, g) {
                Some(place) => {
                    first.get_or_insert(place);
                    match place.host() {
                        Some(host) => hosts.push((host, sge.length as usize)),
                        None => all_host = false,
                    }
                }
                None => return db.failed(qp, &o, st::LOCAL_ERROR_INVALID_LKEY as u8),
            }
        }
        self.count_request(r.op, total);
        // Direct only to a same-process device (see `route`), and only from host memory
        // (local GPU memory reached by copies takes the datagram path).
        if let Some(target) = route.local {
            if qp.qp_type() != QpType::Ud && all_host {
                let data = if r.inline.is_empty() {
                    Data::Local(&hosts)
                } else {
                    Data::Bytes(r.inline)
                };
                if self.try_direct(target, qp, &o, &h, data, (g, db)) {
                    if db.heard != Some(dest) {
                        self.mark_heard(dest);
                        db.heard = Some(dest);
                    }
                    return true;
                }
            }
        }
        self.send_datagram(qp, r, (o, h), (first, dest), (g, db));
        false
    }

    /// Counts a work request the device takes to the wire in its `hw_counters` (the
    /// requester's side; see [`crate::sysfs::counters`]).
    #[inline]
    fn count_request(&self, op: SendOp, bytes: u64) {
        use crate::sysfs::counters::port::*;
        let (hw, mtu) = (&self.hw, self.profile.mtu_bytes);
        match op {
            SendOp::Send | SendOp::SendImm => {
                hw.add(SEND_WRS, 1);
                hw.add(SEND_BYTES, bytes);
                hw.add_transfer(TX_BYTES, TX_PKTS, bytes, mtu);
            }
            SendOp::RdmaRead => {
                hw.add(RDMA_READ_WRS, 1);
                hw.add(RDMA_READ_BYTES, bytes);
                hw.add(TX_PKTS, 1); // the request
                hw.add_transfer(RX_BYTES, RX_PKTS, bytes, mtu);
            }
            _ => {
                hw.add(RDMA_WRITE_WRS, 1);
                hw.add(RDMA_WRITE_BYTES, bytes);
                hw.add_transfer(TX_BYTES, TX_PKTS, bytes, mtu);
            }
        }
    }

    /// The datagram path of [`Runtime::start_send`]: `first` is where the validated first
    /// SGE is; `g` is the consumer's read section.
    fn send_datagram(
        &self,
        qp: &Qp,
        r: &Request<'_>,
        (o, h): (Origin, Header),
        (first, dest): (Option<Place>, SocketAddrV4),
        (g, db): (&Guard, &mut Doorbell),
    ) {
        let rdma = r.op != SendOp::Send && r.op != SendOp::SendImm;
        let bulk = rdma && h.total_len as usize > INLINE_RDMA;
        let carries_data = !bulk && r.op != SendOp::RdmaRead;
        if qp.qp_type() == QpType::Ud {
            let mut spec = Spec::of(r, h, carries_data);
            spec.header.flags |= wire::FLAG_UD;
            let sent = self.transmit(qp.pd(), &spec, dest);
            let status = if sent {
                0
            } else {
                st::LOCAL_ERROR_INVALID_LKEY as u8
            };
            return db.complete(qp, &o, status);
        }
        // The entry is built once, here, and moved only into the table: the closures
        // below borrow it (a `Spec` moved through them was copied at every step).
        let mut p = Pending {
            qpn: qp.qpn(),
            origin: o,
            dest,
            spec: Spec::of(r, h, carries_data),
            next_tx: None,
            last_heard: None,
            rnr_left: qp.rnr_retry(),
            chunk: ChunkRole::None,
        };
        // Local GPU memory (no host address) cannot be named to the peer's process_vm_*
        // copy: such a bulk WR moves in chunks from the start.
        let chunk_now = bulk && first.and_then(Place::host).is_none();
        if bulk && !chunk_now {
            // One SGE (the WQE format holds one for RDMA); the peer copies from/to it.
            p.spec.header.flags |= wire::FLAG_FAST;
            p.spec.header.pid = self.pid;
            p.spec.header.local_addr = first.and_then(Place::host).unwrap_or(0) as u64;
        }
        if chunk_now {
            let mut chunks = Outbox::new();
            let first_pending = {
                let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let first_pending = pend.is_empty();
                let req_id = self.publish_id(&mut pend, &mut p.spec);
                pend.insert(req_id, p);
                self.start_chunking(&mut pend, req_id, &mut chunks);
                first_pending
            };
            if first_pending {
                self.ep.kick();
            }
            return self.after_settle(None, chunks);
        }
        // The datagram is built in place in this thread's outgoing bundle (no scratch
        // buffer, no copy into the bundle).
        let need = wire::HEADER + p.spec.data_len();
        TX.with(|tx| {
            let bundle = &mut tx.borrow_mut().1;
            if bundle.to.is_some_and(|to| to != dest) || !bundle.fits(need) {
                if let Some(to) = bundle.to {
                    self.send_requests(bundle, to);
                }
                bundle.clear();
            }
        });
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let first_pending = pend.is_empty();
        let req_id = self.publish_id(&mut pend, &mut p.spec);
        // Built under the lock that publishes its id, before the entry moves into the
        // table; it leaves only after the entry is in, so no response can miss it.
        let built = TX.with(|tx| {
            let bundle = &mut tx.borrow_mut().1;
            bundle.push_with(dest, need, |buf| {
                self.build_packet(qp.pd(), &p.spec, buf, g)
            })
        });
        if built.is_none() {
            // A local key went away: the id was never published.
            drop(pend);
            return db.complete(qp, &o, st::LOCAL_ERROR_INVALID_LKEY as u8);
        }
        pend.insert(req_id, p);
        drop(pend);
        if first_pending {
            // The engine may sleep for long with nothing outstanding: its timers are
            // needed from now on (retransmission, peer timeout).
            self.ep.kick();
        }
        TX.with(|tx| {
            let (active, bundle) = &mut *tx.borrow_mut();
            if !*active {
                // Outside a doorbell's batch: it leaves now (with the acknowledgements
                // waiting for `dest`, if any).
                self.send_requests(bundle, dest);
            }
        })
    }

    /// Allocates the request id of `spec` under the lock of the table `pend` that
    /// publishes it (so the low watermark, computed under the same lock, never passes a
    /// live id), and asks for lazy acknowledgements when many requests are outstanding.
    #[inline(always)]
    fn publish_id(&self, pend: &mut PendingTable<Pending>, spec: &mut Spec) -> u64 {
        if pend.len() >= LAZY_OUTSTANDING {
            spec.header.flags |= wire::FLAG_ACK_LAZY;
        }
        let req_id = pend.take_id();
        spec.header.req_id = req_id;
        // The watermark moves with every request, not only at the engine's timer tick:
        // a responder forgets the answers below it, and one that lags behind a fast
        // stream keeps thousands of them in its overflow map.
        self.refresh_low_water(pend, req_id);
        req_id
    }

    /// Sets the low watermark requests carry to the oldest id of `pend` (`next`, the next
    /// id to be handed out, when none is older), under the lock of `pend`.
    #[inline(always)]
    pub(crate) fn refresh_low_water(&self, pend: &mut PendingTable<Pending>, next: u64) {
        let low = pend.oldest(next);
        if self.low_water.load(Ordering::Relaxed) != low {
            self.low_water.store(low, Ordering::Relaxed);
        }
    }

    /// Builds and sends the datagram of `spec`; false if a local key went
    /// away (MR deregistered while the WR was outstanding).
    pub(crate) fn transmit(&self, pd: &Pd, spec: &Spec, dest: SocketAddrV4) -> bool {
        SCRATCH.with(|buf| {
            let mut buf = buf.borrow_mut();
            let g = Guard::enter();
            match self.build_packet(pd, spec, &mut buf, &g) {
                Some(len) => {
                    drop(g);
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
        pd: &Pd,
        spec: &Spec,
        buf: &mut [u8],
        g: &Guard,
    ) -> Option<usize> {
        let mrs = self.mrs();
        let mut h = spec.header;
        if h.flags & wire::FLAG_FAST != 0 {
            // The peer will copy to/from this address: it must still be our
            // registered memory at every (re)transmission.
            let need = if h.op == Op::Read {
                ACCESS_LOCAL_WRITE
            } else {
                0
            };
            h.local_addr =
                Self::local_range(mrs, pd, spec.local.sges().first()?, need, g)?.host()? as u64;
        }
        let mut len = wire::HEADER;
        if spec.carries_data {
            match &spec.local {
                Local::Inline(d) => {
                    buf[len..len + d.len()].copy_from_slice(d);
                    len += d.len();
                }
                Local::Sges(sges) => {
                    for sge in sges {
                        let at = Self::local_range(mrs, pd, sge, 0, g)?;
                        let l = sge.length as usize;
                        if len + l > buf.len() {
                            return None;
                        }
                        // SAFETY: at..at+l lies in a live MR (checked inside the section
                        // the caller holds open).
                        unsafe { mem::read_registered(at, &mut buf[len..len + l]) }.ok()?;
                        len += l;
                    }
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
                let waiting = self.acks_waiting.load(Ordering::Relaxed)
                    || self.lazy_acks.load(Ordering::Relaxed);
                if waiting && bundle.to.is_none() {
                    // Acknowledgements for `dest` may travel with it.
                    bundle.push(dest, pkt);
                    return self.send_requests(bundle, dest);
                }
                drop(tx);
                self.ep.send(pkt, dest);
                return;
            }
            if bundle.to.is_some_and(|to| to != dest) || !bundle.fits(pkt.len()) {
                if let Some(to) = bundle.to {
                    self.send_requests(bundle, to);
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
                self.send_requests(bundle, to);
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
    pub(crate) fn after_settle(&self, done: Option<(u32, Origin, u8)>, to_send: Outbox) {
        if let Some((qpn, o, status)) = done {
            self.complete_qpn(qpn, &o, status);
        }
        for (pd, spec, dest) in &to_send {
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, st::LOCAL_ERROR_INVALID_LKEY as u8);
            }
        }
    }

    /// Drops outstanding requests of QP `qpn` without completions; returns once no copy
    /// into their buffers runs (see [`Runtime::wait_pulls`]).
    pub(crate) fn purge_pending(&self, qpn: u32) {
        let gone = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(|p| p.qpn == qpn);
        self.wait_pulls();
        drop(gone);
    }

    /// Completes outstanding requests of QP `qpn` with `status`.
    pub(crate) fn flush_pending(&self, qpn: u32, status: u8) {
        self.flush_where(|p| p.qpn == qpn, status);
    }

    /// Completes outstanding requests sent to device AH `ahn` with FLUSHED.
    pub(crate) fn flush_ah(&self, ahn: u16) {
        self.flush_where(|p| p.origin.ahn == ahn, st::FLUSHED as u8);
    }

    fn flush_where(&self, f: impl Fn(&Pending) -> bool, status: u8) {
        let gone = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_if(f);
        self.wait_pulls();
        for p in gone.into_iter().filter(|p| p.chunk.parent().is_none()) {
            self.complete_qpn(p.qpn, &p.origin, status);
        }
    }

    /// The PD of QP `qpn`, if it still lives (for a request sent again).
    pub(crate) fn pd_of(&self, qpn: u32) -> Option<Arc<Pd>> {
        let g = Guard::enter();
        self.qp(qpn, &g).map(|qp| qp.pd().clone())
    }

    /// Writes the send completion of `o` with `status` for QP `qpn`, if it still lives.
    pub(crate) fn complete_qpn(&self, qpn: u32, o: &Origin, status: u8) {
        let g = Guard::enter();
        if let Some(qp) = self.qp(qpn, &g) {
            complete(qp, o, status);
        }
    }
}
