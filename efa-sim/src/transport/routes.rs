//! Which way a packet goes: for every destination of this host's address whose port
//! names a `(device, slot)` of the port layout, the shared-memory link to its inbox or
//! UDP, decided on first contact and looked up without a lock on every send.
//!
//! A link is dropped (and the destination decided again at its next packet) when it
//! fails: a push that finds the ring full or its lock stuck, or a retransmission towards
//! it (the requester suspects the peer), whose owner turns out to be dead; so a slot
//! whose process died and was claimed by a new one is reached at its new inbox. A UDP
//! decision is revisited after [`UDP_RECHECK`] (the peer may have been an older efa-sim,
//! or started its inbox late). Replaced routes are freed by the engine's timer after a
//! grace period, never on the sending thread.

use super::shm::Link;
use super::{port_for, SLOTS};
use crate::config::{Transport, MAX_DEVICES};
use crate::rcu::{self, Guard};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a destination decided for UDP stays so before its inbox is looked for again.
pub const UDP_RECHECK: Duration = Duration::from_secs(1);

/// The way to one destination.
pub enum Route {
    /// Its inbox.
    Shm(Link),
    /// UDP, decided at this time.
    Udp(Instant),
}

/// Routes of one endpoint.
pub struct Routes {
    ip: Ipv4Addr,
    port_base: u16,
    dir: PathBuf,
    mode: Transport,
    table: Box<[AtomicPtr<Route>]>,
    graveyard: Mutex<Vec<Route>>,
}

// SAFETY: the table owns boxed routes (Send + Sync contents); readers reach them inside
// read sections, writers swap pointers and retire the old boxes after a grace period.
unsafe impl Sync for Routes {}
// SAFETY: as above.
unsafe impl Send for Routes {}

impl Routes {
    /// Routes from the endpoint at `ip` with ports above `port_base`, inboxes under `dir`.
    pub fn new(ip: Ipv4Addr, port_base: u16, dir: PathBuf, mode: Transport) -> Routes {
        Routes {
            ip,
            port_base,
            dir,
            mode,
            table: (0..(MAX_DEVICES * SLOTS) as usize)
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
            graveyard: Mutex::new(Vec::new()),
        }
    }

    /// The table index of `to`, if it is an endpoint of this host's address.
    #[inline]
    fn index(&self, to: SocketAddrV4) -> Option<usize> {
        if *to.ip() != self.ip {
            return None;
        }
        let i = usize::from(to.port().checked_sub(self.port_base)?);
        (i < self.table.len()).then_some(i)
    }

    /// The route to `to`, deciding it on first contact; None: not an endpoint of this
    /// host (UDP). Valid while `g` is open.
    #[inline]
    pub fn get<'g>(&'g self, to: SocketAddrV4, g: &'g Guard) -> Option<&'g Route> {
        let i = self.index(to)?;
        let p = self.table[i].load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: non-null entries are `Box::into_raw` routes freed only by
            // `collect`, after a grace period that waits for the section `g` proves open.
            let r = unsafe { &*p };
            match r {
                Route::Udp(at) if self.mode != Transport::Udp && at.elapsed() > UDP_RECHECK => {}
                _ => return Some(r),
            }
        }
        self.decide(i, to, p, g)
    }

    #[cold]
    fn decide<'g>(
        &'g self,
        i: usize,
        to: SocketAddrV4,
        old: *mut Route,
        _g: &'g Guard,
    ) -> Option<&'g Route> {
        let route = match self.mode {
            Transport::Udp => Route::Udp(Instant::now()),
            _ => {
                let dev = u32::from(to.port() - self.port_base) / SLOTS;
                let slot = u32::from(to.port() - self.port_base) % SLOTS;
                debug_assert_eq!(port_for(self.port_base, dev, slot), Some(to.port()));
                match Link::open(&self.dir, slot, dev, to) {
                    Some(l) => Route::Shm(l),
                    None => Route::Udp(Instant::now()),
                }
            }
        };
        let new = Box::into_raw(Box::new(route));
        match self.table[i].compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                if !old.is_null() {
                    // SAFETY: we unpublished `old` (a Box::into_raw route); it is freed
                    // after a grace period.
                    self.bury(*unsafe { Box::from_raw(old) });
                }
                // SAFETY: just published; freed only after a grace period.
                Some(unsafe { &*new })
            }
            Err(current) => {
                // Another thread decided first: use its route.
                // SAFETY: `new` was never published.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: as in `get`.
                (!current.is_null()).then(|| unsafe { &*current })
            }
        }
    }

    /// Forgets the route to `to` if it is a link whose owner died (decided again at the
    /// next packet).
    pub fn suspect(&self, to: SocketAddrV4) {
        let Some(i) = self.index(to) else { return };
        let dead = {
            let g = Guard::enter();
            let p = self.table[i].load(Ordering::Acquire);
            let _ = &g;
            // SAFETY: as in `get`.
            !p.is_null() && matches!(unsafe { &*p }, Route::Shm(l) if !l.alive())
        };
        if dead {
            let p = self.table[i].swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: unpublished by the swap; freed after a grace period.
                self.bury(*unsafe { Box::from_raw(p) });
            }
        }
    }

    fn bury(&self, r: Route) {
        self.graveyard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r);
    }

    /// Frees replaced routes once no section can see them (the engine's timer; the
    /// caller holds no lock a read section waits for).
    pub fn collect(&self) {
        let dead = std::mem::take(&mut *self.graveyard.lock().unwrap_or_else(|e| e.into_inner()));
        if !dead.is_empty() {
            rcu::synchronize();
            drop(dead);
        }
    }

    /// Whether shared memory is mandatory between endpoints of this address.
    pub fn shm_only(&self) -> bool {
        self.mode == Transport::Shm
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        for e in self.table.iter_mut() {
            let p = *e.get_mut();
            if !p.is_null() {
                // SAFETY: a published Box::into_raw route; nothing can reach it now.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
