//! The same-process path. When requester and responder devices live in one process and
//! no faults are configured (and `EFA_SIM_DIRECT` is not `0`), the thread that consumes
//! the send queue (the posting thread, or the doorbell watcher) executes the request on
//! the target device itself (same checks, same code as the engine) and completes the
//! WQE at once: no datagram, no syscall. Outcomes that need time (RNR, a silent drop such
//! as a Q_Key mismatch, the bulk fallback) go on over the datagram path, so every status
//! and timing rule of the protocol still holds. Completions can therefore be in the CQ
//! before the doorbell write returns.

use super::requester::{complete, Origin, Spec, STATUS_RNR};
use super::responder::Outcome;
use super::stats::bump;
use super::tables::MrTable;
use super::Runtime;
use crate::model::{mem, Qp, ACCESS_LOCAL_WRITE};
use crate::transport::wire::{self, Op};
use efa_sys::vendor::comp_status as st;
use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::sync::RwLockReadGuard;

thread_local! {
    /// Packet and response buffers of the same-process direct path.
    static DIRECT: RefCell<(Vec<u8>, Vec<u8>)> =
        RefCell::new((vec![0u8; wire::MAX_DATAGRAM], vec![0u8; wire::MAX_DATAGRAM]));
}

impl Runtime {
    /// Executes a request on the same-process `target` and completes the WQE. `mrs` is
    /// this device's MR table, read-locked by the caller (released before the target
    /// runs, which may be this very device). Returns false (nothing done) when the
    /// outcome needs the datagram path: RNR (retried with delay), fallback, or a silent
    /// drop (times out).
    pub(crate) fn try_direct(
        &self,
        mrs: RwLockReadGuard<'_, MrTable>,
        target: &Runtime,
        qp: &Qp,
        o: &Origin,
        spec: &Spec,
        dest: SocketAddrV4,
    ) -> bool {
        DIRECT.with(|bufs| {
            let mut bufs = bufs.borrow_mut();
            let (pkt, out) = &mut *bufs;
            let Some(len) = self.build_packet(&mrs, qp.pd(), spec, pkt) else {
                return false;
            };
            drop(mrs);
            let mut resp_len = 0usize;
            let h = spec.header;
            let outcome = target.execute(&h, &pkt[wire::HEADER..len], None, out, &mut resp_len);
            let mut status = match outcome {
                Outcome::Respond(s) if s != STATUS_RNR && s != wire::STATUS_FALLBACK => s,
                _ => return false,
            };
            if status == 0 && h.op == Op::Read && h.flags & wire::FLAG_FAST == 0 {
                let mrs = self.mrs();
                let local = spec
                    .sges
                    .first()
                    .and_then(|g| Self::local_range(&mrs, qp.pd(), g, ACCESS_LOCAL_WRITE));
                match local {
                    // SAFETY: inside a live MR with LOCAL_WRITE (read lock held).
                    Some(host) => unsafe {
                        mem::write_registered(host, &out[wire::HEADER..wire::HEADER + resp_len])
                    },
                    None if resp_len == 0 => {}
                    None => status = st::LOCAL_ERROR_INVALID_LKEY as u8,
                }
            }
            self.mark_heard(dest);
            bump(&self.stats.direct);
            complete(qp, o, status);
            true
        })
    }
}
