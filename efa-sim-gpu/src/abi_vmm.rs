//! The virtual memory management API: physical chunks, reservations, maps, access.

use core::ffi::c_int;

use crate::ffi::*;
use crate::memory::GRANULARITY;
use crate::state::gpu;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`, `CU_MEM_LOCATION_TYPE_DEVICE`.
const PINNED: c_int = 1;
const LOCATION_DEVICE: c_int = 1;
/// Shareable handle types modelled (bitmask): none (0) or POSIX fd (1).
const HANDLE_TYPES: c_int = 1;

/// Checks a `CUmemAllocationProp`; returns (device, gpuDirectRDMACapable).
///
/// # Safety
/// `prop` is null or points to a `CUmemAllocationProp`.
unsafe fn check_prop(prop: *const AllocationProp) -> CuResult<(i32, bool)> {
    // SAFETY: caller's contract.
    let p = unsafe { get(prop) }?;
    if p.type_ != PINNED || p.location.type_ != LOCATION_DEVICE {
        return Err(INVALID_VALUE);
    }
    if p.requested_handle_types & !HANDLE_TYPES != 0 {
        return Err(NOT_SUPPORTED);
    }
    gpu()?.device(p.location.id).map_err(|_| INVALID_DEVICE)?;
    Ok((p.location.id, p.gpu_direct_rdma_capable != 0))
}

cu_fn! {
    /// `cuMemGetAllocationGranularity`: 2 MiB, minimum and recommended.
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const AllocationProp, option: c_int) {
        gpu()?;
        // SAFETY: caller passes a property struct or null.
        unsafe { check_prop(prop) }?;
        if !matches!(option, 0 | 1) {
            return Err(INVALID_VALUE);
        }
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(granularity, GRANULARITY as usize) }
    }
}

cu_fn! {
    /// `cuMemCreate`: size a multiple of the granularity, flags 0.
    fn cuMemCreate(handle: *mut u64, size: usize, prop: *const AllocationProp, flags: u64) {
        let g = gpu()?;
        // SAFETY: caller passes a property struct or null.
        let (device, rdma) = unsafe { check_prop(prop) }?;
        if flags != 0 || handle.is_null() {
            return Err(INVALID_VALUE);
        }
        let h = g.memory().create(device, size as u64, rdma)?;
        // SAFETY: non-null out pointer (caller).
        unsafe { put(handle, h) }
    }
}

cu_fn! {
    /// `cuMemRelease`: a mapped chunk is freed when its last mapping goes.
    fn cuMemRelease(handle: u64) {
        gpu()?.memory().release(handle)
    }
}

cu_fn! {
    /// `cuMemAddressReserve`: the address hint is ignored, flags must be 0.
    fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, _addr: CUdeviceptr, flags: u64) {
        let g = gpu()?;
        if flags != 0 || ptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let va = g.memory().reserve(size as u64, alignment as u64)?;
        // SAFETY: non-null out pointer (caller).
        unsafe { put(ptr, va) }
    }
}

cu_fn! {
    /// `cuMemAddressFree`: the whole reservation, unmapped.
    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) {
        gpu()?.memory().address_free(ptr, size as u64)
    }
}

cu_fn! {
    /// `cuMemMap`: a whole chunk at a granularity-aligned address inside a reservation,
    /// offset 0, flags 0; no access until `cuMemSetAccess`.
    fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: u64, flags: u64) {
        let g = gpu()?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        g.memory().map(ptr, size as u64, offset as u64, handle)
    }
}

cu_fn! {
    /// `cuMemUnmap`: a range made of whole mappings.
    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) {
        gpu()?.memory().unmap(ptr, size as u64)
    }
}

cu_fn! {
    /// `cuMemSetAccess`: every descriptor must name a device; flags 0 (none), 1 (read) or
    /// 3 (read/write). Only read/write makes copies possible.
    fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const AccessDesc, count: usize) {
        let g = gpu()?;
        if desc.is_null() || count == 0 {
            return Err(INVALID_VALUE);
        }
        let mut mem = g.memory();
        for i in 0..count {
            // SAFETY: `desc` points to `count` descriptors (caller).
            let d = unsafe { get(desc.add(i)) }?;
            let ok = d.location.type_ == LOCATION_DEVICE && g.device(d.location.id).is_ok();
            mem.set_access(ptr, size as u64, ok, d.flags)?;
        }
        Ok(())
    }
}
