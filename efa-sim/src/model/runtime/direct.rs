//! The same-process path. When requester and responder devices live in one process and
//! no faults are configured (and `EFA_SIM_DIRECT` is not `0`), the thread that consumes
//! the send queue (the posting thread, or the doorbell watcher) executes the request on
//! the target device itself (same checks, same code as for a datagram) and completes the
//! WQE at once: no packet is built, no syscall made, and data move with one copy from
//! the requester's registered memory to the responder's (both validated inside one read
//! section). Outcomes that need time (RNR, a silent drop such as a Q_Key mismatch) go on
//! over the datagram path, so every status and timing rule of the protocol still holds.
//! Completions can therefore be in the CQ before the doorbell write returns.

use super::doorbell::Doorbell;
use super::request::Origin;
use super::requester::STATUS_RNR;
use super::responder::Outcome;
use super::Runtime;
use crate::model::mem::{self, Data};
use crate::model::Qp;
use crate::rcu::Guard;
use crate::transport::wire::{self, Header, Op};
use efa_sys::vendor::comp_status as st;

impl Runtime {
    /// Executes request `h` (payload `data`: for a read, the validated local SGE as one
    /// `Data::Local` range) on the same-process `target` and completes the WQE, inside the
    /// caller's read section `g`. Returns false (nothing done) when the outcome needs the
    /// datagram path: RNR (retried with delay), fallback, or a silent drop (times out).
    /// The completion joins the doorbell's `db`.
    /// The caller counts direct executions ([`super::Stats::direct`]) and marks the peer
    /// heard.
    #[inline(always)]
    pub(crate) fn try_direct(
        &self,
        target: &Runtime,
        qp: &Qp,
        o: &Origin,
        h: &Header,
        data: Data<'_>,
        (g, db): (&Guard, &mut Doorbell),
    ) -> bool {
        let mut read_src = None;
        // A read carries no payload; its local SGE is where the answer lands.
        let (payload, read_dst) = match (h.op, data) {
            (Op::Read, Data::Local(r)) => (Data::Bytes(&[]), r.first().map(|r| r.0)),
            _ => (data, None),
        };
        let mut status = match target.execute(h, payload, None, g, &mut read_src) {
            Outcome::Respond(s) if s != STATUS_RNR && s != wire::STATUS_FALLBACK => s,
            _ => return false,
        };
        if status == 0 && h.op == Op::Read {
            if let (Some(dst), Some(src)) = (read_dst, read_src) {
                let len = h.total_len as usize;
                // SAFETY: `dst` is the requester's SGE (host memory with LOCAL_WRITE,
                // validated) and `src` the responder's range (REMOTE_READ), both of
                // total_len bytes inside live MRs: the section `g` is open.
                let copied = unsafe { mem::copy_to_host(dst, src, len) };
                if copied.is_err() {
                    status = st::REMOTE_ERROR_BAD_ADDRESS as u8;
                }
            }
        }
        db.complete(qp, o, status);
        true
    }
}
