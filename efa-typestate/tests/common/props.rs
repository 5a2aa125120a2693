//! Shared pieces of the property tests (`props_wire.rs`, `props_ranges.rs`): a runner
//! with a bounded number of cases and strategies that favour the edges of the integers.

use efa_typestate::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseResult, TestRunner};

/// Cases per property: enough to hit the edges the strategies favour, few enough that
/// the whole file runs in a few seconds.
pub const CASES: u32 = 256;

/// Runs `test` on `CASES` values of `strategy`; on failure, panics with the minimal
/// input proptest shrank to.
pub fn check<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> TestCaseResult) {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("property {name} failed: {e}");
    }
}

pub fn invalid<T>(i: InvalidInput) -> Result<T> {
    Err(Error::Invalid(i))
}

/// A length as the 32-bit error fields carry it.
pub fn sat(len: u64) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Any `u64`, with the edges favoured: small values, values next to `u64::MAX`, powers
/// of two and their neighbours.
pub fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => any::<u64>(),
        3 => 0u64..=80,
        2 => (u64::MAX - 80)..=u64::MAX,
        2 => (0u32..64, -2i64..=2).prop_map(|(s, d)| (1u64 << s).wrapping_add_signed(d)),
    ]
}

/// Any `usize`, with the edges favoured, including the products with 2 and 8 (element
/// sizes) that just wrap.
pub fn edge_usize() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0usize..=80,
        2 => any::<usize>(),
        1 => (usize::MAX - 80)..=usize::MAX,
        1 => (1usize..=8, -2isize..=2).prop_map(|(d, k)| (usize::MAX / d).wrapping_add_signed(k)),
        1 => (0u32..usize::BITS, -2isize..=2).prop_map(|(s, k)| (1usize << s).wrapping_add_signed(k)),
    ]
}

/// An address and a length whose sum fits 64 bits (a length that would not is cut to
/// the largest that does, so `end == u64::MAX` comes up often).
pub fn fitting_range() -> impl Strategy<Value = (u64, u64)> {
    (edge_u64(), edge_u64()).prop_map(|(addr, len)| (addr, len.min(u64::MAX - addr)))
}
