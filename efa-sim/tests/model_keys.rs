//! Key reuse: a deregistered MR's key is not handed to the next registration of its slot
//! (an 8-bit generation changes with each), so a peer still holding the old rkey gets
//! status 7 and never reaches the memory that now sits behind that slot.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

#[test]
fn a_stale_rkey_is_refused_with_7_and_never_reaches_the_next_registration() {
    let (a, b) = (
        Side::new(&special(50, |_| {}), 0),
        Side::new(&special(51, |_| {}), 0),
    );
    let _known = b.ah_to(&a);
    let ah = a.ah_to(&b);
    let src = Region::new(&a.pd, 64, ALL_ACCESS);
    src.fill(0, &[0xab; 64]);
    for round in 0..300u64 {
        let old = Region::new(&b.pd, 64, ALL_ACCESS);
        let old_rkey = old.mr.rkey();
        drop(old);
        let fresh = Region::new(&b.pd, 64, ALL_ACCESS);
        assert_ne!(
            fresh.mr.rkey(),
            old_rkey,
            "round {round}: the key came back at once"
        );
        let mut w = wr(&ah, b.qp.qpn(), round, SendOp::RdmaWrite, &[src.sge(0, 64)]);
        w.remote = Some((fresh.addr(), old_rkey));
        a.qp.post_send_batch(&[w]).unwrap();
        let c = next(&a.cq, 10);
        assert_eq!((c.wr_id, c.status), (round, 7), "stale rkey");
        assert_eq!(fresh.bytes(0, 64), vec![0; 64]);
    }
}
