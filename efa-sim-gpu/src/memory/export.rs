//! dma-buf export: new open file descriptions of the memory file (crate docs: the fd
//! convention) and the lookup efa-sim uses to check one.

use std::os::fd::AsRawFd;

use super::{Kind, Memory, Region};
use crate::ffi::*;

impl Memory {
    /// `cuMemGetHandleForAddressRange`: a new open file description of the memory file,
    /// positioned at `va` (see the crate docs); `flags` go into its [`DmaBufInfo`].
    /// `cross_chunk` false: a range over more than one VMM mapping is refused
    /// (`CUDA_ERROR_INVALID_VALUE`), as by a driver that exports one allocation at a time.
    pub fn export(&mut self, va: u64, size: u64, flags: i32, cross_chunk: bool) -> CuResult<i32> {
        if size == 0 || va % self.page != 0 || size % self.page != 0 {
            return Err(INVALID_VALUE);
        }
        let (base, device) = self.check_range(va, size, true)?;
        if !cross_chunk && self.mappings_in(va, size) > 1 {
            return Err(INVALID_VALUE);
        }
        let path = format!("/proc/self/fd/{}\0", self.file.as_raw_fd());
        // SAFETY: NUL-terminated path; the new fd is handed to the caller.
        let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(OPERATING_SYSTEM);
        }
        // SAFETY: our fresh fd.
        if unsafe { libc::lseek(fd, va as libc::off_t, libc::SEEK_SET) } < 0 {
            // SAFETY: our fresh fd, closed once.
            unsafe { libc::close(fd) };
            return Err(OPERATING_SYSTEM);
        }
        if let Some(r) = self.regions.get_mut(&base) {
            r.exported = true;
        }
        self.exports.insert(
            fd,
            DmaBufInfo {
                base: va,
                size,
                device,
                flags,
            },
        );
        Ok(fd)
    }

    /// How many VMM mappings `[va, va + len)` touches (1 for `cuMemAlloc` memory; the
    /// range was checked to be mapped).
    fn mappings_in(&self, va: u64, len: u64) -> usize {
        match self.region_at(va) {
            Some((
                _,
                Region {
                    kind: Kind::Reserve { maps },
                    ..
                },
            )) => maps
                .range(..va.saturating_add(len))
                .filter(|(&at, m)| at + m.size > va)
                .count(),
            _ => 1,
        }
    }

    /// The export `fd` was returned for, if it still is that export.
    pub fn dmabuf_info(&self, fd: i32) -> CuResult<DmaBufInfo> {
        let info = *self.exports.get(&fd).ok_or(INVALID_HANDLE)?;
        // SAFETY: fstat/lseek on an fd number; a closed or foreign fd just fails the check.
        let (ino, pos) = unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return Err(INVALID_HANDLE);
            }
            (st.st_ino, libc::lseek(fd, 0, libc::SEEK_CUR))
        };
        if ino != self.ino || pos != info.base as libc::off_t {
            return Err(INVALID_HANDLE);
        }
        Ok(info)
    }
}
