//! The safe API against hand-written C, on the same queue pairs, CQs and memory.
//!
//! * [`rig`]: the device objects, made once through the safe API, and their raw views;
//! * [`ours`]: each case written with the safe API; csrc/vs_c.c: the same case in C
//!   with rdma-core's inline helpers ([`ffi`] declares it);
//! * [`cases`]: the case list and the runner the bench and the counter share;
//! * [`report`]: the table of the last criterion run.
//!
//! Commands (see the README's "Benchmarks" and `benches/vs_c.rs` for what remains
//! above 1.00 and why):
//!
//! ```text
//! ./scripts/bench-vs-c.sh                              # criterion run + the table
//! cargo run --release -p efa-bench --example callgrind # instructions per unit, both sides
//! ```
//!
//! This package is part of the workspace only (`publish = false`): it compiles C.

pub mod cases;
pub mod ffi;
pub mod ours;
pub mod report;
pub mod rig;

pub use cases::{run, Case, Side};
pub use rig::Rig;
