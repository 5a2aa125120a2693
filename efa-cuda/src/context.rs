//! Current contexts: the calls that need one on the memory's device get it through a
//! [`ContextGuard`], which pushes the device's primary context only when the thread's
//! current context is not already on that device, and pops it again when dropped.

use core::marker::PhantomData;

use crate::device::Device;
use crate::driver::Driver;
use crate::error::Result;
use crate::sys::CUcontext;

/// Keeps a context of one device current on this thread; restores the previous state
/// when dropped. Not `Send`: CUDA context stacks are per thread.
///
/// Every GPU path of this crate names the context it needs in its docs. They fall in
/// three groups:
/// * **made current for the call** ([`Device::make_current`], the previous context
///   restored when the call returns, on success and on error): allocation
///   ([`DeviceAlloc`](crate::DeviceAlloc) and its drop, [`VmmAllocation`](crate::VmmAllocation)
///   and its drop), copies ([`copy_to_device`](crate::copy_to_device),
///   [`copy_to_host`](crate::copy_to_host), [`fill`](crate::fill), the `GpuMr` and
///   `SplitGpuMr` copies), export ([`export_dmabuf`](crate::export_dmabuf)), registration
///   ([`register`](crate::register()), [`SplitGpuMr::new`](crate::SplitGpuMr::new)) and
///   [`Device::flush_gpudirect_writes`]. A call for GPU 1 made while GPU 0's context is
///   current runs in GPU 1's context and leaves GPU 0's current.
/// * **the caller's current context, checked**: [`Driver::flush_current_context`] flushes
///   whatever context is current ([`Error::NoContext`](crate::Error::NoContext) when
///   there is none); [`Device::check_current`] tells a caller that must not switch
///   contexts whether the current one is on a device
///   ([`Error::WrongContext`](crate::Error::WrongContext) naming both devices).
/// * **no context**: queries by device or pointer (`cuDeviceGetAttribute`,
///   `cuPointerGetAttribute`, `cuMemGetAddressRange_v2`, the VMM granularity), and what
///   calls no CUDA entry point at all (re-registration, deregistration, closing an export).
#[must_use = "the context stays current only while the guard lives"]
pub struct ContextGuard {
    driver: &'static Driver,
    /// Set when this guard retained and pushed the device's primary context.
    pushed: Option<crate::sys::CUdevice>,
    _not_send: PhantomData<*const ()>,
}

impl Driver {
    /// The calling thread's current context, `None` when it has none.
    pub fn current_context(&self) -> Result<Option<CUcontext>> {
        self.init()?;
        let f = self.api().ctx_get_current()?;
        let mut ctx: CUcontext = core::ptr::null_mut();
        // SAFETY: valid out pointer.
        self.check("cuCtxGetCurrent", unsafe { f(&mut ctx) })?;
        Ok((!ctx.is_null()).then_some(ctx))
    }

    /// The ordinal of the device of the calling thread's current context, `None` when the
    /// thread has no current context.
    pub fn current_device(&self) -> Result<Option<i32>> {
        if self.current_context()?.is_none() {
            return Ok(None);
        }
        let f = self.api().ctx_get_device()?;
        let mut dev = 0;
        // SAFETY: valid out pointer; a context is current.
        self.check("cuCtxGetDevice", unsafe { f(&mut dev) })?;
        Ok(Some(dev))
    }
}

impl Device {
    /// Checks, without changing anything, that the calling thread's current context is
    /// on this device: [`Error::NoContext`](crate::Error::NoContext) when it has none,
    /// [`Error::WrongContext`](crate::Error::WrongContext) naming both devices when it is
    /// another device's.
    pub fn check_current(&self) -> Result<()> {
        match self.driver().current_device()? {
            Some(d) if d == self.raw() => Ok(()),
            Some(current) => Err(crate::Error::WrongContext {
                device: self.ordinal(),
                current,
            }),
            None => Err(crate::Error::NoContext {
                call: "Device::check_current",
            }),
        }
    }

    /// Makes a context of this device current on the calling thread for the guard's
    /// life: the current one if it already is on this device, else this device's primary
    /// context (retained and pushed, popped and released when the guard drops).
    pub fn make_current(&self) -> Result<ContextGuard> {
        let driver = self.driver();
        if driver.current_device()? == Some(self.raw()) {
            return Ok(ContextGuard {
                driver,
                pushed: None,
                _not_send: PhantomData,
            });
        }
        let retain = driver.api().primary_ctx_retain()?;
        let release = driver.api().primary_ctx_release()?;
        let push = driver.api().ctx_push_current()?;
        let mut ctx: CUcontext = core::ptr::null_mut();
        // SAFETY: valid out pointer and device handle.
        driver.check("cuDevicePrimaryCtxRetain", unsafe {
            retain(&mut ctx, self.raw())
        })?;
        // SAFETY: `ctx` is the primary context just retained.
        if let Err(e) = driver.check("cuCtxPushCurrent_v2", unsafe { push(ctx) }) {
            // SAFETY: balances the retain above.
            unsafe { release(self.raw()) };
            return Err(e);
        }
        Ok(ContextGuard {
            driver,
            pushed: Some(self.raw()),
            _not_send: PhantomData,
        })
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        let Some(dev) = self.pushed else { return };
        let api = self.driver.api();
        if let (Some(pop), Some(release)) = (api.ctx_pop_current, api.primary_ctx_release) {
            let mut ctx: CUcontext = core::ptr::null_mut();
            // SAFETY: this guard pushed the context on this thread (the guard is !Send), and
            // released the retain it took; errors leave the context retained (harmless).
            unsafe {
                pop(&mut ctx);
                release(dev);
            }
        }
    }
}
