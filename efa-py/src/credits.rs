//! A CQ's free entries, counted so that a CQ smaller than its QPs' depths never
//! overflows (libefa and the `efa` package accept such QPs; the device would drop the
//! completions that do not fit).
//!
//! Every work request posted to a QP will complete on one CQ (EFA completes every
//! send, and every receive that is consumed or flushed). So a CQ counts the requests
//! posted to it and not yet polled from it, per QP, and a post that would take the
//! count past the CQ's depth is refused as a full queue (`EfaError`, `ENOMEM`, what
//! libefa answers for a full work queue) before anything reaches the device. Polling a
//! completion frees its entry; closing a QP frees the entries its requests held: its
//! requests still queued never complete, and a program polls the completions it already
//! has before closing it (libefa fails a poll that meets a completion of a destroyed QP).

use std::cell::{RefCell, RefMut};
use std::collections::VecDeque;
use std::sync::Arc;

use efa_typestate::Errno;
use pyo3::sync::GILProtected;
use pyo3::Python;

use crate::errors::invalid_errno;

const ENOMEM: i32 = Errno::ENOMEM.0;

/// The requests outstanding on one CQ.
///
/// Every caller holds the GIL (posts and polls count with it held, before and after
/// their GIL-free part), so the GIL guards the count: no lock of its own to take. The
/// methods without a `py` argument take the GIL's token themselves (for callers that
/// do not have it at hand; `Python::with_gil` costs more than the count itself).
pub struct Credits {
    depth: u32,
    state: GILProtected<RefCell<State>>,
}

#[derive(Default)]
struct State {
    used: u32,
    /// Outstanding requests per QP number (QPs that posted, until forgotten): a short
    /// list, searched in order (a CQ serves a few QPs; a hash per completion cost more).
    per_qp: Vec<(u32, u32)>,
    /// Requests that fail by their completion without reaching the device, to be
    /// polled before the device's completions (each holds its entry until then).
    refused: VecDeque<Refused>,
}

/// A send the device would fail by its completion, which the Rust core refuses at the
/// post instead (a SEND longer than `max_msg_sz`, an RDMA longer than `max_rdma_size`): the package's program sees the
/// completion, as it would from the device.
#[derive(Clone, Copy)]
pub struct Refused {
    pub wr_id: u64,
    pub qp_num: u32,
    /// The completion's opcode (`ibv_wc_opcode`).
    pub opcode: u32,
}

impl Credits {
    pub fn new(depth: u32) -> Arc<Credits> {
        Arc::new(Credits {
            depth,
            state: GILProtected::new(RefCell::new(State::default())),
        })
    }
    /// The count. No Python code runs while it is borrowed (nothing here calls any),
    /// so no borrow can overlap another.
    fn lock<'py>(&'py self, py: Python<'py>) -> RefMut<'py, State> {
        self.state.get(py).borrow_mut()
    }
    /// Takes `n` entries for requests of QP `qpn`, or refuses the post (`ENOMEM`).
    pub fn reserve(&self, operation: &str, qpn: u32, n: u32) -> pyo3::PyResult<()> {
        Python::with_gil(|py| self.reserve_py(py, operation, qpn, n))
    }
    /// [`reserve`](Self::reserve), with the GIL's token.
    #[inline]
    pub fn reserve_py(
        &self,
        py: Python<'_>,
        operation: &str,
        qpn: u32,
        n: u32,
    ) -> pyo3::PyResult<()> {
        let mut s = self.lock(py);
        let free = self.depth.saturating_sub(s.used);
        if n > free {
            return Err(full(operation, n, self.depth, s.used));
        }
        s.used += n;
        match s.per_qp.iter_mut().find(|e| e.0 == qpn) {
            Some(e) => e.1 += n,
            None => s.per_qp.push((qpn, n)),
        }
        Ok(())
    }
    /// Gives back `n` entries of QP `qpn` (a post that failed, or completions polled).
    pub fn release(&self, qpn: u32, n: u32) {
        Python::with_gil(|py| self.release_py(py, qpn, n))
    }
    /// [`release`](Self::release), with the GIL's token.
    #[inline]
    pub fn release_py(&self, py: Python<'_>, qpn: u32, n: u32) {
        release_in(&mut self.lock(py), qpn, n);
    }
    /// Frees one entry per completion polled, by the QP it belongs to.
    #[inline]
    pub fn polled_py(&self, py: Python<'_>, qpns: impl Iterator<Item = u32>) {
        let mut s = self.lock(py);
        // Runs of one QP's completions (the common case) are freed together.
        let mut run: Option<(u32, u32)> = None;
        for qpn in qpns {
            match &mut run {
                Some((q, n)) if *q == qpn => *n += 1,
                _ => {
                    if let Some((q, n)) = run.replace((qpn, 1)) {
                        release_in(&mut s, q, n);
                    }
                }
            }
        }
        if let Some((q, n)) = run {
            release_in(&mut s, q, n);
        }
    }
    /// Queues the completions of `refused` requests (their entries already taken).
    #[inline]
    pub fn refuse(&self, py: Python<'_>, refused: &[Refused]) {
        if !refused.is_empty() {
            self.lock(py).refused.extend(refused.iter().copied());
        }
    }
    /// True if completions of refused requests wait to be polled.
    #[inline]
    pub fn has_refused(&self, py: Python<'_>) -> bool {
        self.state
            .get(py)
            .try_borrow()
            .is_ok_and(|s| !s.refused.is_empty())
    }
    /// Takes up to `n` queued completions of refused requests, freeing their entries.
    pub fn take_refused(&self, n: usize) -> Vec<Refused> {
        Python::with_gil(|py| self.take_refused_py(py, n))
    }
    /// [`take_refused`](Self::take_refused), with the GIL's token.
    #[inline]
    pub fn take_refused_py(&self, py: Python<'_>, n: usize) -> Vec<Refused> {
        let mut s = self.lock(py);
        if s.refused.is_empty() {
            return Vec::new();
        }
        let k = n.min(s.refused.len());
        let taken: Vec<Refused> = s.refused.drain(..k).collect();
        for r in &taken {
            release_in(&mut s, r.qp_num, 1);
        }
        taken
    }
    /// A QP was closed: its requests will not complete here any more.
    pub fn forget(&self, py: Python<'_>, qpn: u32) {
        let mut s = self.lock(py);
        s.refused.retain(|r| r.qp_num != qpn);
        if let Some(i) = s.per_qp.iter().position(|e| e.0 == qpn) {
            let (_, n) = s.per_qp.swap_remove(i);
            s.used -= n;
        }
    }
}

/// The refusal of a post that does not fit (`ENOMEM`, a full queue as libefa reports it).
#[cold]
#[inline(never)]
fn full(operation: &str, n: u32, depth: u32, used: u32) -> pyo3::PyErr {
    invalid_errno(
        operation,
        ENOMEM,
        format!(
            "the completion queue is full: {n} more work request(s) would exceed its \
             {depth} entries ({used} outstanding, not yet polled); poll it first"
        ),
    )
}

/// Frees up to `n` of `qpn`'s entries (a completion without a posted request, such as
/// an unsolicited write-with-immediate, frees nothing). The QP's entry stays, at 0, until
/// it is forgotten (no removal and re-insertion per post and poll).
fn release_in(s: &mut State, qpn: u32, n: u32) {
    if let Some(i) = s.per_qp.iter().position(|e| e.0 == qpn) {
        let held = &mut s.per_qp[i].1;
        let k = n.min(*held);
        *held -= k;
        s.used -= k;
    }
}
