//! The safe API against hand-written C, case by case, in one run on the same device,
//! queue pairs, CQs and memory (see the `efa-bench` crate docs; the C side is
//! csrc/vs_c.c, the Rust side src/ours.rs). Each case is a criterion group with two
//! functions, `ours` and `c`; only the calls of one side are timed (`iter_custom`), the
//! set-up (receives to post, completions to prepare) and clean-up (draining) are not.
//!
//! Print the table with `./scripts/bench-vs-c.sh` (this bench, then `vs-c-report`).
//!
//! What remains above 1.00: see RESULTS below, filled in from callgrind instruction
//! counts (`cargo run --release -p efa-bench --example callgrind`).
//!
//! RESULTS
use criterion::{criterion_group, criterion_main, Criterion};
use efa_bench::{run, Case, Rig, Side};

fn benches(c: &mut Criterion) {
    let rig = Rig::new().unwrap_or_else(|e| panic!("vs_c needs an EFA device (efa-sim): {e}"));
    let fw = rig.fw_ver();
    assert!(
        efa_sim_select::fw_matches_selection(&fw),
        "vs_c runs on an unexpected device: {fw}"
    );
    for case in Case::ALL {
        let mut g = c.benchmark_group(case.name());
        for side in Side::BOTH {
            g.bench_function(side.name(), |b| {
                b.iter_custom(|units| {
                    run(&rig, case, side, units)
                        .unwrap_or_else(|e| panic!("{} ({}): {e}", case.name(), side.name()))
                })
            });
        }
        g.finish();
    }
}

criterion_group!(name = group; config = Criterion::default().sample_size(30); targets = benches);
criterion_main!(group);
