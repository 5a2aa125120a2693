//! Memory regions: registered host memory (borrowed or owned) and dma-buf memory, the
//! SGEs that address them, and the remote view a peer uses for RDMA.

use core::marker::PhantomData;
use core::ptr::NonNull;

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{Error, InvalidInput, Result, Verb};
use crate::ffi;
use crate::flags::flag_set;
use crate::pd::Pd;

flag_set! {
    /// Access rights of a memory region (`IBV_ACCESS_*`). EFA accepts LOCAL_WRITE,
    /// REMOTE_READ (with the RDMA-read capability) and REMOTE_WRITE (with RDMA-write);
    /// RELAXED_ORDERING is an optional hint that is dropped where unsupported.
    pub struct AccessFlags: u32 {
        /// The device may write it (receive buffers, RDMA-read destinations).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA-write it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA-read it.
        const REMOTE_READ = 1 << 2;
        /// Relaxed PCIe ordering (optional hint).
        const RELAXED_ORDERING = 1 << 20;
    }
}

/// Memory that can back a registration: its address must stay fixed for as long as the
/// value lives (so the device's view stays valid when the `Mr` moves).
///
/// # Safety
/// `region` must return the same pointer and length on every call, the memory must be
/// valid for reads and writes for that length while `self` lives, and nothing but the
/// holder of `self` may access it.
pub unsafe trait RegionMemory {
    /// True if leaking the holder (`mem::forget` of the `Mr`) leaves the memory allocated
    /// forever (owned heap buffers), false if the memory can be reused after the holder is
    /// forgotten (borrows). Only memory for which this holds may be registered with
    /// [`AccessFlags::REMOTE_WRITE`] in safe code: a peer may write it at any time.
    const STAYS_ALLOCATED_IF_LEAKED: bool;
    /// Start and length of the memory.
    fn region(&mut self) -> (*mut u8, usize);
}

// SAFETY: the slice is exclusively borrowed for the whole life of the value and does not move.
unsafe impl RegionMemory for &mut [u8] {
    const STAYS_ALLOCATED_IF_LEAKED: bool = false;
    fn region(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

#[cfg(feature = "std")]
// SAFETY: a boxed slice's heap allocation does not move when the box moves.
unsafe impl RegionMemory for std::boxed::Box<[u8]> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn region(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

#[cfg(feature = "std")]
// SAFETY: the Vec is owned by the Mr, which never grows it, so the buffer never moves.
unsafe impl RegionMemory for std::vec::Vec<u8> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn region(&mut self) -> (*mut u8, usize) {
        (self.as_mut_ptr(), self.len())
    }
}

/// Memory given as a raw pointer and length (see [`Pd::register_raw`]).
#[derive(Debug)]
pub struct RawMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `Pd::register_raw`'s contract makes the caller guarantee validity and exclusivity,
// including after a leak (the memory must outlive the registration).
unsafe impl RegionMemory for RawMemory {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn region(&mut self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }
}

mod sealed {
    pub trait Sealed {}
}
impl<M: RegionMemory> sealed::Sealed for Mr<'_, M> {}
impl sealed::Sealed for DmaBufMr<'_> {}

/// Anything registered: gives keys, the device address space and SGEs. Sealed
/// (implemented by [`Mr`] and [`DmaBufMr`] only), so an [`Sge`] always names bytes of a
/// real registration.
pub trait MemoryRegion: sealed::Sealed {
    /// Local key (24 bits on EFA).
    fn lkey(&self) -> u32;
    /// Remote key.
    fn rkey(&self) -> u32;
    /// Device address of the first byte (the registration's iova).
    fn iova(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True if zero bytes long.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The raw MR.
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr;

    /// An SGE for `len` bytes at `offset`; fails unless the range lies inside the region
    /// and `len` fits 32 bits.
    fn sge(&self, offset: u64, len: u64) -> Result<Sge<'_>> {
        check_range(offset, len, self.len())?;
        if len > u32::MAX as u64 {
            return Err(InvalidInput::LengthTooLarge(len).into());
        }
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.iova() + offset,
                length: len as u32,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }

    /// An SGE covering the whole region.
    fn sge_all(&self) -> Result<Sge<'_>> {
        self.sge(0, self.len())
    }

    /// The region as a peer addresses it for RDMA (iova, length, rkey).
    fn remote(&self) -> RemoteBuffer {
        RemoteBuffer::new(self.iova(), self.len(), self.rkey())
    }

    /// EFA interconnect ids of this MR (`efadv_query_mr`); [`Error::Unsupported`] when the
    /// library or kernel lacks it.
    fn query_efa(&self) -> Result<MrInterconnect> {
        let mut a = ffi::efadv_mr_attr::default();
        // SAFETY: valid MR; `a` is writable and `inlen` is its exact size.
        let rc = unsafe {
            ffi::efadv_query_mr(self.as_mr_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
        }
        .map_err(|e| ffi::not_provided(Verb::EfadvQueryMr, e))?;
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryMr, rc));
        }
        let pick = |bit: u16, v: u16| (a.ic_id_validity & bit != 0).then_some(v);
        Ok(MrInterconnect {
            recv: pick(1, a.recv_ic_id),
            rdma_read: pick(2, a.rdma_read_ic_id),
            rdma_recv: pick(4, a.rdma_recv_ic_id),
        })
    }
}

fn check_range(offset: u64, len: u64, region_len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(InvalidInput::SgeOutOfBounds {
            offset,
            len,
            region_len,
        }
        .into()),
    }
}

/// PCIe interconnect ids the device uses to reach an MR (`efadv_query_mr`); `None`
/// where the device reports no valid id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MrInterconnect {
    /// For receives.
    pub recv: Option<u16>,
    /// For RDMA read.
    pub rdma_read: Option<u16>,
    /// For incoming RDMA writes.
    pub rdma_recv: Option<u16>,
}

/// A scatter/gather element: `length` bytes at `addr` of one registered region. It
/// borrows the region, so it cannot outlive it, and can only be made by
/// [`MemoryRegion::sge`], which checks the range.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge<'mr> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'mr ()>,
}

impl Sge<'_> {
    /// Device address.
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> u32 {
        self.raw.length
    }
    /// True for a zero-length SGE.
    pub fn is_empty(&self) -> bool {
        self.raw.length == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
    /// A sub-range of this SGE (still inside the same region).
    pub fn slice(&self, offset: u32, len: u32) -> Result<Self> {
        check_range(offset as u64, len as u64, self.raw.length as u64)?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.raw.addr + offset as u64,
                length: len,
                lkey: self.raw.lkey,
            },
            _mr: PhantomData,
        })
    }
    pub(crate) fn raw(&self) -> &ffi::ibv_sge {
        &self.raw
    }
    /// Only for ranges already checked against a live region of lifetime `'mr`.
    pub(crate) fn from_raw_parts(addr: u64, length: u32, lkey: u32) -> Self {
        Sge {
            raw: ffi::ibv_sge { addr, length, lkey },
            _mr: PhantomData,
        }
    }
}

impl core::fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Sge {{ addr: {:#x}, len: {}, lkey: {:#x} }}",
            self.raw.addr, self.raw.length, self.raw.lkey
        )
    }
}

static_assertions::assert_eq_size!(Sge<'static>, ffi::ibv_sge);

/// A peer's registered memory as seen from here: device address, length and rkey, with a
/// 24-byte network-order wire format (`[addr:u64][len:u64][rkey:u32][0:u32]`, big endian).
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct RemoteBuffer {
    addr: U64,
    len: U64,
    rkey: U32,
    reserved: U32,
}

impl RemoteBuffer {
    /// Size of the wire format.
    pub const WIRE_SIZE: usize = 24;

    /// From its parts.
    pub fn new(addr: u64, len: u64, rkey: u32) -> RemoteBuffer {
        RemoteBuffer {
            addr: U64::new(addr),
            len: U64::new(len),
            rkey: U32::new(rkey),
            reserved: U32::ZERO,
        }
    }
    /// Parses the 24-byte wire format.
    pub fn parse(bytes: &[u8]) -> Result<RemoteBuffer> {
        RemoteBuffer::read_from_bytes(bytes).map_err(|_| {
            Error::Invalid(InvalidInput::WireLength {
                expected: 24,
                got: bytes.len(),
            })
        })
    }
    /// The wire bytes.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out.copy_from_slice(self.as_bytes());
        out
    }
    /// Device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr.get()
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len.get()
    }
    /// True if zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey.get()
    }
    /// `len` bytes at `offset`, checked to lie inside this buffer.
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteBuffer> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => {
                Ok(RemoteBuffer::new(self.addr() + offset, len, self.rkey()))
            }
            _ => Err(InvalidInput::RemoteOutOfBounds {
                offset,
                len,
                buffer_len: self.len(),
            }
            .into()),
        }
    }
}

impl core::fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "RemoteBuffer {{ addr: {:#x}, len: {}, rkey: {:#x} }}",
            self.addr(),
            self.len(),
            self.rkey()
        )
    }
}

/// Registered host memory (`ibv_mr`), deregistered on drop. Borrows its PD and holds
/// its memory `M` (a borrowed `&mut [u8]`, an owned `Vec<u8>`/`Box<[u8]>`, or
/// [`RawMemory`]).
///
/// The bytes are reachable through [`as_slice`](Self::as_slice) /
/// [`as_mut_slice`](Self::as_mut_slice). The device touches them only for work requests
/// posted with `unsafe` (see the crate docs, "Soundness") and for peers' RDMA when the
/// region grants remote access.
pub struct Mr<'pd, M: RegionMemory> {
    raw: NonNull<ffi::ibv_mr>,
    // Released only after a successful deregistration (leaked otherwise).
    mem: core::mem::ManuallyDrop<M>,
    ptr: *mut u8,
    len: usize,
    iova: u64,
    _pd: PhantomData<&'pd Pd<'pd>>,
}

// SAFETY: the MR handle is immutable and verbs on it are thread-safe; the memory is
// owned/borrowed exclusively by `mem`, so sending/sharing follows M.
unsafe impl<M: RegionMemory + Send> Send for Mr<'_, M> {}
// SAFETY: `&Mr` only gives `&[u8]` access to the memory (as `&M` would).
unsafe impl<M: RegionMemory + Sync> Sync for Mr<'_, M> {}

impl<'pd> Pd<'pd> {
    /// Registers `mem` with its own address as iova.
    ///
    /// [`AccessFlags::REMOTE_WRITE`] needs memory that stays allocated even if the `Mr`
    /// is leaked (`Vec<u8>`, `Box<[u8]>`, or [`register_raw`](Self::register_raw)): a
    /// borrowed slice could be reused after a `mem::forget` while peers still write it,
    /// so it gets [`InvalidInput::RemoteWriteNeedsOwnedMemory`].
    pub fn register<M: RegionMemory>(&'pd self, mem: M, access: AccessFlags) -> Result<Mr<'pd, M>> {
        self.register_inner(mem, None, access)
    }

    /// Registers `mem` so that the device addresses it as `[iova, iova + len)`.
    pub fn register_with_iova<M: RegionMemory>(
        &'pd self,
        mem: M,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Mr<'pd, M>> {
        self.register_inner(mem, Some(iova), access)
    }

    /// Registers raw memory.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be valid for reads and writes and must not be freed or
    /// accessed by anyone else (other than through the returned `Mr`) until the `Mr` is
    /// dropped or closed — and never, if the `Mr` is leaked.
    pub unsafe fn register_raw(
        &'pd self,
        ptr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Mr<'pd, RawMemory>> {
        self.register_inner(RawMemory { ptr, len }, iova, access)
    }

    fn register_inner<M: RegionMemory>(
        &'pd self,
        mut mem: M,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Mr<'pd, M>> {
        if access.contains(AccessFlags::REMOTE_WRITE) && !M::STAYS_ALLOCATED_IF_LEAKED {
            return Err(InvalidInput::RemoteWriteNeedsOwnedMemory.into());
        }
        let (ptr, len) = mem.region();
        let iova = iova.unwrap_or(ptr as u64);
        // SAFETY: valid PD; `[ptr, ptr+len)` is memory `mem` owns or exclusively borrows
        // (RegionMemory contract) and stays put while the Mr holds `mem`.
        let raw =
            unsafe { ffi::ibv_reg_mr_iova2(self.as_ptr(), ptr.cast(), len, iova, access.bits()) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Mr {
                raw,
                mem: core::mem::ManuallyDrop::new(mem),
                ptr,
                len,
                iova,
                _pd: PhantomData,
            }),
            None => Err(Error::last_os(Verb::RegMr)),
        }
    }

    /// Registers `len` bytes at `offset` of the dma-buf `fd` (e.g. GPU memory exported
    /// by a driver), addressed by the device as `[iova, iova + len)`.
    pub fn register_dmabuf(
        &'pd self,
        fd: i32,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmaBufMr<'pd>> {
        // SAFETY: valid PD; the kernel validates the fd and range, no host memory is named.
        let raw = unsafe {
            ffi::ibv_reg_dmabuf_mr(self.as_ptr(), offset, len, iova, fd, access.bits() as i32)
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(DmaBufMr {
                raw,
                len: len as u64,
                iova,
                fd,
                offset,
                _pd: PhantomData,
            }),
            None => Err(Error::last_os(Verb::RegDmabufMr)),
        }
    }
}

fn dereg(raw: NonNull<ffi::ibv_mr>) -> Result<()> {
    // SAFETY: caller owns the MR and deregisters it once.
    let rc = unsafe { ffi::ibv_dereg_mr(raw.as_ptr()) };
    if rc != 0 {
        return Err(Error::verb(Verb::DeregMr, rc));
    }
    Ok(())
}

impl<M: RegionMemory> Mr<'_, M> {
    /// The registered bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `mem` guarantees `[ptr, ptr+len)` valid and exclusively ours; we hand out
        // shared access tied to `&self`.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
    /// The registered bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, with exclusive access tied to `&mut self`.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    /// Host address of the first byte.
    pub fn host_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Deregisters and gives the memory back; on failure hands the `Mr` back (the
    /// memory stays registered, so it is not released).
    pub fn close(self) -> Result<M, (Self, Error)> {
        if let Err(e) = dereg(self.raw) {
            return Err((self, e));
        }
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped and `mem` is taken exactly once.
        Ok(unsafe { core::mem::ManuallyDrop::take(&mut me.mem) })
    }
}

impl<M: RegionMemory> MemoryRegion for Mr<'_, M> {
    fn lkey(&self) -> u32 {
        // SAFETY: valid MR; lkey is a plain field set at registration.
        unsafe { (*self.raw.as_ptr()).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.raw.as_ptr()).rkey }
    }
    fn iova(&self) -> u64 {
        self.iova
    }
    fn len(&self) -> u64 {
        self.len as u64
    }
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr {
        self.raw.as_ptr()
    }
}

impl<M: RegionMemory> Drop for Mr<'_, M> {
    fn drop(&mut self) {
        // Release the memory only once the device can no longer reach it; if
        // deregistration fails the memory is leaked rather than freed while registered.
        if dereg(self.raw).is_ok() {
            // SAFETY: dropped exactly once, here; `self` is being dropped.
            unsafe { core::mem::ManuallyDrop::drop(&mut self.mem) };
        }
    }
}

impl<M: RegionMemory> core::fmt::Debug for Mr<'_, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Mr")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// A dma-buf registration (no host mapping), deregistered on drop.
pub struct DmaBufMr<'pd> {
    raw: NonNull<ffi::ibv_mr>,
    len: u64,
    iova: u64,
    fd: i32,
    offset: u64,
    _pd: PhantomData<&'pd Pd<'pd>>,
}

// SAFETY: immutable handle; verbs on it are thread-safe; no host memory is reachable.
unsafe impl Send for DmaBufMr<'_> {}
// SAFETY: see above.
unsafe impl Sync for DmaBufMr<'_> {}

impl DmaBufMr<'_> {
    /// The dma-buf fd it was registered from.
    pub fn fd(&self) -> i32 {
        self.fd
    }
    /// Offset into the dma-buf.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Deregisters, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = dereg(self.raw) {
            return Err((self, e));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl MemoryRegion for DmaBufMr<'_> {
    fn lkey(&self) -> u32 {
        // SAFETY: valid MR; plain field.
        unsafe { (*self.raw.as_ptr()).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: valid MR; plain field.
        unsafe { (*self.raw.as_ptr()).rkey }
    }
    fn iova(&self) -> u64 {
        self.iova
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr {
        self.raw.as_ptr()
    }
}

impl Drop for DmaBufMr<'_> {
    fn drop(&mut self) {
        let _ = dereg(self.raw);
    }
}

impl core::fmt::Debug for DmaBufMr<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBufMr")
            .field("fd", &self.fd)
            .field("len", &self.len)
            .finish()
    }
}
