//! The streaming tests (`send_bw`, `write_bw`, `read_bw`): the client keeps `depth` work
//! requests in flight on each QP, `batch` per doorbell, until the count or duration is
//! reached. The receiving side checks the data: the server the SENDs (each one's length,
//! the whole pattern of the first and every 1024th) and the RDMA-write target after the
//! size (whole pattern, untouched guard bytes after it), the client its RDMA-read
//! destination.

use std::time::{Duration, Instant};

use efa::*;
use serde_json::json;

use crate::pattern;
use crate::poll::{Amount, At, Polled};
use crate::res::{Res, GUARD};
use crate::test::Test;
use crate::wire::Ctl;

/// The most work requests per doorbell (`-b`).
pub const MAX_BATCH: usize = 256;
/// Low bits of a wr_id that carry the QP index.
const QP_BITS: u32 = 8;

/// What the client does per size.
pub struct Stream {
    /// Work requests per doorbell.
    pub batch: u32,
    /// Work requests in flight per QP.
    pub depth: u32,
    /// Largest SEND sent inline.
    pub inline_max: usize,
    /// Longest a wait for progress may take.
    pub timeout: Duration,
}

/// Posts `n` work requests (sequence numbers from `seq`) on QP `q` in one doorbell, each
/// checked and handed to the provider as it is added (nothing staged, as perftest posts).
fn post(res: &mut Res, at: At, q: usize, seq: u64, n: u32, inline_max: usize) -> Result<()> {
    let (qp, peer, local) = (&mut res.qps[q], &res.peers[q], &res.local);
    let remote = res.remote;
    let size = at.size as u64;
    let add = |s: &mut SendSession<'_>| -> Result<()> {
        for j in 0..n as u64 {
            let wr_id = ((seq + j) << QP_BITS) | q as u64;
            match at.test {
                Test::SendBw if at.size <= inline_max => {
                    let bytes = &local.as_slice()[..at.size];
                    s.send_imm(wr_id, peer, Payload::Inline(bytes), (seq + j) as u32)?
                }
                Test::SendBw => s.send_imm(wr_id, peer, local.sge(0, size)?, (seq + j) as u32)?,
                _ => {
                    let remote = remote.ok_or(Error::NoSuchDevice)?.slice(0, size)?;
                    let src = local.sge(0, size)?;
                    if at.test == Test::ReadBw {
                        s.read(wr_id, peer, src, remote)?;
                    } else {
                        s.write(wr_id, peer, src, remote)?;
                    }
                }
            }
        }
        Ok(())
    };
    // SAFETY: `local` is not written while the size runs (the pattern is written before
    // the first post, the read destination checked after the last completion).
    unsafe { qp.post_with(add) }
}

/// Prepares the client's local buffer for a size: the pattern to send or write, zeros
/// (and zero guard bytes) to read into.
pub fn prepare_client(res: &mut Res, at: At) {
    let buf = res.local.as_mut_slice();
    if at.test == Test::ReadBw {
        buf.fill(0);
    } else {
        pattern::fill(buf, at.size);
    }
}

/// The client side of one size: returns the messages completed and the time from the
/// first post to the last completion. Sends a heartbeat on `ctl` every third of the
/// timeout, so that a long size does not look like a dead client.
pub fn client(
    res: &mut Res,
    at: At,
    amount: Amount,
    s: &Stream,
    ctl: &mut Ctl,
    mut tick: impl FnMut(),
) -> Result<(u64, Duration), String> {
    let nq = res.qps.len();
    let mut in_flight = vec![0u32; nq];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut got = Polled::new();
    let start = Instant::now();
    let (mut progress, mut beat) = (start, start);
    let mut spins = 0u32;
    loop {
        let posting = match amount {
            Amount::Count(n) => posted < n,
            Amount::Duration(d) => start.elapsed() < d,
        };
        if posting {
            for (q, flight) in in_flight.iter_mut().enumerate() {
                let left = match amount {
                    Amount::Count(n) => n - posted,
                    Amount::Duration(_) => u64::MAX,
                };
                let room = s.depth - *flight;
                let n = (s.batch.min(room) as u64).min(left) as u32;
                // Full doorbells only, except for the last WRs of a count.
                if n == 0 || (n < s.batch && (n as u64) < left) {
                    continue;
                }
                post(res, at, q, posted, n, s.inline_max).map_err(|e| at.err(e))?;
                *flight += n;
                posted += n as u64;
            }
        } else if done == posted {
            let elapsed = start.elapsed();
            if at.test == Test::ReadBw {
                let got = &res.local.as_slice()[..at.size + GUARD];
                pattern::check(&got[..at.size], at.size, None).map_err(|e| at.err(e))?;
                pattern::check_untouched(&got[at.size..], at.size).map_err(|e| at.err(e))?;
            }
            return Ok((done, elapsed));
        }
        got.clear();
        if res.cq.poll(&mut got).map_err(|e| at.err(e))? > 0 {
            for c in &got {
                at.check(c)?;
                let q = (c.wr_id() & ((1 << QP_BITS) - 1)) as usize;
                in_flight[q.min(nq - 1)] -= 1;
                done += 1;
                if done % 1024 == 0 {
                    tick();
                }
            }
            progress = Instant::now();
            spins = 0;
            continue;
        }
        spins += 1;
        if spins % 256 == 0 {
            let now = Instant::now();
            if now - progress > s.timeout {
                return Err(at.err(format!(
                    "no completion within {} s ({done} of {posted} done)",
                    s.timeout.as_secs_f64()
                )));
            }
            if now - beat > s.timeout / 3 {
                ctl.send(&json!({ "beat": true }))?;
                beat = now;
            }
        }
    }
}

/// Prepares the server's buffers for a size: a zeroed RDMA-write target, the pattern
/// at the RDMA-read source.
pub fn prepare_server(res: &mut Res, at: At) -> Result<(), String> {
    res.zero_target().map_err(|e| at.err(e))?;
    if at.test == Test::ReadBw {
        pattern::fill(res.local.as_mut_slice(), at.size);
    }
    Ok(())
}

/// The server side of one size: for SENDs, receives and checks every message and
/// reposts its slot until the client's `done` count has arrived; for RDMA writes waits
/// for `done` and checks the target; for reads just waits.
pub fn server(res: &mut Res, at: At, ctl: &mut Ctl) -> Result<(), String> {
    let timeout = ctl.timeout();
    if at.test != Test::SendBw {
        crate::session::done_count(&ctl.expect("client")?)?;
        if let Some(t) = &res.target {
            let mut got = vec![0u8; at.size + GUARD];
            t.copy_to_slice(0, &mut got).map_err(|e| at.err(e))?;
            pattern::check(&got[..at.size], at.size, None).map_err(|e| at.err(e))?;
            pattern::check_untouched(&got[at.size..], at.size).map_err(|e| at.err(e))?;
        }
        return Ok(());
    }
    let mut scratch = vec![0u8; at.size];
    let mut got = Polled::new();
    let (mut received, mut expected) = (0u64, None);
    let mut idle = Instant::now();
    loop {
        got.clear();
        res.cq.poll(&mut got).map_err(|e| at.err(e))?;
        for c in &got {
            at.check(c)?;
            if !c.opcode().is_recv() {
                continue;
            }
            if c.byte_len() as usize != at.size {
                return Err(at.err(format!(
                    "{} bytes arrived, {} were sent",
                    c.byte_len(),
                    at.size
                )));
            }
            let q = res.qp_index(c.qp_num()).unwrap_or(0);
            let seq = c.imm().unwrap_or(0) as u64;
            if received == 0 || seq % 1024 == 0 {
                res.read_slot(q, c.wr_id() as u32, &mut scratch)
                    .map_err(|e| at.err(e))?;
                pattern::check(&scratch, at.size, None).map_err(|e| at.err(e))?;
            }
            res.post_recv(q, c.wr_id() as u32).map_err(|e| at.err(e))?;
            received += 1;
        }
        if !got.is_empty() {
            idle = Instant::now();
            continue;
        }
        if let Some(n) = expected {
            if received == n {
                return Ok(());
            }
            if received > n {
                return Err(at.err(format!("{received} messages arrived, the client sent {n}")));
            }
        } else if idle.elapsed() > Duration::from_micros(200) {
            if let Some(v) = ctl.try_recv()? {
                if v.get("beat").is_none() {
                    expected = Some(crate::session::done_count(&v)?);
                }
                idle = Instant::now();
            }
        }
        if idle.elapsed() > timeout {
            return Err(at.err(format!(
                "nothing from the client within {} s ({received} messages arrived)",
                timeout.as_secs_f64()
            )));
        }
    }
}
