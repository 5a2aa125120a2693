//! `two_processes/send64_pingpong`: half a round trip of a 64-byte SEND between this
//! process and a child that answers every receive with a SEND back (both poll their CQs;
//! compare with `two_processes/floor_shm_pingpong`, measured in the same run).

use super::{region, send_wr, side, Kid, Side};
use criterion::{BenchmarkGroup, Throughput};
use efa_sim::model::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Receives kept posted on each side.
const RECVS: u64 = 32;
/// wr_id of the SENDs (receives use their slot number).
const SEND_ID: u64 = 1 << 63;

fn post_recv(s: &Side, addr: u64, mr: &Mr, slot: u64) {
    let sge = Sge {
        addr: addr + slot * 64,
        length: 64,
        lkey: mr.lkey(),
    };
    s.qp.post_recv(&RecvWr {
        wr_id: slot,
        sges: std::iter::once(sge).collect(),
    })
    .unwrap();
}

/// Sends one 64-byte SEND to `qpn` and waits for the next receive (reposted), and until
/// fewer than [`RECVS`] SENDs are outstanding; returns how many are.
fn exchange(s: &Side, ah: &Arc<Ah>, qpn: u32, addr: u64, mr: &Mr, mut outstanding: u64) -> u64 {
    let sge = Sge {
        addr: addr + RECVS * 64,
        length: 64,
        lkey: mr.lkey(),
    };
    s.qp.post_send_batch(&[send_wr(ah, qpn, SEND_ID, SendOp::Send, sge, None)])
        .unwrap();
    outstanding += 1;
    let mut answered = false;
    while !answered || outstanding >= RECVS {
        let Some(c) = s.cq.take() else {
            core::hint::spin_loop();
            continue;
        };
        assert_eq!(c.status, 0, "{c:?}");
        if c.kind == CompletionKind::Recv {
            post_recv(s, addr, mr, c.wr_id);
            answered = true;
        } else {
            outstanding -= 1;
        }
    }
    outstanding
}

/// The child: answers every receive with a SEND to EFA_SIM_BENCH_PEER until stdin closes.
pub fn echo_child() {
    let dev = super::dev0();
    let s = side(&dev, 64);
    let ah = s.pd.create_ah(&dev.gid).unwrap();
    let (addr, mr) = region(&s.pd, 4096);
    for slot in 0..RECVS {
        post_recv(&s, addr, &mr, slot);
    }
    let peer: u32 = std::env::var("EFA_SIM_BENCH_PEER")
        .unwrap()
        .parse()
        .unwrap();
    println!("READY {} {} {}", s.qp.qpn(), addr, mr.rkey());
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        st.store(true, Ordering::Relaxed);
    });
    let sge = Sge {
        addr: addr + RECVS * 64,
        length: 64,
        lkey: mr.lkey(),
    };
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = s.cq.take() else {
            core::hint::spin_loop();
            continue;
        };
        if c.kind == CompletionKind::Recv {
            post_recv(&s, addr, &mr, c.wr_id);
            s.qp.post_send_batch(&[send_wr(&ah, peer, SEND_ID, SendOp::Send, sge, None)])
                .unwrap();
        }
    }
}

/// `two_processes/send64_pingpong` (time per iteration: half a round trip).
pub fn send64_pingpong(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let dev = super::dev0();
    let s = side(&dev, 64);
    let ah = s.pd.create_ah(&dev.gid).unwrap();
    let (addr, mr) = region(&s.pd, 4096);
    for slot in 0..RECVS {
        post_recv(&s, addr, &mr, slot);
    }
    let kid = Kid::spawn_with("echo", &[("EFA_SIM_BENCH_PEER", s.qp.qpn().to_string())]);
    let mut outstanding = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("send64_pingpong", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                outstanding = exchange(&s, &ah, kid.qpn, addr, &mr, outstanding);
            }
            // Two one-way trips per iteration.
            t.elapsed() / 2
        })
    });
    drop(kid);
}
