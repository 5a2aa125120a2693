//! `QP.post_send(wrs)` and `CQ.poll(n)` called the common way (one positional argument,
//! no keywords) without PyO3's argument parsing: at import, each class's method is
//! replaced by a C method of the same name, doc and signature that takes that call
//! straight to the implementation, and hands every other call (keywords, another count
//! of arguments, a count that is not a plain `int`) to the PyO3 method it replaced, which
//! parses and raises as it always did. PyO3's parsing, its lookups of the class's type
//! object and its borrow of `self` cost several hundred instructions a call, more than a
//! one-request post itself.
//!
//! CPython checks `self`'s type before calling a method descriptor (as it does for
//! PyO3's own methods), so the C methods only see `QP`s and `CQ`s.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::cq::CQ;
use crate::qp::QP;

/// The PyO3 methods replaced, for the calls the C methods do not take themselves.
static POST_SEND: OnceLock<Py<PyAny>> = OnceLock::new();
static POLL: OnceLock<Py<PyAny>> = OnceLock::new();

/// Replaces `QP.post_send` and `CQ.poll` (at import).
pub fn install(py: Python<'_>) -> PyResult<()> {
    replace(
        &py.get_type::<QP>(),
        c"post_send",
        post_send_raw,
        &POST_SEND,
    )?;
    replace(&py.get_type::<CQ>(), c"poll", poll_raw, &POLL)
}

type RawFn = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *mut ffi::PyObject,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

fn replace(
    ty: &Bound<'_, PyType>,
    name: &'static CStr,
    f: RawFn,
    saved: &OnceLock<Py<PyAny>>,
) -> PyResult<()> {
    let py = ty.py();
    let key = name.to_str().unwrap_or_default();
    let original = ty.getattr(key)?;
    // The same doc and text signature as the method replaced (`help`, `inspect`).
    let sig: Option<String> = original.getattr("__text_signature__")?.extract()?;
    let doc: Option<String> = original.getattr("__doc__")?.extract()?;
    let text = match sig {
        Some(sig) => format!("{key}{sig}\n--\n\n{}", doc.unwrap_or_default()),
        None => doc.unwrap_or_default(),
    };
    let doc: &'static CStr = Box::leak(CString::new(text).unwrap_or_default().into_boxed_c_str());
    // The descriptor keeps a pointer to its definition: one small leak per method,
    // once per process.
    let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer {
            PyCFunctionWithKeywords: f,
        },
        ml_flags: ffi::METH_VARARGS | ffi::METH_KEYWORDS,
        ml_doc: doc.as_ptr(),
    }));
    // SAFETY: `ty` is a live type object; `def` lives for ever and describes a
    // `METH_VARARGS | METH_KEYWORDS` function of that signature.
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def)) }?;
    let _ = saved.set(original.unbind());
    ty.setattr(key, descr)
}

/// Calls the PyO3 method replaced with `self`, `args` and `kwargs` as given.
fn fallback<'py>(
    py: Python<'py>,
    saved: &OnceLock<Py<PyAny>>,
    slf: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<*mut ffi::PyObject> {
    let Some(original) = saved.get() else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "efa: method called before import finished",
        ));
    };
    let mut all = vec![slf.clone()];
    all.extend(args.iter());
    let all = PyTuple::new(py, all)?;
    Ok(original.bind(py).call(all, kwargs)?.into_ptr())
}

/// The arguments of a `METH_VARARGS | METH_KEYWORDS` call, bound.
///
/// # Safety
/// As CPython passes them: `slf` and `args` (a tuple) valid, `kwargs` a dict or NULL.
unsafe fn bind_args<'py>(
    py: Python<'py>,
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> (
    Bound<'py, PyAny>,
    Bound<'py, PyTuple>,
    Option<Bound<'py, PyDict>>,
) {
    // SAFETY: per the contract (new references are taken).
    unsafe {
        (
            Bound::from_borrowed_ptr(py, slf),
            Bound::from_borrowed_ptr(py, args).downcast_into_unchecked::<PyTuple>(),
            Bound::from_borrowed_ptr_or_opt(py, kwargs)
                .map(|k| k.downcast_into_unchecked::<PyDict>()),
        )
    }
}

/// The only positional argument of a call without keywords, borrowed, if that is the
/// call.
///
/// # Safety
/// As [`bind_args`].
unsafe fn only_arg(args: *mut ffi::PyObject, kwargs: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: per the contract: `args` a tuple, `kwargs` a dict or NULL.
    unsafe {
        if (!kwargs.is_null() && ffi::PyDict_Size(kwargs) != 0) || ffi::PyTuple_Size(args) != 1 {
            return core::ptr::null_mut();
        }
        ffi::PyTuple_GetItem(args, 0)
    }
}

unsafe extern "C" fn post_send_raw(
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held and its arguments valid.
    unsafe { pyo3::impl_::trampoline::cfunction_with_keywords(slf, args, kwargs, post_send_body) }
}

/// # Safety
/// As [`bind_args`]; `slf` is a `QP` (CPython checked it).
unsafe fn post_send_body(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: forwarded contract.
    let wrs = unsafe { only_arg(args, kwargs) };
    if wrs.is_null() {
        // SAFETY: forwarded contract.
        let (slf, args, kwargs) = unsafe { bind_args(py, slf, args, kwargs) };
        return fallback(py, &POST_SEND, &slf, &args, kwargs.as_ref());
    }
    // SAFETY: `slf` and `wrs` are valid for the call (borrowed from CPython's arguments).
    let (slf, wrs) = unsafe { (Borrowed::from_ptr(py, slf), Borrowed::from_ptr(py, wrs)) };
    // SAFETY: CPython calls this method only with a `QP` (`QP` has no subclasses).
    let qp = unsafe { slf.downcast_unchecked::<QP>() }.try_borrow()?;
    crate::post::post_send(&qp, py, &wrs)?;
    Ok(py.None().into_ptr())
}

unsafe extern "C" fn poll_raw(
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held and its arguments valid.
    unsafe { pyo3::impl_::trampoline::cfunction_with_keywords(slf, args, kwargs, poll_body) }
}

/// A plain `int` in `i32`'s range, else None (and no exception set).
///
/// # Safety
/// `n` a valid object; the GIL held.
unsafe fn plain_i32(n: *mut ffi::PyObject) -> Option<i32> {
    // SAFETY: per the contract.
    unsafe {
        if n.is_null() || ffi::PyLong_CheckExact(n) == 0 {
            return None;
        }
        let v = ffi::PyLong_AsLong(n);
        if v == -1 && !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        i32::try_from(v).ok()
    }
}

/// # Safety
/// As [`bind_args`]; `slf` is a `CQ` or an instance of a subclass (CPython checked it).
unsafe fn poll_body(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: forwarded contract.
    let Some(n) = (unsafe { plain_i32(only_arg(args, kwargs)) }) else {
        // SAFETY: forwarded contract.
        let (slf, args, kwargs) = unsafe { bind_args(py, slf, args, kwargs) };
        return fallback(py, &POLL, &slf, &args, kwargs.as_ref());
    };
    // SAFETY: `slf` is valid for the call (CPython's argument).
    let slf = unsafe { Borrowed::from_ptr(py, slf) };
    // SAFETY: CPython calls this method only with a `CQ` or an instance of a subclass,
    // whose object starts with a `CQ`'s.
    let cq = unsafe { slf.downcast_unchecked::<CQ>() }.try_borrow()?;
    Ok(cq.poll_list(py, n)?.into_ptr())
}
