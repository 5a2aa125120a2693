//! The inbound path of one device: packets from the UDP socket or the shared-memory
//! inbox are handled here (requests executed by the responder, responses given to the
//! requester), answered with responses bundled per destination, and duplicate requests
//! answered from a per-requester cache without executing them again.
//!
//! Its state ([`Inbound`]) is behind one lock, so that whoever holds it drives the path:
//! the engine thread, or a thread polling one of the device's CQs
//! ([`Runtime::progress`]), which then sees the completions its packets produce without
//! waiting for another thread to be scheduled.
//!
//! # Acknowledgements
//!
//! A request that succeeded with nothing to return (a SEND, a write, a bulk copy) is
//! answered by listing its id in an acknowledgement packet ([`wire::KIND_ACKS`]) to its
//! requester rather than by a response of its own: one packet acknowledges up to
//! [`wire::MAX_ACKS`] requests. Other answers (errors, RNR, fallback, read data) are
//! responses, sent at the end of the batch that produced them. Acknowledgements produced
//! by a poller wait for its next call (when they go out before anything else; those of a
//! requester with many requests outstanding, [`wire::FLAG_ACK_LAZY`], wait until
//! [`wire::ACK_BATCH`] of them are due, for [`LAZY_POLLS`] polls that found nothing
//! new, or for the engine), or leave
//! earlier with the next request this process sends to that requester, in the same
//! datagram ([`Runtime::send_requests`]); the engine thread sends whatever waits at every
//! pass (at least every millisecond while pollers are active, and it is woken when they
//! leave some behind while it sleeps for long). So an acknowledgement waits for at most
//! one poll round or about a millisecond, far below the retransmission timeout, and a
//! ping-pong carries each acknowledgement on the next message instead of a frame of its
//! own. The answer to a bulk copy (`process_vm_*`, tens of microseconds per MiB) goes
//! out as soon as it is made, with everything else waiting.

use super::requester::STATUS_RNR;
use super::responder::Outcome;
use super::stats::bump;
use super::{IdMap, Runtime};
use crate::model::mem::{self, Data};
use crate::rcu::Guard;
use crate::transport::shm_ring::Pop;
use crate::transport::wire::{self, Header, Op};
use crate::transport::WAKE;
use efa_sys::vendor::comp_status as st;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Duplicate-suppression state for one requester incarnation.
#[derive(Default)]
struct PeerDedup {
    watermark: u64,
    done: IdMap<u64, u8>,
    last_seen: Option<Instant>,
}

/// A requester incarnation silent this long is forgotten by the responder
/// (its WRs have long timed out).
const PEER_FORGET: Duration = Duration::from_secs(30);

/// Empty polls after which a poller sends lazy acknowledgements that wait for more.
const LAZY_POLLS: u32 = 128;

/// Most inbox frames one poll takes (the rest waits for the next poll or the engine).
const POLL_BATCH: usize = 64;

/// The inbound path's state (one holder at a time).
pub(crate) struct Inbound {
    peers: IdMap<(SocketAddrV4, u64), PeerDedup>,
    out: Vec<u8>,
    /// Responses of the current batch, bundled per destination.
    outs: Vec<wire::BundleBuf>,
    /// Consumer position in this device's inbox (the shared copy is only a hint).
    head: u64,
    /// A frame copied out of the inbox.
    frame: Vec<u8>,
    /// Acknowledgements not yet sent, per requester incarnation.
    acks: Vec<wire::Acks>,
    /// The clock as read at the start of the current batch (dedup bookkeeping).
    now: Instant,
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound {
            peers: IdMap::default(),
            out: vec![0u8; wire::MAX_DATAGRAM],
            outs: Vec::new(),
            head: 0,
            frame: vec![0u8; wire::MAX_DATAGRAM],
            acks: Vec::new(),
            now: Instant::now(),
        }
    }
}

impl Inbound {
    /// The consumer position in the inbox.
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Reads the clock for the batch about to be handled.
    pub(crate) fn tick(&mut self) {
        self.now = Instant::now();
    }
}

impl Runtime {
    /// The inbound path's state (blocking: the engine thread).
    pub(crate) fn inbound(&self) -> std::sync::MutexGuard<'_, Inbound> {
        self.inbound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A CQ of this device was armed: its consumer is about to block rather than poll, so
    /// the engine must take the inbox's frames from now on (it is woken if it napped).
    pub(crate) fn pollers_park(&self) {
        self.pollers_parked.store(true, Ordering::SeqCst);
        if self.engine_napping.load(Ordering::SeqCst) {
            self.ep.send_wake_to_self();
        }
    }

    /// Handles one datagram (a packet or a bundle of them) from `from`.
    pub(crate) fn handle_datagram(&self, ib: &mut Inbound, pkt: &[u8], from: SocketAddrV4) {
        if pkt == WAKE {
            return;
        }
        // A bug in a handler must not take the device down with it.
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                match wire::bundle_items(pkt) {
                    Some(items) => {
                        for item in items {
                            self.handle(ib, item, from);
                        }
                    }
                    None => self.handle(ib, pkt, from),
                }
            }));
        if r.is_err() {
            bump(&self.stats.malformed);
        }
    }

    /// Takes up to `max` frames from this device's inbox; how many it took.
    pub(crate) fn drain_inbox(&self, ib: &mut Inbound, max: usize) -> usize {
        let Some(inbox) = self.ep.inbox() else {
            return 0;
        };
        let ring = inbox.ring();
        if !ring.has_data(ib.head) {
            return 0;
        }
        ib.tick();
        let mut n = 0;
        while n < max {
            let mut frame = std::mem::take(&mut ib.frame);
            let popped = ring.pop(&mut ib.head, &mut frame, wire::MAX_DATAGRAM);
            match popped {
                Pop::Empty => {
                    ib.frame = frame;
                    break;
                }
                Pop::Garbage => bump(&self.stats.shm_garbage),
                Pop::Frame(len, from) => {
                    bump(&self.stats.shm_received);
                    self.handle_datagram(ib, &frame[..len], from);
                }
            }
            ib.frame = frame;
            n += 1;
        }
        n
    }

    /// Called by a poller that found its CQ empty: drives the inbound path if frames are
    /// waiting and nobody else is at it. Returns whether it handled any.
    pub(crate) fn progress(&self) -> bool {
        // Tell the engine pollers are active (it then sleeps without asking for wakes).
        let t = self.poll_ticks.load(Ordering::Relaxed);
        self.poll_ticks.store(t.wrapping_add(1), Ordering::Relaxed);
        let Some(inbox) = self.ep.inbox() else {
            return false;
        };
        let acks = self.acks_waiting.load(Ordering::Relaxed);
        let mut all = false;
        if !acks
            && !inbox
                .ring()
                .has_data(self.inbox_hint.load(Ordering::Relaxed))
        {
            if !self.lazy_acks.load(Ordering::Relaxed) {
                return false;
            }
            // Nothing new for a while: a lazy requester's last acknowledgements go too
            // (the engine would send them within a millisecond, if it gets a core).
            let idle = self.lazy_polls.load(Ordering::Relaxed) + 1;
            self.lazy_polls.store(idle, Ordering::Relaxed);
            if idle < LAZY_POLLS {
                return false;
            }
            all = true;
        }
        let mut ib = match self.inbound.try_lock() {
            Ok(ib) => ib,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        if all {
            self.flush_outs(&mut ib);
            return false;
        }
        if acks {
            // Acknowledgements of the previous round go before anything else (those of
            // lazy requesters wait for more, or for the engine).
            for i in 0..ib.acks.len() {
                if !ib.acks[i].ids.is_empty() && !ib.acks[i].lazy {
                    self.queue_acks(&mut ib, i);
                }
            }
        }
        let n = self.drain_inbox(&mut ib, POLL_BATCH);
        self.inbox_hint.store(ib.head, Ordering::Relaxed);
        self.flush_responses(&mut ib);
        let eager = ib.acks.iter().any(|a| !a.ids.is_empty() && !a.lazy);
        let lazy = ib.acks.iter().any(|a| !a.ids.is_empty() && a.lazy);
        // Published under the lock, so another poller's later view is not overwritten.
        self.acks_waiting.store(eager, Ordering::Relaxed);
        self.lazy_acks.store(lazy, Ordering::Relaxed);
        drop(ib);
        if eager || lazy {
            // An engine asleep for long must not keep them past a millisecond.
            self.ep.kick();
        }
        if n > 0 {
            bump(&self.stats.polled_progress);
        }
        n > 0
    }

    /// Sends the requests bundled in `tx` (all for `to`), in one datagram with the
    /// acknowledgements waiting for `to` when there are any; empties `tx`.
    pub(crate) fn send_requests(&self, tx: &mut wire::BundleBuf, to: SocketAddrV4) {
        if self.acks_waiting.load(Ordering::Relaxed) || self.lazy_acks.load(Ordering::Relaxed) {
            let ib = match self.inbound.try_lock() {
                Ok(ib) => Some(ib),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut ib) = ib {
                if let Some(i) = ib.acks.iter().position(|a| a.to == to && !a.ids.is_empty()) {
                    let mut out = std::mem::take(&mut ib.out);
                    let len = ib.acks[i].encode(self.gid, &mut out);
                    if tx.fits(len) {
                        // The acknowledgements join the requests' bundle.
                        tx.push(to, &out[..len]);
                        ib.acks[i].ids.clear();
                        ib.acks[i].lazy = true;
                        ib.out = out;
                        self.ep.send(tx.datagram(), to);
                    } else {
                        ib.out = out;
                        self.queue_acks(&mut ib, i);
                        for pkt in tx.items() {
                            self.queue_out(&mut ib, pkt, to);
                        }
                        if let Some(b) = ib.outs.iter_mut().find(|b| b.to == Some(to)) {
                            self.ep.send(b.datagram(), to);
                            b.clear();
                        }
                    }
                    tx.clear();
                    let waiting =
                        |lazy: bool| ib.acks.iter().any(|a| !a.ids.is_empty() && a.lazy == lazy);
                    self.acks_waiting.store(waiting(false), Ordering::Relaxed);
                    self.lazy_acks.store(waiting(true), Ordering::Relaxed);
                    return;
                }
            }
        }
        self.ep.send(tx.datagram(), to);
        tx.clear();
    }

    fn handle(&self, ib: &mut Inbound, pkt: &[u8], from: SocketAddrV4) {
        let Some((h, data)) = Header::decode(pkt) else {
            bump(&self.stats.malformed);
            return;
        };
        if h.kind == wire::KIND_RESP {
            self.handle_response(&h, data, from);
            return;
        }
        if h.kind == wire::KIND_ACKS {
            self.handle_acks(&h, data, from);
            return;
        }
        if h.flags & wire::FLAG_UD != 0 {
            self.ud_receive(&h, data);
            return;
        }
        // A small read answers with its data and is simply executed again; a bulk read
        // wrote the requester's memory already, and a retransmission that overtook the
        // ack must not copy its megabytes twice.
        let dedup = h.op != Op::Read || h.flags & wire::FLAG_FAST != 0;
        if dedup {
            let now = ib.now;
            let peer = ib.peers.entry((from, h.epoch)).or_default();
            peer.last_seen = Some(now);
            if h.watermark > peer.watermark {
                peer.watermark = h.watermark;
                if peer.done.len() > 1024 {
                    let wm = peer.watermark;
                    peer.done.retain(|k, _| *k >= wm);
                }
            }
            if h.req_id < peer.watermark {
                bump(&self.stats.stale);
                return;
            }
            if let Some(st) = peer.done.get(&h.req_id).copied() {
                bump(&self.stats.duplicates);
                self.respond(ib, &h, st, 0, from);
                return;
            }
        }
        let mut resp_len = 0usize;
        let g = Guard::enter();
        let mut read_src = None;
        let mut outcome = self.execute(&h, Data::Bytes(data), Some(from), &g, &mut read_src);
        if matches!(outcome, Outcome::Respond(0))
            && h.op == Op::Read
            && h.flags & wire::FLAG_FAST == 0
        {
            resp_len = h.total_len as usize;
            let out = &mut ib.out[wire::HEADER..wire::HEADER + resp_len];
            // SAFETY: `read_src` is the responder's validated range of `total_len` bytes
            // (at most MAX_DATA, checked by execute) in a live MR: the section is open.
            let copied = read_src.map(|at| unsafe { mem::read_registered(at, out) });
            if !matches!(copied, Some(Ok(()))) {
                resp_len = 0;
                outcome = Outcome::Respond(st::REMOTE_ERROR_BAD_ADDRESS as u8);
            }
        }
        drop(g);
        match outcome {
            Outcome::Drop => {}
            Outcome::Respond(st) => {
                if st == STATUS_RNR {
                    bump(&self.stats.rnr_naks);
                } else if dedup && st != wire::STATUS_FALLBACK {
                    ib.peers
                        .entry((from, h.epoch))
                        .or_default()
                        .done
                        .insert(h.req_id, st);
                }
                self.respond(ib, &h, st, resp_len, from);
                if h.flags & wire::FLAG_FAST != 0 {
                    // A bulk copy took long: answer now, so its requester refills its
                    // window while the next ones are copied (the pipe never runs dry).
                    self.flush_outs(ib);
                }
            }
        }
    }

    /// Queues the answer to `req`: an acknowledgement when it succeeded with nothing to
    /// return, else a response (`ib.out[HEADER..HEADER+data_len]` holds read data).
    fn respond(
        &self,
        ib: &mut Inbound,
        req: &Header,
        status: u8,
        data_len: usize,
        to: SocketAddrV4,
    ) {
        let small_read = req.op == Op::Read && req.flags & wire::FLAG_FAST == 0;
        if status == 0 && !small_read {
            let i = match ib
                .acks
                .iter()
                .position(|a| a.to == to && a.epoch == req.epoch)
            {
                Some(i) => i,
                None => {
                    // Reuse an emptied list (its allocation) before adding one.
                    match ib.acks.iter().position(|a| a.ids.is_empty()) {
                        Some(i) => {
                            ib.acks[i].to = to;
                            ib.acks[i].epoch = req.epoch;
                            ib.acks[i].lazy = true;
                            i
                        }
                        None => {
                            ib.acks.push(wire::Acks {
                                to,
                                epoch: req.epoch,
                                ids: Vec::with_capacity(64),
                                lazy: true,
                            });
                            ib.acks.len() - 1
                        }
                    }
                }
            };
            let a = &mut ib.acks[i];
            a.ids.push(req.req_id);
            a.lazy &= req.flags & wire::FLAG_ACK_LAZY != 0;
            let full = if a.lazy {
                wire::ACK_BATCH
            } else {
                wire::MAX_ACKS
            };
            if a.ids.len() >= full {
                self.queue_acks(ib, i);
            }
            return;
        }
        let mut h = Header::new(wire::KIND_RESP, req.op);
        h.status = status;
        h.epoch = req.epoch;
        h.req_id = req.req_id;
        h.src_gid = self.gid;
        h.src_qpn = req.dst_qpn;
        h.dst_qpn = req.src_qpn;
        let data_len = if status == 0 { data_len } else { 0 };
        h.data_len = data_len as u32;
        let mut out = std::mem::take(&mut ib.out);
        h.encode(&mut out);
        self.queue_out(ib, &out[..wire::HEADER + data_len], to);
        ib.out = out;
    }

    /// Moves acknowledgement list `i` into the bundle for its requester as one packet.
    fn queue_acks(&self, ib: &mut Inbound, i: usize) {
        let mut out = std::mem::take(&mut ib.out);
        let len = ib.acks[i].encode(self.gid, &mut out);
        let to = ib.acks[i].to;
        ib.acks[i].ids.clear();
        ib.acks[i].lazy = true;
        self.queue_out(ib, &out[..len], to);
        ib.out = out;
    }

    /// Adds `pkt` to the bundle for `to` (sending that bundle first if it is full).
    fn queue_out(&self, ib: &mut Inbound, pkt: &[u8], to: SocketAddrV4) {
        let slot = match ib.outs.iter().position(|b| b.to == Some(to)) {
            Some(i) if ib.outs[i].fits(pkt.len()) => i,
            Some(i) => {
                self.ep.send(ib.outs[i].datagram(), to);
                ib.outs[i].clear();
                i
            }
            None => match ib.outs.iter().position(|b| b.to.is_none()) {
                Some(i) => i,
                None => {
                    ib.outs.push(wire::BundleBuf::default());
                    ib.outs.len() - 1
                }
            },
        };
        ib.outs[slot].push(to, pkt);
    }

    /// Sends every answer of this batch, acknowledgements included.
    pub(crate) fn flush_outs(&self, ib: &mut Inbound) {
        for i in 0..ib.acks.len() {
            if !ib.acks[i].ids.is_empty() {
                self.queue_acks(ib, i);
            }
        }
        self.acks_waiting.store(false, Ordering::Relaxed);
        self.lazy_acks.store(false, Ordering::Relaxed);
        self.lazy_polls.store(0, Ordering::Relaxed);
        self.flush_responses(ib);
    }

    /// Sends the bundled responses of this batch (acknowledgements not yet listed in
    /// one may wait, see the module docs).
    fn flush_responses(&self, ib: &mut Inbound) {
        for b in &mut ib.outs {
            if let Some(to) = b.to {
                self.ep.send(b.datagram(), to);
                b.clear();
            }
        }
    }

    /// Drops the dedup state of requester incarnations silent for [`PEER_FORGET`].
    pub(crate) fn forget_silent_peers(&self, ib: &mut Inbound) {
        if ib.peers.len() > 64 {
            let now = Instant::now();
            ib.peers.retain(|_, p| {
                p.last_seen
                    .is_some_and(|t| now.duration_since(t) < PEER_FORGET)
            });
        }
    }
}
