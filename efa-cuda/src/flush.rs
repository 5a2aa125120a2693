//! Ordering inbound GPUDirect RDMA writes before CUDA work reads them
//! (`cuFlushGPUDirectRDMAWrites`, target: the current context).
//!
//! The pattern: poll the NIC's completion on the CPU, then flush, then launch (or signal)
//! the consumer on the GPU. Where the device already orders NIC writes for the scope
//! (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING` ≥ scope) the call is skipped.

use crate::device::Device;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::sys::*;

/// Who must see the writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum FlushScope {
    /// The context that owns the memory (the GPU that received the writes).
    ToOwner = CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER,
    /// Every device (peers reading the memory directly).
    ToAllDevices = CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES,
}

/// A device's GPUDirect write ordering (attributes 117 and 118).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushSupport {
    /// `GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` bitmask (bit 0: the host API works).
    pub options: i32,
    /// `GPU_DIRECT_RDMA_WRITES_ORDERING`: 0 none, 100 owner, 200 all devices.
    pub ordering: i32,
}

impl FlushSupport {
    /// Whether writes must be flushed for `scope` (the device does not order them).
    pub fn needs_flush(&self, scope: FlushScope) -> bool {
        self.ordering < scope as i32
    }
    /// Whether `cuFlushGPUDirectRDMAWrites` is available on this device.
    pub fn host_flush_available(&self) -> bool {
        self.options & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST != 0
    }
}

/// What a flush did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flushed {
    /// `cuFlushGPUDirectRDMAWrites` was called and returned.
    Flushed,
    /// The device orders the writes for that scope already: nothing to do.
    NotNeeded,
}

impl Device {
    /// Reads attributes 117 and 118. Drivers older than CUDA 11.3 know neither: they
    /// report no options and no ordering.
    pub fn flush_support(&self) -> Result<FlushSupport> {
        let get = |a| match self.attribute(a) {
            Err(Error::Cuda(e)) if e.code == CUDA_ERROR_INVALID_VALUE => Ok(0),
            other => other,
        };
        Ok(FlushSupport {
            options: get(attr::GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)?,
            ordering: get(attr::GPU_DIRECT_RDMA_WRITES_ORDERING)?,
        })
    }

    /// Makes NIC writes to this device's memory visible to `scope`. Context: this
    /// device's primary context is pushed if the current one is not on this device (and
    /// popped after), so the flush targets this device whatever is current; the call is
    /// skipped where the device orders the writes itself.
    pub fn flush_gpudirect_writes(&self, scope: FlushScope) -> Result<Flushed> {
        let support = self.flush_support()?;
        if !support.needs_flush(scope) {
            return Ok(Flushed::NotNeeded);
        }
        let _ctx = self.make_current()?;
        self.driver().flush_current_context(scope)?;
        Ok(Flushed::Flushed)
    }
}

impl Driver {
    /// `cuFlushGPUDirectRDMAWrites(CURRENT_CTX, scope)` for the calling thread's current
    /// context, unconditionally; [`Error::NoContext`] when the thread has none. It
    /// flushes the current context's device: to flush a given device use
    /// [`Device::flush_gpudirect_writes`], or [`Device::check_current`] first.
    pub fn flush_current_context(&self, scope: FlushScope) -> Result<()> {
        let f = self.api().flush_gpu_direct_rdma_writes()?;
        if self.current_context()?.is_none() {
            return Err(Error::NoContext {
                call: "cuFlushGPUDirectRDMAWrites",
            });
        }
        // SAFETY: plain enum arguments.
        let rc = unsafe {
            f(
                CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                scope as i32,
            )
        };
        self.check("cuFlushGPUDirectRDMAWrites", rc)
    }
}
