//! Instructions per chunk of a multi-rail transfer (`Rails::write_all` over 4 rails)
//! against `Qp::write_all` on one rail, counted by callgrind on the posting thread:
//!
//! ```text
//! cargo run --release -p efa-bench --example rail_callgrind [-- provider|direct]
//! ```
//!
//! Each side runs in a child under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=*count_<side>*`, with
//! `n` and `3n` chunks of 4 KiB (efa-sim with 4 devices, `max_rdma_size=4096`), and the
//! report is `(count(3n) - count(n)) / 2n`, each count the fewest of five runs: one-time
//! costs cancel, and the fewest leaves out most of the polls made while waiting, whose
//! number depends on timing. With the provider backend the count includes efa-sim's
//! device work (run within the post) on both sides; with the direct one the device's work
//! runs on efa-sim's watcher thread (the children run with `mmio_trap=0,direct_calls=0`, as in
//! efa-bench's callgrind example: callgrind's fault contexts are not exact enough for
//! efa-sim's doorbell trap), so the counts are the library's own.
use std::process::{Command, ExitCode};
use std::time::Duration;

use efa::*;

const CHUNK: usize = 4096;
const RAILS: usize = 4;
const UNITS: u64 = 256;
/// Counts taken of each side and size; the fewest is reported.
const RUNS: usize = 5;

/// Runs one side with `chunks` chunks.
fn child(side: &str, chunks: u64, backend: Backend) -> Result<(), String> {
    let e = |e: Error| e.to_string();
    let len = chunks as usize * CHUNK;
    let ctxs = (0..RAILS)
        .map(|i| {
            DeviceList::new()?
                .efa()
                .nth(i)
                .ok_or(Error::NoSuchDevice)?
                .open()
        })
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let pds = ctxs
        .iter()
        .map(|c| c.alloc_pd())
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let cq_opts = CqOptions::new(1024).backend(backend);
    let cqs = ctxs
        .iter()
        .map(|c| c.create_ext_cq(cq_opts))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let cqbs = ctxs
        .iter()
        .map(|c| c.create_ext_cq(cq_opts))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let cfg = QpConfig::srd().backend(backend);
    let qa = (0..RAILS)
        .map(|i| pds[i].create_qp(&cqs[i], &cqs[i], &cfg)?.prepare(1, None))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let qb = (0..RAILS)
        .map(|i| pds[i].create_qp(&cqbs[i], &cqbs[i], &cfg)?.prepare(2, None))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let peers = (0..RAILS)
        .map(|i| pds[i].connect(&qb[i].endpoint()))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let _back = (0..RAILS)
        .map(|i| pds[i].connect(&qa[i].endpoint()))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    // Every rail's source and target are its own memory: the counts do not depend on it.
    let srcs = pds
        .iter()
        .map(|pd| pd.register(vec![7u8; len], AccessFlags::empty()))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let dsts = pds
        .iter()
        .map(|pd| pd.register_remote_write(vec![0u8; len], AccessFlags::empty()))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    // The notices (write-with-immediate) consume receives at the target.
    let notice_mrs = pds
        .iter()
        .map(|pd| pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE))
        .collect::<Result<Vec<_>>>()
        .map_err(e)?;
    let mut notices = RailNotices::new();
    for i in 0..RAILS {
        let sge = notice_mrs[i].sge(0, 0).map_err(e)?;
        notices.push(&qb[i], &cqbs[i], sge, 4).map_err(e)?;
    }
    let timeout = Duration::from_secs(600);
    match side {
        "write_all" => count_write_all(
            &qa[0],
            &cqs[0],
            &peers[0],
            &srcs[0],
            dsts[0].remote(),
            timeout,
        ),
        "rails" => {
            let mut rails = Rails::new();
            for i in 0..RAILS {
                rails.push(&qa[i], &cqs[i], &peers[i]).map_err(e)?;
            }
            let src: Vec<&dyn MemoryRegion> = srcs.iter().map(|m| m as &dyn MemoryRegion).collect();
            let remotes: Vec<RemoteBuffer> = dsts.iter().map(|m| m.remote()).collect();
            count_rails(&rails, &src, &remotes, timeout)
        }
        other => Err(format!("unknown side {other:?}")),
    }
}

#[inline(never)]
fn count_write_all<P, Q: CompletionQueue, X, R: MemoryRegion>(
    qp: &Qp<P, Rts>,
    cq: &Q,
    peer: &Peer<X>,
    src: &R,
    remote: RemoteBuffer,
    timeout: Duration,
) -> Result<(), String> {
    qp.write_all(cq, peer, src, remote, Transfer::new(timeout), |_| {})
        .map(drop)
        .map_err(|e| e.to_string())
}

#[inline(never)]
fn count_rails<P, Q: CompletionQueue, X>(
    rails: &Rails<'_, P, Q, X>,
    src: &[&dyn MemoryRegion],
    remotes: &[RemoteBuffer],
    timeout: Duration,
) -> Result<(), String> {
    let opts = RailTransfer::new(1, timeout).chunk_size(CHUNK as u32);
    rails
        .write_all(src, remotes, opts, |_, _| {})
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Instructions callgrind counted for `side` with `chunks` chunks.
fn count(side: &str, chunks: u64, backend: &str) -> Result<u64, String> {
    let out = std::env::temp_dir().join(format!(
        "rail-callgrind-{side}-{chunks}-{}.out",
        std::process::id()
    ));
    let status = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--collect-atstart=no",
            &format!("--toggle-collect=*count_{side}*"),
            &format!("--callgrind-out-file={}", out.display()),
        ])
        .arg(std::env::current_exe().map_err(|e| e.to_string())?)
        .args(["--child", side, &chunks.to_string(), backend])
        .env("EFA_SIM_DEVICES", RAILS.to_string())
        // No doorbell trap and no direct calls under callgrind (see efa-bench's callgrind
        // example).
        .env(
            "EFA_SIM_PROFILE",
            "max_rdma_size=4096,mmio_trap=0,direct_calls=0",
        )
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    if !status.status.success() {
        return Err(format!(
            "{side}: {}",
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&out);
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{side}: no summary line"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let backend = match args.get(3).map(String::as_str) {
            Some("direct") => Backend::Direct,
            _ => Backend::Provider,
        };
        let chunks = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(UNITS);
        return match child(&args[1], chunks, backend) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let backend = args.first().map_or("provider", String::as_str).to_string();
    let mut per_chunk = Vec::new();
    for side in ["write_all", "rails"] {
        // The fewest of RUNS counts: polls made while waiting (for the tail's notices,
        // for a device thread) only ever add, and how many there are depends on timing.
        let least = |n: u64| -> Result<u64, String> {
            (0..RUNS).try_fold(u64::MAX, |m, _| Ok(m.min(count(side, n, &backend)?)))
        };
        let run = || -> Result<f64, String> {
            let (one, three) = (least(UNITS)?, least(3 * UNITS)?);
            Ok(three.saturating_sub(one) as f64 / (2 * UNITS) as f64)
        };
        match run() {
            Ok(v) => {
                println!("{side:>10} ({backend}): {v:.0} instructions per chunk");
                per_chunk.push(v);
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "multi-rail over {RAILS} rails / write_all on one: {:.3}",
        per_chunk[1] / per_chunk[0]
    );
    ExitCode::SUCCESS
}
