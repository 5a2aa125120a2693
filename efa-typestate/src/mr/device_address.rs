//! [`DeviceAddressMr`]: device memory registered by its device virtual address with
//! `ibv_reg_mr`, e.g. CUDA memory where a kernel peer-memory client (`nvidia_peermem`)
//! pins the GPU pages behind the address. The address is not host memory this process
//! can dereference, so, like a [`DmaBufMr`](crate::DmaBufMr), the registration hands out
//! no slices and no host pointer: only keys, SGEs and the remote view, all addressed by
//! the device address (which is also the iova).
//!
//! This is the form to use instead of [`Pd::register_raw`], whose `Mr` claims host
//! validity (it gives `&[u8]`/`&mut [u8]`) and so must never be made for device memory.

use core::ptr::NonNull;

use super::{check_remote_needs_owned, dereg, region_sealed, AccessFlags, MemoryRegion};
use crate::context::Context;
use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::parent::Parent;
use crate::pd::{Pd, PdId};

/// A range of device memory named by its device virtual address, that can back an
/// `ibv_reg_mr` registration.
///
/// # Safety
/// * `[device_addr(), device_addr() + len())` must be device memory (not host memory
///   that safe code can reach through a reference: the device and peers write it without
///   this process's knowledge) that stays allocated, at that address, for as long as the
///   value lives; both methods return the same values on every call.
/// * [`STAYS_ALLOCATED_IF_LEAKED`](Self::STAYS_ALLOCATED_IF_LEAKED) may be true only if
///   the memory stays allocated, and used by nothing else, forever when the value is
///   leaked (an owned allocation whose `Drop` frees it qualifies; a borrow does not).
///   Remote access needs it, as for host memory.
pub unsafe trait DeviceAddressMemory {
    /// See the trait's safety section.
    const STAYS_ALLOCATED_IF_LEAKED: bool;
    /// Device virtual address of the first byte (also the registration's iova).
    fn device_addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True if the range is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: forwards to the borrowed value, which lives as long as the borrow; a forgotten
// registration ends the borrow, so the memory may be freed: not leak-safe.
unsafe impl<O: DeviceAddressMemory> DeviceAddressMemory for &O {
    const STAYS_ALLOCATED_IF_LEAKED: bool = false;
    fn device_addr(&self) -> u64 {
        (**self).device_addr()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}

/// Device memory registered by address (no host mapping), deregistered on drop; it holds
/// its PD through `P` and its memory description `O` (released after deregistration,
/// leaked if deregistration fails).
pub struct DeviceAddressMr<P, O: DeviceAddressMemory> {
    raw: Option<NonNull<ffi::ibv_mr>>,
    owner: core::mem::ManuallyDrop<O>,
    access: AccessFlags,
    lkey: u32,
    rkey: u32,
    pd: PdId,
    pd_raw: NonNull<ffi::ibv_pd>,
    _pd: P,
}

// SAFETY: an immutable MR handle (verbs on it are thread-safe) and no host memory; the
// owner and the PD holder follow their own Send/Sync.
unsafe impl<P: Send, O: DeviceAddressMemory + Send> Send for DeviceAddressMr<P, O> {}
// SAFETY: see above.
unsafe impl<P: Sync, O: DeviceAddressMemory + Sync> Sync for DeviceAddressMr<P, O> {}

fn reg_device<O: DeviceAddressMemory>(
    pd: NonNull<ffi::ibv_pd>,
    owner: &O,
    access: AccessFlags,
) -> Result<NonNull<ffi::ibv_mr>> {
    let addr = owner.device_addr();
    // SAFETY: valid PD; the range is device memory the owner keeps allocated while
    // registered (DeviceAddressMemory contract): the kernel pins it through its peer-memory
    // client or refuses; no host memory that Rust code references is named.
    let raw = unsafe {
        ffi::ibv_reg_mr_iova2(
            pd.as_ptr(),
            addr as usize as *mut core::ffi::c_void,
            owner.len(),
            addr,
            access.bits(),
        )
    };
    NonNull::new(raw).ok_or_else(|| Error::last_os(Verb::RegMr))
}

impl<P, O: DeviceAddressMemory> DeviceAddressMr<P, O> {
    /// Registers the device range `owner` describes in `pd` (`&Pd<_>` or `Arc<Pd<_>>`),
    /// addressed by its device address. `REMOTE_READ`/`REMOTE_WRITE` need an owner that
    /// stays allocated if leaked ([`InvalidInput::RemoteAccessNeedsOwnedMemory`] for
    /// borrows). On failure the owner is dropped ([`try_new`](Self::try_new) gives it back).
    pub fn new<C>(pd: P, owner: O, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::try_new(pd, owner, access).map_err(|(_, e)| e)
    }

    /// As [`new`](Self::new), but a failure gives the owner back with the error.
    pub fn try_new<C>(pd: P, owner: O, access: AccessFlags) -> Result<Self, (O, Error)>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        // No host mapping: REMOTE_WRITE is allowed as asked; only the leak rule applies.
        if let Err(e) = check_remote_needs_owned(access, O::STAYS_ALLOCATED_IF_LEAKED) {
            return Err((owner, e));
        }
        // SAFETY: a live PD (held by `pd`).
        let pd_raw = unsafe { NonNull::new_unchecked(pd.as_ptr()) };
        let raw = match reg_device(pd_raw, &owner, access) {
            Ok(raw) => raw,
            Err(e) => return Err((owner, e)),
        };
        // SAFETY: a freshly registered MR; plain fields.
        let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        Ok(DeviceAddressMr {
            raw: Some(raw),
            owner: core::mem::ManuallyDrop::new(owner),
            access,
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
        let raw = reg_device(self.pd_raw, &*self.owner, self.access)?;
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
    /// Registers the device range `owner` describes by its device address, borrowing
    /// this PD: [`DeviceAddressMr::new`].
    pub fn register_device_address<O: DeviceAddressMemory>(
        &self,
        owner: O,
        access: AccessFlags,
    ) -> Result<DeviceAddressMr<&Self, O>> {
        DeviceAddressMr::new(self, owner, access)
    }
}

impl<P, O: DeviceAddressMemory> region_sealed::Sealed for DeviceAddressMr<P, O> {}

impl<P, O: DeviceAddressMemory> MemoryRegion for DeviceAddressMr<P, O> {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn iova(&self) -> u64 {
        self.owner.device_addr()
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

impl<P, O: DeviceAddressMemory> Drop for DeviceAddressMr<P, O> {
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

impl<P, O: DeviceAddressMemory> core::fmt::Debug for DeviceAddressMr<P, O> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceAddressMr")
            .field("addr", &format_args!("{:#x}", self.owner.device_addr()))
            .field("len", &self.owner.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .finish()
    }
}
