//! Registration of device memory with an EFA protection domain: [`register`] → [`GpuMr`].
//!
//! This module is the only one that touches `efa-typestate`. Paths, in order:
//! 1. dma-buf: export the page-rounded range ([`crate::export_dmabuf`]) and register it
//!    with `ibv_reg_dmabuf_mr(pd, offset, len, iova = CUDA address, fd, access)`;
//! 2. fallback: `ibv_reg_mr` on the CUDA address itself, which only works where the kernel
//!    can pin GPU pages (nvidia_peermem).
//!
//! If both fail, [`Error::RegistrationFailed`] carries both causes.

// A failed close hands the registration back by value, on purpose (as efa-typestate does).
#![allow(clippy::result_large_err)]

use efa_typestate::{AccessFlags, DmaBufMr, MemoryRegion, Mr, Pd, RawMemory, RemoteBuffer, Sge};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::align::ExportRange;
use crate::error::{Error, Result};
use crate::export::export_dmabuf;
use crate::memory::{device_of_pointer, driver_of, DeviceMemory};

/// How a [`GpuMr`] was registered.
enum Registration<'pd> {
    /// `ibv_reg_dmabuf_mr` of an exported dma-buf; the fd is closed after deregistration.
    DmaBuf {
        mr: DmaBufMr<'pd>,
        fd: OwnedFd,
        range: ExportRange,
    },
    /// `ibv_reg_mr` on the CUDA address (nvidia_peermem). The `Mr`'s host accessors are
    /// never called: the address is device memory.
    Peermem(Mr<'pd, RawMemory>),
}

/// Which path a registration took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationPath {
    /// dma-buf export + `ibv_reg_dmabuf_mr`.
    DmaBuf,
    /// `ibv_reg_mr` on the CUDA address (nvidia_peermem).
    Peermem,
}

/// Registered device memory. Holds the memory `M` (owned or borrowed) for its whole life,
/// deregisters before releasing it (and leaks it if deregistration fails), and addresses
/// the region by its real CUDA address (a dma-buf MR's own `addr` is only the offset).
pub struct GpuMr<'pd, M: DeviceMemory> {
    reg: core::mem::ManuallyDrop<Registration<'pd>>,
    mem: core::mem::ManuallyDrop<M>,
    va: u64,
    len: u64,
}

/// Registers `mem` with `pd` for `access`, by dma-buf if the driver and the device allow
/// it, else by `ibv_reg_mr` on the CUDA address.
///
/// Empty buffers fail with [`Error::EmptyBuffer`], host memory with
/// [`Error::NotDeviceMemory`]; [`AccessFlags::REMOTE_WRITE`] on memory that a leak would
/// free (a borrow) with [`Error::RemoteWriteNeedsOwnedMemory`].
pub fn register<'pd, M: DeviceMemory>(
    pd: &'pd Pd<'pd>,
    mem: M,
    access: AccessFlags,
) -> Result<GpuMr<'pd, M>> {
    if access.contains(AccessFlags::REMOTE_WRITE) && !M::STAYS_ALLOCATED_IF_LEAKED {
        return Err(Error::RemoteWriteNeedsOwnedMemory);
    }
    let (va, len) = (mem.device_ptr(), mem.byte_len());
    if len == 0 {
        return Err(Error::EmptyBuffer);
    }
    let driver = driver_of(&mem)?;
    device_of_pointer(driver, va)?;
    let dmabuf_err = match register_dmabuf(pd, &mem, access) {
        Ok(reg) => return Ok(GpuMr::new(reg, mem, va, len as u64)),
        Err(e) => e,
    };
    // SAFETY: the range is device memory `mem` holds for the whole life of the GpuMr (and
    // forever if leaked, where remote write is granted: checked above). The `Mr` stays
    // private to the GpuMr, whose API never reads or writes through its host view.
    let fallback = unsafe { pd.register_raw(va as usize as *mut u8, len, Some(va), access) };
    match fallback {
        Ok(mr) => Ok(GpuMr::new(Registration::Peermem(mr), mem, va, len as u64)),
        Err(e) => Err(Error::RegistrationFailed {
            dmabuf: Box::new(dmabuf_err),
            fallback: Box::new(Error::Verbs(e)),
        }),
    }
}

fn register_dmabuf<'pd, M: DeviceMemory>(
    pd: &'pd Pd<'pd>,
    mem: &M,
    access: AccessFlags,
) -> Result<Registration<'pd>> {
    let (fd, range) = export_dmabuf(mem)?.into_parts();
    let mr = pd.register_dmabuf(
        fd.as_raw_fd(),
        range.offset,
        range.len as usize,
        range.iova,
        access,
    )?;
    Ok(Registration::DmaBuf { mr, fd, range })
}

impl<'pd, M: DeviceMemory> GpuMr<'pd, M> {
    fn new(reg: Registration<'pd>, mem: M, va: u64, len: u64) -> Self {
        GpuMr {
            reg: core::mem::ManuallyDrop::new(reg),
            mem: core::mem::ManuallyDrop::new(mem),
            va,
            len,
        }
    }

    fn region(&self) -> &dyn MemoryRegion {
        match &*self.reg {
            Registration::DmaBuf { mr, .. } => mr,
            Registration::Peermem(mr) => mr,
        }
    }

    /// Which path registered it.
    pub fn path(&self) -> RegistrationPath {
        match &*self.reg {
            Registration::DmaBuf { .. } => RegistrationPath::DmaBuf,
            Registration::Peermem(_) => RegistrationPath::Peermem,
        }
    }
    /// The export behind a dma-buf registration (`None` for the fallback path).
    pub fn export(&self) -> Option<&ExportRange> {
        match &*self.reg {
            Registration::DmaBuf { range, .. } => Some(range),
            Registration::Peermem(_) => None,
        }
    }
    /// The dma-buf fd (`None` for the fallback path); closed when the GpuMr is.
    pub fn dmabuf_fd(&self) -> Option<i32> {
        match &*self.reg {
            Registration::DmaBuf { fd, .. } => Some(fd.as_raw_fd()),
            Registration::Peermem(_) => None,
        }
    }
    /// CUDA device address of the first byte (also the MR's iova).
    pub fn device_ptr(&self) -> u64 {
        self.va
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Never true (empty buffers are rejected).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.region().lkey()
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.region().rkey()
    }
    /// An SGE for `len` bytes at `offset` (checked to lie inside the region); usable in
    /// the same batches as host memory.
    pub fn sge(&self, offset: u64, len: u64) -> Result<Sge<'_>> {
        Ok(self.region().sge(offset, len)?)
    }
    /// The region as a peer addresses it (CUDA address, length, rkey).
    pub fn remote(&self) -> RemoteBuffer {
        self.region().remote()
    }
    /// The memory, for copies ([`crate::copy_to_host`] and friends).
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// The memory, writable.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// Deregisters, closes the dma-buf fd and gives the memory back; on failure the
    /// GpuMr comes back (still registered, memory not released).
    pub fn close(self) -> core::result::Result<M, (Self, Error)> {
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped; `reg` is taken once and either consumed or put
        // back before `me` is handed back.
        let reg = unsafe { core::mem::ManuallyDrop::take(&mut me.reg) };
        match dereg(reg) {
            Ok(()) => {
                // SAFETY: taken once; `me` is forgotten.
                Ok(unsafe { core::mem::ManuallyDrop::take(&mut me.mem) })
            }
            Err((reg, e)) => {
                me.reg = core::mem::ManuallyDrop::new(reg);
                Err((core::mem::ManuallyDrop::into_inner(me), e))
            }
        }
    }
}

fn dereg(reg: Registration<'_>) -> core::result::Result<(), (Registration<'_>, Error)> {
    match reg {
        Registration::DmaBuf { mr, fd, range } => match mr.close() {
            Ok(()) => {
                drop(fd);
                Ok(())
            }
            Err((mr, e)) => Err((Registration::DmaBuf { mr, fd, range }, e.into())),
        },
        Registration::Peermem(mr) => match mr.close() {
            Ok(_raw) => Ok(()),
            Err((mr, e)) => Err((Registration::Peermem(mr), e.into())),
        },
    }
}

impl<M: DeviceMemory> Drop for GpuMr<'_, M> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here.
        let reg = unsafe { core::mem::ManuallyDrop::take(&mut self.reg) };
        match dereg(reg) {
            // SAFETY: deregistered: the device can no longer reach the memory.
            Ok(()) => unsafe { core::mem::ManuallyDrop::drop(&mut self.mem) },
            // Still registered: leak the registration and the memory rather than free
            // memory a device may write.
            Err((reg, _)) => core::mem::forget(reg),
        }
    }
}

impl<M: DeviceMemory> core::fmt::Debug for GpuMr<'_, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuMr")
            .field("path", &self.path())
            .field("device_ptr", &format_args!("{:#x}", self.va))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}
