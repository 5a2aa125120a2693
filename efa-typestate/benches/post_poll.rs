//! Costs of this crate's data path on the selected device (efa-sim unless EFA_SIM=0):
//! building a batch (pure Rust), polling an empty CQ, and a loopback post+poll round trip
//! for one work request and for a batch of 16 (one doorbell).
//!
//! On the software device the round trips measure mostly the device; the batch-building
//! and empty-poll numbers are this crate's own overhead. The software device runs threads
//! of its own in this process, so on a small, busy machine every number here is noisy.

use std::hint::black_box;

use arrayvec::ArrayVec;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use efa_typestate::*;

fn open() -> Context {
    let ctx = Context::open_first_efa().expect("an EFA device (efa-sim)");
    let fw = ctx.query_device().unwrap();
    assert!(
        efa_sim_select::fw_matches_selection(fw.fw_ver()),
        "wrong device: {}",
        fw.fw_ver()
    );
    ctx
}

fn drain<C: CompletionQueue>(cq: &C, n: usize) {
    let mut seen = 0;
    while seen < n {
        let mut got = ArrayVec::<Completion, 32>::new();
        seen += cq.poll(&mut got).unwrap();
        for c in &got {
            assert!(c.is_ok(), "{c:?}");
        }
    }
}

fn no_device(c: &mut Criterion) {
    // Baseline for "build SendBatch<16>": the bare cost of pushing 16 values of the
    // same size as a batch's stored work request (StagedSend) into an ArrayVec,
    // measured before any device (and its threads) exists.
    const WORDS: usize = core::mem::size_of::<StagedSend<'static>>() / 8;
    c.bench_function(
        "ArrayVec push of 16 prebuilt StagedSend-sized values",
        |bench| {
            let v = [0u64; WORDS];
            bench.iter(|| {
                let mut a = ArrayVec::<[u64; WORDS], 16>::new();
                for _ in 0..16 {
                    a.push(black_box(v));
                }
                black_box(a.len())
            })
        },
    );
}

fn benches(c: &mut Criterion) {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(1, None)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(2, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![7u8; 4096], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; 16 * 256], AccessFlags::LOCAL_WRITE)
        .unwrap();

    c.bench_function("build SendBatch<16> of SGE sends", |bench| {
        let sge = src.sge(0, 64).unwrap();
        bench.iter(|| {
            let mut batch = SendBatch::<16>::new(&a);
            for i in 0..16 {
                batch.send(i, &to_b, black_box(sge)).unwrap();
            }
            black_box(batch.len())
        })
    });

    c.bench_function("poll empty extended CQ", |bench| {
        bench.iter(|| {
            let mut got = ArrayVec::<Completion, 16>::new();
            black_box(cq.poll(&mut got).unwrap())
        })
    });

    c.bench_function(
        "loopback send 64 B: post_recv + post_send + poll 2",
        |bench| {
            bench.iter(|| {
                let mut r = RecvBatch::<1>::new(&b);
                r.push(1, dst.sge(0, 256).unwrap()).unwrap();
                let mut s = SendBatch::<1>::new(&a);
                s.send(2, &to_b, src.sge(0, 64).unwrap()).unwrap();
                // SAFETY: buffers untouched until both completions are drained.
                unsafe {
                    b.post_recv(&r).unwrap();
                    a.post_send(&s).unwrap();
                }
                drain(&cq, 2);
            })
        },
    );

    let pool = BufferPool::new(&pd, 256, 4).unwrap();
    c.bench_function(
        "loopback send 64 B through pool-slot leases (safe): post_recv + post_send + poll 2",
        |bench| {
            bench.iter(|| {
                let rx = b.post_recv_lease(pool.take().unwrap()).unwrap();
                let tx = a
                    .post_send_lease(&to_b, SendOp::Send, pool.take().unwrap(), 64)
                    .unwrap();
                let (mut rx, mut tx) = (Some(rx), Some(tx));
                while rx.is_some() || tx.is_some() {
                    let mut got = ArrayVec::<Completion, 2>::new();
                    cq.poll(&mut got).unwrap();
                    for c in &got {
                        assert!(c.is_ok(), "{c:?}");
                        for t in [&mut rx, &mut tx] {
                            if let Some(p) = t.take() {
                                match p.reclaim(c) {
                                    Ok(slot) => drop(black_box(slot)),
                                    Err(p) => *t = Some(p),
                                }
                            }
                        }
                    }
                }
            })
        },
    );

    c.bench_function(
        "loopback batch of 16 sends (one doorbell) + poll 32",
        |bench| {
            bench.iter_batched(
                || (),
                |()| {
                    let mut r = RecvBatch::<16>::new(&b);
                    let mut s = SendBatch::<16>::new(&a);
                    for i in 0..16u64 {
                        r.push(i, dst.sge(i * 256, 256).unwrap()).unwrap();
                        s.send(i, &to_b, src.sge(0, 64).unwrap()).unwrap();
                    }
                    // SAFETY: buffers untouched until all completions are drained.
                    unsafe {
                        b.post_recv(&r).unwrap();
                        a.post_send(&s).unwrap();
                    }
                    drain(&cq, 32);
                },
                BatchSize::SmallInput,
            )
        },
    );
}

criterion_group!(name = group; config = Criterion::default().sample_size(20); targets = no_device, benches);
criterion_main!(group);
