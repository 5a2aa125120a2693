//! efa-sim's own calls for direct data-path consumers (issue 38): a way to hand the
//! device its work on the consumer's thread without a signal.
//!
//! A direct consumer (`efadv_query_qp_wqs` / `efadv_query_cq`) rings doorbells with plain
//! stores. On a NIC that is all it takes; on efa-sim the device notices such a store on
//! its watcher thread's next scan ([`crate::model::watcher`]), which costs up to a
//! millisecond after a quiet spell and needs a core. A consumer that knows it runs on
//! efa-sim may call these right after its store, or when its poll finds the CQ empty,
//! and the device does that work at once on the calling thread, as efa-sim's own
//! provider does. They change nothing a consumer sees but timing: a consumer that never
//! calls them is served by the watcher. efa-typestate looks them up with `dlsym` (so they
//! are absent, and never called, on rdma-core).
//!
//! The profile key `direct_calls=0` makes them return at once (the watcher then does the
//! work), for instruction counts of a consumer's own work.
//!
//! All three take objects this library created, as every verb does, and return 0 (or 1
//! from `efa_sim_direct_progress` when it did work); a NULL pointer is EINVAL.

use super::objects::{SimCq, SimQp};
use core::ffi::c_int;
use efa_sys::verbs as v;
use libc::EINVAL;

/// The device consumes the send queue's doorbell now (a store to the address
/// `efadv_query_qp_wqs` gave was just made).
unsafe extern "C" fn efa_sim_direct_sq_doorbell(qp: *mut v::ibv_qp) -> c_int {
    if qp.is_null() {
        return EINVAL;
    }
    // SAFETY: qp is ours (the function's contract, as for every verb).
    let model = &unsafe { SimQp::from_ibv(qp) }.model;
    if model.pd().rt.profile.direct_calls {
        model.direct_doorbell();
    }
    0
}
export!("EFA_SIM_1.0", efa_sim_direct_sq_doorbell => efa_sim_direct_sq_doorbell);

/// The device reads the CQ's doorbell now (an arm request was just stored).
unsafe extern "C" fn efa_sim_direct_cq_doorbell(cq: *mut v::ibv_cq) -> c_int {
    if cq.is_null() {
        return EINVAL;
    }
    // SAFETY: cq is ours.
    let model = &unsafe { SimCq::from_ibv(cq) }.model;
    if model.rt.profile.direct_calls {
        model.doorbell_written();
    }
    0
}
export!("EFA_SIM_1.0", efa_sim_direct_cq_doorbell => efa_sim_direct_cq_doorbell);

/// The CQ was found empty: the device does the work waiting for it (frames already
/// arrived, strict mode's held requests that are due), as a provider poll does. 1 when
/// it did some (completions may have appeared), else 0.
unsafe extern "C" fn efa_sim_direct_progress(cq: *mut v::ibv_cq) -> c_int {
    if cq.is_null() {
        return EINVAL;
    }
    // SAFETY: cq is ours.
    let model = &unsafe { SimCq::from_ibv(cq) }.model;
    c_int::from(model.rt.profile.direct_calls && model.progress())
}
export!("EFA_SIM_1.0", efa_sim_direct_progress => efa_sim_direct_progress);
