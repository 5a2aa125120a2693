//! Multi-rail transfers between two processes on efa-sim with 4 devices: the parent is
//! the target (its `RailNotices` told once), the initiator is this binary re-run for
//! `initiator_process`; also with loss, duplication and reordering on the fabric.

mod common;
use std::time::Duration;

use common::rails::*;
use common::*;
use efa_typestate::*;

const ENV_RAILS: &str = "EFA_TS_RAILS";
const TWO_PROC_LEN: usize = 16 << 20;

fn two_processes(test: &str) {
    rails!(Backend::Auto, QpConfig::srd(), TWO_PROC_LEN => pds, qa, qb, cqb, nmrs, src, dst, dst_mrs, rails, srcs, remotes);
    notices!(qb, cqb, nmrs => notices);
    let _ = (&rails, src, &srcs);
    // The child's RDMA needs an AH for its GID on each device: on one host, ours.
    let wire: Vec<String> = (0..RAILS)
        .map(|i| {
            format!(
                "{}:{}",
                hex(&qb[i].endpoint().to_bytes()),
                hex(&remotes[i].to_bytes())
            )
        })
        .collect();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "initiator_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EFA_TS_CHILD", "initiator_process")
        .env(ENV_RAILS, wire.join(","))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the initiator");
    let landed = notices.wait(42, Duration::from_secs(60), |r, c| {
        panic!("rail {r}: {c:?}")
    });
    // Read before the initiator has finished: the notices alone say the bytes are there.
    let got = dst.read();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{test}: initiator {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{text}"
    );
    assert_eq!(landed.unwrap(), Landed { id: 42, notices: 4 });
    let want = pattern(TWO_PROC_LEN, 0x5a);
    let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
    assert_eq!(wrong, 0, "bytes not there when the notices said so");
    drop(dst_mrs);
    let _ = &qa;
}

#[test]
fn two_processes_over_four_rails() {
    in_child("two_processes_over_four_rails", &[DEVICES], || {
        two_processes("two_processes_over_four_rails")
    });
}

#[test]
fn two_processes_over_four_rails_with_loss_and_reordering() {
    in_child(
        "two_processes_over_four_rails_with_loss_and_reordering",
        &[
            DEVICES,
            ("EFA_SIM_FAULTS", "seed=11,loss=0.02,reorder=0.3,dup=0.01"),
        ],
        || two_processes("two_processes_over_four_rails_with_loss_and_reordering"),
    );
}

#[test]
fn initiator_process() {
    if std::env::var("EFA_TS_CHILD").as_deref() != Ok("initiator_process") {
        return; // only meaningful when started by the two-process tests
    }
    let wire = std::env::var(ENV_RAILS).unwrap();
    let targets: Vec<(EndpointInfo, RemoteBuffer)> = wire
        .split(',')
        .map(|r| {
            let (ep, rb) = r.split_once(':').unwrap();
            (
                EndpointInfo::parse(&unhex(ep)).unwrap(),
                RemoteBuffer::parse(&unhex(rb)).unwrap(),
            )
        })
        .collect();
    assert_eq!(targets.len(), RAILS);
    let ctxs: Vec<Context> = (0..RAILS).map(open).collect();
    let pds: Vec<_> = ctxs.iter().map(|c| c.alloc_pd().unwrap()).collect();
    let cqs: Vec<_> = ctxs
        .iter()
        .map(|c| c.create_ext_cq(CqOptions::new(1024)).unwrap())
        .collect();
    let qps: Vec<_> = (0..RAILS)
        .map(|i| rts_qp(&pds[i], &cqs[i], &QpConfig::srd(), QKEY_A))
        .collect();
    let peers: Vec<_> = (0..RAILS)
        .map(|i| pds[i].connect(&targets[i].0).unwrap())
        .collect();
    let src = SharedHost::new(pattern(TWO_PROC_LEN, 0x5a));
    let mrs: Vec<_> = pds
        .iter()
        .map(|pd| {
            pd.register_device_address(src, AccessFlags::empty())
                .unwrap()
        })
        .collect();
    let srcs: Vec<&dyn MemoryRegion> = mrs.iter().map(|m| m as &dyn MemoryRegion).collect();
    let remotes: Vec<RemoteBuffer> = targets.iter().map(|t| t.1).collect();
    let mut rails = Rails::new();
    for i in 0..RAILS {
        rails.push(&qps[i], &cqs[i], &peers[i]).unwrap();
    }
    let opts = RailTransfer::new(42, Duration::from_secs(50)).chunk_size(256 << 10);
    let report = rails
        .write_all(&srcs, &remotes, opts, |r, c| panic!("rail {r}: {c:?}"))
        .unwrap_or_else(|e| panic!("transfer failed: {e}"));
    assert_eq!(report.bytes, TWO_PROC_LEN as u64);
    assert_eq!(report.notices, 4);
}
