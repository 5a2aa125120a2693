//! Multi-rail transfers (`Rails::write_all`, `RailNotices`) in one process on efa-sim with
//! 4 devices (in a child process with `EFA_SIM_DEVICES=4`): every byte checked, the
//! target told once, each rail's queue depth respected, both backends, a rail killed
//! mid-transfer named in the error, a timeout and a panicking callback with chunks in
//! flight, no allocation. Between two processes: `rail_processes.rs`.
// RailError carries the per-rail tallies inline (no allocation on any path).
#![allow(clippy::result_large_err)]

mod common;
use std::time::{Duration, Instant};

use common::rails::*;
use common::*;
use efa_typestate::*;

/// Counts the allocations of the thread that sets `COUNTING_HERE` (the transfers').
struct Counting;
static ALLOCS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
thread_local! {
    static COUNTING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        if COUNTING_HERE.with(|c| c.get()) {
            ALLOCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: forwarded contract.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns its result with the allocations this thread made meanwhile.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCS.load(std::sync::atomic::Ordering::Relaxed);
    COUNTING_HERE.with(|c| c.set(true));
    let out = f();
    COUNTING_HERE.with(|c| c.set(false));
    (
        out,
        ALLOCS.load(std::sync::atomic::Ordering::Relaxed) - before,
    )
}

fn four_rails_move_every_byte(backend: Backend) {
    const LEN: usize = 4 * 1024 * 1024 + 12345; // 65 chunks of 64 KiB, the last one short
    rails!(backend, QpConfig::srd().depth(8, 8), LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
    notices!(qb, cqb, nmrs => notices);
    assert!(
        qa[0].limits().max_send_wr() < 65 / 4,
        "queues shallower than each rail's share"
    );
    let opts = RailTransfer::new(7, Duration::from_secs(20)).chunk_size(64 << 10);
    let (report, allocated) = allocations(|| {
        rails.write_all(&srcs, &remotes, opts, |r, c| {
            panic!("rail {r}: unexpected {c:?}")
        })
    });
    assert_eq!(allocated, 0, "the transfer allocates nothing");
    let report = report.unwrap();
    assert_eq!(
        (report.id, report.chunks, report.bytes),
        (7, 65, LEN as u64)
    );
    assert_eq!(report.notices, RAILS as u32);
    let sum: u64 = report.rails.iter().map(|t| t.bytes).sum();
    assert_eq!(sum, LEN as u64, "{report:?}");
    assert!(
        report.rails.iter().all(|t| t.chunks >= 1),
        "each rail carried its notice"
    );
    assert_eq!(dst.read(), src.read(), "every byte arrived");

    // The target learns it once, from the four notices.
    let (landed, allocated) =
        allocations(|| notices.wait(7, Duration::from_secs(10), |r, c| panic!("rail {r}: {c:?}")));
    assert_eq!(allocated, 0, "counting notices allocates nothing");
    let landed = landed.unwrap();
    assert_eq!(landed, Landed { id: 7, notices: 4 });
    let again = notices
        .wait(7, Duration::from_millis(50), |_, _| {})
        .unwrap_err();
    assert_eq!(again.error, Error::Timeout);

    // A second transfer over the same rails (the receives were reposted), short: fewer
    // chunks than rails, so fewer notices.
    let opts = RailTransfer::new(8, Duration::from_secs(20)).chunk_size(1 << 20);
    let short: Vec<RemoteBuffer> = remotes
        .iter()
        .map(|r| r.slice(0, 2 << 20).unwrap())
        .collect();
    let report = rails.write_all(&srcs, &short, opts, |_, _| {}).unwrap();
    assert_eq!((report.chunks, report.notices), (2, 2));
    let landed = notices.wait(8, Duration::from_secs(10), |_, _| {}).unwrap();
    assert_eq!(landed.notices, 2);
    drop(dst_mrs);
}

#[test]
fn four_rails_move_every_byte_and_the_target_learns_once() {
    in_child(
        "four_rails_move_every_byte_and_the_target_learns_once",
        &[DEVICES],
        || four_rails_move_every_byte(Backend::Auto),
    );
}

#[test]
fn four_rails_through_the_provider_backend() {
    in_child(
        "four_rails_through_the_provider_backend",
        &[DEVICES],
        || four_rails_move_every_byte(Backend::Provider),
    );
}

#[test]
fn host_memory_registered_on_every_rail_with_rail_mr() {
    in_child(
        "host_memory_registered_on_every_rail_with_rail_mr",
        &[DEVICES],
        || {
            rails!(Backend::Auto, QpConfig::srd(), 4096 => pds, qa, qb, cqb, nmrs, shared_src, shared_dst, dst_mrs, rails, srcs, remotes);
            let _ = (&qa, shared_src, shared_dst, &dst_mrs, &srcs, &remotes);
            notices!(qb, cqb, nmrs => notices);
            let len = (3 << 20) + 77;
            let src = RailMr::new(pds.iter(), pattern(len, 9), AccessFlags::empty()).unwrap();
            let dst =
                RailMr::new_remote_write(pds.iter(), vec![0u8; len], AccessFlags::empty()).unwrap();
            assert_eq!((src.rails(), dst.rails(), dst.len()), (4, 4, len as u64));
            let keys: Vec<u32> = (0..4).map(|i| dst.rail(i).unwrap().rkey()).collect();
            assert!(dst
                .remotes()
                .iter()
                .zip(&keys)
                .all(|(r, k)| r.rkey() == *k && r.len() == len as u64));
            let opts = RailTransfer::new(11, Duration::from_secs(20)).chunk_size(256 << 10);
            let report = rails
                .write_all(&src.regions(), &dst.remotes(), opts, |r, c| {
                    panic!("rail {r}: {c:?}")
                })
                .unwrap();
            assert_eq!((report.bytes, report.notices), (len as u64, 4));
            let landed = notices
                .wait(11, Duration::from_secs(10), |_, _| {})
                .unwrap();
            assert_eq!(landed.notices, 4);
            assert!(dst.to_vec() == src.as_slice(), "every byte arrived");

            // Refused as a single Mr would refuse them, or for the rail count.
            let err = |r: Result<RailMr<_, Vec<u8>>>| r.err().unwrap();
            assert_eq!(
                err(RailMr::new(
                    pds.iter(),
                    vec![0u8; 8],
                    AccessFlags::REMOTE_WRITE
                )),
                Error::Invalid(InvalidInput::RemoteWriteOnLocalMr)
            );
            assert_eq!(
                err(RailMr::new(
                    pds.iter().take(0),
                    vec![0u8; 8],
                    AccessFlags::empty()
                )),
                Error::Invalid(InvalidInput::RailCount { count: 0, max: 32 })
            );
            let mut borrowed = [0u8; 8];
            assert_eq!(
                RailMr::new_remote_write(pds.iter(), &mut borrowed[..], AccessFlags::empty())
                    .err()
                    .unwrap(),
                Error::Invalid(InvalidInput::RemoteAccessNeedsOwnedMemory)
            );
        },
    );
}

#[test]
fn a_rail_killed_mid_transfer_is_named_with_what_landed() {
    in_child(
        "a_rail_killed_mid_transfer_is_named_with_what_landed",
        &[DEVICES],
        || {
            const LEN: usize = 64 << 20;
            rails!(Backend::Auto, QpConfig::srd(), LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
            let _ = (&qa, &cqb, &nmrs);
            // The target's QP of rail 2 goes away once the first bytes landed.
            let victim = qb.remove(2);
            let watched = dst;
            let timeout = Duration::from_secs(20);
            let started = Instant::now();
            let err = std::thread::scope(|s| {
                s.spawn(move || {
                    while Instant::now() - started < timeout {
                        // SAFETY: a racy probe of one byte of leaked memory the device
                        // writes; read_volatile, never through a reference.
                        let first = unsafe { std::ptr::read_volatile(watched.addr as *const u8) };
                        if first != 0 {
                            break;
                        }
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    drop(victim);
                });
                let opts = RailTransfer::new(9, timeout).chunk_size(64 << 10);
                rails
                    .write_all(&srcs, &remotes, opts, |_, _| {})
                    .unwrap_err()
            });
            assert!(started.elapsed() < timeout, "returned within the timeout");
            assert_eq!(err.rail, Some(2), "{err}");
            assert_eq!(err.device.as_str(), "efa_2");
            assert!(
                matches!(err.error, Error::Completion { .. }),
                "a failed completion: {err}"
            );
            let landed = err.landed_bytes();
            assert!(landed > 0 && landed < LEN as u64, "{err}");
            assert_eq!(err.landed.len(), RAILS);
            // The bytes that landed are the source's; the rest is untouched.
            let (got, want) = (dst.read(), src.read());
            let right = got.iter().zip(&want).filter(|(g, w)| g == w).count();
            assert!(
                right as u64 >= landed,
                "{right} correct bytes, {landed} reported landed"
            );
            drop(dst_mrs);
        },
    );
}

#[test]
fn a_transfer_past_its_timeout_names_a_rail_and_leaves_nothing_in_flight() {
    // Every datagram 20 ms late: chunks are still in flight when the 5 ms timeout passes.
    in_child(
        "a_transfer_past_its_timeout_names_a_rail_and_leaves_nothing_in_flight",
        &[DEVICES, ("EFA_SIM_FAULTS", "delay_us=20000")],
        || {
            const LEN: usize = 4 << 20;
            rails!(Backend::Auto, QpConfig::srd(), LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
            let _ = (&qa, &qb, &cqb, &nmrs, src);
            let opts = RailTransfer::new(3, Duration::from_millis(5)).chunk_size(64 << 10);
            let err = rails
                .write_all(&srcs, &remotes, opts, |_, _| {})
                .unwrap_err();
            assert_eq!(err.error, Error::Timeout, "{err}");
            assert!(
                err.rail.is_some(),
                "the rail with the most in flight is named: {err}"
            );
            assert!(err.landed_bytes() < LEN as u64);
            // Returned with nothing in flight: the target does not change any more.
            let before = dst.read();
            std::thread::sleep(Duration::from_millis(200));
            assert!(
                before == dst.read(),
                "bytes landed after the transfer returned"
            );
            drop(dst_mrs);
        },
    );
}

#[test]
fn in_flight_caps_the_chunks_outstanding_on_each_rail() {
    // Every datagram 10 ms late: a chunk takes at least 20 ms from post to completion, so
    // 64 chunks two at a time on each of 4 rails take at least 8 such turns.
    in_child(
        "in_flight_caps_the_chunks_outstanding_on_each_rail",
        &[DEVICES, ("EFA_SIM_FAULTS", "delay_us=10000")],
        || {
            const LEN: usize = 4 << 20;
            rails!(Backend::Auto, QpConfig::srd(), LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
            notices!(qb, cqb, nmrs => notices);
            let _ = (&pds, &qa);
            let opts = RailTransfer::new(12, Duration::from_secs(20))
                .chunk_size(64 << 10)
                .in_flight(2);
            let started = Instant::now();
            let report = rails.write_all(&srcs, &remotes, opts, |_, _| {}).unwrap();
            let took = started.elapsed();
            assert_eq!(report.chunks, 64);
            assert!(
                took >= Duration::from_millis(160),
                "{took:?}: more than 2 in flight per rail"
            );
            notices
                .wait(12, Duration::from_secs(10), |_, _| {})
                .unwrap();
            assert!(dst.read() == src.read());
            drop(dst_mrs);
        },
    );
}

#[test]
fn a_panic_in_others_unwinds_only_when_nothing_is_in_flight() {
    // Datagrams 20 ms late: chunks are in flight when the callback panics.
    in_child(
        "a_panic_in_others_unwinds_only_when_nothing_is_in_flight",
        &[DEVICES, ("EFA_SIM_FAULTS", "delay_us=20000")],
        || {
            const LEN: usize = 4 << 20;
            rails!(Backend::Auto, QpConfig::srd(), LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
            let _ = (&cqb, src);
            // A SEND to rail 1's initiator QP: its receive completes on that rail's CQ,
            // which the transfer polls, and goes to `others`.
            recv_one(&qa[1], 5, nmrs[1].sge(0, 8).unwrap());
            let to_a1 = pds[1].connect(&qa[1].endpoint()).unwrap();
            let mut hello = SendBatch::<1>::new(&qb[1]);
            hello.send_inline(6, &to_a1, b"hi").unwrap();
            // SAFETY: inline payload, copied during the call.
            unsafe { qb[1].post_send(&hello) }.unwrap();
            // Let it arrive first: the panic comes at the transfer's first poll of rail 1,
            // with every chunk still on its way.
            std::thread::sleep(Duration::from_millis(150));
            let opts = RailTransfer::new(4, Duration::from_secs(20)).chunk_size(64 << 10);
            // No report of the expected panic: printing a backtrace would take longer than
            // the chunks take to land.
            std::panic::set_hook(Box::new(|_| {}));
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rails.write_all(&srcs, &remotes, opts, |r, c| {
                    panic!("others: rail {r}, wr_id {}", c.wr_id())
                })
            }));
            let before = dst.read();
            drop(std::panic::take_hook());
            let payload = unwound.expect_err("the callback's panic continues");
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            assert_eq!(msg, "others: rail 1, wr_id 5");
            // It unwound with nothing in flight: the target did not change any more.
            std::thread::sleep(Duration::from_millis(200));
            assert!(
                before == dst.read(),
                "bytes landed after the transfer unwound"
            );
            drop(dst_mrs);
        },
    );
}

#[test]
fn bad_rail_lists_are_refused_before_anything_is_posted() {
    in_child(
        "bad_rail_lists_are_refused_before_anything_is_posted",
        &[DEVICES],
        || {
            rails!(Backend::Auto, QpConfig::srd(), 1 << 20 => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
            let _ = (&qb, &cqb, &nmrs, src);
            let opts = RailTransfer::new(1, Duration::from_secs(5));
            let err = rails
                .write_all(&srcs[..3], &remotes, opts, |_, _| {})
                .unwrap_err();
            assert_eq!(
                err.error,
                Error::Invalid(InvalidInput::RailListLength { got: 3, rails: 4 })
            );
            let mut short = remotes.clone();
            short[1] = short[1].slice(0, 100).unwrap();
            let err = rails.write_all(&srcs, &short, opts, |_, _| {}).unwrap_err();
            assert_eq!(err.rail, Some(1));
            assert_eq!(err.device.as_str(), "efa_1");
            assert!(matches!(
                err.error,
                Error::Invalid(InvalidInput::RailMismatch { len: 100, rail: 1 })
            ));
            let big = RailTransfer::new(1 << 24, Duration::from_secs(5));
            let err = rails
                .write_all(&srcs, &remotes, big, |_, _| {})
                .unwrap_err();
            assert_eq!(
                err.error,
                Error::Invalid(InvalidInput::TransferIdTooLarge(1 << 24))
            );
            assert!(dst.read().iter().all(|&b| b == 0), "nothing was written");
            // A CQ that is not the QP's send CQ is refused when the rail is added.
            let ctx = open(0);
            let other_cq = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let qp = rts_qp(&pd, &other_cq, &QpConfig::srd().depth(16, 16), QKEY_A);
            let peer = pd.connect(&qa[0].endpoint()).unwrap();
            let foreign = ctx.create_ext_cq(CqOptions::new(64)).unwrap();
            let mut more = Rails::new();
            assert_eq!(
                more.push(&qp, &foreign, &peer),
                Err(Error::Invalid(InvalidInput::NotSendCq))
            );
            drop(dst_mrs);
        },
    );
}
