//! [`RdmaChunks`]: one large RDMA transfer split into device-sized pieces, without
//! allocating.
// Offsets here come from callers and peers (the remote buffer): every sum is checked
// once, in `new`, and later sums stay below those checked ends.
#![deny(clippy::arithmetic_side_effects)]

use core::marker::PhantomData;

use crate::error::{InvalidInput, Result};
use crate::mr::{MemoryRegion, RemoteBuffer, Sge};
use crate::pd::PdId;

/// Splits one large RDMA transfer into chunks of at most `max_chunk` bytes (typically
/// the device's `max_rdma_size`), without allocating: yields `(local SGE, remote slice)`
/// pairs in order, chunk [`index`](Self::index) 0, 1, .... Feed it to
/// [`SendBatch::fill_writes`](crate::SendBatch::fill_writes) /
/// [`fill_reads`](crate::SendBatch::fill_reads), which give chunk `i` the `wr_id`
/// `base + i`.
#[derive(Clone, Debug)]
pub struct RdmaChunks<'a> {
    lkey: u32,
    pd: PdId,
    local_addr: u64,
    remote: RemoteBuffer,
    max_chunk: u32,
    done: u64,
    index: u64,
    _mr: PhantomData<&'a ()>,
}

impl<'a> RdmaChunks<'a> {
    /// Chunks covering all of `remote`, with the local bytes starting at `local_offset`
    /// of `mr`; fails if the local range does not fit `mr`, either range runs past the
    /// end of the address space ([`InvalidInput::AddressWraps`]) or `max_chunk` is 0.
    pub fn new<M: MemoryRegion + ?Sized>(
        mr: &'a M,
        local_offset: u64,
        remote: RemoteBuffer,
        max_chunk: u32,
    ) -> Result<Self> {
        if max_chunk == 0 {
            return Err(InvalidInput::ZeroChunkSize.into());
        }
        if mr.as_mr_ptr().is_null() {
            return Err(InvalidInput::Deregistered.into());
        }
        crate::mr::check_range(local_offset, remote.len(), mr.len())?;
        let Some(local_addr) = mr.iova().checked_add(local_offset) else {
            return Err(InvalidInput::AddressWraps {
                addr: mr.iova(),
                len: u32::try_from(local_offset).unwrap_or(u32::MAX),
            }
            .into());
        };
        crate::mr::check_iova(local_addr, remote.len())?;
        remote.end()?;
        Ok(Self::from_parts(
            mr.lkey(),
            mr.pd_id(),
            local_addr,
            remote,
            max_chunk,
        ))
    }

    /// Only for ranges whose ends were checked to fit 64 bits.
    pub(crate) fn from_parts(
        lkey: u32,
        pd: PdId,
        local_addr: u64,
        remote: RemoteBuffer,
        max_chunk: u32,
    ) -> Self {
        RdmaChunks {
            lkey,
            pd,
            local_addr,
            remote,
            max_chunk,
            done: 0,
            index: 0,
            _mr: PhantomData,
        }
    }

    /// Bytes not yet yielded (`done` never passes the remote length).
    fn left(&self) -> u64 {
        self.remote.len().saturating_sub(self.done)
    }
    /// Chunks not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.left().div_ceil(u64::from(self.max_chunk))
    }
    /// Index of the next chunk (0 for the first).
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Chunks in the whole transfer.
    pub fn total(&self) -> u64 {
        self.index.saturating_add(self.remaining())
    }
    /// The next chunk, without consuming it.
    pub(crate) fn peek(&self) -> Option<(Sge<'a>, RemoteBuffer)> {
        let left = self.left();
        if left == 0 {
            return None;
        }
        let n = left.min(u64::from(self.max_chunk));
        // Both sums stay below ends checked to fit 64 bits when the chunks were made.
        let local = self.local_addr.checked_add(self.done)?;
        let remote = self.remote.addr().checked_add(self.done)?;
        let sge = Sge::new_checked(local, n as u32, self.lkey, self.pd);
        Some((sge, RemoteBuffer::new(remote, n, self.remote.rkey())))
    }
    /// Moves back by `n` chunks (chunks taken but not posted). Every chunk before the
    /// current one is full-sized, so the offset follows from the index.
    #[cfg_attr(not(feature = "std"), allow(dead_code))] // used by the std-only transfers
    pub(crate) fn rewind(&mut self, n: u64) {
        self.index = self.index.saturating_sub(n);
        self.done = self.index.saturating_mul(u64::from(self.max_chunk));
    }
    /// Moves to chunk `index` (at most [`total`](Self::total)): a multi-rail transfer
    /// hands out the chunks of one cursor to the rails' chunkers.
    #[cfg_attr(not(feature = "std"), allow(dead_code))] // used by the std-only transfers
    pub(crate) fn seek(&mut self, index: u64) {
        let index = index.min(self.total());
        self.index = index;
        self.done = index
            .saturating_mul(u64::from(self.max_chunk))
            .min(self.remote.len());
    }
    /// Consumes the chunk `peek` returned.
    pub(crate) fn advance(&mut self) {
        let step = self.left().min(u64::from(self.max_chunk));
        self.done = self.done.saturating_add(step);
        self.index = self.index.saturating_add(1);
    }
}

impl<'a> Iterator for RdmaChunks<'a> {
    type Item = (Sge<'a>, RemoteBuffer);
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.peek()?;
        self.advance();
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let r = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
        (r, Some(r))
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range_in_order() {
        let pd = PdId::test(1);
        let remote = RemoteBuffer::new(0x9000, 3 * 4096 + 100, 5);
        let mut c = RdmaChunks::from_parts(7, pd, 0x1000, remote, 4096);
        assert_eq!((c.remaining(), c.total()), (4, 4));
        let mut seen = 0u64;
        let mut i = 0;
        while let Some((sge, r)) = c.next() {
            assert_eq!(c.index(), i + 1);
            assert_eq!(sge.addr(), 0x1000 + seen);
            assert_eq!(r.addr(), 0x9000 + seen);
            assert_eq!((sge.len() as u64, sge.lkey(), r.rkey()), (r.len(), 7, 5));
            assert_eq!(sge.pd(), pd);
            seen += r.len();
            i += 1;
        }
        assert_eq!((i, seen), (4, remote.len()));
        assert_eq!(c.remaining(), 0);
        let mut again = RdmaChunks::from_parts(7, pd, 0x1000, remote, 4096);
        again.by_ref().take(4).for_each(drop);
        again.rewind(2);
        assert_eq!((again.index(), again.remaining()), (2, 2));
        assert_eq!(again.next().unwrap().1.addr(), 0x9000 + 2 * 4096);
        again.seek(3);
        assert_eq!((again.index(), again.remaining()), (3, 1));
        assert_eq!(again.peek().unwrap().1.len(), 100, "the short last chunk");
        again.seek(0);
        assert_eq!((again.index(), again.remaining()), (0, 4));
        again.seek(99);
        assert_eq!((again.index(), again.remaining(), again.total()), (4, 0, 4));
        let empty = RdmaChunks::from_parts(7, pd, 0, RemoteBuffer::new(0, 0, 0), 10);
        assert_eq!(empty.count(), 0);
    }
}
