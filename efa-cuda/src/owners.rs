//! What an EFA registration of CUDA memory holds: the device memory itself, plus, for the
//! dma-buf path, its export. These are the `efa-typestate` owner types
//! ([`DmaBufMemory`], [`DeviceAddressMemory`]) of a [`GpuMr`](crate::GpuMr); they can
//! also be registered directly ([`efa_typestate::DmaBufMr::new`],
//! [`efa_typestate::DeviceAddressMr::new`]) with the iova [`CudaDmaBuf::iova`] /
//! the CUDA address.

use std::os::fd::{AsRawFd, OwnedFd};

use efa_typestate::{AccessFlags, DeviceAddressMemory, DmaBufMemory};

use crate::align::ExportRange;
use crate::error::{Error, Result};
use crate::export::export_dmabuf;
use crate::memory::{device_of_pointer, driver_of, DeviceMemory};

/// The memory's range after the typed checks every registration makes first: not empty,
/// device memory according to the driver. Returns the device ordinal.
pub(crate) fn check_device_range<M: DeviceMemory + ?Sized>(mem: &M) -> Result<i32> {
    if mem.byte_len() == 0 {
        return Err(Error::EmptyBuffer);
    }
    let driver = driver_of(mem)?;
    device_of_pointer(driver, mem.device_ptr())
}

/// [`check_device_range`], after the rule remote access adds: memory a peer may read or
/// write must stay allocated if its registration is leaked. Returns the device ordinal.
pub(crate) fn check_registration<M: DeviceMemory + ?Sized>(
    mem: &M,
    access: AccessFlags,
) -> Result<i32> {
    let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    if access.intersects(remote) && !M::STAYS_ALLOCATED_IF_LEAKED {
        return Err(Error::RemoteAccessNeedsOwnedMemory);
    }
    check_device_range(mem)
}

/// Device memory `M` together with the dma-buf exported for the pages around it
/// ([`export_dmabuf`]): what `ibv_reg_dmabuf_mr` registers, with offset and length of
/// the buffer inside the export and [`iova`](Self::iova) = the CUDA address. The fd is
/// kept open while the value lives (re-registration needs it) and closed before the
/// memory is released.
#[derive(Debug)]
pub struct CudaDmaBuf<M: DeviceMemory> {
    // Declared before `mem`: the export is closed before the memory is freed.
    fd: OwnedFd,
    range: ExportRange,
    mem: M,
}

impl<M: DeviceMemory> CudaDmaBuf<M> {
    /// Exports the pages around `mem` (its device's context current while the driver is
    /// called). A failure gives the memory back with the reason: [`Error::EmptyBuffer`],
    /// [`Error::NotDeviceMemory`], [`Error::MissingEntryPoint`] for a driver without
    /// `cuMemGetHandleForAddressRange`, or the driver's `CUresult`.
    pub fn new(mem: M) -> core::result::Result<Self, (M, Error)> {
        if let Err(e) = check_device_range(&mem) {
            return Err((mem, e));
        }
        match export_dmabuf(&mem) {
            Ok(buf) => {
                let (fd, range) = buf.into_parts();
                Ok(CudaDmaBuf { fd, range, mem })
            }
            Err(e) => Err((mem, e)),
        }
    }
    /// What was exported and what is registered.
    pub fn range(&self) -> &ExportRange {
        &self.range
    }
    /// The iova to register it with: the CUDA address of the buffer's first byte.
    pub fn iova(&self) -> u64 {
        self.range.iova
    }
    /// The device memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// Closes the dma-buf fd and gives the memory back.
    pub fn into_memory(self) -> M {
        drop(self.fd);
        self.mem
    }
}

// SAFETY: the fd is a dma-buf export (by the driver) of the pages around `mem`, owned by
// the value and open as long as it lives; `[offset, offset + len)` of it is exactly
// `mem`'s range, device memory that `mem` keeps allocated for as long as the value lives
// (DeviceMemory contract) and that no Rust reference reaches (the host reaches device
// memory only through driver copies). A leaked value leaks `mem`, so the memory stays
// allocated after a leak exactly when `M`'s does.
unsafe impl<M: DeviceMemory> DmaBufMemory for CudaDmaBuf<M> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = M::STAYS_ALLOCATED_IF_LEAKED;
    fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
    fn offset(&self) -> u64 {
        self.range.offset
    }
    fn len(&self) -> usize {
        self.range.len as usize
    }
}

/// Device memory `M` named by its CUDA address, for `ibv_reg_mr` on that address (the
/// fallback path, which needs a kernel that can pin GPU pages: `nvidia_peermem`).
#[derive(Debug)]
pub struct CudaAddress<M: DeviceMemory> {
    mem: M,
}

impl<M: DeviceMemory> CudaAddress<M> {
    /// `mem`, checked to be non-empty device memory ([`Error::EmptyBuffer`],
    /// [`Error::NotDeviceMemory`], with the memory given back).
    pub fn new(mem: M) -> core::result::Result<Self, (M, Error)> {
        match check_device_range(&mem) {
            Ok(_) => Ok(CudaAddress { mem }),
            Err(e) => Err((mem, e)),
        }
    }
    /// The device memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// Gives the memory back.
    pub fn into_memory(self) -> M {
        self.mem
    }
}

// SAFETY: the range is `mem`'s: device memory (checked with the driver in `new`, and the
// DeviceMemory contract) that no Rust reference reaches, kept allocated at a fixed
// address while the value lives and, when `M` says so, forever after a leak.
unsafe impl<M: DeviceMemory> DeviceAddressMemory for CudaAddress<M> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = M::STAYS_ALLOCATED_IF_LEAKED;
    fn device_addr(&self) -> u64 {
        self.mem.device_ptr()
    }
    fn len(&self) -> usize {
        self.mem.byte_len()
    }
}
