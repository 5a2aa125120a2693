//! Registration of device memory with an EFA protection domain: [`register`] → [`GpuMr`].
//!
//! Paths, in order, with the memory's device context current throughout (its primary
//! context is pushed when the thread's current context is not on that device, and popped
//! again afterwards):
//! 1. dma-buf: export the page-rounded range ([`CudaDmaBuf`]) and register it with
//!    `ibv_reg_dmabuf_mr(pd, offset, len, iova = CUDA address, fd, access)`
//!    ([`DmaBufMr`]);
//! 2. fallback: `ibv_reg_mr` on the CUDA address itself ([`DeviceAddressMr`]), which only
//!    works where the kernel can pin GPU pages (nvidia_peermem).
//!
//! Neither registration has a host view of the memory. If both fail,
//! [`Error::RegistrationFailed`] carries both causes.

// A failed close hands the registration back by value, on purpose (as efa-typestate does).
#![allow(clippy::result_large_err)]

use efa_typestate::{
    AccessFlags, Context, DeviceAddressMr, DmaBufMr, MemoryRegion, Parent, Pd, RemoteBuffer, Sge,
};

use crate::align::ExportRange;
use crate::copy;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::flush::{FlushScope, Flushed};
use crate::memory::{driver_of, DeviceMemory};
use crate::owners::{check_registration, CudaAddress, CudaDmaBuf};

/// Which path a registration took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationPath {
    /// dma-buf export + `ibv_reg_dmabuf_mr`.
    DmaBuf,
    /// `ibv_reg_mr` on the CUDA address (nvidia_peermem).
    Peermem,
}

enum Registration<P, M: DeviceMemory> {
    DmaBuf(DmaBufMr<P, CudaDmaBuf<M>>),
    Peermem(DeviceAddressMr<P, CudaAddress<M>>),
}

/// Registered device memory. Holds its PD through `P` (`&Pd<_>` or `Arc<Pd<_>>`, as host
/// MRs do) and the memory `M` (owned, or borrowed as `&mut M`) for its whole life,
/// deregisters before releasing it (and leaks it if deregistration fails), and addresses
/// the region by its real CUDA address (a dma-buf MR's own `addr` is only the offset).
/// It gives no host view of the memory: bytes move through the driver's copies
/// ([`copy_from_host`](Self::copy_from_host), [`copy_to_host`](Self::copy_to_host)).
///
/// Nor does it give the memory out mutably while registered (it could be swapped out
/// with `mem::replace` and freed while peers still write it); [`close`](Self::close)
/// gives it back:
///
/// ```compile_fail,E0599
/// # fn f(mr: &mut efa_cuda::GpuMr<&efa_typestate::Pd<&efa_typestate::Context>, efa_cuda::DeviceAlloc>) {
/// let mem: &mut efa_cuda::DeviceAlloc = mr.memory_mut(); // error: no method `memory_mut`
/// # }
/// ```
pub struct GpuMr<P, M: DeviceMemory> {
    reg: Registration<P, M>,
}

/// Registers `mem` with `pd` for `access`, by dma-buf if the driver and the device allow
/// it, else by `ibv_reg_mr` on the CUDA address: [`GpuMr::new`].
pub fn register<P, C, M>(pd: P, mem: M, access: AccessFlags) -> Result<GpuMr<P, M>>
where
    P: Parent<Target = Pd<C>> + Clone,
    C: Parent<Target = Context>,
    M: DeviceMemory,
{
    GpuMr::new(pd, mem, access)
}

impl<P, M: DeviceMemory> GpuMr<P, M> {
    /// Registers `mem` with `pd` (`&Pd<_>` or `Arc<Pd<_>>`) for `access`: dma-buf first,
    /// then `ibv_reg_mr` on the CUDA address.
    ///
    /// Rejected before anything is exported or registered: an empty buffer
    /// ([`Error::EmptyBuffer`]), host memory ([`Error::NotDeviceMemory`]), remote access
    /// (`REMOTE_READ`/`REMOTE_WRITE`) to memory that a leak would free, i.e. a borrow
    /// ([`Error::RemoteAccessNeedsOwnedMemory`]). Both paths failing:
    /// [`Error::RegistrationFailed`] with both causes. On failure `mem` is dropped.
    ///
    /// Context: the memory's device context is made current for the call (its primary
    /// context pushed when the thread's current context is on another device or there is
    /// none) and the previous one restored afterwards.
    ///
    /// Limits of one registration (where they bind, [`SplitGpuMr::new`](crate::SplitGpuMr::new)
    /// registers several MRs instead):
    /// * the EFA device's `max_mr_size` (`ibv_query_device`; the kernel's
    ///   `max_mr_pages × PAGE_SIZE`): a larger buffer fails on both paths (the device
    ///   refuses it; efa-sim answers `EINVAL`). Beyond 4 GiB is fine below it: offsets,
    ///   lengths and iovas are 64-bit throughout.
    /// * the dma-buf export (`cuMemGetHandleForAddressRange`): one call per registration
    ///   over the page-rounded range; cuda.h names no size limit, and a VMM range over
    ///   several `cuMemCreate` chunks exports as one dma-buf when the chunks are on one
    ///   device with identical properties. A driver that refuses the range makes this
    ///   registration take the `ibv_reg_mr` fallback; [`SplitGpuMr`](crate::SplitGpuMr)
    ///   cuts it at the chunk boundaries instead.
    pub fn new<C>(pd: P, mem: M, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>> + Clone,
        C: Parent<Target = Context>,
    {
        let ordinal = check_registration(&mem, access)?;
        let _ctx = driver_of(&mem)?.device(ordinal)?.make_current()?;
        match Self::new_dmabuf(pd.clone(), mem, access) {
            Ok(mr) => Ok(mr),
            Err((mem, dmabuf_err)) => Self::new_peermem(pd, mem, access, dmabuf_err),
        }
    }

    /// The dma-buf path alone (the caller made the memory's device context current and
    /// checked the access): on failure the memory comes back with the reason.
    pub(crate) fn new_dmabuf<C>(
        pd: P,
        mem: M,
        access: AccessFlags,
    ) -> core::result::Result<Self, (M, Error)>
    where
        P: Parent<Target = Pd<C>> + Clone,
        C: Parent<Target = Context>,
    {
        match CudaDmaBuf::new(mem) {
            Ok(owner) => {
                let iova = owner.iova();
                match DmaBufMr::try_new(pd, owner, iova, access) {
                    Ok(mr) => Ok(GpuMr::from(Registration::DmaBuf(mr))),
                    // The export is closed here, before any fallback is tried.
                    Err((owner, e)) => Err((owner.into_memory(), Error::Verbs(e))),
                }
            }
            Err((mem, e)) => Err((mem, e)),
        }
    }

    /// The `ibv_reg_mr` fallback after the dma-buf path failed with `dmabuf_err`; both
    /// failing is [`Error::RegistrationFailed`].
    pub(crate) fn new_peermem<C>(
        pd: P,
        mem: M,
        access: AccessFlags,
        dmabuf_err: Error,
    ) -> Result<Self>
    where
        P: Parent<Target = Pd<C>> + Clone,
        C: Parent<Target = Context>,
    {
        let owner = CudaAddress::new(mem).map_err(|(_, e)| e)?;
        match DeviceAddressMr::try_new(pd, owner, access) {
            Ok(mr) => Ok(GpuMr::from(Registration::Peermem(mr))),
            Err((_, e)) => Err(Error::RegistrationFailed {
                dmabuf: Box::new(dmabuf_err),
                fallback: Box::new(Error::Verbs(e)),
            }),
        }
    }

    fn from(reg: Registration<P, M>) -> Self {
        GpuMr { reg }
    }

    /// The registration, for what takes any [`MemoryRegion`]
    /// ([`Qp::write_all`](efa_typestate::Qp::write_all), [`RdmaChunks`](efa_typestate::RdmaChunks)).
    pub fn region(&self) -> &dyn MemoryRegion {
        match &self.reg {
            Registration::DmaBuf(mr) => mr,
            Registration::Peermem(mr) => mr,
        }
    }
    /// Which path registered it.
    pub fn path(&self) -> RegistrationPath {
        match &self.reg {
            Registration::DmaBuf(_) => RegistrationPath::DmaBuf,
            Registration::Peermem(_) => RegistrationPath::Peermem,
        }
    }
    /// The export behind a dma-buf registration (`None` for the fallback path).
    pub fn export(&self) -> Option<&ExportRange> {
        match &self.reg {
            Registration::DmaBuf(mr) => Some(mr.owner().range()),
            Registration::Peermem(_) => None,
        }
    }
    /// The dma-buf fd (`None` for the fallback path); closed when the GpuMr is.
    pub fn dmabuf_fd(&self) -> Option<i32> {
        match &self.reg {
            Registration::DmaBuf(mr) => Some(mr.fd()),
            Registration::Peermem(_) => None,
        }
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        match &self.reg {
            Registration::DmaBuf(mr) => mr.access(),
            Registration::Peermem(mr) => mr.access(),
        }
    }
    /// The memory (for [`DeviceMemory`] queries and read-only copies).
    pub fn memory(&self) -> &M {
        match &self.reg {
            Registration::DmaBuf(mr) => mr.owner().memory(),
            Registration::Peermem(mr) => mr.owner().memory(),
        }
    }
    /// CUDA device address of the first byte (also the MR's iova).
    pub fn device_ptr(&self) -> u64 {
        self.memory().device_ptr()
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.memory().byte_len() as u64
    }
    /// Never true (empty buffers are rejected).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.region().lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.region().rkey()
    }
    /// An SGE for `len` bytes at `offset` (checked to lie inside the region), tagged
    /// with the PD; usable in the same batches as host memory.
    pub fn sge(&self, offset: u64, len: u64) -> Result<Sge<'_>> {
        Ok(match &self.reg {
            Registration::DmaBuf(mr) => mr.sge(offset, len),
            Registration::Peermem(mr) => mr.sge(offset, len),
        }?)
    }
    /// An SGE covering the whole region.
    pub fn sge_all(&self) -> Result<Sge<'_>> {
        self.sge(0, self.len())
    }
    /// The region as a peer addresses it (CUDA address, length, rkey).
    pub fn remote(&self) -> RemoteBuffer {
        self.region().remote()
    }

    /// Copies `src` into the memory at `offset` (`cuMemcpyHtoD`). Like any write to
    /// registered memory, it must not race work requests or peers using those bytes.
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        copy::write(self.memory(), offset, src)
    }
    /// Copies bytes at `offset` into `dst` (`cuMemcpyDtoH`).
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        copy::copy_to_host(self.memory(), offset, dst)
    }
    /// The whole region, read back to the host.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        copy::to_vec(self.memory())
    }
    /// Sets every byte to `value` (`cuMemsetD8`).
    pub fn fill(&mut self, value: u8) -> Result<()> {
        copy::set(self.memory(), value)
    }

    /// The device that holds the memory.
    pub fn device(&self) -> Result<Device> {
        driver_of(self.memory())?.device(self.memory().device_ordinal())
    }
    /// Orders the NIC writes that arrived in this memory before CUDA work that the
    /// calling thread submits afterwards: [`Device::flush_gpudirect_writes`] on the
    /// memory's device. Call it after polling the completion that says the writes are
    /// done (e.g. a write-with-immediate's receive), before launching the consumer.
    pub fn flush_gpudirect_writes(&self, scope: FlushScope) -> Result<Flushed> {
        self.device()?.flush_gpudirect_writes(scope)
    }

    /// Deregisters and registers the same memory again (same path, access and address;
    /// no CUDA call, so no context needed):
    /// every key given out before is dead. If the registration step fails, the region
    /// stays deregistered (SGEs are refused) until it is dropped or closed.
    pub fn reregister(&mut self) -> Result<()> {
        match &mut self.reg {
            Registration::DmaBuf(mr) => mr.reregister(),
            Registration::Peermem(mr) => mr.reregister(),
        }?;
        Ok(())
    }

    /// Deregisters, closes the dma-buf fd and gives the memory back; on failure the
    /// GpuMr comes back (still registered, memory not released).
    pub fn close(self) -> core::result::Result<M, (Self, Error)> {
        match self.reg {
            Registration::DmaBuf(mr) => match mr.close() {
                Ok(owner) => Ok(owner.into_memory()),
                Err((mr, e)) => Err((GpuMr::from(Registration::DmaBuf(mr)), e.into())),
            },
            Registration::Peermem(mr) => match mr.close() {
                Ok(owner) => Ok(owner.into_memory()),
                Err((mr, e)) => Err((GpuMr::from(Registration::Peermem(mr)), e.into())),
            },
        }
    }
}

impl<P, M: DeviceMemory> core::fmt::Debug for GpuMr<P, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuMr")
            .field("path", &self.path())
            .field("device_ptr", &format_args!("{:#x}", self.device_ptr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}
