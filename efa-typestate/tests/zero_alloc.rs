//! A counting global allocator shows that steady-state posting and polling allocate
//! nothing: 100,000 iterations of post_recv + post_send + poll through batches, then
//! 20,000 through leases (pool slots moved into the post and handed back by their
//! completions), then 200 runs of 256 RDMA writes through `Qp::post_run`, zero
//! allocations.
//!
//! (The software device is a separate shared object with its own allocator, so only this
//! crate's and the test's allocations are counted; and only those of the thread that
//! posts and polls, so the test harness's own threads, which may allocate at any time,
//! do not count.)

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

const ITERATIONS: u64 = 100_000;
const LEASED_ITERATIONS: u64 = 20_000;

#[test]
fn steady_state_post_and_poll_does_not_allocate() {
    POSTING_THREAD.with(|t| t.set(true));
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let mut src = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();

    let mut received = 0u64;
    // efa-sim (as of this commit) occasionally completes a loopback send with EFA status 13
    // ("remote stopped responding") under sustained traffic on a 2-core machine; that is a
    // software-device artifact, counted and bounded here, not an allocation.
    let mut unresponsive = 0u64;
    let mut run = |count: bool, iterations: u64| {
        COUNTING.store(count, Ordering::SeqCst);
        for i in 0..iterations {
            src.as_mut_slice()[..8].copy_from_slice(&i.to_le_bytes());
            let mut recv = RecvBatch::<1>::new(&b);
            recv.push(i, dst.sge(0, 64).unwrap()).unwrap();
            let mut send = SendBatch::<1>::new(&a);
            send.send(i, &to_b, src.sge(0, 8).unwrap()).unwrap();
            // SAFETY: the buffers are touched again only after both completions are polled.
            unsafe {
                b.post_recv(&recv).unwrap();
                a.post_send(&send).unwrap();
            }
            let (mut sent, mut got_recv) = (false, false);
            while !(sent && got_recv) {
                let mut got = ArrayVec::<Completion, 8>::new();
                if cq.poll(&mut got).unwrap() == 0 {
                    // Give the software device's engine thread the CPU (2-core machines).
                    std::thread::yield_now();
                }
                for c in &got {
                    if c.opcode() == WcOpcode::RECV {
                        assert!(c.is_ok(), "iteration {i}: {c:?}");
                        let v = u64::from_le_bytes(dst.as_slice()[..8].try_into().unwrap());
                        assert!(v <= i, "iteration {i}: payload {v} from the future");
                        received += 1;
                        got_recv = true;
                    } else if c.efa_status() == EfaStatus::LOCAL_UNRESP_REMOTE {
                        unresponsive += 1;
                        sent = true;
                        got_recv = true; // the message may or may not have landed
                    } else {
                        assert!(c.is_ok(), "iteration {i}: {c:?}");
                        sent = true;
                    }
                }
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
    };
    run(false, 100); // warm-up: lazy initialisation (symbol resolution, thread locals)
    run(true, ITERATIONS);
    let allocs = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in {ITERATIONS} post+poll iterations"
    );

    // The safe form: receives kept posted as pool-slot leases, each send a leased slot.
    const RECVS: usize = 8;
    let pool = BufferPool::new(&pd, 64, 2 * RECVS).unwrap();
    let mut posted = ArrayVec::<Posted<Slot<&BufferPool<_>>>, RECVS>::new();
    let mut lease_received = 0u64;
    let mut run_leased = |count: bool, iterations: u64| {
        COUNTING.store(count, Ordering::SeqCst);
        for i in 0..iterations {
            while !posted.is_full() {
                let slot = pool.take().expect("a free slot for a receive");
                posted.push(b.post_recv_lease(slot).unwrap());
            }
            let mut out = pool.take().expect("a free slot for the send");
            out.as_mut_slice()[..8].copy_from_slice(&i.to_le_bytes());
            let mut tx = Some(a.post_send_lease(&to_b, SendOp::Send, out, 8).unwrap());
            let mut got_recv = false;
            while tx.is_some() || !got_recv {
                let mut got = ArrayVec::<Completion, 8>::new();
                if cq.poll(&mut got).unwrap() == 0 {
                    std::thread::yield_now();
                }
                for c in &got {
                    if let Some(at) = posted.iter().position(|t| t.matches(c)) {
                        let slot = posted.swap_remove(at).reclaim(c).unwrap();
                        assert!(c.is_ok(), "iteration {i}: {c:?}");
                        let v = u64::from_le_bytes(slot.as_slice()[..8].try_into().unwrap());
                        assert!(v <= i, "iteration {i}: payload {v} from the future");
                        lease_received += 1;
                        got_recv = true;
                    } else if let Some(t) = tx.take() {
                        let slot = t.reclaim(c).expect("the send's own completion");
                        drop(slot);
                        if c.efa_status() == EfaStatus::LOCAL_UNRESP_REMOTE {
                            unresponsive += 1;
                            got_recv = true; // the message may or may not have landed
                        } else {
                            assert!(c.is_ok(), "iteration {i}: {c:?}");
                        }
                    } else {
                        panic!("iteration {i}: a completion of no lease: {c:?}");
                    }
                }
            }
        }
        COUNTING.store(false, Ordering::SeqCst);
    };
    run_leased(false, 100);
    let before = ALLOCS.load(Ordering::SeqCst);
    run_leased(true, LEASED_ITERATIONS);
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in {LEASED_ITERATIONS} leased post+poll iterations"
    );
    assert!(
        lease_received + unresponsive >= LEASED_ITERATIONS + 100,
        "{lease_received} received through leases"
    );
    assert!(
        received + unresponsive >= ITERATIONS + 100,
        "{received} received, {unresponsive} lost"
    );
    eprintln!("sim artifacts: {unresponsive} sends completed with EFA status 13");
    assert!(
        unresponsive <= 5,
        "{unresponsive} sends reported an unresponsive loopback peer"
    );
    posting_runs_does_not_allocate();
    // The counter does count: one deliberate allocation is seen.
    COUNTING.store(true, Ordering::SeqCst);
    let probe = std::hint::black_box(vec![1u8; 16]);
    COUNTING.store(false, Ordering::SeqCst);
    assert_eq!(
        ALLOCS.load(Ordering::SeqCst),
        1,
        "the counting allocator works"
    );
    drop(probe);
    // Teardown: the receives still posted come back once their QP is reset (dropping
    // their tickets would leak the pool).
    let b = b.reset().unwrap();
    for t in posted.drain(..) {
        drop(t.reclaim_reset(&b).expect("posted on b"));
    }
    assert_eq!(pool.available(), pool.len(), "every slot is back");
}

/// Work requests per run.
const N: usize = 256;

/// Runs of 256 RDMA writes through `Qp::post_run`, posted and polled 200 times after a
/// warm-up, allocate nothing. On libefa's path, the one `post_run` is built for; the
/// direct backend's posting is covered by `run.rs`. (Called by the test above, on its
/// thread: the counter is the process's, so two tests counting at once would mix.)
fn posting_runs_does_not_allocate() {
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
    let before = ALLOCS.load(Ordering::SeqCst);
    rounds(true, 200);
    let allocs = ALLOCS.load(Ordering::SeqCst) - before;
    assert_eq!(allocs, 0, "{allocs} allocations in 200 runs of {N}");
    let _ = &ctx;
}
