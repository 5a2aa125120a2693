//! Waiting for completions with a timeout: spin briefly, then sleep on the CQ's own
//! completion channel (or poll with short sleeps when it has none).
//!
//! The arm / re-poll / wait race is handled here, once: after arming, the CQ is polled
//! again before sleeping, so a completion that arrived between the last poll and the arm
//! is seen at once; one that arrives after the arm fires the channel. A stale event (the
//! CQ was armed, but the re-poll already found what it was for) only wakes the next wait
//! early, which polls and goes back to sleep.

use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use super::{Completion, CompletionQueue};
use crate::error::{Error, InvalidInput, Result};

/// How long to spin before sleeping: a round trip on the device is a few microseconds.
const SPIN: Duration = Duration::from_micros(20);
/// Longest sleep between polls of a CQ without a channel.
const MAX_NAP: Duration = Duration::from_millis(1);

pub(super) fn poll_until<Q: CompletionQueue + ?Sized, const N: usize>(
    cq: &Q,
    out: &mut ArrayVec<Completion, N>,
    n: usize,
    timeout: Duration,
) -> Result<usize> {
    poll_until_with(cq, out, n, timeout, |out| cq.poll(out))
}

/// [`poll_until`] for any entry type `T` that `poll` appends to `out` (a [`Completion`]
/// or a classic CQ's raw [`WorkCompletion`](super::WorkCompletion)).
pub(super) fn poll_until_with<Q: CompletionQueue + ?Sized, T, const N: usize>(
    cq: &Q,
    out: &mut ArrayVec<T, N>,
    n: usize,
    timeout: Duration,
    mut poll: impl FnMut(&mut ArrayVec<T, N>) -> Result<usize>,
) -> Result<usize> {
    if n > out.remaining_capacity() {
        return Err(InvalidInput::WaitBeyondCapacity {
            wanted: n,
            room: out.remaining_capacity() as u32,
        }
        .into());
    }
    if n == 0 && out.is_full() {
        return Ok(0);
    }
    let start = Instant::now();
    let deadline = start.checked_add(timeout);
    let left = |now: Instant| deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
    let mut got = 0;
    loop {
        got += poll(out)?;
        if got >= n {
            return Ok(got);
        }
        if start.elapsed() >= SPIN {
            break;
        }
        core::hint::spin_loop();
    }
    let mut nap = Duration::from_micros(10);
    loop {
        let now = Instant::now();
        let remaining = left(now);
        if remaining.is_zero() {
            return Err(Error::Timeout);
        }
        match cq.own_channel() {
            Some(ch) => {
                cq.request_notify()?;
                // Re-poll after arming: completions that raced the arm are seen now.
                got += poll(out)?;
                if got >= n {
                    return Ok(got);
                }
                ch.wait(remaining)?;
            }
            None => {
                std::thread::sleep(nap.min(remaining));
                nap = (nap * 2).min(MAX_NAP);
            }
        }
        got += poll(out)?;
        if got >= n {
            return Ok(got);
        }
    }
}
