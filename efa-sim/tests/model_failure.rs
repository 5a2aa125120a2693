//! How SRD failures unfold in time, as efa-sim models them (see its README's fidelity
//! ledger for which values are measured on hardware and which are assumptions):
//! `rnr_retry = N` means N retries after the first RNR answer (N + 1 RNR answers, then
//! status 10), 7 means retry forever; a peer that stops answering fails the WR with
//! status 13 (15 if it never answered) no sooner than the peer timeout.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;
use std::time::Instant;

/// A QP of `a` in RTS with `rnr_retry` (the modify of RTR→RTS sets it).
fn qp_with_rnr_retry(a: &Side, cq: &std::sync::Arc<Cq>, rnr_retry: u8) -> std::sync::Arc<Qp> {
    let (qp, _) = a.pd.create_qp(&srd_init(cq, caps(8, 8), 0)).unwrap();
    modify(&qp, 1 | 16 | 32 | 64, QpState::Init).unwrap();
    modify(&qp, 1, QpState::Rtr).unwrap();
    qp.modify(&ModifyQp {
        mask: 1 | (1 << 16) | (1 << 11),
        state: QpState::Rts as u32,
        rnr_retry,
        ..Default::default()
    })
    .unwrap();
    qp
}

#[test]
fn rnr_retry_n_answers_rnr_n_plus_one_times_then_fails_with_status_10() {
    let (a, b) = (
        Side::new(&special(56, |_| {}), 0),
        Side::new(&special(57, |_| {}), 0),
    );
    let ah = a.ah_to(&b);
    let (cq, _) = a.dev.create_cq(16, CqOptions::default()).unwrap();
    for n in [0u8, 1, 3, 6] {
        let qp = qp_with_rnr_retry(&a, &cq, n);
        let before = b.dev.stats().rnr_naks;
        qp.post_send_batch(&[wr(&ah, b.qp.qpn(), u64::from(n), SendOp::Send, &[])])
            .unwrap();
        let c = next(&cq, 10);
        assert_eq!((c.wr_id, c.status), (u64::from(n), 10), "rnr_retry {n}");
        assert_eq!(
            b.dev.stats().rnr_naks - before,
            u64::from(n) + 1,
            "rnr_retry {n}: one first attempt and {n} retries"
        );
    }
}

#[test]
fn rnr_retry_7_retries_past_the_peer_timeout_until_a_receive_is_posted() {
    let (a, b) = (
        Side::new(&special(58, |_| {}), 0),
        Side::new(&special(59, |_| {}), 0),
    );
    let ah = a.ah_to(&b);
    let (cq, _) = a.dev.create_cq(16, CqOptions::default()).unwrap();
    let qp = qp_with_rnr_retry(&a, &cq, 7);
    qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    // RNR answers prove the peer alive: no timeout, no status 10.
    none_within(&cq, runtime::PEER_TIMEOUT.as_millis() as u64 + 300);
    assert!(b.dev.stats().rnr_naks > 8, "{:?}", b.dev.stats().rnr_naks);
    b.qp.post_recv(&recv(5, &[])).unwrap();
    assert_eq!(next(&cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).wr_id, 5);
}

#[test]
fn a_peer_that_never_answers_fails_the_wr_no_sooner_than_the_peer_timeout() {
    let a = Side::new(&special(60, |_| {}), 0);
    let waited = send_to_nobody(&a, 98);
    assert!(waited >= runtime::PEER_TIMEOUT, "failed after {waited:?}");
}

/// Sends to 127.0.0.`host`, an address no device binds (nothing ever answers), and waits
/// for the WR to fail as never answered (status 15); how long that took.
fn send_to_nobody(a: &Side, host: u8) -> std::time::Duration {
    let ghost =
        a.pd.create_ah(&efa_sim::model::gid_for(
            std::net::Ipv4Addr::new(127, 0, 0, host),
            0,
        ))
        .unwrap();
    let t = Instant::now();
    a.qp.post_send_batch(&[wr(&ghost, 1, 3, SendOp::Send, &[])])
        .unwrap();
    let c = next(&a.cq, 20);
    let waited = t.elapsed();
    assert_eq!((c.wr_id, c.status), (3, 15), "never answered");
    waited
}

/// The profile's `peer_timeout_ms` is the wait (here 2.5 s: a longer one, as the 32-rail
/// run of scripts/test.sh asks for): no sooner, and not much later.
#[test]
fn the_peer_timeout_is_the_profiles() {
    let a = Side::new(&special(63, |p| p.peer_timeout_ms = 2500), 0);
    let waited = send_to_nobody(&a, 97);
    assert!(
        waited >= std::time::Duration::from_millis(2500),
        "failed after {waited:?}"
    );
    assert!(
        waited < std::time::Duration::from_secs(10),
        "failed after {waited:?}"
    );
}

#[test]
fn a_device_without_the_rnr_retry_cap_reports_an_rnr_at_once() {
    let no_cap = |p: &mut Profile| p.device_caps &= !efa_sim::model::profile::CAP_RNR_RETRY;
    let (a, b) = (
        Side::new(&special(61, no_cap), 0),
        Side::new(&special(62, |_| {}), 0),
    );
    let ah = a.ah_to(&b);
    let before = b.dev.stats().rnr_naks;
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 10);
    assert_eq!(b.dev.stats().rnr_naks - before, 1, "no retry");
}
