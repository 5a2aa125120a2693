//! Protection domains: the scope of memory registrations, address handles and QPs.

use core::ptr::NonNull;

use crate::context::Context;
use crate::error::{Error, Result, Verb};
use crate::ffi;

/// A protection domain (`ibv_pd`), deallocated on drop. Borrows its [`Context`]; MRs,
/// AHs and QPs borrow the PD, so it cannot go away while they exist.
pub struct Pd<'ctx> {
    raw: NonNull<ffi::ibv_pd>,
    ctx: &'ctx Context,
}

// SAFETY: a PD is an immutable kernel handle; every verb taking it is thread-safe.
unsafe impl Send for Pd<'_> {}
// SAFETY: see above.
unsafe impl Sync for Pd<'_> {}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd<'_>> {
        // SAFETY: valid open context.
        let raw = unsafe { ffi::ibv_alloc_pd(self.as_ptr()) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Pd { raw, ctx: self }),
            None => Err(Error::last_os(Verb::AllocPd)),
        }
    }
}

impl<'ctx> Pd<'ctx> {
    /// The raw PD pointer.
    pub fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.raw.as_ptr()
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// Deallocates the PD, reporting failure; on failure the PD is handed back.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned PD; nothing borrows it (close takes it by value).
        let rc = unsafe { ffi::ibv_dealloc_pd(self.raw.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DeallocPd, rc)));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl Drop for Pd<'_> {
    fn drop(&mut self) {
        // SAFETY: owned PD, freed once; all users borrowed it and are gone.
        unsafe { ffi::ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

impl core::fmt::Debug for Pd<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.ctx.device_name())
            .finish()
    }
}
