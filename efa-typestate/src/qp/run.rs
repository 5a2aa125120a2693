//! [`Qp::post_run`]: a run of RDMA operations ([`RdmaRun`]) posted from arrays of
//! offsets and lengths ([`RunEntries`]) in one session: what the run shares (the QP's
//! type and operations, the registration's and the AH's PD) is checked once, each entry
//! only for its ranges, and then handed straight to the provider's `ibv_wr_*` calls (or
//! the direct backend's send queue).
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use super::raw::QpInner;
use super::send_fns::SendFns;
use super::session::SendSession;
use super::state::Rts;
use super::Qp;
use crate::error::{InvalidInput, Result};
use crate::lease::LEASE_WR_ID_BIT;
use crate::wr::{OpKind, QpLimits, RdmaRun, RunEntries, RunError};

const WRITE: u8 = OpKind::Write as u8;
const WRITE_IMM: u8 = OpKind::WriteImm as u8;
const READ: u8 = OpKind::Read as u8;

impl<P> Qp<P, Rts> {
    /// Posts a run of RDMA operations, entry `i` of `entries` moving `lengths[i]` bytes
    /// between `run`'s registration at `local_offsets[i]` and its remote buffer at
    /// `remote_offsets[i]` (split into work requests of at most
    /// [`RdmaRun::chunk`] bytes), in one `ibv_wr_start … ibv_wr_complete` session (the
    /// provider rings a doorbell per `max_batch` work requests); returns how many work
    /// requests were posted ([`RdmaRun::work_requests`]).
    ///
    /// What the run shares is checked once: an SRD QP ([`InvalidInput::RdmaOnUd`]), the
    /// operation enabled ([`InvalidInput::SendOpNotEnabled`]), the registration and the
    /// destination's AH of this QP's PD ([`InvalidInput::WrongPd`]), immediates given
    /// exactly for [`RunOp::WriteImm`](crate::RunOp::WriteImm)
    /// ([`InvalidInput::RunImmediates`]). Each entry is checked for its ranges only: not
    /// empty ([`InvalidInput::EmptyEntry`]), its local range inside the registration
    /// ([`InvalidInput::SgeOutOfBounds`]), its remote range inside the remote buffer
    /// ([`InvalidInput::RemoteOutOfBounds`]), its `wr_id` not a lease's
    /// ([`InvalidInput::ReservedWrId`]), and the session's work requests within the
    /// queue's depth ([`InvalidInput::BatchLargerThanQueue`]). An entry that fails has
    /// its index in the [`RunError`].
    ///
    /// All or nothing, as [`post_with`](Self::post_with): on any error (a bad entry, or
    /// [`Error::SendQueueFull`](crate::Error::SendQueueFull) at the doorbell: poll
    /// completions, then post again) no work request of the run was posted. Nothing is
    /// allocated.
    ///
    /// ```no_run
    /// # use efa_typestate::*;
    /// # fn f<P, Q, M: RegionMemory>(qp: &mut Qp<P, Rts>, peer: &Peer<Q>, src: &Mr<Q, M>,
    /// #      dst: RemoteBuffer) -> core::result::Result<(), RunError> {
    /// // 1024 blocks of 1 KiB, block i to block 1023 - i of the peer's buffer.
    /// let local: Vec<u64> = (0..1024).map(|i| i * 1024).collect();
    /// let remote: Vec<u64> = local.iter().rev().copied().collect();
    /// let lengths = vec![1024u32; 1024];
    /// let run = RdmaRun::new(RunOp::Write, src, peer, dst)?;
    /// let entries = RunEntries::new(&local, &remote, &lengths)?;
    /// // SAFETY: `src` is not written until the 1024 completions (wr_ids 0..1024) are polled.
    /// let posted = unsafe { qp.post_run(&run, &entries) }?;
    /// assert_eq!(posted, 1024);
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send), for every work request posted.
    #[inline]
    pub unsafe fn post_run(
        &mut self,
        run: &RdmaRun<'_>,
        entries: &RunEntries<'_>,
    ) -> Result<usize, RunError> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_run(run, entries, |_| Ok(())) }
    }

    /// [`post_run`](Self::post_run), with `admit` called with the number of work
    /// requests once every entry passed its checks and before the device sees any of
    /// them: an error from it posts nothing, and is returned (with no entry). For
    /// callers that account for the requests (completion-queue entries, credits) without
    /// counting them first ([`RdmaRun::work_requests`] reads every length once more).
    /// `admit` runs while the session holds the send queue's lock: it must not post to,
    /// or poll the send CQ of, this QP.
    ///
    /// # Safety
    /// As [`post_run`](Self::post_run).
    #[inline]
    pub unsafe fn post_run_admit(
        &mut self,
        run: &RdmaRun<'_>,
        entries: &RunEntries<'_>,
        admit: impl FnOnce(usize) -> Result<()>,
    ) -> Result<usize, RunError> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_run(run, entries, admit) }
    }
}

impl QpInner {
    /// [`Qp::post_run`] (the state was checked by the caller).
    ///
    /// # Safety
    /// As [`Qp::post_run`]; the QP is in RTS.
    #[inline]
    pub(crate) unsafe fn post_run(
        &mut self,
        run: &RdmaRun<'_>,
        entries: &RunEntries<'_>,
        admit: impl FnOnce(usize) -> Result<()>,
    ) -> Result<usize, RunError> {
        run.check(&self.limits)?;
        let op_has_imm = run.kind == OpKind::WriteImm;
        if op_has_imm != entries.imm.is_some() {
            return Err(InvalidInput::RunImmediates { op_has_imm }.into());
        }
        if entries.is_empty() {
            return Ok(0);
        }
        let chunk = run.chunk(&self.limits);
        let mut failed = None;
        // SAFETY: forwarded contract; the QP is in RTS.
        let r = unsafe {
            self.post_with(|s| {
                let n = s.push_run(run, entries, chunk).map_err(|e| {
                    failed = Some(e);
                    e.error
                })?;
                admit(n).map(|()| n)
            })
        };
        r.map_err(|error| failed.unwrap_or(RunError::from(error)))
    }
}

impl SendSession<'_> {
    /// Adds every work request of the run (checked in [`QpInner::post_run`]); on an
    /// error, the session must be aborted (some of the run may have been added).
    #[inline(always)]
    fn push_run(
        &mut self,
        run: &RdmaRun<'_>,
        e: &RunEntries<'_>,
        chunk: u32,
    ) -> Result<usize, RunError> {
        let s = Shared {
            mr_len: run.mr_len,
            rlen: run.rlen,
            iova: run.iova,
            raddr: run.raddr,
            chunk,
            short: u64::from(chunk).min(run.mr_len).min(run.rlen) as u32, // at most `chunk`
            room: self.limits.max_send_wr.saturating_sub(self.added),
            depth: self.limits.max_send_wr,
        };
        #[cfg(feature = "std")]
        if let Some(d) = &mut self.direct {
            let posted = dispatch(&s, run, e, &mut Direct { d, run })?;
            self.added = self.added.saturating_add(posted);
            return Ok(posted as usize);
        }
        // SAFETY: the session is open on this QP (`post_with`).
        unsafe { SendFns::set_signaled(self.q) };
        let mut provider = Provider {
            fns: self.qp.fns,
            q: self.q,
            ah: run.dest.ah.as_ptr(),
            qpn: run.dest.qpn,
            qkey: run.dest.qkey,
            rkey: run.rkey,
            lkey: run.lkey,
        };
        let posted = dispatch(&s, run, e, &mut provider)?;
        self.added = self.added.saturating_add(posted);
        Ok(posted as usize)
    }
}

/// What the loop checks entries against.
struct Shared {
    mr_len: u64,
    rlen: u64,
    iova: u64,
    raddr: u64,
    chunk: u32,
    /// The longest entry of one work request that needs no further length check: at
    /// most the chunk, the registration's and the remote buffer's lengths.
    short: u32,
    /// Work requests the session has room for.
    room: u32,
    /// The queue's depth (for the error).
    depth: u32,
}

/// Where the checked work requests of a run go.
trait Emit {
    /// Hands one work request of the run over: `wr_id`, the remote address, the
    /// immediate, and `local`: the local address and length (asked for when they are
    /// needed, so that a loop need not keep them across the provider's first call).
    ///
    /// # Safety
    /// Called by [`run_loop`] only, for a request whose ranges it checked against the
    /// run (itself checked against the QP by [`RdmaRun::check`]).
    unsafe fn emit<const OP: u8>(
        &mut self,
        wr_id: u64,
        raddr: u64,
        imm: u32,
        local: impl FnOnce() -> (u64, u32),
    ) -> Result<()>;
}

/// The provider's `ibv_wr_*` calls, in the open session of `q`.
struct Provider {
    /// A copy: the loop calls the pointers from its own frame.
    fns: SendFns,
    q: *mut crate::ffi::ibv_qp_ex,
    ah: *mut crate::ffi::ibv_ah,
    qpn: u32,
    qkey: u32,
    rkey: u32,
    lkey: u32,
}

impl Emit for Provider {
    #[inline(always)]
    unsafe fn emit<const OP: u8>(
        &mut self,
        wr_id: u64,
        raddr: u64,
        imm: u32,
        local: impl FnOnce() -> (u64, u32),
    ) -> Result<()> {
        let dest = (self.ah, self.qpn, self.qkey);
        let calls = self.fns.rdma_calls::<OP>();
        // SAFETY: the session is open on this QP and signaled set (`push_run`); the
        // operation is enabled, the AH and registration of the QP's PD (`RdmaRun::check`)
        // and alive while the run borrows them; the ranges checked by `run_loop`.
        unsafe {
            calls.emit::<OP>(
                self.q,
                wr_id,
                (raddr, self.rkey, imm),
                dest,
                (local, self.lkey),
            )
        };
        Ok(())
    }
}

/// The direct backend's session.
#[cfg(feature = "std")]
struct Direct<'d, 'q, 'r> {
    d: &'d mut crate::direct::backend::DirectSession<'q>,
    run: &'d RdmaRun<'r>,
}

#[cfg(feature = "std")]
impl Emit for Direct<'_, '_, '_> {
    #[inline(always)]
    unsafe fn emit<const OP: u8>(
        &mut self,
        wr_id: u64,
        raddr: u64,
        imm: u32,
        local: impl FnOnce() -> (u64, u32),
    ) -> Result<()> {
        let r = self.run;
        let (addr, len) = local();
        let wr = crate::wr::StagedSend::rdma(
            wr_id,
            r.kind,
            &r.dest,
            (raddr, r.rkey, imm),
            (addr, len, r.lkey),
        );
        // SAFETY: a one-SGE request checked against this QP (`RdmaRun::check`, and its
        // ranges by `run_loop`); it borrows nothing but the AH, alive while `run` lives.
        unsafe { self.d.push(wr) }
    }
}

/// [`run_loop`] for the run's operation, with or without `wr_ids`.
#[inline(always)]
fn dispatch<E: Emit>(
    s: &Shared,
    run: &RdmaRun<'_>,
    e: &RunEntries<'_>,
    emit: &mut E,
) -> Result<u32, RunError> {
    match (run.kind, e.wr_ids.is_some()) {
        (OpKind::WriteImm, false) => run_loop::<WRITE_IMM, false, E>(s, e, emit),
        (OpKind::WriteImm, true) => run_loop::<WRITE_IMM, true, E>(s, e, emit),
        (OpKind::Read, false) => run_loop::<READ, false, E>(s, e, emit),
        (OpKind::Read, true) => run_loop::<READ, true, E>(s, e, emit),
        (_, false) => run_loop::<WRITE, false, E>(s, e, emit),
        (_, true) => run_loop::<WRITE, true, E>(s, e, emit),
    }
}

/// Checks every entry of `e` and emits its work requests; at most `s.room` of them.
/// Returns how many. `IDS`: `e` has `wr_ids` (else an entry's `wr_id` is its index).
#[inline(never)]
fn run_loop<const OP: u8, const IDS: bool, E: Emit>(
    s: &Shared,
    e: &RunEntries<'_>,
    emit: &mut E,
) -> Result<u32, RunError> {
    let n = e.len();
    // Every array holds `n` items (`RunEntries`' constructors): these never fail, and
    // the reads below need no bounds checks.
    let (Some(ro), Some(ln)) = (e.remote_offsets.get(..n), e.lengths.get(..n)) else {
        return Ok(0);
    };
    let lo = e.local_offsets;
    let ids = if IDS { e.wr_ids.unwrap_or(&[]) } else { &[] };
    let imms = if OP == WRITE_IMM {
        e.imm.unwrap_or(&[])
    } else {
        &[]
    };
    if (IDS && ids.len() < n) || (OP == WRITE_IMM && imms.len() < n) {
        return Ok(0); // not reached, as above
    }
    let mut posted = 0u32;
    let mut i = 0usize;
    while i < n {
        // Entries of one work request each, while the queue has room for one each (the
        // bound replaces a check per entry).
        let room_left = s.room.saturating_sub(posted) as usize;
        let end = n.min(i.saturating_add(room_left));
        let start = i;
        i = fast_entries::<OP, IDS, E>(s, (lo, ro, ln), (ids, imms), (i, end), emit)?;
        // One request per entry in `start..i`, at most `room_left` of them.
        posted = posted.wrapping_add(i.wrapping_sub(start) as u32);
        let Some((&off, &roff, &len)) = lo
            .get(i)
            .zip(ro.get(i))
            .zip(ln.get(i))
            .map(|((a, b), c)| (a, b, c))
        else {
            break; // all done
        };
        let wr_id = if IDS { ids[i] } else { i as u64 };
        let imm = if OP == WRITE_IMM { imms[i] } else { 0 };
        posted = entry_slow::<OP, E>(i, (off, roff, len, wr_id, imm), s, posted, emit)?;
        i = i.wrapping_add(1); // below `n`
    }
    Ok(posted)
}

/// Emits entries `from..end` (of `n`, every array that long) while each is one work
/// request (not empty, at most a chunk) in range; returns the first that is not (or
/// `end`). A loop of its own: the arrays' bases stay in registers.
#[inline(never)]
fn fast_entries<const OP: u8, const IDS: bool, E: Emit>(
    s: &Shared,
    (lo, ro, ln): (&[u64], &[u64], &[u32]),
    (ids, imms): (&[u64], &[u32]),
    (from, end): (usize, usize),
    emit: &mut E,
) -> Result<usize, RunError> {
    // Each array cut at `end` (`end <= n`, every array that long): the reads below
    // need no bounds checks.
    let (Some(lo), Some(ro), Some(ln)) = (lo.get(..end), ro.get(..end), ln.get(..end)) else {
        return Ok(from); // not reached
    };
    let ids = if IDS {
        ids.get(..end).unwrap_or(&[])
    } else {
        &[]
    };
    let imms = if OP == WRITE_IMM {
        imms.get(..end).unwrap_or(&[])
    } else {
        &[]
    };
    if (IDS && ids.len() != end) || (OP == WRITE_IMM && imms.len() != end) {
        return Ok(from); // not reached
    }
    if s.short == 0 {
        return Ok(from); // no entry fits (`entry_slow` says why)
    }
    // `1 <= typical <= short <= mr_len, rlen`: an entry of `typical` bytes at offsets at
    // most `near_l`, `near_r` lies inside both.
    let typical = match ln.get(from) {
        Some(&l) if (1..=s.short).contains(&l) => l,
        _ => 1,
    };
    let near_l = s.mr_len.wrapping_sub(u64::from(typical));
    let near_r = s.rlen.wrapping_sub(u64::from(typical));
    let mut i = from;
    while i < end {
        let (off, roff, len) = (lo[i], ro[i], ln[i]);
        let wr_id = if IDS { ids[i] } else { i as u64 };
        let imm = if OP == WRITE_IMM { imms[i] } else { 0 };
        // Most transfers repeat one length: entries of the first's (`typical`, not 0)
        // need one compare per range; the others take the exact checks.
        if len != typical || off > near_l || roff > near_r {
            // Empty, or longer than `short` (a chunk, the registration and the remote
            // buffer): so `len <= mr_len` and `len <= rlen` below.
            if len.wrapping_sub(1) >= s.short {
                break;
            }
            let len64 = u64::from(len);
            // Exact without a wrap: `len` is at most either length.
            if off > s.mr_len.wrapping_sub(len64) || roff > s.rlen.wrapping_sub(len64) {
                break;
            }
        }
        if IDS && wr_id & LEASE_WR_ID_BIT != 0 {
            break;
        }
        // No wrap: `iova + mr_len` and `raddr + rlen` fit (`RdmaRun::new`).
        let rstart = s.raddr.wrapping_add(roff);
        // The local side read again where it is handed over (the same values: the
        // slices are immutable while borrowed), rather than kept across a call.
        let local = || {
            // SAFETY: references to items of the slices: valid, aligned, initialised.
            let (off, len) = unsafe {
                (
                    core::ptr::read_volatile(&lo[i]),
                    core::ptr::read_volatile(&ln[i]),
                )
            };
            (s.iova.wrapping_add(off), len)
        };
        // SAFETY: the entry's ranges were checked just now.
        unsafe { emit.emit::<OP>(wr_id, rstart, imm, local) }
            .map_err(|err| RunError::at(i, err))?;
        i = i.wrapping_add(1); // below `end`
    }
    Ok(i)
}

/// [`run_loop`] for an entry that fails a check or needs splitting: the error naming
/// it, or its pieces emitted. Returns the count of work requests posted after it.
#[cold]
#[inline(never)]
fn entry_slow<const OP: u8, E: Emit>(
    i: usize,
    (off, roff, len, wr_id, imm): (u64, u64, u32, u64, u32),
    s: &Shared,
    mut posted: u32,
    emit: &mut E,
) -> Result<u32, RunError> {
    if len == 0 {
        return Err(RunError::at(i, InvalidInput::EmptyEntry));
    }
    if !matches!(off.checked_add(u64::from(len)), Some(end) if end <= s.mr_len) {
        return Err(RunError::at(
            i,
            InvalidInput::SgeOutOfBounds { offset: off, len },
        ));
    }
    if !matches!(roff.checked_add(u64::from(len)), Some(end) if end <= s.rlen) {
        return Err(RunError::at(
            i,
            InvalidInput::RemoteOutOfBounds { offset: roff, len },
        ));
    }
    if wr_id & LEASE_WR_ID_BIT != 0 {
        return Err(RunError::at(i, InvalidInput::ReservedWrId(wr_id)));
    }
    let mut done = 0u32;
    while done < len {
        if posted >= s.room {
            return Err(RunError::at(i, QpLimits::queue_full(s.depth)));
        }
        let part = (len.wrapping_sub(done)).min(s.chunk); // done < len
        let at = u64::from(done);
        // In range: `off + len <= mr_len`, `roff + len <= rlen`, checked above.
        let raddr = s.raddr.wrapping_add(roff).wrapping_add(at);
        let addr = s.iova.wrapping_add(off).wrapping_add(at);
        // SAFETY: the piece lies inside the entry's ranges, checked just now.
        unsafe { emit.emit::<OP>(wr_id, raddr, imm, || (addr, part)) }
            .map_err(|err| RunError::at(i, err))?;
        posted = posted.wrapping_add(1); // below `room`
        done = done.wrapping_add(part); // at most `len`
    }
    Ok(posted)
}
