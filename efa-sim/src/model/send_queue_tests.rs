//! Unit tests of the device's send queue ([`super`]).

use super::*;
use crate::model::{CqOptions, Device, ModifyQp, Profile, QpCaps, QpInit, QpType};
use std::sync::Arc;

/// A strict standalone device (index `index`, unique in this binary) and an SRD QP of
/// 256 send slots in RTS, whose rings were not handed out: no watcher consumes them, the
/// test decides who does.
fn strict_qp(index: u32) -> (Arc<Device>, Arc<Qp>) {
    let profile = Profile {
        strict: true,
        ..Profile::default()
    };
    let d = Device::standalone(index, std::net::Ipv4Addr::LOCALHOST, profile).unwrap();
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(1024, CqOptions::default()).unwrap();
    let init = QpInit {
        qp_type: QpType::Srd,
        send_cq: cq.clone(),
        recv_cq: cq,
        caps: QpCaps {
            max_send_wr: 256,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 32,
        },
        sq_sig_all: false,
        send_ops_flags: Some(0x1f),
        efa_flags: 0,
        sl: 0,
    };
    let (qp, _) = pd.create_qp(&init).unwrap();
    for (mask, state) in [
        (1 | 16 | 32 | 64, QpState::Init),
        (1, QpState::Rtr),
        (1 | (1 << 16), QpState::Rts),
    ] {
        qp.modify(&ModifyQp {
            mask,
            state: state as u32,
            port_num: 1,
            qkey: 0x1234,
            ..Default::default()
        })
        .unwrap();
    }
    (d, qp)
}

/// Writes `n` WQEs (their contents do not matter here, their phase does) at the
/// producer position `pc`.
fn produce(ring: &Ring, pc: &mut Cursor, n: u32) {
    for _ in 0..n {
        let mut w = WqeBuf::default();
        w.0[PHASE_BYTE] = pc.phase & TX_META_DESC_PHASE_MASK;
        ring.write_slot(u32::from(pc.count), &w.0[..ring.entry_size()]);
        pc.advance(ring.entries());
    }
}

/// The `max_batch` rule judges each observed store by the WQEs it adds to the previous
/// store, as rdma-core rings (every `max_batch` WQEs): when the call after one store
/// found another thread consuming (the watcher, a poller running held WQEs) that had
/// read the doorbell before the store, the next store's call finds two stores' WQEs new,
/// and none of them is an overrun. A store that adds more than `max_batch` still is.
/// (Seen as sessions of `post_with` on efa-typestate's direct backend completing WQEs
/// with status 2 now and then on a loaded machine: 16 WQEs of a 256-WQE session.)
#[test]
fn a_store_announces_the_wqes_after_the_previous_store_not_after_the_device() {
    let (d, qp) = strict_qp(61);
    let rt = &qp.pd().rt;
    let sq = qp.sq_dev();
    let ring = sq.ring();
    let max_batch = qp.sq_provider().config().max_batch;
    assert_eq!(max_batch, 16);
    let mut pc = Cursor::default();
    produce(ring, &mut pc, 2 * max_batch);
    // Another thread is consuming (it read the doorbell before these stores).
    let busy = sq.at.lock();
    ring.doorbell().write(max_batch);
    assert!(
        !sq.process_observed(rt, &qp, max_batch),
        "the queue is busy"
    );
    ring.doorbell().write(2 * max_batch);
    drop(busy);
    // That thread let go before it looked again; this store's call consumes both.
    assert!(sq.process_observed(rt, &qp, max_batch));
    assert_eq!(sq.consumed.load(Ordering::Acquire), 2 * max_batch as u16);
    assert_eq!(d.stats().batch_overruns, 0, "{:?}", d.stats());
    // Strict mode holds some of those WQEs and runs them when due on the engine thread,
    // under the queue's lock (sooner than the next store on a slow machine: qemu):
    // wait until none is held or running, so that this test's call consumes next.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.strict.as_ref().is_some_and(|s| s.any()) || sq.at.try_lock().is_none() {
        assert!(std::time::Instant::now() < deadline, "held WQEs never ran");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // One store of 3 × max_batch new WQEs: the last 2 × max_batch are overruns.
    produce(ring, &mut pc, 3 * max_batch);
    ring.doorbell().write(5 * max_batch);
    assert!(sq.process_observed(rt, &qp, max_batch));
    assert_eq!(d.stats().batch_overruns, 2 * u64::from(max_batch));
}
