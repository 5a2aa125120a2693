//! A direct QP's posting session (`Qp::post_with`): WQEs written beyond the SQ's
//! doorbell (or staged in host memory past `max_batch`) until the commit rings it.

use super::*;

/// Words of a 64-byte WQE.
const WQE_WORDS: usize = TX_DESC_SIZE_64 / 8;

/// A direct QP's posting session (`Qp::post_with`), as libefa's `ibv_wr_start` …
/// `ibv_wr_complete`: each work request is encoded as it is added, into its SQ slot
/// beyond the doorbell or, past the first `max_batch`, into the host staging area;
/// [`commit`](Self::commit) copies the staged ones into the SQ and rings the doorbell
/// with the rule of `post_send`, [`abort`](Self::abort) (or a drop, e.g. on a panic)
/// forgets them all. The device reads nothing beyond the doorbell, so it sees nothing
/// before the commit, and a session is all or nothing.
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
    /// The first `max_batch` WQEs of a session go straight into their SQ slots, beyond
    /// the doorbell (the device reads nothing there before the commit's doorbell); later
    /// ones wait in the staging area, since the device takes at most `max_batch` WQEs per
    /// doorbell and a doorbell before the commit would break all or nothing. The common
    /// shape into the ring is inlined; everything else is [`push_general`](Self::push_general).
    ///
    /// # Safety
    /// `wr`'s SGE list / inline bytes are live for the call.
    #[inline(always)]
    pub(crate) unsafe fn push(&mut self, wr: StagedSend<'_>) -> Result<()> {
        let qp = self.qp;
        let st = &mut *self.st;
        if st.slots.outstanding() < st.slots.capacity() && self.latched.is_none() {
            // The request id is or-ed in once the WQE is known to take the fast shape
            // (it is word 0's low 16 bits: `fast.rs`), so no slot is taken otherwise.
            let ctl = TxControl {
                req_id: 0,
                phase: st.pc.phase,
                completion: true,
            };
            if let Some(mut words) = qp.fast_wqe(ctl, &wr) {
                if self.pending < qp.max_batch {
                    words[0] |= u64::from(st.slots.take(wr.wr_id));
                    // SAFETY: the 64-byte SQ slot (`fast_wqe` checks the entry size) at
                    // the producer position of this live ring, beyond the doorbell (the
                    // device reads nothing there before the commit's doorbell); the SQ
                    // lock is held, and write-combining was started by `begin`.
                    unsafe { store_wqe(qp.sq.slot(st.pc.count), &words) };
                } else {
                    let at = (st.pc.count & qp.sq.mask) as usize * WQE_WORDS;
                    let Some(slot) = st.staged.get_mut(at..at + WQE_WORDS) else {
                        return Err(DirectError::WqeFormat.into());
                    };
                    words[0] |= u64::from(st.slots.take(wr.wr_id));
                    // Little-endian words (`fast_wqe` is for little-endian CPUs only), as
                    // the commit copies them.
                    slot.copy_from_slice(&words);
                }
                st.pc.advance(qp.sq.entries);
                self.pending += 1;
                return Ok(());
            }
        }
        // By value: the request is stored to memory only on this (cold) path.
        // SAFETY: forwarded.
        unsafe { self.push_general(wr) }
    }

    /// [`push`](Self::push) for everything but the inlined fast shape: a latched or full
    /// queue, or a shape the general encoder takes.
    ///
    /// # Safety
    /// As [`push`](Self::push).
    #[inline(never)]
    unsafe fn push_general(&mut self, wr: StagedSend<'_>) -> Result<()> {
        if self.latched.is_some() {
            return Ok(());
        }
        let qp = self.qp;
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
        let mut w = [0u8; TX_DESC_SIZE_128];
        if let Some(words) = qp.fast_wqe(ctl, &wr) {
            w[..TX_DESC_SIZE_64].copy_from_slice(&wqe_bytes(&words));
        } else if let Err(e) = {
            // SAFETY: forwarded.
            unsafe { qp.encode_wqe(&mut w, ctl, &wr) }
        } {
            st.slots.untake(1);
            return Err(e);
        }
        if self.pending < qp.max_batch {
            // SAFETY: the SQ slot at the producer position of this live ring, beyond the
            // doorbell; the SQ lock is held.
            unsafe { qp.copy_wqe(qp.sq.slot(st.pc.count), &w) };
        } else {
            let words = (qp.sq.entry_size / 8) as usize;
            let at = (st.pc.count & qp.sq.mask) as usize * words;
            let Some(slot) = st.staged.get_mut(at..at + words) else {
                st.slots.untake(1);
                return Err(DirectError::WqeFormat.into());
            };
            for (d, c) in slot.iter_mut().zip(w.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                *d = u64::from_le_bytes(b);
            }
        }
        st.pc.advance(qp.sq.entries);
        self.pending += 1;
        Ok(())
    }

    /// Posts the session's work requests (or reports its latched error, posting none):
    /// a doorbell for the WQEs already in the ring, then the staged ones copied in, a
    /// doorbell for every `max_batch` of them.
    pub(crate) fn commit(mut self) -> Result<()> {
        if let Some(e) = self.latched {
            self.abort_in_place();
            return Err(e);
        }
        self.open = false;
        if self.pending == 0 {
            return Ok(());
        }
        let qp = self.qp;
        let st = &*self.st;
        let mut rung = self.pending.min(qp.max_batch);
        flush_wc_writes();
        // The session's first `rung` WQEs are written into their slots and flushed.
        qp.ring_sq(self.start.wrapping_add(rung));
        let words = (qp.sq.entry_size / 8) as usize;
        while rung < self.pending {
            let end = rung.saturating_add(qp.max_batch).min(self.pending);
            wc_start();
            for i in rung..end {
                let count = self.start.wrapping_add(i);
                let from = (count & qp.sq.mask) as usize * words;
                let at = qp.sq.slot(count) as *mut u64;
                if words == WQE_WORDS {
                    // 64-byte entries: a fixed-size copy, unrolled.
                    let src = st.staged.get(from..from + WQE_WORDS);
                    let Some(src) = src.and_then(|s| <&WqeWords>::try_from(s).ok()) else {
                        continue; // not reached: the staging area has every slot's words
                    };
                    let le = src.map(u64::to_le);
                    // SAFETY: the 64-byte SQ slot of producer count `count`, written by
                    // nobody else (the SQ lock is held) and beyond the doorbell.
                    unsafe { store_wqe(at as usize, &le) };
                    continue;
                }
                let Some(src) = st.staged.get(from..from + words) else {
                    continue; // not reached, as above
                };
                for (k, w) in src.iter().enumerate() {
                    // SAFETY: word `k` of the SQ slot of producer count `count` (`words`
                    // words long), written by nobody else (the SQ lock is held) and beyond
                    // the doorbell.
                    unsafe { at.add(k).write_volatile(w.to_le()) };
                }
            }
            flush_wc_writes();
            // Every WQE up to `end` is written and flushed.
            qp.ring_sq(self.start.wrapping_add(end));
            rung = end;
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
