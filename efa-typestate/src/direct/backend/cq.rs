//! The direct state of one CQ: its consumer position, the direct QPs it serves, and
//! polling by phase bit.

use super::*;

struct CqState {
    /// Entries consumed (modulo 2^32); the phase of the current lap follows from it.
    cc: u32,
    /// CQ events delivered so far (libefa's `cmd_sn`), sent in every doorbell write.
    cmd_sn: u8,
    qps: Vec<Arc<DirectQp>>,
    /// Index in `qps` of the QP of the last completion (most polls see one QP).
    last: usize,
}

/// The direct state of one CQ.
pub struct DirectCq {
    ring: Ring,
    /// efa-sim's calls for this CQ (none on rdma-core).
    sim: super::sim::CqHooks,
    sender_gid: bool,
    unsolicited: bool,
    st: SpinLock<CqState>,
    /// `cc` as of the last poll that consumed entries, read without the lock by the
    /// empty-poll check ([`Self::poll`]).
    peek: AtomicU32,
}

impl Drop for DirectCq {
    fn drop(&mut self) {
        events::forget(self);
    }
}

impl core::fmt::Debug for DirectCq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DirectCq")
            .field("ring", &self.ring)
            .finish()
    }
}

/// The phase of the lap entry `cc` lies in: libefa's sub-CQs start in phase 1 (the ring
/// starts zeroed) and it flips every lap (`entries` is a power of two, so the laps'
/// parity survives the count's wrap).
#[inline(always)]
fn phase_of(cc: u32, entries: u32) -> bool {
    cc & entries == 0
}

impl DirectCq {
    /// The direct state of CQ `raw` (null in tests of rings in host memory) with ring
    /// `layout` (`efadv_query_cq`); `sender_gid` and `unsolicited`: what the CQ was
    /// created to report; `with_channel`: it has a completion channel, whose events then
    /// move its `cmd_sn` on.
    pub(crate) fn new(
        raw: *mut ffi::ibv_cq,
        layout: CqLayout,
        sender_gid: bool,
        unsolicited: bool,
        with_channel: bool,
    ) -> Result<Arc<DirectCq>> {
        let channel = (with_channel && !raw.is_null()).then_some(raw);
        check_barriers()?;
        // Events need arming, and arming needs the doorbell.
        if channel.is_some() && layout.doorbell == 0 {
            return Err(unsupported(RingKind::Completion));
        }
        let e = layout.entry_size as usize;
        let ok = (CQE_SIZE..=MAX_CQE).contains(&e)
            && e.is_power_of_two()
            && layout.num_entries.is_power_of_two()
            && layout.buffer != 0
            && layout.buffer % 8 == 0
            && layout.doorbell % 4 == 0;
        if !ok {
            return Err(unsupported(RingKind::Completion));
        }
        let cq = Arc::new(DirectCq {
            ring: Ring::new(
                layout.buffer,
                layout.entry_size,
                layout.num_entries,
                layout.doorbell,
            ),
            sim: super::sim::CqHooks::new(raw),
            sender_gid,
            unsolicited,
            st: SpinLock::new(CqState {
                cc: 0,
                cmd_sn: 0,
                qps: Vec::new(),
                last: 0,
            }),
            peek: AtomicU32::new(0),
        });
        if let Some(raw) = channel {
            events::watch(raw, &cq);
        }
        Ok(cq)
    }

    /// Serves `qp` from now on (QP creation).
    pub(crate) fn register(&self, qp: &Arc<DirectQp>) {
        self.st.lock().qps.push(Arc::clone(qp));
    }

    /// Stops serving `qp` (QP destruction, after the device forgot it): its completions
    /// still in the ring are dropped when polled.
    pub(crate) fn unregister(&self, qp: &Arc<DirectQp>) {
        let mut st = self.st.lock();
        st.qps.retain(|q| !Arc::ptr_eq(q, qp));
        st.last = 0;
    }

    /// Arms the CQ for one completion event: the doorbell with the consumer index, the
    /// events delivered so far and the arm bit (`efa_arm_cq`).
    pub(crate) fn arm(&self) {
        if self.ring.doorbell == 0 {
            return;
        }
        let st = self.st.lock();
        self.ring_doorbell(&st, true);
        drop(st);
        self.sim.armed();
    }

    /// A CQ event for this CQ was delivered (`ibv_get_cq_event`): the next arm is a new
    /// request (libefa's `efa_cq_event`).
    pub(crate) fn event_delivered(&self) {
        let mut st = self.st.lock();
        st.cmd_sn = st.cmd_sn.wrapping_add(1);
    }

    /// Writes the CQ doorbell as libefa's `efa_update_cq_doorbell` does: consumer index,
    /// `cmd_sn`, and the arm bit only when arming (a poll writes it clear; the device
    /// takes each write with the bit set as an arm request, one event per `cmd_sn`).
    fn ring_doorbell(&self, st: &CqState, arm: bool) {
        let db = CqDoorbell {
            consumer_index: st.cc as u16,
            cmd_sn: st.cmd_sn & 3,
            arm,
        };
        // SAFETY: the doorbell of this live CQ (it outlives its direct state's users).
        unsafe { write_doorbell(self.ring.doorbell as *mut u32, db.encode()) };
    }

    /// Appends up to `out`'s room of completions; returns how many. Completions of other
    /// generations, of slots not taken and of QPs this CQ does not serve are consumed and
    /// dropped. Writes the consumer index to the CQ doorbell (when the CQ has one) after
    /// consuming entries, as libefa's `efa_poll_cq` / `efa_end_poll` do.
    /// `allowed` runs once entries may be pending, before any is read: its error (a poll
    /// the caller must refuse, `cq/in_session.rs`) is returned with nothing consumed.
    #[inline]
    pub(crate) fn poll<const N: usize>(
        &self,
        out: &mut ArrayVec<Completion, N>,
        allowed: impl FnOnce() -> Result<()>,
    ) -> Result<usize> {
        if out.is_full() {
            return Err(crate::cq::no_room(N));
        }
        if !self.pending_after_progress() {
            return Ok(0);
        }
        allowed()?;
        Ok(self.poll_each(out.remaining_capacity(), |c| out.push(c)))
    }

    /// [`maybe_pending`](Self::maybe_pending), and when the CQ looks empty on efa-sim,
    /// again after the device did the work waiting for it (as a provider poll does).
    #[inline(always)]
    pub(crate) fn pending_after_progress(&self) -> bool {
        self.maybe_pending() || (self.sim.progress() && self.maybe_pending())
    }

    /// Whether the entry at the last published consumer index is pending, read without
    /// the lock: an empty poll costs a few loads, as libefa's inlined `efa_start_poll`.
    /// A concurrent poll may have moved on meanwhile; then this either says "maybe"
    /// (the locked poll looks again) or reports the CQ empty as of a moment when that
    /// other poll had taken what was there, which a poll racing it may also see.
    #[inline(always)]
    pub(crate) fn maybe_pending(&self) -> bool {
        let cc = self.peek.load(Ordering::Relaxed);
        let at = self.ring.slot(cc);
        // SAFETY: the flags byte of an entry of the live CQ ring (checked at creation);
        // only atomic loads read it here.
        let flags = unsafe { AtomicU8::from_ptr((at + FLAGS) as *mut u8) }.load(Ordering::Acquire);
        is_pending(flags, phase_of(cc, self.ring.entries))
    }

    /// Hands up to `max` completions to `f`, oldest first; returns how many (see
    /// [`poll`](Self::poll)).
    pub(crate) fn poll_each(&self, max: usize, mut f: impl FnMut(Completion)) -> usize {
        let mut st = self.st.lock();
        let size = self.ring.entry_size as usize;
        let mut n = 0;
        let mut consumed = 0u32;
        while n < max {
            let at = self.ring.slot(st.cc);
            // Only the phase byte is read before the barrier, as rdma-core's
            // `cq_next_sub_cqe_get` reads it: nothing else of the entry may be read before
            // the phase says the device finished writing it.
            // SAFETY: the flags byte of an entry of the live CQ ring (checked at creation);
            // only atomic loads read it before the phase is validated.
            let flags =
                unsafe { AtomicU8::from_ptr((at + FLAGS) as *mut u8) }.load(Ordering::Acquire);
            if !is_pending(flags, phase_of(st.cc, self.ring.entries)) {
                break;
            }
            from_device_barrier();
            #[cfg(test)]
            super::cq_order_tests::after_phase_check();
            // SAFETY: the entry's first word, 8-aligned in the live ring; the device
            // finished writing the entry before publishing its phase (ordered by the
            // barrier).
            let head = unsafe { (at as *const u64).read_volatile() };
            st.cc = st.cc.wrapping_add(1);
            consumed += 1;
            let word = |i: usize| {
                // SAFETY: word `i` of the entry (`i < entry_size / 8`, as the decoder
                // reads only words its entry size has), within the live ring; the device
                // finished writing the entry before publishing its phase (ordered by the
                // barrier).
                unsafe { (at as *const u64).add(i).read_volatile() }.to_le()
            };
            let Some(cqe) = decode_cqe_words(size, head.to_le(), word, self.sender_gid) else {
                continue;
            };
            let k = &cqe.common;
            let qpn = u32::from(k.qp_num);
            let found = match st.qps.get(st.last) {
                Some(q) if q.qpn == qpn => Some(st.last),
                _ => st.qps.iter().position(|q| q.qpn == qpn),
            };
            let Some(i) = found else { continue };
            st.last = i;
            let qp = &st.qps[i];
            let recv = k.queue_type == queue_type::RECV;
            let wr_id = if recv && k.unsolicited {
                Some(0)
            } else {
                qp.complete(recv, k.req_id)
            };
            let Some(wr_id) = wr_id else { continue };
            let status = WcStatus(efa_sys::vendor::to_ibv_wc_status(u32::from(k.status)));
            let c = match cqe.recv {
                None => {
                    let opcode = if k.op_type == send_op_type::RDMA_WRITE {
                        WcOpcode::RDMA_WRITE
                    } else {
                        // libefa reports RDMA-read requester completions as SEND.
                        WcOpcode::SEND
                    };
                    Completion::direct(wr_id, status, opcode, u32::from(k.status), qpn)
                }
                Some(r) => {
                    let opcode = if k.op_type == send_op_type::RDMA_WRITE {
                        WcOpcode::RECV_RDMA_WITH_IMM
                    } else {
                        WcOpcode::RECV
                    };
                    let mut flags = CompletionFlags::empty();
                    if r.imm.is_some() {
                        flags |= CompletionFlags::WITH_IMM;
                    }
                    if self.unsolicited && k.unsolicited && opcode == WcOpcode::RECV_RDMA_WITH_IMM {
                        flags |= CompletionFlags::UNSOLICITED;
                    }
                    let mut c = Completion::direct(wr_id, status, opcode, u32::from(k.status), qpn);
                    c.set_recv(
                        r.length,
                        u32::from(r.src_qp),
                        r.ah,
                        flags,
                        r.imm,
                        r.sender_gid.map(Gid),
                    );
                    c
                }
            };
            f(c);
            n += 1;
        }
        if consumed > 0 {
            self.peek.store(st.cc, Ordering::Relaxed);
            if self.ring.doorbell != 0 {
                self.ring_doorbell(&st, false);
            }
        }
        n
    }
}
