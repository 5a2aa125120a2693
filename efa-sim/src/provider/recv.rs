//! A QP's receive queue, provider side (libefa's `efa_rq`): checks each receive WR
//! (model §3.4), writes one 16-byte descriptor per SGE into the device's RQ ring and
//! rings the doorbell with the new descriptor count once per list.
//!
//! A WR without SGEs gets one zero-length descriptor. libefa writes none for it (so on
//! hardware such a receive would never complete); efa-sim keeps the verbs meaning: it
//! consumes a message of length 0 or a write with immediate.

use super::{SpinLock, WridIds, WridPool};
use crate::model::{Errno, QpState, Sge};
use crate::ring::rx::RxDesc;
use crate::ring::{Cursor, Ring};
use core::cell::UnsafeCell;
use libc::{EINVAL, ENOMEM};

/// Fixed properties of a receive queue, decided at QP creation.
#[derive(Clone, Copy, Debug)]
pub struct RqConfig {
    /// Descriptors the ring holds (a power of two, or 0 without receive queue).
    pub descriptors: u32,
    /// WRs that may be outstanding (`cap.max_recv_wr` as granted).
    pub wrs: u32,
    /// The QP's `max_recv_sge`.
    pub max_sge: u32,
}

struct RecvState {
    pc: Cursor,
    posted: u32,
    completed: u32,
    pool: WridPool,
    gen: u16,
}

/// A receive queue's provider state.
pub struct RecvQueue {
    lock: SpinLock,
    st: UnsafeCell<RecvState>,
    ids: WridIds,
    cfg: RqConfig,
}

// SAFETY: `st` is only touched with the lock held; `ids` is atomics; `cfg` is immutable.
unsafe impl Sync for RecvQueue {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl Send for RecvQueue {}

impl RecvQueue {
    /// An empty queue of generation `gen`.
    pub fn new(cfg: RqConfig, gen: u16) -> RecvQueue {
        RecvQueue {
            lock: SpinLock::new(),
            st: UnsafeCell::new(RecvState {
                pc: Cursor::default(),
                posted: 0,
                completed: 0,
                pool: WridPool::new(cfg.wrs),
                gen,
            }),
            ids: WridIds::new(cfg.wrs, gen),
            cfg,
        }
    }

    /// The queue's configuration.
    pub fn config(&self) -> &RqConfig {
        &self.cfg
    }

    /// Posts a list of receive WRs `(wr_id, sges)` (an item is an error when the caller
    /// could not translate it): stops at the first bad one, `Err((its index, errno))`;
    /// the WRs before it are posted. The doorbell is rung once, after the list.
    pub fn post<'a>(
        &self,
        ring: &Ring,
        state: QpState,
        wrs: impl IntoIterator<Item = Result<(u64, &'a [Sge]), Errno>>,
    ) -> Result<(), (usize, Errno)> {
        self.lock.lock();
        // SAFETY: the lock is held until the end of this function.
        let s = unsafe { &mut *self.st.get() };
        let mut result = Ok(());
        for (i, wr) in wrs.into_iter().enumerate() {
            if let Err(e) = wr.and_then(|(id, sges)| self.post_one(s, ring, state, id, sges)) {
                result = Err((i, e));
                break;
            }
        }
        ring.doorbell().write(u32::from(s.pc.count));
        self.lock.unlock();
        result
    }

    fn post_one(
        &self,
        s: &mut RecvState,
        ring: &Ring,
        state: QpState,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), Errno> {
        if matches!(state, QpState::Reset | QpState::Err) {
            return Err(EINVAL);
        }
        if sges.len() > self.cfg.max_sge as usize {
            return Err(EINVAL);
        }
        if s.posted.wrapping_sub(s.completed) >= self.cfg.wrs {
            return Err(ENOMEM);
        }
        let req_id = self.ids.record(s.pool.take(), wr_id);
        s.posted = s.posted.wrapping_add(1);
        let none = [Sge::default()];
        let list = if sges.is_empty() { &none[..] } else { sges };
        for (i, g) in list.iter().enumerate() {
            let d = RxDesc {
                addr: g.addr,
                req_id: if i == 0 { req_id } else { 0 },
                // The descriptor's length field is 16 bits: longer SGEs are clamped.
                length: g.length.min(u32::from(u16::MAX)) as u16,
                lkey: g.lkey,
                first: i == 0,
                last: i + 1 == list.len(),
            };
            ring.write_slot(u32::from(s.pc.count), &d.encode());
            s.pc.advance(self.cfg.descriptors);
        }
        Ok(())
    }

    /// The `wr_id` a completion's request id stands for (None: an earlier generation).
    #[inline]
    pub fn wr_id(&self, req_id: u16) -> Option<u64> {
        self.ids.wr_id(req_id)
    }

    /// Frees the slot of a retired completion.
    pub fn retire(&self, req_id: u16) {
        self.lock.lock();
        // SAFETY: the lock is held.
        let s = unsafe { &mut *self.st.get() };
        s.completed = s.completed.wrapping_add(1);
        s.pool.put(self.ids.index(req_id));
        self.lock.unlock();
    }

    /// Forgets every WR (a reset): descriptor count 0, new generation.
    pub fn reset(&self) {
        self.lock.lock();
        // SAFETY: the lock is held.
        let s = unsafe { &mut *self.st.get() };
        s.pc.count = 0;
        s.posted = 0;
        s.completed = 0;
        s.pool.reset();
        s.gen = s.gen.wrapping_add(1);
        self.ids.set_gen(s.gen);
        self.lock.unlock();
    }
}
