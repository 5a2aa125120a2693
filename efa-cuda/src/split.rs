//! Registrations of device memory split into several MRs ([`SplitGpuMr`]), for buffers
//! that one MR cannot cover, and the sub-ranges they are made of ([`DeviceRange`]).
//!
//! The limits that force a split (see [`SplitGpuMr::new`]):
//! * **the EFA device's `max_mr_size`** (`ibv_query_device`; the kernel's
//!   `max_mr_pages × PAGE_SIZE`): the device refuses a larger registration (efa-sim answers
//!   `EINVAL`, its `EFA_SIM_PROFILE` key `max_mr_size` lowers the limit);
//! * **dma-buf exports over several physical allocations**: cuda.h lets one
//!   `cuMemGetHandleForAddressRange` call export a VMM range over many `cuMemCreate`
//!   chunks of one device with identical properties, and NVIDIA's exporter assembles such
//!   a dma-buf from several handles (`nv-dmabuf.c`, `total_objects`); chunks with
//!   different properties cannot be exported together, and a driver that exports one
//!   allocation at a time refuses the range (`CUDA_ERROR_INVALID_VALUE`). A piece whose
//!   export is refused is cut at the chunk boundary `cuMemGetAddressRange_v2` reports
//!   (the one chunk holding a pointer) and each part exported on its own (efa-sim-gpu's
//!   control `dmabuf_cross_chunk` = 0 is such a driver).
//!
//! No per-call size limit on `cuMemGetHandleForAddressRange` is documented (cuda.h 12.9,
//! 13.5); [`SplitOptions::max_piece_len`] caps pieces further where a platform needs it
//! (UCCL registers 1 GiB dma-buf pieces where `ibv_reg_dmabuf_mr` runs out of IOMMU
//! mappings under full IOMMU translation, uccl-project/uccl PR #761).

// A failed registration hands memory back by value (as register.rs does).
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::sync::Arc;

use efa_typestate::{AccessFlags, Context, Parent, Pd, RemoteBuffer, Sge};

use crate::align::host_page_size;
use crate::copy;
use crate::device::Device;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::flush::{FlushScope, Flushed};
use crate::memory::{driver_of, DeviceMemory};
use crate::owners::check_registration;
use crate::register::GpuMr;

/// `len` bytes at `offset` of device memory shared through an [`Arc`]: one piece of a
/// [`SplitGpuMr`] (or any sub-range to register on its own).
#[derive(Debug)]
pub struct DeviceRange<M: DeviceMemory> {
    mem: Arc<M>,
    offset: usize,
    len: usize,
}

impl<M: DeviceMemory> DeviceRange<M> {
    /// `[offset, offset + len)` of `mem`: [`Error::EmptyBuffer`] for `len == 0`,
    /// [`Error::OutOfBounds`] past its end.
    pub fn new(mem: Arc<M>, offset: usize, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(Error::EmptyBuffer);
        }
        let buffer_len = mem.byte_len();
        match offset.checked_add(len) {
            Some(end) if end <= buffer_len => Ok(DeviceRange { mem, offset, len }),
            _ => Err(Error::OutOfBounds {
                offset,
                len,
                buffer_len,
            }),
        }
    }
    /// Where it starts in the whole memory.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// The whole memory.
    pub fn memory(&self) -> &Arc<M> {
        &self.mem
    }
}

// SAFETY: the range lies inside `mem` (checked at construction, never changed), which the
// Arc keeps allocated while any clone lives and forever if one is leaked, exactly when `M`
// says a leak keeps it (as the `Arc<M>` impl argues); device memory is reached only through
// the driver's copies and the NIC, never a Rust reference, so the clones holding disjoint
// or overlapping ranges alias nothing.
unsafe impl<M: DeviceMemory> DeviceMemory for DeviceRange<M> {
    const STAYS_ALLOCATED_IF_LEAKED: bool = M::STAYS_ALLOCATED_IF_LEAKED;
    fn device_ptr(&self) -> u64 {
        self.mem.device_ptr() + self.offset as u64
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn device_ordinal(&self) -> i32 {
        self.mem.device_ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        self.mem.driver()
    }
}

/// How [`SplitGpuMr::new`] cuts a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitOptions {
    max_piece: Option<u64>,
}

impl SplitOptions {
    /// Pieces of at most the device's `max_mr_size`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Pieces of at most `len` bytes as well (rounded down to whole host pages).
    pub fn max_piece_len(mut self, len: u64) -> Self {
        self.max_piece = Some(len);
        self
    }
}

/// One piece's share of a range: see [`SplitGpuMr::segments`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Index of the piece.
    pub piece: usize,
    /// Offset of the segment in the whole buffer.
    pub offset: u64,
    /// Offset of the segment in its piece.
    pub piece_offset: u64,
    /// Its length.
    pub len: u64,
}

/// The segments of `[offset, offset + len)` over pieces starting at `starts` (offsets in a
/// buffer of `total` bytes, the first 0, increasing).
#[derive(Clone, Debug)]
pub struct Segments<'a> {
    starts: &'a [u64],
    total: u64,
    at: u64,
    end: u64,
}

impl<'a> Segments<'a> {
    fn new(starts: &'a [u64], total: u64, offset: u64, len: u64) -> Result<Self> {
        match offset.checked_add(len) {
            Some(end) if end <= total => Ok(Segments {
                starts,
                total,
                at: offset,
                end,
            }),
            _ => Err(Error::OutOfBounds {
                offset: offset as usize,
                len: len as usize,
                buffer_len: total as usize,
            }),
        }
    }
}

impl Iterator for Segments<'_> {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        if self.at >= self.end {
            return None;
        }
        let piece = self.starts.partition_point(|&s| s <= self.at) - 1;
        let start = self.starts[piece];
        let piece_end = self.starts.get(piece + 1).copied().unwrap_or(self.total);
        let len = piece_end.min(self.end) - self.at;
        let seg = Segment {
            piece,
            offset: self.at,
            piece_offset: self.at - start,
            len,
        };
        self.at += len;
        Some(seg)
    }
}

/// Where an offset of a [`SplitGpuMr`] lands: its piece, keys and CUDA address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceAt {
    /// Index of the piece.
    pub piece: usize,
    /// Offset in the piece.
    pub piece_offset: u64,
    /// The piece's local key.
    pub lkey: u32,
    /// The piece's remote key.
    pub rkey: u32,
    /// CUDA address of the byte (what SGEs and remote addresses use).
    pub addr: u64,
    /// Bytes from there to the end of the piece.
    pub len: u64,
}

/// A [`SplitGpuMr`] as a peer addresses it: one [`RemoteBuffer`] per piece, back to back
/// in the CUDA address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitRemote {
    pieces: Vec<RemoteBuffer>,
    starts: Vec<u64>,
    total: u64,
}

impl SplitRemote {
    /// From the pieces a peer sent, in order: each must start where the previous one
    /// ends ([`Error::PiecesNotContiguous`] otherwise) and none may be empty.
    pub fn from_pieces(pieces: Vec<RemoteBuffer>) -> Result<Self> {
        let mut starts = Vec::with_capacity(pieces.len());
        let mut total = 0u64;
        for (i, p) in pieces.iter().enumerate() {
            if p.is_empty() {
                return Err(Error::EmptyBuffer);
            }
            if i > 0 && pieces[i - 1].addr().checked_add(pieces[i - 1].len()) != Some(p.addr()) {
                return Err(Error::PiecesNotContiguous { piece: i });
            }
            starts.push(total);
            total = total
                .checked_add(p.len())
                .ok_or(Error::PiecesNotContiguous { piece: i })?;
        }
        if pieces.is_empty() {
            return Err(Error::EmptyBuffer);
        }
        Ok(SplitRemote {
            pieces,
            starts,
            total,
        })
    }
    /// The pieces.
    pub fn pieces(&self) -> &[RemoteBuffer] {
        &self.pieces
    }
    /// Total length.
    pub fn len(&self) -> u64 {
        self.total
    }
    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
    /// `[offset, offset + len)` as one remote buffer per piece it touches, with each
    /// part's offset in the whole: `(offset, buffer)`.
    pub fn segments(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<impl Iterator<Item = (u64, RemoteBuffer)> + '_> {
        let segs = Segments::new(&self.starts, self.total, offset, len)?;
        Ok(segs.map(|s| {
            let p = &self.pieces[s.piece];
            (
                s.offset,
                RemoteBuffer::new(p.addr() + s.piece_offset, s.len, p.rkey()),
            )
        }))
    }
}

/// Device memory registered as several MRs on one PD, back to back: built by
/// [`SplitGpuMr::new`] where one registration cannot cover the buffer. Each piece is a
/// [`GpuMr`] of a [`DeviceRange`]; a work request addresses one piece ([`sge`](Self::sge)
/// refuses a range over a boundary), [`segments`](Self::segments) and
/// [`SplitRemote::segments`] cut a range at the boundaries.
pub struct SplitGpuMr<P, M: DeviceMemory> {
    // Declared before `mem`: every piece is deregistered before the memory can go.
    pieces: Vec<GpuMr<P, DeviceRange<M>>>,
    starts: Vec<u64>,
    mem: Arc<M>,
}

impl<P, M: DeviceMemory> SplitGpuMr<P, M> {
    /// Registers `mem` with `pd` for `access` as pieces of at most the device's
    /// `max_mr_size` (and [`SplitOptions::max_piece_len`]), rounded down to host pages
    /// and cut at multiples of that size in the CUDA address space (so each piece spans
    /// no more pages than the limit). Each piece is registered like [`GpuMr::new`]
    /// (dma-buf, then `ibv_reg_mr` on the CUDA address); a piece whose dma-buf path fails
    /// and that spans several VMM chunks is first cut at the chunk boundary and retried
    /// (see the module docs for the limits). A buffer within every limit is one piece.
    ///
    /// The memory's device context is made current for the call (its primary context
    /// pushed if the thread's current one is on another device) and restored after.
    /// Errors: those of [`GpuMr::new`], and [`Error::PieceLimitTooSmall`] when the limit
    /// is under one host page. On failure the pieces made so far are deregistered and
    /// `mem` is dropped.
    pub fn new<C>(pd: P, mem: M, access: AccessFlags, opts: SplitOptions) -> Result<Self>
    where
        P: Parent<Target = Pd<C>> + Clone,
        C: Parent<Target = Context>,
    {
        let ordinal = check_registration(&mem, access)?;
        let driver = driver_of(&mem)?;
        let device_max = pd.context().query_device()?.max_mr_size();
        let page = host_page_size();
        let limit = opts.max_piece.unwrap_or(u64::MAX).min(device_max);
        let max_piece = limit / page * page;
        if max_piece == 0 {
            return Err(Error::PieceLimitTooSmall { limit, page });
        }
        let _ctx = driver.device(ordinal)?.make_current()?;
        let ptr = mem.device_ptr();
        let total = mem.byte_len() as u64;
        let mem = Arc::new(mem);
        let mut todo: VecDeque<(u64, u64)> = plan(ptr, total, max_piece).collect();
        let mut pieces = Vec::with_capacity(todo.len());
        let mut starts = Vec::with_capacity(todo.len());
        while let Some((off, len)) = todo.pop_front() {
            let range = DeviceRange::new(mem.clone(), off as usize, len as usize)?;
            let mr = match GpuMr::new_dmabuf(pd.clone(), range, access) {
                Ok(mr) => mr,
                Err((range, e)) => match chunk_end(driver, ptr + off, len) {
                    Some(cut) => {
                        drop(range);
                        let first = cut - (ptr + off);
                        todo.push_front((off + first, len - first));
                        todo.push_front((off, first));
                        continue;
                    }
                    None => GpuMr::new_peermem(pd.clone(), range, access, e)?,
                },
            };
            starts.push(off);
            pieces.push(mr);
        }
        Ok(SplitGpuMr {
            pieces,
            starts,
            mem,
        })
    }

    /// The pieces, in address order.
    pub fn pieces(&self) -> &[GpuMr<P, DeviceRange<M>>] {
        &self.pieces
    }
    /// Number of pieces.
    pub fn piece_count(&self) -> usize {
        self.pieces.len()
    }
    /// The memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }
    /// CUDA address of the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.mem.device_ptr()
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.mem.byte_len() as u64
    }
    /// Never true (empty buffers are rejected).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The piece holding byte `offset`, its keys, the byte's CUDA address and the bytes
    /// left in that piece; [`Error::OutOfBounds`] past the end.
    pub fn piece_at(&self, offset: u64) -> Result<PieceAt> {
        let s = self.segments(offset, 1)?.next().ok_or(Error::EmptyBuffer)?;
        let mr = &self.pieces[s.piece];
        Ok(PieceAt {
            piece: s.piece,
            piece_offset: s.piece_offset,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            addr: mr.device_ptr() + s.piece_offset,
            len: mr.len() - s.piece_offset,
        })
    }
    /// `[offset, offset + len)` cut at the piece boundaries.
    pub fn segments(&self, offset: u64, len: u64) -> Result<Segments<'_>> {
        Segments::new(&self.starts, self.len(), offset, len)
    }
    /// An SGE for `len` bytes at `offset`, which must lie in one piece
    /// ([`Error::CrossesPieces`] names the boundary otherwise).
    pub fn sge(&self, offset: u64, len: u64) -> Result<Sge<'_>> {
        let mut segs = self.segments(offset, len)?;
        let first = segs.next().ok_or(Error::EmptyBuffer)?;
        if first.len != len {
            return Err(Error::CrossesPieces {
                offset,
                len,
                boundary: first.offset + first.len,
            });
        }
        self.pieces[first.piece].sge(first.piece_offset, len)
    }
    /// The registration as a peer addresses it (one remote buffer per piece).
    pub fn remote(&self) -> SplitRemote {
        SplitRemote {
            pieces: self.pieces.iter().map(|p| p.remote()).collect(),
            starts: self.starts.clone(),
            total: self.len(),
        }
    }

    /// Copies `src` into the memory at `offset` (`cuMemcpyHtoD`, the memory's device
    /// context made current for the call).
    pub fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        copy::write(&*self.mem, offset, src)
    }
    /// Copies bytes at `offset` into `dst` (`cuMemcpyDtoH`, likewise).
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        copy::copy_to_host(&*self.mem, offset, dst)
    }
    /// Sets every byte to `value` (`cuMemsetD8`, likewise).
    pub fn fill(&mut self, value: u8) -> Result<()> {
        copy::set(&*self.mem, value)
    }
    /// The device that holds the memory.
    pub fn device(&self) -> Result<Device> {
        driver_of(&*self.mem)?.device(self.mem.device_ordinal())
    }
    /// [`Device::flush_gpudirect_writes`] on the memory's device.
    pub fn flush_gpudirect_writes(&self, scope: FlushScope) -> Result<Flushed> {
        self.device()?.flush_gpudirect_writes(scope)
    }
}

impl<P, M: DeviceMemory> core::fmt::Debug for SplitGpuMr<P, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitGpuMr")
            .field("device_ptr", &format_args!("{:#x}", self.device_ptr()))
            .field("len", &self.len())
            .field("pieces", &self.pieces)
            .finish()
    }
}

/// `(offset, len)` pieces of `[ptr, ptr + len)` cut at multiples of `max_piece` (in the
/// address space, so a piece spans at most `max_piece / page` pages).
fn plan(ptr: u64, len: u64, max_piece: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut at = ptr;
    let end = ptr + len;
    core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let next = (at / max_piece + 1)
            .checked_mul(max_piece)
            .map_or(end, |b| b.min(end));
        let piece = (at - ptr, next - at);
        at = next;
        Some(piece)
    })
}

/// The end of the physical allocation holding `addr` (`cuMemGetAddressRange_v2`: for VMM
/// memory the one chunk), when it ends inside `[addr, addr + len)`; `None` otherwise or
/// when the driver cannot tell.
fn chunk_end(driver: &Driver, addr: u64, len: u64) -> Option<u64> {
    let (base, size) = driver.allocation_range(addr).ok()?;
    let end = base.checked_add(size)?;
    (end > addr && end < addr + len && end % host_page_size() == 0).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_cuts_at_multiples_of_the_limit() {
        let p: Vec<_> = plan(0x1000 + 5, 0x3000, 0x1000).collect();
        assert_eq!(
            p,
            [(0, 0xffb), (0xffb, 0x1000), (0x1ffb, 0x1000), (0x2ffb, 5)]
        );
        let one: Vec<_> = plan(0x2000, 0x1000, 0x1000).collect();
        assert_eq!(one, [(0, 0x1000)]);
        let huge: Vec<_> = plan(u64::MAX - 10, 10, 1 << 63).collect();
        assert_eq!(huge, [(0, 10)]);
    }

    #[test]
    fn segments_split_at_piece_starts() {
        let starts = [0, 10, 25];
        let s: Vec<_> = Segments::new(&starts, 30, 5, 22).unwrap().collect();
        let pieces: Vec<_> = s.iter().map(|s| (s.piece, s.piece_offset, s.len)).collect();
        assert_eq!(pieces, [(0, 5, 5), (1, 0, 15), (2, 0, 2)]);
        assert!(Segments::new(&starts, 30, 29, 2).is_err());
        assert_eq!(Segments::new(&starts, 30, 30, 0).unwrap().count(), 0);
    }
}
