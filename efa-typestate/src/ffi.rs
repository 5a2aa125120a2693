//! The FFI surface this crate uses: `efa_sys::verbs` (libibverbs) and `efa_sys::efadv`
//! (rdma-core 65 layout, EFA_1.3+ resolved at run time), plus the two libc calls the
//! blocking waits need (`poll`, `errno`).

pub use efa_sys::efadv::*;
pub use efa_sys::verbs::*;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: glibc's __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Waits until `fd` is readable. `timeout_ms < 0` waits forever. `Ok(true)` = readable.
pub fn wait_readable(fd: i32, timeout_ms: i32) -> Result<bool, i32> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds = 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = errno();
        if e != libc::EINTR {
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
