//! The memory behind a host registration: a Python object's buffer, kept alive (and
//! pinned, through the memoryview the Python side took) for as long as it is registered;
//! and `read_own`, the copy of an inline send's bytes named by an integer address.
//! The crate's other `unsafe` code: the posts and their hand-off to a GIL-free thread
//! (`post.rs`), a zeroed `ibv_qp_attr` (`qp.rs`) and borrowing a caller's dma-buf fd to
//! duplicate it (`pd.rs`); each block states why it holds.

use core::ptr::NonNull;

use efa_typestate::{RawRegion, RegionMemory};
use pyo3::prelude::*;

/// `len` bytes at `ptr`, owned by `owner` (a memoryview, tensor, or `None` for the
/// package's integer-address form, where the caller vouches for the memory).
pub struct PyMemory {
    ptr: NonNull<u8>,
    len: usize,
    owner: Py<PyAny>,
}

impl PyMemory {
    /// # Safety
    /// `[ptr, ptr + len)` must be host memory that stays allocated while `owner` is
    /// alive (or, with `owner` = `None`, for as long as the caller keeps the
    /// registration: the integer-address form of `PD.reg_mr`, unchecked as in verbs).
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, owner: Py<PyAny>) -> PyMemory {
        PyMemory { ptr, len, owner }
    }
}

// SAFETY: `PyMemory` is an address and a reference count; no Rust code of this crate
// forms references to the bytes (registrations are read and written by copies only),
// and `Py` is `Send + Sync`.
unsafe impl Send for PyMemory {}
// SAFETY: as above.
unsafe impl Sync for PyMemory {}

// SAFETY: `into_raw` hands out the pointer and length given to `PyMemory::new` (valid
// for reads and writes while the owner lives, by its contract) and moves the owner's
// reference into `extra`, so a leaked registration leaks the owner too: the buffer
// stays allocated (STAYS_ALLOCATED_IF_LEAKED). Python code may still touch the bytes,
// as with the `efa` package; this crate never makes `&`/`&mut` of them. `from_raw`
// rebuilds the owner from exactly that reference.
unsafe impl RegionMemory for PyMemory {
    type Elem = u8;
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn into_raw(self) -> RawRegion<u8> {
        RawRegion {
            ptr: self.ptr,
            len: self.len,
            extra: self.owner.into_ptr() as usize,
        }
    }
    unsafe fn from_raw(raw: RawRegion<u8>) -> Self {
        let owner = Python::with_gil(|py| {
            // SAFETY: `extra` is the owned reference `into_raw` took out of a `Py`, used once.
            unsafe { Py::from_owned_ptr(py, raw.extra as *mut pyo3::ffi::PyObject) }
        });
        PyMemory {
            ptr: raw.ptr,
            len: raw.len,
            owner,
        }
    }
}

#[repr(C)]
struct IoVec {
    base: *mut core::ffi::c_void,
    len: usize,
}

// glibc's (declared here: the crate takes no libc dependency).
extern "C" {
    fn getpid() -> core::ffi::c_int;
    fn process_vm_readv(
        pid: core::ffi::c_int,
        local: *const IoVec,
        liovcnt: core::ffi::c_ulong,
        remote: *const IoVec,
        riovcnt: core::ffi::c_ulong,
        flags: core::ffi::c_ulong,
    ) -> isize;
}

/// The errno of an address that is not readable memory of this process.
const EFAULT: i32 = efa_typestate::Errno::EFAULT.0;

/// Copies `out.len()` bytes at the integer address `addr` of this process into `out`, for
/// an inline send whose SGE names its bytes by address only (as the package allows). The
/// kernel does the reading (`process_vm_readv` on this process): an address that is not
/// readable host memory (unmapped, device memory) is an `EfaError` (`EFAULT`), not a
/// crash. Nothing keeps a reference to the memory after the call.
pub fn read_own(addr: u64, out: &mut [u8]) -> PyResult<()> {
    if out.is_empty() {
        return Ok(());
    }
    let fail = |errno: i32, why: String| crate::errors::invalid_errno("post_send", errno, why);
    let Ok(base) = usize::try_from(addr) else {
        return Err(fail(
            EFAULT,
            format!("address 0x{addr:x} is not one of this process"),
        ));
    };
    let local = IoVec {
        base: out.as_mut_ptr().cast(),
        len: out.len(),
    };
    let remote = IoVec {
        base: base as *mut core::ffi::c_void,
        len: out.len(),
    };
    // SAFETY: `local` describes `out`, writable for its length; `remote` is only read, by
    // the kernel, which checks it against this process's mappings (EFAULT otherwise)
    // and never lets Rust code form a reference to it.
    let n = unsafe { process_vm_readv(getpid(), &local, 1, &remote, 1, 0) };
    if n == out.len() as isize {
        return Ok(());
    }
    let errno = match n {
        -1 => std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(EFAULT),
        _ => EFAULT, // a partial read: the range runs into memory that is not readable
    };
    Err(fail(
        errno,
        format!(
            "inline SGE 0x{addr:x}+{} is not readable host memory of this process ({})",
            out.len(),
            std::io::Error::from_raw_os_error(errno)
        ),
    ))
}
