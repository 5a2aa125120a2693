//! What the WQEs of one doorbell share: the send completions collected for one write to
//! the CQ, the last route, the peer last marked heard.

use super::request::Origin;
use super::route::Route;
use crate::model::Qp;
use std::net::SocketAddrV4;

/// Send completions a doorbell collects before writing them to the CQ together.
const DONE_BATCH: usize = 32;

/// What the WQEs of one doorbell share, so that it is done once per doorbell. All its
/// WQEs belong to one QP.
#[derive(Default)]
pub(crate) struct Doorbell {
    /// The peer this doorbell last marked heard.
    pub(super) heard: Option<SocketAddrV4>,
    /// Send completions of WQEs that finished while the doorbell was consumed
    /// (`(req_id, status, op_type)`, in WQE order), not yet in the CQ: written together
    /// by [`Doorbell::flush`], which the consumer calls before it lets the doorbell go.
    done: arrayvec::ArrayVec<(u16, u8, u8), DONE_BATCH>,
    /// The route of this doorbell's last WQE, reused by the next one with the same AH and
    /// destination slot (runs of WQEs to one peer are the common case): the AH table, the
    /// port of the destination and the same-process runtime are looked up once per run.
    pub(super) route: Option<Route>,
}

impl Doorbell {
    /// [`super::request::complete`], collected: the completion reaches `qp`'s send CQ
    /// at the next [`Doorbell::flush`] (or now, when the collection is full).
    #[inline]
    pub fn complete(&mut self, qp: &Qp, o: &Origin, status: u8) {
        if !o.completes(status) {
            return;
        }
        if self.done.is_full() {
            self.flush(qp);
        }
        self.done.push((o.req_id, status, o.op_type));
    }

    /// Writes the collected completions to `qp`'s send CQ.
    #[inline]
    pub fn flush(&mut self, qp: &Qp) {
        if !self.done.is_empty() {
            qp.send_cq().push_sends(qp.qpn() as u16, &self.done);
            self.done.clear();
        }
    }

    /// Completes `o` with the error `status`; false (the WR did not go direct).
    pub(super) fn failed(&mut self, qp: &Qp, o: &Origin, status: u8) -> bool {
        self.complete(qp, o, status);
        false
    }
}
