//! What the requester keeps of a request: the [`Origin`] its send completion needs, the
//! [`Spec`] it is (re)built from, and the [`Pending`] entry it waits in for its answer.

use super::chunks::ChunkRole;
use super::RTO;
use crate::model::send_wqe::Request;
use crate::model::{Pd, Qp, Sge, MAX_INLINE};
use crate::provider::send::op_type;
use crate::transport::wire::Header;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Instant;

/// What a send completion needs to know about its WQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    /// Request id of the WQE.
    pub req_id: u16,
    /// Its op type.
    pub op_type: u8,
    /// It asked for a completion.
    pub signaled: bool,
    /// The AH number it was sent to.
    pub ahn: u16,
}

impl Origin {
    /// The origin of request `r`.
    pub fn of(r: &Request<'_>) -> Origin {
        Origin {
            req_id: r.req_id,
            op_type: op_type(r.op),
            signaled: r.signaled,
            ahn: r.ahn,
        }
    }

    /// Whether ending with `status` makes a completion: not for a successful unsignaled
    /// WQE (errors always complete, as in verbs).
    #[inline]
    pub fn completes(&self, status: u8) -> bool {
        status != 0 || self.signaled
    }
}

/// Writes the send completion of `o` with `status` (see [`Origin::completes`]).
#[inline]
pub(crate) fn complete(qp: &Qp, o: &Origin, status: u8) {
    if o.completes(status) {
        qp.send_cq()
            .push_send(qp.qpn() as u16, o.req_id, status, o.op_type);
    }
}

/// What a request carries, kept so it can be rebuilt for retransmission.
#[derive(Clone)]
pub(crate) struct Spec {
    pub header: Header,
    pub local: Local,
    /// Whether the data travels in the datagram (SEND, small WRITE).
    pub carries_data: bool,
}

/// The local side of a request as its WQE gave it: segments (lkey, iova, len),
/// re-validated at every use, or inline bytes; never both (a WQE holds one or the other),
/// so they share one buffer. Every outstanding request keeps one, written into a table
/// slot that is cold by then: a pending entry one cache line shorter made a sender of 16
/// WRs per doorbell about 5% faster.
#[derive(Clone)]
pub(crate) enum Local {
    Sges(arrayvec::ArrayVec<Sge, { efa_sys::io::TX_DESC_NUM_BUFS }>),
    Inline(arrayvec::ArrayVec<u8, MAX_INLINE>),
}

impl Local {
    /// The segments (none for inline data).
    #[inline]
    pub fn sges(&self) -> &[Sge] {
        match self {
            Local::Sges(s) => s,
            Local::Inline(_) => &[],
        }
    }

    /// The segments, to adjust (none for inline data).
    #[inline]
    pub fn sges_mut(&mut self) -> &mut [Sge] {
        match self {
            Local::Sges(s) => s,
            Local::Inline(_) => &mut [],
        }
    }
}

impl Spec {
    /// What request `r` with header `h` carries.
    #[inline(always)]
    pub(super) fn of(r: &Request<'_>, h: Header, carries_data: bool) -> Spec {
        let local = if r.inline.is_empty() {
            Local::Sges(r.sges().iter().copied().collect())
        } else {
            Local::Inline(arrayvec::ArrayVec::try_from(r.inline).unwrap_or_default())
        };
        Spec {
            header: h,
            local,
            carries_data,
        }
    }

    /// Bytes of data its datagram carries after the header.
    #[inline]
    pub fn data_len(&self) -> usize {
        match &self.local {
            _ if !self.carries_data => 0,
            Local::Sges(s) => s.iter().map(|s| s.length as usize).sum(),
            Local::Inline(d) => d.len(),
        }
    }
}

/// A request waiting for its response.
pub(crate) struct Pending {
    /// The QP that posted it, looked up (live, same QPN) when its completion is written:
    /// a counted reference cost three locked instructions per request (upgrade, clone,
    /// drop), and a destroyed or reset QP's requests are purged anyway.
    pub qpn: u32,
    pub origin: Origin,
    pub dest: SocketAddrV4,
    pub spec: Spec,
    /// When to retransmit; `None` until the engine's timers first see the request
    /// (they stamp it then: see [`Pending::stamp`]).
    pub next_tx: Option<Instant>,
    /// When the peer last answered anything about it; `None` as `next_tx`.
    pub last_heard: Option<Instant>,
    pub rnr_left: u8,
    pub chunk: ChunkRole,
}

impl Pending {
    /// The request's (retransmission deadline, last time heard), stamping a request the
    /// timers see for the first time with `now`. A request is posted unstamped: reading
    /// the clock per doorbell cost the sender of one-WR doorbells a twentieth of its
    /// time, and stamping at the timers' next pass (at most a millisecond later, see
    /// `super::engine`) only moves its first retransmission and its peer timeout that
    /// much later.
    #[inline]
    pub fn stamp(&mut self, now: Instant) -> (Instant, Instant) {
        let next = *self.next_tx.get_or_insert(now + RTO);
        let heard = *self.last_heard.get_or_insert(now);
        (next, heard)
    }
}

/// Requests to (re)send after a table update: (PD, spec, destination).
pub(crate) type Outbox = Vec<(Arc<Pd>, Spec, SocketAddrV4)>;
