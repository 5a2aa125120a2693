//! `QP.post_send(wrs)` and `CQ.poll(n)` called the common way (one positional argument,
//! no keywords) without PyO3's argument parsing: at import, each class's method is
//! replaced by a C method of the same name, doc and signature that takes that call
//! straight to the implementation, and hands every other call (keywords, another count
//! of arguments, a count that is not a plain `int`) to the PyO3 method it replaced, which
//! parses and raises as it always did. PyO3's parsing, its lookups of the class's type
//! object and its borrow of `self` cost several hundred instructions a call, more than a
//! one-request post itself.
//!
//! They are entered through `crate::entry` (the GIL's token, panics and errors), not
//! PyO3's trampoline.
//!
//! On Python 3.10 and newer the C methods take `METH_FASTCALL` calls (the arguments as
//! an array: no tuple built per call), on 3.9 `METH_VARARGS` ones.
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

/// Replaces `QP.post_send` and `CQ.poll` (at import): `METH_FASTCALL` methods on Python
/// 3.10 and newer (the calling convention joined the stable ABI then: no argument tuple
/// is built per call), `METH_VARARGS` ones on 3.9.
pub fn install(py: Python<'_>) -> PyResult<()> {
    let fast = py.version_info() >= (3, 10);
    let (post_send, poll) = if fast {
        (Meth::Fast(post_send_fast), Meth::Fast(poll_fast))
    } else {
        (Meth::Varargs(post_send_raw), Meth::Varargs(poll_raw))
    };
    replace(&py.get_type::<QP>(), c"post_send", post_send, &POST_SEND)?;
    replace(&py.get_type::<CQ>(), c"poll", poll, &POLL)
}

type RawFn = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *mut ffi::PyObject,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

type FastFn = unsafe extern "C" fn(
    *mut ffi::PyObject,
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
) -> *mut ffi::PyObject;

/// `METH_FASTCALL` (CPython's value; PyO3's abi3-py39 build does not name it).
const METH_FASTCALL: std::ffi::c_int = 0x0080;

/// A C method of either calling convention.
enum Meth {
    Varargs(RawFn),
    Fast(FastFn),
}

fn replace(
    ty: &Bound<'_, PyType>,
    name: &'static CStr,
    f: Meth,
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
    let (ml_meth, ml_flags) = match f {
        Meth::Varargs(f) => (
            ffi::PyMethodDefPointer {
                PyCFunctionWithKeywords: f,
            },
            ffi::METH_VARARGS | ffi::METH_KEYWORDS,
        ),
        Meth::Fast(f) => (
            ffi::PyMethodDefPointer {
                // SAFETY: a function pointer stored as another function pointer type, as
                // C stores a `METH_FASTCALL` function in `ml_meth` (`(PyCFunction)f`);
                // CPython calls it by the signature its flags name.
                PyCFunction: unsafe { core::mem::transmute::<FastFn, ffi::PyCFunction>(f) },
            },
            METH_FASTCALL | ffi::METH_KEYWORDS,
        ),
    };
    let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth,
        ml_flags,
        ml_doc: doc.as_ptr(),
    }));
    // SAFETY: `ty` is a live type object; `def` lives for ever and describes a function
    // of the signature its flags name (`METH_FASTCALL` only on 3.10 and newer, see
    // `install`).
    let descr =
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def)) }?;
    let _ = saved.set(original.unbind());
    ty.setattr(key, descr)
}

/// Calls the PyO3 method replaced with `self`, the positional arguments `args` and the
/// keywords `kwargs`, as given.
fn fallback<'py>(
    py: Python<'py>,
    saved: &OnceLock<Py<PyAny>>,
    slf: &Bound<'py, PyAny>,
    args: impl Iterator<Item = Bound<'py, PyAny>>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<*mut ffi::PyObject> {
    let Some(original) = saved.get() else {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "efa: method called before import finished",
        ));
    };
    let mut all = vec![slf.clone()];
    all.extend(args);
    let all = PyTuple::new(py, all)?;
    Ok(original.bind(py).call(all, kwargs)?.into_ptr())
}

/// [`fallback`] for a `METH_FASTCALL | METH_KEYWORDS` call.
///
/// # Safety
/// As CPython passes them: `slf` valid, `args` `nargs` positional arguments followed by
/// one value per name in `kwnames` (a tuple of names, or NULL).
unsafe fn fallback_fast(
    py: Python<'_>,
    saved: &OnceLock<Py<PyAny>>,
    slf: *mut ffi::PyObject,
    (args, nargs, kwnames): (
        *const *mut ffi::PyObject,
        ffi::Py_ssize_t,
        *mut ffi::PyObject,
    ),
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: per the contract: every pointer read is a valid argument of the call.
    unsafe {
        let nargs = usize::try_from(nargs).unwrap_or(0);
        let arg = |i: usize| Bound::from_borrowed_ptr(py, *args.add(i));
        let kwargs = match Bound::from_borrowed_ptr_or_opt(py, kwnames) {
            None => None,
            Some(names) => {
                let names = names.downcast_into_unchecked::<PyTuple>();
                let d = PyDict::new(py);
                for (j, name) in names.iter().enumerate() {
                    d.set_item(name, arg(nargs + j))?;
                }
                Some(d)
            }
        };
        let slf = Bound::from_borrowed_ptr(py, slf);
        fallback(py, saved, &slf, (0..nargs).map(arg), kwargs.as_ref())
    }
}

/// The only argument of a `METH_FASTCALL` call with one positional argument and no
/// keywords, else NULL.
///
/// # Safety
/// As [`fallback_fast`].
#[inline(always)]
unsafe fn only_arg_fast(
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: per the contract.
    unsafe {
        if nargs != 1 || (!kwnames.is_null() && ffi::PyTuple_Size(kwnames) != 0) {
            return core::ptr::null_mut();
        }
        *args
    }
}

unsafe extern "C" fn post_send_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held and its arguments valid; the bodies
    // drop no `Py` handle (`crate::entry`).
    unsafe { crate::entry::enter(|py| post_send_fast_body(py, slf, args, nargs, kwnames)) }
}

/// # Safety
/// As [`fallback_fast`]; `slf` is a `QP` (CPython checked it).
unsafe fn post_send_fast_body(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: forwarded contract.
    unsafe {
        let wrs = only_arg_fast(args, nargs, kwnames);
        if wrs.is_null() {
            return fallback_fast(py, &POST_SEND, slf, (args, nargs, kwnames));
        }
        post_one(py, slf, wrs)
    }
}

unsafe extern "C" fn poll_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held and its arguments valid; the bodies
    // drop no `Py` handle (`crate::entry`).
    unsafe { crate::entry::enter(|py| poll_fast_body(py, slf, args, nargs, kwnames)) }
}

/// # Safety
/// As [`fallback_fast`]; `slf` is a `CQ` or an instance of a subclass.
unsafe fn poll_fast_body(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: forwarded contract.
    unsafe {
        match plain_i32(only_arg_fast(args, nargs, kwnames)) {
            Some(n) => poll_one(py, slf, n),
            None => fallback_fast(py, &POLL, slf, (args, nargs, kwnames)),
        }
    }
}

/// `post_send(wrs)` itself.
///
/// # Safety
/// `slf` (a `QP`: CPython checked it) and `wrs` valid for the call.
#[inline(always)]
unsafe fn post_one(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    wrs: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: `slf` and `wrs` are valid for the call (borrowed from CPython's arguments).
    let (slf, wrs) = unsafe { (Borrowed::from_ptr(py, slf), Borrowed::from_ptr(py, wrs)) };
    // SAFETY: CPython calls this method only with a `QP` (`QP` has no subclasses).
    let qp = unsafe { slf.downcast_unchecked::<QP>() }.try_borrow()?;
    crate::post::post_send(&qp, py, &wrs)?;
    Ok(py.None().into_ptr())
}

/// `poll(n)` itself.
///
/// # Safety
/// `slf` (a `CQ` or an instance of a subclass: CPython checked it) valid for the call.
#[inline(always)]
unsafe fn poll_one(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    n: i32,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: `slf` is valid for the call (CPython's argument).
    let slf = unsafe { Borrowed::from_ptr(py, slf) };
    // SAFETY: CPython calls this method only with a `CQ` or an instance of a subclass,
    // whose object starts with a `CQ`'s.
    let cq = unsafe { slf.downcast_unchecked::<CQ>() }.try_borrow()?;
    Ok(cq.poll_list(py, n)?.into_ptr())
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
#[inline(always)]
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
    // SAFETY: called by CPython with the GIL held and its arguments valid; the bodies
    // drop no `Py` handle (`crate::entry`).
    unsafe { crate::entry::enter(|py| post_send_body(py, slf, args, kwargs)) }
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
        return fallback(py, &POST_SEND, &slf, args.iter(), kwargs.as_ref());
    }
    // SAFETY: forwarded contract.
    unsafe { post_one(py, slf, wrs) }
}

unsafe extern "C" fn poll_raw(
    slf: *mut ffi::PyObject,
    args: *mut ffi::PyObject,
    kwargs: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held and its arguments valid; the bodies
    // drop no `Py` handle (`crate::entry`).
    unsafe { crate::entry::enter(|py| poll_body(py, slf, args, kwargs)) }
}

/// A plain `int` in `i32`'s range, else None (and no exception set).
///
/// # Safety
/// `n` a valid object; the GIL held.
#[inline(always)]
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
        return fallback(py, &POLL, &slf, args.iter(), kwargs.as_ref());
    };
    // SAFETY: forwarded contract.
    unsafe { poll_one(py, slf, n) }
}
