//! Arguments checked as the `efa` package checks them: an integer argument is converted
//! with `int()` and an out-of-range one raises `ValueError` (not `OverflowError`), with
//! the package's message.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

/// `int(obj)`, which must lie in `lo..=hi`, else `ValueError(msg)`.
pub fn int_in(obj: &Bound<'_, PyAny>, lo: i128, hi: i128, msg: &str) -> PyResult<i128> {
    let n = obj.py().get_type::<PyInt>().call1((obj,))?;
    // Beyond i128 is beyond every range asked for.
    match n.extract::<i128>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(PyValueError::new_err(msg.to_owned())),
    }
}

/// The package's `ValueError` for a refused argument.
pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

pub const U32_MAX: i128 = u32::MAX as i128;
pub const U64_MAX: i128 = u64::MAX as i128;

/// As [`int_in`], `None` (an argument left out) being `default`.
pub fn int_or(
    obj: Option<&Bound<'_, PyAny>>,
    default: i128,
    (lo, hi): (i128, i128),
    msg: &str,
) -> PyResult<i128> {
    match obj {
        None => Ok(default),
        Some(o) => int_in(o, lo, hi, msg),
    }
}

/// A string as Python's `repr` writes it (`'efa_0'`), for the package's `repr`s.
pub fn py_repr(s: &str) -> String {
    let plain = s
        .chars()
        .all(|c| (' '..='~').contains(&c) && c != '\\' && c != '\'');
    if plain {
        format!("'{s}'")
    } else {
        format!("{s:?}")
    }
}
