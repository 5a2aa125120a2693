//! [`DmaBufMr`]: a registration of dma-buf memory (GPU memory exported by its driver, or
//! any other dma-buf), addressed by the device through its iova. There is no host
//! mapping, so it hands out no slices at all; SGEs and remote descriptors are bounded to
//! it and tagged with its PD like those of host memory.
//!
//! The memory is described by a [`DmaBufMemory`] value the registration owns (or
//! borrows) for its whole life; this is how GPU crates (`efa-cuda`) plug their buffers in.

use core::ptr::NonNull;

use super::{check_remote_needs_owned, dereg, region_sealed, AccessFlags, MemoryRegion};
use crate::context::Context;
use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::parent::Parent;
use crate::pd::{Pd, PdId};

/// A dma-buf range that can back a registration.
///
/// # Safety
/// * [`fd`](Self::fd) must be an open dma-buf file descriptor (or anything the kernel
///   accepts in `ibv_reg_dmabuf_mr`), and `[offset, offset + len)` of it must stay valid
///   device memory for as long as the value lives.
/// * No memory of this process that safe code can reach through a reference may be
///   behind that range (the device writes it without this process's knowledge): device
///   memory without a host mapping qualifies.
/// * [`STAYS_ALLOCATED_IF_LEAKED`](Self::STAYS_ALLOCATED_IF_LEAKED) may be true only if
///   the memory stays allocated, and used by nothing else, forever when the value is
///   leaked (an owned allocation whose `Drop` frees it qualifies; a borrow does not).
///   Remote access needs it, as for host memory.
pub unsafe trait DmaBufMemory {
    /// See the trait's safety section.
    const STAYS_ALLOCATED_IF_LEAKED: bool;
    /// The dma-buf file descriptor.
    fn fd(&self) -> i32;
    /// Offset of the range within the dma-buf.
    fn offset(&self) -> u64;
    /// Length of the range in bytes.
    fn len(&self) -> usize;
    /// True if the range is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: forwards to the borrowed value, which lives as long as the borrow; a forgotten
// registration ends the borrow, so the memory may be freed: not leak-safe.
unsafe impl<O: DmaBufMemory> DmaBufMemory for &O {
    const STAYS_ALLOCATED_IF_LEAKED: bool = false;
    fn fd(&self) -> i32 {
        (**self).fd()
    }
    fn offset(&self) -> u64 {
        (**self).offset()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}

/// A dma-buf given as an owned file descriptor and a range of it.
#[cfg(feature = "std")]
#[derive(Debug)]
pub struct DmaBufFd {
    fd: std::os::fd::OwnedFd,
    offset: u64,
    len: usize,
}

#[cfg(feature = "std")]
impl DmaBufFd {
    /// `len` bytes at `offset` of the dma-buf `fd` (any fd `ibv_reg_dmabuf_mr` accepts).
    pub fn new(fd: std::os::fd::OwnedFd, offset: u64, len: usize) -> DmaBufFd {
        DmaBufFd { fd, offset, len }
    }
    /// Gives the fd back.
    pub fn into_fd(self) -> std::os::fd::OwnedFd {
        self.fd
    }
}

#[cfg(feature = "std")]
// SAFETY: the fd is owned (open as long as the value, leaked with it); an fd has no host
// mapping unless someone maps it with `unsafe` (whose contract then covers the device).
unsafe impl DmaBufMemory for DmaBufFd {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }
    fn offset(&self) -> u64 {
        self.offset
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A dma-buf registration (no host mapping), deregistered on drop; it holds its PD
/// through `P` and its memory description `O` (released after deregistration).
pub struct DmaBufMr<P, O: DmaBufMemory> {
    raw: Option<NonNull<ffi::ibv_mr>>,
    owner: core::mem::ManuallyDrop<O>,
    access: AccessFlags,
    iova: u64,
    lkey: u32,
    rkey: u32,
    pd: PdId,
    pd_raw: NonNull<ffi::ibv_pd>,
    _pd: P,
}

// SAFETY: an immutable MR handle (verbs on it are thread-safe) and no host memory; the
// owner and the PD holder follow their own Send/Sync.
unsafe impl<P: Send, O: DmaBufMemory + Send> Send for DmaBufMr<P, O> {}
// SAFETY: see above.
unsafe impl<P: Sync, O: DmaBufMemory + Sync> Sync for DmaBufMr<P, O> {}

fn reg_dmabuf<O: DmaBufMemory>(
    pd: NonNull<ffi::ibv_pd>,
    owner: &O,
    iova: u64,
    access: AccessFlags,
) -> Result<NonNull<ffi::ibv_mr>> {
    // SAFETY: valid PD; the kernel validates the fd and range; no host memory is named.
    let raw = unsafe {
        ffi::ibv_reg_dmabuf_mr(
            pd.as_ptr(),
            owner.offset(),
            owner.len(),
            iova,
            owner.fd(),
            access.bits() as i32,
        )
    };
    NonNull::new(raw).ok_or_else(|| Error::last_os(Verb::RegDmabufMr))
}

impl<P, O: DmaBufMemory> DmaBufMr<P, O> {
    /// Registers the dma-buf range `owner` describes in `pd` (`&Pd<_>` or `Arc<Pd<_>>`),
    /// addressed by the device as `[iova, iova + len)` (for CUDA memory: its device
    /// address). `REMOTE_READ`/`REMOTE_WRITE` need an owner that stays allocated if
    /// leaked ([`InvalidInput::RemoteAccessNeedsOwnedMemory`] for borrows). On failure
    /// the owner is dropped ([`try_new`](Self::try_new) gives it back).
    pub fn new<C>(pd: P, owner: O, iova: u64, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::try_new(pd, owner, iova, access).map_err(|(_, e)| e)
    }

    /// As [`new`](Self::new), but a failure gives the owner back with the error (so the
    /// caller can register the memory another way, as `efa-cuda` falls back to
    /// `ibv_reg_mr` when the kernel refuses a dma-buf).
    pub fn try_new<C>(pd: P, owner: O, iova: u64, access: AccessFlags) -> Result<Self, (O, Error)>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        // No host mapping: REMOTE_WRITE is allowed as asked; only the leak rule applies.
        if let Err(e) = check_remote_needs_owned(access, O::STAYS_ALLOCATED_IF_LEAKED)
            .and_then(|()| super::check_iova(iova, owner.len() as u64))
        {
            return Err((owner, e));
        }
        // SAFETY: a live PD (held by `pd`).
        let pd_raw = unsafe { NonNull::new_unchecked(pd.as_ptr()) };
        let raw = match reg_dmabuf(pd_raw, &owner, iova, access) {
            Ok(raw) => raw,
            Err(e) => return Err((owner, e)),
        };
        // SAFETY: a freshly registered MR; plain fields.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        Ok(DmaBufMr {
            raw: Some(raw),
            owner: core::mem::ManuallyDrop::new(owner),
            access,
            iova,
            lkey,
            rkey,
            pd: pd.id(),
            pd_raw,
            _pd: pd,
        })
    }
    /// The memory description it was registered from.
    pub fn owner(&self) -> &O {
        &self.owner
    }
    /// The dma-buf fd it was registered from.
    pub fn fd(&self) -> i32 {
        self.owner.fd()
    }
    /// Offset into the dma-buf.
    pub fn offset(&self) -> u64 {
        self.owner.offset()
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// Deregisters and registers the same range again: every key given out before is
    /// dead (see [`Mr::reregister`](crate::Mr::reregister)).
    pub fn reregister(&mut self) -> Result<()> {
        let Some(raw) = self.raw else {
            return Err(InvalidInput::Deregistered.into());
        };
        dereg(raw)?;
        self.raw = None;
        let raw = reg_dmabuf(self.pd_raw, &*self.owner, self.iova, self.access)?;
        // SAFETY: a freshly registered MR; plain fields.
        (self.lkey, self.rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        self.raw = Some(raw);
        Ok(())
    }
    /// Deregisters and gives the owner back; on failure hands the registration back.
    pub fn close(self) -> Result<O, (Self, Error)> {
        if let Some(raw) = self.raw {
            if let Err(e) = dereg(raw) {
                return Err((self, e));
            }
        }
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; owner and PD holder are moved out
        // exactly once, after the deregistration.
        unsafe {
            let owner = core::mem::ManuallyDrop::take(&mut me.owner);
            drop(core::ptr::read(&me._pd));
            Ok(owner)
        }
    }
}

impl<C: Parent<Target = Context>> Pd<C> {
    /// Registers the dma-buf range `owner` describes, borrowing this PD:
    /// [`DmaBufMr::new`].
    pub fn register_dmabuf<O: DmaBufMemory>(
        &self,
        owner: O,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmaBufMr<&Self, O>> {
        DmaBufMr::new(self, owner, iova, access)
    }
}

impl<P, O: DmaBufMemory> region_sealed::Sealed for DmaBufMr<P, O> {}

impl<P, O: DmaBufMemory> MemoryRegion for DmaBufMr<P, O> {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn iova(&self) -> u64 {
        self.iova
    }
    fn len(&self) -> u64 {
        self.owner.len() as u64
    }
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr {
        self.raw.map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }
    fn pd_id(&self) -> PdId {
        self.pd
    }
    fn revoke(&mut self) -> Result<()> {
        self.reregister()
    }
}

impl<P, O: DmaBufMemory> Drop for DmaBufMr<P, O> {
    fn drop(&mut self) {
        let released = match self.raw {
            Some(raw) => dereg(raw).is_ok(),
            None => true,
        };
        if released {
            // SAFETY: dropped exactly once, here, after the deregistration.
            unsafe { core::mem::ManuallyDrop::drop(&mut self.owner) };
        }
    }
}

impl<P, O: DmaBufMemory> core::fmt::Debug for DmaBufMr<P, O> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBufMr")
            .field("fd", &self.fd())
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.owner.len())
            .finish()
    }
}
