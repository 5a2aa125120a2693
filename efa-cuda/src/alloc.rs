//! [`DeviceAlloc`]: device memory owned by this crate, from `cuMemAlloc_v2`.

use crate::copy;
use crate::device::Device;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::memory::DeviceMemory;
use crate::sys::CUdeviceptr;

/// `len` bytes of device memory from `cuMemAlloc_v2` (in the device's primary context
/// unless a context of that device is current), freed with `cuMemFree_v2` on drop.
#[derive(Debug)]
pub struct DeviceAlloc {
    device: Device,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceAlloc {
    /// Allocates `len` bytes (contents undefined). Zero bytes: [`Error::EmptyBuffer`].
    ///
    /// Context: a context of `device` is made current for the call (the thread's current
    /// one if it is on `device`, else the primary context, pushed and popped again), so
    /// the memory belongs to that context whatever context the caller has current; it is
    /// freed the same way on drop.
    pub fn new(device: &Device, len: usize) -> Result<DeviceAlloc> {
        if len == 0 {
            return Err(Error::EmptyBuffer);
        }
        let driver = device.driver();
        let _ctx = device.make_current()?;
        let f = driver.api().mem_alloc()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out pointer; a context of `device` is current.
        driver.check("cuMemAlloc_v2", unsafe { f(&mut ptr, len) })?;
        Ok(DeviceAlloc {
            device: *device,
            ptr,
            len,
        })
    }

    /// Allocates `src.len()` bytes holding a copy of `src`.
    pub fn from_host(device: &Device, src: &[u8]) -> Result<DeviceAlloc> {
        let mut a = DeviceAlloc::new(device, src.len())?;
        a.copy_from_host(0, src)?;
        Ok(a)
    }

    /// Its device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Copies `src` into the allocation at `offset`.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        copy::copy_to_device(self, offset, src)
    }

    /// Copies bytes at `offset` into `dst`.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        copy::copy_to_host(self, offset, dst)
    }

    /// The whole allocation, read back to the host.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        copy::to_vec(self)
    }
}

// SAFETY: the allocation is owned by the value, never moves, and is freed only in Drop
// (so a leaked DeviceAlloc stays allocated forever).
unsafe impl DeviceMemory for DeviceAlloc {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn device_ordinal(&self) -> i32 {
        self.device.ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        Some(self.device.driver())
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        let driver = self.device.driver();
        // Freeing needs a context; if none can be made current the memory is leaked.
        let Ok(_ctx) = self.device.make_current() else {
            return;
        };
        if let Ok(f) = driver.api().mem_free() {
            // SAFETY: `ptr` came from cuMemAlloc_v2 and is freed once, here.
            unsafe { f(self.ptr) };
        }
    }
}
