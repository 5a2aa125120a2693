//! CQ events of direct CQs with a completion channel.
//!
//! Arming writes the CQ doorbell with `cmd_sn`, the number of events delivered so far
//! (modulo 4); the device takes an arm with a `cmd_sn` it has already answered as a
//! repeat. libefa moves its own count on from `ibv_get_cq_event` (the provider's
//! `cq_event` hook), which a direct CQ cannot use: its count is the direct state's. So
//! every event this crate reads ([`delivered`], from the channel code) is matched here to
//! the direct CQ it is for. Only direct CQs with a channel are listed; with none listed,
//! [`delivered`] is one atomic load.

use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::{lock, DirectCq};
use crate::ffi;

/// The direct CQs with a channel: the `ibv_cq` address and the state.
static WATCHED: Mutex<Vec<(usize, Weak<DirectCq>)>> = Mutex::new(Vec::new());
/// `WATCHED.len()`, read without the lock.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Lists `cq` (the state of the CQ at `raw`).
pub(super) fn watch(raw: *mut ffi::ibv_cq, cq: &Arc<DirectCq>) {
    let mut w = lock(&WATCHED);
    w.push((raw as usize, Arc::downgrade(cq)));
    COUNT.store(w.len(), Ordering::Release);
}

/// Drops `cq` from the list (its last owner is going).
pub(super) fn forget(cq: &DirectCq) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut w = lock(&WATCHED);
    w.retain(|(_, d)| !core::ptr::eq(d.as_ptr(), cq));
    COUNT.store(w.len(), Ordering::Release);
}

/// An event for the CQ at `raw` was read from its channel (and acknowledged).
pub(crate) fn delivered(raw: *mut ffi::ibv_cq) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    // Every live match: a CQ destroyed while its state lives on (`close` drops the state
    // after `ibv_destroy_cq`) may share its address with a new one; a count moved on
    // for nothing costs at most one early wake-up. Lock order: this list, then a CQ's
    // (nothing takes them the other way round).
    for (_, d) in lock(&WATCHED).iter().filter(|(at, _)| *at == raw as usize) {
        if let Some(cq) = d.upgrade() {
            cq.event_delivered();
        }
    }
}
