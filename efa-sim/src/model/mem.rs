//! The only place the model touches registered memory. Every range passed
//! here has been checked against a live MR (`Mr::host_range`), whose
//! registration (`Pd::reg_mr`, an `unsafe fn`) promised the memory stays
//! valid until deregistration, inside the read section that validated it (so
//! deregistration waits for the copy).
//!
//! One function per direction, for a memory backend to hook: [`read_registered`]
//! (MR → device buffer), [`write_registered`] (device buffer → MR),
//! [`copy_registered`] (MR → MR, the same-process path), and the cross-process pair
//! [`pull_from_process`] / [`push_to_process`].

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

/// Copies `len` bytes between two registered ranges of this process (the same-process
/// path: a requester's SGE and a responder's MR or receive buffer).
///
/// # Safety
/// `[src, src+len)` must be readable and `[dst, dst+len)` writable memory of live MRs.
pub unsafe fn copy_registered(dst: usize, src: usize, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: both ranges are live registered memory (caller); copy() tolerates overlap
    // (an MR registered twice, or a write onto its own source).
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
}

/// The payload of a request as the responder sees it: bytes of a packet, or (on the
/// same-process path) the requester's registered ranges, validated by the requester
/// inside the read section the responder runs in.
#[derive(Clone, Copy)]
pub(crate) enum Data<'a> {
    /// Bytes that arrived in a packet (or inline data of a WQE).
    Bytes(&'a [u8]),
    /// `(host address, length)` ranges of live MRs of this process, in order.
    Local(&'a [(usize, usize)]),
}

impl Data<'_> {
    /// Payload length.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Data::Bytes(b) => b.len(),
            Data::Local(r) => r.iter().map(|(_, l)| l).sum(),
        }
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes payload bytes `[from, from+n)` into registered memory at `dst`.
    ///
    /// # Safety
    /// `[dst, dst+n)` must be writable memory of a live MR; `from + n <= self.len()`.
    #[inline]
    pub unsafe fn write_to(&self, dst: usize, from: usize, n: usize) {
        match self {
            // SAFETY: forwarded; the slice bounds are checked by indexing.
            Data::Bytes(b) => unsafe { write_registered(dst, &b[from..from + n]) },
            Data::Local(ranges) => {
                let (mut skip, mut left, mut at) = (from, n, dst);
                for &(host, len) in ranges.iter() {
                    if left == 0 {
                        break;
                    }
                    if skip >= len {
                        skip -= len;
                        continue;
                    }
                    let take = (len - skip).min(left);
                    // SAFETY: the source range is live registered memory (see the type);
                    // the destination is the caller's.
                    unsafe { copy_registered(at, host + skip, take) };
                    at += take;
                    left -= take;
                    skip = 0;
                }
            }
        }
    }
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
