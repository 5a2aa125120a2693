//! A counting global allocator shows that `Qp::post_run` allocates nothing: runs of
//! 256 RDMA writes posted and polled 200 times (after a warm-up), zero allocations.
//! (As in `zero_alloc.rs`, only the posting thread's allocations count, and the
//! software device's own allocator is not this one.) On libefa's path, the one
//! `post_run` is built for; the direct backend's posting is covered by `run.rs` (under
//! the strict profile, sessions of many work requests on a direct QP completed now and
//! then with LOC_QP_OP_ERR, through `post_with` as through `post_run`: efa-sim's
//! `max_batch` rule, since fixed; see `direct_long_sessions.rs`).

mod common;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arrayvec::ArrayVec;
use common::*;
use efa_typestate::*;

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread that posts and polls (const-initialised: no allocation to read).
    static POSTING_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn counted() -> bool {
    COUNTING.load(Ordering::Relaxed) && POSTING_THREAD.with(|t| t.get())
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if counted() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 256;

#[test]
fn posting_runs_does_not_allocate() {
    POSTING_THREAD.with(|t| t.set(true));
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let provider = Backend::Provider;
    let cq = ctx
        .create_ext_cq(CqOptions::new(1024).backend(provider))
        .unwrap();
    let config = QpConfig::srd().backend(provider);
    let mut a = rts_qp(&pd, &cq, &config.depth(N as u32, 16), QKEY_A);
    let b = rts_qp(&pd, &cq, &config, QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd
        .register(vec![7u8; N * 64], AccessFlags::empty())
        .unwrap();
    let target = write_target(&pd, N * 64);
    let offsets: Vec<u64> = (0..N as u64).map(|i| i * 64).collect();
    let lengths = vec![64u32; N];
    let run = RdmaRun::new(RunOp::Write, &src, &to_b, target.remote()).unwrap();
    let entries = RunEntries::new(&offsets, &offsets, &lengths).unwrap();
    let mut rounds = |count: bool, k: usize| {
        COUNTING.store(count, Ordering::SeqCst);
        for _ in 0..k {
            // SAFETY: `src` is never written.
            assert_eq!(unsafe { a.post_run(&run, &entries) }, Ok(N));
            let mut done = 0;
            while done < N {
                let mut got = ArrayVec::<Completion, 64>::new();
                done += cq.poll_until(&mut got, 1, Duration::from_secs(5)).unwrap();
                assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
    };
    rounds(false, 5); // warm-up: lazy initialisation
    rounds(true, 200);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(allocs, 0, "{allocs} allocations in 200 runs of {N}");
    let _ = &ctx;
}
