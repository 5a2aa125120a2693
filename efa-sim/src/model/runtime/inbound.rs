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
//! Answers (responses and acknowledgements) are queued and sent by [`super::answers`].

use super::answered::Answered;
use super::requester::STATUS_RNR;
use super::responder::Outcome;
use super::stats::{bump, bump_locked};
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
    done: Answered,
    /// The first sweep of [`Runtime::forget_silent_peers`] after its last request;
    /// `None` if it sent one since the last sweep.
    last_seen: Option<Instant>,
}

impl PeerDedup {
    /// Whether a sweep at `now` keeps this state: stamps it with `now` if it was heard
    /// since the last sweep, and forgets it once its stamp is [`PEER_FORGET`] old.
    fn still_remembered(&mut self, now: Instant) -> bool {
        let seen = *self.last_seen.get_or_insert(now);
        now.duration_since(seen) < PEER_FORGET
    }
}

/// A requester incarnation silent this long is forgotten by the responder
/// (its WRs have long timed out).
const PEER_FORGET: Duration = Duration::from_secs(30);

/// Empty polls after which a poller sends lazy acknowledgements that wait for more.
pub(super) const LAZY_POLLS: u32 = 128;

/// Most inbox frames one poll takes (the rest waits for the next poll or the engine).
const POLL_BATCH: usize = 64;

/// The inbound path's state (one holder at a time).
pub(crate) struct Inbound {
    peers: IdMap<(SocketAddrV4, u64), PeerDedup>,
    /// Scratch for one encoded answer.
    pub(super) out: Vec<u8>,
    /// Responses of the current batch, bundled per destination.
    pub(super) outs: Vec<wire::BundleBuf>,
    /// Consumer position in this device's inbox (the shared copy is only a hint).
    head: u64,
    /// A frame copied out of the inbox.
    frame: Vec<u8>,
    /// Acknowledgements not yet sent, per requester incarnation.
    pub(super) acks: Vec<wire::Acks>,
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
        }
    }
}

impl Inbound {
    /// The consumer position in the inbox.
    pub(crate) fn head(&self) -> u64 {
        self.head
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
                    // The caller holds the inbound lock (`ib`).
                    bump_locked(&self.stats.shm_received);
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
        // Strict mode: WQEs held back that are due run here too (a poller waiting for
        // their completions needs no engine wake-up).
        if self.strict.is_some() && self.run_held(true) > 0 {
            return true;
        }
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
        if n > 0 {
            bump_locked(&self.stats.polled_progress);
        }
        drop(ib);
        if eager || lazy {
            // An engine asleep for long must not keep them past a millisecond.
            self.ep.kick();
        }
        n > 0
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
        // The requester's dedup state is looked up once, and kept across the execution to
        // remember this request's status in.
        let mut remember = None;
        // A bulk read answered with a pull before: the answer names our memory, so the
        // request is validated again to answer it (not counted as a second copy).
        let mut pulled = false;
        if dedup {
            let peer = ib.peers.entry((from, h.epoch)).or_default();
            peer.last_seen = None;
            if h.watermark > peer.watermark {
                peer.watermark = h.watermark;
                peer.done.forget_below(peer.watermark);
            }
            if h.req_id < peer.watermark {
                bump(&self.stats.stale);
                return;
            }
            if let Some(st) = peer.done.get(h.req_id) {
                bump(&self.stats.duplicates);
                if st != wire::STATUS_PULL {
                    self.respond(ib, &h, st, 0, from);
                    return;
                }
                pulled = true;
            } else {
                remember = Some(peer);
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
            Outcome::Pull(src) => {
                if !pulled {
                    bump(&self.stats.process_vm);
                }
                if let Some(peer) = remember {
                    peer.done
                        .insert(h.req_id, wire::STATUS_PULL, peer.watermark);
                }
                self.respond_pull(ib, &h, src, from);
                // The requester copies as soon as this arrives: it goes now.
                self.flush_outs(ib);
            }
            Outcome::Respond(st) => {
                if st == STATUS_RNR {
                    bump(&self.stats.rnr_naks);
                } else if st != wire::STATUS_FALLBACK {
                    if let Some(peer) = remember {
                        peer.done.insert(h.req_id, st, peer.watermark);
                    }
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

    /// Drops the dedup state of requester incarnations silent for [`PEER_FORGET`].
    pub(crate) fn forget_silent_peers(&self, ib: &mut Inbound) {
        if ib.peers.len() > 64 {
            let now = Instant::now();
            // A peer heard since the last sweep has no stamp: it gets this sweep's, so
            // silence is counted from the first sweep after its last request (never
            // from before it) without a clock read per request.
            ib.peers.retain(|_, p| p.still_remembered(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requester_is_forgotten_only_after_a_whole_silence_from_a_sweep() {
        let t0 = Instant::now();
        let mut p = PeerDedup::default();
        assert!(
            p.still_remembered(t0),
            "heard since the last sweep: stamped, kept"
        );
        let late = t0 + PEER_FORGET + Duration::from_millis(1);
        assert!(p.still_remembered(t0 + PEER_FORGET / 2));
        // A request after the stamp clears it: silence counts from the next sweep.
        p.last_seen = None;
        assert!(p.still_remembered(late), "heard again, so not forgotten");
        assert!(!p.still_remembered(late + PEER_FORGET + Duration::from_millis(1)));
    }
}
