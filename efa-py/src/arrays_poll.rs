//! The array API's poll (an addition to the `efa` package's API): completions written
//! into a preallocated `(n, 4)` array of `uint64` (`wr_id, status, byte_len, imm`), one
//! row each, with no Python object made per completion.

use efa_typestate::{ArrayVec, Completion, CompletionQueue};
use pyo3::prelude::*;

use crate::arrays_buf::View;
use crate::cq::{AnyCq, CQ};
use crate::errors::OrRaise;

/// Columns of a row.
const COLS: usize = 4;
/// Completions asked of the provider per call.
const STEP: usize = 64;

fn poll_step<Q: CompletionQueue>(q: &Q, buf: &mut ArrayVec<Completion, STEP>) -> PyResult<usize> {
    buf.clear();
    q.poll(buf).or_raise("ibv_poll_cq")
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
    let rows = view.dim(0);
    let base = view.ptr::<u64>();
    let cq_ref = cq.borrow();
    let credits = &cq_ref.credits;
    let cq = cq_ref.get()?;
    let write_row = |at: usize, row: [u64; COLS]| {
        if at >= rows {
            return; // not reached: every caller stays below `rows`
        }
        // SAFETY: `at < rows`, so the row's `COLS` items lie inside the exported,
        // writable, C-contiguous `(rows, COLS)` buffer of `u64` (checked by `View::get`),
        // which stays exported while `view` lives; written unaligned (a buffer's items
        // need not be aligned). The GIL is held.
        unsafe {
            let p = base.add(at * COLS);
            for (j, v) in row.into_iter().enumerate() {
                p.add(j).write_unaligned(v);
            }
        }
    };
    // Completions of requests refused at the post come first, as `CQ.poll` returns them
    // (`crate::credits`).
    let mut got = 0;
    for r in credits.take_refused(rows) {
        let status = efa_typestate::sys::verbs::ibv_wc_status::IBV_WC_LOC_LEN_ERR;
        write_row(got, [r.wr_id, u64::from(status), 0, 0]);
        got += 1;
    }
    let mut buf = ArrayVec::<Completion, STEP>::new();
    while got < rows {
        // Completions beyond the rows left stay in the CQ: the provider is asked for at
        // most that many.
        let want = (rows - got).min(STEP);
        buf.clear();
        let n = if want == STEP {
            match cq {
                AnyCq::Classic(q) => poll_step(&**q, &mut buf)?,
                AnyCq::Ext(q) => poll_step(&**q, &mut buf)?,
            }
        } else {
            poll_few(cq, want, &mut buf)?
        };
        credits.polled(buf.iter().take(n).map(|c| c.qp_num()));
        for (k, c) in buf.iter().take(n).enumerate() {
            let row = [
                c.wr_id(),
                u64::from(c.status().0),
                u64::from(c.byte_len()),
                u64::from(c.imm().unwrap_or(0)),
            ];
            write_row(got + k, row);
        }
        got += n;
        if n < want {
            break;
        }
    }
    drop(view);
    Ok(got)
}

/// Polls at most `want` (< `STEP`) completions: the provider is asked for the largest
/// power of two not above `want` at a time, so no completion beyond `want` is taken.
fn poll_few(cq: &AnyCq, want: usize, out: &mut ArrayVec<Completion, STEP>) -> PyResult<usize> {
    macro_rules! step {
        ($n:literal) => {{
            let mut b = ArrayVec::<Completion, $n>::new();
            let n = match cq {
                AnyCq::Classic(q) => q.poll(&mut b),
                AnyCq::Ext(q) => q.poll(&mut b),
            }
            .or_raise("ibv_poll_cq")?;
            out.extend(b);
            n
        }};
    }
    let mut total = 0;
    while total < want {
        let left = want - total;
        let n = match left {
            32.. => step!(32),
            16..=31 => step!(16),
            8..=15 => step!(8),
            4..=7 => step!(4),
            2..=3 => step!(2),
            _ => step!(1),
        };
        total += n;
        let asked = match left {
            32.. => 32,
            16..=31 => 16,
            8..=15 => 8,
            4..=7 => 4,
            2..=3 => 2,
            _ => 1,
        };
        if n < asked {
            break;
        }
    }
    Ok(total)
}
