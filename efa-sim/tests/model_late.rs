//! Late responses: a bulk RDMA read whose request is still on a slow fabric
//! (`EFA_SIM_FAULTS` `delay_us`) when its requester QP is destroyed, reset or moved to
//! ERR must never write the requester's buffer after that call returned (the memory is
//! the user's again). Devices of one process over datagrams, and a requester reading
//! from another process (a child: this binary re-executed, see `process_helpers.rs`);
//! either way the delayed request reaches the responder long after the cut, and the
//! bulk copy (`process_vm_*`) must not happen then.

#[path = "model_helpers.rs"]
mod helpers;
#[path = "process_helpers.rs"]
mod process;

use efa_sim::config::Config;
use efa_sim::model::*;
use efa_sim::transport::faults::FaultSpec;
use helpers::*;
use process::{field, Kid};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
/// The fabric's delay of every datagram, each way.
const DELAY: Duration = Duration::from_millis(300);

/// A configuration whose fabric delays every datagram this process sends.
fn delayed() -> Arc<Config> {
    let faults = FaultSpec::parse(&format!("delay_us={}", DELAY.as_micros())).unwrap();
    Arc::new(Config {
        faults,
        direct: false,
        no_process_vm: false,
        ..(**Sim::get().config()).clone()
    })
}

/// Two devices of this process (`ia`, `ib`) on a fabric that delays every datagram.
fn delayed_pair(ia: u32, ib: u32) -> (Side, Side) {
    let config = delayed();
    let a = Device::standalone_in(ia, Profile::default(), config.clone()).unwrap();
    let b = Device::standalone_in(ib, Profile::default(), config).unwrap();
    (Side::new(&a, 0), Side::new(&b, 0))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 | 1).collect()
}

fn read(ah: &Arc<Ah>, qpn: u32, id: u64, local: Sge, remote: &Region) -> SendWr {
    read_at(ah, qpn, id, local, (remote.addr(), remote.mr.rkey()))
}

fn read_at(ah: &Arc<Ah>, qpn: u32, id: u64, local: Sge, (addr, rkey): (u64, u32)) -> SendWr {
    let mut w = wr(ah, qpn, id, SendOp::RdmaRead, &[local]);
    w.remote = Some((addr, rkey));
    w
}

/// Watches `dst[off..off+MIB]` for twice the fabric's round trip: it must stay zero.
fn stays_untouched(dst: &Region, off: usize) {
    let until = Instant::now() + 4 * DELAY;
    while Instant::now() < until {
        let landed = dst.bytes(off, MIB).iter().filter(|&&x| x != 0).count();
        assert_eq!(landed, 0, "bytes written after the QP's window ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Posts a 1 MiB read from `b` into `dst`, lets `cut` end the requester QP's window, then
/// watches `dst` for twice the fabric's round trip: not one byte may change. First a read
/// that is allowed to finish shows the delayed path does land data.
fn late_read_never_lands(ia: u32, ib: u32, cut: impl FnOnce(&Side)) {
    let (a, b) = delayed_pair(ia, ib);
    let ah = a.ah_to(&b);
    let _known = b.ah_to(&a);
    let src = Region::new(&b.pd, MIB, ALL_ACCESS);
    let data = pattern(MIB);
    src.fill(0, &data);
    let dst = Region::new(&a.pd, 2 * MIB, ALL_ACCESS);
    let started = Instant::now();
    a.qp.post_send_batch(&[read(&ah, b.qp.qpn(), 1, dst.sge(0, MIB as u32), &src)])
        .unwrap();
    let c = next(&a.cq, 10);
    assert_eq!((c.wr_id, c.status), (1, 0));
    assert!(started.elapsed() >= DELAY, "the fabric delays the request");
    assert!(dst.bytes(0, MIB) == data, "a read left alone lands");

    a.qp.post_send_batch(&[read(&ah, b.qp.qpn(), 2, dst.sge(MIB, MIB as u32), &src)])
        .unwrap();
    cut(&a);
    stays_untouched(&dst, MIB);
}

/// Destroys the QP (the window of its WRs ends).
fn destroy(a: &Side) {
    a.qp.destroy().unwrap();
}

fn reset(a: &Side) {
    modify(&a.qp, 1, QpState::Reset).unwrap();
}

fn to_err(a: &Side) {
    modify(&a.qp, 1, QpState::Err).unwrap();
    // The flush completion is in the CQ when the call returns: the window has ended.
    let c = next(&a.cq, 1);
    let flushed = efa_sys::vendor::comp_status::FLUSHED as u8;
    assert_eq!((c.wr_id, c.status), (2, flushed));
}

#[test]
fn a_late_read_never_lands_after_the_qp_is_destroyed() {
    late_read_never_lands(52, 53, destroy);
}

#[test]
fn a_late_read_never_lands_after_the_qp_is_reset() {
    late_read_never_lands(54, 55, reset);
}

#[test]
fn a_late_read_never_lands_after_the_qp_moves_to_err() {
    late_read_never_lands(56, 57, to_err);
}

#[test]
#[ignore = "child process entry point, run by the other tests of this file"]
fn child_entry() {
    let Ok(role) = std::env::var("EFA_SIM_CHILD_ROLE") else {
        eprintln!("child_entry: EFA_SIM_CHILD_ROLE unset, nothing to do");
        return;
    };
    assert_eq!(role, "source", "unknown role");
    // The responder: 1 MiB of pattern, readable by the parent's device PEER_DEV.
    let side = Side::new(&dev(0), 0);
    let peer_dev = process::env_u64("PEER_DEV") as u32;
    let _ah = side
        .pd
        .create_ah(&gid_for(std::net::Ipv4Addr::LOCALHOST, peer_dev))
        .unwrap();
    let src = Region::new(&side.pd, MIB, ALL_ACCESS);
    src.fill(0, &pattern(MIB));
    println!("READY {} {} {}", side.qp.qpn(), src.addr(), src.mr.rkey());
    std::io::stdout().flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() != "stats" {
            break;
        }
        let s = side.dev.stats();
        println!(
            "STATS process_vm={} malformed={}",
            s.process_vm, s.malformed
        );
        std::io::stdout().flush().unwrap();
    }
}

/// As [`late_read_never_lands`], from a responder in another process (the child, which
/// itself sends without delay): device `ia` of this process reads 1 MiB from it, lets
/// it land, then posts a second read and cuts the QP's window with `cut` before the
/// delayed request even reached the child. The child answers that read all the same:
/// its answer must be dropped here, and the child must keep working.
fn late_read_from_another_process_never_lands(ia: u32, cut: impl FnOnce(&Side)) {
    let a = Side::new(
        &Device::standalone_in(ia, Profile::default(), delayed()).unwrap(),
        0,
    );
    let mut kid = Kid::spawn("source", &[("PEER_DEV", ia.to_string())], None);
    let v: Vec<u64> = kid
        .line("READY")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (qpn, remote) = (v[0] as u32, (v[1], v[2] as u32));
    let ah =
        a.pd.create_ah(&gid_for(std::net::Ipv4Addr::LOCALHOST, 0))
            .unwrap();
    let dst = Region::new(&a.pd, 2 * MIB, ALL_ACCESS);
    let started = Instant::now();
    a.qp.post_send_batch(&[read_at(&ah, qpn, 1, dst.sge(0, MIB as u32), remote)])
        .unwrap();
    let c = next(&a.cq, 10);
    assert_eq!((c.wr_id, c.status), (1, 0));
    assert!(started.elapsed() >= DELAY, "the fabric delays the request");
    assert!(dst.bytes(0, MIB) == pattern(MIB), "a read left alone lands");
    let late_before = a.dev.stats().late_pulls;

    a.qp.post_send_batch(&[read_at(&ah, qpn, 2, dst.sge(MIB, MIB as u32), remote)])
        .unwrap();
    cut(&a);
    stays_untouched(&dst, MIB);
    // The child did answer the abandoned read (so the watch above saw a real late
    // answer), and that answer was dropped here.
    assert!(
        a.dev.stats().late_pulls > late_before,
        "{:?}",
        a.dev.stats()
    );
    kid.say("stats");
    let stats = kid.line("STATS");
    assert!(field(&stats, "process_vm") >= 2, "{stats}");
    assert_eq!(field(&stats, "malformed"), 0, "{stats}");
    kid.say("quit");
    kid.wait(10);
}

#[test]
fn a_late_read_from_another_process_never_lands_after_the_qp_is_destroyed() {
    late_read_from_another_process_never_lands(58, destroy);
}

#[test]
fn a_late_read_from_another_process_never_lands_after_the_qp_is_reset() {
    late_read_from_another_process_never_lands(59, reset);
}

#[test]
fn a_late_read_from_another_process_never_lands_after_the_qp_moves_to_err() {
    late_read_from_another_process_never_lands(60, to_err);
}
