//! The device's object tables, indexed by the number a WQE or packet carries (no hashing
//! and no lock on the data path): MRs by key slot, AHs by AH number, QPs by the low bits
//! of their QPN. Readers look objects up inside an [`rcu::Guard`]; writers (registration,
//! AH and QP creation and destruction) hold the table's writer lock, and whoever removes
//! an object waits for a grace period ([`rcu::synchronize`]) before the table's reference
//! goes, so an object found in a section stays alive (and, for an MR, registered memory
//! stays valid) until that section ends.

use super::Runtime;
use crate::model::profile::MAX_MRS;
use crate::model::{Errno, Gid, Mr, Qp};
use crate::rcu::{self, Guard};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const CHUNK: usize = 256;

/// Published `Arc<T>`s by slot number, in chunks of [`CHUNK`] allocated on first use and
/// kept for the table's life (readers never see a chunk go away).
pub struct Slots<T> {
    chunks: Box<[AtomicPtr<[AtomicPtr<T>; CHUNK]>]>,
}

// SAFETY: the table owns `Arc<T>`s (shared across threads: needs T: Send + Sync) and
// chunks of atomics.
unsafe impl<T: Send + Sync> Sync for Slots<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for Slots<T> {}

impl<T> Slots<T> {
    /// Room for slots `0..capacity`.
    pub fn new(capacity: usize) -> Slots<T> {
        Slots {
            chunks: (0..capacity.div_ceil(CHUNK))
                .map(|_| AtomicPtr::new(core::ptr::null_mut()))
                .collect(),
        }
    }

    /// The object in slot `i`, valid while `_g` is open.
    #[inline]
    pub fn get<'g>(&'g self, i: usize, _g: &'g Guard) -> Option<&'g T> {
        let chunk = self.chunks.get(i / CHUNK)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: chunks are allocated by `set` and freed only in Drop (`&self` is live).
        let p = unsafe { &*chunk }[i % CHUNK].load(Ordering::Acquire);
        // SAFETY: a non-null slot holds an `Arc::into_raw` pointer whose reference is
        // dropped only after a grace period that waits for the section `_g` proves open.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Whether slot `i` holds nothing (meaningful under the writer lock).
    pub fn is_vacant(&self, i: usize) -> bool {
        let Some(c) = self.chunks.get(i / CHUNK) else {
            return false;
        };
        let chunk = c.load(Ordering::Acquire);
        // SAFETY: as in `get`; only the pointer value is read.
        chunk.is_null()
            || unsafe { &*chunk }[i % CHUNK]
                .load(Ordering::Acquire)
                .is_null()
    }

    /// Publishes `v` in slot `i` (the caller holds the writer lock; the slot is empty).
    pub fn set(&self, i: usize, v: Arc<T>) {
        let Some(c) = self.chunks.get(i / CHUNK) else {
            return;
        };
        let mut chunk = c.load(Ordering::Acquire);
        if chunk.is_null() {
            let fresh: Box<[AtomicPtr<T>; CHUNK]> = Box::new(core::array::from_fn(|_| {
                AtomicPtr::new(core::ptr::null_mut())
            }));
            chunk = Box::into_raw(fresh);
            c.store(chunk, Ordering::Release);
        }
        // SAFETY: allocated above or earlier, freed only in Drop.
        let old = unsafe { &*chunk }[i % CHUNK].swap(Arc::into_raw(v) as *mut T, Ordering::AcqRel);
        debug_assert!(old.is_null());
    }

    /// Unpublishes slot `i` (the caller holds the writer lock). The returned reference
    /// must outlive a grace period: drop it through [`retire`].
    #[must_use]
    pub fn take(&self, i: usize) -> Option<Arc<T>> {
        let chunk = self.chunks.get(i / CHUNK)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: as in `get`.
        let p = unsafe { &*chunk }[i % CHUNK].swap(core::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: the pointer came from `Arc::into_raw` in `set`; its reference is ours.
        (!p.is_null()).then(|| unsafe { Arc::from_raw(p) })
    }

    /// Every published object (for scans off the data path).
    pub fn for_each<'g>(&'g self, g: &'g Guard, mut f: impl FnMut(usize, &'g T)) {
        for (ci, c) in self.chunks.iter().enumerate() {
            if c.load(Ordering::Acquire).is_null() {
                continue;
            }
            for j in 0..CHUNK {
                if let Some(v) = self.get(ci * CHUNK + j, g) {
                    f(ci * CHUNK + j, v);
                }
            }
        }
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        for c in self.chunks.iter_mut() {
            let chunk = *c.get_mut();
            if chunk.is_null() {
                continue;
            }
            // SAFETY: allocated by `set` with Box::into_raw; nothing else can reach it now.
            let chunk = unsafe { Box::from_raw(chunk) };
            for s in chunk.iter() {
                let p = s.load(Ordering::Acquire);
                if !p.is_null() {
                    // SAFETY: an `Arc::into_raw` pointer the table still owns.
                    drop(unsafe { Arc::from_raw(p) });
                }
            }
        }
    }
}

/// Drops an object removed from a table once no read section can still see it.
pub fn retire<T>(v: Option<Arc<T>>) {
    if v.is_some() {
        rcu::synchronize();
        drop(v);
    }
}

/// The writer side of the MR table.
#[derive(Default)]
struct MrAlloc {
    gens: Vec<u8>,
    free: Vec<u16>,
    used: usize,
    live: usize,
}

/// MRs by key. A key is `generation << 16 | slot` with a generation 1..=255 that moves on
/// whenever a slot is reused: keys fit 24 bits, are never 0, and a stale key of a
/// deregistered MR does not name its successor.
pub struct MrTable {
    slots: Slots<Mr>,
    alloc: Mutex<MrAlloc>,
}

impl Default for MrTable {
    fn default() -> Self {
        MrTable {
            slots: Slots::new(MAX_MRS as usize),
            alloc: Mutex::new(MrAlloc::default()),
        }
    }
}

impl MrTable {
    /// The live MR with `key`.
    #[inline]
    pub fn get<'g>(&'g self, key: u32, g: &'g Guard) -> Option<&'g Mr> {
        self.slots
            .get((key & 0xffff) as usize, g)
            .filter(|m| m.key == key)
    }

    /// Adds the MR `make` builds for a fresh key (ENOMEM beyond `max`).
    pub fn insert(&self, max: usize, make: impl FnOnce(u32) -> Arc<Mr>) -> Result<Arc<Mr>, Errno> {
        let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
        // Beyond max_mr the device fails the admin REG_MR (no check in the kernel or
        // libefa): kernel efa_com.c efa_com_comp_status_to_errno maps
        // RESOURCE_ALLOCATION_FAILURE to ENOMEM. Which status the device sends is
        // UNCONFIRMED (model §7); ENOMEM is the plausible one.
        if a.live >= max.min(MAX_MRS as usize) {
            return Err(libc::ENOMEM);
        }
        let slot = match a.free.pop() {
            Some(s) => s as usize,
            None => {
                a.gens.push(0);
                a.used += 1;
                a.used - 1
            }
        };
        let gen = match a.gens[slot].wrapping_add(1) {
            0 => 1,
            g => g,
        };
        a.gens[slot] = gen;
        let mr = make(u32::from(gen) << 16 | slot as u32);
        self.slots.set(slot, mr.clone());
        a.live += 1;
        Ok(mr)
    }

    /// Removes the MR with `key`; returns once no device access can still reach it.
    pub fn remove(&self, key: u32) {
        let slot = (key & 0xffff) as usize;
        let gone = {
            let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
            let g = Guard::enter();
            let ours = self.get(key, &g).is_some();
            drop(g);
            if !ours {
                return;
            }
            let gone = self.slots.take(slot);
            a.free.push(slot as u16);
            a.live -= 1;
            gone
        };
        retire(gone);
    }

    /// Every live MR.
    pub fn for_each<'g>(&'g self, g: &'g Guard, mut f: impl FnMut(&'g Mr)) {
        self.slots.for_each(g, |_, m| f(m));
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
    #[inline]
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

#[derive(Default)]
struct AhAlloc {
    free: Vec<u16>,
    used: u16,
    live: u32,
}

/// AHs by number (1..0xFFFF; 0xFFFF means "none").
pub struct AhTable {
    slots: Slots<AhEntry>,
    alloc: Mutex<AhAlloc>,
}

impl Default for AhTable {
    fn default() -> Self {
        AhTable {
            slots: Slots::new(0x1_0000),
            alloc: Mutex::new(AhAlloc::default()),
        }
    }
}

impl AhTable {
    /// The live AH `n`.
    #[inline]
    pub fn get<'g>(&'g self, n: u16, g: &'g Guard) -> Option<&'g AhEntry> {
        self.slots.get(usize::from(n), g)
    }

    /// A new AH of `pd` to `gid`; ENOMEM beyond `max`.
    pub fn insert(&self, max: u32, pd: usize, gid: &Gid) -> Result<u16, Errno> {
        let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
        // Beyond max_ah the device fails the admin CREATE_AH (no check in the kernel or
        // libefa): kernel efa_com.c efa_com_comp_status_to_errno maps
        // RESOURCE_ALLOCATION_FAILURE to ENOMEM. Which status the device sends is
        // UNCONFIRMED (model §7); ENOMEM is the plausible one. Only a new (PD, GID) takes a
        // device AH (the kernel's AH cache, model §3.7).
        if a.live >= max.min(0xfffe) {
            return Err(libc::ENOMEM);
        }
        let n = match a.free.pop() {
            Some(n) => n,
            None => {
                // Numbers start at 1.
                a.used += 1;
                a.used
            }
        };
        self.slots.set(
            usize::from(n),
            Arc::new(AhEntry {
                pd,
                endpoint: crate::model::gid_endpoint(gid),
                direct: AtomicPtr::new(core::ptr::null_mut()),
                checked: AtomicU64::new(u64::MAX),
            }),
        );
        a.live += 1;
        Ok(n)
    }

    /// Frees AH `n` (returns once no send can still see it).
    pub fn remove(&self, n: u16) {
        let gone = {
            let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
            let gone = self.slots.take(usize::from(n));
            if gone.is_some() {
                a.free.push(n);
                a.live -= 1;
            }
            gone
        };
        retire(gone);
    }
}

/// QPs by the low [`crate::transport::QP_INDEX_BITS`] bits of their QPN.
pub struct QpTable {
    slots: Slots<Qp>,
    /// Serialises creation and destruction (slot choice, the live count).
    pub(crate) writer: Mutex<u32>,
}

impl QpTable {
    /// Room for indices `0..capacity`.
    pub fn new(capacity: usize) -> QpTable {
        QpTable {
            slots: Slots::new(capacity),
            writer: Mutex::new(0),
        }
    }

    /// The QP at `idx`, valid while `g` is open.
    #[inline]
    pub fn get<'g>(&'g self, idx: usize, g: &'g Guard) -> Option<&'g Qp> {
        self.slots.get(idx, g)
    }

    /// Whether index `idx` is free (writer lock held).
    pub fn is_vacant(&self, idx: usize) -> bool {
        self.slots.is_vacant(idx)
    }

    /// Publishes `qp` at the free index `idx` (writer lock held).
    pub fn set(&self, idx: usize, qp: Arc<Qp>) {
        self.slots.set(idx, qp)
    }

    /// Unpublishes index `idx` (writer lock held); drop the result through [`retire`].
    #[must_use]
    pub fn take(&self, idx: usize) -> Option<Arc<Qp>> {
        self.slots.take(idx)
    }

    /// Every live QP.
    pub fn for_each<'g>(&'g self, g: &'g Guard, f: impl FnMut(usize, &'g Qp)) {
        self.slots.for_each(g, f)
    }
}
