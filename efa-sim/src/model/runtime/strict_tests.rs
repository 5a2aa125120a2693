//! Unit tests of strict mode's order ([`super`]).

use super::*;

#[test]
fn permutations_are_seeded_and_cover_both_orders() {
    let a = Strict::random(7, 0, 1.0);
    let b = Strict::random(7, 0, 1.0);
    let pa: Vec<_> = (0..50).map(|_| a.permutation(5, 1.0)).collect();
    let pb: Vec<_> = (0..50).map(|_| b.permutation(5, 1.0)).collect();
    assert_eq!(pa, pb);
    for p in &pa {
        let mut s = p.clone();
        s.sort_unstable();
        assert_eq!(&s[..], &[0, 1, 2, 3, 4]);
    }
    let c = Strict::random(7, 1, 1.0);
    assert_ne!(
        pa,
        (0..50).map(|_| c.permutation(5, 1.0)).collect::<Vec<_>>()
    );
    let swapped = (0..1000).filter(|_| a.permutation(2, 1.0)[0] == 1).count();
    assert!((400..600).contains(&swapped), "{swapped}");
    a.reseed(7, 0);
    assert_eq!(a.permutation(5, 1.0), pa[0]);
}

#[test]
fn the_reorder_knob_permutes_that_fraction_of_windows() {
    let s = Strict::random(3, 0, 0.3);
    assert!((0..1000).all(|_| s.permutation(2, 0.0)[0] == 0));
    // reorder=0.3: a permuted two-WQE window is inverted half of the time.
    let swapped = (0..4000).filter(|_| s.permutation(2, 0.3)[0] == 1).count();
    assert!((480..720).contains(&swapped), "{swapped}");
}

fn held(sq: u64, id: u16, due: Instant, since: Instant) -> Held {
    let mut wqe = WqeBuf::default();
    wqe.set_req_id(id);
    Held {
        due,
        since,
        lead: false,
        qpn: 1,
        sq,
        resets: 0,
        wqe,
        size: 64,
    }
}

#[test]
fn defer_keeps_a_queue_s_order_and_bounds_the_hold() {
    let s = Strict::adversarial(0, 0);
    let now = Instant::now();
    let mut lead = held(1, 1, now + us(100), now);
    lead.lead = true;
    s.hold(lead);
    s.hold(held(1, 2, now + us(50), now));
    s.hold(held(2, 3, now + us(60), now));
    s.defer(1, 0, now + us(1050));
    let dues = |sq: u64| -> Vec<(u16, Instant)> {
        let held = s.held.lock().unwrap();
        held.iter()
            .filter(|h| h.sq == sq)
            .map(|h| (h.wqe.req_id(), h.due))
            .collect()
    };
    assert_eq!(dues(1), [(1, now + us(1100)), (2, now + us(1050))]);
    assert_eq!(dues(2), [(3, now + us(60))], "other queues stay");
    assert!(
        !s.held.lock().unwrap()[0].lead,
        "a deferred lead is overtaken"
    );
    s.defer(1, 1, now + us(5000));
    assert_eq!(
        dues(1)[1].1,
        now + us(1050),
        "another incarnation's WQEs stay"
    );
    s.defer(1, 0, now + Duration::from_secs(60));
    assert!(dues(1)
        .iter()
        .all(|&(_, d)| d == now + Duration::from_millis(MAX_HOLD_MS)));
    let lag = Duration::from_millis(ENGINE_LAG_MS);
    assert_eq!(s.next_due(), Some(now + us(60) + lag), "the engine's first");
}

#[test]
fn one_wqe_of_a_queue_is_taken_at_a_time_first_due_first() {
    let s = Strict::adversarial(0, 0);
    let past = Instant::now() - Duration::from_millis(5);
    s.hold(held(1, 1, past + us(20), past));
    s.hold(held(1, 2, past, past));
    s.hold(held(2, 3, past + us(10), past));
    s.hold(held(3, 4, Instant::now() + Duration::from_secs(60), past));
    let ids = |b: &[Held]| b.iter().map(|h| h.wqe.req_id()).collect::<Vec<_>>();
    let mut lead = held(4, 5, past - Duration::from_millis(1), past);
    lead.lead = true;
    s.hold(lead);
    assert_eq!(
        ids(&s.take_due(false)),
        [5],
        "a lead runs sooner for the engine"
    );
    assert!(s.take_due(false).is_empty(), "the engine runs them later");
    assert_eq!(ids(&s.take_due(true)), [2, 3]);
    assert_eq!(ids(&s.take_due(true)), [1]);
    assert!(s.take_due(true).is_empty());
    assert!(s.any(), "the WQE not due yet stays held");
}
