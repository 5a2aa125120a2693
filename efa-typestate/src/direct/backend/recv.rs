//! Posting receives on the direct path: RX descriptors and the RQ doorbell.

use super::*;

impl DirectQp {
    /// Posts checked receives in order until the queue is full
    /// ([`Error::RecvQueueFull`] with the number posted), then rings the RQ doorbell once.
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send), for receives (the QP may be in INIT or later).
    pub(crate) unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // Checked first, so that such a batch posts nothing.
        for wr in wrs {
            let k = match &wr.bufs {
                RecvBufs::Sge(_) => 1,
                RecvBufs::Sges(l) => l.len(),
            };
            if k == 0 {
                return Err(DirectError::EmptyReceive.into());
            }
            if k > MAX_RECV_SGE {
                return Err(DirectError::WqeFormat.into());
            }
        }
        let mut st = self.rq_state.lock();
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            if st.slots.outstanding() >= st.slots.capacity() {
                result = Err(Error::RecvQueueFull { posted });
                break;
            }
            let mut bufs = [LocalBuf::default(); MAX_RECV_SGE];
            let k = match &wr.bufs {
                RecvBufs::Sge(s) => {
                    bufs[0] = LocalBuf {
                        addr: s.addr(),
                        lkey: s.lkey(),
                        length: s.len(),
                    };
                    1
                }
                RecvBufs::Sges(l) => {
                    for (d, s) in bufs.iter_mut().zip(l.raw()) {
                        *d = LocalBuf {
                            addr: s.addr,
                            lkey: s.lkey,
                            length: s.length,
                        };
                    }
                    l.len()
                }
            };
            let req_id = st.slots.take(wr.wr_id);
            let mut descs = [[0u8; RX_DESC_SIZE]; MAX_RECV_SGE];
            // 1..=MAX_RECV_SGE buffers (checked above): cannot fail.
            let Ok(k) = encode_rx_wqe(&mut descs[..k], req_id, &bufs[..k]) else {
                st.slots.untake(1);
                result = Err(DirectError::WqeFormat.into());
                break;
            };
            for d in &descs[..k] {
                let at = self.rq.slot(st.pc.count);
                // SAFETY: a 16-byte, 8-aligned descriptor slot of the live RQ ring beyond
                // its doorbell (the device does not read it yet), written under the RQ lock.
                unsafe { write_words(at, d) };
                st.pc.advance(self.rq.entries);
            }
            posted += 1;
        }
        if posted > 0 {
            to_device_barrier();
            // SAFETY: the RQ doorbell of this live QP; every descriptor up to it is written.
            unsafe {
                write_doorbell(
                    self.rq.doorbell as *mut u32,
                    Producer::doorbell(st.pc.count),
                )
            };
        }
        result
    }
}

/// Writes `bytes` (a multiple of 8 long) at `at` as volatile 8-byte stores.
///
/// # Safety
/// `at` is valid for `N` bytes of writes, 8-aligned, and nobody reads them meanwhile.
unsafe fn write_words<const N: usize>(at: usize, bytes: &[u8; N]) {
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
