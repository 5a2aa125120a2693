//! How the responder answers: a request that failed, needs a retry or returns data gets a
//! response of its own; one that succeeded with nothing to return is acknowledged. Both
//! are bundled per destination and sent at the end of a batch (or earlier, see below).
//!
//! A request that succeeded with nothing to return (a SEND, a write, a bulk copy) is
//! answered by listing its id in an acknowledgement packet ([`wire::KIND_ACKS`]) to its
//! requester rather than by a response of its own: one packet acknowledges up to
//! [`wire::MAX_ACKS`] requests. Other answers (errors, RNR, fallback, read data) are
//! responses, sent at the end of the batch that produced them. Acknowledgements produced
//! by a poller wait for its next call (when they go out before anything else; those of a
//! requester with many requests outstanding, [`wire::FLAG_ACK_LAZY`], wait until
//! [`wire::ACK_BATCH`] of them are due, for [`super::inbound::LAZY_POLLS`] polls that
//! found nothing new, or for the engine), or leave earlier with the next request this process sends to that requester, in the same
//! datagram ([`Runtime::send_requests`]); the engine thread sends whatever waits at every
//! pass (at least every millisecond while pollers are active, and it is woken when they
//! leave some behind while it sleeps for long). So an acknowledgement waits for at most
//! one poll round or about a millisecond, far below the retransmission timeout, and a
//! ping-pong carries each acknowledgement on the next message instead of a frame of its
//! own. The answer to a bulk copy (`process_vm_*`, tens of microseconds per MiB) goes
//! out as soon as it is made, with everything else waiting. A process that exits sends
//! what still waits on its way out ([`flush_at_exit`]): a NIC acknowledges whether or not
//! its process is still running, and a peer must not time out because this one returned
//! from `main` right after its last poll.

use super::inbound::Inbound;
use super::Runtime;
use crate::transport::wire::{self, Header, Op};
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::sync::TryLockError;
use std::time::{Duration, Instant};

/// Registered with `atexit` when the first runtime starts: every runtime of this process
/// sends the answers that wait (acknowledgements a poller left for its next call), since
/// its engine thread stops with the process.
pub(crate) extern "C" fn flush_at_exit() {
    let me = std::process::id();
    let Ok(rts) = super::RUNTIMES.try_lock() else {
        return;
    };
    // A forked child that did not exec exits with its parent's runtimes: not its own.
    for rt in rts.iter().filter(|rt| rt.pid == me) {
        rt.send_waiting_answers();
        // Datagrams held back by fault injection or strict mode were already sent.
        rt.ep.flush_all_delayed();
    }
}

impl Runtime {
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
                    let len = ib.acks[i].packet_len();
                    if tx.fits(len) {
                        // The acknowledgements join the requests' bundle, encoded there.
                        let acks = &ib.acks[i];
                        tx.push_with(to, len, |out| Some(acks.encode(self.gid, out)));
                        ib.acks[i].ids.clear();
                        ib.acks[i].lazy = true;
                        self.ep.send(tx.datagram(), to);
                    } else {
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

    /// Queues the answer to `req`: an acknowledgement when it succeeded with nothing to
    /// return, else a response (`ib.out[HEADER..HEADER+data_len]` holds read data).
    pub(super) fn respond(
        &self,
        ib: &mut Inbound,
        req: &Header,
        status: u8,
        data_len: usize,
        to: SocketAddrV4,
    ) {
        let small_read = req.op == Op::Read && req.flags & wire::FLAG_FAST == 0;
        if status == 0 && !small_read && req.flags & wire::FLAG_TAKES_ACKS != 0 {
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
        let mut h = Self::response_to(self.gid, req, status);
        let data_len = if status == 0 { data_len } else { 0 };
        h.data_len = data_len as u32;
        let mut out = std::mem::take(&mut ib.out);
        h.encode(&mut out);
        self.queue_out(ib, &out[..wire::HEADER + data_len], to);
        ib.out = out;
    }

    /// Queues the [`wire::STATUS_PULL`] answer to bulk read `req`: the requester copies
    /// `req.total_len` bytes from this process at `src` (validated against the rkey).
    pub(super) fn respond_pull(&self, ib: &mut Inbound, req: &Header, src: u64, to: SocketAddrV4) {
        let mut h = Self::response_to(self.gid, req, wire::STATUS_PULL);
        h.pid = self.pid;
        h.local_addr = src;
        h.total_len = req.total_len;
        let mut out = std::mem::take(&mut ib.out);
        h.encode(&mut out);
        self.queue_out(ib, &out[..wire::HEADER], to);
        ib.out = out;
    }

    /// The header of a response from `gid` to `req` with `status`.
    fn response_to(gid: crate::model::Gid, req: &Header, status: u8) -> Header {
        let mut h = Header::new(wire::KIND_RESP, req.op);
        h.status = status;
        h.epoch = req.epoch;
        h.req_id = req.req_id;
        h.src_gid = gid;
        h.src_qpn = req.dst_qpn;
        h.dst_qpn = req.src_qpn;
        h
    }

    /// Moves acknowledgement list `i` into the bundle for its requester as one packet.
    pub(super) fn queue_acks(&self, ib: &mut Inbound, i: usize) {
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

    /// Sends whatever answers wait, when the inbound path is free within a few
    /// milliseconds (another thread at it sends them itself).
    fn send_waiting_answers(&self) {
        let deadline = Instant::now() + Duration::from_millis(20);
        loop {
            match self.inbound.try_lock() {
                Ok(mut ib) => return self.flush_outs(&mut ib),
                Err(TryLockError::Poisoned(p)) => return self.flush_outs(&mut p.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::yield_now()
                }
                Err(TryLockError::WouldBlock) => return,
            }
        }
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
    pub(super) fn flush_responses(&self, ib: &mut Inbound) {
        for b in &mut ib.outs {
            if let Some(to) = b.to {
                self.ep.send(b.datagram(), to);
                b.clear();
            }
        }
    }
}
