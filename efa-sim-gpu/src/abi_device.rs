//! Init, version, error names, devices and device attributes.

use core::ffi::{c_char, c_int, c_uint};
use std::sync::atomic::Ordering;

use crate::ffi::*;
use crate::state::{driver_version, gpu, init};

cu_fn! {
    /// `cuInit`: flags must be 0; no devices → `CUDA_ERROR_NO_DEVICE` (sticky).
    fn cuInit(flags: c_uint) {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        init()
    }
}

cu_fn! {
    /// `cuDriverGetVersion` (works before `cuInit`).
    fn cuDriverGetVersion(version: *mut c_int) {
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(version, driver_version()) }
    }
}

fn lookup(code: CUresult) -> Option<&'static (CUresult, &'static str, &'static str)> {
    NAMES.iter().find(|e| e.0 == code)
}

cu_fn! {
    /// `cuGetErrorName`: unknown codes give `CUDA_ERROR_INVALID_VALUE` and NULL.
    fn cuGetErrorName(code: CUresult, out: *mut *const c_char) {
        let s = lookup(code).map_or(core::ptr::null(), |e| e.1.as_ptr().cast());
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(out, s) }?;
        if s.is_null() { Err(INVALID_VALUE) } else { Ok(()) }
    }
}

cu_fn! {
    /// `cuGetErrorString`.
    fn cuGetErrorString(code: CUresult, out: *mut *const c_char) {
        let s = lookup(code).map_or(core::ptr::null(), |e| e.2.as_ptr().cast());
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(out, s) }?;
        if s.is_null() { Err(INVALID_VALUE) } else { Ok(()) }
    }
}

cu_fn! {
    /// `cuDeviceGetCount`.
    fn cuDeviceGetCount(count: *mut c_int) {
        let g = gpu()?;
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(count, g.devices.len() as c_int) }
    }
}

cu_fn! {
    /// `cuDeviceGet`: the handle is the ordinal.
    fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) {
        let g = gpu()?;
        g.device(ordinal)?;
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(device, ordinal) }
    }
}

cu_fn! {
    /// `cuDeviceGetName`: "efa-sim-gpu software GPU N", truncated to `len - 1` bytes.
    fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) {
        let g = gpu()?;
        g.device(device)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let s = format!("efa-sim-gpu software GPU {device}");
        let n = s.len().min(len as usize - 1);
        // SAFETY: `name` is writable for `len` bytes (caller); n + 1 <= len.
        unsafe {
            core::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), name, n);
            *name.add(n) = 0;
        }
        Ok(())
    }
}

cu_fn! {
    /// `cuDeviceGetAttribute` for the attributes efa-cuda reads; others are
    /// `CUDA_ERROR_INVALID_VALUE`.
    fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: CUdevice) {
        let g = gpu()?;
        g.device(device)?;
        let v = match attribute {
            33 => g.pci[device as usize][1],                       // PCI bus id
            34 => g.pci[device as usize][2],                       // PCI device id
            50 => g.pci[device as usize][0],                       // PCI domain id
            41 => 1,                                               // unified addressing
            75 => 9,                                               // compute capability 9.0
            76 => 0,
            98 => 1,                                               // can flush remote writes
            102 => 1,                                              // VMM supported
            103 => 1,                                              // POSIX fd handles
            110 => 1,                                              // GPUDirect RDMA with VMM
            116 => 1,                                              // GPUDirect RDMA
            117 => g.flush_options.load(Ordering::Relaxed) as c_int,
            118 => g.rdma_writes_ordering.load(Ordering::Relaxed) as c_int,
            124 => g.dmabuf_export.load(Ordering::Relaxed) as c_int, // dma-buf supported
            _ => return Err(INVALID_VALUE),
        };
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(value, v) }
    }
}
