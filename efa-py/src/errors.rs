//! Exceptions: every Rust error becomes an `EfaError` (an `OSError`) carrying the Rust
//! error's words, with `.errno` and `.operation` set.

use efa_typestate::{Errno, Error};
use pyo3::prelude::*;
use pyo3::types::PyType;

/// `efa._errors`' exception classes (defined in Python, as the package's constructors
/// are), fetched once.
static ERRORS: pyo3::sync::GILOnceCell<(Py<PyType>, Py<PyType>)> = pyo3::sync::GILOnceCell::new();

/// `(EfaError, CompletionError)`.
pub fn classes(py: Python<'_>) -> PyResult<&(Py<PyType>, Py<PyType>)> {
    ERRORS.get_or_try_init(py, || {
        let m = py.import("efa._errors")?;
        Ok((
            m.getattr("EfaError")?.downcast_into::<PyType>()?.unbind(),
            m.getattr("CompletionError")?
                .downcast_into::<PyType>()?
                .unbind(),
        ))
    })
}

// The errno values the package raises, from the core's bindings (never literals).
pub const EINVAL: i32 = Errno::EINVAL.0;
pub const EBADF: i32 = Errno::EBADF.0;
pub const EOPNOTSUPP: i32 = Errno::EOPNOTSUPP.0;
pub const EBUSY: i32 = Errno::EBUSY.0;
const EIO: i32 = Errno::EIO.0;

/// An `EfaError` for `operation` with `errno` and `message`.
pub fn raise(py: Python<'_>, operation: &str, errno: i32, message: String) -> PyErr {
    match classes(py) {
        Ok((efa_error, _)) => PyErr::from_type(
            efa_error.bind(py).clone(),
            (operation.to_owned(), errno, message),
        ),
        Err(e) => e,
    }
}

/// The errno a Rust error stands for, as the package's verbs would report it: the
/// call's own, EINVAL for refused input, EOPNOTSUPP for what the provider, library or
/// device does not offer, ENOMEM for a full queue, EIO otherwise.
fn errno_of(e: &Error) -> i32 {
    use efa_typestate::Unsupported;
    match e {
        Error::Verb {
            errno: Errno(n), ..
        } => *n,
        Error::Invalid(_) => EINVAL,
        Error::Unsupported {
            why: Unsupported::Provider(Errno(n)),
            ..
        } => *n,
        Error::Unsupported { .. } => EOPNOTSUPP,
        Error::SendQueueFull | Error::RecvQueueFull { .. } => Errno::ENOMEM.0,
        _ => EIO,
    }
}

/// The Rust error `e` of `operation` as an `EfaError` with the same words.
pub fn efa(operation: &str, e: Error) -> PyErr {
    Python::with_gil(|py| raise(py, operation, errno_of(&e), e.to_string()))
}

/// Maps a Rust result to a Python one, naming the operation.
pub trait OrRaise<T> {
    fn or_raise(self, operation: &str) -> PyResult<T>;
}

impl<T> OrRaise<T> for efa_typestate::Result<T> {
    fn or_raise(self, operation: &str) -> PyResult<T> {
        self.map_err(|e| efa(operation, e))
    }
}

/// The error for a handle used after `close()`.
#[cold]
pub fn closed(what: &str) -> PyErr {
    Python::with_gil(|py| raise(py, what, EBADF, format!("{what} is closed")))
}

/// A refused argument, as the Rust core refuses its own (EINVAL).
pub fn invalid(operation: &str, message: String) -> PyErr {
    Python::with_gil(|py| raise(py, operation, EINVAL, message))
}

/// A refused argument with its own `errno` (e.g. `EFAULT` for an unreadable address).
pub fn invalid_errno(operation: &str, errno: i32, message: String) -> PyErr {
    Python::with_gil(|py| raise(py, operation, errno, message))
}

/// The error for closing a handle a call in another thread is still using (it runs
/// without the GIL); the handle stays open.
pub fn busy(what: &str) -> PyErr {
    Python::with_gil(|py| {
        raise(
            py,
            what,
            EBUSY,
            format!(
                "{what} is in use by a call in another thread; close it after that call returns"
            ),
        )
    })
}
