//! Host ↔ device copies on any [`DeviceMemory`], bounds-checked, with the memory's device
//! context made current for each call (its primary context pushed when the thread's
//! current context is on another device or there is none, the previous one restored
//! after) (`cuMemcpyHtoD_v2`, `cuMemcpyDtoH_v2`,
//! `cuMemsetD8_v2`). Synchronous: they return when the bytes have arrived.

use core::ffi::c_void;

use crate::error::{Error, Result};
use crate::memory::{driver_of, DeviceMemory};

fn check_range(offset: usize, len: usize, buffer_len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= buffer_len => Ok(()),
        _ => Err(Error::OutOfBounds {
            offset,
            len,
            buffer_len,
        }),
    }
}

/// Copies `src` into `mem` at `offset` (`mem`'s device context made current for the
/// call).
pub fn copy_to_device<M: DeviceMemory + ?Sized>(
    mem: &mut M,
    offset: usize,
    src: &[u8],
) -> Result<()> {
    write(&*mem, offset, src)
}

/// [`copy_to_device`] for a holder that has exclusive access to `mem` another way (a
/// `GpuMr` through `&mut self`).
pub(crate) fn write<M: DeviceMemory + ?Sized>(mem: &M, offset: usize, src: &[u8]) -> Result<()> {
    check_range(offset, src.len(), mem.byte_len())?;
    if src.is_empty() {
        return Ok(());
    }
    let driver = driver_of(mem)?;
    let _ctx = driver.device(mem.device_ordinal())?.make_current()?;
    let f = driver.api().memcpy_htod()?;
    let dst = mem.device_ptr() + offset as u64;
    // SAFETY: `[dst, dst + len)` lies inside memory `mem` holds exclusively (trait
    // contract, range checked); `src` is readable for its length.
    let rc = unsafe { f(dst, src.as_ptr().cast::<c_void>(), src.len()) };
    driver.check("cuMemcpyHtoD_v2", rc)
}

/// Copies `dst.len()` bytes of `mem` at `offset` into `dst` (`mem`'s device context made
/// current for the call).
pub fn copy_to_host<M: DeviceMemory + ?Sized>(
    mem: &M,
    offset: usize,
    dst: &mut [u8],
) -> Result<()> {
    check_range(offset, dst.len(), mem.byte_len())?;
    if dst.is_empty() {
        return Ok(());
    }
    let driver = driver_of(mem)?;
    let _ctx = driver.device(mem.device_ordinal())?.make_current()?;
    let f = driver.api().memcpy_dtoh()?;
    let src = mem.device_ptr() + offset as u64;
    // SAFETY: `[src, src + len)` lies inside `mem` (range checked); `dst` is writable.
    let rc = unsafe { f(dst.as_mut_ptr().cast::<c_void>(), src, dst.len()) };
    driver.check("cuMemcpyDtoH_v2", rc)
}

/// Sets every byte of `mem` to `value` (`mem`'s device context made current for the
/// call).
pub fn fill<M: DeviceMemory + ?Sized>(mem: &mut M, value: u8) -> Result<()> {
    set(&*mem, value)
}

/// [`fill`] for a holder with exclusive access to `mem` another way (see [`write`](fn@write)).
pub(crate) fn set<M: DeviceMemory + ?Sized>(mem: &M, value: u8) -> Result<()> {
    let driver = driver_of(mem)?;
    let _ctx = driver.device(mem.device_ordinal())?.make_current()?;
    let f = driver.api().memset_d8()?;
    // SAFETY: the whole range is memory `mem` holds exclusively.
    let rc = unsafe { f(mem.device_ptr(), value, mem.byte_len()) };
    driver.check("cuMemsetD8_v2", rc)
}

/// Reads all of `mem` into a new vector.
pub fn to_vec<M: DeviceMemory + ?Sized>(mem: &M) -> Result<Vec<u8>> {
    let mut out = vec![0u8; mem.byte_len()];
    copy_to_host(mem, 0, &mut out)?;
    Ok(out)
}
