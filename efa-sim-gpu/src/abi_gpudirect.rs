//! dma-buf export, GPUDirect flush, and the test controls.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::Ordering;

use crate::ffi::*;
use crate::state::gpu;

/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`, `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`.
const DMA_BUF_FD: c_int = 1;
const MAPPING_TYPE_PCIE: u64 = 1;

cu_fn! {
    /// `cuMemGetHandleForAddressRange` (see the crate docs for the fd's convention). Needs a
    /// current context (stricter than cuda.h's list of return codes; UCX and GDRCopy
    /// report failures without one, so callers push one anyway).
    fn cuMemGetHandleForAddressRange(handle: *mut c_void, dptr: CUdeviceptr, size: usize, handle_type: c_int, flags: u64) {
        let g = gpu()?;
        if handle.is_null() || handle_type != DMA_BUF_FD {
            return Err(INVALID_VALUE);
        }
        if flags == MAPPING_TYPE_PCIE {
            return Err(NOT_SUPPORTED);
        }
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        if !g.dmabuf_export.load(Ordering::Relaxed) {
            return Err(NOT_SUPPORTED);
        }
        g.current_device()?;
        let flags = if g.dmabuf_mmap.load(Ordering::Relaxed) { 0 } else { DMABUF_NO_MMAP };
        let cross_chunk = g.dmabuf_cross_chunk.load(Ordering::Relaxed);
        let fd = g.memory().export(dptr, size as u64, flags, cross_chunk)?;
        // SAFETY: `handle` points to an int for this handle type (caller).
        unsafe { put(handle.cast::<c_int>(), fd) }
    }
}

cu_fn! {
    /// `cuFlushGPUDirectRDMAWrites`: target 0 (current context), scope 100 or 200; counted
    /// per device of the current context.
    fn cuFlushGPUDirectRDMAWrites(target: c_int, scope: c_int) {
        let g = gpu()?;
        if target != 0 || !matches!(scope, 100 | 200) {
            return Err(INVALID_VALUE);
        }
        if g.flush_options.load(Ordering::Relaxed) & 1 == 0 {
            return Err(NOT_SUPPORTED);
        }
        let d = g.current_device()?;
        let counter = if scope == 100 { &d.flush_to_owner } else { &d.flush_to_all };
        counter.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

cu_fn! {
    /// Test control (not CUDA): see the crate docs.
    fn efaSimGpuControl(key: *const c_char, value: i64) {
        let g = gpu()?;
        if key.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: NUL-terminated string (caller).
        let key = unsafe { CStr::from_ptr(key) };
        match (key.to_bytes(), value) {
            (b"dmabuf_export", 0 | 1) => g.dmabuf_export.store(value == 1, Ordering::Relaxed),
            (b"dmabuf_mmap", 0 | 1) => g.dmabuf_mmap.store(value == 1, Ordering::Relaxed),
            (b"dmabuf_cross_chunk", 0 | 1) => {
                g.dmabuf_cross_chunk.store(value == 1, Ordering::Relaxed)
            }
            (b"rdma_writes_ordering", 0 | 100 | 200) => {
                g.rdma_writes_ordering.store(value, Ordering::Relaxed)
            }
            (b"flush_options", 0..=3) => g.flush_options.store(value, Ordering::Relaxed),
            _ => return Err(INVALID_VALUE),
        }
        Ok(())
    }
}

cu_fn! {
    /// Test query (not CUDA): flushes of `device` so far, per scope.
    fn efaSimGpuFlushCount(device: CUdevice, to_owner: *mut u64, to_all: *mut u64) {
        let d = gpu()?.device(device)?;
        // SAFETY: null or valid out pointers (caller).
        unsafe {
            put(to_owner, d.flush_to_owner.load(Ordering::Acquire))?;
            put(to_all, d.flush_to_all.load(Ordering::Acquire))
        }
    }
}

cu_fn! {
    /// Test query (not CUDA): the export `fd` was returned for; `CUDA_ERROR_INVALID_HANDLE`
    /// when `fd` is not (any more) one of this library's dma-buf fds.
    fn efaSimGpuDmaBufInfo(fd: c_int, out: *mut DmaBufInfo) {
        let info = gpu()?.memory().dmabuf_info(fd)?;
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(out, info) }
    }
}
