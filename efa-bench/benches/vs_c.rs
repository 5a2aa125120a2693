//! The safe API against hand-written C, case by case, in one run on the same device,
//! queue pairs, CQs and memory (see the `efa-bench` crate docs; the C side is
//! csrc/vs_c.c, the Rust side src/ours.rs). Each case is a criterion group with two
//! functions, `ours` and `c`; only the calls of one side are timed (`iter_custom`), the
//! set-up (receives to post, completions to prepare) and clean-up (draining) are not.
//!
//! Print the table with `./scripts/bench-vs-c.sh` (this bench, then `vs-c-report`).
//!
//! # Instructions per unit (callgrind)
//!
//! `cargo run --release -p efa-bench --example callgrind` counts the instructions each
//! side executes per unit (the provider's included, in the calling thread), which does
//! not depend on what else the machine runs. On efa-sim (x86-64, Rust 1.95, gcc 12 -O3),
//! before this crate's data path was tuned (efa-typestate as issue 10 left it) and after;
//! the C column varies by a few dozen between runs on the posting cases (efa-sim's own
//! path), so read `ours - C` from the same run:
//!
//! | case | C | ours before | ours/C | ours after | ours - C | ours/C |
//! |---|---:|---:|---:|---:|---:|---:|
//! | send_sge | 2902 | 3157 | 1.088 | 2928 | +1 | 1.000 |
//! | write | 2657 | 2951 | 1.111 | 2688 | +19 | 1.007 |
//! | send_inline | 2791 | 3007 | 1.077 | 2831 | +15 | 1.005 |
//! | send_2sge | 3338 | 3624 | 1.086 | 3416 | +43 | 1.013 |
//! | write_batch32 | 79823 | 86690 | 1.086 | 82026 | +2563 | 1.032 |
//! | round_trip16 | 57537 | 61920 | 1.076 | 60256 | +2333 | 1.040 |
//! | poll_empty_ext | 69 | 113 | 1.638 | 69 | 0 | 1.000 |
//! | poll_empty_classic | 72 | 127 | 1.764 | 71 | -1 | 0.986 |
//! | drain32_ext | 8846 | 10263 | 1.160 | 9495 | +649 | 1.073 |
//! | drain32_classic | 5225 | 6505 | 1.245 | 6471 | +1246 | 1.238 |
//! | build_batch32 | 1118 | 6446 | 5.766 | 1706 | +588 | 1.526 |
//! | endpoint_codec | 22 | 83 | 3.773 | 47 | +25 | 2.136 |
//!
//! What was fixed (efa-typestate): small functions of other modules called through the
//! GOT (no `#[inline]`); one out-of-line `SendBatch::add` for every operation and
//! payload kind (now specialised per call site, so the checks' matches fold away); the
//! remote range kept big-endian and unaligned inside every work request; `post_send`
//! loading all ten provider pointers up front and spilling them (now read where called,
//! as C's helpers read `qp->wr_*`), and looping over a one-WR batch; the empty poll of
//! both CQ kinds out of line (now inlined, as `ibv_start_poll`/`ibv_poll_cq` are); every
//! extended-CQ entry kept in registers across the provider calls and copied (now read
//! into its slot), and two `Option` tests per entry for efadv fields.
//!
//! What remains, and what it buys:
//!
//! * Single posts (+1 to +43): the checks (one compare per rule: batch capacity and
//!   queue depth, `wr_id` bit 63, the PD of the SGE and of the peer, the RDMA range
//!   and `max_rdma_size`, the SGE's range in its registration) and the dispatch on the
//!   operation and payload kind at post. The C side checks nothing. Two SGEs: the
//!   `SgeList` copies them and checks they share one PD.
//! * Batches (+18 per WR to build, +80 per WR built and posted): each work request is
//!   stored (96 bytes: operation and remote range, destination and its PD, payload and
//!   its PD) and read back by `post_send`, which dispatches on its kind; C writes each
//!   one straight to the provider (`write_batch32`) or stores 64 bytes after fewer
//!   checks (`build_batch32`). It buys a batch checked as a whole before the device
//!   sees it: an all-or-nothing post, and a typed error naming the bad value and limit.
//! * `round_trip16`: the same for 16 receives (their chain built on the stack, as C
//!   does) and 16 sends, plus the drain below.
//! * `drain32_ext` (+20 per completion): a `Completion` is a 64-byte value, zeroed and
//!   then filled, in a capacity-checked `ArrayVec`; C fills a 44-byte struct.
//! * `drain32_classic` (+39 per completion): `ibv_poll_cq` fills `ibv_wc`s, which are
//!   then converted into `Completion`s (a copy, the stale send-side fields cleared,
//!   the flags masked); C keeps the `ibv_wc`s. One completion type for both CQ kinds
//!   (leases, `result()`, no stale fields); on the data path use `ExtCq`, which reads
//!   straight into the `Completion`.
//! * `endpoint_codec` (+25): encoding compiles to what C does (one 16-byte move, two
//!   byte swaps); decoding returns a `Result<EndpointInfo>`, in which the align-1 wire
//!   struct (zerocopy's, usable inside other wire structs) sits at byte 1, so its GID
//!   is moved in odd-sized pieces, which also defeats store-to-load forwarding (the
//!   time ratio is worse than the instruction ratio). It runs once per peer, on the
//!   control path.
//!
//! On efa-sim the provider costs 2,600 to 2,900 instructions per post, so the time
//! ratios criterion reports there are closer to 1 than on EFA hardware, where a post
//! costs a few hundred: the `ours - C` column is what carries over.
use criterion::{criterion_group, criterion_main, Criterion};
use efa_bench::{run, Case, Rig, Side};

fn benches(c: &mut Criterion) {
    let mut rig = Rig::new().unwrap_or_else(|e| panic!("vs_c needs an EFA device (efa-sim): {e}"));
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
                    run(&mut rig, case, side, units)
                        .unwrap_or_else(|e| panic!("{} ({}): {e}", case.name(), side.name()))
                })
            });
        }
        g.finish();
    }
}

criterion_group!(name = group; config = Criterion::default().sample_size(30); targets = benches);
criterion_main!(group);
