//! Prints the vs-C table from the last `cargo bench -p efa-bench --bench vs_c` run:
//! case, ours ns, C ns, ours/C (criterion's median per unit of each side's fastest pass),
//! and ours/C of the passes' means.
//!
//! `vs-c-report [CRITERION_DIR]` (default: `target/criterion` of this workspace).
use std::path::PathBuf;
use std::process::ExitCode;

use efa_bench::report;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(report::default_criterion_dir);
    let rows = match report::rows(&dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vs-c-report: {e}");
            return ExitCode::FAILURE;
        }
    };
    if rows.iter().all(|r| r.ours.0.is_empty() && r.c.0.is_empty()) {
        eprintln!(
            "vs-c-report: no vs_c estimates under {} (run `cargo bench -p efa-bench --bench vs_c` first)",
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    print!("{}", report::table(&rows));
    println!(
        "(criterion medians per unit of each side's fastest of {} passes, both sides interleaved in the same run; \"of mean\": the ratio of the passes' means; HTML report with plots: {})",
        report::PASSES,
        dir.join("report/index.html").display()
    );
    ExitCode::SUCCESS
}
