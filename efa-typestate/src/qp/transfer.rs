//! [`Qp::write_all`] and [`Qp::read_all`]: a buffer of any size moved by RDMA through a
//! QP, in chunks of at most `max_rdma_size`, never more in flight than the send queue
//! (and the CQ) can hold, returning only when no chunk can still touch the buffer.
//!
//! Why a return means "the device is done with the buffer":
//! * the CQ polled is checked to be the QP's own send CQ ([`InvalidInput::NotSendCq`]):
//!   QP numbers are per device, so a completion of another device's CQ could carry this
//!   QP's number;
//! * a chunk is counted only by a send-side completion of this QP whose `wr_id` lies in
//!   a range reserved for this call from the process-wide id space of
//!   [leases](crate::lease) (bit 63 set, never handed out twice, refused in batches), so
//!   neither a receive, nor a concurrent transfer on the same QP, nor any other work
//!   request can be mistaken for a chunk;
//! * after an error, the timeout or a panic in the caller's callback, nothing more is
//!   posted and the call waits, up to the timeout again, for every chunk already
//!   posted. Chunks whose completions are still missing then (the peer is slow, another
//!   thread polled them away, or the CQ failed) are cut off by resetting the QP: once
//!   that call has returned the device no longer touches the buffer (the window of
//!   [`Qp::post_send`] ends). The QP's type still says RTS, but posting to it fails
//!   until it is brought back ([`Qp::reset`] then [`Qp::prepare`]); if even the reset
//!   fails, the call waits for the completions without a deadline.
//!
//! Nothing is deregistered to cut a chunk short: keys can be reissued to later
//! registrations, so a key that goes away while a work request names it could make the
//! device write someone else's memory.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use super::{Qp, QpStateKind, Rts};
use crate::ah::Peer;
use crate::cq::{Completion, CompletionQueue};
use crate::error::{Error, InvalidInput, Result};
use crate::mr::{MemoryRegion, RemoteBuffer};
use crate::wr::{Dest, Payload, RdmaChunks, SendBatch, SendOp, SendWr};

/// Options of [`Qp::write_all`] / [`Qp::read_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    local_offset: u64,
    timeout: Duration,
}

impl Transfer {
    /// A transfer whose chunks must all be posted and completed within `timeout`,
    /// starting at byte 0 of the local region.
    pub fn new(timeout: Duration) -> Self {
        Transfer {
            local_offset: 0,
            timeout,
        }
    }
    /// The local bytes start at `offset` of the region.
    pub fn local_offset(mut self, offset: u64) -> Self {
        self.local_offset = offset;
        self
    }
}

/// Batches posted per doorbell.
pub(crate) const BATCH: usize = 16;

/// A deadline that does not come.
pub(crate) fn far() -> Instant {
    let now = Instant::now();
    [86_400 * 365, 3_600]
        .into_iter()
        .find_map(|s| now.checked_add(Duration::from_secs(s)))
        .unwrap_or(now)
}

/// How one run ended: chunks moved, or the first error; and a panic of the caller's
/// callback to resume once nothing is in flight.
struct Outcome {
    result: Result<u64>,
    panic: Option<Box<dyn core::any::Any + Send + 'static>>,
}

impl Outcome {
    fn finish(self) -> Result<u64> {
        if let Some(p) = self.panic {
            panic::resume_unwind(p);
        }
        self.result
    }
}

impl<P> Qp<P, Rts> {
    /// RDMA-writes `remote.len()` bytes of `src` (from [`Transfer::local_offset`]) into
    /// `remote`, in chunks of at most the device's `max_rdma_size`, keeping at most the
    /// send queue's (and the CQ's) depth in flight. Polls `cq`, which must be this QP's
    /// send CQ ([`InvalidInput::NotSendCq`]), until every chunk completed; completions
    /// that are not the transfer's are handed to `others`. Returns the number of chunks,
    /// or the first error (a failed chunk, a refused post, or [`Error::Timeout`] when
    /// the chunks did not all complete within the timeout).
    ///
    /// It returns only when no chunk is in flight (see the soundness table in the crate docs): after
    /// an error nothing more is posted and the chunks already posted are waited for, up
    /// to `timeout` more; chunks still in flight then are cut off by resetting the QP.
    /// If `others` panics, the same happens before the panic continues (completions
    /// that arrive meanwhile and are not the transfer's are dropped).
    pub fn write_all<Q, R, X>(
        &self,
        cq: &Q,
        peer: &Peer<X>,
        src: &R,
        remote: RemoteBuffer,
        opts: Transfer,
        mut others: impl FnMut(Completion),
    ) -> Result<u64>
    where
        Q: CompletionQueue,
        R: MemoryRegion + ?Sized,
    {
        self.check_send_cq(cq)?;
        let max = self.limits().max_rdma_size();
        let chunks = RdmaChunks::new(src, opts.local_offset, remote, max)?;
        self.run(cq, Dest::of(peer), chunks, SendOp::Write, opts, &mut others)
            .finish()
    }

    /// RDMA-reads `remote` into `dst` (from [`Transfer::local_offset`]), as
    /// [`write_all`](Self::write_all) writes: `dst` is borrowed exclusively for the
    /// whole call, and no chunk can still write it when the call returns (or unwinds).
    pub fn read_all<Q, R, X>(
        &self,
        cq: &Q,
        peer: &Peer<X>,
        dst: &mut R,
        remote: RemoteBuffer,
        opts: Transfer,
        mut others: impl FnMut(Completion),
    ) -> Result<u64>
    where
        Q: CompletionQueue,
        R: MemoryRegion + ?Sized,
    {
        self.check_send_cq(cq)?;
        let max = self.limits().max_rdma_size();
        let chunks = RdmaChunks::new(&*dst, opts.local_offset, remote, max)?;
        self.run(cq, Dest::of(peer), chunks, SendOp::Read, opts, &mut others)
            .finish()
    }

    pub(crate) fn check_send_cq<Q: CompletionQueue>(&self, cq: &Q) -> Result<()> {
        // SAFETY: a live QP; `send_cq` is a plain field set at creation.
        let send_cq = unsafe { (*self.as_ptr()).send_cq };
        if cq.as_cq_ptr() == send_cq {
            Ok(())
        } else {
            Err(InvalidInput::NotSendCq.into())
        }
    }

    /// Posts and polls the chunks until none is in flight.
    fn run<'a, Q: CompletionQueue>(
        &'a self,
        cq: &Q,
        dest: Dest,
        mut chunks: RdmaChunks<'a>,
        op: impl Fn(RemoteBuffer) -> SendOp,
        opts: Transfer,
        others: &mut impl FnMut(Completion),
    ) -> Outcome {
        let total = chunks.total();
        // Ids no other work request of this process has or will have.
        let base = crate::lease::reserve_wr_ids(total);
        let qpn = self.qpn();
        let ours = |c: &Completion| {
            c.qp_num() == qpn && !c.opcode().is_recv() && c.wr_id().wrapping_sub(base) < total
        };
        let window = u64::from(self.limits().max_send_wr())
            .min(u64::from(cq.depth()))
            .max(1);
        let deadline = Instant::now().checked_add(opts.timeout);
        // When posting stopped early, the chunks in flight get `timeout` more.
        let mut cut_off: Option<Instant> = None;
        let (mut posted, mut done) = (0u64, 0u64);
        let mut first: Option<Error> = None;
        let mut panicked = None;
        let mut got = ArrayVec::<Completion, 32>::new();
        loop {
            let stopped = first.is_some() || panicked.is_some();
            if !stopped && deadline.is_some_and(|d| Instant::now() >= d) {
                first = Some(Error::Timeout);
            }
            while first.is_none() && panicked.is_none() && chunks.remaining() > 0 {
                let in_flight = posted.saturating_sub(done);
                if in_flight >= window {
                    break;
                }
                let room = usize::try_from(window.saturating_sub(in_flight))
                    .map_or(BATCH, |r| r.min(BATCH));
                let mut batch = SendBatch::<BATCH>::new(self);
                let mut built = Ok(());
                while batch.len() < room {
                    let Some((local, remote)) = chunks.peek() else {
                        break;
                    };
                    let id = base.wrapping_add(chunks.index());
                    built = SendWr::with_dest(id, op(remote), dest, Payload::Sge(local))
                        .and_then(|wr| batch.push_from(wr, crate::wr::Origin::Lease));
                    if built.is_err() {
                        break;
                    }
                    chunks.advance();
                }
                let n = batch.len() as u64;
                if let Err(e) = built {
                    first = Some(e);
                    chunks.rewind(n);
                    break;
                }
                // SAFETY: the chunks name bytes of the caller's region, borrowed (shared
                // for sources, exclusive for destinations) for the whole call, and the
                // call returns or unwinds only when no chunk is in flight (or the QP
                // was reset), see the module docs.
                match unsafe { self.post_send(&batch) } {
                    Ok(()) => posted = posted.saturating_add(n),
                    Err(Error::SendQueueFull) => {
                        chunks.rewind(n);
                        break;
                    }
                    Err(e) => {
                        chunks.rewind(n);
                        first = Some(e);
                    }
                }
            }
            let stopped = first.is_some() || panicked.is_some();
            if stopped && cut_off.is_none() {
                cut_off = Some(Instant::now().checked_add(opts.timeout).unwrap_or(far()));
            }
            if posted > done && cut_off.is_some_and(|c| Instant::now() >= c) {
                // The reset ends the device's window over every chunk still in flight.
                if self.inner.set_state(QpStateKind::Reset).is_ok() {
                    done = posted;
                } else {
                    cut_off = Some(far()); // wait for the completions after all
                }
            }
            if done == posted && (stopped || chunks.remaining() == 0) {
                let result = match first {
                    None if panicked.is_none() => Ok(total),
                    None => Err(Error::Timeout),
                    Some(e) => Err(e),
                };
                return Outcome {
                    result,
                    panic: panicked,
                };
            }
            got.clear();
            match cq.poll_until(&mut got, 1, Duration::from_millis(10)) {
                Ok(_) | Err(Error::Timeout) => {}
                Err(e) => {
                    // The CQ failed: completions of chunks in flight may never be seen,
                    // so they are cut off now (above, at the next turn).
                    cut_off = Some(Instant::now());
                    first.get_or_insert(e);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            for c in got.drain(..) {
                if ours(&c) {
                    done = done.saturating_add(1);
                    if let Some(e) = c.into_error() {
                        first.get_or_insert(e);
                    }
                } else if panicked.is_none() {
                    // The callback runs inside the transfer: a panic must not skip the
                    // wait for the chunks in flight.
                    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| others(c))) {
                        panicked = Some(p);
                    }
                }
            }
        }
    }
}
