//! Python buffers of unsigned integers (numpy `uint64`/`uint32` arrays, `array.array`,
//! memoryviews) read and written in place for the array API (`arrays.rs`,
//! `arrays_poll.rs`), through the buffer protocol.
//!
//! The wheel is abi3 for CPython 3.9, whose limited API leaves the buffer protocol out
//! (it joined in 3.11), so PyO3 offers no `PyBuffer` here. `PyObject_GetBuffer` and
//! `PyBuffer_Release` and the `Py_buffer` layout are nevertheless exported by every
//! CPython 3 (and frozen in the stable ABI since 3.11, unchanged from 3.9's): they are
//! declared here.

use core::ffi::{c_char, c_int, c_void, CStr};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// CPython's `Py_buffer` (Include/pybuffer.h; the same from 3.9 on).
#[repr(C)]
struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
}

const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_STRIDES: c_int = 0x0010 | 0x0008;

/// An exported buffer, released on drop (drop it with the GIL held: every `View` lives
/// inside a call that holds it, and none is kept).
pub struct View<'py> {
    raw: RawBuffer,
    _gil: Python<'py>,
}

impl Drop for View<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was filled by a successful `PyObject_GetBuffer` (a `View` is made
        // only then) and is released once, here, with the GIL held (`_gil`).
        unsafe { PyBuffer_Release(&mut self.raw) }
    }
}

/// The unsigned-integer formats of the struct module (native, `@`, `=` or `<` order);
/// the width is checked against `itemsize`.
fn is_unsigned(format: &[u8]) -> bool {
    let body = match format.first() {
        Some(b'@' | b'=' | b'<') => &format[1..],
        _ => format,
    };
    matches!(body, b"B" | b"H" | b"I" | b"L" | b"Q" | b"N")
}

fn dtype_name(size: usize) -> &'static str {
    match size {
        4 => "uint32",
        _ => "uint64",
    }
}

impl<'py> View<'py> {
    /// `obj`'s buffer, which must hold unsigned integers of `size` bytes, have `ndim`
    /// dimensions and be C-contiguous (and writable if `writable`). `name` is the
    /// argument's name in the errors: `TypeError` for what is not such a buffer (not a
    /// buffer, another item type), `ValueError` for its shape (dimensions, strides, a
    /// read-only buffer to write).
    pub fn get(
        obj: &Bound<'py, PyAny>,
        name: &str,
        size: usize,
        ndim: usize,
        writable: bool,
    ) -> PyResult<View<'py>> {
        let py = obj.py();
        let mut raw = RawBuffer {
            buf: core::ptr::null_mut(),
            obj: core::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: core::ptr::null_mut(),
            shape: core::ptr::null_mut(),
            strides: core::ptr::null_mut(),
            suboffsets: core::ptr::null_mut(),
            internal: core::ptr::null_mut(),
        };
        let want = dtype_name(size);
        let flags = PYBUF_STRIDES | PYBUF_FORMAT;
        // SAFETY: `obj` is a live object (borrowed for the call, GIL held); `raw` is a
        // writable `Py_buffer` it fills on success (and leaves unowned on failure).
        if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut raw, flags) } != 0 {
            let cause = PyErr::fetch(py);
            return Err(PyTypeError::new_err(format!(
                "{name}: expected a buffer of {want} (a numpy {want} array), got {} ({cause})",
                obj.get_type().name()?
            )));
        }
        let view = View { raw, _gil: py };
        let r = &view.raw;
        let format: &[u8] = if r.format.is_null() {
            b"B"
        } else {
            // SAFETY: a non-null `format` of an exported buffer is a NUL-terminated
            // string that lives as long as the export (`view`).
            unsafe { CStr::from_ptr(r.format) }.to_bytes()
        };
        if r.itemsize != size as isize || !is_unsigned(format) {
            return Err(PyTypeError::new_err(format!(
                "{name}: expected {want} items (numpy dtype {want}), got format '{}' of {} bytes",
                String::from_utf8_lossy(format),
                r.itemsize
            )));
        }
        if r.ndim != ndim as c_int {
            return Err(PyValueError::new_err(format!(
                "{name}: expected {ndim} dimension(s), got {}",
                r.ndim
            )));
        }
        if writable && r.readonly != 0 {
            return Err(PyValueError::new_err(format!(
                "{name}: buffer is read-only"
            )));
        }
        // C-contiguous: each stride is the product of the sizes after it (dimensions of
        // one entry or none may have any stride).
        let mut expect = r.itemsize;
        for d in (0..view.ndim()).rev() {
            let n = view.dim(d);
            let s = view.stride(d).unwrap_or(expect);
            if n > 1 && s != expect {
                return Err(PyValueError::new_err(format!(
                    "{name}: not C-contiguous (stride {s} in dimension {d}; use numpy.ascontiguousarray)"
                )));
            }
            expect = expect.saturating_mul(n as isize);
        }
        Ok(view)
    }

    fn ndim(&self) -> usize {
        self.raw.ndim.max(0) as usize
    }

    /// Size of dimension `d` (0 for `d` >= ndim).
    pub fn dim(&self, d: usize) -> usize {
        if d >= self.ndim() {
            return 0;
        }
        if self.raw.shape.is_null() {
            return (self.raw.len / self.raw.itemsize.max(1)) as usize;
        }
        // SAFETY: an export with `PYBUF_ND` has `shape` of `ndim` entries, and `d < ndim`.
        (unsafe { *self.raw.shape.add(d) }).max(0) as usize
    }

    /// Stride of dimension `d` (< ndim); `None` when the export gave no strides (it is
    /// C-contiguous then).
    fn stride(&self, d: usize) -> Option<isize> {
        if self.raw.strides.is_null() || d >= self.ndim() {
            return None;
        }
        // SAFETY: as `dim`, for `strides` (asked with `PYBUF_STRIDES`).
        Some(unsafe { *self.raw.strides.add(d) })
    }

    /// Number of items.
    pub fn items(&self) -> usize {
        (self.raw.len / self.raw.itemsize.max(1)).max(0) as usize
    }

    /// The items as a pointer to `T` (the checked item size), valid for `items()` reads
    /// (and writes, if asked writable) while the view lives.
    pub fn ptr<T>(&self) -> *mut T {
        self.raw.buf.cast()
    }
}

/// The item types of the array API's integer arrays: plain unsigned integers, for which
/// every byte pattern is a value.
pub trait Item: Copy + sealed::Sealed {}
impl Item for u32 {}
impl Item for u64 {}
mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A `uint64` or `uint32` vector argument.
pub struct Ints<'py, T> {
    view: View<'py>,
    ptr: *const T,
    pub len: usize,
}

impl<'py, T: Item> Ints<'py, T> {
    /// A 1-D C-contiguous buffer of `T` (8 or 4 bytes).
    pub fn get(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Self> {
        let view = View::get(obj, name, core::mem::size_of::<T>(), 1, false)?;
        let len = view.items();
        let ptr = view.ptr::<T>();
        Ok(Ints { view, ptr, len })
    }

    /// The items, copied into `scratch` (cleared first) in one pass, and that copy as a
    /// slice. Copied, never read in place: the GIL keeps Python code from writing the
    /// buffer meanwhile, but not another thread's numpy, which writes arrays without the
    /// GIL; each item is read once here, so what the caller checks is what it uses
    /// (`tests/test_arrays_races.py`). Any alignment: the items are copied as bytes.
    pub fn copy_into<'s>(&self, scratch: &'s mut Vec<T>) -> &'s [T] {
        let _ = &self.view;
        scratch.clear();
        scratch.reserve_exact(self.len);
        // SAFETY: the source is the exported buffer's `len` items of `T`'s size (checked
        // item size; exported, so allocated, while `self.view` lives), read as bytes, so
        // at any alignment; the destination has room for `len` items (reserved) and does
        // not overlap a buffer Python exported; every byte pattern is a `T` (`Item`), so
        // the `len` items are initialised once copied.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.ptr.cast::<u8>(),
                scratch.as_mut_ptr().cast::<u8>(),
                self.len * core::mem::size_of::<T>(),
            );
            scratch.set_len(self.len);
        }
        scratch
    }
}
