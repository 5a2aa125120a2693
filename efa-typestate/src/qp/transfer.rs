//! [`Qp::write_all`] and [`Qp::read_all`]: a buffer of any size moved by RDMA through a
//! QP, in chunks of at most `max_rdma_size`, never more in flight than the send queue
//! (and the CQ) can hold, returning when every chunk completed or after the first error.

use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use super::{Qp, Rts};
use crate::ah::Peer;
use crate::cq::{Completion, CompletionQueue};
use crate::error::{Error, Result};
use crate::mr::{MemoryRegion, RemoteBuffer};
use crate::wr::{Dest, Payload, RdmaChunks, SendBatch, SendOp, SendWr};

/// Options of [`Qp::write_all`] / [`Qp::read_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    local_offset: u64,
    wr_id_base: u64,
    timeout: Duration,
}

impl Transfer {
    /// A transfer that must finish within `timeout`, starting at byte 0 of the local
    /// region, whose chunk `i` has `wr_id` `i`.
    pub fn new(timeout: Duration) -> Self {
        Transfer {
            local_offset: 0,
            wr_id_base: 0,
            timeout,
        }
    }
    /// The local bytes start at `offset` of the region.
    pub fn local_offset(mut self, offset: u64) -> Self {
        self.local_offset = offset;
        self
    }
    /// Chunk `i` gets `wr_id` `base + i` (choose a range no other work request of this
    /// QP uses while the transfer runs).
    pub fn wr_ids_from(mut self, base: u64) -> Self {
        self.wr_id_base = base;
        self
    }
}

/// Batches posted per doorbell.
const BATCH: usize = 16;

impl<P> Qp<P, Rts> {
    /// RDMA-writes `remote.len()` bytes of `src` (from [`Transfer::local_offset`]) into
    /// `remote`, in chunks of at most the device's `max_rdma_size`, keeping at most the
    /// send queue's (and the CQ's) depth in flight. Polls `cq` (this QP's send CQ) until
    /// every chunk completed; completions that are not the transfer's are handed to
    /// `others`. Returns the number of chunks, or the first error (a failed chunk, a
    /// refused post, or [`Error::Timeout`]): no further chunk is posted after it, and
    /// the call still waits for those in flight, up to `timeout` more; after that, on
    /// `Err(Timeout)`, chunks may still be in flight and the remote bytes are undefined.
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
        let max = self.limits().max_rdma_size();
        let chunks = RdmaChunks::new(src, opts.local_offset, remote, max)?;
        self.run(cq, Dest::of(peer), chunks, SendOp::Write, opts, &mut others)
            .map_err(|(e, _)| e)
    }

    /// RDMA-reads `remote` into `dst` (from [`Transfer::local_offset`]), as
    /// [`write_all`](Self::write_all) writes. `dst` is borrowed exclusively for the
    /// whole call and no chunk can still write it when the call returns: if in-flight
    /// chunks do not complete within `timeout` after the first error, `dst` is
    /// deregistered and registered again ([`Mr::reregister`](crate::Mr::reregister):
    /// new keys, the old ones reach nothing) and `Err(Timeout)` is returned; only if
    /// even the deregistration fails does the call wait for the device to complete them.
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
        let dest = Dest::of(peer);
        let max = self.limits().max_rdma_size();
        let (total, outcome) = {
            let chunks = RdmaChunks::new(&*dst, opts.local_offset, remote, max)?;
            let total = chunks.total();
            (
                total,
                self.run(cq, dest, chunks, SendOp::Read, opts, &mut others),
            )
        };
        match outcome {
            Ok(n) => Ok(n),
            Err((e, 0)) => Err(e),
            // Chunks may still write `dst`: make their keys dead before giving it back.
            Err((e, in_flight)) => {
                if dst.revoke().is_err() {
                    // Still registered: the device must finish them first.
                    self.drain(cq, opts.wr_id_base, total, in_flight, &mut others);
                }
                Err(e)
            }
        }
    }

    /// Polls until `in_flight` more completions of the transfer `[base, base+total)` of
    /// this QP arrived (no deadline: used only when the memory cannot be revoked).
    fn drain<Q: CompletionQueue>(
        &self,
        cq: &Q,
        base: u64,
        total: u64,
        mut in_flight: u64,
        others: &mut impl FnMut(Completion),
    ) {
        let mut got = ArrayVec::<Completion, 32>::new();
        while in_flight > 0 {
            got.clear();
            let _ = cq.poll_until(&mut got, 1, Duration::from_millis(10));
            for c in got.drain(..) {
                if c.qp_num() == self.qpn() && c.wr_id().wrapping_sub(base) < total {
                    in_flight -= 1;
                } else {
                    others(c);
                }
            }
        }
    }

    /// Posts and polls the chunks; on error returns it with the number of chunks still
    /// in flight.
    fn run<'a, Q: CompletionQueue>(
        &'a self,
        cq: &Q,
        dest: Dest,
        mut chunks: RdmaChunks<'a>,
        op: impl Fn(RemoteBuffer) -> SendOp,
        opts: Transfer,
        others: &mut impl FnMut(Completion),
    ) -> core::result::Result<u64, (Error, u64)> {
        let total = chunks.total();
        let base = opts.wr_id_base;
        let ours =
            |c: &Completion| c.qp_num() == self.qpn() && c.wr_id().wrapping_sub(base) < total;
        let window = (self.limits().max_send_wr() as u64)
            .min(cq.depth() as u64)
            .max(1);
        let start = Instant::now();
        let post_until = start.checked_add(opts.timeout);
        let drain_until = post_until.and_then(|d| d.checked_add(opts.timeout));
        let (mut posted, mut done) = (0u64, 0u64);
        let mut first: Option<Error> = None;
        let mut got = ArrayVec::<Completion, 32>::new();
        loop {
            if first.is_none() && post_until.is_some_and(|d| Instant::now() >= d) && done < total {
                first = Some(Error::Timeout);
            }
            while first.is_none() && chunks.remaining() > 0 && posted - done < window {
                let room = ((window - (posted - done)) as usize).min(BATCH);
                let mut batch = SendBatch::<BATCH>::new(self);
                let mut built = Ok(());
                while batch.len() < room {
                    let Some((local, remote)) = chunks.peek() else {
                        break;
                    };
                    let id = base.wrapping_add(chunks.index());
                    built = SendWr::with_dest(id, op(remote), dest, Payload::Sge(local))
                        .and_then(|wr| batch.push(wr));
                    if built.is_err() {
                        break;
                    }
                    chunks.advance();
                }
                let n = batch.len();
                if let Err(e) = built {
                    first = Some(e);
                    chunks.rewind(n as u64);
                    break;
                }
                // SAFETY: the chunks name bytes of the caller's region, borrowed (shared
                // for sources, exclusive for destinations) for the whole transfer; the
                // callers return only when no chunk is in flight, or (read_all) after
                // the region's keys were revoked.
                match unsafe { self.post_send(&batch) } {
                    Ok(()) => posted += n as u64,
                    Err(Error::SendQueueFull) => {
                        chunks.rewind(n as u64);
                        break;
                    }
                    Err(e) => {
                        chunks.rewind(n as u64);
                        first = Some(e);
                    }
                }
            }
            if done == posted && (first.is_some() || chunks.remaining() == 0) {
                return match first {
                    None => Ok(total),
                    Some(e) => Err((e, 0)),
                };
            }
            if drain_until.is_some_and(|d| Instant::now() >= d) {
                return Err((first.unwrap_or(Error::Timeout), posted - done));
            }
            got.clear();
            match cq.poll_until(&mut got, 1, Duration::from_millis(10)) {
                Ok(_) | Err(Error::Timeout) => {}
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
            for c in got.drain(..) {
                if ours(&c) {
                    done += 1;
                    if let Some(e) = c.into_error() {
                        first.get_or_insert(e);
                    }
                } else {
                    others(c);
                }
            }
        }
    }
}
