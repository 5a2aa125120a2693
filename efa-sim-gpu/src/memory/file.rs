//! The memory file's I/O: memfds, positioned reads and writes, copies, hole punching.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::ffi::*;

pub(super) fn memfd() -> std::io::Result<OwnedFd> {
    // SAFETY: NUL-terminated name; the returned fd is new and ours.
    let fd = unsafe {
        libc::memfd_create(
            c"efa-sim-gpu-memory".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A memory file of `len` bytes sealed against shrinking, growing and further seals:
/// efa-sim maps exports of it, and a file truncated under a mapping turns the next access
/// into SIGBUS (exports are `O_RDWR` fds anyone holding them could `ftruncate`).
pub(super) fn sealed_memfd(len: u64) -> std::io::Result<OwnedFd> {
    let file = memfd()?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: plain syscalls on our own fd (an off_t length, an int seal argument).
    let ok = unsafe {
        libc::ftruncate(file.as_raw_fd(), len as libc::off_t) == 0
            && libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0
    };
    if !ok {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

pub(super) fn pio(fd: &OwnedFd, off: u64, buf: *mut u8, len: usize, write: bool) -> CuResult {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `buf` is valid for `len` bytes (callers pass slices); offsets fit off_t
        // (device addresses are below 2^47).
        let n = unsafe {
            let p = buf.add(done).cast();
            let o = (off + done as u64) as libc::off_t;
            if write {
                libc::pwrite(fd.as_raw_fd(), p, len - done, o)
            } else {
                libc::pread(fd.as_raw_fd(), p, len - done, o)
            }
        };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(OPERATING_SYSTEM);
        }
        if n == 0 {
            // Reading past the end of a store: the rest is zero.
            // SAFETY: within the caller's buffer.
            unsafe { core::ptr::write_bytes(buf.add(done), 0, len - done) };
            return Ok(());
        }
        done += n as usize;
    }
    Ok(())
}

pub(super) fn copy_fd(
    src: &OwnedFd,
    src_off: u64,
    dst: &OwnedFd,
    dst_off: u64,
    len: u64,
) -> CuResult {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        pio(src, src_off + done, buf.as_mut_ptr(), n, false)?;
        pio(dst, dst_off + done, buf.as_mut_ptr(), n, true)?;
        done += n as u64;
    }
    Ok(())
}

pub(super) fn punch(fd: &OwnedFd, off: u64, len: u64) {
    // SAFETY: plain syscall on our fd; failure only leaves stale bytes nobody can reach.
    unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        )
    };
}
