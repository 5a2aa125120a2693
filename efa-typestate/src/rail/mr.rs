//! [`RailMr`]: one host buffer registered on several PDs, one registration per rail
//! (per EFA device), owning (or exclusively borrowing) its memory as an [`Mr`] does.
//!
//! [`Mr`]: crate::Mr
// Offsets, lengths and indexes here come from callers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::marker::PhantomData;
use core::ptr::NonNull;

use arrayvec::ArrayVec;
use zerocopy::IntoBytes;

use super::MAX_RAILS;
use crate::context::Context;
use crate::error::{InvalidInput, Result};
use crate::ffi;
use crate::mr::{
    check_access, check_iova, check_range, dereg, reg_mr, region_sealed, volatile, Access,
    AccessFlags, Local, MemoryRegion, RawRegion, RegionMemory, RemoteBuffer, RemoteWrite,
};
use crate::parent::Parent;
use crate::pd::{Pd, PdId};

/// One host buffer registered on the PD of every rail (at most [`MAX_RAILS`]): what
/// [`Rails::write_all`](super::Rails::write_all) takes as its source (`Local`) and what a
/// target hands out per rail (`RemoteWrite`). Access as for [`Mr`](crate::Mr): a
/// `Local` one gives slices, a `RemoteWrite` one copies only. Every registration is
/// deregistered when it is dropped, and the memory released only if all of them were
/// (leaked otherwise).
pub struct RailMr<P, M: RegionMemory, A = Local> {
    region: RawRegion<M::Elem>,
    regs: ArrayVec<RailRegion<P>, MAX_RAILS>,
    _mem: PhantomData<M>,
    _access: PhantomData<A>,
}

/// The registration of a [`RailMr`] on one rail's PD: a [`MemoryRegion`] (keys, SGEs,
/// the remote view), only ever borrowed from its `RailMr`.
pub struct RailRegion<P> {
    raw: Option<NonNull<ffi::ibv_mr>>,
    ptr: NonNull<u8>,
    bytes: usize,
    access: AccessFlags,
    lkey: u32,
    rkey: u32,
    pd: PdId,
    pd_raw: NonNull<ffi::ibv_pd>,
    _pd: P,
}

// SAFETY: as for `Mr`: the MR handles are immutable and verbs on them thread-safe; the
// memory is owned or exclusively borrowed through `M`, the PDs held through `P`.
unsafe impl<P: Send, M: RegionMemory + Send, A> Send for RailMr<P, M, A> {}
// SAFETY: `&RailMr` gives shared slices or volatile copies (as `&M` would) and PD access.
unsafe impl<P: Sync, M: RegionMemory + Sync, A> Sync for RailMr<P, M, A> {}
// SAFETY: a `RailRegion` is reached only through its `RailMr` (shared), and names memory
// that `RailMr` holds; sending or sharing a reference follows the PD holder.
unsafe impl<P: Sync> Sync for RailRegion<P> {}

impl<P, M: RegionMemory, A: Access> RailMr<P, M, A> {
    fn register<C>(pds: impl IntoIterator<Item = P>, mem: M, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        let access = check_access(access, A::PEER_WRITABLE, M::STAYS_ALLOCATED_IF_LEAKED)?;
        let region = mem.into_raw();
        let bytes = region.len.checked_mul(core::mem::size_of::<M::Elem>());
        let ptr = region.ptr.cast::<u8>();
        // From here the value's Drop deregisters what was registered and rebuilds `mem`.
        let mut me = RailMr {
            region,
            regs: ArrayVec::new(),
            _mem: PhantomData,
            _access: PhantomData,
        };
        let bytes = bytes.ok_or(InvalidInput::LengthTooLarge(u64::MAX))?;
        check_iova(ptr.as_ptr() as u64, bytes as u64)?;
        for pd in pds {
            if me.regs.is_full() {
                return Err(InvalidInput::RailCount {
                    count: MAX_RAILS.saturating_add(1),
                    max: MAX_RAILS as u32,
                }
                .into());
            }
            // SAFETY: a live PD (held by `pd`).
            let pd_raw = unsafe { NonNull::new_unchecked(pd.as_ptr()) };
            let raw = reg_mr(pd_raw, ptr.as_ptr(), bytes, ptr.as_ptr() as u64, access)?;
            // SAFETY: a freshly registered MR; lkey/rkey are plain fields.
            let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
            me.regs.push(RailRegion {
                raw: Some(raw),
                ptr,
                bytes,
                access,
                lkey,
                rkey,
                pd: pd.id(),
                pd_raw,
                _pd: pd,
            });
        }
        if me.regs.is_empty() {
            return Err(InvalidInput::RailCount {
                count: 0,
                max: MAX_RAILS as u32,
            }
            .into());
        }
        Ok(me)
    }

    /// Number of registrations (rails).
    pub fn rails(&self) -> usize {
        self.regs.len()
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.regs.first().map_or(0, |r| r.bytes as u64)
    }
    /// True if zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The registration on rail `i`'s PD.
    pub fn rail(&self, i: usize) -> Option<&RailRegion<P>> {
        self.regs.get(i)
    }
    /// Every rail's registration, in order: the `src` of
    /// [`Rails::write_all`](super::Rails::write_all).
    pub fn regions(&self) -> ArrayVec<&RailRegion<P>, MAX_RAILS> {
        self.regs.iter().collect()
    }
    /// Every rail's remote view, in order: what a target hands its initiator.
    pub fn remotes(&self) -> ArrayVec<RemoteBuffer, MAX_RAILS> {
        self.regs.iter().map(|r| r.remote()).collect()
    }
    /// Copies the bytes at `offset` into `dst` (volatile reads: correct while peers write).
    pub fn copy_to_slice(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        check_range(offset, dst.len() as u64, self.len())?;
        // SAFETY: inside the registered memory (checked); this program writes it only
        // through `&mut self`, which `&self` excludes.
        unsafe { volatile::read_bytes(self.host_ptr().add(offset as usize), dst) };
        Ok(())
    }
    /// All bytes, copied out (volatile reads).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len() as usize];
        let _ = self.copy_to_slice(0, &mut v);
        v
    }
    fn host_ptr(&self) -> *mut u8 {
        self.region.ptr.as_ptr().cast()
    }
}

impl<P, M: RegionMemory> RailMr<P, M, Local> {
    /// Registers `mem` on each PD of `pds` (`&Pd<_>` or `Arc<Pd<_>>`, one per rail, at
    /// most [`MAX_RAILS`]), with `access` as [`Mr::new`](crate::Mr::new) takes it.
    pub fn new<C>(pds: impl IntoIterator<Item = P>, mem: M, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pds, mem, access)
    }
    /// The registered elements.
    pub fn as_slice(&self) -> &[M::Elem] {
        // SAFETY: valid memory, exclusively ours (RegionMemory contract); no peer may write
        // it (no REMOTE_WRITE) and work requests writing it need `unsafe` posts whose
        // contract excludes slices meanwhile.
        unsafe { core::slice::from_raw_parts(self.region.ptr.as_ptr(), self.region.len) }
    }
    /// The registered elements, writable.
    pub fn as_mut_slice(&mut self) -> &mut [M::Elem] {
        // SAFETY: as above, with exclusive access through `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.region.ptr.as_ptr(), self.region.len) }
    }
    /// The registered bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.as_slice().as_bytes()
    }
}

impl<P, M: RegionMemory> RailMr<P, M, RemoteWrite> {
    /// Registers `mem` on each PD of `pds` so that peers may RDMA-write it on every rail
    /// (as [`Mr::new_remote_write`](crate::Mr::new_remote_write): owned memory only).
    pub fn new_remote_write<C>(
        pds: impl IntoIterator<Item = P>,
        mem: M,
        access: AccessFlags,
    ) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pds, mem, access)
    }
}

impl<P, M: RegionMemory, A> Drop for RailMr<P, M, A> {
    fn drop(&mut self) {
        // Release the memory only once no device can reach it.
        let mut released = true;
        for r in &self.regs {
            if let Some(raw) = r.raw {
                released &= dereg(raw).is_ok();
            }
        }
        if released {
            let region = RawRegion {
                ptr: self.region.ptr,
                len: self.region.len,
                extra: self.region.extra,
            };
            // SAFETY: rebuilt exactly once, here, as `self` is dropped; not registered.
            drop(unsafe { M::from_raw(region) });
        }
    }
}

impl<P> region_sealed::Sealed for RailRegion<P> {}

impl<P> MemoryRegion for RailRegion<P> {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn iova(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    fn len(&self) -> u64 {
        self.bytes as u64
    }
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr {
        self.raw.map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }
    fn pd_id(&self) -> PdId {
        self.pd
    }
    fn revoke(&mut self) -> Result<()> {
        let Some(raw) = self.raw else {
            return Err(InvalidInput::Deregistered.into());
        };
        dereg(raw)?;
        self.raw = None;
        let iova = self.ptr.as_ptr() as u64;
        let raw = reg_mr(
            self.pd_raw,
            self.ptr.as_ptr(),
            self.bytes,
            iova,
            self.access,
        )?;
        // SAFETY: a freshly registered MR; plain fields.
        (self.lkey, self.rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        self.raw = Some(raw);
        Ok(())
    }
}
