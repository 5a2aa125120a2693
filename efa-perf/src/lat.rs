//! The ping-pong tests (`send_lat`, `write_lat`): the client sends message `i` (SEND with
//! immediate `i`, or RDMA write with immediate `i` into the server's target), the server
//! answers with the same, and the client takes the round trip. Every message is stamped
//! with its sequence number and checked by its receiver: the stamp and immediate always,
//! the whole pattern for the first message, every 1024th and the last.

use std::time::{Duration, Instant};

use efa::*;

use crate::pattern;
use crate::poll::{wait_some, Amount, At, Polled};
use crate::res::Res;
use crate::test::Test;
use crate::wire::Ctl;

/// Ping-pongs before the measured ones.
pub const WARMUP: u64 = 16;

fn full_check(i: u64) -> bool {
    i % 1024 == 0
}

/// Posts message `i` of `size` bytes to the peer of QP 0 (checked and handed to the
/// provider at once, nothing staged).
fn post(res: &mut Res, test: Test, size: usize, i: u64, inline_max: usize) -> Result<()> {
    let (qp, peer, local) = (&mut res.qps[0], &res.peers[0], &res.local);
    let remote = res.remote;
    let imm = i as u32;
    let add = |s: &mut SendSession<'_>| -> Result<()> {
        match test {
            Test::WriteLat => {
                let remote = remote.ok_or(Error::NoSuchDevice)?.slice(0, size as u64)?;
                s.write_imm(i, peer, local.sge(0, size as u64)?, remote, imm)
            }
            _ if size <= inline_max => {
                s.send_imm(i, peer, Payload::Inline(&local.as_slice()[..size]), imm)
            }
            _ => s.send_imm(i, peer, local.sge(0, size as u64)?, imm),
        }
    };
    // SAFETY: `local` is rewritten (the next stamp) only after this send's completion
    // was polled; inline payloads are copied during the call.
    unsafe { qp.post_with(add) }
}

/// Checks the receive completion `c` of message `i` (and its data), then reposts its
/// receive. `last` forces the full check.
fn receive(
    res: &Res,
    at: At,
    c: &Completion,
    i: u64,
    last: bool,
    scratch: &mut [u8],
) -> Result<(), String> {
    let size = at.size;
    if c.imm() != Some(i as u32) {
        return Err(at.err(format!("message {i} arrived with immediate {:?}", c.imm())));
    }
    let n = if full_check(i) || last {
        size
    } else {
        pattern::stamp_len(size)
    };
    match &res.target {
        Some(t) if at.test == Test::WriteLat => t.copy_to_slice(0, &mut scratch[..n]),
        _ => {
            if c.byte_len() as usize != size {
                return Err(at.err(format!("{} bytes arrived, {size} were sent", c.byte_len())));
            }
            res.read_slot(0, c.wr_id() as u32, &mut scratch[..n])
        }
    }
    .map_err(|e| at.err(e))?;
    if n == size {
        pattern::check(&scratch[..size], size, Some(i)).map_err(|e| at.err(e))?;
    } else if pattern::read_stamp(&scratch[..n]) != i & mask(size) {
        return Err(at.err(format!(
            "message {i} carries stamp {}",
            pattern::read_stamp(&scratch[..n])
        )));
    }
    res.post_recv(0, c.wr_id() as u32).map_err(|e| at.err(e))
}

fn mask(size: usize) -> u64 {
    match pattern::stamp_len(size) {
        8 => u64::MAX,
        n => (1 << (8 * n)) - 1,
    }
}

/// The client side of one size: returns the measured round trips (ns) and the number
/// of messages sent (warm-up included).
pub fn client(
    res: &mut Res,
    at: At,
    amount: Amount,
    inline_max: usize,
    timeout: Duration,
    mut tick: impl FnMut(),
) -> Result<(Vec<u64>, u64), String> {
    let size = at.size;
    pattern::fill(res.local.as_mut_slice(), size);
    let mut scratch = vec![0u8; size];
    let mut rtts = Vec::with_capacity(amount.hint());
    let mut got = Polled::new();
    let start = Instant::now();
    let mut i = 0u64;
    loop {
        let measured = i.saturating_sub(WARMUP);
        if i >= WARMUP && !amount.more(measured, start) {
            return Ok((rtts, i));
        }
        let last = matches!(amount, Amount::Count(n) if measured + 1 == n);
        pattern::stamp(res.local.as_mut_slice(), size, i);
        let t0 = Instant::now();
        post(res, at.test, size, i, inline_max).map_err(|e| at.err(e))?;
        let (mut sent, mut answered) = (false, false);
        while !(sent && answered) {
            wait_some(&*res.cq, &mut got, timeout, at, "answer from the server")?;
            for c in &got {
                at.check(c)?;
                if c.opcode().is_recv() {
                    receive(res, at, c, i, last, &mut scratch)?;
                    answered = true;
                } else {
                    sent = true;
                }
            }
        }
        if i >= WARMUP {
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
        i += 1;
        if i % 256 == 0 {
            tick();
        }
    }
}

/// The server side of one size: answers every message until the client's `done` says
/// how many it sent; errors when a message or the count is wrong, or nothing happens
/// for `timeout`.
pub fn server(res: &mut Res, at: At, ctl: &mut Ctl) -> Result<(), String> {
    let size = at.size;
    let timeout = ctl.timeout();
    pattern::fill(res.local.as_mut_slice(), size);
    let mut scratch = vec![0u8; size];
    let mut got = Polled::new();
    // Messages received so far; whether our last answer is still in flight; a message
    // that arrived before that answer's completion (answered once it completes).
    let (mut next, mut answering, mut pending) = (0u64, false, None::<Completion>);
    let mut idle = Instant::now();
    let mut done_count = None;
    loop {
        got.clear();
        res.cq.poll(&mut got).map_err(|e| at.err(e))?;
        for c in &got {
            at.check(c)?;
            if c.opcode().is_recv() {
                pending = Some(*c);
            } else {
                answering = false;
            }
        }
        if !got.is_empty() {
            idle = Instant::now();
        }
        if let (Some(c), false) = (pending, answering) {
            pending = None;
            receive(res, at, &c, next, false, &mut scratch)?;
            pattern::stamp(res.local.as_mut_slice(), size, next);
            post(res, at.test, size, next, 0).map_err(|e| at.err(e))?;
            answering = true;
            next += 1;
        }
        if got.is_empty() && idle.elapsed() > Duration::from_millis(1) {
            if done_count.is_none() {
                if let Some(v) = ctl.try_recv()? {
                    done_count = Some(crate::session::done_count(&v)?);
                    idle = Instant::now();
                }
            }
            if let Some(n) = done_count {
                if n != next {
                    return Err(at.err(format!("the client sent {n} messages, {next} arrived")));
                }
                if !answering {
                    return Ok(());
                }
            }
            if idle.elapsed() > timeout {
                return Err(at.err(format!(
                    "no message from the client within {} s",
                    timeout.as_secs_f64()
                )));
            }
            std::thread::yield_now();
        }
    }
}
