//! Datagrams made by hand against a device: garbage and forged requests are harmless,
//! and the wire protocol's older forms are still answered.

#[path = "model_helpers.rs"]
mod helpers;
use efa_sim::model::*;
use helpers::*;

/// Garbage and forged datagrams must never panic the engine, touch memory
/// outside registered MRs, or deliver anything; they are counted as malformed.
#[test]
fn malformed_and_forged_packets_are_harmless() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 4096, ALL_ACCESS);
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = ("127.0.0.1", port);
    let before = b.dev.stats().malformed;
    // Random bytes of many lengths (deterministic LCG).
    let mut x = 0x1234_5678u64;
    for len in [0usize, 1, 7, 95, 96, 97, 200, 1500, 9000] {
        let buf: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 33) as u8
            })
            .collect();
        sock.send_to(&buf, to).unwrap();
    }
    // A header whose data_len disagrees with the datagram.
    let mut h = wire::Header::new(wire::KIND_REQ, wire::Op::Write);
    h.dst_qpn = b.qp.qpn() as u16;
    h.qkey = QKEY;
    h.src_gid = a.dev.gid;
    h.rkey = target.mr.rkey();
    h.remote_addr = target.addr();
    h.total_len = 64;
    h.data_len = 1000;
    let mut buf = vec![0u8; wire::HEADER + 64];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    // A forged fast-path write naming this process and unregistered memory.
    h.flags = wire::FLAG_FAST;
    h.pid = std::process::id();
    h.local_addr = 0x1000;
    h.total_len = 4096;
    h.data_len = 0;
    h.req_id = 77;
    h.epoch = 5;
    let mut buf = vec![0u8; wire::HEADER];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    // A bundle whose item length runs past the end.
    let mut bundle = wire::BUNDLE_MAGIC.to_le_bytes().to_vec();
    bundle.extend_from_slice(&3u32.to_le_bytes());
    bundle.extend_from_slice(&500u32.to_le_bytes());
    bundle.extend_from_slice(&[0u8; 20]);
    sock.send_to(&bundle, to).unwrap();
    // The device still works and nothing was written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while b.dev.stats().malformed < before + 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "malformed packets not counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(target.bytes(0, 4096), vec![0; 4096]);
    none_within(&b.cq, 20);
    let ah = a.ah_to(&b);
    b.qp.post_recv(&recv(1, &[target.sge(0, 64)])).unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).wr_id, 1);
}

/// A successful write is acknowledged in an acknowledgement packet only when its
/// requester says it understands them (`FLAG_TAKES_ACKS`, set by every efa-sim
/// requester); a requester without the flag (an older efa-sim) gets a response.
#[test]
fn a_requester_without_the_acks_flag_gets_responses() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 4096, ALL_ACCESS);
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    for (req_id, flags, kind) in [
        (31u64, 0u8, wire::KIND_RESP),
        (32, wire::FLAG_TAKES_ACKS, wire::KIND_ACKS),
    ] {
        let mut h = wire::Header::new(wire::KIND_REQ, wire::Op::Write);
        h.flags = flags;
        h.dst_qpn = b.qp.qpn() as u16;
        h.qkey = QKEY;
        h.src_gid = a.dev.gid;
        h.rkey = target.mr.rkey();
        h.remote_addr = target.addr() + req_id;
        h.total_len = 8;
        h.data_len = 8;
        h.epoch = 9;
        h.req_id = req_id;
        let mut buf = vec![0u8; wire::HEADER + 8];
        h.encode(&mut buf);
        buf[wire::HEADER..].copy_from_slice(&req_id.to_le_bytes());
        sock.send_to(&buf, to).unwrap();
        let mut resp = vec![0u8; wire::MAX_DATAGRAM];
        let n = sock.recv(&mut resp).expect("an answer");
        let items: Vec<&[u8]> = match wire::bundle_items(&resp[..n]) {
            Some(items) => items.collect(),
            None => vec![&resp[..n]],
        };
        let (r, data) = wire::Header::decode(items[0]).expect("well-formed answer");
        assert_eq!((r.kind, r.epoch, r.status), (kind, 9, 0), "{r:?}");
        if kind == wire::KIND_ACKS {
            assert_eq!(wire::acked_ids(data).collect::<Vec<_>>(), vec![req_id]);
        } else {
            assert_eq!(r.req_id, req_id);
        }
        assert_eq!(target.bytes(req_id as usize, 8), req_id.to_le_bytes());
    }
}

/// Sends `h` (no data) from `sock` to `to` and returns the status of the
/// response to it (panics if none comes within 2 s).
fn forge(
    sock: &std::net::UdpSocket,
    to: std::net::SocketAddrV4,
    h: &efa_sim::model::transport::wire::Header,
) -> u8 {
    use efa_sim::model::transport::wire;
    let mut buf = vec![0u8; wire::HEADER];
    h.encode(&mut buf);
    sock.send_to(&buf, to).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let mut resp = vec![0u8; wire::MAX_DATAGRAM];
    loop {
        let n = sock
            .recv(&mut resp)
            .expect("no response to a forged request");
        let items: Vec<&[u8]> = match wire::bundle_items(&resp[..n]) {
            Some(items) => items.collect(),
            None => vec![&resp[..n]],
        };
        for item in items {
            let (r, _) = wire::Header::decode(item).expect("well-formed response");
            if r.req_id == h.req_id && r.epoch == h.epoch {
                return r.status;
            }
        }
    }
}

/// Forged bulk (process_vm_*) requests: whatever pid and address they name,
/// and whichever source they come from, the responder never copies to or
/// from memory that the named process did not itself put in the request.
/// Without proof of the sender it answers FALLBACK (data must come in
/// datagrams) and moves nothing: not our registered memory of another MR,
/// not our unregistered memory, not another process's memory.
#[test]
fn forged_bulk_requests_never_reach_process_memory() {
    use efa_sim::model::transport::{self, wire};
    let (a, b) = pair(0);
    let _known = b.ah_to(&a);
    let target = Region::new(&b.pd, 64 << 10, ALL_ACCESS);
    let target_bytes = pattern(64 << 10, 3);
    target.fill(0, &target_bytes);
    // Registered memory of this process that the forger names as "its" buffer.
    let secret = Region::new(&a.pd, 64 << 10, ALL_ACCESS);
    let secret_bytes = pattern(64 << 10, 77);
    secret.fill(0, &secret_bytes);
    // Unregistered memory of this process.
    let plain = vec![0x5au8; 64 << 10];
    let port = transport::port_for(
        b.dev.config().port_base,
        b.dev.index,
        transport::slot_of_qpn(b.qp.qpn()),
    )
    .unwrap();
    let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
    let before = b.dev.stats();
    let base = |op: wire::Op, pid: u32, local: u64, src_qpn: u16, id: u64| {
        let mut h = wire::Header::new(wire::KIND_REQ, op);
        h.flags = wire::FLAG_FAST;
        h.dst_qpn = b.qp.qpn() as u16;
        h.qkey = QKEY;
        h.src_gid = a.dev.gid;
        h.src_qpn = src_qpn;
        h.rkey = target.mr.rkey();
        h.remote_addr = target.addr();
        h.total_len = 32 << 10;
        h.pid = pid;
        h.local_addr = local;
        h.epoch = 0xf0f0;
        h.req_id = id;
        h
    };
    // 1. From an arbitrary port, claiming to be our requester QP: this
    //    process (registered / unregistered memory) and our parent process.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let me = std::process::id();
    let parent = std::os::unix::process::parent_id();
    let mut id = 1000;
    let mut sent = 0;
    for (pid, local) in [
        (me, secret.addr()),
        (parent, secret.addr()),
        (parent, plain.as_ptr() as u64),
    ] {
        for op in [wire::Op::Write, wire::Op::Read] {
            id += 1;
            let st = forge(&sock, to, &base(op, pid, local, a.qp.qpn() as u16, id));
            assert_eq!(st, wire::STATUS_FALLBACK, "pid {pid} op {op:?}");
            sent += 1;
        }
    }
    // 2. From the very address a QP of a *free* slot would use (so source
    //    address and GID/QPN agree), naming this process: the slot's owner
    //    record does not name us, so no proof.
    let my_slot = transport::slot_of_qpn(a.qp.qpn());
    //    The slot's lock is held meanwhile, so no other process claims it.
    let (free_slot, _slot_lock, sock2) = (0..transport::SLOTS)
        .filter(|s| *s != my_slot)
        .find_map(|s| {
            use std::os::fd::AsRawFd;
            let path = format!("{}/slot-{s}", a.dev.config().lock_dir.display());
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .ok()?;
            // SAFETY: flock on a valid, owned fd; non-blocking.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return None;
            }
            let p = transport::port_for(a.dev.config().port_base, a.dev.index, s)?;
            std::net::UdpSocket::bind(("127.0.0.1", p))
                .ok()
                .map(|k| (s, f, k))
        })
        .expect("a free slot");
    for op in [wire::Op::Write, wire::Op::Read] {
        id += 1;
        let qpn = (free_slot << transport::QP_INDEX_BITS | 1) as u16;
        let st = forge(&sock2, to, &base(op, me, secret.addr(), qpn, id));
        assert_eq!(st, wire::STATUS_FALLBACK, "free slot {free_slot} op {op:?}");
        sent += 1;
    }
    // Nothing moved in either direction, nothing completed.
    assert!(target.bytes(0, 64 << 10) == target_bytes);
    assert!(secret.bytes(0, 64 << 10) == secret_bytes);
    assert!(plain.iter().all(|b| *b == 0x5a));
    let after = b.dev.stats();
    assert!(after.unproven >= before.unproven + sent, "{after:?}");
    none_within(&b.cq, 20);
    none_within(&a.cq, 1);
    // A bad rkey is still reported as such (the fallback answer reveals no more
    // than a genuine requester would learn).
    let mut h = base(
        wire::Op::Write,
        me,
        secret.addr(),
        a.qp.qpn() as u16,
        id + 1,
    );
    h.rkey ^= 0x40;
    assert_eq!(forge(&sock, to, &h), 7);
    // Genuine bulk traffic still takes the fast path (or the direct path's copy).
    let ah = a.ah_to(&b);
    let (vm_before, direct_before) = (b.dev.stats().process_vm, a.dev.stats().direct);
    a.qp.post_send_batch(&[rdma(
        &ah,
        b.qp.qpn(),
        9,
        SendOp::RdmaWrite,
        secret.sge(0, 32 << 10),
        (target.addr(), target.mr.rkey()),
    )])
    .unwrap();
    assert_eq!(next(&a.cq, 5).status, 0);
    assert!(target.bytes(0, 32 << 10) == secret_bytes[..32 << 10]);
    if std::env::var_os("EFA_SIM_DIRECT").is_none() {
        assert!(a.dev.stats().direct > direct_before);
    } else {
        assert!(b.dev.stats().process_vm > vm_before);
    }
}

/// Same-process requests normally take the direct path (no datagrams); this
/// re-runs every other test of this file over the datagram path
/// (`EFA_SIM_DIRECT=0`), so both paths must give the same results.
#[test]
fn whole_suite_also_passes_over_datagrams() {
    rerun_over_datagrams("whole_suite_also_passes_over_datagrams");
}
