//! `CQ.poll(n)`: up to `n` completions as a list of `WC`s.
//!
//! A classic CQ is polled into `ibv_wc`s as the provider writes them (efa-typestate's
//! `Cq::poll_wc`) and each is written straight into its `WC` (`crate::wc`); an extended
//! CQ through `Completion`s. The CQ's free entries (`crate::credits`) are given back
//! once per provider call when its completions are all one QP's (the usual case).

use efa_typestate::{ArrayVec, Completion, CompletionQueue, Cq, ExtCq, WorkCompletion};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::args::value_error;
use crate::cq::AnyCq;
use crate::credits::Credits;
use crate::device::SCtx;
use crate::errors::OrRaise;
use crate::wc::{Filler, WcPool, WC};

/// What `CQ.poll` reads of its CQ.
pub struct Polled<'a> {
    pub cq: &'a AnyCq,
    pub credits: &'a Credits,
    pub pool: &'a WcPool,
    /// Whether the CQ reports sender GIDs.
    pub sgid: bool,
}

/// `CQ.poll(num_entries)`.
pub fn poll<'py>(
    p: &Polled<'_>,
    py: Python<'py>,
    num_entries: i32,
) -> PyResult<Bound<'py, PyList>> {
    if num_entries <= 0 {
        return Err(value_error("num_entries must be positive"));
    }
    let num_entries = num_entries as usize;
    let out = PyList::empty(py);
    let mut left = num_entries;
    // Completions of requests refused at the post come first (`crate::credits`).
    if p.credits.has_refused(py) {
        for r in p.credits.take_refused_py(py, num_entries) {
            out.append(Py::new(py, WC::too_long(r))?)?;
            left -= 1;
        }
    }
    let mut fill = p.pool.filler(py, &out, p.sgid);
    // One provider poll per power of two at most `left` (completions beyond
    // `num_entries` stay in the CQ), until the CQ runs dry.
    macro_rules! drain {
        ($step:ident, $q:expr) => {
            while left > 0 {
                let (asked, got) = match left {
                    1 => $step::<1>($q, p.credits, &mut fill)?,
                    64.. => $step::<64>($q, p.credits, &mut fill)?,
                    32..=63 => $step::<32>($q, p.credits, &mut fill)?,
                    16..=31 => $step::<16>($q, p.credits, &mut fill)?,
                    8..=15 => $step::<8>($q, p.credits, &mut fill)?,
                    4..=7 => $step::<4>($q, p.credits, &mut fill)?,
                    _ => $step::<2>($q, p.credits, &mut fill)?,
                };
                left -= got;
                if got < asked {
                    break;
                }
            }
        };
    }
    match p.cq {
        AnyCq::Classic(q) => drain!(classic, q),
        AnyCq::Ext(q) => drain!(extended, q),
    }
    drop(fill);
    Ok(out)
}

/// One provider poll of at most `N` entries of a classic CQ, appended to `fill`;
/// returns `(N, how many)`. Not inlined: each size's buffer is on its own stack frame.
#[inline(never)]
fn classic<const N: usize>(
    q: &Cq<SCtx>,
    credits: &Credits,
    fill: &mut Filler<'_, '_>,
) -> PyResult<(usize, usize)> {
    let mut buf = ArrayVec::<WorkCompletion, N>::new();
    let n = q.poll_wc(&mut buf).or_raise("ibv_poll_cq")?;
    free(credits, fill.py(), buf.iter().map(WorkCompletion::qp_num));
    for c in &buf {
        fill.put_wc(c)?;
    }
    Ok((N, n))
}

/// [`classic`] for an extended CQ (through `Completion`s).
#[inline(never)]
fn extended<const N: usize>(
    q: &ExtCq<SCtx>,
    credits: &Credits,
    fill: &mut Filler<'_, '_>,
) -> PyResult<(usize, usize)> {
    let mut buf = ArrayVec::<Completion, N>::new();
    let n = q.poll(&mut buf).or_raise("ibv_poll_cq")?;
    free(credits, fill.py(), buf.iter().map(Completion::qp_num));
    for c in &buf {
        fill.put(c)?;
    }
    Ok((N, n))
}

/// Gives back one CQ entry per completion polled, by the QP it belongs to: at once when
/// they are all one QP's.
#[inline(always)]
fn free(credits: &Credits, py: Python<'_>, qpns: impl Iterator<Item = u32> + Clone) {
    let mut all = qpns.clone();
    let Some(first) = all.next() else {
        return;
    };
    let (mut differ, mut n) = (0u32, 1u32);
    for q in all {
        differ |= q ^ first;
        n += 1;
    }
    if differ == 0 {
        credits.release_py(py, first, n);
    } else {
        credits.polled_py(py, qpns);
    }
}
