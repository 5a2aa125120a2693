//! The `hw_counters` of a device count what it really did: a SEND, an RDMA write and an
//! RDMA read between two QPs of `efa_0`, on a private sysfs tree of the `2nic` shape
//! (found through `SYSFS_PATH`, as `efa-sim run` sets it), show up as exactly their
//! work requests, bytes and packets; a UD datagram nobody receives on `efa_1` as a drop. One test per binary: the software device reads
//! `SYSFS_PATH` and `EFA_SIM_SHAPE` once, at its first use.

#[macro_use]
mod common;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use efa_typestate::*;

const SEND: u64 = 1000;
const WRITE: u64 = 3000;
const READ: u64 = 500;

fn counters(t: &Topology, device: &str) -> BTreeMap<String, u64> {
    t.read_counters(device).unwrap().into_iter().collect()
}

/// Waits until `device`'s counters differ from `before` by exactly `expected`; the files
/// are rewritten within the counters' lifespan (10 ms), allow a slow machine.
fn wait_for(t: &Topology, device: &str, before: &BTreeMap<String, u64>, expected: &[(&str, u64)]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = counters(t, device);
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(n, v)| now[*n] - before[*n] != *v)
            .map(|(n, v)| format!("{n}: {} (expected {v})", now[*n] - before[*n]))
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{device} after the traffic: {wrong:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn counters_grow_by_exactly_the_traffic_sent() {
    let shape = &efa_sim::shape::TWO_NIC;
    let cache = std::env::temp_dir().join(format!("efa-topo-counters-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let config = efa_sim::config::Config::from_vars(|k| {
        (k == "EFA_SIM_SHAPE").then(|| shape.name.to_string())
    })
    .unwrap();
    let sim = efa_sim::model::Sim::from_config(config);
    let tree = efa_sim::sysfs::Tree::for_devices(sim.devices(), Some(shape));
    let root = efa_sim::sysfs::prepare(&cache, &tree).unwrap();
    // Before the first verbs call: the software device reads both once.
    std::env::set_var("SYSFS_PATH", &root);
    std::env::set_var("EFA_SIM_SHAPE", shape.name);

    let topo = Topology::discover().unwrap();
    assert_eq!(topo.sysfs_root(), Some(root.as_path()));
    assert_eq!(topo.devices.len(), 2);
    let before = counters(&topo, "efa_0");
    assert_eq!(before.len(), efa_sim::sysfs::counters::PORT_COUNTERS.len());

    pair!(ctx, pd, cqa, cqb, a, b, to_b, _to_a);
    let src = pd.register(vec![7u8; 4096], AccessFlags::empty()).unwrap();
    let inbox = pd
        .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let target = write_target(&pd, 4096);
    let readable = pd
        .register(vec![9u8; 4096], AccessFlags::REMOTE_READ)
        .unwrap();
    let landing = pd
        .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 1, inbox.sge_all().unwrap());
    let mut s = SendBatch::<3>::new(&a);
    s.send(2, &to_b, src.sge(0, SEND).unwrap()).unwrap();
    s.write(
        3,
        &to_b,
        src.sge(0, WRITE).unwrap(),
        target.remote().slice(0, WRITE).unwrap(),
    )
    .unwrap();
    s.read(
        4,
        &to_b,
        landing.sge(0, READ).unwrap(),
        readable.remote().slice(0, READ).unwrap(),
    )
    .unwrap();
    // SAFETY: `src` is never written and `landing` not read before the three completions
    // are polled just below; every Mr lives to the end of the test.
    unsafe { a.post_send(&s) }.unwrap();
    for c in expect_n(&cqa, 3).into_iter().chain(expect_n(&cqb, 1)) {
        c.result().unwrap();
    }
    assert_eq!(
        &landing.as_slice()[..READ as usize],
        &[9u8; READ as usize][..]
    );

    // Both QPs are on efa_0: it sent and received every byte. One packet each way per
    // message (all below the 8 KiB MTU), plus the read's request and response.
    let (send, write, read) = (SEND, WRITE, READ);
    let expected = [
        ("send_wrs", 1),
        ("send_bytes", send),
        ("recv_wrs", 1),
        ("recv_bytes", send),
        ("rdma_write_wrs", 1),
        ("rdma_write_bytes", write),
        ("rdma_write_recv_bytes", write),
        ("rdma_read_wrs", 1),
        ("rdma_read_bytes", read),
        ("rdma_read_resp_bytes", read),
        ("tx_bytes", send + write + read),
        ("rx_bytes", send + write + read),
        ("tx_pkts", 4),
        ("rx_pkts", 4),
        ("rx_drops", 0),
    ];
    wait_for(&topo, "efa_0", &before, &expected);

    // A UD datagram to a QP of efa_1 with no receive posted: sent, then dropped there.
    let before = counters(&topo, "efa_1");
    assert!(
        before.values().all(|v| *v == 0),
        "efa_1 saw nothing yet: {before:?}"
    );
    let ctx1 = open(1);
    let pd1 = ctx1.alloc_pd().unwrap();
    let cq1 = ctx1.create_cq(CqOptions::new(1024)).unwrap();
    let ua = rts_qp(&pd1, &cq1, &QpConfig::ud(), QKEY_A);
    let ub = rts_qp(&pd1, &cq1, &QpConfig::ud(), QKEY_B);
    let to_ub = pd1.connect(&ub.endpoint()).unwrap();
    let mut s = SendBatch::<1>::new(&ua);
    s.send(5, &to_ub, Payload::Inline(b"datagram")).unwrap();
    // SAFETY: inline payload, copied during the call.
    unsafe { ua.post_send(&s) }.unwrap();
    expect_n(&cq1, 1)[0].result().unwrap();
    let expected = [
        ("send_wrs", 1),
        ("send_bytes", 8),
        ("tx_bytes", 8),
        ("tx_pkts", 1),
        ("recv_wrs", 0),
        ("rx_bytes", 0),
        ("rx_drops", 1),
    ];
    wait_for(&topo, "efa_1", &before, &expected);
    let _ = (&ctx, &cqb, &ub);
    std::fs::remove_dir_all(cache).unwrap();
}
