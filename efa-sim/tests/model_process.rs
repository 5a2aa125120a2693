//! The model between processes: SEND/RECV and RDMA across process
//! boundaries, 100,000 checksummed messages under reorder + loss + dup,
//! a killed peer, and two network namespaces.
//!
//! Children are this test binary re-executed with `--ignored --exact
//! child_entry` and `EFA_SIM_CHILD_ROLE` set. They talk to the parent over
//! stdout lines (`READY ...`, `DONE ...`) and stdin.
//!
//! The namespace test needs root (or CAP_NET_ADMIN) and `ip` (iproute2); it
//! fails (does not skip) where namespaces cannot be created.

#[path = "model_helpers.rs"]
mod helpers;
#[path = "process_helpers.rs"]
mod process;
use efa_sim::model::*;
use helpers::*;
use process::*;
use std::io::{BufRead, Write};
use std::process::Command;
use std::time::{Duration, Instant};

fn peer_gid() -> Gid {
    let ip: std::net::Ipv4Addr = std::env::var("PEER_ADDR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(std::net::Ipv4Addr::LOCALHOST);
    gid_for(ip, 0)
}

#[test]
#[ignore = "child process entry point, run by the other tests of this file"]
fn child_entry() {
    let Ok(role) = std::env::var("EFA_SIM_CHILD_ROLE") else {
        // Not a test of its own: only meaningful as a child of the tests below.
        eprintln!("child_entry: EFA_SIM_CHILD_ROLE unset, nothing to do");
        return;
    };
    match role.as_str() {
        "recv" => child_recv(true),
        "recv_exit" => child_recv(false),
        "send" => child_send(),
        "target" => child_target(),
        "victim" => child_victim(),
        "rdma" => child_rdma(),
        other => panic!("unknown role {other}"),
    }
}

/// Receives EXPECT checksummed messages, verifies each exactly once; then, when
/// `linger`, keeps answering until told to quit, else returns at once (the process exits
/// right after its last poll).
fn child_recv(linger: bool) {
    let expect = env_u64("EXPECT");
    let side = Side::new(&dev(0), 0);
    let depth = 256u64;
    let region = Region::new(&side.pd, depth as usize * MSG, ALL_ACCESS);
    for i in 0..depth {
        side.qp
            .post_recv(&recv(i, &[region.sge(i as usize * MSG, MSG as u32)]))
            .unwrap();
    }
    println!("READY {}", side.qp.qpn());
    std::io::stdout().flush().unwrap();
    let mut seen = vec![false; expect as usize];
    let (mut got, mut bad, mut dup) = (0u64, 0u64, 0u64);
    // Arrivals with a lower sequence number than one seen before.
    let (mut reordered, mut max_seen) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while got + dup + bad < expect && Instant::now() < deadline {
        let Some(c) = side.cq.peek() else {
            std::thread::yield_now();
            continue;
        };
        side.cq.retire();
        assert_eq!(c.status, 0, "{c:?}");
        let m = region.bytes(c.wr_id as usize * MSG, MSG);
        let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
        if c.byte_len as usize != MSG || seq >= expect || m[..] != message(seq)[..] {
            bad += 1;
        } else if seen[seq as usize] {
            dup += 1;
        } else {
            seen[seq as usize] = true;
            got += 1;
            if seq < max_seen {
                reordered += 1;
            }
            max_seen = max_seen.max(seq);
        }
        side.qp
            .post_recv(&recv(
                c.wr_id,
                &[region.sge(c.wr_id as usize * MSG, MSG as u32)],
            ))
            .unwrap();
    }
    let st = side.dev.stats();
    eprintln!("receiver stats {st:?}");
    println!(
        "DONE got={got} dup={dup} bad={bad} reordered={reordered} dups_suppressed={}",
        st.duplicates
    );
    std::io::stdout().flush().unwrap();
    if linger {
        // Keep answering retransmissions (lost ACKs) until the parent says so.
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
}

/// Sends COUNT messages to PEER_QPN (window = SQ depth), all must succeed.
fn child_send() {
    let count = env_u64("COUNT");
    let peer_qpn = env_u64("PEER_QPN") as u32;
    let side = Side::new(&dev(0), 0);
    let ah = side.pd.create_ah(&peer_gid()).unwrap();
    let window = 256usize;
    let region = Region::new(&side.pd, window * MSG, ALL_ACCESS);
    let (mut posted, mut done, mut errors) = (0u64, 0u64, 0u64);
    let mut free: Vec<u64> = (0..window as u64).collect();
    // Sequence number in each slot; completions of a lower sequence number
    // than one completed before count as reordered.
    let mut seq_of = vec![0u64; window];
    let (mut reordered, mut max_done) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < count && Instant::now() < deadline {
        while posted < count {
            let Some(slot) = free.pop() else { break };
            region.fill(slot as usize * MSG, &message(posted));
            seq_of[slot as usize] = posted;
            let w = wr(
                &ah,
                peer_qpn,
                slot,
                SendOp::Send,
                &[region.sge(slot as usize * MSG, MSG as u32)],
            );
            side.qp.post_send_batch(&[w]).unwrap();
            posted += 1;
        }
        while let Some(c) = side.cq.peek() {
            side.cq.retire();
            if c.status != 0 {
                errors += 1;
                eprintln!("send error {c:?}");
            }
            let seq = seq_of[c.wr_id as usize];
            if seq < max_done {
                reordered += 1;
            }
            max_done = max_done.max(seq);
            free.push(c.wr_id);
            done += 1;
        }
        std::thread::yield_now();
    }
    let st = side.dev.stats();
    eprintln!("sender stats {st:?}");
    println!(
        "SENT done={done} errors={errors} retransmits={} reordered={reordered}",
        st.retransmits
    );
}

/// An RDMA target: 1 MiB MR (remote read/write), AH for the peer; answers
/// `sum` with the FNV of its buffer, exits on `quit` or stdin EOF.
fn child_target() {
    let side = Side::new(&dev(0), 0);
    let _ah = side.pd.create_ah(&peer_gid()).unwrap();
    // Device 1 of the peer's host is known too (forged-request test).
    let mut gid1 = peer_gid();
    gid1[15] = 1;
    let _ah1 = side.pd.create_ah(&gid1).unwrap();
    let region = Region::new(&side.pd, 1 << 20, ALL_ACCESS);
    side.qp.post_recv(&recv(1, &[])).unwrap();
    side.qp.post_recv(&recv(2, &[])).unwrap();
    println!(
        "READY {} {} {}",
        side.qp.qpn(),
        region.addr(),
        region.mr.rkey()
    );
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().trim() {
            "sum" => println!("SUM {}", fnv(&region.bytes(0, 1 << 20))),
            "stats" => {
                let s = side.dev.stats();
                println!(
                    "STATS process_vm={} unproven={} duplicates={}",
                    s.process_vm, s.unproven, s.duplicates
                );
            }
            "imm" => {
                let c = next(&side.cq, 5);
                println!("IMM {:?} {} {:?}", c.kind, c.byte_len, c.imm_be);
            }
            _ => break,
        }
        std::io::stdout().flush().unwrap();
    }
}

/// A bystander process with an open device (so it holds a slot and device
/// 0's port of it) and a buffer that is not registered anywhere: prints
/// `READY pid slot qpn addr`, answers `sum` with the buffer's FNV.
fn child_victim() {
    let side = Side::new(&dev(0), 0);
    let secret: Vec<u8> = (0..256usize << 10).map(|i| (i * 11 + 5) as u8).collect();
    println!(
        "READY {} {} {} {}",
        std::process::id(),
        efa_sim::model::transport::slot_of_qpn(side.qp.qpn()),
        side.qp.qpn(),
        secret.as_ptr() as u64
    );
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().trim() {
            "sum" => println!("SUM {}", fnv(std::hint::black_box(&secret))),
            _ => break,
        }
        std::io::stdout().flush().unwrap();
    }
}

/// RDMA requester: writes 1 MiB of a pattern to PEER_QPN's MR
/// (PEER_RADDR, PEER_RKEY), reads it back into a second buffer and prints
/// `RDMA write=<status> read=<status> same=<bool>`.
fn child_rdma() {
    let side = Side::new(&dev(0), 0);
    let ah = side.pd.create_ah(&peer_gid()).unwrap();
    let (qpn, raddr, rkey) = (
        env_u64("PEER_QPN") as u32,
        env_u64("PEER_RADDR"),
        env_u64("PEER_RKEY") as u32,
    );
    let local = Region::new(&side.pd, 2 << 20, ALL_ACCESS);
    let data: Vec<u8> = (0..1usize << 20)
        .map(|i| (i * 13 + i / 777) as u8)
        .collect();
    local.fill(0, &data);
    let mut w = wr(&ah, qpn, 1, SendOp::RdmaWrite, &[local.sge(0, 1 << 20)]);
    w.remote = Some((raddr, rkey));
    side.qp.post_send_batch(&[w]).unwrap();
    let write = next(&side.cq, 10).status;
    let mut w = wr(
        &ah,
        qpn,
        2,
        SendOp::RdmaRead,
        &[local.sge(1 << 20, 1 << 20)],
    );
    w.remote = Some((raddr, rkey));
    side.qp.post_send_batch(&[w]).unwrap();
    let read = next(&side.cq, 10).status;
    let same = local.bytes(1 << 20, 1 << 20) == data;
    println!("RDMA write={write} read={read} same={same}");
    std::io::stdout().flush().unwrap();
}

fn stream(count: u64, faults: &str, recv_ns: Option<(&str, &str)>, send_ns: Option<(&str, &str)>) {
    let mut env = vec![("EXPECT", count.to_string())];
    if !faults.is_empty() {
        env.push(("EFA_SIM_FAULTS", faults.to_string()));
    }
    if let Some((_, addr)) = recv_ns {
        env.push(("EFA_SIM_ADDR", addr.to_string()));
    }
    let mut rx = Kid::spawn("recv", &env, recv_ns.map(|n| n.0));
    let qpn = rx.line("READY");
    let mut env = vec![("COUNT", count.to_string()), ("PEER_QPN", qpn)];
    if !faults.is_empty() {
        env.push(("EFA_SIM_FAULTS", faults.replace("seed=1", "seed=2")));
    }
    if let Some((_, addr)) = send_ns {
        env.push(("EFA_SIM_ADDR", addr.to_string()));
    }
    if let Some((_, addr)) = recv_ns {
        env.push(("PEER_ADDR", addr.to_string()));
    }
    let mut tx = Kid::spawn("send", &env, send_ns.map(|n| n.0));
    let sent = tx.line("SENT");
    let done = rx.line("DONE");
    assert_eq!(field(&sent, "done"), count, "{sent}");
    assert_eq!(field(&sent, "errors"), 0, "{sent}");
    assert_eq!(field(&done, "got"), count, "{done}");
    assert_eq!(field(&done, "dup"), 0, "{done}");
    assert_eq!(field(&done, "bad"), 0, "{done}");
    if faults.contains("loss") {
        assert!(
            field(&sent, "retransmits") > 0,
            "loss must cause retransmissions: {sent}"
        );
    }
    if faults.contains("reorder") {
        assert!(
            field(&done, "reordered") > 0,
            "reorder injection must reorder deliveries: {done}"
        );
        assert!(
            field(&sent, "reordered") > 0,
            "reorder injection must reorder the sender's completions: {sent}"
        );
    }
    if faults.contains("dup") {
        assert!(
            field(&done, "dups_suppressed") > 0,
            "dup injection must be suppressed: {done}"
        );
    }
    rx.say("quit");
    tx.wait(10);
    rx.wait(10);
}

#[test]
fn two_processes_send_recv() {
    stream(2000, "", None, None);
}

#[test]
fn hundred_thousand_messages_under_reorder_loss_and_dup_lose_nothing() {
    stream(
        100_000,
        "seed=1,reorder=0.2,loss=0.05,dup=0.05,delay_us=20",
        None,
        None,
    );
}

/// The last requests a receiver polls are acknowledged although it exits right after
/// (its acknowledgements wait for its next poll, which never comes, and its engine
/// thread stops with it): a NIC acknowledges whatever its process does, so the sender's
/// last sends succeed instead of timing out with "remote stopped responding".
#[test]
fn a_receiver_that_exits_after_its_last_poll_still_acknowledges() {
    let count = 1000;
    let mut rx = Kid::spawn("recv_exit", &[("EXPECT", count.to_string())], None);
    let qpn = rx.line("READY");
    let env = [("COUNT", count.to_string()), ("PEER_QPN", qpn)];
    let mut tx = Kid::spawn("send", &env, None);
    let done = rx.line("DONE");
    assert_eq!(field(&done, "got"), count, "{done}");
    rx.wait(10);
    let sent = tx.line("SENT");
    assert_eq!(field(&sent, "done"), count, "{sent}");
    assert_eq!(field(&sent, "errors"), 0, "{sent}");
    tx.wait(10);
}

#[test]
fn two_processes_rdma_write_read_and_imm() {
    rdma_between_processes(&[]);
}

/// Without process_vm_* (as between hosts) bulk RDMA moves in acknowledged
/// data-in-datagram chunks; same bytes, same completions.
#[test]
fn two_processes_bulk_rdma_falls_back_to_chunks() {
    let before = dev(0).stats().chunked;
    rdma_between_processes(&[("EFA_SIM_NO_PROCESS_VM", "1".to_string())]);
    // 1 MiB write, 1 MiB read and the 200000-byte write-with-imm went in chunks.
    assert!(dev(0).stats().chunked >= before + 3);
}

fn rdma_between_processes(env: &[(&str, String)]) {
    let d = dev(0);
    let mut kid = Kid::spawn("target", env, None);
    let ready = kid.line("READY");
    let v: Vec<u64> = ready
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (qpn, addr, rkey) = (v[0] as u32, v[1], v[2] as u32);
    let side = Side::new(&d, 0);
    let ah = side.pd.create_ah(&d.gid).unwrap();
    let local = Region::new(&side.pd, 2 << 20, ALL_ACCESS);
    let data: Vec<u8> = (0..1usize << 20)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    local.fill(0, &data);
    // 1 MiB write (bulk: process_vm_readv by the target), then small write-with-imm.
    let mut w = wr(&ah, qpn, 1, SendOp::RdmaWrite, &[local.sge(0, 1 << 20)]);
    w.remote = Some((addr, rkey));
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 0);
    kid.say("sum");
    assert_eq!(kid.line("SUM"), fnv(&data).to_string());
    // Small read (data in the response) and bulk read (process_vm_writev by the target).
    let mut w = wr(&ah, qpn, 2, SendOp::RdmaRead, &[local.sge(1 << 20, 1000)]);
    w.remote = Some((addr + 5, rkey));
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 0);
    assert_eq!(local.bytes(1 << 20, 1000), data[5..1005]);
    let mut w = wr(
        &ah,
        qpn,
        3,
        SendOp::RdmaRead,
        &[local.sge(1 << 20, 1 << 20)],
    );
    w.remote = Some((addr, rkey));
    local.fill(1 << 20, &vec![0; 1 << 20]);
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 0);
    assert!(local.bytes(1 << 20, 1 << 20) == data);
    let mut w = wr(&ah, qpn, 4, SendOp::RdmaWriteImm, &[local.sge(0, 100)]);
    w.remote = Some((addr, rkey));
    w.imm_be = 0x1234;
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 0);
    kid.say("imm");
    assert_eq!(
        kid.line("IMM"),
        format!("RecvRdmaWithImm 100 Some({})", 0x1234)
    );
    // Bulk write-with-imm: the immediate arrives with all 200000 bytes in place.
    let pattern2: Vec<u8> = (0..200_000usize).map(|i| (i * 3 + 1) as u8).collect();
    local.fill(0, &pattern2);
    let mut w = wr(&ah, qpn, 6, SendOp::RdmaWriteImm, &[local.sge(0, 200_000)]);
    w.remote = Some((addr, rkey));
    w.imm_be = 0x55;
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 0);
    kid.say("imm");
    assert_eq!(
        kid.line("IMM"),
        format!("RecvRdmaWithImm 200000 Some({})", 0x55)
    );
    let mut expect = data.clone();
    expect[..200_000].copy_from_slice(&pattern2);
    kid.say("sum");
    assert_eq!(kid.line("SUM"), fnv(&expect).to_string());
    // Out-of-range rkey across processes → 7.
    let mut w = wr(&ah, qpn, 5, SendOp::RdmaWrite, &[local.sge(0, 64)]);
    w.remote = Some((addr + (1 << 20) - 32, rkey));
    side.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&side.cq, 5).status, 7);
    // The target copied bulk data with process_vm_* only where allowed, and
    // every bulk request of ours was proven to come from us.
    kid.say("stats");
    let stats = kid.line("STATS");
    let fallback = env.iter().any(|(k, _)| *k == "EFA_SIM_NO_PROCESS_VM");
    assert_eq!(field(&stats, "unproven"), 0, "{stats}");
    if fallback {
        assert_eq!(field(&stats, "process_vm"), 0, "{stats}");
    } else {
        assert!(field(&stats, "process_vm") >= 3, "{stats}");
    }
    kid.say("quit");
    kid.wait(10);
}

/// Every datagram of the requester sent twice (`dup=1`): the duplicate of a bulk write
/// and of a bulk read is answered from the responder's cache, each copied once.
#[test]
fn duplicated_bulk_requests_are_copied_once() {
    let mut target = Kid::spawn("target", &[], None);
    let v: Vec<u64> = target
        .line("READY")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let mut rdma = Kid::spawn(
        "rdma",
        &[
            ("EFA_SIM_FAULTS", "seed=3,dup=1".to_string()),
            ("PEER_QPN", v[0].to_string()),
            ("PEER_RADDR", v[1].to_string()),
            ("PEER_RKEY", v[2].to_string()),
        ],
        None,
    );
    assert_eq!(rdma.line("RDMA"), "write=0 read=0 same=true");
    // The requester may finish before the target has handled the last duplicate (a bulk
    // request is answered before the next frame is read): ask until both were seen.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let stats = loop {
        target.say("stats");
        let stats = target.line("STATS");
        if field(&stats, "duplicates") >= 2 || std::time::Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(field(&stats, "duplicates") >= 2, "{stats}");
    assert_eq!(field(&stats, "process_vm"), 2, "{stats}");
    target.say("quit");
    rdma.wait(10);
    target.wait(10);
}

/// A forger (this process) sends bulk requests to a target process naming a
/// third process (the victim) and its unregistered buffer: from an arbitrary
/// port, and from the victim's own slot address on a device the victim has
/// not bound. The target must neither read the victim's bytes into its MR
/// (a leak to whoever holds its rkey) nor write its MR over them.
#[test]
fn forged_bulk_requests_cannot_reach_a_third_process() {
    use efa_sim::model::transport::{self, wire};
    let mut target = Kid::spawn("target", &[], None);
    let v: Vec<u64> = target
        .line("READY")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (t_qpn, t_addr, t_rkey) = (v[0] as u32, v[1], v[2] as u32);
    let mut victim = Kid::spawn("victim", &[], None);
    let v: Vec<u64> = victim
        .line("READY")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (v_pid, v_slot, v_qpn, v_addr) = (v[0] as u32, v[1] as u32, v[2] as u16, v[3]);
    victim.say("sum");
    let victim_sum = victim.line("SUM");
    let base = Sim::get().config().port_base;
    let t_port = transport::port_for(base, 0, transport::slot_of_qpn(t_qpn)).unwrap();
    let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, t_port);
    let lo = std::net::Ipv4Addr::LOCALHOST;
    let any_port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let v_dev1_port = transport::port_for(base, 1, v_slot).unwrap();
    let victims_dev1 = std::net::UdpSocket::bind(("127.0.0.1", v_dev1_port))
        .expect("victim's device-1 port is free (it only opened device 0)");
    let mut id = 0;
    for (sock, dev) in [(&any_port, 0u32), (&victims_dev1, 1)] {
        for op in [wire::Op::Write, wire::Op::Read] {
            id += 1;
            let mut h = wire::Header::new(wire::KIND_REQ, op);
            h.flags = wire::FLAG_FAST;
            h.dst_qpn = t_qpn as u16;
            h.qkey = QKEY;
            h.src_gid = gid_for(lo, dev);
            h.src_qpn = v_qpn;
            h.rkey = t_rkey;
            h.remote_addr = t_addr;
            h.total_len = 128 << 10;
            h.pid = v_pid;
            h.local_addr = v_addr;
            h.epoch = 0xbad;
            h.req_id = id;
            let mut buf = vec![0u8; wire::HEADER];
            h.encode(&mut buf);
            sock.send_to(&buf, to).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut resp = vec![0u8; wire::MAX_DATAGRAM];
            let n = sock.recv(&mut resp).expect("target answers");
            let first = match wire::bundle_items(&resp[..n]) {
                Some(mut items) => items.next().unwrap(),
                None => &resp[..n],
            };
            let (r, _) = wire::Header::decode(first).unwrap();
            assert_eq!(
                (r.req_id, r.status),
                (id, wire::STATUS_FALLBACK),
                "device {dev} op {op:?}"
            );
        }
    }
    target.say("sum");
    assert_eq!(
        target.line("SUM"),
        fnv(&vec![0u8; 1 << 20]).to_string(),
        "victim bytes leaked into the target's MR"
    );
    victim.say("sum");
    assert_eq!(victim.line("SUM"), victim_sum, "victim memory overwritten");
    target.say("stats");
    let stats = target.line("STATS");
    assert_eq!(field(&stats, "process_vm"), 0, "{stats}");
    assert_eq!(field(&stats, "unproven"), 4, "{stats}");
    target.say("quit");
    victim.say("quit");
    target.wait(10);
    victim.wait(10);
}

#[test]
fn killed_peer_gives_bounded_errors() {
    let d = dev(0);
    let mut kid = Kid::spawn("target", &[], None);
    let ready = kid.line("READY");
    let qpn: u32 = ready.split_whitespace().next().unwrap().parse().unwrap();
    let side = Side::new(&d, 0);
    let ah = side.pd.create_ah(&d.gid).unwrap();
    // Answered twice (consumes the child's two receives).
    for id in [1, 10] {
        side.qp
            .post_send_batch(&[wr(&ah, qpn, id, SendOp::Send, &[])])
            .unwrap();
        assert_eq!(next(&side.cq, 5).status, 0);
    }
    // WR 2 is outstanding (RNR: the child has no receive left) when the child dies.
    side.qp
        .post_send_batch(&[wr(&ah, qpn, 2, SendOp::Send, &[])])
        .unwrap();
    none_within(&side.cq, 50);
    kid.child.kill().unwrap();
    kid.child.wait().unwrap();
    let t = Instant::now();
    let c = next(&side.cq, 5);
    assert_eq!((c.wr_id, c.status), (2, 13), "answered before, now silent");
    assert!(
        t.elapsed() < Duration::from_millis(5000),
        "{:?}",
        t.elapsed()
    );
    // A peer that never answered: an address nobody binds.
    let ghost = side
        .pd
        .create_ah(&gid_for(std::net::Ipv4Addr::new(127, 0, 0, 99), 0))
        .unwrap();
    let t = Instant::now();
    side.qp
        .post_send_batch(&[wr(&ghost, 1, 3, SendOp::Send, &[])])
        .unwrap();
    let c = next(&side.cq, 5);
    assert_eq!((c.wr_id, c.status), (3, 15), "never answered");
    assert!(
        t.elapsed() < Duration::from_millis(5000),
        "{:?}",
        t.elapsed()
    );
}

/// The peer-kill knob (`EFA_SIM_FAULTS=kill_after=N`) kills the receiver
/// in the middle of a stream: every WR of the sender still completes, those
/// the receiver acknowledged with status 0, the rest with 13 (the peer
/// answered before), all within the documented bound after the death.
#[test]
fn peer_kill_knob_kills_mid_stream_and_every_wr_completes() {
    use std::os::unix::process::ExitStatusExt;
    let mut rx = Kid::spawn(
        "recv",
        &[
            ("EXPECT", "1000000".to_string()),
            ("EFA_SIM_FAULTS", "kill_after=40".to_string()),
        ],
        None,
    );
    let qpn: u32 = rx.line("READY").parse().unwrap();
    let d = dev(0);
    let side = Side::new(&d, 0);
    let ah = side.pd.create_ah(&d.gid).unwrap();
    let region = Region::new(&side.pd, 64 * MSG, ALL_ACCESS);
    let (mut posted, mut ok, mut failed) = (0u64, 0u64, 0u64);
    let mut outstanding = 0u64;
    let mut died_at: Option<Instant> = None;
    let start = Instant::now();
    while died_at.is_none() || outstanding > 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "stream hung");
        if died_at.is_none() {
            if let Some(st) = rx.child.try_wait().unwrap() {
                assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
                died_at = Some(Instant::now());
            }
        }
        while died_at.is_none() && outstanding < 64 {
            region.fill((posted % 64) as usize * MSG, &message(posted));
            let w = wr(
                &ah,
                qpn,
                posted,
                SendOp::Send,
                &[region.sge((posted % 64) as usize * MSG, MSG as u32)],
            );
            side.qp.post_send_batch(&[w]).unwrap();
            posted += 1;
            outstanding += 1;
        }
        while let Some(c) = side.cq.peek() {
            side.cq.retire();
            outstanding -= 1;
            match c.status {
                0 => ok += 1,
                13 => failed += 1,
                s => panic!("unexpected status {s}: {c:?}"),
            }
        }
        std::thread::yield_now();
    }
    let after_death = died_at.unwrap().elapsed();
    assert!(ok > 0, "the receiver acknowledged nothing before dying");
    assert!(failed > 0, "no WR was outstanding at the kill");
    assert_eq!(ok + failed, posted);
    assert!(
        after_death < Duration::from_secs(5),
        "errors took {after_death:?} after the kill"
    );
}

struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2 required)");
    assert!(
        out.status.success(),
        "ip {args:?} failed (needs root/CAP_NET_ADMIN): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_network_namespaces() {
    let id = std::process::id() % 10000;
    let (a, b) = (format!("efasim{id}a"), format!("efasim{id}b"));
    let _cleanup = Netns(vec![a.clone(), b.clone()]);
    ip(&["netns", "add", &a]);
    ip(&["netns", "add", &b]);
    let (va, vb) = (format!("ve{id}a"), format!("ve{id}b"));
    ip(&[
        "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
    ]);
    ip(&["-n", &a, "addr", "add", "10.77.0.1/24", "dev", &va]);
    ip(&["-n", &b, "addr", "add", "10.77.0.2/24", "dev", &vb]);
    for (ns, v) in [(&a, &va), (&b, &vb)] {
        ip(&["-n", ns, "link", "set", v, "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    stream(5000, "", Some((&b, "10.77.0.2")), Some((&a, "10.77.0.1")));
    // Bulk RDMA across the namespaces: the target proves the requester (its
    // owner record lists 10.77.0.1) and copies with process_vm_*.
    let mut target = Kid::spawn(
        "target",
        &[
            ("EFA_SIM_ADDR", "10.77.0.2".to_string()),
            ("PEER_ADDR", "10.77.0.1".to_string()),
        ],
        Some(&b),
    );
    let v: Vec<u64> = target
        .line("READY")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let mut rdma = Kid::spawn(
        "rdma",
        &[
            ("EFA_SIM_ADDR", "10.77.0.1".to_string()),
            ("PEER_ADDR", "10.77.0.2".to_string()),
            ("PEER_QPN", v[0].to_string()),
            ("PEER_RADDR", v[1].to_string()),
            ("PEER_RKEY", v[2].to_string()),
        ],
        Some(&a),
    );
    assert_eq!(rdma.line("RDMA"), "write=0 read=0 same=true");
    target.say("stats");
    let stats = target.line("STATS");
    assert_eq!(field(&stats, "unproven"), 0, "{stats}");
    assert!(field(&stats, "process_vm") >= 2, "{stats}");
    target.say("quit");
    rdma.wait(10);
    target.wait(10);
}
