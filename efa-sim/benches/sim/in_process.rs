//! `in_process/rdma_write64/batch32|batch1`: time per WR of a 64-byte RDMA write between
//! two QPs of this process, posted 32 (or 1) WRs per `post_send_batch` with up to 256
//! outstanding and every completion polled and retired: the provider layer writing
//! WQEs, the device consuming them (same-process direct path), the CQE written and
//! polled. The safe API's cost for the same work is in the `efa` crate's benches.

use super::{pump, region, send_wr, side};
use criterion::{BenchmarkId, Criterion, Throughput};
use efa_sim::model::*;

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
    let mut g = c.benchmark_group("in_process");
    g.throughput(Throughput::Elements(1));
    for batch in [32u64, 1] {
        let id = BenchmarkId::new("rdma_write64", format!("batch{batch}"));
        g.bench_function(id, |bch| {
            bch.iter_custom(|iters| {
                pump(&a, iters, 256, batch, |i| {
                    let off = (i % 64) * 64;
                    let sge = Sge {
                        addr: src + off,
                        length: 64,
                        lkey: src_mr.lkey(),
                    };
                    let remote = Some((dst + off, dst_mr.rkey()));
                    send_wr(&ah, b.qp.qpn(), i, SendOp::RdmaWrite, sge, remote)
                })
            })
        });
    }
    g.finish();
}
