//! The way into the C methods of `crate::fastcall` from CPython: the GIL's token, a
//! caught panic and a raised error, without PyO3's trampoline.
//!
//! PyO3's trampoline also counts the GIL in a thread-local and, on entry, applies the
//! reference counts its `Py` handles deferred while the GIL was away: about seventy
//! instructions a call, a third of a one-request post. Here the count stays as CPython
//! left it (0 on a thread PyO3 has not entered), so a `Py` dropped inside defers its
//! decrement to PyO3's pool instead of making it: the methods entered this way drop
//! `Py` handles only through `Py::drop_ref` (or as `Bound`s), and their error path,
//! which may drop some (a lazily built exception's arguments), runs inside
//! `Python::with_gil`, which counts the GIL and applies what was deferred.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;

/// Runs `body` for a C method CPython called (so with the GIL held): its result, or
/// NULL with its error raised (a panic raised as `PanicException`, as PyO3 raises it).
///
/// # Safety
/// The calling thread holds the GIL (CPython calls C methods so); `body` drops no `Py`
/// handle but through `Py::drop_ref` (see the module docs: it would be decremented
/// late, not wrongly).
#[inline(always)]
pub unsafe fn enter(
    body: impl FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>,
) -> *mut ffi::PyObject {
    // SAFETY: the GIL is held (contract).
    let py = unsafe { Python::assume_gil_acquired() };
    match catch_unwind(AssertUnwindSafe(|| body(py))) {
        Ok(Ok(obj)) => obj,
        Ok(Err(e)) => raise(e),
        Err(payload) => raise(panicked(payload)),
    }
}

/// Raises `e` (with the GIL counted: see the module docs); NULL for the caller to return.
#[cold]
#[inline(never)]
fn raise(e: PyErr) -> *mut ffi::PyObject {
    Python::with_gil(|py| e.restore(py));
    core::ptr::null_mut()
}

/// A panic's payload as the `PanicException` PyO3 raises for it.
#[cold]
#[inline(never)]
fn panicked(payload: Box<dyn std::any::Any + Send + 'static>) -> PyErr {
    let msg = if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        "panic from Rust code".to_owned()
    };
    PanicException::new_err(msg)
}
