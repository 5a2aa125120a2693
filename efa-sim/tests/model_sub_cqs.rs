//! First-generation EFA's sub-CQs (issue 35): on a device of PCI id 0xefa0 each CQ is
//! several rings laid end to end, as rdma-core's `create_cq` lays them out; a QP's send
//! and receive completions land in different ones; efa-sim's provider polls them all, as
//! libefa does, while `efadv_query_cq` describes only the first (so a direct consumer that
//! trusts it misses completions: why efa-typestate and libfabric never go direct there).

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::profile::{validate, Profile, FIRST_GEN_SUB_CQS};
use efa_sim::model::*;
use efa_sys::vendor::EFA_PART_ID_EFA0;
use helpers::*;

/// Entries of `layout`'s ring among the first `n` whose phase says "written in the first
/// lap".
fn written(buffer: *mut u8, n: usize) -> usize {
    (0..n)
        .filter(|i| {
            // SAFETY: entry `i` of the live CQ ring (32-byte entries, `n` of them mapped);
            // the flags byte of a completion already polled is not written again.
            let flags = unsafe { std::ptr::read_volatile(buffer.add(32 * i + 3)) };
            flags & 1 == 1
        })
        .count()
}

#[test]
fn a_first_generation_device_splits_each_cq_into_sub_cqs() {
    let d = special(10, |p| p.vendor_part_id = EFA_PART_ID_EFA0);
    let a = Side::new(&d, 0);
    let b = Side::new(&d, 0);
    assert_eq!(a.cq.sub_cqs(), FIRST_GEN_SUB_CQS);
    let depth = a.cq.depth() as usize;
    let lb = b.cq.ring_layout();
    assert_eq!(lb.num_entries as usize, depth, "the first sub-CQ only");
    assert!(
        lb.doorbell.is_null(),
        "no CQ doorbell on a first-generation device"
    );
    // Sends from a to b: efa-sim's provider finds every completion, on both CQs.
    let ah = a.ah_to(&b);
    let r = Region::new(&a.pd, 64, ALL_ACCESS);
    let rb = Region::new(&b.pd, 64, ALL_ACCESS);
    const N: u64 = 40;
    for i in 0..N {
        b.qp.post_recv(&recv(100 + i, &[rb.sge(0, 64)])).unwrap();
    }
    for i in 0..N {
        a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), i, SendOp::Send, &[r.sge(0, 8)])])
            .unwrap();
    }
    let mut sent: Vec<u64> = (0..N).map(|_| next(&a.cq, 10)).map(|c| c.wr_id).collect();
    let mut got: Vec<u64> = (0..N).map(|_| next(&b.cq, 10)).map(|c| c.wr_id).collect();
    sent.sort_unstable();
    got.sort_unstable();
    assert_eq!(sent, (0..N).collect::<Vec<_>>());
    assert_eq!(got, (100..100 + N).collect::<Vec<_>>());
    // b's receive completions all lie outside the first sub-CQ, the only one
    // efadv_query_cq describes: a consumer polling that ring would wait for ever.
    let all = depth * a.cq.sub_cqs() as usize;
    assert_eq!(written(lb.buffer, depth), 0, "nothing in the first sub-CQ");
    assert_eq!(written(lb.buffer, all), N as usize, "all in the others");
}

#[test]
fn other_devices_have_one_ring_per_cq_and_the_count_can_be_set() {
    let d = special(11, |_| {});
    let a = Side::new(&d, 0);
    assert_eq!(a.cq.sub_cqs(), 1);
    assert!(!a.cq.ring_layout().doorbell.is_null());
    let d = special(12, |p| p.sub_cqs_per_cq = 2);
    assert_eq!(Side::new(&d, 0).cq.sub_cqs(), 2);
    let mut p = Profile::default();
    for (n, ok) in [(0, true), (1, true), (3, false), (8, true), (16, false)] {
        p.sub_cqs_per_cq = n;
        assert_eq!(validate(&p).is_ok(), ok, "sub_cqs_per_cq={n}");
    }
    p.sub_cqs_per_cq = 3;
    assert_eq!(
        validate(&p).unwrap_err(),
        "sub_cqs_per_cq=3: must be 0 (the device's count), 1, 2, 4 or 8"
    );
}
