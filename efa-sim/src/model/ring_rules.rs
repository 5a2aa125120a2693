//! Strict mode's rules for send queues a consumer writes itself (issue 35): a NIC reads
//! its LLQ as the consumer left it after the doorbell and nothing more, so efa-sim stops
//! forgiving what only cached RAM forgives.
//!
//! * **Written before the doorbell.** A WQE whose phase bit is not the current lap's when
//!   its doorbell is seen is a bad WQE (completed with status 2,
//!   `LOCAL_ERROR_QP_INTERNAL_ERROR`, and counted in `bad_wqes` and `stale_wqes`), not
//!   one the device waits for: rdma-core and libfabric never fix a phase after the
//!   doorbell, and a consumer that does relies on the device looking again.
//! * **Slots poisoned after use.** The device overwrites every slot it consumed with
//!   zeros and the phase bit of the lap it was consumed in ([`poison`]): a consumer that
//!   rewrites part of a slot, relying on the rest of the previous WQE, gets a malformed
//!   WQE (no meta descriptor: status 2) or one of the wrong phase (above).
//! * **`max_batch` per doorbell.** Where the device sees each doorbell store (the
//!   consumer called `efa_sim_direct_sq_doorbell`, or the opt-in trap), WQEs beyond the
//!   `max_batch` that `efadv_query_qp_wqs` reported complete with status 2 and are counted
//!   in `batch_overruns`. A store announces the WQEs after the previous seen store's
//!   value, even when the device has not consumed that store's yet (its call found
//!   another thread consuming: [`super::send_queue::DeviceSq::process_observed`]).
//!   Doorbells only the watcher sees are sampled, so several may look like one: there it
//!   is not enforced.
//!
//! * **32-bit doorbell stores.** The word after each send-queue doorbell holds a canary
//!   ([`crate::ring::Doorbell`]): a store wider than the register overwrites it, and every
//!   WQE that doorbell announces completes with status 2 (`wide_doorbells`).
//!
//! What stays unseen: narrower doorbell stores (a 16-bit store of a 16-bit producer count
//! leaves the register as a 32-bit one would) and write-combining barriers.

use super::runtime::doorbell::Doorbell;
use super::runtime::request::Origin;
use super::runtime::stats::bump;
use super::runtime::Runtime;
use super::Qp;
use crate::ring::wqe::{WqeBuf, PHASE_BYTE};
use crate::ring::Ring;
use efa_sys::io::{send_op_type, TX_META_DESC_OP_TYPE_MASK, TX_META_DESC_PHASE_MASK};
use efa_sys::vendor::comp_status as st;

/// Overwrites slot `slot` (`size` bytes) after the device consumed it in a lap of
/// `phase`: zeros, with that (now stale) phase bit.
pub(crate) fn poison(ring: &Ring, slot: u32, size: usize, phase: u8) {
    let mut p = WqeBuf::default();
    p.0[PHASE_BYTE] = phase & TX_META_DESC_PHASE_MASK;
    ring.write_slot(slot, &p.0[..size]);
}

/// Completes the consumed WQE `raw` as a bad one (status 2): its request id and op type
/// as the consumer wrote them, with a completion whether or not it asked for one (the
/// device cannot trust its flags).
pub(crate) fn reject(rt: &Runtime, qp: &Qp, raw: &WqeBuf, shared: &mut Doorbell) {
    bump(&rt.stats.bad_wqes);
    let o = Origin {
        req_id: raw.req_id(),
        op_type: (raw.ctrl1() & TX_META_DESC_OP_TYPE_MASK).min(send_op_type::RDMA_WRITE),
        signaled: true,
        ahn: raw.ah(),
    };
    shared.complete(qp, &o, st::LOCAL_ERROR_QP_INTERNAL_ERROR as u8);
}
