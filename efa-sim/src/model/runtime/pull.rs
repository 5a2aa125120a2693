//! The requester's side of a bulk RDMA read between processes: the responder validates
//! its rkey and range and answers [`wire::STATUS_PULL`] with the address of the source in
//! its process, and the requester copies the data into its own buffer with
//! `process_vm_readv` (one copy, as the responder's `process_vm_writev` was).
//!
//! Copying here rather than at the responder is what makes a read safe to abandon: the
//! requester's buffer is the user's again once `ibv_destroy_qp`, or `ibv_modify_qp` to
//! RESET or ERR, returned, and only the requester knows whether the read is still
//! pending (a request on a slow fabric, or a retransmission, may reach the responder long
//! after). The copy starts only while the read is in the pending table, under its lock,
//! and runs holding [`Runtime::wait_pulls`]'s mutex, taken before the table's lock is
//! released; `purge_pending` and `flush_pending` remove the QP's requests and then take
//! that mutex, so they return only after a copy under way, and every later answer finds
//! nothing pending ([`Stats::late_pulls`](super::Stats::late_pulls)) and is dropped.
//! The table's lock itself is not held during the copy: posting threads go on.

use super::request::Outbox;
use super::stats::bump;
use super::Runtime;
use crate::model::mem::{self, Place};
use crate::model::ACCESS_LOCAL_WRITE;
use crate::rcu::Guard;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;
use std::net::SocketAddrV4;
use std::time::Instant;

impl Runtime {
    /// A [`wire::STATUS_PULL`] answer from `from` to bulk read `h.req_id` (epoch checked).
    pub(crate) fn handle_pull(&self, h: &Header, from: SocketAddrV4) {
        // The answer names memory of another process: only from that very process (and
        // never where this process must not use process_vm_*).
        let proven = !self.config.no_process_vm && self.sender_proven(h, from);
        let id = h.req_id;
        let mut to_send = Outbox::new();
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = pend.get_mut(id) else {
            drop(pend);
            bump(&self.stats.late_pulls);
            return;
        };
        let hdr = &p.spec.header;
        let bulk_read = hdr.op == Op::Read && hdr.flags & wire::FLAG_FAST != 0;
        if p.dest != from || !bulk_read || p.chunk.is_parent() || h.total_len != hdr.total_len {
            return; // not an answer this request can get: ignored
        }
        p.last_heard = Some(Instant::now());
        if !proven {
            bump(&self.stats.unproven);
            self.start_chunking(&mut pend, id, &mut to_send);
            drop(pend);
            self.mark_heard(from);
            return self.after_settle(None, to_send);
        }
        let len = hdr.total_len as usize;
        let g = Guard::enter();
        // The WR's own SGE, validated again against its lkey (the QP still lives: its
        // requests are purged when it goes).
        let dst = self.qp(p.qpn, &g).and_then(|qp| {
            let sge = p.spec.local.sges().first()?;
            Self::local_range(self.mrs(), qp.pd(), sge, ACCESS_LOCAL_WRITE, &g)
        });
        let Some(dst) = dst.and_then(Place::host) else {
            drop(g);
            let done = self.settle(
                &mut pend,
                id,
                st::LOCAL_ERROR_INVALID_LKEY as u8,
                &mut to_send,
            );
            drop(pend);
            self.mark_heard(from);
            return self.after_settle(done, to_send);
        };
        let copying = self.pulls.lock().unwrap_or_else(|e| e.into_inner());
        drop(pend);
        // SAFETY: dst..dst+len is this WR's SGE, inside a live MR with LOCAL_WRITE (the
        // read section `g` is open); the read was pending when `copying` was taken, and
        // whoever removes it (reset, destroy, ERR) waits for `copying` before returning.
        let copied = unsafe { mem::pull_from_process(h.pid, h.local_addr, dst, len) };
        drop(copying);
        drop(g);
        let mut pend = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let done = if copied.is_ok() {
            self.settle(&mut pend, id, 0, &mut to_send)
        } else {
            // Refused (another user's process, no process_vm_*): the data move in chunks.
            self.start_chunking(&mut pend, id, &mut to_send);
            None
        };
        drop(pend);
        self.mark_heard(from);
        self.after_settle(done, to_send);
    }

    /// Waits until no copy of a pulled read runs (a caller that removed requests from
    /// the pending table first then knows none of them is still written into).
    pub(crate) fn wait_pulls(&self) {
        drop(self.pulls.lock().unwrap_or_else(|e| e.into_inner()));
    }
}
