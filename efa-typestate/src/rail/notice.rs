//! [`RailNotices`]: the target's side of multi-rail transfers. It keeps zero-length
//! receives posted on each rail's QP (a write-with-immediate consumes one), counts the
//! notices of each transfer across rails and says once when all of them arrived.
// Counts and ids here come from peers (the immediates): no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use super::{device_name, Notice, RailError, RailTally, MAX_RAILS};
use crate::cq::{Completion, CompletionQueue, WcOpcode};
use crate::error::{Error, InvalidInput, Result};
use crate::mr::Sge;
use crate::qp::{Qp, RecvReady};
use crate::wr::{Origin, RecvBatch};

/// Transfers a target tracks at once (announced by some of their notices, or landed and
/// not yet taken by [`RailNotices::wait`]).
pub const MAX_PENDING: usize = 64;

/// A transfer whose notices all arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landed {
    /// The transfer id.
    pub id: u32,
    /// Its notices (one per rail that carried one).
    pub notices: u32,
}

/// One rail at the target.
struct NoticeRail<'a, P, S: RecvReady, C> {
    qp: &'a Qp<P, S>,
    cq: &'a C,
    sge: Sge<'a>,
    /// Receives to keep posted, and how many are.
    keep: u32,
    posted: u32,
    /// Notices that arrived on this rail.
    arrived: u64,
}

/// The notices of one transfer seen so far.
#[derive(Clone, Copy)]
struct Pending {
    id: u32,
    count: u32,
    /// Rails a notice arrived on (bit per rail).
    rails: u64,
}

impl Pending {
    fn landed(&self) -> bool {
        self.rails.count_ones() >= self.count
    }
}

/// The target side of [`Rails::write_all`](super::Rails::write_all): per rail a QP (any
/// state that takes receives), the CQ its receives complete on, and a zero-length SGE of
/// a registration on its PD for the receives notices consume. Rail `i` should be the
/// initiator's rail `i` (then a missing notice names the same rail at both ends).
///
/// The receive queues of these QPs are its own: it posts receives with `wr_id`s reserved
/// for it and takes every write-with-immediate that consumes one as a notice.
pub struct RailNotices<'a, P, S: RecvReady, C> {
    rails: ArrayVec<NoticeRail<'a, P, S, C>, MAX_RAILS>,
    pending: ArrayVec<Pending, MAX_PENDING>,
    /// `wr_id` of rail `i`'s receives: `base + i`.
    base: u64,
}

impl<P, S: RecvReady, C> Default for RailNotices<'_, P, S, C> {
    fn default() -> Self {
        RailNotices {
            rails: ArrayVec::new(),
            pending: ArrayVec::new(),
            base: crate::lease::reserve_wr_ids(MAX_RAILS as u64),
        }
    }
}

impl<'a, P, S: RecvReady, C: CompletionQueue> RailNotices<'a, P, S, C> {
    /// No rails yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a rail: `qp`, the CQ `cq` its receives complete on, and `sge`, a zero-length
    /// SGE of a registration on `qp`'s PD ([`InvalidInput::NoticeSgeNotEmpty`] otherwise).
    /// Posts `receives` receives now (at most the QP's receive queue depth) and keeps that
    /// many posted: each transfer in flight toward this target takes one per rail.
    pub fn push(&mut self, qp: &'a Qp<P, S>, cq: &'a C, sge: Sge<'a>, receives: u32) -> Result<()> {
        if self.rails.is_full() {
            return Err(InvalidInput::RailCount {
                count: MAX_RAILS.saturating_add(1),
                max: MAX_RAILS as u32,
            }
            .into());
        }
        if !sge.is_empty() {
            return Err(InvalidInput::NoticeSgeNotEmpty(sge.len()).into());
        }
        let keep = receives.clamp(1, qp.limits().max_recv_wr().max(1));
        let mut rail = NoticeRail {
            qp,
            cq,
            sge,
            keep,
            posted: 0,
            arrived: 0,
        };
        let id = self.base.wrapping_add(self.rails.len() as u64);
        rail.top_up(id)?;
        self.rails.push(rail);
        Ok(())
    }

    /// Number of rails.
    pub fn len(&self) -> usize {
        self.rails.len()
    }
    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.rails.is_empty()
    }

    /// Waits until every notice of transfer `id` arrived, polling every rail's CQ and
    /// reposting the receives notices consumed. Notices of other transfers are counted
    /// too (a later `wait` for them returns at once); other completions go to `others`
    /// with the rail whose CQ gave them. Fails with a [`RailError`] naming the rail when a
    /// notice receive fails or cannot be reposted, or, after `timeout`, the first rail
    /// whose notice of `id` is missing (`landed`: the notices that arrived per rail).
    /// A panic in `others` unwinds after the completions of that poll are counted.
    pub fn wait(
        &mut self,
        id: u32,
        timeout: Duration,
        mut others: impl FnMut(usize, Completion),
    ) -> Result<Landed, RailError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut idle = 0u32;
        loop {
            if let Some(l) = self.take(id) {
                return Ok(l);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(self.missing(id));
            }
            let n = self.poll(&mut others)?;
            idle = if n > 0 { 0 } else { idle.saturating_add(1) };
            super::write::back_off(idle);
        }
    }

    /// Takes transfer `id` if all its notices arrived (it is then forgotten).
    pub fn take(&mut self, id: u32) -> Option<Landed> {
        let i = self.pending.iter().position(|p| p.id == id && p.landed())?;
        let p = self.pending.swap_remove(i);
        Some(Landed {
            id,
            notices: p.count,
        })
    }

    /// Polls every rail's CQ once, counts the notices, reposts their receives; returns
    /// how many completions it took.
    pub fn poll(&mut self, others: &mut impl FnMut(usize, Completion)) -> Result<usize, RailError> {
        let mut taken = 0usize;
        let mut panicked = None;
        let mut got = ArrayVec::<Completion, 32>::new();
        let n = self.rails.len();
        for r in 0..n {
            got.clear();
            let cq = self.rails[r].cq;
            if let Err(e) = cq.poll(&mut got) {
                return Err(self.rail_error(r, e));
            }
            taken = taken.saturating_add(got.len());
            for c in got.drain(..) {
                let s = usize::try_from(c.wr_id().wrapping_sub(self.base)).unwrap_or(usize::MAX);
                let ours = s < n && c.opcode().is_recv() && self.rails[s].qp.qpn() == c.qp_num();
                let notice = ours
                    .then(|| self.receive_done(s, &c))
                    .transpose()?
                    .flatten();
                match notice {
                    Some(notice) => self.count(s, notice).map_err(|e| self.rail_error(s, e))?,
                    // Not a notice receive, or a SEND (or an immediate that is no notice)
                    // that took one.
                    None if panicked.is_none() => {
                        let at = if ours { s } else { r };
                        panicked = panic::catch_unwind(AssertUnwindSafe(|| others(at, c))).err();
                    }
                    None => {}
                }
            }
        }
        for s in 0..n {
            let id = self.base.wrapping_add(s as u64);
            self.rails[s]
                .top_up(id)
                .map_err(|e| self.rail_error(s, e))?;
        }
        if let Some(p) = panicked {
            panic::resume_unwind(p);
        }
        Ok(taken)
    }

    /// One of rail `s`'s receives completed: the notice it carries, if any.
    fn receive_done(&mut self, s: usize, c: &Completion) -> Result<Option<Notice>, RailError> {
        let rail = &mut self.rails[s];
        rail.posted = rail.posted.saturating_sub(1);
        if let Some(e) = c.into_error() {
            return Err(self.rail_error(s, e));
        }
        let notice = (c.opcode() == WcOpcode::RECV_RDMA_WITH_IMM)
            .then(|| c.imm().and_then(Notice::from_imm))
            .flatten();
        if notice.is_some() {
            rail.arrived = rail.arrived.saturating_add(1);
        }
        Ok(notice)
    }

    /// Records a notice of rail `rail`.
    fn count(&mut self, rail: usize, notice: Notice) -> Result<()> {
        let bit = 1u64 << (rail as u32 % u64::BITS);
        if let Some(p) = self.pending.iter_mut().find(|p| p.id == notice.id) {
            p.rails |= bit;
            return Ok(());
        }
        self.pending
            .try_push(Pending {
                id: notice.id,
                count: notice.count,
                rails: bit,
            })
            .map_err(|_| {
                InvalidInput::TooManyPendingTransfers {
                    max: MAX_PENDING as u32,
                }
                .into()
            })
    }

    /// The timeout of `wait(id)`: the first rail whose notice is missing.
    fn missing(&self, id: u32) -> RailError {
        let p = self.pending.iter().find(|p| p.id == id);
        let have = p.map_or(0, |p| p.rails);
        let want = p.map_or(self.rails.len(), |p| p.count as usize);
        let rail = (0..want.min(self.rails.len())).find(|&r| have & (1u64 << r) == 0);
        let mut e = match rail {
            Some(r) => self.rail_error(r, Error::Timeout),
            None => RailError::whole(Error::Timeout),
        };
        e.landed = self.arrivals();
        e
    }

    fn rail_error(&self, rail: usize, e: Error) -> RailError {
        RailError {
            rail: Some(rail),
            device: device_name(self.rails[rail].qp),
            error: e,
            landed: self.arrivals(),
        }
    }

    /// Notices that arrived per rail (as chunks; their bytes are not known here).
    fn arrivals(&self) -> ArrayVec<RailTally, MAX_RAILS> {
        self.rails
            .iter()
            .map(|r| RailTally {
                chunks: r.arrived,
                bytes: 0,
            })
            .collect()
    }
}

impl<P, S: RecvReady, C> NoticeRail<'_, P, S, C> {
    /// Posts receives until `keep` are posted.
    fn top_up(&mut self, id: u64) -> Result<()> {
        while self.posted < self.keep {
            let mut batch = RecvBatch::<16>::new(self.qp);
            while self.posted.saturating_add(batch.len() as u32) < self.keep && !batch.is_full() {
                batch.push_from(id, self.sge.into(), Origin::Lease)?;
            }
            // SAFETY: the receives name no bytes (the SGE's length was checked to be 0):
            // the device writes nothing through them.
            match unsafe { self.qp.post_recv(&batch) } {
                Ok(()) => self.posted = self.posted.saturating_add(batch.len() as u32),
                // Someone else's receives fill the queue: ours are posted as it drains.
                Err(Error::RecvQueueFull { posted }) => {
                    self.posted = self.posted.saturating_add(posted as u32);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
