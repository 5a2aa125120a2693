//! The friction of issue 24's hole 7 that was really a defect, attacked: a poll into a
//! full buffer (it returned 0 for ever), polling raw entries with a deadline, and `?` on
//! a QP's preparation in a function returning `Box<dyn Error>` (five E0515 before).

mod common;
use std::time::{Duration, Instant};

use common::*;
use efa_typestate::*;

#[test]
fn hole_7_a_poll_into_a_full_buffer_says_so_instead_of_returning_0() {
    let ctx = open(0);
    let cq = ctx.create_cq(CqOptions::new(1024)).unwrap();
    let mut full = ArrayVec::<WorkCompletion, 0>::new();
    assert_eq!(
        cq.poll_wc(&mut full),
        Err(InvalidInput::OutputFull { capacity: 0 }.into())
    );
    let mut done = ArrayVec::<Completion, 0>::new();
    assert_eq!(
        cq.poll(&mut done),
        Err(InvalidInput::OutputFull { capacity: 0 }.into())
    );
    let ext = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    assert_eq!(
        ext.poll(&mut done),
        Err(InvalidInput::OutputFull { capacity: 0 }.into())
    );
    // Waiting for nothing with no room is not an error.
    assert_eq!(cq.poll_until(&mut done, 0, Duration::ZERO), Ok(0));
}

#[test]
fn hole_7_poll_wc_until_waits_for_entries_and_times_out() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(CqOptions::new(1024).waitable()).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let mut out = ArrayVec::<WorkCompletion, 4>::new();
    let t = Instant::now();
    assert_eq!(
        cq.poll_wc_until(&mut out, 1, Duration::from_millis(50)),
        Err(Error::Timeout)
    );
    assert!(t.elapsed() >= Duration::from_millis(50));
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let inbox = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&a, 3, inbox.sge_all().unwrap());
    let mut s = SendBatch::<1>::new(&a);
    s.send_inline(4, &to_a, b"hi").unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { a.post_send(&s) }.unwrap();
    let n = cq
        .poll_wc_until(&mut out, 2, Duration::from_secs(5))
        .unwrap();
    assert_eq!(n, 2);
    let mut ids: Vec<u64> = out.iter().map(|w| w.wr_id()).collect();
    ids.sort();
    assert_eq!(ids, [3, 4]);
}

/// The friction of hole 7: `?` on `prepare` into `Box<dyn Error>` (five E0515 before).
fn ready_qp_with_box_dyn_error(ctx: &Context) -> Result<u32, Box<dyn std::error::Error>> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_ext_cq(CqOptions::new(1024))?;
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(1, None)?;
    Ok(qp.qpn())
}

#[test]
fn hole_7_prepare_works_with_question_mark_into_box_dyn_error() {
    let ctx = open(0);
    assert!(ready_qp_with_box_dyn_error(&ctx).is_ok());
    // A failing step is a plain, displayable error.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let e = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(1, Some(RnrRetry::Times(9)))
        .unwrap_err();
    assert_eq!(e, InvalidInput::RnrRetryOutOfRange(9).into());
    let boxed: Box<dyn std::error::Error + Send + Sync> = e.into();
    assert!(boxed.to_string().contains("rnr_retry 9"), "{boxed}");
}
