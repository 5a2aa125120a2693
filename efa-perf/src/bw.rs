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
    let (qp, peer, local, gpu) = (&mut res.qps[q], &res.peers[q], &res.local, &res.gpu);
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
                    let src = match gpu {
                        Some(g) => g.src(size)?,
                        None => local.sge(0, size)?,
                    };
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
    // SAFETY: `local` (or the GPU buffer in its place) is not written while the size
    // runs (the pattern is written before the first post, the read destination checked
    // after the last completion).
    unsafe { qp.post_with(add) }
}

/// Prepares the client's local buffer for a size: the pattern to send or write, zeros
/// (and zero guard bytes) to read into; copied to the GPU buffer with `--mem gpu`.
pub fn prepare_client(res: &mut Res, at: At) -> Result<(), String> {
    let buf = res.local.as_mut_slice();
    if at.test == Test::ReadBw {
        buf.fill(0);
    } else {
        pattern::fill(buf, at.size);
    }
    load_gpu(res, at)
}

/// With `--mem gpu`, copies the host buffer's first bytes to the GPU buffer and zeroes
/// the host's: the GPU memory alone holds the pattern, so that a transfer from anywhere
/// else shows in the verification.
fn load_gpu(res: &mut Res, at: At) -> Result<(), String> {
    let Some(g) = res.gpu.as_mut() else {
        return Ok(());
    };
    let r = g.load(&res.local.as_slice()[..at.size + GUARD]);
    res.local.as_mut_slice().fill(0);
    r.map_err(|e| rail_err(res, at, e))
}

/// The client side of one size over `rails` (one [`Res`] per device; one without `-d`
/// lists), each rail's QPs kept `depth` deep at once: returns the messages completed on
/// each rail and the time from the first post to the last completion of any rail. With
/// [`Amount::Count`] every rail moves that many. Sends a heartbeat on `ctl` every third
/// of the timeout, so that a long size does not look like a dead client.
pub fn client(
    rails: &mut [Res],
    at: At,
    amount: Amount,
    s: &Stream,
    ctl: &mut Ctl,
    mut tick: impl FnMut(),
) -> Result<(Vec<u64>, Duration), String> {
    let mut in_flight: Vec<Vec<u32>> = rails.iter().map(|r| vec![0u32; r.qps.len()]).collect();
    let (mut posted, mut done) = (vec![0u64; rails.len()], vec![0u64; rails.len()]);
    let (mut all_posted, mut all_done) = (0u64, 0u64);
    let mut got = Polled::new();
    let start = Instant::now();
    let (mut progress, mut beat) = (start, start);
    let mut spins = 0u32;
    loop {
        let timed_out = matches!(amount, Amount::Duration(d) if start.elapsed() >= d);
        let left = |posted: u64| match amount {
            Amount::Count(n) => n - posted,
            Amount::Duration(_) if timed_out => 0,
            Amount::Duration(_) => u64::MAX,
        };
        let mut posting = false;
        for (r, res) in rails.iter_mut().enumerate() {
            posting |= left(posted[r]) > 0;
            for (q, flight) in in_flight[r].iter_mut().enumerate() {
                let left = left(posted[r]);
                let room = s.depth - *flight;
                let n = (s.batch.min(room) as u64).min(left) as u32;
                // Full doorbells only, except for the last WRs of a count.
                if n == 0 || (n < s.batch && (n as u64) < left) {
                    continue;
                }
                post(res, at, q, posted[r], n, s.inline_max).map_err(|e| rail_err(res, at, e))?;
                *flight += n;
                posted[r] += n as u64;
                all_posted += n as u64;
            }
        }
        if !posting && all_done == all_posted {
            let elapsed = start.elapsed();
            if at.test == Test::ReadBw {
                let mut copy = Vec::new();
                for res in rails.iter() {
                    let got = match &res.gpu {
                        Some(g) => {
                            copy.resize(at.size + GUARD, 0);
                            g.read(false, &mut copy).map_err(|e| rail_err(res, at, e))?;
                            &copy[..]
                        }
                        None => &res.local.as_slice()[..at.size + GUARD],
                    };
                    pattern::check(&got[..at.size], at.size, None)
                        .and_then(|()| pattern::check_untouched(&got[at.size..], at.size))
                        .map_err(|e| rail_err(res, at, e))?;
                }
            }
            return Ok((done, elapsed));
        }
        let mut polled = false;
        for (r, res) in rails.iter().enumerate() {
            got.clear();
            if res.cq.poll(&mut got).map_err(|e| rail_err(res, at, e))? == 0 {
                continue;
            }
            polled = true;
            let nq = in_flight[r].len();
            for c in &got {
                c.result().map_err(|e| rail_err(res, at, e))?;
                let q = (c.wr_id() & ((1 << QP_BITS) - 1)) as usize;
                in_flight[r][q.min(nq - 1)] -= 1;
                done[r] += 1;
                all_done += 1;
                if all_done % 1024 == 0 {
                    tick();
                }
            }
        }
        if polled {
            progress = Instant::now();
            spins = 0;
            continue;
        }
        spins += 1;
        if spins % 256 == 0 {
            let now = Instant::now();
            if now - progress > s.timeout {
                return Err(at.err(format!(
                    "no completion within {} s ({all_done} of {all_posted} done{})",
                    s.timeout.as_secs_f64(),
                    rail_counts(rails, &done, &posted)
                )));
            }
            if now - beat > s.timeout / 3 {
                ctl.send(&json!({ "beat": true }))?;
                beat = now;
            }
        }
    }
}

/// An error of `at` on the rail of `res`: with several rails it names the rail's device.
fn rail_err(res: &Res, at: At, e: impl std::fmt::Display) -> String {
    match &res.rail {
        Some(name) => at.err(format_args!("rail {name}: {e}")),
        None => at.err(e),
    }
}

/// With several rails, what each has done (`"; efa_0 5 of 8, efa_1 8 of 8"`).
fn rail_counts(rails: &[Res], done: &[u64], posted: &[u64]) -> String {
    if rails.len() < 2 {
        return String::new();
    }
    let each: Vec<String> = rails
        .iter()
        .zip(done.iter().zip(posted))
        .map(|(r, (d, p))| format!("{} {d} of {p}", r.rail.as_deref().unwrap_or("?")))
        .collect();
    format!("; {}", each.join(", "))
}

/// Prepares the server's buffers for a size: a zeroed RDMA-write target, the pattern
/// at the RDMA-read source.
pub fn prepare_server(res: &mut Res, at: At) -> Result<(), String> {
    res.zero_target().map_err(|e| rail_err(res, at, e))?;
    if at.test == Test::ReadBw {
        pattern::fill(res.local.as_mut_slice(), at.size);
    }
    match res.gpu.as_mut() {
        Some(_) if at.test == Test::ReadBw => load_gpu(res, at),
        Some(g) => g.zero_target().map_err(|e| rail_err(res, at, e)),
        None => Ok(()),
    }
}

/// The server side of one size over `rails`: for SENDs, receives and checks every
/// message and reposts its slot on each rail until the client's `done` counts (one per
/// rail) have arrived; for RDMA writes waits for `done` and checks each rail's target;
/// for reads just waits.
pub fn server(rails: &mut [Res], at: At, ctl: &mut Ctl) -> Result<(), String> {
    let timeout = ctl.timeout();
    if at.test != Test::SendBw {
        crate::rails::done_counts(&ctl.expect("client")?, rails.len())?;
        let mut got = vec![0u8; at.size + GUARD];
        for res in rails.iter() {
            let copied = match (&res.gpu, &res.target) {
                (Some(g), _) if at.test == Test::WriteBw => g.read(true, &mut got),
                (None, Some(t)) => t.copy_to_slice(0, &mut got).map_err(|e| e.to_string()),
                _ => continue,
            };
            copied
                .and_then(|()| pattern::check(&got[..at.size], at.size, None))
                .and_then(|()| pattern::check_untouched(&got[at.size..], at.size))
                .map_err(|e| rail_err(res, at, e))?;
        }
        return Ok(());
    }
    let mut scratch = vec![0u8; at.size];
    let mut got = Polled::new();
    let (mut received, mut expected) = (vec![0u64; rails.len()], None);
    let mut idle = Instant::now();
    loop {
        let mut polled = false;
        for (r, res) in rails.iter().enumerate() {
            got.clear();
            res.cq.poll(&mut got).map_err(|e| rail_err(res, at, e))?;
            polled |= !got.is_empty();
            for c in &got {
                c.result().map_err(|e| rail_err(res, at, e))?;
                if !c.opcode().is_recv() {
                    continue;
                }
                if c.byte_len() as usize != at.size {
                    let e = format!("{} bytes arrived, {} were sent", c.byte_len(), at.size);
                    return Err(rail_err(res, at, e));
                }
                let q = res.qp_index(c.qp_num()).unwrap_or(0);
                let seq = c.imm().unwrap_or(0) as u64;
                if received[r] == 0 || seq % 1024 == 0 {
                    res.read_slot(q, c.wr_id() as u32, &mut scratch)
                        .map_err(|e| e.to_string())
                        .and_then(|()| pattern::check(&scratch, at.size, None))
                        .map_err(|e| rail_err(res, at, e))?;
                }
                res.post_recv(q, c.wr_id() as u32)
                    .map_err(|e| rail_err(res, at, e))?;
                received[r] += 1;
            }
        }
        if polled {
            idle = Instant::now();
            continue;
        }
        if let Some(n) = &expected {
            if received == *n {
                return Ok(());
            }
            let over = rails
                .iter()
                .zip(received.iter().zip(n))
                .find(|(_, (g, w))| g > w);
            if let Some((res, (g, w))) = over {
                let e = format!("{g} messages arrived, the client sent {w}");
                return Err(rail_err(res, at, e));
            }
        } else if idle.elapsed() > Duration::from_micros(200) {
            if let Some(v) = ctl.try_recv()? {
                if v.get("beat").is_none() {
                    expected = Some(crate::rails::done_counts(&v, rails.len())?);
                }
                idle = Instant::now();
            }
        }
        if idle.elapsed() > timeout {
            let total: u64 = received.iter().sum();
            return Err(at.err(format!(
                "nothing from the client within {} s ({total} messages arrived)",
                timeout.as_secs_f64()
            )));
        }
    }
}
