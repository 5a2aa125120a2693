//! [`RdmaChunks`]: one large RDMA transfer split into device-sized pieces, without
//! allocating.

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
    /// of `mr`; fails if the local range does not fit `mr` or `max_chunk` is 0.
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
        Ok(Self::from_parts(
            mr.lkey(),
            mr.pd_id(),
            mr.iova() + local_offset,
            remote,
            max_chunk,
        ))
    }

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

    /// Chunks not yet yielded.
    pub fn remaining(&self) -> u64 {
        let left = self.remote.len() - self.done;
        left.div_ceil(self.max_chunk as u64)
    }
    /// Index of the next chunk (0 for the first).
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Chunks in the whole transfer.
    pub fn total(&self) -> u64 {
        self.index + self.remaining()
    }
    /// The next chunk, without consuming it.
    pub(crate) fn peek(&self) -> Option<(Sge<'a>, RemoteBuffer)> {
        let left = self.remote.len() - self.done;
        if left == 0 {
            return None;
        }
        let n = left.min(self.max_chunk as u64);
        let sge = Sge::new_checked(self.local_addr + self.done, n as u32, self.lkey, self.pd);
        let remote = RemoteBuffer::new(self.remote.addr() + self.done, n, self.remote.rkey());
        Some((sge, remote))
    }
    /// Moves back by `n` chunks (chunks taken but not posted). Every chunk before the
    /// current one is full-sized, so the offset follows from the index.
    #[cfg_attr(not(feature = "std"), allow(dead_code))] // used by the std-only transfers
    pub(crate) fn rewind(&mut self, n: u64) {
        self.index -= n.min(self.index);
        self.done = self.index * self.max_chunk as u64;
    }
    /// Consumes the chunk `peek` returned.
    pub(crate) fn advance(&mut self) {
        let left = self.remote.len() - self.done;
        self.done += left.min(self.max_chunk as u64);
        self.index += 1;
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
        let r = self.remaining() as usize;
        (r, Some(r))
    }
}

#[cfg(test)]
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
        let empty = RdmaChunks::from_parts(7, pd, 0, RemoteBuffer::new(0, 0, 0), 10);
        assert_eq!(empty.count(), 0);
    }
}
