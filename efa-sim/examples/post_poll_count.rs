//! A driver for instruction counts of the device's in-process hot path (load-independent,
//! unlike timings): `ITERS` rounds of posting `BATCH` 64-byte RDMA writes between two QPs
//! of one device and polling their completions, inside `hot_loop`, so that
//!
//! ```sh
//! cargo build --release -p efa-sim --example post_poll_count
//! valgrind --tool=callgrind --toggle-collect='*hot_loop*' \
//!     target/release/examples/post_poll_count 32 2000
//! ```
//!
//! counts only that loop (divide by `BATCH × ITERS` for instructions per WR). The
//! criterion bench `in_process/rdma_write64` in `benches/sim.rs` times the same work.

use efa_sim::model::*;
use std::sync::Arc;

const QKEY: u32 = 0x1234;
const SIGNALED: u32 = 2;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;

fn main() {
    let mut args = std::env::args().skip(1);
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let iters: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    assert!((1..=64).contains(&batch), "BATCH must be 1..=64");
    let dev = Sim::get().devices()[0].clone();
    let pd = dev.alloc_pd().expect("pd");
    let (cq, _) = dev.create_cq(256, CqOptions::default()).expect("cq");
    let qp = |cq: &Arc<Cq>| {
        let init = QpInit {
            qp_type: QpType::Srd,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            caps: QpCaps {
                max_send_wr: 128,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            send_ops_flags: Some(0x1f),
            efa_flags: 0,
            sl: 0,
        };
        let (qp, _) = pd.create_qp(&init).expect("qp");
        for (mask, state) in [
            (1 | 16 | 32 | 64, QpState::Init),
            (1, QpState::Rtr),
            (1 | (1 << 16), QpState::Rts),
        ] {
            qp.modify(&ModifyQp {
                mask,
                state: state as u32,
                port_num: 1,
                qkey: QKEY,
                ..Default::default()
            })
            .expect("modify");
        }
        qp
    };
    let (a, b) = (qp(&cq), qp(&cq));
    let ah = pd.create_ah(&dev.gid).expect("ah");
    let mut mem = vec![7u8; 8192].into_boxed_slice();
    let base = mem.as_mut_ptr() as usize;
    // SAFETY: `mem` outlives the MR (deregistered below before it is dropped).
    let mr = unsafe { pd.reg_mr(base, mem.len(), base as u64, ALL) }.expect("mr");
    let wrs: Vec<SendWr> = (0..batch as u64)
        .map(|i| SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite,
            send_flags: SIGNALED,
            imm_be: 0,
            ah: ah.clone(),
            remote_qpn: b.qpn(),
            remote_qkey: QKEY,
            payload: Payload::Sges(
                std::iter::once(Sge {
                    addr: base as u64 + i * 64,
                    length: 64,
                    lkey: mr.lkey(),
                })
                .collect(),
            ),
            remote: Some((base as u64 + 4096 + i * 64, mr.rkey())),
        })
        .collect();
    // Warm up (first-use paths: AH resolution, lazily built tables).
    hot_loop(&a, &cq, &wrs, 10);
    let done = hot_loop(&a, &cq, &wrs, iters);
    assert_eq!(done, iters * batch as u64);
    assert_eq!(&mem[4096..4096 + 64], &mem[..64]);
    mr.dereg().expect("dereg");
    println!("{} WRs of 64 B RDMA write, {batch} per post", done);
}

/// Posts `wrs` and polls until all completed, `iters` times; returns completions seen.
#[inline(never)]
fn hot_loop(qp: &Qp, cq: &Cq, wrs: &[SendWr], iters: u64) -> u64 {
    let mut seen = 0u64;
    for _ in 0..iters {
        qp.post_send_batch(std::hint::black_box(wrs)).expect("post");
        let mut left = wrs.len();
        while left > 0 {
            let got = cq.poll(left, |c| assert_eq!(c.status, 0, "{c:?}"));
            left -= got;
            seen += got as u64;
        }
    }
    seen
}
