//! A driver for syscall and instruction counts of the two-process path (load-independent,
//! unlike timings): this process sends `COUNT` 64-byte SENDs to a receiver child (this
//! binary re-executed), `BATCH` per `post_send_batch` with a window of 256, or with
//! `pingpong` bounces `COUNT` SENDs off an echoing child; both sides poll their CQs.
//! `write` / `read` move `COUNT` 1 MiB RDMA writes / reads to / from a child that does
//! not poll (its device thread serves them), 16 outstanding.
//!
//! ```sh
//! cargo build --release -p efa-sim --example xproc_count
//! strace -f -c -o /tmp/sc.txt target/release/examples/xproc_count rate 16 100000
//! valgrind --tool=callgrind --trace-children=yes --toggle-collect='*hot_*' \
//!     target/release/examples/xproc_count rate 1 20000
//! ```
//!
//! Each side prints its device counters (datagrams through the inbox, wake-ups) at the
//! end, so figures can be given per message. The criterion benches
//! `two_processes/send64_*` in `benches/sim.rs` time the same work.

use efa_sim::model::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

const QKEY: u32 = 0x1234;
const SIGNALED: u32 = 2;
const ALL: u32 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE;
const RECVS: u64 = 1024;
const MIB: usize = 1 << 20;
const WINDOW: u64 = 256;

struct Side {
    pd: Arc<Pd>,
    cq: Arc<Cq>,
    qp: Arc<Qp>,
    addr: u64,
    mr: Arc<Mr>,
}

fn side() -> Side {
    let dev = Sim::get().devices()[0].clone();
    let pd = dev.alloc_pd().expect("pd");
    let (cq, _) = dev.create_cq(4096, CqOptions::default()).expect("cq");
    let init = QpInit {
        qp_type: QpType::Srd,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        caps: QpCaps {
            max_send_wr: 1024,
            max_recv_wr: 1024,
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
    let mem: &'static mut [u8] = Box::leak(vec![0x5au8; 2 * MIB].into_boxed_slice());
    let addr = mem.as_mut_ptr() as u64;
    // SAFETY: leaked memory stays valid for the rest of the process.
    let mr = unsafe { pd.reg_mr(addr as usize, mem.len(), addr, ALL) }.expect("mr");
    Side {
        pd,
        cq,
        qp,
        addr,
        mr,
    }
}

impl Side {
    fn post_recv(&self, slot: u64) {
        let sge = Sge {
            addr: self.addr + (slot % RECVS) * 64,
            length: 64,
            lkey: self.mr.lkey(),
        };
        self.qp
            .post_recv(&RecvWr {
                wr_id: slot,
                sges: std::iter::once(sge).collect(),
            })
            .expect("post_recv");
    }

    fn send_wr(&self, ah: &Arc<Ah>, qpn: u32, i: u64) -> SendWr {
        SendWr {
            wr_id: i,
            op: SendOp::Send,
            send_flags: SIGNALED,
            imm_be: 0,
            ah: ah.clone(),
            remote_qpn: qpn,
            remote_qkey: QKEY,
            payload: Payload::Sges(
                std::iter::once(Sge {
                    addr: self.addr + 64 * 1024 + (i % 64) * 64,
                    length: 64,
                    lkey: self.mr.lkey(),
                })
                .collect(),
            ),
            remote: None,
        }
    }

    fn counters(&self, who: &str) {
        let st = Sim::get().devices()[0].stats();
        eprintln!(
            "{who}: shm_sent={} shm_received={} wakeups={} polled={} retransmits={} duplicates={} \
             rnr_naks={} stale={} shm_drops={} process_vm={} shm_garbage={} malformed={}",
            st.shm_sent,
            st.shm_received,
            st.wakeups,
            st.polled_progress,
            st.retransmits,
            st.duplicates,
            st.rnr_naks,
            st.stale,
            st.shm_drops,
            st.process_vm,
            st.shm_garbage,
            st.malformed
        );
    }
}

fn main() {
    if let Ok(role) = std::env::var("XPROC_CHILD") {
        return child(&role);
    }
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "rate".into());
    let batch: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    assert!((1..=64).contains(&batch), "BATCH must be 1..=64");
    let s = side();
    let ah = s.pd.create_ah(&Sim::get().devices()[0].gid).expect("ah");
    for slot in 0..RECVS {
        s.post_recv(slot);
    }
    let role = match mode.as_str() {
        "pingpong" => "echo",
        "write" | "read" => "target",
        _ => "recv",
    };
    let mut kid = Command::new(std::env::current_exe().expect("exe"))
        .env("XPROC_CHILD", role)
        .env("XPROC_PEER", s.qp.qpn().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(kid.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("READY");
    let ready: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().expect("READY qpn addr rkey"))
        .collect();
    let qpn = ready[0] as u32;
    match mode.as_str() {
        "pingpong" => hot_pingpong(&s, &ah, qpn, count),
        "write" | "read" => {
            let op = if mode == "write" {
                SendOp::RdmaWrite
            } else {
                SendOp::RdmaRead
            };
            hot_rdma(&s, &ah, qpn, (ready[1], ready[2] as u32), op, count)
        }
        _ => hot_rate(&s, &ah, qpn, count, batch),
    }
    s.counters("sender");
    drop(kid.stdin.take());
    let _ = kid.wait();
}

/// Streams `n` SENDs, `batch` per post, window [`WINDOW`]; waits for every completion.
#[inline(never)]
fn hot_rate(s: &Side, ah: &Arc<Ah>, qpn: u32, n: u64, batch: u64) {
    let (mut posted, mut done) = (0u64, 0u64);
    let mut staged = Vec::with_capacity(batch as usize);
    while done < n {
        while posted < n && posted - done + batch.min(n - posted) <= WINDOW {
            staged.clear();
            for i in posted..posted + batch.min(n - posted) {
                staged.push(s.send_wr(ah, qpn, i));
            }
            s.qp.post_send_batch(&staged).expect("post");
            posted += staged.len() as u64;
        }
        done +=
            s.cq.poll(WINDOW as usize, |c| assert_eq!(c.status, 0, "{c:?}")) as u64;
    }
}

/// Moves `n` 1 MiB RDMA `op`s to / from `remote`, 16 outstanding.
#[inline(never)]
fn hot_rdma(s: &Side, ah: &Arc<Ah>, qpn: u32, remote: (u64, u32), op: SendOp, n: u64) {
    let (mut posted, mut done) = (0u64, 0u64);
    while done < n {
        while posted < n && posted - done < 16 {
            let wr = SendWr {
                wr_id: posted,
                op,
                send_flags: SIGNALED,
                imm_be: 0,
                ah: ah.clone(),
                remote_qpn: qpn,
                remote_qkey: QKEY,
                payload: Payload::Sges(
                    std::iter::once(Sge {
                        addr: s.addr,
                        length: MIB as u32,
                        lkey: s.mr.lkey(),
                    })
                    .collect(),
                ),
                remote: Some(remote),
            };
            s.qp.post_send_batch(&[wr]).expect("post");
            posted += 1;
        }
        done +=
            s.cq.poll(WINDOW as usize, |c| assert_eq!(c.status, 0, "{c:?}")) as u64;
    }
}

/// Sends one SEND at a time and waits for the echo (receives reposted), `n` times.
#[inline(never)]
fn hot_pingpong(s: &Side, ah: &Arc<Ah>, qpn: u32, n: u64) {
    let mut outstanding = 0u64;
    for i in 0..n {
        s.qp.post_send_batch(&[s.send_wr(ah, qpn, 1 << 40 | i)])
            .expect("post");
        outstanding += 1;
        let mut answered = false;
        while !answered || outstanding >= 32 {
            let Some(c) = s.cq.take() else { continue };
            assert_eq!(c.status, 0, "{c:?}");
            if c.kind == CompletionKind::Recv {
                s.post_recv(c.wr_id);
                answered = true;
            } else {
                outstanding -= 1;
            }
        }
    }
}

fn child(role: &str) {
    let s = side();
    let ah = s.pd.create_ah(&Sim::get().devices()[0].gid).expect("ah");
    for slot in 0..RECVS {
        s.post_recv(slot);
    }
    let peer: u32 = std::env::var("XPROC_PEER")
        .expect("peer")
        .parse()
        .expect("peer");
    println!("READY {} {} {}", s.qp.qpn(), s.addr, s.mr.rkey());
    std::io::stdout().flush().expect("flush");
    if role == "target" {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        return s.counters(role);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        st.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    hot_child(&s, &ah, peer, role == "echo", &stop);
    s.counters(role);
}

/// Reposts every receive (and answers it with a SEND when echoing) until stopped.
#[inline(never)]
fn hot_child(s: &Side, ah: &Arc<Ah>, peer: u32, echo: bool, stop: &std::sync::atomic::AtomicBool) {
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let Some(c) = s.cq.take() else { continue };
        if c.kind == CompletionKind::Recv {
            s.post_recv(c.wr_id);
            if echo {
                i += 1;
                s.qp.post_send_batch(&[s.send_wr(ah, peer, 1 << 40 | i)])
                    .expect("post");
            }
        }
    }
}
