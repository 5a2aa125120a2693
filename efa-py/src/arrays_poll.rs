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
    let cq = cq.borrow();
    let cq = cq.get()?;
    let mut buf = ArrayVec::<Completion, STEP>::new();
    let mut got = 0;
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
        for (k, c) in buf.iter().take(n).enumerate() {
            let row = [
                c.wr_id(),
                u64::from(c.status().0),
                u64::from(c.byte_len()),
                u64::from(c.imm().unwrap_or(0)),
            ];
            // SAFETY: `got + k < rows`, so the row's `COLS` items lie inside the
            // exported, writable, C-contiguous `(rows, COLS)` buffer of `u64` (checked
            // by `View::get`), which stays exported while `view` lives; written
            // unaligned (a buffer's items need not be aligned). The GIL is held.
            unsafe {
                let p = base.add((got + k) * COLS);
                for (j, v) in row.into_iter().enumerate() {
                    p.add(j).write_unaligned(v);
                }
            }
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
