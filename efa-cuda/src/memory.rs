//! Device memory: the [`DeviceMemory`] trait (anything that can name a CUDA device range:
//! the Rust counterpart of a tensor's `data_ptr()`/`numel()*element_size()`), raw
//! pointer/length pairs, and pointer attribute queries.

use core::ffi::c_void;

use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::sys::{ptr_attr, CUdeviceptr, CU_MEMORYTYPE_DEVICE};

/// A range of CUDA device memory that stays put while the value lives.
///
/// # Safety
/// Implementors guarantee that `[device_ptr(), device_ptr() + byte_len())` is memory of
/// device `device_ordinal()` allocated through `driver()` (or the process-wide driver
/// when `None`), that all four methods return the same values on every call, that the
/// memory stays allocated while `self` lives (and forever after a leak of `self` when
/// [`STAYS_ALLOCATED_IF_LEAKED`](Self::STAYS_ALLOCATED_IF_LEAKED) is true), and that
/// nothing but the holder of `self` accesses it.
pub unsafe trait DeviceMemory {
    /// True if leaking the holder leaves the memory allocated forever (owned
    /// allocations), false if it can be freed and reused meanwhile (borrows). Only such
    /// memory may be registered with remote write access in safe code.
    const STAYS_ALLOCATED_IF_LEAKED: bool;
    /// CUDA device address of the first byte.
    fn device_ptr(&self) -> u64;
    /// Length in bytes.
    fn byte_len(&self) -> usize;
    /// Ordinal of the device that holds it.
    fn device_ordinal(&self) -> i32;
    /// The driver that allocated it; `None` means the process-wide [`Driver::get`].
    fn driver(&self) -> Option<&'static Driver> {
        None
    }
}

/// The driver of `mem`, loading the process-wide one where `mem` names none.
pub(crate) fn driver_of<M: DeviceMemory + ?Sized>(mem: &M) -> Result<&'static Driver> {
    match mem.driver() {
        Some(d) => Ok(d),
        None => Driver::get(),
    }
}

// SAFETY: a mutable borrow of device memory is exclusive and the borrowed value cannot
// move or be freed while borrowed; after a leak of the holder the borrow ends and the
// owner may free the memory, hence `false`.
unsafe impl<M: DeviceMemory + ?Sized> DeviceMemory for &mut M {
    const STAYS_ALLOCATED_IF_LEAKED: bool = false;
    fn device_ptr(&self) -> u64 {
        (**self).device_ptr()
    }
    fn byte_len(&self) -> usize {
        (**self).byte_len()
    }
    fn device_ordinal(&self) -> i32 {
        (**self).device_ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        (**self).driver()
    }
}

// SAFETY: an `Arc` keeps the memory allocated while any clone lives, and forever when a
// clone is leaked (so exactly when `M` says a leak keeps it); the clones together are its
// holder. This is how one buffer is registered on several PDs (a multi-rail transfer,
// one registration per EFA device): device memory is reached only through the driver's
// copies and the NIC, never through a Rust reference, so sharing it aliases nothing.
unsafe impl<M: DeviceMemory> DeviceMemory for std::sync::Arc<M> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = M::STAYS_ALLOCATED_IF_LEAKED;
    fn device_ptr(&self) -> u64 {
        (**self).device_ptr()
    }
    fn byte_len(&self) -> usize {
        (**self).byte_len()
    }
    fn device_ordinal(&self) -> i32 {
        (**self).device_ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        (**self).driver()
    }
}

/// Device memory given as a raw CUDA pointer and length (e.g. a PyTorch tensor's
/// `data_ptr()` and byte size), checked against the driver's pointer attributes.
#[derive(Clone, Copy, Debug)]
pub struct RawDeviceMemory {
    driver: &'static Driver,
    ptr: u64,
    len: usize,
    ordinal: i32,
}

impl RawDeviceMemory {
    /// `len` bytes of device memory at `ptr`. The driver is asked what `ptr` is: host
    /// memory and pointers it does not know fail with [`Error::NotDeviceMemory`], an
    /// empty range with [`Error::EmptyBuffer`].
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be device memory allocated through `driver` that stays
    /// allocated until every value made from this one is dropped, and forever if one of
    /// them is leaked (a registration of it may be written by peers at any time); nothing
    /// else may access it meanwhile except through those values.
    pub unsafe fn new(driver: &'static Driver, ptr: u64, len: usize) -> Result<RawDeviceMemory> {
        if len == 0 {
            return Err(Error::EmptyBuffer);
        }
        let ordinal = device_of_pointer(driver, ptr)?;
        Ok(RawDeviceMemory {
            driver,
            ptr,
            len,
            ordinal,
        })
    }
}

// SAFETY: the constructor's contract makes the caller guarantee allocation, stability
// and exclusivity, including after a leak.
unsafe impl DeviceMemory for RawDeviceMemory {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn device_ordinal(&self) -> i32 {
        self.ordinal
    }
    fn driver(&self) -> Option<&'static Driver> {
        Some(self.driver)
    }
}

impl Driver {
    /// `cuPointerGetAttribute` for a scalar attribute (see [`crate::sys::ptr_attr`]); the
    /// value is read as the 64-bit integer the driver writes (narrower types are
    /// zero-extended, the buffer starts zeroed).
    pub fn pointer_attribute(&self, ptr: u64, attribute: i32) -> Result<u64> {
        self.init()?;
        let f = self.api().pointer_get_attribute()?;
        let mut v: u64 = 0;
        // SAFETY: the out buffer is 8 bytes, enough for every scalar attribute.
        let rc = unsafe {
            f(
                (&mut v as *mut u64).cast::<c_void>(),
                attribute,
                ptr as CUdeviceptr,
            )
        };
        self.check("cuPointerGetAttribute", rc)?;
        Ok(v)
    }
}

impl Driver {
    /// `cuMemGetAddressRange_v2`: `(base, size)` of the allocation holding `ptr`; for VMM
    /// memory the one mapped chunk holding it, not the reservation (cuda-gpudirect.md
    /// §2.2). Needs no context of its own (the driver finds the allocation by address).
    pub fn allocation_range(&self, ptr: u64) -> Result<(u64, u64)> {
        self.init()?;
        let f = self.api().mem_get_address_range()?;
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out pointers.
        self.check("cuMemGetAddressRange_v2", unsafe {
            f(&mut base, &mut size, ptr)
        })?;
        Ok((base, size as u64))
    }
}

/// The ordinal of the device holding `ptr`, or [`Error::NotDeviceMemory`].
pub(crate) fn device_of_pointer(driver: &Driver, ptr: u64) -> Result<i32> {
    let memory_type = match driver.pointer_attribute(ptr, ptr_attr::MEMORY_TYPE) {
        Ok(t) => t as u32,
        // The driver does not know the pointer: not CUDA memory (cuda.h documents
        // INVALID_VALUE for that).
        Err(Error::Cuda(e)) if e.code == crate::sys::CUDA_ERROR_INVALID_VALUE => 0,
        Err(e) => return Err(e),
    };
    if memory_type != CU_MEMORYTYPE_DEVICE {
        return Err(Error::NotDeviceMemory { ptr, memory_type });
    }
    Ok(driver.pointer_attribute(ptr, ptr_attr::DEVICE_ORDINAL)? as u32 as i32)
}
