//! Scatter/gather elements: byte ranges of one registration, tagged with its protection
//! domain so that a batch can refuse memory of another PD or device with one compare.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use core::marker::PhantomData;

use crate::error::{InvalidInput, Result};
use crate::ffi;
use crate::pd::PdId;

#[inline]
pub(crate) fn check_range(offset: u64, len: u64, region_len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(InvalidInput::SgeOutOfBounds {
            offset,
            len: len.min(u32::MAX as u64) as u32,
        }
        .into()),
    }
}

/// Fails unless `[iova, iova + len)` fits the 64-bit address space: every SGE and
/// remote slice of a registration adds an offset to its iova.
#[inline]
pub(crate) fn check_iova(iova: u64, len: u64) -> Result<()> {
    match iova.checked_add(len) {
        Some(_) => Ok(()),
        None => Err(InvalidInput::AddressWraps {
            addr: iova,
            len: u32::try_from(len).unwrap_or(u32::MAX),
        }
        .into()),
    }
}

/// A scatter/gather element: `length` bytes at `addr` of one registered region, and the
/// PD of that region. It borrows the region, so it cannot outlive it, and can only be
/// made by [`MemoryRegion::sge`](crate::MemoryRegion::sge) (or its element-indexed
/// forms), which check the range.
#[derive(Clone, Copy)]
pub struct Sge<'mr> {
    raw: ffi::ibv_sge,
    pd: PdId,
    _mr: PhantomData<&'mr ()>,
}

impl<'mr> Sge<'mr> {
    /// Only for ranges already checked against a live region of lifetime `'mr` in `pd`.
    #[inline]
    pub(crate) fn new_checked(addr: u64, length: u32, lkey: u32, pd: PdId) -> Self {
        Sge {
            raw: ffi::ibv_sge { addr, length, lkey },
            pd,
            _mr: PhantomData,
        }
    }
    /// Device address.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }
    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        self.raw.length
    }
    /// True for a zero-length SGE.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw.length == 0
    }
    /// Local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
    /// A sub-range of this SGE (still inside the same region).
    #[inline]
    pub fn slice(&self, offset: u32, len: u32) -> Result<Self> {
        check_range(offset as u64, len as u64, self.raw.length as u64)?;
        let addr = self.raw.addr.checked_add(offset as u64);
        let Some(addr) = addr.filter(|a| a.checked_add(len as u64).is_some()) else {
            return Err(InvalidInput::AddressWraps {
                addr: self.raw.addr,
                len,
            }
            .into());
        };
        Ok(Sge::new_checked(addr, len, self.raw.lkey, self.pd))
    }
    #[inline]
    pub(crate) fn raw(&self) -> &ffi::ibv_sge {
        &self.raw
    }
    #[inline]
    pub(crate) fn pd(&self) -> PdId {
        self.pd
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

/// Up to `K` SGEs of one PD laid out as the device reads them (a contiguous `ibv_sge`
/// array): a gather list for a send or a scatter list for a receive. Build it once with
/// [`SgeList::new`]; batches borrow it.
#[derive(Clone, Copy)]
pub struct SgeList<'mr, const K: usize> {
    raw: [ffi::ibv_sge; K],
    len: usize,
    pd: PdId,
    _mr: PhantomData<&'mr ()>,
}

impl<'mr, const K: usize> SgeList<'mr, K> {
    /// The list of `sges`, in order. Fails with [`InvalidInput::TooManySges`] beyond `K`
    /// and [`InvalidInput::WrongPd`] if they belong to different PDs. An empty list is a
    /// zero-length send.
    #[inline]
    pub fn new(sges: &[Sge<'mr>]) -> Result<Self> {
        if sges.len() > K {
            return Err(InvalidInput::TooManySges {
                count: sges.len(),
                max: K as u32,
            }
            .into());
        }
        let pd = sges.first().map_or(PdId::NONE, |s| s.pd);
        let mut raw = [ffi::ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; K];
        for (slot, s) in raw.iter_mut().zip(sges) {
            if s.pd != pd {
                return Err(InvalidInput::WrongPd(crate::error::PdObject::Sge).into());
            }
            *slot = s.raw;
        }
        Ok(SgeList {
            raw,
            len: sges.len(),
            pd,
            _mr: PhantomData,
        })
    }
    /// Number of SGEs.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Total bytes.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.raw[..self.len].iter().map(|s| s.length as u64).sum()
    }
    /// The list as batches store it.
    #[inline]
    pub fn as_sges(&self) -> Sges<'_> {
        Sges {
            raw: &self.raw[..self.len],
            pd: self.pd,
        }
    }
}

impl<const K: usize> core::fmt::Debug for SgeList<'_, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(
                self.raw[..self.len]
                    .iter()
                    .map(|s| (s.addr, s.length, s.lkey)),
            )
            .finish()
    }
}

/// A borrowed [`SgeList`]: what a work request stores for a gather or scatter list.
#[derive(Clone, Copy)]
pub struct Sges<'a> {
    raw: &'a [ffi::ibv_sge],
    pd: PdId,
}

impl<'a> Sges<'a> {
    /// Number of SGEs.
    #[inline]
    pub fn len(&self) -> usize {
        self.raw.len()
    }
    /// True if empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
    /// Total bytes.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.raw.iter().map(|s| s.length as u64).sum()
    }
    #[inline]
    pub(crate) fn raw(&self) -> &'a [ffi::ibv_sge] {
        self.raw
    }
    /// The PD of the memory ([`PdId::NONE`] for an empty list, which names no memory).
    #[inline]
    pub(crate) fn pd(&self) -> PdId {
        self.pd
    }
}

impl core::fmt::Debug for Sges<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Sges({} SGEs, {} bytes)", self.len(), self.total_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_one_pd_and_their_order() {
        let pd = PdId::test(0x1000);
        let a = Sge::new_checked(0x10, 4, 7, pd);
        let b = Sge::new_checked(0x40, 6, 7, pd);
        let l = SgeList::<2>::new(&[a, b]).unwrap();
        assert_eq!((l.len(), l.total_len()), (2, 10));
        assert_eq!(l.as_sges().raw()[1].addr, 0x40);
        assert_eq!(l.as_sges().pd(), pd);
        let other = Sge::new_checked(0x10, 4, 7, PdId::test(0x2000));
        assert_eq!(
            SgeList::<2>::new(&[a, other]).unwrap_err(),
            crate::Error::Invalid(InvalidInput::WrongPd(crate::error::PdObject::Sge))
        );
        assert_eq!(
            SgeList::<1>::new(&[a, b]).unwrap_err(),
            crate::Error::Invalid(InvalidInput::TooManySges { count: 2, max: 1 })
        );
        let empty = SgeList::<2>::new(&[]).unwrap();
        assert_eq!(empty.as_sges().pd(), PdId::NONE);
    }

    #[test]
    fn sub_ranges_stay_inside() {
        let s = Sge::new_checked(0x1000, 128, 3, PdId::test(8));
        let t = s.slice(100, 28).unwrap();
        assert_eq!((t.addr(), t.len(), t.lkey()), (0x1000 + 100, 28, 3));
        assert_eq!(t.pd(), s.pd());
        assert_eq!(
            s.slice(100, 29).unwrap_err(),
            crate::Error::Invalid(InvalidInput::SgeOutOfBounds {
                offset: 100,
                len: 29
            })
        );
        assert!(check_range(u64::MAX, 2, 10).is_err());
        assert!(check_range(10, 0, 10).is_ok());
    }
}
