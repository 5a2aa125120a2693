//! Routes: where a WQE goes (the destination's port, and the same-process device that
//! serves it, if any), found from its AH and destination QPN. The consumer of a send
//! queue keeps the last one for the rest of a doorbell (see `doorbell::Doorbell`).

use super::Runtime;
use crate::model::send_wqe::Request;
use crate::model::Qp;
use crate::rcu::Guard;
use crate::transport::slot_of_qpn;
use std::net::SocketAddrV4;
use std::sync::Arc;

/// Where the WQEs of one doorbell to one AH and one slot (the process a QPN lives in:
/// all a route depends on besides the AH) go.
#[derive(Clone, Copy)]
pub(crate) struct Route {
    ahn: u16,
    slot: u32,
    pub dest: SocketAddrV4,
    /// The same-process runtime serving the slot's QPNs, if any.
    pub local: Option<&'static Runtime>,
}

impl Route {
    /// Whether `r` takes this route: the same AH, and a QPN of the same slot.
    #[inline]
    pub fn serves(&self, r: &Request<'_>) -> bool {
        self.ahn == r.ahn && self.slot == slot_of_qpn(r.dest_qpn)
    }
}

impl Runtime {
    /// The route of `r` from `qp` (None: its AH is not live in `qp`'s PD, or names no
    /// efa-sim device). The AH entry is read inside `g`; a route outlives it only for the
    /// rest of one doorbell, as a NIC that fetched the AH once for a burst of WQEs.
    #[inline(always)]
    pub(crate) fn route(&self, qp: &Qp, r: &Request<'_>, g: &Guard) -> Option<Route> {
        let e = self
            .ahs()
            .get(r.ahn, g)
            .filter(|e| e.pd == Arc::as_ptr(qp.pd()) as usize)?;
        let (ip, dev) = e.endpoint?;
        let dest = self.ep.addr_of(ip, dev, r.dest_qpn)?;
        // Direct only when the destination QPN lives in that same-process device
        // (another process can serve the same GID: its QPNs carry its own slot).
        let local = if self.direct { e.local_runtime() } else { None }
            .filter(|t| t.qp_index(r.dest_qpn).is_some());
        Some(Route {
            ahn: r.ahn,
            slot: slot_of_qpn(r.dest_qpn),
            dest,
            local,
        })
    }
}
