//! A direct QP's posting session (`Qp::post_with`): WQEs staged in host memory until
//! the commit copies them into the SQ.

use super::*;

/// A direct QP's posting session (`Qp::post_with`), as libefa's `ibv_wr_start` …
/// `ibv_wr_complete`: each work request is encoded into the host staging area as it is
/// added; [`commit`](Self::commit) copies them into the SQ with the doorbell rule of
/// `post_send`, [`abort`](Self::abort) (or a drop, e.g. on a panic) forgets them. The
/// device sees nothing before the commit, so a session is all or nothing.
pub(crate) struct DirectSession<'q> {
    pub(super) qp: &'q DirectQp,
    pub(super) st: SpinGuard<'q, SqState>,
    pub(super) start: u32,
    pub(super) start_phase: bool,
    pub(super) pending: u32,
    /// The first error of the session (a full queue): the commit fails with it.
    pub(super) latched: Option<Error>,
    pub(super) open: bool,
}

impl DirectSession<'_> {
    /// Adds one checked work request; a full queue is latched and reported by the commit
    /// (as libefa's `ibv_wr_complete` reports ENOMEM).
    ///
    /// # Safety
    /// `wr`'s SGE list / inline bytes are live for the call.
    pub(crate) unsafe fn push(&mut self, wr: &StagedSend<'_>) -> Result<()> {
        if self.latched.is_some() {
            return Ok(());
        }
        let st = &mut *self.st;
        if st.slots.outstanding() >= st.slots.capacity() {
            self.latched = Some(Error::SendQueueFull);
            return Ok(());
        }
        let req_id = st.slots.take(wr.wr_id);
        let ctl = TxControl {
            req_id,
            phase: st.pc.phase,
            completion: true,
        };
        let words = (self.qp.sq.entry_size / 8) as usize;
        let at = (st.pc.count & self.qp.sq.mask) as usize * words;
        let Some(slot) = st.staged.get_mut(at..at + words) else {
            st.slots.untake(1);
            return Err(DirectError::WqeFormat.into());
        };
        if let Some(w) = self.qp.fast_wqe(ctl, wr) {
            // A fast WQE is 64 bytes: the SQ's entries are (`fast_wqe` checks).
            slot.copy_from_slice(&w);
        } else {
            let mut w = [0u8; TX_DESC_SIZE_128];
            // SAFETY: forwarded.
            if let Err(e) = unsafe { self.qp.encode_wqe(&mut w, ctl, wr) } {
                st.slots.untake(1);
                return Err(e);
            }
            for (d, c) in slot.iter_mut().zip(w.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                *d = u64::from_le_bytes(b);
            }
        }
        st.pc.advance(self.qp.sq.entries);
        self.pending += 1;
        Ok(())
    }

    /// Posts the session's work requests (or reports its latched error, posting none).
    pub(crate) fn commit(mut self) -> Result<()> {
        if let Some(e) = self.latched {
            self.abort_in_place();
            return Err(e);
        }
        self.open = false;
        let qp = self.qp;
        let st = &mut *self.st;
        let words = (qp.sq.entry_size / 8) as usize;
        let mut since = 0u32;
        wc_start();
        for i in 0..self.pending {
            let count = self.start.wrapping_add(i);
            let from = (count & qp.sq.mask) as usize * words;
            let at = qp.sq.slot(count) as *mut u64;
            for (k, w) in st.staged[from..from + words].iter().enumerate() {
                // SAFETY: word `k` of the SQ slot of producer count `count` (`words` words
                // long), written by nobody else (the SQ lock is held) and beyond the
                // doorbell.
                unsafe { at.add(k).write_volatile(w.to_le()) };
            }
            since += 1;
            if since == qp.max_batch || i + 1 == self.pending {
                flush_wc_writes();
                let db = Producer::doorbell(count.wrapping_add(1));
                // SAFETY: the SQ doorbell of this live QP; every WQE up to it is written
                // and flushed.
                unsafe { write_doorbell(qp.sq.doorbell as *mut u32, db) };
                since = 0;
                wc_start();
            }
        }
        Ok(())
    }

    /// Forgets the session's work requests.
    pub(crate) fn abort(mut self) {
        self.abort_in_place();
    }

    fn abort_in_place(&mut self) {
        if self.open {
            self.open = false;
            let st = &mut *self.st;
            st.slots.untake(self.pending);
            st.pc.count = self.start;
            st.pc.phase = self.start_phase;
            self.pending = 0;
        }
    }
}

impl Drop for DirectSession<'_> {
    fn drop(&mut self) {
        self.abort_in_place();
    }
}

/// Writes `bytes` (a multiple of 8 long) at `at` as volatile 8-byte stores.
///
/// # Safety
/// `at` is valid for `N` bytes of writes, 8-aligned, and nobody reads them meanwhile.
pub(super) unsafe fn write_words<const N: usize>(at: usize, bytes: &[u8; N]) {
    for (i, c) in bytes.chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        // SAFETY: word `i` lies within the caller's `N` bytes.
        unsafe {
            (at as *mut u64)
                .add(i)
                .write_volatile(u64::from_ne_bytes(w))
        };
    }
}
