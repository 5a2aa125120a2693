//! `Qp::post_with`: work requests handed to the provider as they are checked, in one
//! doorbell, all or nothing.

#[macro_use]
mod common;
use std::time::Duration;

use common::*;
use efa_typestate::*;

#[test]
fn a_session_posts_every_request_in_one_doorbell() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut a = a;
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, 256);
    let inbox = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 70, inbox.sge_all().unwrap());
    // SAFETY: `src` is never written; every completion is polled below.
    let added = unsafe {
        a.post_with(|s| {
            for i in 0..4u64 {
                s.write(
                    i,
                    &to_b,
                    src.sge(i * 32, 32)?,
                    target.remote().slice(i * 64, 32)?,
                )?;
            }
            s.send_inline(4, &to_b, b"inline")?;
            Ok(s.len())
        })
    }
    .unwrap();
    assert_eq!(added, 5);
    let mut ids: Vec<u64> = expect_n(&cqa, 5)
        .iter()
        .map(|c| {
            c.result().unwrap();
            c.wr_id()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    let got = target.to_vec();
    for i in 0..4 {
        assert_eq!(
            &got[i * 64..i * 64 + 32],
            &src.as_slice()[i * 32..i * 32 + 32]
        );
        assert!(got[i * 64 + 32..i * 64 + 64].iter().all(|&x| x == 0));
    }
    let r = expect_n(&cqb, 1)[0];
    assert_eq!((r.wr_id(), r.byte_len()), (70, 6));
    assert_eq!(&inbox.as_slice()[..6], b"inline");
    let _ = &ctx;
}

#[test]
fn an_error_in_the_session_posts_nothing() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut a = a;
    let src = pd.register(vec![5u8; 128], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 128);
    // SAFETY: nothing is posted (the closure fails), and `src` is never written.
    let r = unsafe {
        a.post_with(|s| {
            s.write(1, &to_b, src.sge(0, 64)?, target.remote().slice(0, 64)?)?;
            // Past the end of the remote buffer: a typed error before the device sees it.
            s.write(2, &to_b, src.sge(64, 64)?, target.remote().slice(100, 64)?)
        })
    };
    assert_eq!(
        r,
        Err(Error::Invalid(InvalidInput::RemoteOutOfBounds {
            offset: 100,
            len: 64
        }))
    );
    // The first write, added before the failure, was discarded with the session.
    expect_none(&cqa, Duration::from_millis(100));
    assert!(target.to_vec().iter().all(|&x| x == 0));

    // The session is closed: the QP posts again.
    // SAFETY: as above; the completion is polled below.
    unsafe { a.post_with(|s| s.write(3, &to_b, src.sge(0, 8)?, target.remote())) }.unwrap();
    assert_eq!(expect_n(&cqa, 1)[0].wr_id(), 3);
    assert_eq!(&target.to_vec()[..8], &[5u8; 8]);
    let _ = (&ctx, &b, &cqb);
}

#[test]
fn a_session_is_checked_as_a_batch_is() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut a = a;
    let depth = a.limits().max_send_wr();
    let src = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    let other_pd = ctx.alloc_pd().unwrap();
    let foreign = other_pd
        .register(vec![0u8; 64], AccessFlags::empty())
        .unwrap();
    // SAFETY: nothing is posted: every closure fails.
    unsafe {
        let full = a.post_with(|s| {
            for i in 0..=depth as u64 {
                s.send(i, &to_b, src.sge(0, 8)?)?;
            }
            Ok(())
        });
        assert_eq!(
            full,
            Err(Error::Invalid(InvalidInput::BatchLargerThanQueue { depth }))
        );
        let wrong_pd = a.post_with(|s| s.send(1, &to_b, foreign.sge(0, 8)?));
        assert_eq!(
            wrong_pd,
            Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Sge)))
        );
        let reserved = a.post_with(|s| s.send(1 << 63, &to_b, src.sge(0, 8)?));
        assert_eq!(
            reserved,
            Err(Error::Invalid(InvalidInput::ReservedWrId(1 << 63)))
        );
    }
    expect_none(&cqa, Duration::from_millis(100));
    let _ = (&b, &cqb);
}

#[test]
fn a_panic_in_the_session_aborts_it() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let mut a = a;
    let src = pd.register(vec![9u8; 64], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 64);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: nothing is posted (the closure panics).
        let _ = unsafe {
            a.post_with(|s| -> Result<()> {
                s.write(1, &to_b, src.sge(0, 64)?, target.remote())?;
                panic!("while building");
            })
        };
    }));
    assert!(caught.is_err());
    expect_none(&cqa, Duration::from_millis(100));
    // Had the session stayed open, this would wait for the provider's lock forever.
    // SAFETY: `src` is never written; the completion is polled below.
    unsafe { a.post_with(|s| s.write(2, &to_b, src.sge(0, 64)?, target.remote())) }.unwrap();
    assert_eq!(expect_n(&cqa, 1)[0].wr_id(), 2);
    assert_eq!(target.to_vec(), vec![9u8; 64]);
    let _ = (&ctx, &b, &cqb);
}

#[test]
fn a_dyn_qp_opens_a_session_only_in_rts() {
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd.register(vec![3u8; 16], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 16);
    let mut rts = a.into_dyn();
    // SAFETY: `src` is never written; the completion is polled below.
    unsafe { rts.post_with(|s| s.write(8, &to_b, src.sge_all()?, target.remote())) }.unwrap();
    assert_eq!(expect_n(&cqa, 1)[0].wr_id(), 8);
    assert_eq!(target.to_vec(), vec![3u8; 16]);

    let cfg = QpConfig::srd();
    let mut init = pd
        .create_qp(&cqa, &cqa, &cfg)
        .unwrap()
        .init(0x77)
        .unwrap()
        .into_dyn();
    let mut called = false;
    // SAFETY: nothing can be posted (the QP is in INIT).
    let r = unsafe {
        init.post_with(|_| {
            called = true;
            Ok(())
        })
    };
    assert_eq!(
        r,
        Err(Error::Invalid(InvalidInput::WrongQpState {
            expected: QpStateKind::Rts,
            actual: QpStateKind::Init
        }))
    );
    assert!(!called);
    let _ = (&ctx, &b, &cqb);
}
