//! The only place the model touches registered memory. Every range passed
//! here has been checked against a live MR (`Mr::host_range`), whose
//! registration (`Pd::reg_mr`, an `unsafe fn`) promised the memory stays
//! valid until deregistration.

use std::io;

/// Copies `dst.len()` bytes from registered host memory at `src`.
///
/// # Safety
/// `[src, src + dst.len())` must be readable memory of a live MR.
pub unsafe fn read_registered(src: usize, dst: &mut [u8]) {
    if dst.is_empty() {
        return;
    }
    // SAFETY: the caller guarantees the source range; `dst` is a distinct Rust buffer.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) }
}

/// Copies `src` into registered host memory at `dst`.
///
/// # Safety
/// `[dst, dst + src.len())` must be writable memory of a live MR.
pub unsafe fn write_registered(dst: usize, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    // SAFETY: the caller guarantees the destination range; `src` is a distinct Rust buffer
    // (or another registered range: copy() tolerates overlap).
    unsafe { std::ptr::copy(src.as_ptr(), dst as *mut u8, src.len()) }
}

/// Reads `len` bytes of process `pid` at `remote` into our registered range
/// at `local` (process_vm_readv). The kernel checks the remote range, so a
/// bad remote address yields an error, never a fault.
///
/// # Safety
/// `[local, local+len)` must be writable memory of a live MR.
pub unsafe fn pull_from_process(pid: u32, remote: u64, local: usize, len: usize) -> io::Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy_with_process(libc::process_vm_readv, pid, remote, local, len) }
}

/// Writes our registered range `[local, local+len)` into process `pid` at
/// `remote` (process_vm_writev).
///
/// # Safety
/// `[local, local+len)` must be readable memory of a live MR.
pub unsafe fn push_to_process(pid: u32, remote: u64, local: usize, len: usize) -> io::Result<()> {
    // SAFETY: forwarded contract.
    unsafe { copy_with_process(libc::process_vm_writev, pid, remote, local, len) }
}

/// The signature shared by `process_vm_readv` and `process_vm_writev`.
type ProcessVmFn = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> libc::ssize_t;

/// Copies between our `[local, local+len)` and `pid`'s memory at `remote` with `op`,
/// resuming after partial copies.
///
/// # Safety
/// `[local, local+len)` must be memory of a live MR, writable when `op` reads from `pid`.
unsafe fn copy_with_process(
    op: ProcessVmFn,
    pid: u32,
    remote: u64,
    local: usize,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            iov_base: (local + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: one local iovec inside a live MR (caller), one remote iovec the kernel validates.
        let n = unsafe { op(pid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n <= 0 {
            return Err(if n == 0 {
                io::Error::from(io::ErrorKind::UnexpectedEof)
            } else {
                io::Error::last_os_error()
            });
        }
        done += n as usize;
    }
    Ok(())
}
