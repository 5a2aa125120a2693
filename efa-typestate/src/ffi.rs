//! The FFI surface this crate uses: `efa_sys::verbs` (libibverbs) and `efa_sys::efadv`
//! (rdma-core 65 layout, EFA_1.3+ resolved at run time), plus the two libc calls the
//! blocking waits need (`poll`, `errno`), declared here because this crate does not
//! depend on libc.

use core::ffi::c_int;

pub use efa_sys::efadv::*;
pub use efa_sys::verbs::*;

extern "C" {
    fn __errno_location() -> *mut c_int;
    fn poll(fds: *mut PollFd, nfds: u64, timeout: c_int) -> c_int;
}

/// `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
const POLLIN: i16 = 1;
const EINTR: i32 = 4;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: glibc's __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *__errno_location() }
}

/// Waits until `fd` is readable. `timeout_ms < 0` waits forever. `Ok(true)` = readable.
pub fn wait_readable(fd: c_int, timeout_ms: c_int) -> Result<bool, i32> {
    let mut pfd = PollFd {
        fd,
        events: POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds = 1.
        let rc = unsafe { poll(&mut pfd, 1, timeout_ms) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = errno();
        if e != EINTR {
            return Err(e);
        }
    }
}

/// Maps an efa-sys "not provided by this libefa" to our error.
pub fn not_provided(verb: crate::error::Verb, _: NotProvided) -> crate::error::Error {
    crate::error::Error::Unsupported {
        verb,
        why: crate::error::Unsupported::NotInLibrary,
    }
}
