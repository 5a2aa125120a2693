//! Instructions per unit of every vs_c case, every side, counted by callgrind: a number
//! that does not depend on what else the machine runs (unlike criterion's times).
//!
//! ```text
//! cargo run --release -p efa-bench --example callgrind [-- CASE...]
//! ```
//!
//! For each case and side it runs this program twice under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=<the side's function>`
//! (so only instructions executed inside `vs_ours_*` / `vs_c_*` and what they call, in
//! the calling thread, are counted), with `n` and `3n` units, and reports
//! `(count(3n) - count(n)) / 2n`: one-time costs (lazy binding, first-touch) cancel.
//! Needs `valgrind` on the PATH.
//!
//! Only the posting thread is counted. On efa-sim the C and provider sides run the
//! software device's work on it too (libefa's doorbell hands the WQEs to the device
//! model within the post), while the direct side's doorbell is a store that efa-sim's
//! watcher thread acts on, elsewhere (the children run with `mmio_trap=0,direct_calls=0`:
//! see [`without_trap`]; outside callgrind, efa-typestate calls
//! `efa_sim_direct_sq_doorbell` after the store and efa-sim consumes it on the storing
//! thread). So both ways are reported: as counted, and with the
//! device's work taken out of the C and provider counts (the inclusive cost of the calls
//! to efa-sim's `DeviceSq::process`, the device consuming the send queue, within the
//! counted function, read from callgrind's call records). `dev` is the device's share of
//! the C side's count.
use std::path::Path;
use std::process::{Command, ExitCode};

use efa_bench::{run, Case, Rig, Side};

fn units(case: Case) -> u64 {
    match case {
        Case::WriteBatch | Case::RoundTrip | Case::DrainExt | Case::DrainClassic => 16,
        Case::BuildBatch => 256,
        Case::Send | Case::Write | Case::SendInline | Case::Send2Sge => 1024,
        Case::PollEmptyExt | Case::PollEmptyClassic | Case::Endpoint => 4096,
    }
}

/// Runs one side of one case (`--child CASE SIDE UNITS`), to be counted.
fn child(case: &str, side: &str, n: &str) -> Result<(), String> {
    let case = Case::from_name(case).ok_or(format!("unknown case {case:?}"))?;
    let side = Side::from_name(side).ok_or(format!("unknown side {side:?}"))?;
    let n: u64 = n.parse().map_err(|_| format!("bad unit count {n:?}"))?;
    let mut rig = Rig::new(side.backend()).map_err(|e| format!("no EFA device (efa-sim): {e}"))?;
    run(&mut rig, case, side, n).map_err(|e| format!("{} ({}): {e}", case.name(), side.name()))?;
    Ok(())
}

/// The instructions callgrind collected (its `summary:` line), and the inclusive cost of
/// the calls to the device's entry points among them from outside the device (the cost
/// line after each `calls=` line of a `cfn=` naming [`DEVICE`] in a function whose `fn=`
/// does not; the output is written with uncompressed names).
fn collected(out: &Path) -> Result<(u64, u64), String> {
    let text = std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{}: no summary line", out.display()))?;
    // Calls into the device from outside it: its entry points call one another
    // (`process` calls `process_limited`), and a call's cost already includes its callees'.
    let (mut device, mut caller_is_device, mut callee_is_device, mut cost_next) =
        (0u64, false, false, false);
    for l in text.lines() {
        if cost_next {
            device += l
                .split_whitespace()
                .last()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            cost_next = false;
        } else if let Some(name) = l.strip_prefix("fn=") {
            caller_is_device = name.contains(DEVICE);
        } else if let Some(name) = l.strip_prefix("cfn=") {
            callee_is_device = name.contains(DEVICE);
        } else if l.starts_with("calls=") {
            cost_next = callee_is_device && !caller_is_device;
        }
    }
    Ok((total, device))
}

/// The child's `EFA_SIM_PROFILE`: the caller's, with efa-sim's doorbell trap (opt-in) and
/// its calls for direct consumers off (`direct_calls=0`: the call returns at once, so only
/// the direct side's own work is counted on its thread). The trap
/// decodes the faulting store from the signal context, and callgrind reports a fault at
/// the start of the translated block, not at the store (memcheck and `--tool=none` are
/// exact): efa-sim then opens the page, and the thread resumes at the block's start,
/// running its first instructions twice. With both off the doorbells are plain memory and
/// efa-sim's watcher thread consumes them, off the counted thread.
fn without_trap() -> String {
    match std::env::var("EFA_SIM_PROFILE") {
        Ok(p) if !p.trim().is_empty() => format!("{p},mmio_trap=0,direct_calls=0"),
        _ => "mmio_trap=0,direct_calls=0".to_string(),
    }
}

/// The device's entry points in efa-sim (consuming a send queue): `DeviceSq::process`
/// and the `process_*` functions it and the direct doorbell call.
const DEVICE: &str = "DeviceSq::process";

fn count(dir: &Path, case: Case, side: Side, n: u64) -> Result<(u64, u64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = dir.join(format!("{}.{}.{n}", case.name(), side.name()));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .env("EFA_SIM_PROFILE", without_trap())
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
        .arg("--compress-strings=no")
        .arg(format!("--toggle-collect={}", case.symbol(side)))
        .arg("-q")
        .arg(&exe)
        .args(["--child", case.name(), side.name(), &n.to_string()])
        .status()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    if !status.success() {
        return Err(format!(
            "{} ({}) failed under valgrind: {status}",
            case.name(),
            side.name()
        ));
    }
    collected(&out)
}

/// Instructions per unit of `side`, and the device's share of them.
fn per_unit(dir: &Path, case: Case, side: Side) -> Result<(f64, f64), String> {
    let n = units(case);
    let (one, dev_one) = count(dir, case, side, n)?;
    let (three, dev_three) = count(dir, case, side, 3 * n)?;
    let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / (2 * n) as f64;
    Ok((per(one, three), per(dev_one, dev_three)))
}

/// One case's counts: C, ours and direct as counted, and the device's share of C's and
/// ours'.
fn row(dir: &Path, case: Case) -> Result<[f64; 5], String> {
    let (c, c_dev) = per_unit(dir, case, Side::C)?;
    let (o, o_dev) = per_unit(dir, case, Side::Ours)?;
    let (d, _) = per_unit(dir, case, Side::Direct)?;
    Ok([c, o, d, c - c_dev, o - o_dev])
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return match args.get(1..4) {
            Some([c, s, n]) => match child(c, s, n) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("callgrind child: {e}");
                    ExitCode::FAILURE
                }
            },
            _ => {
                eprintln!("usage: callgrind --child CASE SIDE UNITS");
                ExitCode::from(2)
            }
        };
    }
    let mut cases = Vec::new();
    for a in &args {
        match Case::from_name(a) {
            Some(c) => cases.push(c),
            None => {
                let names: Vec<_> = Case::ALL.iter().map(|c| c.name()).collect();
                eprintln!("callgrind: unknown case {a:?} (cases: {})", names.join(" "));
                return ExitCode::from(2);
            }
        }
    }
    if cases.is_empty() {
        cases = Case::ALL.to_vec();
    }
    let dir = std::env::temp_dir().join(format!("efa-bench-callgrind-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("callgrind: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    println!("instructions per unit, posting thread; \"-dev\": without efa-sim's device work");
    println!(
        "{:<20} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11} {:>11}",
        "case", "C", "ours", "direct", "dev", "C-dev", "ours-dev", "direct/C-d", "direct/o-d"
    );
    let mut failed = false;
    for case in cases {
        match row(&dir, case) {
            Ok([c, o, d, c_nodev, o_nodev]) => println!(
                "{:<20} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>9.1} {:>9.1} {:>11.3} {:>11.3}",
                case.name(),
                c,
                o,
                d,
                c - c_nodev,
                c_nodev,
                o_nodev,
                d / c_nodev,
                d / o_nodev
            ),
            Err(e) => {
                eprintln!("callgrind: {e}");
                failed = true;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
