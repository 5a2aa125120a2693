//! efa-sim device-model benchmarks (one criterion run reports everything):
//!
//! * `post_send`: ns per `Qp::post_send_batch` of one 64-byte SEND to a QPN of
//!   this process that does not exist (same-process direct path: the request
//!   is executed and answered, status 9, inside the call; no datagram). The
//!   datagram path's posting cost is inside the `two_processes` numbers;
//! * `poll_empty` / `poll_retire`: ns per `Cq::peek` on an empty CQ, and per
//!   `peek + retire` of a waiting completion;
//! * `in_process/rdma_write64/batch32|batch1`: ns per 64-byte RDMA write between two
//!   QPs of this process, post + poll (`sim/in_process.rs`);
//! * `two_processes/send64_pingpong`: half a round trip of a 64-byte SEND to a child that
//!   answers each one, next to `two_processes/floor_shm_pingpong`, a cache line handed
//!   back and forth through shared memory between two processes (`sim/pingpong.rs`,
//!   `sim/floors.rs`);
//! * `two_processes/send64_msg_rate/batch16` (the headline message rate): 64-byte
//!   SENDs/s to a receiver in a child process, posted 16 WRs per
//!   `post_send_batch` call (as `ibv_wr_start` … `ibv_wr_complete` sessions and
//!   `ibv_post_send` WR lists do), window of 256 outstanding WRs, completions
//!   polled by the sender; `…/batch1` is the same with one WR per call (one
//!   datagram, one shared-memory frame, per message);
//! * `two_processes/rdma_write/1MiB`: 1 MiB RDMA-write bandwidth to a child
//!   process (16 outstanding, a modest send queue: `ib_write_bw` keeps 128);
//!   the responder copies with one `process_vm_readv` per WR, so the kernel's
//!   cross-process copy is its ceiling;
//!   `two_processes/rdma_read/1MiB` is the same for reads; next to both,
//!   `two_processes/floor_process_vm_writev/1MiB` and `…readv/1MiB`: one bare call of
//!   the same size into / out of the child's buffer;
//! * `memcpy/1MiB`: single-core memcpy bandwidth of a cache-resident 1 MiB
//!   buffer, measured in the same run, as the yardstick for the RDMA number
//!   (same transfer size); `memcpy/64MiB`: the same from DRAM, for context.
//!
//! The child is this bench binary re-executed with `EFA_SIM_BENCH_CHILD` set.

#[path = "sim/floors.rs"]
mod floors;
#[path = "sim/in_process.rs"]
mod in_process;
#[path = "sim/pingpong.rs"]
mod pingpong;

use criterion::{BenchmarkId, Criterion, Throughput};
use efa_sim::model::*;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const QKEY: u32 = 0x1234;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;
const SIGNALED: u32 = 2;
const MIB: usize = 1 << 20;
/// RDMA writes kept outstanding in the bandwidth benchmark.
const RDMA_WINDOW: u64 = 16;

struct Side {
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    qp: Arc<Qp>,
}

fn side(dev: &Arc<Device>, depth: u32) -> Side {
    let pd = dev.alloc_pd().unwrap();
    let (cq, _) = dev.create_cq(depth * 2, CqOptions::default()).unwrap();
    let init = QpInit {
        qp_type: QpType::Srd,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        caps: QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
        send_ops_flags: Some(0x1f),
        efa_flags: 0,
        sl: 0,
    };
    let (qp, _) = pd.create_qp(&init).unwrap();
    let m = |mask, state: QpState| ModifyQp {
        mask,
        state: state as u32,
        port_num: 1,
        qkey: QKEY,
        ..Default::default()
    };
    qp.modify(&m(1 | 16 | 32 | 64, QpState::Init)).unwrap();
    qp.modify(&m(1, QpState::Rtr)).unwrap();
    qp.modify(&m(1 | (1 << 16), QpState::Rts)).unwrap();
    Side { pd, cq, qp }
}

/// Registered heap memory, leaked for the life of the process (benchmarks only).
fn region(pd: &Arc<Pd>, len: usize) -> (u64, Arc<Mr>) {
    let mem: &'static mut [u8] = Box::leak(vec![0x5au8; len].into_boxed_slice());
    let addr = mem.as_mut_ptr() as usize;
    // SAFETY: leaked memory is valid for the rest of the process.
    let mr = unsafe { pd.reg_mr(addr, len, addr as u64, ALL) }.unwrap();
    (addr as u64, mr)
}

fn send_wr(
    ah: &Arc<Ah>,
    qpn: u32,
    id: u64,
    op: SendOp,
    sge: Sge,
    remote: Option<(u64, u32)>,
) -> SendWr {
    SendWr {
        wr_id: id,
        op,
        send_flags: SIGNALED,
        imm_be: 0,
        ah: ah.clone(),
        remote_qpn: qpn,
        remote_qkey: QKEY,
        payload: Payload::Sges(std::iter::once(sge).collect()),
        remote,
    }
}

/// 64-byte WRs of `op` to `qpn`, one per 64-byte slot: the i-th reads (or, for a read,
/// fills) slot i of `local` (address, lkey) and, for RDMA, targets slot i of `remote`
/// (address, rkey). Built before a clock starts and posted again and again.
fn slot_wrs(
    ah: &Arc<Ah>,
    qpn: u32,
    op: SendOp,
    slots: u64,
    (local, lkey): (u64, u32),
    remote: Option<(u64, u32)>,
) -> Vec<SendWr> {
    (0..slots)
        .map(|i| {
            let sge = Sge {
                addr: local + i * 64,
                length: 64,
                lkey,
            };
            let remote = remote.map(|(addr, rkey)| (addr + i * 64, rkey));
            send_wr(ah, qpn, i, op, sge, remote)
        })
        .collect()
}

fn dev0() -> Arc<Device> {
    Sim::get().devices()[0].clone()
}

// ---------------------------------------------------------------------------
// Child process roles
// ---------------------------------------------------------------------------

fn child(role: &str) {
    let dev = dev0();
    let s = side(&dev, 1024);
    let _ah = s.pd.create_ah(&dev.gid).unwrap();
    let (addr, mr) = region(&s.pd, MIB);
    match role {
        "recv" => {
            for i in 0..1024u64 {
                let sge = Sge {
                    addr: addr + (i % 64) * 64,
                    length: 64,
                    lkey: mr.lkey(),
                };
                s.qp.post_recv(&RecvWr {
                    wr_id: i,
                    sges: std::iter::once(sge).collect(),
                })
                .unwrap();
            }
            println!("READY {} {} {}", s.qp.qpn(), addr, mr.rkey());
            std::io::stdout().flush().unwrap();
            // Repost every receive until stdin closes.
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let st = stop.clone();
            std::thread::spawn(move || {
                let mut l = String::new();
                let _ = std::io::stdin().read_line(&mut l);
                st.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            let mut ids = arrayvec::ArrayVec::<u64, 32>::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.cq.poll(ids.capacity(), |c| ids.push(c.wr_id));
                if ids.is_empty() {
                    std::thread::yield_now();
                }
                for wr_id in ids.drain(..) {
                    let sge = Sge {
                        addr: addr + (wr_id % 64) * 64,
                        length: 64,
                        lkey: mr.lkey(),
                    };
                    s.qp.post_recv(&RecvWr {
                        wr_id,
                        sges: std::iter::once(sge).collect(),
                    })
                    .unwrap();
                }
            }
        }
        _ => {
            println!("READY {} {} {}", s.qp.qpn(), addr, mr.rkey());
            std::io::stdout().flush().unwrap();
            let mut l = String::new();
            let _ = std::io::stdin().read_line(&mut l);
        }
    }
}

struct Kid {
    child: Child,
    qpn: u32,
    addr: u64,
    rkey: u32,
}

impl Kid {
    fn spawn(role: &str) -> Kid {
        Kid::spawn_with(role, &[])
    }

    /// A child in `role` with more environment; waits for its `READY qpn addr rkey`.
    fn spawn_with(role: &str, env: &[(&str, String)]) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("EFA_SIM_BENCH_CHILD", role)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("READY") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "bench child died");
        }
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        Kid {
            child,
            qpn: v[0] as u32,
            addr: v[1],
            rkey: v[2] as u32,
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Posts `n` WRs, `batch` per `post_send_batch` call, taken in turn from `wrs` (built
/// before the clock starts, as perftest prepares its WRs: building a `SendWr` clones and
/// drops an `Arc<Ah>`, two locked instructions that are the harness's and not the
/// device's), keeping up to `window` outstanding; waits for all completions.
fn pump(s: &Side, n: u64, window: u64, batch: u64, wrs: &[SendWr]) -> Duration {
    assert!(batch as usize <= wrs.len());
    let t = Instant::now();
    let (mut posted, mut done, mut at) = (0u64, 0u64, 0usize);
    while done < n {
        while posted < n && posted - done + batch.min(n - posted) <= window {
            let k = (batch.min(n - posted) as usize).min(wrs.len() - at);
            s.qp.post_send_batch(&wrs[at..at + k]).unwrap();
            posted += k as u64;
            at = (at + k) % wrs.len();
        }
        let got =
            s.cq.poll(window as usize, |c| assert_eq!(c.status, 0, "{c:?}"));
        done += got as u64;
        if got == 0 {
            std::thread::yield_now();
        }
    }
    t.elapsed()
}

// ---------------------------------------------------------------------------
// Benchmarks
// ---------------------------------------------------------------------------

fn bench_post_poll(c: &mut Criterion) {
    let dev = dev0();
    let a = side(&dev, 4096);
    let b = side(&dev, 4096);
    let ah = a.pd.create_ah(&dev.gid).unwrap();
    let (addr, mr) = region(&a.pd, 4096);
    // Sends go to a QPN nobody holds (answered with status 9), so this measures
    // the post path alone; the QP is reset between batches (not timed).
    let wr = send_wr(
        &ah,
        b.qp.qpn() | 0x1ff,
        0,
        SendOp::Send,
        Sge {
            addr,
            length: 64,
            lkey: mr.lkey(),
        },
        None,
    );
    c.bench_function("post_send", |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(2048);
                let t = Instant::now();
                for _ in 0..n {
                    a.qp.post_send_batch(black_box(std::slice::from_ref(&wr)))
                        .unwrap();
                }
                total += t.elapsed();
                left -= n;
                // Reset the QP to drop the outstanding sends (not timed).
                let m = |mask, state: QpState| ModifyQp {
                    mask,
                    state: state as u32,
                    port_num: 1,
                    qkey: QKEY,
                    ..Default::default()
                };
                a.qp.modify(&m(1, QpState::Reset)).unwrap();
                a.qp.modify(&m(1 | 16 | 32 | 64, QpState::Init)).unwrap();
                a.qp.modify(&m(1, QpState::Rtr)).unwrap();
                a.qp.modify(&m(1 | (1 << 16), QpState::Rts)).unwrap();
            }
            total
        })
    });
    c.bench_function("poll_empty", |bch| bch.iter(|| black_box(b.cq.peek())));
    // Waiting completions: fill the CQ through ERR flushes of posted receives.
    let (raddr, rmr) = region(&b.pd, 64);
    c.bench_function("poll_retire", |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(2048);
                let m = |mask, state: QpState| ModifyQp {
                    mask,
                    state: state as u32,
                    port_num: 1,
                    qkey: QKEY,
                    ..Default::default()
                };
                b.qp.modify(&m(1, QpState::Reset)).unwrap();
                b.qp.modify(&m(1 | 16 | 32 | 64, QpState::Init)).unwrap();
                for i in 0..n {
                    let sge = Sge {
                        addr: raddr,
                        length: 64,
                        lkey: rmr.lkey(),
                    };
                    b.qp.post_recv(&RecvWr {
                        wr_id: i,
                        sges: std::iter::once(sge).collect(),
                    })
                    .unwrap();
                }
                b.qp.modify(&m(1, QpState::Err)).unwrap();
                let t = Instant::now();
                for _ in 0..n {
                    black_box(b.cq.peek());
                    b.cq.retire();
                }
                total += t.elapsed();
                left -= n;
            }
            total
        })
    });
}

fn bench_two_process(c: &mut Criterion) {
    let dev = dev0();
    let s = side(&dev, 1024);
    let ah = s.pd.create_ah(&dev.gid).unwrap();
    let (addr, mr) = region(&s.pd, 2 * MIB);
    let mut g = c.benchmark_group("two_processes");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    floors::shm_pingpong(&mut g);
    pingpong::send64_pingpong(&mut g);
    {
        let kid = Kid::spawn("recv");
        g.throughput(Throughput::Elements(1));
        let wrs = slot_wrs(&ah, kid.qpn, SendOp::Send, 64, (addr, mr.lkey()), None);
        for batch in [16u64, 1] {
            let id = BenchmarkId::new("send64_msg_rate", format!("batch{batch}"));
            g.bench_function(id, |b| {
                b.iter_custom(|iters| pump(&s, iters, 256, batch, &wrs))
            });
        }
    }
    {
        let kid = Kid::spawn("target");
        floors::process_vm(&mut g, kid.child.id(), addr, kid.addr);
        g.throughput(Throughput::Bytes(MIB as u64));
        for (name, op, local) in [
            ("rdma_write", SendOp::RdmaWrite, addr),
            ("rdma_read", SendOp::RdmaRead, addr + MIB as u64),
        ] {
            let sge = Sge {
                addr: local,
                length: MIB as u32,
                lkey: mr.lkey(),
            };
            let wr = [send_wr(
                &ah,
                kid.qpn,
                0,
                op,
                sge,
                Some((kid.addr, kid.rkey)),
            )];
            g.bench_function(BenchmarkId::new(name, "1MiB"), |b| {
                b.iter_custom(|iters| pump(&s, iters, RDMA_WINDOW, 1, &wr))
            });
        }
    }
    g.finish();
}

fn bench_memcpy(c: &mut Criterion) {
    let src = vec![1u8; MIB];
    let mut dst = vec![0u8; MIB];
    let mut g = c.benchmark_group("memcpy");
    g.throughput(Throughput::Bytes(MIB as u64));
    g.bench_function("1MiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    let big = 64 * MIB;
    let (src, mut dst) = (vec![1u8; big], vec![0u8; big]);
    g.throughput(Throughput::Bytes(big as u64))
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    g.bench_function("64MiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    g.finish();
}

fn main() {
    if let Ok(role) = std::env::var("EFA_SIM_BENCH_CHILD") {
        match role.as_str() {
            "shm_echo" => floors::shm_echo_child(),
            "echo" => pingpong::echo_child(),
            _ => child(&role),
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_post_poll(&mut c);
    in_process::rdma_write64_post_poll(&mut c);
    bench_memcpy(&mut c);
    bench_two_process(&mut c);
    c.final_summary();
}
