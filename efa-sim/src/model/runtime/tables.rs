//! The device's object tables, indexed by the number a WQE or packet carries (no hashing
//! on the data path): MRs by key slot, AHs by AH number. QPs are indexed by the low bits
//! of their QPN in [`super::Runtime::qps`].

use super::Runtime;
use crate::model::profile::MAX_MRS;
use crate::model::{Errno, Gid, Mr};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

/// MRs by key. A key is `generation << 16 | slot` with a generation 1..=255 that moves on
/// whenever a slot is reused: keys fit 24 bits, are never 0, and a stale key of a
/// deregistered MR does not name its successor.
#[derive(Default)]
pub struct MrTable {
    slots: Vec<Option<Arc<Mr>>>,
    gens: Vec<u8>,
    free: Vec<u16>,
    live: usize,
}

impl MrTable {
    /// The live MR with `key`.
    #[inline]
    pub fn get(&self, key: u32) -> Option<&Arc<Mr>> {
        self.slots
            .get((key & 0xffff) as usize)?
            .as_ref()
            .filter(|m| m.key == key)
    }

    /// Adds the MR `make` builds for a fresh key (ENOMEM beyond `max`).
    pub fn insert(
        &mut self,
        max: usize,
        make: impl FnOnce(u32) -> Arc<Mr>,
    ) -> Result<Arc<Mr>, Errno> {
        if self.live >= max.min(MAX_MRS as usize) {
            return Err(libc::ENOMEM);
        }
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                self.slots.len() - 1
            }
        };
        let gen = match self.gens[slot].wrapping_add(1) {
            0 => 1,
            g => g,
        };
        self.gens[slot] = gen;
        let mr = make(u32::from(gen) << 16 | slot as u32);
        self.slots[slot] = Some(mr.clone());
        self.live += 1;
        Ok(mr)
    }

    /// Removes the MR with `key`.
    pub fn remove(&mut self, key: u32) {
        let slot = (key & 0xffff) as usize;
        if self.get(key).is_some() {
            self.slots[slot] = None;
            self.free.push(slot as u16);
            self.live -= 1;
        }
    }

    /// Every live MR.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Mr>> {
        self.slots.iter().flatten()
    }
}

/// One device AH: the PD it belongs to, where its GID points, and the same-process
/// runtime behind it once looked up.
pub struct AhEntry {
    /// Address of the owning `Pd` (identity only).
    pub pd: usize,
    /// `(IPv4 address, device index)` the GID names, if it is an efa-sim GID.
    pub endpoint: Option<(Ipv4Addr, u32)>,
    direct: AtomicPtr<Runtime>,
    checked: AtomicU64,
}

impl AhEntry {
    /// The runtime of this process serving the destination device, if any (cached; a
    /// miss is re-checked only after another runtime starts).
    pub fn local_runtime(&self) -> Option<&'static Runtime> {
        let p = self.direct.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: pointers stored here come from `Runtime::find_local`, whose
            // runtimes are kept alive for the rest of the process.
            return Some(unsafe { &*p });
        }
        let gen = Runtime::generation();
        if self.checked.load(Ordering::Acquire) == gen {
            return None;
        }
        let (ip, dev) = self.endpoint?;
        let found = Runtime::find_local(ip, dev);
        if let Some(rt) = found {
            self.direct
                .store(rt as *const Runtime as *mut Runtime, Ordering::Release);
        }
        self.checked.store(gen, Ordering::Release);
        found
    }
}

/// AHs by number (1..0xFFFF; 0xFFFF means "none").
#[derive(Default)]
pub struct AhTable {
    entries: Vec<Option<AhEntry>>,
    free: Vec<u16>,
    live: u32,
}

impl AhTable {
    /// The live AH `n`.
    #[inline]
    pub fn get(&self, n: u16) -> Option<&AhEntry> {
        self.entries.get(usize::from(n))?.as_ref()
    }

    /// A new AH of `pd` to `gid`; ENOMEM beyond `max`.
    pub fn insert(&mut self, max: u32, pd: usize, gid: &Gid) -> Result<u16, Errno> {
        if self.live >= max.min(0xfffe) {
            return Err(libc::ENOMEM);
        }
        let n = match self.free.pop() {
            Some(n) => n,
            None => {
                if self.entries.is_empty() {
                    self.entries.push(None); // numbers start at 1
                }
                self.entries.push(None);
                (self.entries.len() - 1) as u16
            }
        };
        self.entries[usize::from(n)] = Some(AhEntry {
            pd,
            endpoint: crate::model::gid_endpoint(gid),
            direct: AtomicPtr::new(core::ptr::null_mut()),
            checked: AtomicU64::new(u64::MAX),
        });
        self.live += 1;
        Ok(n)
    }

    /// Frees AH `n`.
    pub fn remove(&mut self, n: u16) {
        if let Some(e) = self.entries.get_mut(usize::from(n)) {
            if e.take().is_some() {
                self.free.push(n);
                self.live -= 1;
            }
        }
    }
}
