//! Bulk RDMA in chunks: when the responder cannot copy a bulk WR with `process_vm_*`
//! (another host, no proof of the requester, `EFA_SIM_NO_PROCESS_VM=1`), the requester
//! moves it as data-in-datagram requests of [`INLINE_RDMA`] bytes, [`CHUNK_WINDOW`] in
//! flight, each acknowledged; a write with immediate ends with a data-less commit request
//! that delivers the immediate once every chunk landed.

use super::pending::PendingTable;
use super::request::{Origin, Outbox, Pending};
use super::stats::bump;
use super::{Runtime, INLINE_RDMA, RTO};
use crate::transport::wire::{self, Op};
use std::time::{Duration, Instant};

/// Progress of a WR moved as data-in-datagram chunks.
#[derive(Clone, Copy)]
pub(crate) struct Chunking {
    next_off: u64,
    inflight: u32,
    total: u64,
}

/// How a pending request takes part in a transfer in chunks (one field, not two
/// options: every outstanding request carries it).
#[derive(Clone, Copy)]
pub(crate) enum ChunkRole {
    /// A request of its own.
    None,
    /// One chunk of the pending WR with that id.
    Of(u64),
    /// A WR being moved in chunks (its fast path failed).
    Parent(Chunking),
}

impl ChunkRole {
    /// The id of the WR this request is a chunk of.
    #[inline]
    pub fn parent(&self) -> Option<u64> {
        match *self {
            ChunkRole::Of(id) => Some(id),
            _ => None,
        }
    }

    /// Whether this is a WR being moved in chunks.
    #[inline]
    pub fn is_parent(&self) -> bool {
        matches!(self, ChunkRole::Parent(_))
    }
}

/// Chunks in flight per chunked WR.
pub const CHUNK_WINDOW: u32 = 8;

impl Runtime {
    /// Removes request `id` with `status`. A plain WR yields its completion; a
    /// chunk advances (or fails) its parent WR, queueing further chunks or the
    /// write-with-imm commit in `to_send`.
    pub(crate) fn settle(
        &self,
        pend: &mut PendingTable<Pending>,
        id: u64,
        status: u8,
        to_send: &mut Outbox,
    ) -> Option<(u32, Origin, u8)> {
        // Only what the completion needs is copied out of the table.
        let (qpn, origin, chunk_parent) =
            pend.remove_map(id, |p| (p.qpn, p.origin, p.chunk.parent()))?;
        let Some(parent_id) = chunk_parent else {
            return Some((qpn, origin, status));
        };
        if status != 0 {
            drop(pend.take_if(|c| c.chunk.parent() == Some(parent_id)));
            return pend.remove_map(parent_id, |p| (p.qpn, p.origin, status));
        }
        let now = Instant::now();
        let parent = pend.get_mut(parent_id)?;
        parent.last_heard = Some(now);
        let ChunkRole::Parent(mut ch) = parent.chunk else {
            return None;
        };
        ch.inflight -= 1;
        let mut next = None;
        if ch.next_off < ch.total {
            let len = (ch.total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            next = Some((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        parent.chunk = ChunkRole::Parent(ch);
        if ch.inflight == 0 && next.is_none() {
            if parent.spec.header.flags & wire::FLAG_IMM != 0 {
                // All data landed: deliver the immediate with a commit request.
                parent.spec.header.flags =
                    (parent.spec.header.flags & !wire::FLAG_FAST) | wire::FLAG_COMMIT;
                parent.spec.carries_data = false;
                parent.chunk = ChunkRole::None;
                parent.next_tx = Some(now + RTO);
                if let Some(pd) = self.pd_of(parent.qpn) {
                    to_send.push((pd, parent.spec.clone(), parent.dest));
                }
                return None;
            }
            return pend.remove_map(parent_id, |p| (p.qpn, p.origin, 0));
        }
        if let Some((off, len)) = next {
            self.spawn_chunk(pend, parent_id, off, len, to_send);
        }
        None
    }

    /// Adds chunk `[off, off+len)` of WR `parent_id` as its own request.
    fn spawn_chunk(
        &self,
        pend: &mut PendingTable<Pending>,
        parent_id: u64,
        off: u64,
        len: u32,
        to_send: &mut Outbox,
    ) {
        let Some(parent) = pend.get(parent_id) else {
            return;
        };
        let (qpn, origin, dest, rnr_left) =
            (parent.qpn, parent.origin, parent.dest, parent.rnr_left);
        // A chunk of a QP that is gone is not sent (its requests are purged).
        let Some(pd) = self.pd_of(qpn) else {
            return;
        };
        let mut spec = parent.spec.clone();
        spec.header.flags &= !(wire::FLAG_FAST | wire::FLAG_IMM | wire::FLAG_COMMIT);
        spec.header.remote_addr = spec.header.remote_addr.wrapping_add(off);
        spec.header.total_len = len;
        spec.header.pid = 0;
        spec.header.local_addr = 0;
        spec.header.imm = 0;
        if let Some(g) = spec.local.sges_mut().first_mut() {
            g.addr = g.addr.wrapping_add(off);
            g.length = len;
        }
        spec.carries_data = spec.header.op == Op::Write;
        let now = Instant::now();
        let id = pend.take_id();
        spec.header.req_id = id;
        to_send.push((pd, spec.clone(), dest));
        let chunk = Pending {
            qpn,
            origin,
            dest,
            spec,
            next_tx: Some(now + RTO),
            last_heard: Some(now),
            rnr_left,
            chunk: ChunkRole::Of(parent_id),
        };
        pend.insert(id, chunk);
    }

    /// The responder could not copy with process_vm_*: move WR `id` in chunks.
    pub(crate) fn start_chunking(
        &self,
        pend: &mut PendingTable<Pending>,
        id: u64,
        to_send: &mut Outbox,
    ) {
        let Some(p) = pend.get_mut(id) else { return };
        bump(&self.stats.chunked);
        let total = p.spec.header.total_len as u64;
        let mut ch = Chunking {
            next_off: 0,
            inflight: 0,
            total,
        };
        // The parent itself is not retransmitted while its chunks move.
        p.next_tx = Some(Instant::now() + Duration::from_secs(3600));
        let mut spans = arrayvec::ArrayVec::<(u64, u32), { CHUNK_WINDOW as usize }>::new();
        while ch.next_off < total && ch.inflight < CHUNK_WINDOW {
            let len = (total - ch.next_off).min(INLINE_RDMA as u64) as u32;
            spans.push((ch.next_off, len));
            ch.next_off += len as u64;
            ch.inflight += 1;
        }
        p.chunk = ChunkRole::Parent(ch);
        for (off, len) in spans {
            self.spawn_chunk(pend, id, off, len, to_send);
        }
    }
}
