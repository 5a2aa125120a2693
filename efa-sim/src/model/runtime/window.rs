//! The requester's window over its own memory on the bulk path between devices of this
//! process: a bulk RDMA write names the requester's buffer (`pid`, `local_addr`), and
//! the responder copies out of it with `process_vm_readv` when the request arrives,
//! which with a slow fabric (`EFA_SIM_FAULTS` `delay_us`) or retransmitted copies in
//! flight can be long after the requester's QP was reset, moved to ERR or destroyed.
//! The responder makes that copy only while the request is still pending at its
//! requester, holding the requester's pending table lock, which `purge_pending` (reset,
//! destroy) and `flush_pending` (ERR) take too, so every later arrival is dropped.
//!
//! Only requesters of this process can be checked this way. Reading a buffer late writes
//! nothing of the requester's; the direction that would (a bulk read's data) is never
//! copied by the responder: the requester pulls it itself while the read is pending, in
//! any process (see [`super::pull`]).

use super::{Runtime, RUNTIMES};
use crate::transport::wire::{self, Header, Op};

impl Runtime {
    /// Runs `copy` (the bulk copy for request `h` from a requester of this process) while
    /// the request is still pending at its requester, with the requester's pending table
    /// locked; `None`, without running it, when the requester no longer waits for it
    /// (completed, flushed, purged by a reset or destroy, or an unknown incarnation).
    pub(crate) fn while_requested<R>(h: &Header, copy: impl FnOnce() -> R) -> Option<R> {
        let requester = RUNTIMES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|rt| rt.epoch == h.epoch && rt.gid == h.src_gid)
            .cloned()?;
        let pend = requester.pending.lock().unwrap_or_else(|e| e.into_inner());
        let p = pend.get(h.req_id)?;
        let hdr = &p.spec.header;
        let same = p.qpn as u16 == h.src_qpn
            && hdr.flags & wire::FLAG_FAST != 0
            && (hdr.op == Op::Read) == (h.op == Op::Read)
            && hdr.local_addr == h.local_addr
            && hdr.total_len == h.total_len
            && !p.chunk.is_parent();
        if !same {
            return None;
        }
        let r = copy();
        drop(pend);
        Some(r)
    }
}
