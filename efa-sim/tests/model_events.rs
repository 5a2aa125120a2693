//! CQ notifications: one event per arm, and the command sequence number (`cmd_sn`) that
//! tells a new arm from a repeat of one already answered (rdma-core's `efa_arm_cq` /
//! `efa_cq_event`).

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Two sides; `a`'s CQ counts its notifications; `b` has three receives posted.
struct Notified {
    a: Side,
    b: Side,
    hits: Arc<AtomicU32>,
    ah: Arc<Ah>,
    r: Region,
    _rb: Region,
}

impl Notified {
    fn new() -> Notified {
        let a = Side::new(&dev(0), 0);
        let b = Side::new(&dev(1), 0);
        let hits = Arc::new(AtomicU32::new(0));
        let h = hits.clone();
        a.cq.set_notifier(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        let ah = a.ah_to(&b);
        let r = Region::new(&a.pd, 64, ALL_ACCESS);
        let rb = Region::new(&b.pd, 64, ALL_ACCESS);
        for i in 0..3 {
            b.qp.post_recv(&recv(i, &[rb.sge(0, 64)])).unwrap();
        }
        Notified {
            a,
            b,
            hits,
            ah,
            r,
            _rb: rb,
        }
    }
    /// A SEND from `a` to `b`.
    fn send(&self, id: u64) {
        let w = wr(
            &self.ah,
            self.b.qp.qpn(),
            id,
            SendOp::Send,
            &[self.r.sge(0, 4)],
        );
        self.a.qp.post_send_batch(&[w]).unwrap();
    }
    fn hits(&self) -> u32 {
        self.hits.load(Ordering::SeqCst)
    }
}

#[test]
fn cq_notifier_fires_once_per_arm() {
    let n = Notified::new();
    n.a.cq.arm();
    n.send(1);
    n.send(2);
    next(&n.a.cq, 10);
    next(&n.a.cq, 10);
    assert_eq!(n.hits(), 1, "one-shot per arm");
    // The consumer takes the event (ibv_get_cq_event), then arms again.
    n.a.cq.event_delivered();
    n.a.cq.arm();
    n.send(3);
    next(&n.a.cq, 10);
    assert_eq!(n.hits(), 2);
}

/// An arm carries the events the consumer took so far (`cmd_sn`): arming again before
/// taking the event an arm raised repeats that arm, which the device has answered, so
/// nothing more is raised; once the event is taken, the next arm is new.
#[test]
fn an_arm_already_answered_raises_no_second_event() {
    let n = Notified::new();
    n.a.cq.arm();
    n.send(1);
    next(&n.a.cq, 10);
    assert_eq!(n.hits(), 1);
    let repeats = n.a.dev.stats().repeated_arms;
    n.a.cq.arm(); // the same cmd_sn: a repeat of the answered arm
    n.send(2);
    next(&n.a.cq, 10);
    assert_eq!(n.hits(), 1, "no second event for one arm");
    assert_eq!(n.a.dev.stats().repeated_arms, repeats + 1);
    n.a.cq.event_delivered();
    n.a.cq.arm();
    n.send(3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while n.hits() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "a new arm after the event was taken"
        );
        std::thread::yield_now();
    }
    next(&n.a.cq, 10);
}
