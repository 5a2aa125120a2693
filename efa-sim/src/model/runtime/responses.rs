//! The requester's side of the conversation after sending: responses (completing,
//! retrying after RNR, falling back to chunks, landing small-read data), retransmission,
//! and the peer timeouts that bound every WR.

use super::request::{Origin, Outbox};
use super::requester::STATUS_RNR;
use super::stats::bump;
use super::{Runtime, RNR_DELAY, RTO};
use crate::model::{mem, qp, ACCESS_LOCAL_WRITE};
use crate::rcu::Guard;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Runtime {
    /// A response from `from` to request `h.req_id`.
    pub(crate) fn handle_response(&self, h: &Header, data: &[u8], from: SocketAddrV4) {
        if h.epoch != self.epoch {
            return;
        }
        if h.status == wire::STATUS_PULL {
            return self.handle_pull(h, from);
        }
        let now = Instant::now();
        let mut status = h.status;
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pend.get_mut(h.req_id) else {
            return;
        };
        if p.dest != from {
            return;
        }
        p.last_heard = Some(now);
        if status == STATUS_RNR {
            if p.rnr_left > 0 {
                if p.rnr_left != qp::RNR_RETRY_INFINITE {
                    p.rnr_left -= 1;
                }
                p.next_tx = Some(now + RNR_DELAY);
                drop(pend);
                self.mark_heard(from);
                return;
            }
        } else if status == wire::STATUS_FALLBACK {
            if p.spec.header.flags & wire::FLAG_FAST == 0 || p.chunk.is_parent() {
                return; // only a bulk request can fall back; ignore anything else
            }
            let mut to_send = Outbox::new();
            self.start_chunking(&mut pend, h.req_id, &mut to_send);
            drop(pend);
            self.mark_heard(from);
            self.after_settle(None, to_send);
            return;
        } else if p.chunk.is_parent() {
            return; // the parent of chunks gets no responses of its own
        } else if status == 0
            && p.spec.header.op == Op::Read
            && p.spec.header.flags & wire::FLAG_FAST == 0
        {
            // Small read: the data came with the response.
            if data.len() != p.spec.header.total_len as usize {
                return; // malformed; keep waiting (retransmission re-reads)
            }
            let g = Guard::enter();
            let target = self.qp(p.qpn, &g).and_then(|qp| {
                let sge = p.spec.local.sges().first()?;
                Self::local_range(self.mrs(), qp.pd(), sge, ACCESS_LOCAL_WRITE, &g)
            });
            // SAFETY: the range is inside a live MR with LOCAL_WRITE (section open).
            let landed = target.map(|at| unsafe { mem::write_registered(at, data) }.is_ok());
            match landed {
                Some(true) => {}
                None if data.is_empty() => {}
                _ => status = st::LOCAL_ERROR_INVALID_LKEY as u8,
            }
        }
        let mut to_send = Outbox::new();
        let done = self.settle(&mut pend, h.req_id, status, &mut to_send);
        drop(pend);
        self.mark_heard(from);
        self.after_settle(done, to_send);
    }

    /// An acknowledgement packet from `from`: every request it lists that is pending
    /// towards `from` and expects no data completes successfully.
    pub(crate) fn handle_acks(&self, h: &Header, data: &[u8], from: SocketAddrV4) {
        if h.epoch != self.epoch {
            return;
        }
        let mut ids = wire::acked_ids(data).peekable();
        while ids.peek().is_some() {
            // A few at a time: completions are written without the table's lock.
            let mut done = arrayvec::ArrayVec::<_, 32>::new();
            let mut to_send = Outbox::new();
            {
                let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                while !done.is_full() {
                    let Some(id) = ids.next() else { break };
                    let Some(p) = pend.get(id) else { continue };
                    let hdr = &p.spec.header;
                    let small_read = hdr.op == Op::Read && hdr.flags & wire::FLAG_FAST == 0;
                    // A chunked WR's parent and a small read are answered otherwise.
                    if p.dest != from || p.chunk.is_parent() || small_read {
                        continue;
                    }
                    if let Some(d) = self.settle(&mut pend, id, 0, &mut to_send) {
                        done.push(d);
                    }
                }
            }
            self.complete_runs(&done);
            self.after_settle(None, to_send);
        }
        self.mark_heard(from);
    }

    /// Retransmissions, RNR retries and peer timeouts; updates the watermark.
    pub(crate) fn timers(&self) {
        let now = Instant::now();
        let peer_timeout = std::time::Duration::from_millis(self.profile.peer_timeout_ms.into());
        let mut resend = Outbox::new();
        let mut expired: Vec<(u64, SocketAddrV4)> = Vec::new();
        {
            let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (id, p) in pend.iter_mut() {
                let (next_tx, last_heard) = p.stamp(now);
                if now.duration_since(last_heard) > peer_timeout {
                    if self.config.trace {
                        eprintln!(
                            "efa-sim trace: expire req {id} lw {} next_tx_in {:?} hdr_wm {}",
                            self.low_water.load(Ordering::Relaxed),
                            next_tx.checked_duration_since(now),
                            p.spec.header.watermark
                        );
                    }
                    expired.push((id, p.dest));
                } else if now >= next_tx {
                    p.next_tx = Some(now + RTO);
                    // A request of a QP that is gone is left to be purged.
                    if let Some(pd) = self.pd_of(p.qpn) {
                        resend.push((pd, p.spec.clone(), p.dest));
                    }
                }
            }
            let next = pend.next_id();
            self.refresh_low_water(&mut pend, next);
        }
        for (pd, spec, dest) in &resend {
            bump(&self.stats.retransmits);
            self.hw.add(crate::sysfs::counters::port::RETRANS_PKTS, 1);
            // A silent peer may have died: its inbox link is dropped if so.
            self.ep.suspect(*dest);
            if !self.transmit(pd, spec, *dest) {
                self.finish(spec.header.req_id, st::LOCAL_ERROR_INVALID_LKEY as u8);
            }
        }
        for (id, dest) in expired {
            let answered = self.was_heard(&dest);
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

    /// Writes the send completions of `done` (in order): each run of one QP (the common
    /// case: an acknowledgement packet lists up to [`wire::MAX_ACKS`] ids) looks its QP up
    /// once and goes into its send CQ under one lock of the CQ (a locked instruction per
    /// acquisition, on the sender's critical path).
    fn complete_runs(&self, done: &[(u32, Origin, u8)]) {
        if done.is_empty() {
            return;
        }
        let g = Guard::enter();
        let mut run = arrayvec::ArrayVec::<(u16, u8, u8), 32>::new();
        let mut i = 0;
        while i < done.len() {
            let qpn = done[i].0;
            run.clear();
            while let Some(&(n, ref o, status)) = done.get(i) {
                if n != qpn || run.is_full() {
                    break;
                }
                if o.completes(status) {
                    run.push((o.req_id, status, o.op_type));
                }
                i += 1;
            }
            if let (false, Some(qp)) = (run.is_empty(), self.qp(qpn, &g)) {
                qp.send_cq().push_sends(qp.qpn() as u16, &run);
            }
        }
    }
}
