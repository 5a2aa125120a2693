//! Waiting for completions with a deadline, and what both ends of every test share:
//! how long a size runs and how its failures are worded.

use std::time::{Duration, Instant};

use efa::*;

use crate::test::Test;

/// Completions taken per poll.
pub const POLL: usize = 64;
/// A batch of polled completions.
pub type Polled = ArrayVec<Completion, POLL>;

/// How long one size runs: a number of messages or a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    /// Exactly this many measured messages.
    Count(u64),
    /// As many as fit in this time.
    Duration(Duration),
}

impl Amount {
    /// True while message `i` (0-based, after the warm-up) should still be started.
    pub fn more(&self, i: u64, start: Instant) -> bool {
        match *self {
            Amount::Count(n) => i < n,
            Amount::Duration(d) => start.elapsed() < d,
        }
    }
    /// A capacity hint for sample vectors.
    pub fn hint(&self) -> usize {
        match *self {
            Amount::Count(n) => n.min(1 << 20) as usize,
            Amount::Duration(_) => 1 << 16,
        }
    }
}

/// Where in a run an error happened: `test` at `size` bytes.
#[derive(Clone, Copy, Debug)]
pub struct At {
    /// The test.
    pub test: Test,
    /// The message size.
    pub size: usize,
}

impl At {
    /// `"<test> <size> B: <what>"`.
    pub fn err(&self, what: impl std::fmt::Display) -> String {
        format!("{} {} B: {what}", self.test.name(), self.size)
    }
    /// A completion's typed error, or `Ok`.
    pub fn check(&self, c: &Completion) -> Result<(), String> {
        c.result().map(drop).map_err(|e| self.err(e))
    }
}

/// Spins on `cq` until it returns at least one completion into `out` (cleared first), or
/// `timeout` passes with none (an error saying what was awaited).
pub fn wait_some<Q: CompletionQueue>(
    cq: &Q,
    out: &mut Polled,
    timeout: Duration,
    at: At,
    what: &str,
) -> Result<(), String> {
    out.clear();
    let mut spins = 0u32;
    let mut deadline = None;
    loop {
        if cq.poll(out).map_err(|e| at.err(e))? > 0 {
            return Ok(());
        }
        spins += 1;
        if spins % 1024 == 0 {
            let now = Instant::now();
            let d = *deadline.get_or_insert(now + timeout);
            if now >= d {
                return Err(at.err(format!("no {what} within {} s", timeout.as_secs_f64())));
            }
            if spins > 1 << 16 {
                std::thread::yield_now();
            }
        }
    }
}
