//! Posting sessions of many RDMA writes on one QP (64 to 256 per `post_with`, a
//! doorbell every `max_batch`), posted and polled again and again, while another thread
//! polls another CQ of the device: every completion succeeds. On the direct backend under
//! strict efa-sim, that thread's empty polls run held WQEs of the QP and consume its
//! doorbells, so the posting thread's doorbell calls often find the send queue busy;
//! efa-sim once judged the next doorbell by every WQE it had not consumed yet and failed
//! up to four doorbells' worth of a session with status 2 (LOC_QP_OP_ERR) in every run.

mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::*;

const ROUNDS: usize = 100;
const SIZES: [usize; 5] = [64, 100, 128, 200, 256];

fn sessions(backend: Backend) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(1024).backend(backend))
        .unwrap();
    let other = ctx
        .create_ext_cq(CqOptions::new(16).backend(backend))
        .unwrap();
    let config = QpConfig::srd().backend(backend);
    let mut a = rts_qp(&pd, &cq, &config.depth(256, 16), QKEY_A);
    let b = rts_qp(&pd, &cq, &config, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd
        .register(vec![7u8; 256 * 64], AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, 256 * 64);
    let remote = target.remote();
    let stop = AtomicBool::new(false);
    let mut failed: Vec<(usize, u64, WcStatus)> = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut got = ArrayVec::<Completion, 4>::new();
                other.poll(&mut got).unwrap();
                assert!(got.is_empty());
            }
        });
        for r in 0..ROUNDS {
            let n = SIZES[r % SIZES.len()];
            // SAFETY: `src` is never written.
            let posted = unsafe {
                a.post_with(|s| {
                    for i in 0..n {
                        let off = (i * 64) as u64;
                        s.write(i as u64, &to_b, src.sge(off, 64)?, remote.slice(off, 64)?)?;
                    }
                    Ok(())
                })
            };
            posted.unwrap();
            let mut done = 0;
            while done < n {
                let mut got = ArrayVec::<Completion, 64>::new();
                let k = cq.poll_until(&mut got, 1, Duration::from_secs(5)).unwrap();
                assert!(k > 0, "round {r}: {done} of {n} completions");
                done += k;
                failed.extend(
                    got.iter()
                        .filter(|c| !c.is_ok())
                        .map(|c| (r, c.wr_id(), c.status())),
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        failed.is_empty(),
        "{} failed (round, WR of the session, status): {:?}",
        failed.len(),
        &failed[..failed.len().min(20)]
    );
    assert_eq!(target.to_vec(), src.as_slice());
    let _ = &ctx;
}

#[test]
fn long_sessions_complete_on_the_default_backend() {
    sessions(Backend::Provider);
}

#[test]
fn long_sessions_complete_on_the_direct_backend() {
    sessions(Backend::Direct);
}
