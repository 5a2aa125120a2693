//! The direct backend under concurrency and ownership rules: no allocation on post and
//! poll, threads posting to one QP at once, posting sessions, `write_all`/`read_all` and
//! leases on direct QPs.

#[macro_use]
mod common;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use common::direct::*;
use common::*;
use efa_typestate::*;

/// Counts the allocations of the threads that ask for it (the others run other tests).
struct Counting;

thread_local! {
    /// Allocations of this thread while counting, or None when not counting.
    static ALLOCS: Cell<Option<u64>> = const { Cell::new(None) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get().map(|n| n + 1)));
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get().map(|n| n + 1)));
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn direct_post_and_poll_do_not_allocate() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Direct))
        .unwrap();
    let cfg = QpConfig::srd().backend(Backend::Direct);
    let a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cq, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![7u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let run = |iterations: u64| {
        for i in 0..iterations {
            let mut recv = RecvBatch::<1>::new(&b);
            recv.push(i, dst.sge(0, 64).unwrap()).unwrap();
            let mut send = SendBatch::<1>::new(&a);
            send.send(i, &to_b, src.sge(0, 8).unwrap()).unwrap();
            // SAFETY: the buffers are not touched.
            unsafe {
                b.post_recv(&recv).unwrap();
                a.post_send(&send).unwrap();
            }
            let mut n = 0;
            while n < 2 {
                let mut got = ArrayVec::<Completion, 4>::new();
                if cq.poll(&mut got).unwrap() == 0 {
                    std::thread::yield_now();
                }
                for c in &got {
                    assert!(c.is_ok(), "{c:?}");
                    assert_eq!(c.wr_id(), i);
                }
                n += got.len();
            }
        }
    };
    run(50);
    ALLOCS.with(|a| a.set(Some(0)));
    run(3000);
    let n = ALLOCS.with(|a| a.replace(None));
    assert_eq!(n, Some(0), "allocations on the direct post/poll path");
    // The counter counts.
    ALLOCS.with(|a| a.set(Some(0)));
    drop(std::hint::black_box(vec![1u8; 8]));
    assert_eq!(ALLOCS.with(|a| a.replace(None)), Some(1));
}

#[test]
fn threads_post_to_one_direct_qp_at_once() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Direct))
        .unwrap();
    let cqb = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Direct))
        .unwrap();
    let cfg = QpConfig::srd().depth(256, 256).backend(Backend::Direct);
    let a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![7u8; 64], AccessFlags::empty()).unwrap();
    let target = write_target(&pd, 64);
    if !ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
        return;
    }
    const PER_THREAD: u64 = 500;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (a, to_b, src, target, cqa) = (&a, &to_b, &src, &target, &cqa);
            s.spawn(move || {
                let mut i = 0;
                while i < PER_THREAD {
                    let r = post!(*a, 1, |b| {
                        b.write(
                            t << 32 | i,
                            to_b,
                            src.sge(0, 8).unwrap(),
                            target.remote().slice(0, 8).unwrap(),
                        )
                        .unwrap();
                    });
                    match r {
                        Ok(()) => i += 1,
                        Err(Error::SendQueueFull) => {
                            // Another thread polls too: take what is there.
                            let mut got = ArrayVec::<Completion, 16>::new();
                            cqa.poll(&mut got).unwrap();
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let _ = &b;
    // Every write completes exactly once, each wr_id once, whoever polled it; the ones
    // the threads polled are not counted again, so count what is left and what they saw
    // by re-posting nothing: here, just drain and check no wr_id is out of range.
    let mut left = 0;
    loop {
        let got = poll_n(&cqa, 64, Duration::from_millis(50));
        if got.is_empty() {
            break;
        }
        for c in &got {
            assert!(c.is_ok(), "{c:?}");
            assert!(c.wr_id() >> 32 < 4 && c.wr_id() & 0xffff_ffff < PER_THREAD);
        }
        left += got.len();
    }
    assert!(left <= 4 * PER_THREAD as usize);
    let (sq, _) = a.wq_layout().unwrap();
    // All slots are back: the queue takes a whole ring again.
    for i in 0..sq.num_entries {
        post!(a, 1, |s| {
            s.write(
                u64::from(i),
                &to_b,
                src.sge(0, 8).unwrap(),
                target.remote().slice(0, 8).unwrap(),
            )
            .unwrap();
        })
        .unwrap();
    }
    expect_n(&cqa, sq.num_entries as usize);
}

/// Posting sessions (`post_with`): one that commits (more WRs than a doorbell's batch),
/// one whose closure fails (nothing posted), one that panics (nothing posted), one that
/// overfills the queue (SendQueueFull, nothing posted).
fn sessions(backend: Backend) -> (Vec<Seen>, Vec<Seen>, Vec<u8>, Error) {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(cq_opts(256, backend, false)).unwrap();
    let cqb = ctx.create_ext_cq(cq_opts(256, backend, true)).unwrap();
    let cfg = QpConfig::srd().depth(8, 64).backend(backend);
    let mut a = rts_qp(&pd, &cqa, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cqb, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();
    let entries = a.wq_layout().unwrap().0.num_entries;
    let src = pd
        .register((0..=255u8).collect::<Vec<u8>>(), AccessFlags::empty())
        .unwrap();
    let dst = pd
        .register(vec![0u8; 64 * 16], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let r: Vec<Sge<'_>> = (0..8).map(|i| dst.sge(i * 64, 64).unwrap()).collect();
    let lists: Vec<&[Sge<'_>]> = r.chunks(1).collect();
    post_recvs(&b, 100, &lists);
    // SAFETY: as in `post!`.
    let failed = unsafe {
        a.post_with(|s| {
            s.send(90, &to_b, src.sge(0, 8).unwrap())?;
            Err::<(), _>(Error::Timeout)
        })
    };
    assert_eq!(failed, Err(Error::Timeout));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as in `post!`.
        unsafe {
            a.post_with(|s| {
                s.send(91, &to_b, src.sge(0, 8).unwrap())?;
                panic!("in the session");
                #[allow(unreachable_code)]
                Ok(())
            })
        }
    }));
    assert!(panicked.is_err());
    // SAFETY: as in `post!`.
    let n = unsafe {
        a.post_with(|s| {
            for i in 0..entries.min(8) {
                let len = 1 + u64::from(i) * 7;
                s.send_imm(u64::from(i), &to_b, src.sge(u64::from(i), len).unwrap(), i)?;
            }
            Ok(s.len())
        })
    }
    .unwrap();
    let a_done = expect_n(&cqa, n);
    let b_done = expect_n(&cqb, n);
    // A full queue: a session filling it goes in; the next one, one WR beyond the free
    // slots, is refused as a whole.
    let target = write_target(&pd, 64);
    let write = |s: &mut SendSession<'_>, id: u64| {
        s.write(
            id,
            &to_b,
            src.sge(0, 8).unwrap(),
            target.remote().slice(0, 8).unwrap(),
        )
    };
    // SAFETY: as in `post!`.
    unsafe {
        a.post_with(|s| {
            for i in 0..entries {
                write(s, 200 + u64::from(i))?;
            }
            Ok(())
        })
    }
    .unwrap();
    // SAFETY: as in `post!`.
    let full = unsafe { a.post_with(|s| write(s, 300)) }.unwrap_err();
    let mut written: Vec<u64> = expect_n(&cqa, entries as usize)
        .iter()
        .map(|c| c.wr_id())
        .collect();
    written.sort();
    assert_eq!(written, (200..200 + u64::from(entries)).collect::<Vec<_>>());
    expect_none(&cqa, Duration::from_millis(20));
    (
        sorted(a_done, a.qpn(), b.qpn(), 0),
        unordered(sorted(b_done.clone(), b.qpn(), a.qpn(), to_a.ah().number())),
        messages(&b_done, dst.as_slice(), (100, 64, 0)),
        full,
    )
}

#[test]
fn posting_sessions_match_the_provider() {
    let provider = sessions(Backend::Provider);
    let direct = sessions(Backend::Direct);
    assert!(provider.0.len() >= 4, "{provider:?}");
    assert_eq!(provider.3, Error::SendQueueFull);
    assert_eq!(direct, provider);
}

#[test]
fn write_all_and_read_all_run_on_direct_qps() {
    // Small RDMA chunks: many more than the queue is deep.
    in_child(
        "write_all_and_read_all_run_on_direct_qps",
        &[("EFA_SIM_PROFILE", "max_rdma_size=4096")],
        transfers,
    );
}

fn transfers() {
    let ctx = open(0);
    if !ctx
        .caps()
        .contains(DeviceCaps::RDMA_WRITE | DeviceCaps::RDMA_READ)
    {
        return;
    }
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(256).backend(Backend::Direct))
        .unwrap();
    let cfg = QpConfig::srd().depth(8, 8).backend(Backend::Direct);
    let a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cq, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let len = 25 * 4096 + 3;
    let pattern: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
    let src = pd.register(pattern.clone(), AccessFlags::empty()).unwrap();
    let target = pd
        .register_remote_write(vec![0u8; len], AccessFlags::REMOTE_READ)
        .unwrap();
    let opts = Transfer::new(Duration::from_secs(20));
    let chunks = a
        .write_all(&cq, &to_b, &src, target.remote(), opts, |c| {
            panic!("no other completion: {c:?}")
        })
        .unwrap();
    assert!(chunks > 8, "more chunks than the queue is deep: {chunks}");
    assert!(target.to_vec() == pattern, "every byte arrived");
    let mut back = pd
        .register(vec![0u8; len], AccessFlags::LOCAL_WRITE)
        .unwrap();
    a.read_all(&cq, &to_b, &mut back, target.remote(), opts, |c| {
        panic!("no other completion: {c:?}")
    })
    .unwrap();
    assert!(back.as_slice() == &pattern[..], "every byte came back");
}

#[test]
fn leases_run_on_direct_qps_and_come_back_after_a_reset() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_ext_cq(CqOptions::new(1024).backend(Backend::Direct))
        .unwrap();
    let cfg = QpConfig::srd().backend(Backend::Direct);
    let a = rts_qp(&pd, &cq, &cfg, QKEY_A);
    let b = rts_qp(&pd, &cq, &cfg, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let pool = BufferPool::new(&pd, 64, 4).unwrap();
    let recv = b.post_recv_lease(pool.take().unwrap()).unwrap();
    let kept = b.post_recv_lease(pool.take().unwrap()).unwrap();
    let mut out = pool.take().unwrap();
    out.as_mut_slice()[..5].copy_from_slice(b"lease");
    let sent = a.post_send_lease(&to_b, SendOp::Send, out, 5).unwrap();
    let got = expect_n(&cq, 2);
    let (mut sent, mut recv) = (Some(sent), Some(recv));
    for c in &got {
        assert!(c.is_ok(), "{c:?}");
        if let Some(t) = recv.take() {
            match t.reclaim(c) {
                Ok(slot) => {
                    assert_eq!(&slot.as_slice()[..5], b"lease");
                    continue;
                }
                Err(t) => recv = Some(t),
            }
        }
        drop(sent.take().unwrap().reclaim(c).unwrap());
    }
    assert!(sent.is_none() && recv.is_none());
    // The receive still posted comes back once its QP is reset.
    let b = b.reset().unwrap();
    drop(kept.reclaim_reset(&b).unwrap());
    assert_eq!(pool.available(), pool.len());
}
