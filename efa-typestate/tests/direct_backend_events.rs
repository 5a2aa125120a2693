//! Direct CQs with completion channels (issue 26): arming through the CQ doorbell with the
//! direct state's consumer index and event count, on a CQ's own channel and on a shared
//! one, many events in a row (the 2-bit event count wraps).

#[macro_use]
mod common;
use std::time::Duration;

use common::direct::*;
use common::*;
use efa_typestate::*;

/// Sends one 8-byte message from `a` to `b` (which must have a receive posted).
fn send_one<P, X>(a: &Qp<P, Rts>, to_b: &Peer<X>, src: Sge<'_>, wr_id: u64) {
    post!(*a, 1, |s| {
        s.send(wr_id, to_b, src).unwrap();
    })
    .unwrap();
}

#[test]
fn a_waitable_direct_cq_sleeps_on_its_channel_and_wakes_for_each_completion() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx
        .create_ext_cq(cq_opts(1024, Backend::Direct, false))
        .unwrap();
    let cqb = ctx
        .create_cq(CqOptions::new(1024).backend(Backend::Direct).waitable())
        .unwrap();
    assert_eq!(cqb.backend(), Backend::Direct);
    let cfg = QpConfig::srd().backend(Backend::Direct);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![7u8; 8], AccessFlags::empty()).unwrap();
    let inbox = pd
        .register(vec![0u8; 8 * 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    std::thread::scope(|s| {
        for round in 0..10u64 {
            recv_one(&b, round, inbox.sge(8 * (round % 16), 8).unwrap());
            // The sender waits long enough for the receiver to have armed and slept.
            let sender = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                send_one(&a, &to_b, src.sge(0, 8).unwrap(), 1);
                assert_eq!(
                    cqa.wait(Duration::from_secs(5)).unwrap().status(),
                    WcStatus::SUCCESS
                );
            });
            let got = cqb.wait(Duration::from_secs(5));
            sender.join().unwrap();
            let got = got.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!((got.wr_id(), got.byte_len()), (round, 8), "round {round}");
        }
    });
}

#[test]
fn an_arm_survives_a_poll_that_consumes_entries_right_after_it() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cqa = ctx
        .create_ext_cq(cq_opts(1024, Backend::Direct, false))
        .unwrap();
    let cqb = ctx
        .create_ext_cq_with_channel(&ch, cq_opts(1024, Backend::Direct, true))
        .unwrap();
    assert_eq!(cqb.backend(), Backend::Direct);
    let cfg = QpConfig::srd().backend(Backend::Direct);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![9u8; 8], AccessFlags::empty()).unwrap();
    let inbox = pd
        .register(vec![0u8; 8 * 32], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut id = 0u64;
    for round in 0..9 {
        // One completion waits in the ring ...
        for _ in 0..2 {
            recv_one(&b, id, inbox.sge(8 * (id % 32), 8).unwrap());
            id += 1;
        }
        send_one(&a, &to_b, src.sge(0, 8).unwrap(), id);
        expect_n(&cqa, 1);
        std::thread::sleep(Duration::from_millis(5));
        // ... the CQ is armed and at once polled, which writes the doorbell again ...
        cqb.request_notify().unwrap();
        assert_eq!(cqb.poll_one().unwrap().map(|c| c.byte_len()), Some(8));
        // ... and a completion after the arm must still raise an event.
        send_one(&a, &to_b, src.sge(0, 8).unwrap(), id);
        expect_n(&cqa, 1);
        let ev = ch
            .wait(Some(Duration::from_secs(5)))
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: no event after the arm"));
        assert!(ev.is_for(&cqb));
        // Events already raised may be stale: drain them before the next round.
        while ch.wait(Some(Duration::from_millis(5))).unwrap().is_some() {}
        let last = expect_n(&cqb, 1);
        assert_eq!(last[0].status(), WcStatus::SUCCESS, "round {round}");
    }
}

#[test]
fn one_channel_serves_direct_and_provider_cqs_and_names_the_one_that_fired() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let mut cqs = Vec::new();
    for backend in [Backend::Direct, Backend::Provider] {
        let send = ctx
            .create_ext_cq_with_channel(&ch, CqOptions::new(1024).backend(backend))
            .unwrap();
        let recv = ctx
            .create_cq_with_channel(&ch, CqOptions::new(1024).backend(backend))
            .unwrap();
        assert_eq!((send.backend(), recv.backend()), (backend, backend));
        cqs.push((send, recv));
    }
    let src = pd.register(vec![1u8; 8], AccessFlags::empty()).unwrap();
    let inbox = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    for (i, (send, recv)) in cqs.iter().enumerate() {
        let backend = send.backend();
        let a = rts_qp(&pd, send, &QpConfig::srd(), QKEY_A);
        let b = rts_qp(&pd, recv, &QpConfig::srd(), QKEY_B);
        assert_eq!(
            (a.backend(), b.backend()),
            (backend, backend),
            "auto follows the CQs"
        );
        let to_b = pd.connect(&b.endpoint()).unwrap();
        for round in 0..5u64 {
            recv_one(&b, round, inbox.sge(8 * i as u64, 8).unwrap());
            send.request_notify().unwrap();
            recv.request_notify().unwrap();
            send_one(&a, &to_b, src.sge(0, 8).unwrap(), round);
            let mut fired = [false; 2];
            while fired != [true; 2] {
                let ev = ch
                    .wait(Some(Duration::from_secs(5)))
                    .unwrap()
                    .unwrap_or_else(|| panic!("{backend:?} round {round}: {fired:?} fired"));
                fired[0] |= ev.is_for(send);
                fired[1] |= ev.is_for(recv);
            }
            assert_eq!(expect_n(send, 1)[0].wr_id(), round);
            assert_eq!(expect_n(recv, 1)[0].wr_id(), round);
        }
    }
}
