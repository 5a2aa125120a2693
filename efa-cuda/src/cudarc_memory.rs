//! [`DeviceMemory`] for cudarc's device slices (feature `cudarc`), any element type.
//!
//! cudarc loads `libcuda.so.1` by name itself; these slices use the process-wide
//! [`crate::Driver::get`], which loads the same library (so the same driver state). As
//! with any GPU memory handed to a NIC, synchronize the slice's stream before posting work
//! that reads it, and before reading what the NIC wrote.

use cudarc::driver::{CudaSlice, DevicePtr};

use crate::memory::DeviceMemory;

// SAFETY: a CudaSlice owns its allocation, which never moves and is freed only when the
// slice drops (a leaked slice stays allocated); it is memory of the slice's context's
// device, allocated through the process-wide libcuda.so.1.
unsafe impl<T> DeviceMemory for CudaSlice<T> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        // The SyncOnDrop only records a read on the slice's own stream.
        let (ptr, _sync) = DevicePtr::device_ptr(self, self.stream());
        ptr
    }
    fn byte_len(&self) -> usize {
        self.num_bytes()
    }
    fn device_ordinal(&self) -> i32 {
        self.ordinal() as i32
    }
}
