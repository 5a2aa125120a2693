//! `in_process/rdma_write64/batch32|batch1`: time per WR of a 64-byte RDMA write between
//! two QPs of this process, posted 32 (or 1) WRs per `post_send_batch` with up to 256
//! outstanding and every completion polled and retired: the provider layer writing
//! WQEs, the device consuming them (same-process direct path), the CQE written and
//! polled. The 64 WRs are built once, before the clock starts, and posted again and
//! again (as `examples/post_poll_count.rs` does), so the time is the device's and not
//! that of building `SendWr` values (an `Arc<Ah>` clone and drop each). The safe API's
//! cost for the same work is in the `efa` crate's benches.

use super::{region, side, slot_wrs};
use criterion::{BenchmarkId, Criterion, Throughput};
use efa_sim::model::*;
use std::time::{Duration, Instant};

/// Distinct WRs (64-byte slots of the 4 KiB regions).
const SLOTS: u64 = 64;
/// Most WRs outstanding.
const WINDOW: u64 = 256;

pub fn rdma_write64_post_poll(c: &mut Criterion) {
    let dev = super::dev0();
    let a = side(&dev, 1024);
    let b = side(&dev, 1024);
    let ah = a.pd.create_ah(&dev.gid).unwrap();
    // The target's PD must know the requester for one-sided operations (an AH to it),
    // as on EFA; without it every write completes with UNKNOWN_PEER.
    let _known = b.pd.create_ah(&dev.gid).unwrap();
    let (src, src_mr) = region(&a.pd, 4096);
    let (dst, dst_mr) = region(&b.pd, 4096);
    let wrs = slot_wrs(
        &ah,
        b.qp.qpn(),
        SendOp::RdmaWrite,
        SLOTS,
        (src, src_mr.lkey()),
        Some((dst, dst_mr.rkey())),
    );
    let mut g = c.benchmark_group("in_process");
    g.throughput(Throughput::Elements(1));
    for batch in [32u64, 1] {
        let id = BenchmarkId::new("rdma_write64", format!("batch{batch}"));
        g.bench_function(id, |bch| {
            bch.iter_custom(|iters| post_poll(&a.qp, &a.cq, &wrs, iters, batch as usize))
        });
    }
    g.finish();
}

/// Posts `n` WRs of `wrs` (cyclically, `batch` per call, at most [`WINDOW`]
/// outstanding) and retires every completion; the time it took.
fn post_poll(qp: &Qp, cq: &Cq, wrs: &[SendWr], n: u64, batch: usize) -> Duration {
    let t = Instant::now();
    let (mut posted, mut done, mut at) = (0u64, 0u64, 0usize);
    while done < n {
        while posted < n && posted - done + batch as u64 <= WINDOW {
            let k = batch.min((n - posted) as usize).min(wrs.len() - at);
            qp.post_send_batch(std::hint::black_box(&wrs[at..at + k]))
                .unwrap();
            posted += k as u64;
            at = (at + k) % wrs.len();
        }
        let got = cq.poll(WINDOW as usize, |c| assert_eq!(c.status, 0, "{c:?}"));
        done += got as u64;
        if got == 0 {
            std::thread::yield_now();
        }
    }
    t.elapsed()
}
