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
//! * [`register`](fn@register) / [`GpuMr::new`]: registration with an EFA PD (`&Pd` or `Arc<Pd>`),
//!   by dma-buf ([`CudaDmaBuf`] → `efa_typestate::DmaBufMr`), falling back to `ibv_reg_mr`
//!   on the CUDA address ([`CudaAddress`] → `efa_typestate::DeviceAddressMr`, needs
//!   `nvidia_peermem`), with the memory's device context current. A [`GpuMr`] has no host
//!   view of the memory; its SGEs and remote descriptors use CUDA addresses, are bounded
//!   to it, carry its PD and go in the same `SendBatch`/`RecvBatch` as host memory.
//! * [`SplitGpuMr`]: one buffer as several MRs where one cannot cover it (the EFA
//!   device's `max_mr_size`, a driver that will not export a VMM range over several
//!   chunks), with offsets mapped to each piece's keys and addresses.
//! * Contexts: every GPU path names the context it needs; those that need the memory's
//!   device context make it current for the call and restore the caller's (see
//!   [`ContextGuard`], [`Device::check_current`]).
//! * [`Device::flush_gpudirect_writes`] / [`GpuMr::flush_gpudirect_writes`]: order inbound
//!   NIC writes before CUDA work reads them (skipped where the device orders them itself,
//!   [`Device::flush_support`]).
//! * [`InstanceTopology::discover`]: at start-up, each GPU's PCI address and the EFA
//!   devices nearest to it (same PCIe switch, then NUMA node), with the devices' own
//!   topology (`efa_typestate::Topology`).
//!
//! # GPU to GPU: an RDMA write into another GPU's memory
//!
//! Two SRD queue pairs, one buffer on each of two GPUs; the first GPU's bytes are written
//! into the second GPU's memory by the NIC, then flushed and read back with a copy.
//! In this workspace it runs as a doctest on efa-sim and the software GPU (`efa-sim-gpu`,
//! two devices); efa-sim maps the software GPU's dma-buf at its CUDA address (with NVIDIA's
//! driver, where the dma-buf cannot be mapped, it moves the bytes with the driver's copies:
//! see efa-sim's README, "GPU memory").
//!
//! ```
//! use efa_cuda::{register, DeviceAlloc, Device, FlushScope};
//! use efa_typestate::{AccessFlags, Context, CompletionQueue, CqOptions, QpConfig, SendBatch};
//! use std::time::Duration;
//!
//! # fn main() -> efa_cuda::Result<()> {
//! let (gpu0, gpu1) = (Device::get(0)?, Device::get(1)?);
//! let ctx = Context::open_first_efa()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable())?; // two QPs of 256 + 256
//! let a = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(0x1234, None)?;
//! let b = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(0x5678, None)?;
//! let to_b = pd.connect(&b.endpoint())?;
//!
//! // The source on GPU 0, the target on GPU 1 (peers may write it: owned memory only).
//! let src = register(&pd, DeviceAlloc::from_host(&gpu0, b"from GPU 0 to GPU 1")?, AccessFlags::empty())?;
//! let mut dst = register(
//!     &pd,
//!     DeviceAlloc::new(&gpu1, 4096)?,
//!     AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
//! )?;
//! dst.fill(0)?;
//!
//! // RDMA-write the source into the target (a peer would get `dst.remote()` as 16 bytes).
//! let mut batch = SendBatch::<1>::new(&a);
//! batch.write(1, &to_b, src.sge_all()?, dst.remote().slice(100, src.len())?)?;
//! // SAFETY: `src` is not written until the completion is polled on the next line.
//! unsafe { a.post_send(&batch)? };
//! cq.wait(Duration::from_secs(5))?.result()?;
//!
//! // The writes are complete on the CPU's side; order them before CUDA work reads them.
//! dst.flush_gpudirect_writes(FlushScope::ToOwner)?;
//! let mut got = [0u8; 19];
//! dst.copy_to_host(100, &mut got)?;
//! assert_eq!(&got, b"from GPU 0 to GPU 1");
//! # Ok(())
//! # }
//! ```
//!
//! Tests run on `efa-sim-gpu`, a software GPU that stands in for `libcuda.so.1` (see that
//! crate), and on NVIDIA's real driver library without a GPU; GPU tests are `#[ignore]`d
//! (`scripts/gpu-check.sh`, see the crate README).
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
mod split;
pub mod sys;
mod topology;
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
pub use split::{DeviceRange, PieceAt, Segment, Segments, SplitGpuMr, SplitOptions, SplitRemote};
pub use topology::{GpuTopology, InstanceTopology};
pub use vmm::VmmAllocation;
