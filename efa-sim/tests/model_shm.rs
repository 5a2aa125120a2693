//! The shared-memory transport between processes of one host
//! (`EFA_SIM_TRANSPORT=shm`, see `efa_sim::transport::shm`): 100,000 checksummed messages
//! in batches under seeded reorder, loss and duplication; a peer killed in the middle of
//! a transfer; a peer that writes garbage into this process's inbox.
//!
//! Children are this test binary re-executed (see `process_helpers.rs`). The in-process
//! side of a test uses its own device (`efa_0` or `efa_1`), so the counters it checks are
//! its own although the tests of this file run in parallel.

#[path = "model_helpers.rs"]
mod helpers;
#[path = "process_helpers.rs"]
mod process;
use efa_sim::model::*;
use efa_sim::transport::shm::{inbox_path, open_ring_file, RING_BYTES};
use efa_sim::transport::shm_ring::{CONTROL, FRAME, FRAME_MAGIC, TAIL};
use helpers::*;
use process::*;
use std::io::{BufRead, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Receive slots (the QP's RQ depth).
const DEPTH: usize = 256;
/// WRs per `post_send_batch`.
const BATCH: usize = 16;

fn peer_gid() -> Gid {
    let dev = std::env::var("PEER_DEV").map_or(0, |v| v.parse().unwrap());
    gid_for(std::net::Ipv4Addr::LOCALHOST, dev)
}

#[test]
#[ignore = "child process entry point, run by the other tests of this file"]
fn child_entry() {
    let Ok(role) = std::env::var("EFA_SIM_CHILD_ROLE") else {
        eprintln!("child_entry: EFA_SIM_CHILD_ROLE unset, nothing to do");
        return;
    };
    match role.as_str() {
        "recv" => child_recv(),
        "send" => child_send(),
        "vandal" => child_vandal(),
        other => panic!("unknown role {other}"),
    }
}

/// What a receiver saw.
#[derive(Debug, Default)]
struct Received {
    got: u64,
    dup: u64,
    bad: u64,
    reordered: u64,
}

/// Posts `DEPTH` receives on `side` (in `region`) and takes `expect` checksummed messages,
/// reposting each slot; gives up after 60 s (a hang guard, not a timing).
fn receive(side: &Side, region: &Region, expect: u64) -> Received {
    for i in 0..DEPTH {
        let sge = region.sge(i * MSG, MSG as u32);
        side.qp.post_recv(&recv(i as u64, &[sge])).unwrap();
    }
    let mut r = Received::default();
    let mut seen = vec![false; expect as usize];
    let mut max_seen = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while r.got + r.dup + r.bad < expect && Instant::now() < deadline {
        let Some(c) = side.cq.peek() else {
            std::thread::yield_now();
            continue;
        };
        side.cq.retire();
        assert_eq!(c.status, 0, "{c:?}");
        let slot = c.wr_id as usize;
        let m = region.bytes(slot * MSG, MSG);
        let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
        if c.byte_len as usize != MSG || seq >= expect || m[..] != message(seq)[..] {
            r.bad += 1;
        } else if seen[seq as usize] {
            r.dup += 1;
        } else {
            seen[seq as usize] = true;
            r.got += 1;
            r.reordered += u64::from(seq < max_seen);
            max_seen = max_seen.max(seq);
        }
        let sge = region.sge(slot * MSG, MSG as u32);
        side.qp.post_recv(&recv(c.wr_id, &[sge])).unwrap();
    }
    r
}

/// What a sender saw.
#[derive(Debug, Default)]
struct Sent {
    ok: u64,
    /// Completions with status 13 (the peer answered before, then went silent).
    failed: u64,
    posted: u64,
}

/// Sends messages `0..count` to `qpn` through `ah` in batches of [`BATCH`] WRs with a
/// window of `DEPTH`; `stop` is asked after every poll whether to stop posting (then the
/// outstanding WRs are still collected). Any status but 0 and 13 fails the test.
fn send(
    side: &Side,
    ah: &std::sync::Arc<Ah>,
    qpn: u32,
    count: u64,
    mut stop: impl FnMut(&Sent) -> bool,
) -> Sent {
    let region = Region::new(&side.pd, DEPTH * MSG, ALL_ACCESS);
    let mut free: Vec<u64> = (0..DEPTH as u64).collect();
    let mut s = Sent::default();
    let mut stopped = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (s.posted < count && !stopped) || s.ok + s.failed < s.posted {
        assert!(Instant::now() < deadline, "stream hung: {s:?}");
        let mut batch = Vec::with_capacity(BATCH);
        while !stopped && s.posted + (batch.len() as u64) < count && batch.len() < BATCH {
            let Some(slot) = free.pop() else { break };
            let seq = s.posted + batch.len() as u64;
            region.fill(slot as usize * MSG, &message(seq));
            let sge = region.sge(slot as usize * MSG, MSG as u32);
            batch.push(wr(ah, qpn, slot, SendOp::Send, &[sge]));
        }
        if !batch.is_empty() {
            side.qp.post_send_batch(&batch).unwrap();
            s.posted += batch.len() as u64;
        }
        while let Some(c) = side.cq.peek() {
            side.cq.retire();
            match c.status {
                0 => s.ok += 1,
                13 => s.failed += 1,
                other => panic!("unexpected status {other}: {c:?}"),
            }
            free.push(c.wr_id);
        }
        stopped = stopped || stop(&s);
        std::thread::yield_now();
    }
    s
}

/// Receives EXPECT messages on device 0, prints what it saw and its counters, then waits
/// for a line on stdin (it keeps answering retransmissions meanwhile).
fn child_recv() {
    let expect = env_u64("EXPECT");
    let side = Side::new(&dev(0), 0);
    let region = Region::new(&side.pd, DEPTH * MSG, ALL_ACCESS);
    println!("READY {}", side.qp.qpn());
    std::io::stdout().flush().unwrap();
    let r = receive(&side, &region, expect);
    let st = side.dev.stats();
    println!(
        "DONE got={} dup={} bad={} reordered={} dups_suppressed={} shm_received={} shm_garbage={} polled={}",
        r.got, r.dup, r.bad, r.reordered, st.duplicates, st.shm_received, st.shm_garbage,
        st.polled_progress
    );
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Sends COUNT messages to PEER_QPN (of device PEER_DEV on this host) in batches.
fn child_send() {
    let side = Side::new(&dev(0), 0);
    let ah = side.pd.create_ah(&peer_gid()).unwrap();
    let s = send(
        &side,
        &ah,
        env_u64("PEER_QPN") as u32,
        env_u64("COUNT"),
        |_| false,
    );
    let st = side.dev.stats();
    println!(
        "SENT ok={} failed={} retransmits={} shm_sent={} shm_drops={}",
        s.ok, s.failed, st.retransmits, st.shm_sent, st.shm_drops
    );
    std::io::stdout().flush().unwrap();
}

/// Writes `bytes` into the data area of the inbox `f` at ring position `pos` (wrapping).
fn put(f: &std::fs::File, pos: u64, bytes: &[u8]) {
    let off = (pos % RING_BYTES) as usize;
    let first = bytes.len().min(RING_BYTES as usize - off);
    f.write_all_at(&bytes[..first], (CONTROL + off) as u64)
        .unwrap();
    f.write_all_at(&bytes[first..], CONTROL as u64).unwrap();
}

fn tail_of(f: &std::fs::File) -> u64 {
    let mut w = [0u8; 8];
    f.read_exact_at(&mut w, TAIL as u64).unwrap();
    u64::from_le_bytes(w)
}

fn set_tail(f: &std::fs::File, tail: u64) {
    f.write_all_at(&tail.to_le_bytes(), TAIL as u64).unwrap();
}

/// A frame header as producers write it, claiming `len` bytes from 127.0.0.1:1.
fn frame_header(len: u32) -> [u8; FRAME] {
    let mut h = [0u8; FRAME];
    h[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&u32::from(std::net::Ipv4Addr::LOCALHOST).to_le_bytes());
    h[12..14].copy_from_slice(&1u16.to_le_bytes());
    h
}

/// Scribbles over the inbox INBOX one way per `next` line on stdin (printing `DID <n>`
/// after each), then, at `send`, sends COUNT good messages to PEER_QPN like `send`.
fn child_vandal() {
    let dir = std::path::PathBuf::from(std::env::var("EFA_SIM_LOCK_DIR").unwrap());
    let f = open_ring_file(
        &dir,
        env_u64("INBOX_SLOT") as u32,
        env_u64("PEER_DEV") as u32,
    )
    .expect("the peer's ring file");
    // Shrinking the ring under its owner's mapping would make it fault: refused.
    let len = f.metadata().unwrap().len();
    for short in [0, CONTROL as u64, len / 2] {
        let e = f.set_len(short).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "truncate to {short}");
    }
    assert_eq!(f.metadata().unwrap().len(), len);
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .collect();
    let steps: [&dyn Fn(u64); 6] = [
        // Bytes that are no frame at all.
        &|t| {
            put(&f, t, &noise);
            set_tail(&f, t + noise.len() as u64);
        },
        // A frame header whose length no datagram has.
        &|t| {
            put(&f, t, &frame_header(0x7fff_ffff));
            set_tail(&f, t + 2 * FRAME as u64);
        },
        // A length beyond what is published.
        &|t| {
            put(&f, t, &frame_header(1000));
            set_tail(&f, t + 2 * FRAME as u64);
        },
        // A tail the ring cannot hold.
        &|t| set_tail(&f, t + (1 << 40)),
        // A tail behind the consumer.
        &|t| set_tail(&f, t.wrapping_sub(4096)),
        // A well-framed datagram of garbage (the packet parser drops it).
        &|t| {
            put(&f, t, &frame_header(64));
            put(&f, t + FRAME as u64, &noise[..64]);
            set_tail(&f, t + (FRAME + 64) as u64);
        },
    ];
    println!("READY {}", steps.len());
    std::io::stdout().flush().unwrap();
    let mut lines = std::io::stdin().lock().lines();
    for (n, step) in steps.iter().enumerate() {
        assert_eq!(lines.next().unwrap().unwrap().trim(), "next");
        step(tail_of(&f));
        println!("DID {n}");
        std::io::stdout().flush().unwrap();
    }
    assert_eq!(lines.next().unwrap().unwrap().trim(), "send");
    child_send();
}

fn shm_env(mut env: Vec<(&'static str, String)>) -> Vec<(&'static str, String)> {
    env.push(("EFA_SIM_TRANSPORT", "shm".to_string()));
    env
}

#[test]
fn hundred_thousand_checksummed_messages_in_batches_under_seeded_reorder_lose_nothing() {
    let count = 100_000u64;
    let faults = "seed=11,reorder=0.2,loss=0.01,dup=0.02";
    let mut rx = Kid::spawn(
        "recv",
        &shm_env(vec![
            ("EXPECT", count.to_string()),
            ("EFA_SIM_FAULTS", faults.to_string()),
        ]),
        None,
    );
    let qpn = rx.line("READY");
    let rx_slot = transport::slot_of_qpn(qpn.parse().unwrap());
    let mut tx = Kid::spawn(
        "send",
        &shm_env(vec![
            ("COUNT", count.to_string()),
            ("PEER_QPN", qpn),
            ("EFA_SIM_FAULTS", faults.replace("seed=11", "seed=12")),
        ]),
        None,
    );
    let sent = tx.line("SENT");
    let done = rx.line("DONE");
    assert_eq!(field(&sent, "ok"), count, "{sent}");
    assert_eq!(field(&sent, "failed"), 0, "{sent}");
    assert_eq!(field(&done, "got"), count, "{done}");
    assert_eq!(field(&done, "dup"), 0, "{done}");
    assert_eq!(field(&done, "bad"), 0, "{done}");
    assert!(
        field(&done, "reordered") > 0,
        "reorder must reorder: {done}"
    );
    assert!(
        field(&done, "dups_suppressed") > 0,
        "dup must be suppressed: {done}"
    );
    assert!(
        field(&sent, "retransmits") > 0,
        "loss must retransmit: {sent}"
    );
    // The shared-memory path carried the traffic (datagrams bundle several packets),
    // never full, and nothing in it was garbage.
    assert!(field(&sent, "shm_sent") > 0, "{sent}");
    assert_eq!(field(&sent, "shm_drops"), 0, "{sent}");
    assert!(field(&done, "shm_received") > 0, "{done}");
    assert_eq!(field(&done, "shm_garbage"), 0, "{done}");
    assert!(
        field(&done, "polled") > 0,
        "the polling receiver drove its inbox: {done}"
    );
    rx.say("quit");
    tx.wait(10);
    rx.wait(10);
    // A process that exits normally takes its inbox with it.
    let dir = dev(0).config().lock_dir.clone();
    assert!(
        !inbox_path(&dir, rx_slot, 0).exists(),
        "inbox of slot {rx_slot} left"
    );
}

#[test]
fn a_peer_killed_mid_transfer_over_shared_memory_gives_bounded_errors() {
    use std::os::unix::process::ExitStatusExt;
    let d = dev(0);
    let mut rx = Kid::spawn("recv", &shm_env(vec![("EXPECT", "1000000".into())]), None);
    let qpn: u32 = rx.line("READY").parse().unwrap();
    let rx_inbox = inbox_path(&d.config().lock_dir, transport::slot_of_qpn(qpn), 0);
    assert!(rx_inbox.is_file(), "{} missing", rx_inbox.display());
    let side = Side::new(&d, 0);
    let ah = side.pd.create_ah(&d.gid).unwrap();
    let mut killed = false;
    // Kill the receiver mid-stream, then keep streaming until WRs fail: whatever was in
    // flight at the kill, or was posted after it (on a loaded machine every WR posted
    // before the kill may already have been acknowledged).
    let s = send(&side, &ah, qpn, u64::MAX, |s| {
        if !killed && s.ok >= 3000 {
            rx.child.kill().unwrap();
            killed = true;
        }
        killed && s.failed > 0
    });
    let st = rx.child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert!(s.ok >= 3000, "{s:?}");
    assert!(s.failed > 0, "WRs around the kill failed: {s:?}");
    assert_eq!(s.ok + s.failed, s.posted, "every WR completes: {s:?}");
    // WRs posted after the death fail too (the dead peer's ring is never waited on).
    let after = send(&side, &ah, qpn, 2 * BATCH as u64, |_| false);
    assert_eq!((after.ok, after.failed), (0, 2 * BATCH as u64), "{after:?}");
    let stats = d.stats();
    assert!(
        stats.shm_sent > 0,
        "the transfer went through shared memory: {stats:?}"
    );
    // The killed peer's ring went with it; its pointer file was swept when found dead.
    assert!(!rx_inbox.exists(), "{} left", rx_inbox.display());
    // This device still works.
    let other = Side::new(&d, 0);
    other.qp.post_recv(&recv(1, &[])).unwrap();
    let to_other = side.ah_to(&other);
    side.qp
        .post_send_batch(&[wr(&to_other, other.qp.qpn(), 9, SendOp::Send, &[])])
        .unwrap();
    assert_eq!(next(&side.cq, 10).status, 0);
    assert_eq!(next(&other.cq, 10).status, 0);
}

#[test]
fn garbage_in_the_shared_ring_is_counted_and_dropped() {
    let d = dev(1);
    let side = Side::new(&d, 0);
    let region = Region::new(&side.pd, DEPTH * MSG, ALL_ACCESS);
    let slot = transport::slot_of_qpn(side.qp.qpn());
    let inbox = inbox_path(&d.config().lock_dir, slot, d.index);
    assert!(inbox.is_file(), "{} missing", inbox.display());
    let lock_dir = d.config().lock_dir.display().to_string();
    let count = 1000u64;
    let mut vandal = Kid::spawn(
        "vandal",
        &shm_env(vec![
            ("INBOX_SLOT", slot.to_string()),
            ("EFA_SIM_LOCK_DIR", lock_dir),
            ("PEER_QPN", side.qp.qpn().to_string()),
            ("PEER_DEV", d.index.to_string()),
            ("COUNT", count.to_string()),
        ]),
        None,
    );
    let steps: u64 = vandal.line("READY").parse().unwrap();
    let before = d.stats();
    for n in 0..steps {
        vandal.say("next");
        assert_eq!(vandal.line("DID"), n.to_string());
        // Polling the CQ drives the inbox; wait until the step has been seen.
        let want = |s: &Stats| {
            let garbage = s.shm_garbage - before.shm_garbage;
            let malformed = s.malformed - before.malformed;
            garbage + malformed > n
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !want(&d.stats()) {
            assert!(
                Instant::now() < deadline,
                "step {n} unseen: {:?}",
                d.stats()
            );
            assert!(side.cq.peek().is_none(), "garbage completed a WR");
            std::thread::yield_now();
        }
    }
    let after = d.stats();
    assert_eq!(
        after.shm_garbage - before.shm_garbage,
        steps - 1,
        "{after:?}"
    );
    assert_eq!(after.malformed - before.malformed, 1, "{after:?}");
    // The inbox still carries good traffic afterwards, every byte intact.
    vandal.say("send");
    let r = receive(&side, &region, count);
    assert_eq!((r.got, r.dup, r.bad), (count, 0, 0), "{r:?}");
    let sent = vandal.line("SENT");
    assert_eq!(field(&sent, "ok"), count, "{sent}");
    assert!(field(&sent, "shm_sent") > 0, "{sent}");
    assert_eq!(
        d.stats().shm_garbage,
        after.shm_garbage,
        "good frames are not garbage"
    );
    vandal.wait(10);
}
