//! Each data-path call of the safe API next to its raw-C equivalent, on the same device,
//! queue pairs and memory, in one run: the difference is what the safe API costs.
//!
//! "raw" is what a C program does with rdma-core's inline helpers: read the provider's
//! function pointer from `ibv_qp_ex`/`ibv_cq_ex` and call it, one `ibv_wr_*` call per field.
//! On efa-sim both sides pay the same device cost, so compare the pairs, not the totals.
//!
//! This is the facade's quick check (`cargo bench --bench post_poll_vs_raw`); the full
//! comparison against real C, case by case, is efa-bench's `vs_c` (`./scripts/bench-vs-c.sh`).
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use efa::sys::verbs::{ibv_cq_ex, ibv_poll_cq_attr, ibv_qp_ex, ibv_qp_to_qp_ex, ibv_sge};
use efa::*;

const N: usize = 16;
const MSG: u64 = 64;

// The C inline helpers, as C compiles them: one indirect call each, no checks. Each
// unwraps a provider pointer the safe API checked non-null once when it created the
// QP (`SendFns::load` in efa-typestate's qp/raw.rs) or the CQ (`ExtCq::load_ops` in
// cq/extended.rs); each SAFETY line below names its own check.
unsafe fn wr_start(q: *mut ibv_qp_ex) {
    // SAFETY: the caller passes the live qp_ex of a QP the safe API created, and its
    // creation (`SendFns::load`) failed unless `wr_start` was non-null, so the unchecked
    // unwrap is on `Some`; the provider's function gets its own qp_ex.
    unsafe { ((*q).wr_start.unwrap_unchecked())(q) }
}
unsafe fn wr_send(q: *mut ibv_qp_ex) {
    // SAFETY: live qp_ex from the safe API with SEND enabled (the SRD default), so
    // `SendFns::load` required `wr_send` to be non-null; the caller is inside wr_start.
    unsafe { ((*q).wr_send.unwrap_unchecked())(q) }
}
unsafe fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut efa::sys::verbs::ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: live qp_ex whose `wr_set_ud_addr` `SendFns::load` checked non-null; the
    // caller passes a live AH (`to_b`, alive for the whole bench) right after a wr_send.
    unsafe { ((*q).wr_set_ud_addr.unwrap_unchecked())(q, ah, qpn, qkey) }
}
unsafe fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, len: u32) {
    // SAFETY: live qp_ex whose `wr_set_sge` `SendFns::load` checked non-null; the caller
    // passes the lkey/iova/length of a registered MR that outlives the send.
    unsafe { ((*q).wr_set_sge.unwrap_unchecked())(q, lkey, addr, len) }
}
unsafe fn wr_complete(q: *mut ibv_qp_ex) -> i32 {
    // SAFETY: live qp_ex whose `wr_complete` `SendFns::load` checked non-null; the caller
    // closes the session it opened with wr_start.
    unsafe { ((*q).wr_complete.unwrap_unchecked())(q) }
}
unsafe fn start_poll(cq: *mut ibv_cq_ex) -> i32 {
    let mut attr = ibv_poll_cq_attr { comp_mask: 0 };
    // SAFETY: the caller passes the live cq_ex of an `ExtCq`, whose creation
    // (`load_ops`) failed unless `start_poll` was non-null; `attr` is a valid, writable
    // ibv_poll_cq_attr on this stack frame with comp_mask 0 as the verb requires.
    unsafe { ((*cq).start_poll.unwrap_unchecked())(cq, &mut attr) }
}
unsafe fn next_poll(cq: *mut ibv_cq_ex) -> i32 {
    // SAFETY: live cq_ex of an `ExtCq` whose `next_poll` `load_ops` checked non-null; the
    // caller is inside a poll session opened by a successful start_poll.
    unsafe { ((*cq).next_poll.unwrap_unchecked())(cq) }
}
unsafe fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: live cq_ex of an `ExtCq` whose `end_poll` `load_ops` checked non-null; the
    // caller closes the session its successful start_poll opened.
    unsafe { ((*cq).end_poll.unwrap_unchecked())(cq) }
}

/// Raw equivalent of draining `n` successful completions, reading what `Completion` holds.
unsafe fn raw_drain(cq: *mut ibv_cq_ex, n: usize) {
    let mut seen = 0;
    while seen < n {
        // SAFETY: forwarded.
        if unsafe { start_poll(cq) } != 0 {
            continue;
        }
        loop {
            // SAFETY: between a successful start/next_poll and end_poll; the CQ was
            // created with the byte-len/src-qp/slid/qp-num flags, so these are filled.
            unsafe {
                assert_eq!((*cq).status, 0);
                // The fields the safe API's Completion carries, read the way C reads them.
                let opcode = ((*cq).read_opcode.unwrap_unchecked())(cq);
                let mut fields = [
                    (*cq).wr_id,
                    opcode as u64,
                    ((*cq).read_qp_num.unwrap_unchecked())(cq) as u64,
                    0,
                    0,
                    0,
                    0,
                ];
                if opcode >= 128 {
                    fields[3] = ((*cq).read_wc_flags.unwrap_unchecked())(cq) as u64;
                    fields[4] = ((*cq).read_byte_len.unwrap_unchecked())(cq) as u64;
                    fields[5] = ((*cq).read_src_qp.unwrap_unchecked())(cq) as u64;
                    fields[6] = ((*cq).read_slid.unwrap_unchecked())(cq) as u64;
                }
                black_box(fields);
            }
            seen += 1;
            // SAFETY: `cq` is live (forwarded from our caller) and the session opened by
            // the successful start_poll above is still open (end_poll comes after the loop).
            if unsafe { next_poll(cq) } != 0 {
                break;
            }
        }
        // SAFETY: the poll session opened above.
        unsafe { end_poll(cq) };
    }
}

fn drain<C: CompletionQueue>(cq: &C, n: usize) {
    let mut seen = 0;
    while seen < n {
        let mut got = ArrayVec::<Completion, 32>::new();
        seen += cq.poll(&mut got).unwrap();
        assert!(got.iter().all(|c| c.is_ok()));
    }
}

fn benches(c: &mut Criterion) {
    let ctx = Context::open_first_efa().expect("an EFA device");
    let fw = ctx.query_device().unwrap();
    assert!(
        efa_sim_select::fw_matches_selection(fw.fw_ver()),
        "unexpected device {}",
        fw.fw_ver()
    );
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let cfg = QpConfig::srd().depth(256, 256);
    let a = pd
        .create_qp(&cq, &cq, &cfg)
        .unwrap()
        .prepare(1, None)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &cfg)
        .unwrap()
        .prepare(2, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd.register(vec![7u8; 4096], AccessFlags::empty()).unwrap();
    let dst = pd
        .register(vec![0u8; N * 256], AccessFlags::LOCAL_WRITE)
        .unwrap();

    // SAFETY: `a` was created with SEND_OPS_FLAGS by the safe API, so the provider
    // filled the pointers used above (the safe API verified them at creation).
    let qpx = unsafe { ibv_qp_to_qp_ex(a.as_ptr()) };
    assert!(!qpx.is_null());
    let cqx = cq.as_cq_ptr() as *mut ibv_cq_ex; // ibv_cq_ex starts with ibv_cq
    let recvs = || {
        let mut r = RecvBatch::<N>::new(&b);
        for i in 0..N as u64 {
            r.push(i, dst.sge(i * 256, 256).unwrap()).unwrap();
        }
        r
    };

    // Each side is measured twice, in the order safe, raw, raw, safe: on a shared 2-core
    // VM one pass of unchanged code can take a third longer than another in the same run,
    // and the side measured first after a change of group paid for it. Compare each
    // side's faster pass (criterion's estimates under target/criterion).
    let (ah, qpn, qkey) = (to_b.ah().as_ptr(), to_b.qpn(), to_b.qkey());
    let sge = ibv_sge {
        addr: src.iova(),
        length: MSG as u32,
        lkey: src.lkey(),
    };
    let mut g = c.benchmark_group("16 x 64 B SEND, one doorbell, + drain 32");
    for (side, pass) in ORDER {
        g.bench_function(pass_name(side, pass), |bench| match side {
            Side::Safe => bench.iter(|| {
                let r = recvs();
                let mut s = SendBatch::<N>::new(&a);
                for i in 0..N as u64 {
                    s.send(i, &to_b, src.sge(0, MSG).unwrap()).unwrap();
                }
                // SAFETY: buffers untouched until every completion is drained.
                unsafe {
                    b.post_recv(&r).unwrap();
                    a.post_send(black_box(&s)).unwrap();
                }
                drain(&cq, 2 * N);
            }),
            Side::Raw => bench.iter(|| {
                let r = recvs();
                // SAFETY: as above; receives go through the same (already measured) path.
                unsafe { b.post_recv(&r).unwrap() };
                // SAFETY: live qp_ex with the pointers filled; src is registered.
                unsafe {
                    wr_start(qpx);
                    for i in 0..N as u64 {
                        (*qpx).wr_id = i;
                        (*qpx).wr_flags = efa::sys::verbs::ibv_send_flags::IBV_SEND_SIGNALED.0;
                        wr_send(qpx);
                        wr_set_ud_addr(qpx, ah, qpn, qkey);
                        wr_set_sge(qpx, black_box(sge).lkey, sge.addr, sge.length);
                    }
                    assert_eq!(wr_complete(qpx), 0);
                    raw_drain(cqx, 2 * N);
                }
            }),
        });
    }
    g.finish();

    let mut g = c.benchmark_group("poll an empty CQ");
    for (side, pass) in ORDER {
        g.bench_function(pass_name(side, pass), |bench| match side {
            // The output is made once, outside the loop, as a polling loop keeps it.
            Side::Safe => {
                let mut got = ArrayVec::<Completion, 16>::new();
                bench.iter(|| black_box(cq.poll(&mut got).unwrap()))
            }
            // SAFETY: live cq_ex; ENOENT leaves it unlocked (no end_poll owed).
            Side::Raw => bench.iter(|| black_box(unsafe { start_poll(cqx) })),
        });
    }
    g.finish();
}

#[derive(Clone, Copy)]
enum Side {
    Safe,
    Raw,
}

/// The order of the passes: each side's mean position is the same.
const ORDER: [(Side, u8); 4] = [
    (Side::Safe, 1),
    (Side::Raw, 1),
    (Side::Raw, 2),
    (Side::Safe, 2),
];

fn pass_name(side: Side, pass: u8) -> String {
    let name = match side {
        Side::Safe => "safe API",
        Side::Raw => "raw C-equivalent",
    };
    if pass == 1 {
        name.to_string()
    } else {
        format!("{name} ({pass})")
    }
}

criterion_group!(name = group; config = Criterion::default().sample_size(30); targets = benches);
criterion_main!(group);
