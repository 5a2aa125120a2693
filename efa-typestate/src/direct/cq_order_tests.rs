//! How the direct CQ reads an entry and writes its doorbell, against rdma-core's libefa
//! (issue 35): only the phase byte before the barrier, the rest after it; the arm bit
//! only in an arm, `cmd_sn` counting delivered events. The fake device of
//! `backend_tests` stands in for the NIC.

use super::tests::*;
use crate::qp::QpType;
use crate::wr::test_limits;
use core::cell::RefCell;
use core::mem::offset_of;
use efa_sys::io::{efa_io_cdesc_common, CDESC_COMMON_PHASE_MASK};

std::thread_local! {
    /// What the "device" does between the poller's phase check and its reading the
    /// rest of the entry (run once).
    static AFTER_PHASE: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
}

/// Called by the poller right after its barrier (test builds only).
pub(super) fn after_phase_check() {
    if let Some(f) = AFTER_PHASE.with(|h| h.borrow_mut().take()) {
        f();
    }
}

#[test]
fn nothing_but_the_phase_byte_is_read_before_the_barrier() {
    let dev = Device::new();
    let (qp, cq) = dev.qp_and_cq();
    let limits = test_limits(PD, QpType::Srd);
    post(&qp, &limits, 500, 1).unwrap();
    let id = req_id_of(&dev.sq_entry(0));
    let full = cqe(0, QPN as u16, id, 0, None);
    // The phase byte alone is in memory when the poller checks it ...
    let flags_at = offset_of!(efa_io_cdesc_common, flags);
    let mut phase_only = [0u8; 32];
    phase_only[flags_at] = full[flags_at];
    assert_ne!(phase_only[flags_at] & CDESC_COMMON_PHASE_MASK, 0);
    dev.complete(0, phase_only);
    // ... and the rest (request id, QP number) only once it has passed its barrier: a
    // poller that read the entry's first word before the barrier keeps QP 0 and request
    // id 0, and drops the completion as one of a QP it does not serve.
    let cq_page = dev.cq as usize;
    AFTER_PHASE.with(|h| {
        *h.borrow_mut() = Some(Box::new(move || {
            for (i, b) in full.iter().enumerate() {
                // SAFETY: byte `i` of entry 0 of the live CQ page; this thread is the
                // poller's, between its phase check and its reads.
                unsafe { ((cq_page + i) as *mut u8).write_volatile(*b) };
            }
        }))
    });
    let got = poll_all(&cq);
    assert_eq!(
        got.len(),
        1,
        "the completion is read whole after the barrier"
    );
    assert_eq!(got[0].wr_id, 500);
}

#[test]
fn the_cq_doorbell_carries_the_arm_bit_only_when_arming_and_cmd_sn_counts_events() {
    use crate::direct::cqe::CqDoorbell;
    let dev = Device::new();
    let (qp, cq) = dev.qp_and_cq();
    let limits = test_limits(PD, QpType::Srd);
    cq.arm();
    let db = CqDoorbell::decode(dev.db(2));
    assert!(db.arm, "an arm sets the arm bit");
    assert_eq!(db.cmd_sn, 0);
    // A completion, polled: libefa's poll writes the consumer index with the arm bit
    // clear (`efa_update_cq_doorbell(cq, false)`), even while the CQ is armed.
    post(&qp, &limits, 1, 1).unwrap();
    dev.complete(0, cqe(0, QPN as u16, req_id_of(&dev.sq_entry(0)), 0, None));
    assert_eq!(poll_all(&cq).len(), 1);
    let db = CqDoorbell::decode(dev.db(2));
    assert_eq!((db.consumer_index, db.arm, db.cmd_sn), (1, false, 0));
    // An event was read: the next arm is a new request.
    cq.event_delivered();
    cq.arm();
    let db = CqDoorbell::decode(dev.db(2));
    assert_eq!((db.consumer_index, db.arm, db.cmd_sn), (1, true, 1));
    for _ in 0..4 {
        cq.event_delivered();
    }
    cq.arm();
    assert_eq!(
        CqDoorbell::decode(dev.db(2)).cmd_sn,
        5 & 3,
        "two bits of the count"
    );
}
