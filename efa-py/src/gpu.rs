//! `efa.cuda`'s registration and flush, on the `efa-cuda` crate: a CUDA tensor (its
//! `data_ptr()` and byte size) registered by dma-buf first, `ibv_reg_mr` of the device
//! address as the fallback, the tensor retained for the registration's life.

use std::sync::Arc;

use efa_cuda::{DeviceMemory, Driver, FlushScope, GpuMr, RawDeviceMemory};
use efa_typestate::AccessFlags;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::pd::{MrKind, SPd, MR, PD};

/// A tensor's device memory, and the tensor that owns it.
pub struct TensorMemory {
    raw: RawDeviceMemory,
    _tensor: Py<PyAny>,
}

pub type GpuRegistration = GpuMr<SPd, TensorMemory>;

// SAFETY: every method forwards to the `RawDeviceMemory`, made (in `register_cuda`) from
// the tensor's own pointer and size; the tensor is held here, so its allocation stays
// while this value lives, and forever if it is leaked (the reference leaks with it).
unsafe impl DeviceMemory for TensorMemory {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        self.raw.device_ptr()
    }
    fn byte_len(&self) -> usize {
        self.raw.byte_len()
    }
    fn device_ordinal(&self) -> i32 {
        self.raw.device_ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        self.raw.driver()
    }
}

fn cuda_err(what: &str, e: efa_cuda::Error) -> PyErr {
    PyRuntimeError::new_err(format!("{what}: {e}"))
}

/// Registers `nbytes` of device memory at `ptr`, owned by `tensor`, with `pd`.
#[pyfunction]
pub fn _register_cuda(
    pd: &Bound<'_, PD>,
    ptr: u64,
    nbytes: usize,
    tensor: PyObject,
    access: u32,
) -> PyResult<Py<MR>> {
    let driver = Driver::get().map_err(|e| cuda_err("libcuda.so.1 is not usable", e))?;
    // SAFETY: `ptr`/`nbytes` are the tensor's `data_ptr()` and byte size (efa.cuda reads
    // them), and the tensor is kept by the registration (`TensorMemory`), as the `efa`
    // package's GpuMR keeps it; the driver checks that `ptr` is device memory.
    let raw = unsafe { RawDeviceMemory::new(driver, ptr, nbytes) }
        .map_err(|e| cuda_err("not CUDA device memory", e))?;
    let mem = TensorMemory {
        raw,
        _tensor: tensor,
    };
    let p = Arc::clone(pd.borrow().get()?);
    let mr = efa_cuda::register(p, mem, AccessFlags::from_bits_retain(access))
        .map_err(|e| cuda_err("GPUDirect registration failed", e))?;
    MR::finish(pd, MrKind::Gpu(mr), ptr, pd.py().None())
}

/// `cuFlushGPUDirectRDMAWrites` for the calling thread's current CUDA context.
#[pyfunction]
#[pyo3(signature = (all_devices=false))]
pub fn _flush_gpudirect_writes(all_devices: bool) -> PyResult<()> {
    let scope = if all_devices {
        FlushScope::ToAllDevices
    } else {
        FlushScope::ToOwner
    };
    Driver::get()
        .and_then(|d| d.flush_current_context(scope))
        .map_err(|e| cuda_err("cuFlushGPUDirectRDMAWrites failed", e))
}
