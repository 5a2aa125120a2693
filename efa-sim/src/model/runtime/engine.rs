//! The engine thread of one device: receives datagrams (requests are executed by the
//! responder, responses go to the requester), answers with bundled responses, and runs
//! the requester's timers every millisecond. Duplicate requests are answered from a
//! per-requester cache without executing them again.

use super::requester::STATUS_RNR;
use super::responder::Outcome;
use super::stats::bump;
use super::{IdMap, Runtime};
use crate::model::mem::{self, Data};
use crate::rcu::Guard;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;
use std::net::SocketAddrV4;
use std::sync::Arc;
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

/// The engine thread's private state.
pub(crate) struct Engine {
    rt: Arc<Runtime>,
    peers: IdMap<(SocketAddrV4, u64), PeerDedup>,
    out: Vec<u8>,
    /// Responses of the current receive batch, bundled per destination.
    outs: Vec<wire::BundleBuf>,
}

impl Engine {
    pub(crate) fn new(rt: Arc<Runtime>) -> Engine {
        Engine {
            rt,
            peers: IdMap::default(),
            out: vec![0u8; wire::MAX_DATAGRAM],
            outs: Vec::new(),
        }
    }

    pub(crate) fn run(mut self) {
        let mut bufs: Vec<Vec<u8>> = (0..32)
            .map(|_| vec![0u8; wire::MAX_DATAGRAM + 64])
            .collect();
        let mut got = Vec::with_capacity(32);
        let mut last_timer = Instant::now();
        loop {
            let busy = self.rt.has_pending() || self.rt.ep.flush_delayed();
            self.rt
                .ep
                .wait_readable(Duration::from_millis(if busy { 1 } else { 20 }));
            loop {
                if self.rt.ep.recv_batch(&mut bufs, &mut got).is_err() || got.is_empty() {
                    break;
                }
                for i in 0..got.len() {
                    let (len, from) = got[i];
                    let pkt = &bufs[i][..len];
                    // A bug in a handler must not take the device down with it.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        match wire::bundle_items(pkt) {
                            Some(items) => {
                                for item in items {
                                    self.handle(item, from);
                                }
                            }
                            None => self.handle(pkt, from),
                        }
                    }));
                    if r.is_err() {
                        bump(&self.rt.stats.malformed);
                    }
                }
                self.flush_outs();
                if Instant::now().duration_since(last_timer) >= Duration::from_millis(1) {
                    break;
                }
            }
            self.rt.ep.flush_delayed();
            if Instant::now().duration_since(last_timer) >= Duration::from_millis(1) {
                last_timer = Instant::now();
                self.rt.timers();
                self.forget_silent_peers();
            }
        }
    }

    fn handle(&mut self, pkt: &[u8], from: SocketAddrV4) {
        let Some((h, data)) = Header::decode(pkt) else {
            bump(&self.rt.stats.malformed);
            return;
        };
        if h.kind == wire::KIND_RESP {
            self.rt.handle_response(&h, data, from);
            return;
        }
        if h.flags & wire::FLAG_UD != 0 {
            self.rt.ud_receive(&h, data);
            return;
        }
        let dedup = h.op != Op::Read;
        if dedup {
            let peer = self.peers.entry((from, h.epoch)).or_default();
            peer.last_seen = Some(Instant::now());
            if h.watermark > peer.watermark {
                peer.watermark = h.watermark;
                if peer.done.len() > 1024 {
                    let wm = peer.watermark;
                    peer.done.retain(|k, _| *k >= wm);
                }
            }
            if h.req_id < peer.watermark {
                bump(&self.rt.stats.stale);
                return;
            }
            if let Some(st) = peer.done.get(&h.req_id).copied() {
                bump(&self.rt.stats.duplicates);
                self.respond(&h, st, 0, from);
                return;
            }
        }
        let mut resp_len = 0usize;
        let g = Guard::enter();
        let mut read_src = None;
        let mut outcome = self
            .rt
            .execute(&h, Data::Bytes(data), Some(from), &g, &mut read_src);
        if matches!(outcome, Outcome::Respond(0)) && h.op == Op::Read && h.flags & wire::FLAG_FAST == 0
        {
            resp_len = h.total_len as usize;
            let out = &mut self.out[wire::HEADER..wire::HEADER + resp_len];
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
                    bump(&self.rt.stats.rnr_naks);
                } else if dedup && st != wire::STATUS_FALLBACK {
                    self.peers
                        .entry((from, h.epoch))
                        .or_default()
                        .done
                        .insert(h.req_id, st);
                }
                self.respond(&h, st, resp_len, from);
            }
        }
    }

    /// Sends a response; `self.out[HEADER..HEADER+data_len]` holds read data.
    fn respond(&mut self, req: &Header, status: u8, data_len: usize, to: SocketAddrV4) {
        let mut h = Header::new(wire::KIND_RESP, req.op);
        h.status = status;
        h.epoch = req.epoch;
        h.req_id = req.req_id;
        h.src_gid = self.rt.gid;
        h.src_qpn = req.dst_qpn;
        h.dst_qpn = req.src_qpn;
        let data_len = if status == 0 { data_len } else { 0 };
        h.data_len = data_len as u32;
        h.encode(&mut self.out);
        let pkt = &self.out[..wire::HEADER + data_len];
        let slot = match self.outs.iter().position(|b| b.to == Some(to)) {
            Some(i) if self.outs[i].fits(pkt.len()) => i,
            Some(i) => {
                self.rt.ep.send(self.outs[i].datagram(), to);
                self.outs[i].clear();
                i
            }
            None => match self.outs.iter().position(|b| b.to.is_none()) {
                Some(i) => i,
                None => {
                    self.outs.push(wire::BundleBuf::default());
                    self.outs.len() - 1
                }
            },
        };
        self.outs[slot].push(to, pkt);
    }

    /// Drops the dedup state of requester incarnations silent for [`PEER_FORGET`].
    fn forget_silent_peers(&mut self) {
        if self.peers.len() > 64 {
            let now = Instant::now();
            self.peers.retain(|_, p| {
                p.last_seen
                    .is_some_and(|t| now.duration_since(t) < PEER_FORGET)
            });
        }
    }

    /// Sends the bundled responses of this receive batch.
    fn flush_outs(&mut self) {
        for b in &mut self.outs {
            if let Some(to) = b.to {
                self.rt.ep.send(b.datagram(), to);
                b.clear();
            }
        }
    }
}
