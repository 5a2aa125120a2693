//! The direct backend against the provider on seeded random work (issue 26): each seed
//! makes one plan (batches of SENDs with one or two SGEs, inline SENDs, immediates, RDMA
//! writes, writes with immediate, reads, chunked writes, writes that fail with a status,
//! send and receive queues filled until they refuse); the plan runs through a provider
//! pair and a direct pair on efa-sim, in one process and with the receiver in a second
//! process, and everything the user sees must be the same: the requester's completions
//! (status, wr_id, opcode, length, QP numbers), the receiver's (the same, plus the
//! immediate, flags and sender; without wr_ids, since SRD does not order messages), the
//! messages that landed, and every byte of the write target and the read sink. The
//! queues are small, so every ring wraps many times per seed.
//!
//! CI runs [`SEEDS`] seeds in one process and [`PROCESS_SEEDS`] across two; a long run:
//! `EFA_DIFF_SEEDS=2000 cargo test --release -p efa-typestate --test direct_differential`
//! (the seeds then count from `EFA_DIFF_FIRST`, default 0).

#[macro_use]
mod common;
mod differential;

use differential::*;

/// Seeds run in one process by default.
const SEEDS: u64 = 48;
/// Seeds run across two processes by default.
const PROCESS_SEEDS: u64 = 8;

fn seeds(default: u64) -> std::ops::Range<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let first = var("EFA_DIFF_FIRST").unwrap_or(0);
    first..first + var("EFA_DIFF_SEEDS").unwrap_or(default)
}

#[test]
fn random_work_completes_alike_through_both_backends_in_one_process() {
    for seed in seeds(SEEDS) {
        let plan = Plan::new(seed);
        let provider = run_local(&plan, Backend::Provider);
        let direct = run_local(&plan, Backend::Direct);
        provider.assert_same(&direct, seed);
    }
}

#[test]
fn random_work_completes_alike_through_both_backends_between_two_processes() {
    for seed in seeds(PROCESS_SEEDS) {
        let plan = Plan::new(seed);
        let provider = run_remote(&plan, Backend::Provider);
        let direct = run_remote(&plan, Backend::Direct);
        provider.assert_same(&direct, seed);
    }
}

/// The receiver of [`run_remote`], in its own process (this binary re-run).
#[test]
fn receiver_process() {
    if std::env::var(CHILD_VAR).is_ok() {
        serve_remote();
    }
}

#[test]
fn the_plans_cover_every_step_kind() {
    // Over the CI seeds, every kind of step occurs (the plan generator is not stuck).
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..SEEDS {
        for b in &Plan::new(seed).steps {
            seen.extend(b.kinds());
        }
    }
    assert_eq!(seen.len(), KINDS, "{seen:?}");
}
