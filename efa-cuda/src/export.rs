//! dma-buf export of device memory (`cuMemGetHandleForAddressRange`): the page-rounded
//! range covering a buffer, as a file descriptor a NIC driver can import.

use core::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};

use crate::align::{export_range, host_page_size, ExportRange};
use crate::error::{Error, Result};
use crate::memory::{device_of_pointer, driver_of, DeviceMemory};
use crate::sys::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;

/// A dma-buf exported for the pages around a buffer. The fd is closed on drop (a
/// registration made from it holds its own reference).
#[derive(Debug)]
pub struct DmaBuf {
    fd: OwnedFd,
    range: ExportRange,
}

impl DmaBuf {
    /// The dma-buf file descriptor.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
    /// What was exported and what to register (offset, length, iova).
    pub fn range(&self) -> &ExportRange {
        &self.range
    }
    /// The parts.
    pub fn into_parts(self) -> (OwnedFd, ExportRange) {
        (self.fd, self.range)
    }
}

/// Exports the host pages covering `mem` as a dma-buf. Context: `mem`'s device context
/// is made current for the call (its primary context pushed when the thread's current
/// context is on another device or there is none; the previous one restored after).
/// One `cuMemGetHandleForAddressRange` call covers the whole page-rounded range: cuda.h
/// names no size limit, and a VMM range may span chunks of one device with identical
/// properties (a driver may still refuse it: [`SplitGpuMr`](crate::SplitGpuMr)). Host memory fails with [`Error::NotDeviceMemory`], a driver without the
/// entry point with [`Error::MissingEntryPoint`], a refusal with the driver's `CUresult`.
pub fn export_dmabuf<M: DeviceMemory + ?Sized>(mem: &M) -> Result<DmaBuf> {
    let driver = driver_of(mem)?;
    let f = driver.api().mem_get_handle_for_address_range()?;
    let ptr = mem.device_ptr();
    if mem.byte_len() == 0 {
        return Err(Error::EmptyBuffer);
    }
    let ordinal = device_of_pointer(driver, ptr)?;
    let range = export_range(ptr, mem.byte_len() as u64, host_page_size())?;
    let _ctx = driver.device(ordinal)?.make_current()?;
    let mut fd: c_int = -1;
    // SAFETY: `handle` points to an int (the DMA_BUF_FD handle type); the range is
    // page-aligned and covers memory `mem` holds; flags 0 (no PCIe mapping override).
    let rc = unsafe {
        f(
            (&mut fd as *mut c_int).cast::<c_void>(),
            range.export_base,
            range.export_len as usize,
            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    };
    driver.check("cuMemGetHandleForAddressRange", rc)?;
    if fd < 0 {
        return Err(Error::Os {
            call: "cuMemGetHandleForAddressRange",
            errno: libc::EBADF,
        });
    }
    // SAFETY: the driver just created this fd for us; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(DmaBuf { fd, range })
}
