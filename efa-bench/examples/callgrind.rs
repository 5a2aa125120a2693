//! Instructions per unit of every vs_c case, both sides, counted by callgrind: a number
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
    let mut rig = Rig::new().map_err(|e| format!("no EFA device (efa-sim): {e}"))?;
    run(&mut rig, case, side, n).map_err(|e| format!("{} ({}): {e}", case.name(), side.name()))?;
    Ok(())
}

/// The instructions callgrind collected, from its `summary:` line.
fn collected(out: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(out).map_err(|e| format!("{}: {e}", out.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{}: no summary line", out.display()))
}

fn count(dir: &Path, case: Case, side: Side, n: u64) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = dir.join(format!("{}.{}.{n}", case.name(), side.name()));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
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

fn per_unit(dir: &Path, case: Case, side: Side) -> Result<f64, String> {
    let n = units(case);
    let (one, three) = (count(dir, case, side, n)?, count(dir, case, side, 3 * n)?);
    Ok(three.saturating_sub(one) as f64 / (2 * n) as f64)
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
    println!(
        "{:<20} {:<32} {:>11} {:>11} {:>9} {:>7}",
        "case", "unit", "ours Ir", "C Ir", "ours-C", "ours/C"
    );
    let mut failed = false;
    for case in cases {
        match (
            per_unit(&dir, case, Side::Ours),
            per_unit(&dir, case, Side::C),
        ) {
            (Ok(o), Ok(c)) => println!(
                "{:<20} {:<32} {:>11.1} {:>11.1} {:>9.1} {:>7.3}",
                case.name(),
                case.describe(),
                o,
                c,
                o - c,
                o / c
            ),
            (Err(e), _) | (_, Err(e)) => {
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
