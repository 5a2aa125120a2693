//! Waiting with a timeout on every CQ kind, and the finite default RNR retry.

mod common;
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::*;

/// Posts a receive on `b`, then (after `delay`, from another thread) an inline send from
/// `a`, and waits for both completions with `poll_until`.
fn wake_after<Q: CompletionQueue + Sync>(ctx: &Context, cq: &Q, delay: Duration) {
    let pd = ctx.alloc_pd().unwrap();
    let a = rts_qp(&pd, cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<1>::new(&b);
    r.push(1, dst.sge_all().unwrap()).unwrap();
    // SAFETY: `dst` is read only after the completions are polled below.
    unsafe { b.post_recv(&r) }.unwrap();
    let t0 = Instant::now();
    let mut got = ArrayVec::<Completion, 4>::new();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(delay);
            let mut s = SendBatch::<1>::new(&a);
            s.send_inline(2, &to_b, b"wake up").unwrap();
            // SAFETY: inline payload, copied during the call; `a` is Sync.
            unsafe { a.post_send(&s) }.unwrap();
        });
        let n = cq.poll_until(&mut got, 2, Duration::from_secs(10)).unwrap();
        assert_eq!(n, 2);
    });
    assert!(
        t0.elapsed() >= delay,
        "returned before the completions existed"
    );
    assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
    assert_eq!(&dst.as_slice()[..7], b"wake up");
}

#[test]
fn poll_until_wakes_on_every_cq_kind() {
    let ctx = open(0);
    let delay = Duration::from_millis(50);
    let ext = ctx.create_ext_cq(CqOptions::new(1024).waitable()).unwrap();
    assert!(ext.is_waitable());
    wake_after(&ctx, &ext, delay);
    let classic = ctx.create_cq(CqOptions::new(1024).waitable()).unwrap();
    wake_after(&ctx, &classic, delay);
    // Without a channel of its own a CQ is polled with short naps: same result.
    let plain = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    assert!(!plain.is_waitable());
    wake_after(&ctx, &plain, delay);
    let plain = ctx.create_cq(CqOptions::new(1024)).unwrap();
    wake_after(&ctx, &plain, delay);
}

#[test]
fn poll_until_times_out_with_what_arrived() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable()).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let dst = pd
        .register(vec![0u8; 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let mut r = RecvBatch::<1>::new(&a);
    r.push(1, dst.sge_all().unwrap()).unwrap();
    // SAFETY: `dst` is read only after its completion is polled below.
    unsafe { a.post_recv(&r) }.unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(2, &to_a, b"one").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    // Two arrive (send + receive); three are asked for.
    let mut got = ArrayVec::<Completion, 4>::new();
    let t0 = Instant::now();
    let err = cq
        .poll_until(&mut got, 3, Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(got.len(), 2, "what arrived is handed over: {got:?}");
    assert!(got.iter().all(|c| c.is_ok()));
    assert_eq!(&dst.as_slice()[..3], b"one");
    assert_eq!(
        cq.wait(Duration::from_millis(20)).unwrap_err(),
        Error::Timeout
    );
    // Asking for more than the buffer holds is refused at once.
    let mut small = ArrayVec::<Completion, 2>::new();
    assert_eq!(
        cq.poll_until(&mut small, 3, Duration::from_secs(1)),
        Err(Error::Invalid(InvalidInput::WaitBeyondCapacity {
            wanted: 3,
            room: 2
        }))
    );
}

#[test]
fn a_cq_has_one_channel_of_its_own_device() {
    let ctx = open(0);
    let other = open(1);
    let ch = ctx.create_comp_channel().unwrap();
    let foreign = other.create_comp_channel().unwrap();
    assert_eq!(
        ctx.create_ext_cq_with_channel(&ch, CqOptions::new(8).waitable())
            .map(drop),
        Err(Error::Invalid(InvalidInput::ChannelConflict))
    );
    assert_eq!(
        ctx.create_cq_with_channel(&foreign, CqOptions::new(8))
            .map(drop),
        Err(Error::Invalid(InvalidInput::ForeignObject))
    );
}

#[test]
fn a_send_nobody_receives_fails_after_the_default_rnr_retries() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable()).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A); // RNR retry left to the default
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    assert_eq!(a.query().unwrap().rnr_retry, 3);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(5, &to_b, b"nobody listens").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    // Not outstanding forever: a typed completion error within the wait.
    let c = cq
        .wait(Duration::from_secs(10))
        .expect("the send completes");
    assert_eq!(c.wr_id(), 5);
    assert_eq!(c.status(), WcStatus::RNR_RETRY_EXC_ERR);
    assert_eq!(
        c.result().unwrap_err(),
        Error::Completion {
            status: WcStatus::RNR_RETRY_EXC_ERR,
            efa: EfaStatus::REMOTE_RNR
        }
    );
}
