//! Completion queues: a preallocated ring of completions, peek/retire, and a
//! one-shot notifier per arm.

use super::*;

/// Which queue slot a completion frees when retired.
pub(crate) enum Slot {
    /// None (unsolicited write-with-imm).
    None,
    /// One SQ slot of this QP.
    Sq(Arc<Qp>),
    /// One RQ slot of this QP.
    Rq(Arc<Qp>),
}

pub(crate) struct CqEntry {
    pub c: Completion,
    pub slot: Slot,
}

impl Cq {
    pub(crate) fn create(
        rt: Arc<Runtime>,
        depth: u32,
        opts: CqOptions,
    ) -> Result<(Arc<Cq>, u32), Errno> {
        let p = &rt.profile;
        if depth > p.max_cqe {
            return Err(libc::EINVAL);
        }
        if opts.with_sgid && p.device_caps & profile::CAP_CQ_WITH_SGID == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if opts.with_unsolicited && p.device_caps & profile::CAP_UNSOLICITED_WRITE_RECV == 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let n = rt.cq_count.fetch_add(1, Ordering::AcqRel);
        if n >= p.max_cq {
            rt.cq_count.fetch_sub(1, Ordering::AcqRel);
            return Err(libc::ENOMEM);
        }
        let granted = depth.max(1).next_power_of_two();
        let cq = Arc::new(Cq {
            rt,
            depth: granted,
            opts,
            ring: Mutex::new(VecDeque::with_capacity(granted as usize)),
            armed: AtomicBool::new(false),
            notifier: Mutex::new(None),
            users: AtomicU32::new(0),
            dead: AtomicBool::new(false),
        });
        Ok((cq, granted))
    }

    /// Granted depth.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Options it was created with.
    pub fn options(&self) -> CqOptions {
        self.opts
    }

    /// Oldest unretired completion, or None. Does not retire it.
    pub fn peek(&self) -> Option<Completion> {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .map(|e| e.c)
    }

    /// Retires the completion returned by the last `peek` (frees its SQ/RQ slot).
    pub fn retire(&self) {
        let entry = self
            .ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if let Some(e) = entry {
            match e.slot {
                Slot::None => {}
                Slot::Sq(qp) => release(&qp.sq_inflight),
                Slot::Rq(qp) => release(&qp.rq_inflight),
            }
        }
    }

    /// Completions waiting (not yet retired).
    pub fn len(&self) -> usize {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no completion is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arms a one-shot notification (ibv_req_notify_cq with solicited_only = 0).
    /// If completions are already waiting the notifier fires at once, so an
    /// arm-then-poll consumer never misses one.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
        if !self.is_empty() {
            self.notify();
        }
    }

    /// Called (from any thread) once per arm when a completion is added.
    pub fn set_notifier(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.notifier.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::from(f));
    }

    /// EBUSY while a QP uses it.
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.rt.cq_count.fetch_sub(1, Ordering::AcqRel);
            self.ring.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        Ok(())
    }

    /// Adds a completion. The ring holds `depth` entries without allocating;
    /// beyond that it grows (hardware behaviour on overflow is undefined; we
    /// keep every completion rather than lose one).
    pub(crate) fn push(&self, c: Completion, slot: Slot) {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(CqEntry { c, slot });
        self.notify();
    }

    fn notify(&self) {
        if self.armed.swap(false, Ordering::AcqRel) {
            let f = self
                .notifier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(f) = f {
                f();
            }
        }
    }

    /// Removes every waiting completion of QP `qpn` (QP destroy purges them).
    pub(crate) fn purge_qp(&self, qpn: u32) {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| e.c.qp_num != qpn);
    }
}

fn release(counter: &AtomicU32) {
    let _ = counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
}
