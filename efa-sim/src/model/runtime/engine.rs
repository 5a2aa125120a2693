//! The engine thread of one device: the progress nobody polls for. It receives UDP
//! datagrams, takes the inbox's frames when no poller does (the responder side of
//! one-sided operations, a process that does not poll), runs the requester's timers
//! (retransmission, RNR retries, peer timeouts) every millisecond while requests are
//! outstanding, and otherwise sleeps:
//!
//! * with nothing outstanding and nothing arriving it sleeps in `poll` on its socket for
//!   up to [`IDLE_SLEEP`], its inbox's sleeping flag set, so the first frame that arrives
//!   has its sender wake it (a 4-byte datagram), and so does this process when it needs
//!   the timers again (its first outstanding request, a held-back datagram of fault
//!   injection: `Endpoint::kick`): no busy core when nothing happens;
//! * while a poller of one of its CQs drives the inbox ([`Runtime::progress`]) it sleeps
//!   without the flag (senders pay no wake-up) and looks again every [`POLLED_NAP`]; it
//!   notices within that time when the pollers stopped;
//! * when nobody polls and it just had work, it watches the inbox for up to
//!   [`ENGINE_SPIN`] before it sleeps: a responder serving a stream (one-sided RDMA to a
//!   process that does not poll) takes the next frame without a wake-up datagram and
//!   the scheduler latency behind it, and an idle device still sleeps a few microseconds
//!   after its last packet. The watch adapts: one that ends without a frame halves the
//!   next (down to [`MIN_SPIN`]), one that finds a frame doubles it (up to
//!   [`ENGINE_SPIN`]).
//!   Request/response traffic whose peer polls its rings directly (a direct data path
//!   never calls into efa-sim, so only this thread moves its inbox) then waits asleep
//!   and leaves the CPU to the pollers, which on a machine with few cores is what lets
//!   the answer come at all; a stream keeps the full watch.

use super::Runtime;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep with nothing outstanding.
pub const IDLE_SLEEP: Duration = Duration::from_millis(1000);
/// Sleep between looks while pollers drive the inbox (or timers are due).
pub const POLLED_NAP: Duration = Duration::from_millis(1);

/// How long the engine watches its inbox for more frames after work before it sleeps.
pub const ENGINE_SPIN: Duration = Duration::from_micros(50);

/// The shortest watch of the inbox after work.
pub const MIN_SPIN: Duration = Duration::from_micros(2);

/// Most inbox frames one engine pass takes before it looks at the socket and the timers.
const ENGINE_BATCH: usize = 256;

/// The engine thread's private state.
pub(crate) struct Engine {
    rt: Arc<Runtime>,
    bufs: Vec<Vec<u8>>,
    got: Vec<(usize, std::net::SocketAddrV4)>,
    /// How long the next watch of the inbox may last (adapts, see the module docs).
    spin: Duration,
}

impl Engine {
    pub(crate) fn new(rt: Arc<Runtime>) -> Engine {
        Engine {
            rt,
            bufs: (0..32)
                .map(|_| vec![0u8; crate::transport::wire::MAX_DATAGRAM + 64])
                .collect(),
            got: Vec::with_capacity(32),
            spin: ENGINE_SPIN,
        }
    }

    pub(crate) fn run(mut self) {
        let mut last_timer = Instant::now();
        let mut ticks_seen = self.rt.poll_ticks.load(Ordering::Relaxed);
        let mut last_work = Instant::now();
        loop {
            // Strict mode's held WQEs run here too when traffic never lets the engine rest.
            let worked = self.pass() | (self.rt.run_held(false) > 0);
            let now = Instant::now();
            if worked {
                last_work = now;
            }
            if now.duration_since(last_timer) >= POLLED_NAP {
                last_timer = now;
                self.rt.timers();
                self.rt.ep.collect_routes();
                let mut ib = self.rt.inbound();
                self.rt.forget_silent_peers(&mut ib);
            }
            if worked {
                continue;
            }
            let busy = self.rt.has_pending() || self.rt.ep.flush_delayed() || self.rt.has_held();
            let ticks = self.rt.poll_ticks.load(Ordering::Relaxed);
            let parked = self.rt.pollers_parked.swap(false, Ordering::AcqRel);
            let polled = ticks != ticks_seen && !parked;
            ticks_seen = ticks;
            if polled {
                // Pollers take the inbox's frames; the socket still wakes us (an armed
                // CQ does, see `Runtime::pollers_park`).
                self.rt.engine_napping.store(true, Ordering::SeqCst);
                if !self.rt.pollers_parked.load(Ordering::SeqCst) {
                    self.rt.ep.wait_readable(POLLED_NAP);
                }
                self.rt.engine_napping.store(false, Ordering::Relaxed);
                continue;
            }
            if self.frames_within(last_work + self.spin) {
                self.spin = (self.spin * 2).clamp(MIN_SPIN, ENGINE_SPIN);
                continue;
            }
            self.spin = (self.spin / 2).max(MIN_SPIN);
            let ep = &self.rt.ep;
            if !busy {
                // A long sleep: whoever adds work for the timers from now on wakes us.
                ep.enter_idle();
                if self.rt.has_pending() || ep.has_delayed() || self.rt.has_held() {
                    ep.leave_idle();
                    continue;
                }
            }
            let head = self.rt.inbox_hint.load(Ordering::Relaxed);
            let ring = ep.inbox().map(|i| i.ring());
            if ring.is_some_and(|r| !r.prepare_sleep(head)) {
                ep.leave_idle();
                continue; // frames arrived while we decided to sleep
            }
            // Strict mode: no later than the first held WQE is due.
            let nap = match self.rt.held_due() {
                Some(due) => POLLED_NAP.min(due.saturating_duration_since(Instant::now())),
                None => POLLED_NAP,
            };
            ep.wait_readable(if busy { nap } else { IDLE_SLEEP });
            ep.leave_idle();
            if let Some(r) = ring {
                r.awake();
            }
        }
    }

    /// Watches the inbox until `deadline`: whether frames arrived.
    fn frames_within(&self, deadline: Instant) -> bool {
        let Some(ring) = self.rt.ep.inbox().map(|i| i.ring()) else {
            return false;
        };
        let head = self.rt.inbox_hint.load(Ordering::Relaxed);
        while Instant::now() < deadline {
            for _ in 0..64 {
                if ring.has_data(head) {
                    return true;
                }
                core::hint::spin_loop();
            }
        }
        false
    }

    /// Receives what the socket has and takes the inbox's frames; whether it found any.
    fn pass(&mut self) -> bool {
        let rt = &*self.rt;
        let mut ib = rt.inbound();
        let mut worked = false;
        loop {
            if rt.ep.recv_batch(&mut self.bufs, &mut self.got).is_err() || self.got.is_empty() {
                break;
            }
            worked = true;
            for i in 0..self.got.len() {
                let (len, from) = self.got[i];
                rt.handle_datagram(&mut ib, &self.bufs[i][..len], from);
            }
            rt.flush_outs(&mut ib);
            if self.got.len() < self.bufs.len() {
                break;
            }
        }
        let n = rt.drain_inbox(&mut ib, ENGINE_BATCH);
        rt.inbox_hint.store(ib.head(), Ordering::Relaxed);
        rt.flush_outs(&mut ib);
        drop(ib);
        rt.ep.flush_delayed();
        worked || n > 0
    }
}
