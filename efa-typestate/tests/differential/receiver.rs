//! The receiving side of a differential run: a QP with receives kept posted, a write
//! target, a readable region; it records every completion and message it sees.

use std::hash::{Hash, Hasher};

use super::plan::{Plan, DEPTH, MAX_BATCH, RECV_SLOT, RECV_SLOTS, SLOT};
use super::Side;
use crate::common::direct::{seen, unordered, Seen};
use crate::common::*;
use efa_typestate::*;

pub struct Receiver<'a> {
    pd: &'a BPd<'a>,
    qp: Qp<&'a BPd<'a>, Rts>,
    cq: &'a ExtCq<&'a Context>,
    dst: Mr<&'a BPd<'a>, Vec<u8>>,
    target: Mr<&'a BPd<'a>, Vec<u8>, RemoteWrite>,
    readable: Mr<&'a BPd<'a>, Vec<u8>>,
    /// The requester: its QP number and this side's AH number for it, and the AH itself
    /// (RDMA from a peer without one fails with status 14, unknown peer).
    peer: Option<(u32, u16)>,
    to_peer: Option<Peer<&'a BPd<'a>>>,
    /// Receives posted and not yet taken.
    outstanding: usize,
    next_recv: u64,
    seen: Vec<Seen>,
    messages: Vec<Vec<u8>>,
    fills: Vec<String>,
}

impl<'a> Receiver<'a> {
    pub fn new(pd: &'a BPd<'a>, cq: &'a ExtCq<&'a Context>, plan: &Plan, backend: Backend) -> Self {
        let cfg = QpConfig::srd()
            .depth(DEPTH, DEPTH)
            .sges(2, 2)
            .backend(backend);
        Receiver {
            pd,
            qp: rts_qp(pd, cq, &cfg, QKEY_B),
            cq,
            dst: pd
                .register(
                    vec![0u8; (RECV_SLOTS * RECV_SLOT) as usize],
                    AccessFlags::LOCAL_WRITE,
                )
                .unwrap(),
            target: write_target(pd, (plan.ops * SLOT) as usize),
            readable: pd
                .register(plan.readable.clone(), AccessFlags::REMOTE_READ)
                .unwrap(),
            peer: None,
            to_peer: None,
            outstanding: 0,
            next_recv: 0,
            seen: Vec::new(),
            messages: Vec::new(),
            fills: Vec::new(),
        }
    }

    pub fn backends(&self) -> [Backend; 2] {
        [self.qp.backend(), self.cq.backend()]
    }

    /// Posts receive `next_recv` into `batch` (two SGEs: the halves of its buffer).
    fn sges(&self, id: u64) -> [Sge<'_>; 2] {
        let at = (id % u64::from(RECV_SLOTS)) * u64::from(RECV_SLOT);
        let half = RECV_SLOT / 2;
        [
            self.dst.sge(at, u64::from(half)).unwrap(),
            self.dst.sge(at + u64::from(half), u64::from(half)).unwrap(),
        ]
    }

    fn post(&mut self, count: usize) -> Result<usize> {
        let lists: Vec<[Sge<'_>; 2]> = (0..count as u64)
            .map(|i| self.sges(self.next_recv + i))
            .collect();
        let lists: Vec<SgeList<'_, 2>> = lists.iter().map(|l| SgeList::new(l).unwrap()).collect();
        let mut batch = RecvBatch::<MAX_BATCH>::new(&self.qp);
        for (i, l) in lists.iter().enumerate() {
            batch.push(self.next_recv + i as u64, l).unwrap();
        }
        // SAFETY: a receive buffer is read only after its completion was polled, and
        // reused (`RECV_SLOTS` later) only after that; the Mr lives as long as the QP.
        unsafe { self.qp.post_recv(&batch) }?;
        Ok(count)
    }
}

impl Side for Receiver<'_> {
    fn addresses(&self) -> (EndpointInfo, RemoteBuffer, RemoteBuffer) {
        (
            self.qp.endpoint(),
            self.target.remote(),
            self.readable.remote(),
        )
    }

    fn meet(&mut self, requester: &EndpointInfo) {
        let to = self.pd.connect(requester).unwrap();
        self.peer = Some((requester.qpn(), to.ah().number()));
        self.to_peer = Some(to);
    }

    fn ensure(&mut self, k: usize) {
        let missing = k.saturating_sub(self.outstanding);
        if missing > 0 {
            self.post(missing).unwrap();
            self.next_recv += missing as u64;
            self.outstanding += missing;
        }
    }

    fn fill(&mut self) -> String {
        let mut n = 0;
        let err = loop {
            match self.post(1) {
                Ok(_) => {
                    n += 1;
                    self.next_recv += 1;
                    self.outstanding += 1;
                }
                Err(e) => break e,
            }
            assert!(n <= 4 * DEPTH, "the receive queue never filled");
        };
        let f = format!("receive queue took {n}, then {err:?}");
        self.fills.push(f.clone());
        f
    }

    fn expect(&mut self, n: usize) {
        let (peer_qpn, peer_ah) = self.peer.expect("met the requester");
        for c in expect_n(self.cq, n) {
            if c.opcode() == WcOpcode::RECV {
                let at = ((c.wr_id() % u64::from(RECV_SLOTS)) * u64::from(RECV_SLOT)) as usize;
                let len = c.byte_len() as usize;
                self.messages
                    .push(self.dst.as_slice()[at..at + len].to_vec());
            }
            self.seen.push(seen(&c, self.qp.qpn(), peer_qpn, peer_ah));
            self.outstanding -= 1;
        }
    }

    /// Everything this side saw, as one line: counts, and a hash of the completions
    /// (without wr_ids, sorted), the messages (sorted), the queue fills and every byte of
    /// the write target.
    fn finish(&mut self) -> String {
        expect_none(self.cq, std::time::Duration::from_millis(5));
        let seen = unordered(std::mem::take(&mut self.seen));
        let mut messages = std::mem::take(&mut self.messages);
        messages.sort();
        let target = self.target.to_vec();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&seen, &messages, &self.fills, &target).hash(&mut h);
        let errors = seen.iter().filter(|s| s.status != 0).count();
        format!(
            "{} completions ({errors} failed), {} messages of {} bytes, target hash {:016x}",
            seen.len(),
            messages.len(),
            messages.iter().map(Vec::len).sum::<usize>(),
            h.finish()
        )
    }
}
