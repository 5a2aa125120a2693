//! [`Rails::write_all`]: the chunks of one buffer posted over every rail within each
//! rail's credits, the notices last, and every rail's CQ polled until nothing is in
//! flight (see the [module docs](super) for why a return means the device is done).
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use super::{
    device_name, Notice, RailError, RailReport, RailTally, RailTransfer, Rails, MAX_RAILS,
    MAX_TRANSFER_ID,
};
use crate::cq::{Completion, CompletionQueue};
use crate::error::{Error, InvalidInput};
use crate::mr::{MemoryRegion, RemoteBuffer};
use crate::qp::transfer::{far, BATCH};
use crate::qp::QpStateKind;
use crate::wr::{Dest, Origin, Payload, RdmaChunks, SendBatch, SendOp, SendWr};

/// Bits of a chunk `wr_id` above the chunk index that hold the rail (MAX_RAILS ≤ 64).
const RAIL_BITS: u32 = 6;

/// Where one rail stands in a transfer.
struct RailRun<'a> {
    /// This rail's view of the buffer (its lkey, PD and remote key).
    chunks: RdmaChunks<'a>,
    dest: Dest,
    qpn: u32,
    /// The first `wr_id` of this rail: the transfer's base plus the rail in the upper bits.
    id_base: u64,
    /// Chunks it may have in flight: its send queue depth and its share of its CQ.
    window: u64,
    posted: u64,
    done: u64,
    /// Chunks completed without error.
    chunks_ok: u64,
    /// The index of its notice chunk until that is posted.
    notice: Option<u64>,
    /// When its chunks still in flight are cut off by a reset (set once posting stops).
    cut_off: Option<Instant>,
}

impl RailRun<'_> {
    fn in_flight(&self) -> u64 {
        self.posted.saturating_sub(self.done)
    }

    /// What rail `rail` moved: whole chunks but for the transfer's last, which may be
    /// short (counted here, once, rather than per completion). That chunk is the notice
    /// of rail `notices - 1`, posted only after all of that rail's other chunks
    /// succeeded; it succeeded too when it was posted and every completion the rail
    /// counted succeeded (a reset that cut chunks off counts them done, not succeeded).
    fn tally(&self, rail: usize, plan: &Plan) -> RailTally {
        let whole = self.chunks_ok.saturating_mul(u64::from(plan.chunk));
        let has_last = plan.notices > 0 && rail == (plan.notices as usize).wrapping_sub(1);
        let last_ok = has_last && self.notice.is_none() && self.chunks_ok == self.done;
        let short = if last_ok {
            u64::from(plan.chunk).saturating_sub(plan.chunk_len(plan.total.saturating_sub(1)))
        } else {
            0
        };
        RailTally {
            chunks: self.chunks_ok,
            bytes: whole.saturating_sub(short),
        }
    }
}

/// The shape of one transfer.
#[derive(Clone, Copy)]
struct Plan {
    /// Bytes.
    len: u64,
    chunk: u32,
    /// Chunks, the notices included.
    total: u64,
    /// Chunks before the notices: handed to any rail with room.
    bulk: u64,
    notices: u32,
    /// The first reserved `wr_id`, and how many were reserved (`rails << shift`).
    base: u64,
    span: u64,
    /// Bits of the chunk index in a `wr_id`.
    shift: u32,
}

impl Plan {
    /// Bytes of chunk `index` (the last one may be short).
    fn chunk_len(&self, index: u64) -> u64 {
        let start = index.saturating_mul(u64::from(self.chunk));
        self.len.saturating_sub(start).min(u64::from(self.chunk))
    }
}

/// What one transfer ended with: the failing rail (if any) and the error, or success,
/// plus a panic of `others` to resume once nothing is in flight.
struct Outcome {
    first: Option<(Option<usize>, Error)>,
    panic: Option<Box<dyn core::any::Any + Send + 'static>>,
}

impl<'a, P, Q: CompletionQueue, X> Rails<'a, P, Q, X> {
    /// RDMA-writes the target's buffer, `remote[i]` being its registration on rail `i`,
    /// from the local buffer, `src[i]` being its registration on rail `i`'s PD (from
    /// [`RailTransfer::local_offset`]); every rail's registration and remote buffer must
    /// have the same length ([`InvalidInput::RailMismatch`]) and both lists one entry per
    /// rail ([`InvalidInput::RailListLength`]).
    ///
    /// Chunks of [`RailTransfer::chunk_size`] go to the rails with free credits
    /// (round-robin); the last chunk of each rail is a write-with-immediate carrying
    /// the [`Notice`], posted once the rail's other chunks completed. Polls every rail's
    /// CQ; completions that are not the transfer's go to `others` with the index of the
    /// rail whose CQ gave them. Returns what each rail moved, or a [`RailError`] naming
    /// the rail that failed (or, on timeout, the one with the most in flight) and what
    /// landed per rail. It returns (or unwinds, if `others` panics) only when no chunk
    /// is in flight: after an error nothing more is posted, the chunks in flight get up
    /// to the timeout again, and the rails whose chunks are still missing then are reset
    /// (their QPs must be brought back with [`Qp::reset`](crate::Qp::reset) and
    /// [`prepare`](crate::Qp::prepare) before they post again).
    pub fn write_all<'s, R: MemoryRegion + ?Sized>(
        &'s self,
        src: &[&'s R],
        remote: &[RemoteBuffer],
        opts: RailTransfer,
        mut others: impl FnMut(usize, Completion),
    ) -> Result<RailReport, RailError> {
        let mut runs = ArrayVec::<RailRun<'s>, MAX_RAILS>::new();
        let plan = self.plan(src, remote, &opts, &mut runs)?;
        let out = self.run(&mut runs, plan, &opts, &mut others);
        let tallies: ArrayVec<RailTally, MAX_RAILS> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| r.tally(i, &plan))
            .collect();
        if let Some(p) = out.panic {
            panic::resume_unwind(p);
        }
        match out.first {
            None => Ok(RailReport {
                id: opts.id,
                chunks: plan.total,
                bytes: plan.len,
                notices: plan.notices,
                rails: tallies,
            }),
            Some((rail, error)) => Err(RailError {
                rail,
                device: rail
                    .and_then(|r| self.rails.get(r))
                    .map(|r| device_name(r.qp))
                    .unwrap_or_default(),
                error,
                landed: tallies,
            }),
        }
    }

    /// Checks the input and sets up each rail's state.
    fn plan<'s, R: MemoryRegion + ?Sized>(
        &'s self,
        src: &[&'s R],
        remote: &[RemoteBuffer],
        opts: &RailTransfer,
        runs: &mut ArrayVec<RailRun<'s>, MAX_RAILS>,
    ) -> Result<Plan, RailError> {
        let whole = |e: InvalidInput| RailError::whole(e.into());
        let n = self.rails.len();
        if n == 0 {
            return Err(whole(InvalidInput::RailCount {
                count: 0,
                max: MAX_RAILS as u32,
            }));
        }
        for got in [src.len(), remote.len()] {
            if got != n {
                return Err(whole(InvalidInput::RailListLength {
                    got,
                    rails: n as u32,
                }));
            }
        }
        if opts.id > MAX_TRANSFER_ID {
            return Err(whole(InvalidInput::TransferIdTooLarge(opts.id)));
        }
        let (len, local_len) = (remote[0].len(), src[0].len());
        let chunk = self
            .rails
            .iter()
            .map(|r| r.qp.limits().max_rdma_size())
            .fold(opts.chunk, u32::min);
        let mut total = 0;
        for (i, ((rail, mr), rb)) in self.rails.iter().zip(src).zip(remote).enumerate() {
            let rail_err = |e: Error| RailError::of_rail(i, rail.qp, e);
            for l in [(rb.len(), len), (mr.len(), local_len)] {
                if l.0 != l.1 {
                    return Err(rail_err(
                        InvalidInput::RailMismatch {
                            len: l.0,
                            rail: i as u32,
                        }
                        .into(),
                    ));
                }
            }
            let chunks = RdmaChunks::new(*mr, opts.local_offset, *rb, chunk).map_err(rail_err)?;
            total = chunks.total();
            // Rails sharing a CQ share its room.
            let sharers = self.rails.iter().filter(|o| same_cq(o.cq, rail.cq)).count();
            let cq_room = u64::from(rail.cq.depth())
                .checked_div(sharers as u64)
                .unwrap_or(0);
            runs.push(RailRun {
                chunks,
                dest: Dest::of(rail.peer),
                qpn: rail.qp.qpn(),
                id_base: 0,
                window: u64::from(rail.qp.limits().max_send_wr())
                    .min(cq_room)
                    .min(u64::from(opts.in_flight))
                    .max(1),
                posted: 0,
                done: 0,
                chunks_ok: 0,
                notice: None,
                cut_off: None,
            });
        }
        let notices = super::notice_count(len, chunk, n);
        let bulk = total.saturating_sub(u64::from(notices));
        let shift = u64::BITS.saturating_sub(total.leading_zeros());
        if shift.saturating_add(RAIL_BITS) > 62 {
            return Err(whole(InvalidInput::LengthTooLarge(len)));
        }
        let span = (n as u64) << shift;
        // Ids no other work request of this process has or will have.
        let base = crate::lease::reserve_wr_ids(span);
        for (i, run) in runs.iter_mut().enumerate() {
            run.id_base = base.wrapping_add((i as u64) << shift);
            run.notice = (i < notices as usize).then(|| bulk.saturating_add(i as u64));
        }
        Ok(Plan {
            len,
            chunk,
            total,
            bulk,
            notices,
            base,
            span,
            shift,
        })
    }

    /// Posts and polls until no chunk is in flight.
    fn run<'s>(
        &'s self,
        runs: &mut ArrayVec<RailRun<'s>, MAX_RAILS>,
        plan: Plan,
        opts: &RailTransfer,
        others: &mut impl FnMut(usize, Completion),
    ) -> Outcome {
        let n = runs.len();
        let imm = Notice {
            id: opts.id,
            count: plan.notices,
        }
        .to_imm();
        let deadline = Instant::now().checked_add(opts.timeout);
        let mut cursor = 0u64; // the next bulk chunk
        let mut turn = 0usize; // the rail offered chunks first, rotating
        let mut first: Option<(Option<usize>, Error)> = None;
        let mut panicked = None;
        let mut idle = 0u32;
        let mut got = ArrayVec::<Completion, 32>::new();
        loop {
            let now = Instant::now();
            if first.is_none() && panicked.is_none() && deadline.is_some_and(|d| now >= d) {
                first = Some((busiest(runs), Error::Timeout));
            }
            let mut progressed = false;
            if first.is_none() && panicked.is_none() {
                for k in 0..n {
                    // Rails from `turn` on, wrapping (cheaper than chaining two ranges).
                    // (turn < n and k < n: nothing wraps.)
                    let left = n.wrapping_sub(turn);
                    let r = if k < left {
                        turn.wrapping_add(k)
                    } else {
                        k.wrapping_sub(left)
                    };
                    let want = plan.bulk.saturating_sub(cursor);
                    if want == 0 {
                        break;
                    }
                    match self.post(r, &mut runs[r], cursor, want, SendOp::Write) {
                        Ok(k) => {
                            cursor = cursor.wrapping_add(k); // k <= want: stays <= bulk
                            progressed |= k > 0;
                        }
                        Err(e) => {
                            first = Some((Some(r), e));
                            break;
                        }
                    }
                }
                turn = turn.wrapping_add(1);
                if turn >= n {
                    turn = 0;
                }
            }
            if first.is_none() && panicked.is_none() && cursor == plan.bulk {
                // A rail's notice goes once every other chunk of that rail completed.
                for r in 0..n {
                    let run = &mut runs[r];
                    let Some(index) = run.notice.filter(|_| run.in_flight() == 0) else {
                        continue;
                    };
                    match self.post(r, run, index, 1, |rb| SendOp::WriteImm(rb, imm)) {
                        Ok(k) => {
                            if k == 1 {
                                run.notice = None;
                                progressed = true;
                            }
                        }
                        Err(e) => {
                            first = Some((Some(r), e));
                            break;
                        }
                    }
                }
            }
            let stopped = first.is_some() || panicked.is_some();
            if stopped {
                self.cut_off(runs, opts.timeout);
            }
            let quiet = runs.iter().all(|r| r.in_flight() == 0);
            let finished = cursor == plan.bulk && runs.iter().all(|r| r.notice.is_none());
            if quiet && (stopped || finished) {
                return Outcome {
                    first,
                    panic: panicked,
                };
            }
            for r in 0..n {
                if runs[r].in_flight() == 0 {
                    continue;
                }
                got.clear();
                if let Err(e) = self.rails[r].cq.poll(&mut got) {
                    // Completions of this rail may never be seen: cut it off now.
                    first.get_or_insert((Some(r), e));
                    runs[r].cut_off = Some(Instant::now());
                }
                progressed |= !got.is_empty();
                for c in got.drain(..) {
                    let off = c.wr_id().wrapping_sub(plan.base);
                    let s = usize::try_from(off >> plan.shift).unwrap_or(usize::MAX);
                    let ours = off < plan.span
                        && !c.opcode().is_recv()
                        && runs.get(s).is_some_and(|run| run.qpn == c.qp_num());
                    if ours {
                        let run = &mut runs[s];
                        // Counts of this transfer's chunks (fewer than 2^62): no wrap.
                        run.done = run.done.wrapping_add(1);
                        match c.into_error() {
                            None => {
                                run.chunks_ok = run.chunks_ok.wrapping_add(1);
                            }
                            Some(e) => {
                                first.get_or_insert((Some(s), e));
                            }
                        }
                    } else if panicked.is_none() {
                        // The callback runs inside the transfer: a panic must not skip
                        // the wait for the chunks in flight.
                        if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| others(r, c))) {
                            panicked = Some(p);
                        }
                    }
                }
            }
            idle = if progressed {
                0
            } else {
                idle.saturating_add(1)
            };
            back_off(idle);
        }
    }

    /// Posts up to `want` chunks from chunk `index` on rail `r`, within its credits, in
    /// one doorbell; returns how many. The credits are the queue's depth, so a full queue
    /// ([`Error::SendQueueFull`]) means someone else posts to the rail's QP: an error of
    /// that rail, never a retry loop.
    #[inline(always)]
    fn post<'s>(
        &'s self,
        r: usize,
        run: &mut RailRun<'s>,
        index: u64,
        want: u64,
        op: impl Fn(RemoteBuffer) -> SendOp,
    ) -> Result<u64, Error> {
        let room = run.window.saturating_sub(run.in_flight()).min(want);
        if room == 0 {
            return Ok(0);
        }
        let room = usize::try_from(room).map_or(BATCH, |x| x.min(BATCH));
        let qp = self.rails[r].qp;
        run.chunks.seek(index);
        let mut batch = SendBatch::<BATCH>::new(qp);
        while batch.len() < room {
            let Some((local, remote)) = run.chunks.peek() else {
                break;
            };
            let id = run.id_base.wrapping_add(run.chunks.index());
            SendWr::with_dest(id, op(remote), run.dest, Payload::Sge(local))
                .and_then(|wr| batch.push_from(wr, Origin::Lease))?;
            run.chunks.advance();
        }
        // SAFETY: the chunks name bytes of the caller's registrations, borrowed for the
        // whole call, and the call returns or unwinds only when no chunk is in flight (or
        // its rail's QP was reset), see the module docs.
        match unsafe { qp.post_send(&batch) } {
            Ok(()) => {
                let k = batch.len() as u64;
                run.posted = run.posted.wrapping_add(k); // at most the chunks: no wrap
                Ok(k)
            }
            Err(e) => Err(e),
        }
    }

    /// After posting stopped: gives each rail's chunks in flight `timeout` more, then
    /// resets the rails whose chunks are still missing (which ends the device's window
    /// over them); a rail whose reset fails waits for its completions after all.
    fn cut_off(&self, runs: &mut ArrayVec<RailRun<'_>, MAX_RAILS>, timeout: Duration) {
        let now = Instant::now();
        for (rail, run) in self.rails.iter().zip(runs.iter_mut()) {
            let at = *run
                .cut_off
                .get_or_insert_with(|| now.checked_add(timeout).unwrap_or_else(far));
            if run.in_flight() > 0 && now >= at {
                if rail.qp.inner.set_state(QpStateKind::Reset).is_ok() {
                    run.done = run.posted;
                } else {
                    run.cut_off = Some(far());
                }
            }
        }
    }
}

/// True when both are the same CQ.
fn same_cq<Q: CompletionQueue>(a: &Q, b: &Q) -> bool {
    a.as_cq_ptr() == b.as_cq_ptr()
}

/// The rail with the most chunks in flight (the one a timeout blames).
fn busiest(runs: &[RailRun<'_>]) -> Option<usize> {
    runs.iter()
        .enumerate()
        .filter(|(_, r)| r.in_flight() > 0)
        .max_by_key(|(_, r)| r.in_flight())
        .map(|(i, _)| i)
}

/// Waiting for completions on several CQs: spin briefly, then yield the core (the
/// device's or the peer's threads may need it), then nap.
pub(super) fn back_off(idle: u32) {
    if idle == 0 {
    } else if idle < 16 {
        core::hint::spin_loop();
    } else if idle < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(20));
    }
}
