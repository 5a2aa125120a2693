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

/// A direct session writes its first `max_batch` WQEs straight into the send queue and
/// stages the rest: the device must see none of them before the commit's doorbell, none
/// of an aborted session ever (not even once a later doorbell passes their slots), and
/// all of a committed one.
#[test]
fn a_direct_session_shows_the_device_nothing_before_its_commit() {
    let cfg = QpConfig::srd().backend(Backend::Direct);
    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a, cfg, QpConfig::srd());
    let mut a = a;
    assert_eq!(a.backend(), Backend::Direct);
    let max_batch = a.wq_layout().unwrap().0.max_batch as u64;
    let depth = u64::from(a.limits().max_send_wr());
    // Past one doorbell's worth, so that some WQEs go to the staging area.
    let n = (max_batch + 3).min(depth);
    assert!(n > max_batch, "max_batch {max_batch} depth {depth}");
    let src = pd
        .register(vec![7u8; 8 * n as usize], AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, 8 * n as usize);
    let session = |a: &mut Qp<&BPd<'_>, Rts>, first: u64, fail: bool| {
        let before = target.to_vec();
        // SAFETY: `src` is never written; every completion is polled below.
        unsafe {
            a.post_with(|s| {
                for i in 0..n {
                    s.write(
                        first + i,
                        &to_b,
                        src.sge(i * 8, 8)?,
                        target.remote().slice(i * 8, 8)?,
                    )?;
                }
                // Time for efa-sim's doorbell watcher to scan the queue many times over.
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(
                    target.to_vec(),
                    before,
                    "the device wrote before the commit"
                );
                if fail {
                    return Err(Error::Timeout);
                }
                Ok(())
            })
        }
    };
    assert_eq!(session(&mut a, 100, true), Err(Error::Timeout));
    expect_none(&cqa, Duration::from_millis(100));
    assert!(target.to_vec().iter().all(|&x| x == 0));
    // One write rings the doorbell past the aborted session's first slot: only it runs.
    // SAFETY: as above.
    unsafe { a.post_with(|s| s.write(1, &to_b, src.sge(0, 8)?, target.remote().slice(0, 8)?)) }
        .unwrap();
    assert_eq!(expect_n(&cqa, 1)[0].wr_id(), 1);
    expect_none(&cqa, Duration::from_millis(100));
    let landed = target.to_vec();
    assert_eq!(&landed[..8], &[7u8; 8]);
    assert!(landed[8..].iter().all(|&x| x == 0), "an aborted WQE ran");
    // A committed session: every write lands and completes once.
    session(&mut a, 200, false).unwrap();
    let mut ids: Vec<u64> = expect_n(&cqa, n as usize)
        .iter()
        .map(|c| c.wr_id())
        .collect();
    ids.sort();
    assert_eq!(ids, (200..200 + n).collect::<Vec<_>>());
    assert!(target.to_vec().iter().all(|&x| x == 7));
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

/// A poll of the send CQ inside a session, on its thread, would wait for the send queue's
/// lock the session holds (libefa's `wqlock` as much as the direct backend's state): it is
/// refused with a typed error instead of hanging, on both backends, and loses nothing.
#[test]
fn polling_the_send_cq_inside_a_session_is_refused_not_a_hang() {
    for backend in [Backend::Direct, Backend::Provider] {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            poll_inside_a_session(backend);
            let _ = done.send(());
        });
        // A regression hangs the thread above (spinning for the lock): fail, do not wait.
        finished
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{backend:?}: the poll inside the session hung"));
    }
}

fn poll_inside_a_session(backend: Backend) {
    let cfg = QpConfig::srd().backend(backend);
    let ctx = common::open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx
        .create_ext_cq(CqOptions::new(1024).backend(backend))
        .unwrap();
    let cqb = ctx
        .create_ext_cq(CqOptions::new(1024).backend(backend))
        .unwrap();
    let mut a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    assert_eq!(a.backend(), backend);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![1u8; 64], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 64);
    let write = |s: &mut SendSession<'_>, id: u64| {
        s.write(id, &to_b, src.sge(0, 8)?, target.remote().slice(id * 8, 8)?)
    };
    // SAFETY: `src` is never written; every completion is polled below.
    unsafe { a.post_with(|s| write(s, 1)) }.unwrap();
    // Its completion is in `cqa` by now (one process, efa-sim): the poll below would meet it.
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: as above.
    let inside = unsafe {
        a.post_with(|s| {
            write(s, 2)?;
            let mut out = ArrayVec::<Completion, 4>::new();
            let refused = cqa.poll(&mut out);
            // Another CQ (the receiver's) is not the session's send CQ: it polls.
            let other = cqb.poll(&mut out);
            Ok((refused, other, out.len()))
        })
    }
    .unwrap();
    assert_eq!(
        inside,
        (Err(Error::Invalid(InvalidInput::PollInSession)), Ok(0), 0),
        "{backend:?}"
    );
    // After the session the CQ polls again, and both writes complete: nothing was lost.
    let mut ids: Vec<u64> = expect_n(&cqa, 2).iter().map(|c| c.wr_id()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2], "{backend:?}");
    // A session that panics ends too: its mark goes with it.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: nothing is posted (the closure panics).
        let _ = unsafe {
            a.post_with(|s| -> Result<()> {
                write(s, 3)?;
                panic!("in the session")
            })
        };
    }));
    assert!(panicked.is_err());
    let mut out = ArrayVec::<Completion, 4>::new();
    assert_eq!(cqa.poll(&mut out), Ok(0), "{backend:?}");
    let _ = (&ctx, &b);
}
