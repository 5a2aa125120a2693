//! `cuMemAlloc_v2` memory, copies, address ranges and pointer attributes.

use core::ffi::c_void;

use crate::ffi::*;
use crate::state::gpu;

cu_fn! {
    /// `cuMemAlloc_v2`: page-aligned, needs a current context (its device gets it).
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) {
        let g = gpu()?;
        let d = g.current_device()?;
        if dptr.is_null() {
            return Err(INVALID_VALUE);
        }
        let va = g.memory().alloc(d.ordinal, size as u64)?;
        // SAFETY: non-null out pointer (caller).
        unsafe { put(dptr, va) }
    }
}

cu_fn! {
    /// `cuMemFree_v2`: only the base of a live `cuMemAlloc_v2` allocation.
    fn cuMemFree_v2(dptr: CUdeviceptr) {
        let g = gpu()?;
        g.current_device()?;
        g.memory().free(dptr)
    }
}

cu_fn! {
    /// `cuMemcpyHtoD_v2`: the whole destination must be allocated device memory.
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, len: usize) {
        let g = gpu()?;
        g.current_device()?;
        if len == 0 {
            return Ok(());
        }
        if src.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `src` is readable for `len` bytes (caller, cuda.h contract).
        let src = unsafe { core::slice::from_raw_parts(src.cast::<u8>(), len) };
        g.memory().write(dst, src)
    }
}

cu_fn! {
    /// `cuMemcpyDtoH_v2`.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, len: usize) {
        let g = gpu()?;
        g.current_device()?;
        if len == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: `dst` is writable for `len` bytes (caller, cuda.h contract).
        let dst = unsafe { core::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        g.memory().read(src, dst)
    }
}

cu_fn! {
    /// `cuMemcpyDtoD_v2`.
    fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, len: usize) {
        let g = gpu()?;
        g.current_device()?;
        if len == 0 {
            return Ok(());
        }
        g.memory().copy(dst, src, len as u64)
    }
}

cu_fn! {
    /// `cuMemsetD8_v2`.
    fn cuMemsetD8_v2(dst: CUdeviceptr, value: u8, len: usize) {
        let g = gpu()?;
        g.current_device()?;
        let chunk = vec![value; len.min(1 << 16)];
        let mem = g.memory();
        let mut done = 0usize;
        while done < len {
            let n = chunk.len().min(len - done);
            mem.write(dst + done as u64, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }
}

cu_fn! {
    /// `cuMemGetAddressRange_v2`: a `cuMemAlloc` allocation, or the single VMM chunk
    /// containing `dptr` (not the reservation, as NVIDIA's driver reports).
    fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) {
        let (b, s) = gpu()?.memory().address_range(dptr)?;
        if !base.is_null() {
            // SAFETY: non-null out pointer (caller).
            unsafe { put(base, b) }?;
        }
        if !size.is_null() {
            // SAFETY: non-null out pointer (caller).
            unsafe { put(size, s as usize) }?;
        }
        Ok(())
    }
}

cu_fn! {
    /// `cuPointerGetAttribute`: `CUDA_ERROR_INVALID_VALUE` for memory this driver did not
    /// allocate and for attributes it does not model. Widths as cuda.h: CONTEXT pointer,
    /// MEMORY_TYPE / IS_GPU_DIRECT_RDMA_CAPABLE `unsigned int`, DEVICE_ORDINAL `int`,
    /// IS_MANAGED / MAPPED `bool` (1 byte), the others 64-bit.
    fn cuPointerGetAttribute(data: *mut c_void, attribute: i32, ptr: CUdeviceptr) {
        let g = gpu()?;
        let info = g.memory().pointer(ptr).ok_or(INVALID_VALUE)?;
        if data.is_null() {
            return Err(INVALID_VALUE);
        }
        let mapped = if info.mapped { Ok(()) } else { Err(INVALID_VALUE) };
        // SAFETY: `data` is valid for the attribute's C type (caller, cuda.h contract).
        unsafe {
            match attribute {
                1 => {
                    let ctx = if info.is_alloc {
                        let d = g.device(info.device)?;
                        &*d.ctx as *const u8 as CUcontext
                    } else {
                        core::ptr::null_mut()
                    };
                    mapped?;
                    put(data.cast::<CUcontext>(), ctx)
                }
                2 => mapped.and_then(|()| put(data.cast::<u32>(), 2)),
                3 => mapped.and_then(|()| put(data.cast::<u64>(), ptr)),
                7 => put(data.cast::<u64>(), info.buffer_id),
                8 => put(data.cast::<u8>(), 0),
                9 => mapped.and_then(|()| put(data.cast::<i32>(), info.device)),
                11 => put(data.cast::<u64>(), info.range_start),
                12 => put(data.cast::<u64>(), info.range_size),
                13 => put(data.cast::<u8>(), info.mapped as u8),
                15 => put(data.cast::<u32>(), info.rdma_capable as u32),
                _ => Err(INVALID_VALUE),
            }
        }
    }
}

cu_fn! {
    /// Legacy `cuMemAlloc` (32-bit `unsigned int` size and pointer): not provided.
    fn cuMemAlloc(_dptr: *mut u32, _size: u32) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuMemFree` (32-bit pointer): not provided.
    fn cuMemFree(_dptr: u32) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuMemcpyHtoD` (32-bit pointer): not provided.
    fn cuMemcpyHtoD(_dst: u32, _src: *const c_void, _len: u32) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuMemcpyDtoH` (32-bit pointer): not provided.
    fn cuMemcpyDtoH(_dst: *mut c_void, _src: u32, _len: u32) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuMemGetAddressRange` (32-bit pointers): not provided.
    fn cuMemGetAddressRange(_base: *mut u32, _size: *mut u32, _dptr: u32) {
        Err(NOT_SUPPORTED)
    }
}
