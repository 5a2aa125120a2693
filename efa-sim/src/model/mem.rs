//! The only place the model touches registered memory. Every range passed
//! here has been checked against a live MR (`Mr::place`), whose
//! registration (`Pd::reg_mr`, an `unsafe fn`) promised the memory stays
//! valid until deregistration, inside the read section that validated it (so
//! deregistration waits for the copy). Registered bytes are either host memory (also a
//! mapping of a dma-buf) or CUDA device memory moved with the driver's copies (see
//! [`super::gpu`]): [`Place`] says which.
//!
//! One function per direction, for a memory backend to hook: [`read_registered`]
//! (MR → device buffer), [`write_registered`] (device buffer → MR),
//! [`copy_registered`] (host MR → host MR, the same-process path), and the cross-process
//! [`pull_from_process`] (this process copies out of a peer's memory; nothing here writes
//! another process's memory).

use super::gpu::DevicePtr;
use std::io;

/// Where registered bytes are.
#[derive(Clone, Copy)]
pub(crate) enum Place {
    /// A host address (host memory, or the model's mapping of a dma-buf).
    Host(usize),
    /// CUDA device memory (emulated DMA through the driver's copies).
    Device(DevicePtr),
}

impl Place {
    /// `n` bytes further.
    pub fn add(self, n: usize) -> Place {
        match self {
            Place::Host(h) => Place::Host(h + n),
            Place::Device(d) => Place::Device(d.add(n)),
        }
    }

    /// The host address, if the bytes have one (what `process_vm_*` can reach).
    pub fn host(self) -> Option<usize> {
        match self {
            Place::Host(h) => Some(h),
            Place::Device(_) => None,
        }
    }
}

/// A device copy failed (the driver's `CUresult`); no host memory was touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyFailed(pub i32);

/// Copies `dst.len()` bytes from registered memory at `src`.
///
/// # Safety
/// `src` must be the start of `dst.len()` readable bytes of a live MR.
pub unsafe fn read_registered(src: Place, dst: &mut [u8]) -> Result<(), CopyFailed> {
    if dst.is_empty() {
        return Ok(());
    }
    match src {
        // SAFETY: the caller guarantees the source range; `dst` is a distinct Rust buffer.
        Place::Host(h) => unsafe {
            std::ptr::copy_nonoverlapping(h as *const u8, dst.as_mut_ptr(), dst.len());
        },
        Place::Device(d) => d.read(dst).map_err(CopyFailed)?,
    }
    Ok(())
}

/// Copies `src` into registered memory at `dst`.
///
/// # Safety
/// `dst` must be the start of `src.len()` writable bytes of a live MR.
pub unsafe fn write_registered(dst: Place, src: &[u8]) -> Result<(), CopyFailed> {
    if src.is_empty() {
        return Ok(());
    }
    match dst {
        // SAFETY: the caller guarantees the destination range; `src` is a distinct Rust
        // buffer (or another registered range: copy() tolerates overlap).
        Place::Host(h) => unsafe { std::ptr::copy(src.as_ptr(), h as *mut u8, src.len()) },
        Place::Device(d) => d.write(src).map_err(CopyFailed)?,
    }
    Ok(())
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

/// Copies `len` registered bytes at `src` (host or device memory) into registered host
/// memory at `dst` (the same-process path's read answer).
///
/// # Safety
/// `[dst, dst+len)` must be writable host memory of a live MR and `src` the start of `len`
/// readable bytes of a live MR.
pub unsafe fn copy_to_host(dst: usize, src: Place, len: usize) -> Result<(), CopyFailed> {
    match src {
        // SAFETY: forwarded contract.
        Place::Host(h) => unsafe { copy_registered(dst, h, len) },
        Place::Device(d) if len > 0 => {
            // SAFETY: the caller guarantees `len` writable bytes at `dst`.
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            d.read(out).map_err(CopyFailed)?;
        }
        Place::Device(_) => {}
    }
    Ok(())
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
            Data::Local([(_, l)]) => *l,
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
    /// `dst` must be the start of `n` writable bytes of a live MR; `from + n <= self.len()`.
    #[inline(always)]
    pub unsafe fn write_to(&self, dst: Place, from: usize, n: usize) -> Result<(), CopyFailed> {
        // The same-process path's common case: one host range, copied whole.
        if let (Data::Local([(host, len)]), Place::Host(h)) = (self, dst) {
            if from == 0 && n == *len {
                // SAFETY: the source range is live registered memory (see the type); the
                // destination is the caller's.
                unsafe { copy_registered(h, *host, n) };
                return Ok(());
            }
        }
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
                    match at {
                        // SAFETY: the source range is live registered memory (see the
                        // type); the destination is the caller's.
                        Place::Host(h) => unsafe { copy_registered(h, host + skip, take) },
                        Place::Device(d) => {
                            // SAFETY: as above; the source is host memory of a live MR,
                            // readable for `take` bytes while the section is open.
                            let src = unsafe {
                                std::slice::from_raw_parts((host + skip) as *const u8, take)
                            };
                            d.write(src).map_err(CopyFailed)?;
                        }
                    }
                    at = at.add(take);
                    left -= take;
                    skip = 0;
                }
                Ok(())
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

// No `process_vm_writev`: efa-sim never writes another process's memory (a bulk read is
// pulled by its requester, see `runtime::pull`), so nothing lands there after the owner
// reset or destroyed the QP that named it.

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
