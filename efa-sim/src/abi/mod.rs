//! The C ABI of `libibverbs.so.1` + `libefa.so.1`, translated onto [`crate::model`].
//!
//! Every exported function is declared with `export!` (module [`export`]) at its rdma-core
//! default version node. Objects handed to C are `#[repr(C)]` structs whose first member is
//! the public rdma-core struct (newest layout), followed by our private state, so a pointer
//! the consumer gives back is turned into ours with a cast (`from_*`).
//!
//! Unsafe code: every `extern "C"` function here trusts the caller to pass pointers
//! that rdma-core's contract allows (objects this library created, buffers of the
//! documented size); it checks NULL where rdma-core does.

#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
mod export;
mod cq;
mod device;
mod direct_hooks;
mod efadv;
mod layout;
mod marshall;
mod misc;
mod objects;
mod pd;
mod poll;
mod post;
mod private;
mod qp;
mod query;
mod stubs;

use core::ffi::c_int;

/// Sets the calling thread's `errno`.
#[inline]
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// `NULL` + `errno = e`, the object-creator failure convention (model §0).
#[inline]
pub(crate) fn null_with<T>(e: c_int) -> *mut T {
    set_errno(e);
    core::ptr::null_mut()
}

/// Moves `value` to the heap and leaks it as a C object pointer.
#[inline]
pub(crate) fn leak<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}
