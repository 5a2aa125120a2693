//! [`VmmAllocation`]: device memory built with the virtual memory management API
//! (`cuMemCreate` chunks with `gpuDirectRDMACapable` set, mapped back to back into one
//! `cuMemAddressReserve` range, read/write access granted to the device), like PyTorch's
//! `expandable_segments` allocations.

use crate::copy;
use crate::device::Device;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::memory::DeviceMemory;
use crate::sys::*;

/// A contiguous device range backed by several physical chunks, unmapped and released on
/// drop.
#[derive(Debug)]
pub struct VmmAllocation {
    device: Device,
    base: CUdeviceptr,
    len: usize,
    chunk: usize,
    /// Physical chunks, in address order; `mapped` of them are mapped.
    handles: Vec<CUmemGenericAllocationHandle>,
    mapped: usize,
    /// Bytes reserved at `base` (0 until the reservation succeeded).
    reserved_len: usize,
}

impl Device {
    fn vmm_prop(&self) -> CUmemAllocationProp {
        CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requested_handle_types: CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.ordinal(),
            },
            win32_handle_meta_data: core::ptr::null_mut(),
            alloc_flags: CUmemAllocFlags {
                gpu_direct_rdma_capable: 1,
                ..Default::default()
            },
        }
    }

    /// `cuMemGetAllocationGranularity` (minimum) for GPUDirect-capable pinned chunks; a
    /// query by device, no context needed.
    pub fn vmm_granularity(&self) -> Result<usize> {
        let driver = self.driver();
        driver.init()?;
        let f = driver.api().mem_get_allocation_granularity()?;
        let prop = self.vmm_prop();
        let mut g = 0usize;
        // SAFETY: valid out pointer and property struct.
        let rc = unsafe { f(&mut g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) };
        driver.check("cuMemGetAllocationGranularity", rc)?;
        Ok(g)
    }
}

impl VmmAllocation {
    /// At least `len` bytes in chunks of the device's granularity.
    pub fn new(device: &Device, len: usize) -> Result<VmmAllocation> {
        let g = device.vmm_granularity()?;
        VmmAllocation::with_chunk_size(device, len, g)
    }

    /// `len` bytes (rounded up to whole chunks of `chunk` bytes, a multiple of the
    /// granularity): `ceil(len / chunk)` physical chunks mapped back to back.
    ///
    /// Context: the chunks are created on `device` by its location in the allocation
    /// properties; `device`'s context is made current for the calls anyway (pushed and
    /// popped as for [`DeviceAlloc`](crate::DeviceAlloc)), and for the unmapping on drop.
    pub fn with_chunk_size(device: &Device, len: usize, chunk: usize) -> Result<VmmAllocation> {
        if len == 0 {
            return Err(Error::EmptyBuffer);
        }
        let granularity = device.vmm_granularity()?;
        if chunk == 0 || granularity == 0 || chunk % granularity != 0 {
            return Err(Error::BadVmmSize {
                size: chunk,
                granularity,
            });
        }
        let n = len.div_ceil(chunk);
        let total = n.checked_mul(chunk).ok_or(Error::BadVmmSize {
            size: len,
            granularity,
        })?;
        let driver = device.driver();
        let api = driver.api();
        let (reserve, create, map, set_access) = (
            api.mem_address_reserve()?,
            api.mem_create()?,
            api.mem_map()?,
            api.mem_set_access()?,
        );
        // Release and unmap must exist too, or a failure could not be cleaned up.
        api.mem_release()?;
        api.mem_unmap()?;
        api.mem_address_free()?;
        let _ctx = device.make_current()?;
        let mut me = VmmAllocation {
            device: *device,
            base: 0,
            len,
            chunk,
            handles: Vec::with_capacity(n),
            mapped: 0,
            reserved_len: 0,
        };
        // SAFETY: valid out pointer; no fixed address requested.
        driver.check("cuMemAddressReserve", unsafe {
            reserve(&mut me.base, total, chunk, 0, 0)
        })?;
        me.reserved_len = total;
        let prop = device.vmm_prop();
        for i in 0..n {
            let mut h: CUmemGenericAllocationHandle = 0;
            // SAFETY: valid out pointer and property struct; flags must be 0.
            driver.check("cuMemCreate", unsafe { create(&mut h, chunk, &prop, 0) })?;
            me.handles.push(h);
            let at = me.base + (i * chunk) as u64;
            // SAFETY: `[at, at + chunk)` lies inside our reservation and is unmapped.
            driver.check("cuMemMap", unsafe { map(at, chunk, 0, h, 0) })?;
            me.mapped += 1;
        }
        let desc = CUmemAccessDesc {
            location: prop.location,
            flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the whole reservation is mapped; one valid descriptor.
        driver.check("cuMemSetAccess", unsafe {
            set_access(me.base, total, &desc, 1)
        })?;
        Ok(me)
    }

    /// Its device.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// Size of one physical chunk.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }
    /// Number of physical chunks.
    pub fn chunk_count(&self) -> usize {
        self.handles.len()
    }
    /// Bytes reserved and mapped (whole chunks; at least [`DeviceMemory::byte_len`]).
    pub fn mapped_len(&self) -> usize {
        self.chunk * self.handles.len()
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

// SAFETY: the range is owned by the value and released only in Drop (a leaked allocation
// stays mapped forever); the address never changes.
unsafe impl DeviceMemory for VmmAllocation {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        self.base
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

impl Drop for VmmAllocation {
    fn drop(&mut self) {
        let api = self.device.driver().api();
        // The VMM calls name their memory by address; the context is made current as for
        // the allocation (best effort: without it the calls are still made).
        let _ctx = self.device.make_current().ok();
        let (Some(unmap), Some(release), Some(free)) =
            (api.mem_unmap, api.mem_release, api.mem_address_free)
        else {
            return;
        };
        for i in 0..self.mapped {
            // SAFETY: chunk `i` was mapped at this address by `with_chunk_size`.
            unsafe { unmap(self.base + (i * self.chunk) as u64, self.chunk) };
        }
        for &h in &self.handles {
            // SAFETY: each handle came from cuMemCreate and is released once.
            unsafe { release(h) };
        }
        if self.reserved_len != 0 {
            // SAFETY: the reservation made in `with_chunk_size`, now unmapped.
            unsafe { free(self.base, self.reserved_len) };
        }
    }
}
