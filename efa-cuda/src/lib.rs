//! CUDA memory for EFA: GPUDirect RDMA through dma-buf, with the CUDA driver
//! (`libcuda.so.1`) loaded at run time.
//!
//! Nothing of CUDA is needed to build this crate: the driver is opened with `dlopen` on
//! first use and every entry point is resolved by its versioned symbol name
//! (`cuMemAlloc_v2`, never the legacy `cuMemAlloc`). A missing library, a driver too old
//! for a feature, no device and every `CUresult` come back as typed [`Error`]s.
//!
//! * [`Driver`] / [`Device`]: loading, `cuInit`, devices, attributes, contexts
//!   ([`Device::make_current`]).
//! * [`DeviceMemory`]: anything that names a device range — [`DeviceAlloc`]
//!   (`cuMemAlloc`), [`VmmAllocation`] (`cuMemCreate` chunks mapped into one reservation,
//!   GPUDirect-capable), [`RawDeviceMemory`] (a raw pointer and length, e.g. a PyTorch
//!   tensor's), and with the `cudarc` feature cudarc's device slices. Copies:
//!   [`copy_to_device`], [`copy_to_host`].
//! * [`align`]: the page-rounded export arithmetic (page size from `sysconf`).
//! * [`export_dmabuf`]: `cuMemGetHandleForAddressRange` for the pages around a buffer.
//! * [`register`]: dma-buf registration with an EFA PD (fallback `ibv_reg_mr` on the CUDA
//!   address) → [`GpuMr`], whose SGEs and remote descriptors use CUDA addresses.
//! * [`Device::flush_gpudirect_writes`]: order inbound NIC writes before CUDA reads them.
//!
//! Tests run on `efa-sim-gpu`, a software GPU that stands in for `libcuda.so.1` (see that
//! crate), and on NVIDIA's real driver library without a GPU; GPU tests are `#[ignore]`d.
#![deny(missing_docs)]

pub mod align;
mod alloc;
mod context;
mod copy;
mod cuda_result;
mod device;
mod driver;
mod entry_points;
mod error;
mod export;
mod flush;
mod memory;
mod owners;
mod register;
pub mod sys;
mod vmm;

#[cfg(feature = "cudarc")]
mod cudarc_memory;

pub use align::{byte_len, export_range, host_page_size, AlignError, ExportRange};
pub use alloc::DeviceAlloc;
pub use context::ContextGuard;
pub use copy::{copy_to_device, copy_to_host, fill, to_vec};
pub use cuda_result::{builtin_name, CU_RESULT_NAMES};
pub use device::Device;
pub use driver::{Driver, LIBRARY_ENV};
pub use error::{CudaError, Error, Result};
pub use export::{export_dmabuf, DmaBuf};
pub use flush::{FlushScope, FlushSupport, Flushed};
pub use memory::{DeviceMemory, RawDeviceMemory};
pub use owners::{CudaAddress, CudaDmaBuf};
pub use register::{register, GpuMr, RegistrationPath};
pub use vmm::VmmAllocation;
