//! The array API's poll (an addition to the `efa` package's API): completions written
//! into a preallocated `(n, 4)` array of `uint64` (`wr_id, status, byte_len, imm`), one
//! row each, with no Python object made per completion.
//!
//! A classic CQ is polled into an array of `ibv_wc` (efa-typestate's `Cq::poll_wc`, as
//! the provider writes them) and each entry copied into its row; an extended CQ through
//! `Completion`s. The CQ's free entries (`crate::credits`) are given back once per call
//! for each run of one QP's completions, not per completion.

use efa_typestate::{ArrayVec, Completion, CompletionQueue, Cq, WorkCompletion};
use pyo3::prelude::*;

use crate::arrays_buf::View;
use crate::cq::{AnyCq, CQ};
use crate::credits::Credits;
use crate::errors::OrRaise;

/// Columns of a row.
const COLS: usize = 4;
/// Completions asked of the provider per call (12 KiB of `ibv_wc` on the stack).
const STEP: usize = 256;

/// The rows of `out` still to write.
struct Rows {
    base: *mut u64,
    rows: usize,
    got: usize,
}

impl Rows {
    #[inline(always)]
    fn left(&self) -> usize {
        self.rows - self.got
    }
    /// Writes the next row (nothing once all are written).
    #[inline(always)]
    fn push(&mut self, row: [u64; COLS]) {
        if self.got >= self.rows {
            return; // not reached: every caller stays below `rows`
        }
        // SAFETY: `got < rows`, so the row's `COLS` items lie inside the exported,
        // writable, C-contiguous `(rows, COLS)` buffer of `u64` (checked by `View::get`),
        // which stays exported while the call's `view` lives; written unaligned (a
        // buffer's items need not be aligned). The GIL is held.
        unsafe {
            let p = self.base.add(self.got * COLS);
            for (j, v) in row.into_iter().enumerate() {
                p.add(j).write_unaligned(v);
            }
        }
        self.got += 1;
    }
}

/// The completions polled per QP, given back to the CQ's credits once per run of one
/// QP's completions.
struct Tally<'c> {
    credits: &'c Credits,
    qpn: u32,
    n: u32,
}

impl Tally<'_> {
    #[inline(always)]
    fn add(&mut self, qpn: u32) {
        self.add_run(qpn, 1);
    }
    /// Counts `n` completions of QP `qpn`.
    #[inline(always)]
    fn add_run(&mut self, qpn: u32, n: u32) {
        if qpn != self.qpn {
            self.switch(qpn);
        }
        self.n += n;
    }
    /// Gives back the run counted so far and starts counting `qpn`'s (from 0).
    #[cold]
    fn switch(&mut self, qpn: u32) {
        self.flush();
        self.qpn = qpn;
        self.n = 0;
    }
    fn flush(&mut self) {
        if self.n != 0 {
            self.credits.release(self.qpn, self.n);
            self.n = 0;
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// `efa.poll_into(cq, out)`: see efa-py/README.md. Returns how many rows were written
/// (from row 0); never blocks.
#[pyfunction]
pub fn poll_into(cq: &Bound<'_, CQ>, out: &Bound<'_, PyAny>) -> PyResult<usize> {
    let view = View::get(out, "out", 8, 2, true)?;
    if view.dim(1) != COLS {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "out: expected {COLS} columns (wr_id, status, byte_len, imm), got {}",
            view.dim(1)
        )));
    }
    let mut rows = Rows {
        base: view.ptr::<u64>(),
        rows: view.dim(0),
        got: 0,
    };
    let cq_ref = cq.borrow();
    let credits = &cq_ref.credits;
    let cq = cq_ref.get()?;
    // Completions of requests refused at the post come first, as `CQ.poll` returns them
    // (`crate::credits`).
    for r in credits.take_refused(rows.rows) {
        let status = efa_typestate::sys::verbs::ibv_wc_status::IBV_WC_LOC_LEN_ERR;
        rows.push([r.wr_id, u64::from(status), 0, 0]);
    }
    let mut tally = Tally {
        credits,
        qpn: 0,
        n: 0,
    };
    match cq {
        AnyCq::Classic(q) => poll_classic(q, &mut rows, &mut tally)?,
        AnyCq::Ext(q) => poll_completions(&**q, &mut rows, &mut tally)?,
    }
    drop(tally);
    let got = rows.got;
    drop(view);
    Ok(got)
}

/// Polls a classic CQ into `ibv_wc`s and copies each into its row.
fn poll_classic<C>(q: &Cq<C>, rows: &mut Rows, tally: &mut Tally<'_>) -> PyResult<()> {
    let mut buf = ArrayVec::<WorkCompletion, STEP>::new();
    while rows.left() > 0 {
        // Completions beyond the rows left stay in the CQ: the provider is asked for at
        // most that many (a power of two at a time below `STEP`).
        let asked = ask(rows.left());
        buf.clear();
        let n = match asked {
            STEP => q.poll_wc(&mut buf),
            128 => poll_wc_n::<C, 128>(q, &mut buf),
            64 => poll_wc_n::<C, 64>(q, &mut buf),
            32 => poll_wc_n::<C, 32>(q, &mut buf),
            16 => poll_wc_n::<C, 16>(q, &mut buf),
            8 => poll_wc_n::<C, 8>(q, &mut buf),
            4 => poll_wc_n::<C, 4>(q, &mut buf),
            2 => poll_wc_n::<C, 2>(q, &mut buf),
            _ => poll_wc_n::<C, 1>(q, &mut buf),
        }
        .or_raise("ibv_poll_cq")?;
        copy_wcs(&buf, rows, tally);
        if n < asked {
            break;
        }
    }
    Ok(())
}

/// Copies `wcs` into the next rows (as many as fit: all, since at most the rows left
/// are polled) and counts them in `tally`.
#[inline(never)]
fn copy_wcs(wcs: &[WorkCompletion], rows: &mut Rows, tally: &mut Tally<'_>) {
    let k = wcs.len().min(rows.left());
    // SAFETY: `got + k <= rows`: the rows `got..got + k` lie inside the exported,
    // writable, C-contiguous `(rows, COLS)` buffer of `u64` (checked by `View::get`),
    // which stays exported while the call's `view` lives; written unaligned (a buffer's
    // items need not be aligned). The GIL is held.
    let mut p = unsafe { rows.base.add(rows.got * COLS) };
    let wcs = &wcs[..k];
    let Some(first) = wcs.first().map(WorkCompletion::qp_num) else {
        return;
    };
    // Bits in which some completion's QP number differs from the first's: 0 when they
    // are all one QP's (one run to give back), else they are counted again one by one.
    let mut differ = 0u32;
    for wc in wcs {
        differ |= wc.qp_num() ^ first;
        // SAFETY: row `p` is one of the `k` rows above.
        unsafe {
            p.write_unaligned(wc.wr_id());
            p.add(1).write_unaligned(u64::from(wc.status().0));
            if wc.opcode().is_recv() {
                p.add(2).write_unaligned(u64::from(wc.byte_len()));
                p.add(3).write_unaligned(u64::from(wc.imm().unwrap_or(0)));
            } else {
                p.add(2).write_unaligned(0);
                p.add(3).write_unaligned(0);
            }
            p = p.add(COLS);
        }
    }
    rows.got += k;
    if differ == 0 {
        tally.add_run(first, k as u32);
    } else {
        for wc in wcs {
            tally.add_run(wc.qp_num(), 1);
        }
    }
}

/// The completions asked of the provider with `left` rows left: `STEP`, or the largest
/// power of two not above `left`.
fn ask(left: usize) -> usize {
    if left >= STEP {
        STEP
    } else {
        1 << (usize::BITS - 1 - left.leading_zeros())
    }
}

/// Polls at most `N` completions into `out` (which has room for them).
fn poll_wc_n<C, const N: usize>(
    q: &Cq<C>,
    out: &mut ArrayVec<WorkCompletion, STEP>,
) -> efa_typestate::Result<usize> {
    let mut b = ArrayVec::<WorkCompletion, N>::new();
    let n = q.poll_wc(&mut b)?;
    out.extend(b);
    Ok(n)
}

/// Polls a CQ through `Completion`s (an extended CQ) and copies each into its row.
fn poll_completions<Q: CompletionQueue>(
    q: &Q,
    rows: &mut Rows,
    tally: &mut Tally<'_>,
) -> PyResult<()> {
    macro_rules! step {
        ($n:expr) => {{
            let mut b = ArrayVec::<Completion, $n>::new();
            let n = q.poll(&mut b).or_raise("ibv_poll_cq")?;
            for c in &b {
                tally.add(c.qp_num());
                rows.push([
                    c.wr_id(),
                    u64::from(c.status().0),
                    u64::from(c.byte_len()),
                    u64::from(c.imm().unwrap_or(0)),
                ]);
            }
            n
        }};
    }
    while rows.left() > 0 {
        let asked = ask(rows.left());
        let n = match asked {
            STEP => step!(STEP),
            128 => step!(128),
            64 => step!(64),
            32 => step!(32),
            16 => step!(16),
            8 => step!(8),
            4 => step!(4),
            2 => step!(2),
            _ => step!(1),
        };
        if n < asked {
            break;
        }
    }
    Ok(())
}
