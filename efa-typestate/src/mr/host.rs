//! [`Mr`]: registered host memory of element type `T`, holding its PD through `P` and
//! its memory `M` (a borrowed `&mut [T]`, an owned `Vec<T>`/`Box<[T]>`, or
//! [`RawMemory`]), with access decided by `A` ([`Local`] or [`RemoteWrite`]).
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::marker::PhantomData;
use core::ptr::NonNull;

use zerocopy::{FromZeros, IntoBytes};

use super::memory::{RawMemory, RawRegion, RegionMemory};
use super::{check_access, dereg, region_sealed, volatile, Access, AccessFlags, Local};
use super::{MemoryRegion, RemoteBuffer, RemoteWrite, Sge};
use crate::context::Context;
use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::parent::Parent;
use crate::pd::{Pd, PdId};

/// Registered host memory (`ibv_mr`), deregistered on drop; the memory is released only
/// after a successful deregistration (leaked otherwise).
///
/// * `P` holds the PD (`&Pd<_>` or `Arc<Pd<_>>`);
/// * `M` is the memory, of element type `M::Elem` (any [`Plain`](super::Plain) type);
///   SGE and remote offsets are in bytes, with element-indexed helpers
///   ([`sge_elems`](Self::sge_elems), [`remote_elems`](Self::remote_elems));
/// * `A` says whether peers may write it: [`Local`] (the default) gives `&`/`&mut`
///   slices, [`RemoteWrite`] only copies (see the [module docs](super)).
pub struct Mr<P, M: RegionMemory, A = Local> {
    // None after a re-registration that failed half way (deregistered, not registered).
    raw: Option<NonNull<ffi::ibv_mr>>,
    region: RawRegion<M::Elem>,
    access: AccessFlags,
    iova: u64,
    lkey: u32,
    rkey: u32,
    pd: PdId,
    pd_raw: NonNull<ffi::ibv_pd>,
    _mem: PhantomData<M>,
    _access: PhantomData<A>,
    _pd: P,
}

// SAFETY: the MR handle is immutable and verbs on it are thread-safe; the memory is owned
// or exclusively borrowed through `M`, so sending follows M and the PD holder.
unsafe impl<P: Send, M: RegionMemory + Send, A> Send for Mr<P, M, A> {}
// SAFETY: `&Mr` gives shared slices or volatile copies of the memory (as `&M` would) and
// PD-holder access; both need `M: Sync` and `P: Sync`.
unsafe impl<P: Sync, M: RegionMemory + Sync, A> Sync for Mr<P, M, A> {}

pub(crate) fn reg_mr(
    pd: NonNull<ffi::ibv_pd>,
    ptr: *mut u8,
    bytes: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<NonNull<ffi::ibv_mr>> {
    // SAFETY: valid PD; `[ptr, ptr+bytes)` is memory the caller's region owns or
    // exclusively borrows and keeps in place while registered (RegionMemory contract).
    let raw = unsafe { ffi::ibv_reg_mr_iova2(pd.as_ptr(), ptr.cast(), bytes, iova, access.bits()) };
    NonNull::new(raw).ok_or_else(|| Error::last_os(Verb::RegMr))
}

impl<P, M: RegionMemory, A: Access> Mr<P, M, A> {
    fn register<C>(pd: P, mem: M, iova: Option<u64>, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        let access = check_access(access, A::PEER_WRITABLE, M::STAYS_ALLOCATED_IF_LEAKED)?;
        let region = mem.into_raw();
        let Some(bytes) = region.len.checked_mul(core::mem::size_of::<M::Elem>()) else {
            // SAFETY: the region taken apart just above, rebuilt once.
            drop(unsafe { M::from_raw(region) });
            return Err(InvalidInput::LengthTooLarge(u64::MAX).into());
        };
        let ptr = region.ptr.as_ptr().cast::<u8>();
        let iova = iova.unwrap_or(ptr as u64);
        if let Err(e) = super::check_iova(iova, bytes as u64) {
            // SAFETY: the region taken apart above, rebuilt once.
            drop(unsafe { M::from_raw(region) });
            return Err(e);
        }
        // SAFETY: a live PD (held by `pd`).
        let pd_raw = unsafe { NonNull::new_unchecked(pd.as_ptr()) };
        match reg_mr(pd_raw, ptr, bytes, iova, access) {
            Ok(raw) => {
                // SAFETY: a freshly registered MR; lkey/rkey are plain fields.
                let (lkey, rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
                Ok(Mr {
                    raw: Some(raw),
                    region,
                    access,
                    iova,
                    lkey,
                    rkey,
                    pd: pd.id(),
                    pd_raw,
                    _mem: PhantomData,
                    _access: PhantomData,
                    _pd: pd,
                })
            }
            Err(e) => {
                // SAFETY: never registered; the region taken apart above, rebuilt once.
                drop(unsafe { M::from_raw(region) });
                Err(e)
            }
        }
    }

    #[inline]
    fn bytes(&self) -> usize {
        // Checked not to overflow when the memory was registered.
        self.region
            .len
            .saturating_mul(core::mem::size_of::<M::Elem>())
    }

    /// The byte range of `count` elements from element `start`. Indexes come from
    /// callers: a product that does not fit 64 bits is out of bounds, never wrapped.
    fn elem_range(&self, start: usize, count: usize) -> Result<(u64, u64)> {
        let size = core::mem::size_of::<M::Elem>() as u64;
        let offset = (start as u64).checked_mul(size);
        let len = (count as u64).checked_mul(size);
        let (Some(offset), Some(len)) = (offset, len) else {
            return Err(InvalidInput::SgeOutOfBounds {
                offset: (start as u64).saturating_mul(size),
                len: u32::try_from((count as u64).saturating_mul(size)).unwrap_or(u32::MAX),
            }
            .into());
        };
        super::check_range(offset, len, self.bytes() as u64)?;
        Ok((offset, len))
    }

    /// Number of elements.
    pub fn elems(&self) -> usize {
        self.region.len
    }
    /// Host address of the first byte.
    pub fn host_ptr(&self) -> *mut u8 {
        self.region.ptr.as_ptr().cast()
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// An SGE for `count` elements from element `start`.
    pub fn sge_elems(&self, start: usize, count: usize) -> Result<Sge<'_>> {
        let (offset, len) = self.elem_range(start, count)?;
        self.sge(offset, len)
    }
    /// The remote view of `count` elements from element `start`.
    pub fn remote_elems(&self, start: usize, count: usize) -> Result<RemoteBuffer> {
        let (offset, len) = self.elem_range(start, count)?;
        self.remote().slice(offset, len)
    }

    /// Element `index`, read with a volatile copy (correct even while peers write).
    pub fn read(&self, index: usize) -> Result<M::Elem> {
        let mut v = M::Elem::new_zeroed();
        self.copy_to_slice(index, core::slice::from_mut(&mut v))?;
        Ok(v)
    }
    /// Copies `dst.len()` elements from element `start` into `dst` (volatile reads).
    pub fn copy_to_slice(&self, start: usize, dst: &mut [M::Elem]) -> Result<()> {
        let (offset, _) = self.elem_range(start, dst.len())?;
        // SAFETY: the range lies inside the registered memory (checked); this program
        // writes it only through `&mut self`, which `&self` excludes.
        unsafe { volatile::read_bytes(self.host_ptr().add(offset as usize), dst.as_mut_bytes()) };
        Ok(())
    }
    /// Writes `value` to element `index` (a volatile write).
    pub fn write(&mut self, index: usize, value: M::Elem) -> Result<()> {
        self.copy_from_slice(index, core::slice::from_ref(&value))
    }
    /// Copies `src` into the memory from element `start` (volatile writes).
    pub fn copy_from_slice(&mut self, start: usize, src: &[M::Elem]) -> Result<()> {
        let (offset, _) = self.elem_range(start, src.len())?;
        // SAFETY: inside the registered memory (checked), exclusively ours through
        // `&mut self`, and `src` is another object (a borrow of the memory would need `self`).
        unsafe { volatile::write_bytes(self.host_ptr().add(offset as usize), src.as_bytes()) };
        Ok(())
    }
    /// All elements, copied out (volatile reads).
    #[cfg(feature = "std")]
    pub fn to_vec(&self) -> std::vec::Vec<M::Elem> {
        let mut v = std::vec::Vec::new();
        v.resize_with(self.elems(), M::Elem::new_zeroed);
        let _ = self.copy_to_slice(0, &mut v);
        v
    }

    /// Deregisters and registers the same memory again, with the same access and iova:
    /// every key given out before is dead, so no work request posted earlier and no peer
    /// holding an old [`RemoteBuffer`] can reach the memory any more. The new keys are
    /// [`lkey`](MemoryRegion::lkey)/[`rkey`](MemoryRegion::rkey). If the registration step
    /// fails, the region stays deregistered (SGEs are refused with
    /// [`InvalidInput::Deregistered`]) and the memory is released only with the `Mr`.
    pub fn reregister(&mut self) -> Result<()> {
        let Some(raw) = self.raw else {
            return Err(InvalidInput::Deregistered.into());
        };
        dereg(raw)?;
        self.raw = None;
        let raw = reg_mr(
            self.pd_raw,
            self.host_ptr(),
            self.bytes(),
            self.iova,
            self.access,
        )?;
        // SAFETY: a freshly registered MR; plain fields.
        (self.lkey, self.rkey) = unsafe { ((*raw.as_ptr()).lkey, (*raw.as_ptr()).rkey) };
        self.raw = Some(raw);
        Ok(())
    }

    /// Deregisters and gives the memory back; on failure hands the `Mr` back (the
    /// memory stays registered, so it is not released).
    pub fn close(self) -> Result<M, (Self, Error)> {
        if let Some(raw) = self.raw {
            if let Err(e) = dereg(raw) {
                return Err((self, e));
            }
        }
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again: the region is rebuilt once and the
        // PD holder moved out once, after the deregistration.
        unsafe {
            let mem = M::from_raw(core::ptr::read(&me.region));
            drop(core::ptr::read(&me._pd));
            Ok(mem)
        }
    }
}

impl<P, M: RegionMemory> Mr<P, M, Local> {
    /// Registers `mem` in `pd` (`&Pd<_>` or `Arc<Pd<_>>`) with its own address as iova.
    /// `REMOTE_WRITE` is refused ([`InvalidInput::RemoteWriteOnLocalMr`]: use
    /// [`new_remote_write`](Mr::new_remote_write)); `REMOTE_READ` needs memory that stays
    /// allocated if leaked ([`InvalidInput::RemoteAccessNeedsOwnedMemory`] for borrows).
    pub fn new<C>(pd: P, mem: M, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pd, mem, None, access)
    }
    /// As [`new`](Self::new), addressed by the device as `[iova, iova + len)`.
    pub fn new_at<C>(pd: P, mem: M, iova: u64, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pd, mem, Some(iova), access)
    }
    /// The registered elements.
    pub fn as_slice(&self) -> &[M::Elem] {
        // SAFETY: the region is valid and exclusively ours (RegionMemory contract); no
        // peer may write it (no REMOTE_WRITE), and the device writes it only for work
        // requests whose posting contract excludes slices meanwhile.
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
    /// The registered bytes, writable.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        self.as_mut_slice().as_mut_bytes()
    }
}

impl<P, M: RegionMemory> Mr<P, M, RemoteWrite> {
    /// Registers `mem` so that peers may RDMA-write it (`REMOTE_WRITE` is added to
    /// `access`, with the `LOCAL_WRITE` the kernel requires alongside it). Needs memory that stays allocated if leaked
    /// ([`InvalidInput::RemoteAccessNeedsOwnedMemory`] for borrows). The `Mr` gives
    /// access by copying only; [`close`](Self::close) ends the remote right and gives
    /// the memory back.
    pub fn new_remote_write<C>(pd: P, mem: M, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pd, mem, None, access)
    }
    /// As [`new_remote_write`](Self::new_remote_write), addressed as `[iova, iova + len)`.
    pub fn new_remote_write_at<C>(pd: P, mem: M, iova: u64, access: AccessFlags) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
    {
        Self::register(pd, mem, Some(iova), access)
    }
    /// The registered elements as a slice, without copying.
    ///
    /// # Safety
    /// No peer and no work request may write these bytes while the returned reference
    /// lives: the application protocol must guarantee that every peer holding this
    /// region's [`RemoteBuffer`] is done writing (e.g. its write-with-immediate
    /// completion arrived and it writes again only when told to).
    pub unsafe fn as_slice_unchecked(&self) -> &[M::Elem] {
        // SAFETY: valid, exclusively ours memory; the caller guarantees no writer.
        unsafe { core::slice::from_raw_parts(self.region.ptr.as_ptr(), self.region.len) }
    }
    /// The registered elements, writable, without copying.
    ///
    /// # Safety
    /// As [`as_slice_unchecked`](Self::as_slice_unchecked), and additionally no peer
    /// or work request may read the bytes meanwhile if torn data matters to it.
    pub unsafe fn as_mut_slice_unchecked(&mut self) -> &mut [M::Elem] {
        // SAFETY: valid, exclusively ours (`&mut self`); the caller guarantees no writer.
        unsafe { core::slice::from_raw_parts_mut(self.region.ptr.as_ptr(), self.region.len) }
    }
}

impl<C: Parent<Target = Context>> Pd<C> {
    /// Registers `mem` (borrowing this PD) with its own address as iova: [`Mr::new`].
    pub fn register<M: RegionMemory>(&self, mem: M, access: AccessFlags) -> Result<Mr<&Self, M>> {
        Mr::new(self, mem, access)
    }
    /// Registers `mem` addressed as `[iova, iova + len)`: [`Mr::new_at`].
    pub fn register_with_iova<M: RegionMemory>(
        &self,
        mem: M,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Mr<&Self, M>> {
        Mr::new_at(self, mem, iova, access)
    }
    /// Registers `mem` so that peers may RDMA-write it: [`Mr::new_remote_write`].
    pub fn register_remote_write<M: RegionMemory>(
        &self,
        mem: M,
        access: AccessFlags,
    ) -> Result<Mr<&Self, M, RemoteWrite>> {
        Mr::new_remote_write(self, mem, access)
    }
    /// Registers raw host memory (a [`Local`] registration: `REMOTE_WRITE` is refused).
    /// The `Mr` gives slices of it, so it must be host memory: device memory (a CUDA
    /// address) is registered with
    /// [`register_device_address`](Pd::register_device_address), whose MR has no host view.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be valid for reads and writes, and must not be freed or
    /// accessed by anyone but the returned `Mr` (and the device and peers it grants
    /// access to) until the `Mr` is dropped or closed, and never again if the `Mr` is
    /// leaked: a leaked registration stays reachable by peers.
    pub unsafe fn register_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Mr<&Self, RawMemory>> {
        Mr::register(self, RawMemory::new(ptr, len), iova, access)
    }
}

impl<P, M: RegionMemory, A> region_sealed::Sealed for Mr<P, M, A> {}

impl<P, M: RegionMemory, A: Access> MemoryRegion for Mr<P, M, A> {
    #[inline]
    fn lkey(&self) -> u32 {
        self.lkey
    }
    #[inline]
    fn rkey(&self) -> u32 {
        self.rkey
    }
    #[inline]
    fn iova(&self) -> u64 {
        self.iova
    }
    #[inline]
    fn len(&self) -> u64 {
        self.bytes() as u64
    }
    #[inline]
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr {
        self.raw.map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }
    #[inline]
    fn pd_id(&self) -> PdId {
        self.pd
    }
    fn revoke(&mut self) -> Result<()> {
        self.reregister()
    }
}

impl<P, M: RegionMemory, A> Drop for Mr<P, M, A> {
    fn drop(&mut self) {
        // Release the memory only once the device can no longer reach it; if
        // deregistration fails the memory is leaked rather than freed while registered.
        let released = match self.raw {
            Some(raw) => dereg(raw).is_ok(),
            None => true,
        };
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

impl<P, M: RegionMemory, A: Access> core::fmt::Debug for Mr<P, M, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mr")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.bytes())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("peer_writable", &A::PEER_WRITABLE)
            .finish()
    }
}
