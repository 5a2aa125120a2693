//! A `SendWR`'s request as the Rust core last checked it, so that posting the same
//! request again (the usual loop: the same `SendWR` objects every iteration) skips the
//! checks: `post_fast` adds the kept request (`efa_typestate::SendBatch::push_kept`)
//! when nothing it depends on changed since, and checks the request anew otherwise.
//!
//! What the checks depended on: the `SendWR`'s fields, whose setters forget the kept
//! request (`crate::wr`); and, compared at the post by serial number, the QP it was
//! checked for (so its limits, `send_ops_flags` and `sq_sig_all`, fixed at creation), its
//! SGE (read from its `sg_list` at every post: the list may have changed in place; an
//! `SGE` is immutable, so the same one names the same MR and range) and its AH. Every
//! `QP`, `SGE` and `AH` object gets its own serial number, never reused, so an equal
//! number is the same object. The MR and AH must also still be open: the post borrows
//! them, and takes the lean path only if they are.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use efa_typestate::{KeptSend, SendBatch};
use pyo3::sync::GILProtected;
use pyo3::Python;

/// A number for a new `SGE` or `AH`, never given before.
pub fn serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A `SendWR`'s kept request (guarded by the GIL, which every post holds).
pub struct Slot(GILProtected<RefCell<Option<Kept>>>);

impl Default for Slot {
    fn default() -> Self {
        Slot(GILProtected::new(RefCell::new(None)))
    }
}

/// A checked request and what its checks depended on (see the module docs).
#[derive(Clone, Copy)]
pub struct Kept {
    /// The serial numbers of the QP it was checked for, its SGE and its AH.
    key: [u64; 3],
    send: KeptSend,
}

impl Slot {
    /// Adds the kept request to `batch` (for the QP of serial `key[0]`) if it was kept for
    /// that QP, SGE (`key[1]`) and AH (`key[2]`) and the batch has room; false otherwise.
    ///
    /// # Safety
    /// As `SendBatch::push_kept`: the AH of serial `key[2]` and the MR of the SGE of
    /// serial `key[1]` are open and stay so until the batch is posted or dropped.
    #[inline(always)]
    pub unsafe fn push_again<const N: usize>(
        &self,
        py: Python<'_>,
        key: [u64; 3],
        batch: &mut SendBatch<'_, N>,
    ) -> bool {
        let Ok(kept) = self.0.get(py).try_borrow() else {
            return false;
        };
        match kept.as_ref() {
            // SAFETY: kept for this QP (so for its limits), with the same SGE and AH
            // objects (equal serials), so the same MR and AH, which the caller keeps open
            // (contract); the request's fields have not changed since (their setters
            // forget it).
            Some(k) if k.key == key => unsafe { batch.push_kept(&k.send) },
            _ => false,
        }
    }
    /// Keeps `send`, the request just checked for the QP, SGE and AH of `key`.
    #[inline(always)]
    pub fn keep(&self, py: Python<'_>, key: [u64; 3], send: KeptSend) {
        if let Ok(mut k) = self.0.get(py).try_borrow_mut() {
            *k = Some(Kept { key, send });
        }
    }
    /// Forgets the kept request (a field of its `SendWR` changed).
    pub fn forget(&self, py: Python<'_>) {
        // Never borrowed while Python code runs (so never here, in a setter): a borrow
        // would panic, it could not leave a stale request kept.
        *self.0.get(py).borrow_mut() = None;
    }
}
