//! Primary contexts and the per-thread current-context stack.

use core::ffi::c_void;
use std::sync::atomic::Ordering;

use crate::ffi::*;
use crate::state::{gpu, STACK};

cu_fn! {
    /// `cuDevicePrimaryCtxRetain`.
    fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, device: CUdevice) {
        let d = gpu()?.device(device)?;
        let p = &*d.ctx as *const u8 as CUcontext;
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(ctx, p) }?;
        d.primary_refs.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

cu_fn! {
    /// `cuDevicePrimaryCtxRelease_v2`: `CUDA_ERROR_INVALID_CONTEXT` when not retained.
    fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) {
        let d = gpu()?.device(device)?;
        d.primary_refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| INVALID_CONTEXT)
    }
}

cu_fn! {
    /// `cuCtxGetCurrent`: NULL when the thread has none.
    fn cuCtxGetCurrent(ctx: *mut CUcontext) {
        gpu()?;
        let top = STACK.with(|s| s.borrow().last().copied()).unwrap_or(0);
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(ctx, top as *mut c_void) }
    }
}

cu_fn! {
    /// `cuCtxSetCurrent`: replaces the top of the stack; NULL pops it.
    fn cuCtxSetCurrent(ctx: CUcontext) {
        let g = gpu()?;
        if ctx.is_null() {
            STACK.with(|s| s.borrow_mut().pop());
            return Ok(());
        }
        g.context_device(ctx)?;
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            s.push(ctx as usize);
        });
        Ok(())
    }
}

cu_fn! {
    /// `cuCtxPushCurrent_v2`.
    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        let g = gpu()?;
        if ctx.is_null() {
            return Err(INVALID_VALUE);
        }
        g.context_device(ctx)?;
        STACK.with(|s| s.borrow_mut().push(ctx as usize));
        Ok(())
    }
}

cu_fn! {
    /// `cuCtxPopCurrent_v2`: `CUDA_ERROR_INVALID_CONTEXT` on an empty stack.
    fn cuCtxPopCurrent_v2(ctx: *mut CUcontext) {
        gpu()?;
        let top = STACK.with(|s| s.borrow_mut().pop()).ok_or(INVALID_CONTEXT)?;
        if !ctx.is_null() {
            // SAFETY: non-null out pointer (caller).
            unsafe { put(ctx, top as *mut c_void) }?;
        }
        Ok(())
    }
}

cu_fn! {
    /// `cuCtxGetDevice`.
    fn cuCtxGetDevice(device: *mut CUdevice) {
        let d = gpu()?.current_device()?;
        // SAFETY: null or a valid out pointer (caller).
        unsafe { put(device, d.ordinal) }
    }
}

cu_fn! {
    /// `cuCtxSynchronize`: nothing runs asynchronously here.
    fn cuCtxSynchronize() {
        gpu()?.current_device()?;
        Ok(())
    }
}

cu_fn! {
    /// Legacy `cuCtxPushCurrent` (pre-4.0 ABI): not provided.
    fn cuCtxPushCurrent(_ctx: CUcontext) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuCtxPopCurrent` (pre-4.0 ABI): not provided.
    fn cuCtxPopCurrent(_ctx: *mut CUcontext) {
        Err(NOT_SUPPORTED)
    }
}

cu_fn! {
    /// Legacy `cuDevicePrimaryCtxRelease` (pre-11.0 ABI): not provided.
    fn cuDevicePrimaryCtxRelease(_device: CUdevice) {
        Err(NOT_SUPPORTED)
    }
}
