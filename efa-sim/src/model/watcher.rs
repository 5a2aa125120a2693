//! The doorbell watcher: how the device notices doorbell writes it is not told about.
//!
//! efa-sim's own provider hands every doorbell to the device on the posting thread, so
//! nothing needs watching until a consumer asks for the raw rings
//! (`efadv_query_qp_wqs`, `efadv_query_cq`): only such a consumer can write WQEs and
//! doorbells itself. A send-queue doorbell it stores to is normally trapped and consumed
//! on the storing thread ([`crate::ring::mmio`]); the watcher covers the rest. The first
//! ring query starts one watcher thread per device. It looks at the send-queue doorbells
//! of every QP whose rings were handed out (where the doorbell is trapped, only news that
//! outlived a scan: a WQE whose phase was fixed in place after its doorbell) and at the
//! doorbells of such CQs (consumer index, arm bit), and has the device act on what
//! changed, on the watcher's thread.
//!
//! Latency: after it found work the watcher keeps looking, yielding its CPU between
//! scans, for [`BUSY_SPIN`]; then it sleeps, [`FIRST_NAP`] at first and twice as long
//! each idle round up to [`LONGEST_NAP`]. A doorbell written by a direct consumer is
//! therefore seen within microseconds while traffic flows and within about
//! [`LONGEST_NAP`] after a quiet period. Doorbells rung through efa-sim's provider are
//! consumed at once, on the posting thread, whether or not a watcher runs.

use super::runtime::stats::bump;
use super::runtime::Runtime;
use super::{Cq, Qp};
use crate::rcu::Guard;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long the watcher keeps scanning without sleeping after it found work.
pub const BUSY_SPIN: Duration = Duration::from_micros(200);
/// First sleep after the busy period.
pub const FIRST_NAP: Duration = Duration::from_micros(20);
/// Longest sleep between scans.
pub const LONGEST_NAP: Duration = Duration::from_millis(1);

/// A device's watcher: whether it runs and the CQs it watches.
#[derive(Default)]
pub(crate) struct Watcher {
    started: AtomicBool,
    cqs: Mutex<Vec<Weak<Cq>>>,
}

impl Watcher {
    /// Starts the watcher thread of `rt` (once).
    pub fn start(&self, rt: &Arc<Runtime>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let rt = rt.clone();
        let spawned = std::thread::Builder::new()
            .name("efa-sim-doorbells".into())
            .spawn(move || run(&rt));
        if spawned.is_err() {
            // Without a thread, doorbells are still seen on the next provider call.
            self.started.store(false, Ordering::Release);
        }
    }

    /// Watches `cq`'s doorbell from now on.
    pub fn watch_cq(&self, rt: &Arc<Runtime>, cq: &Arc<Cq>) {
        self.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(cq));
        self.start(rt);
    }
}

/// One scan: acts on every changed doorbell; whether there was any.
fn scan(rt: &Runtime) -> bool {
    // Collect first: the device's work takes the QP table lock itself.
    let mut qps: Vec<Arc<Qp>> = Vec::new();
    {
        let g = Guard::enter();
        rt.qps.for_each(&g, |_, q| {
            if q.sq_needs_watcher() {
                qps.extend(q.arc());
            }
        });
    }
    let mut work = false;
    for qp in qps {
        if qp.sq_doorbell() {
            bump(&rt.stats.watched_doorbells);
            work = true;
        }
    }
    let cqs: Vec<Arc<Cq>> = {
        let mut list = rt.watcher.cqs.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    };
    for cq in cqs {
        work |= cq.doorbell_written();
    }
    work
}

fn run(rt: &Runtime) {
    let mut last_work = Instant::now();
    let mut nap = FIRST_NAP;
    loop {
        if scan(rt) {
            last_work = Instant::now();
            nap = FIRST_NAP;
            continue;
        }
        if last_work.elapsed() < BUSY_SPIN {
            std::thread::yield_now();
            continue;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(LONGEST_NAP);
    }
}
