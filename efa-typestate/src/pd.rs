//! Protection domains: the scope of memory registrations, address handles and QPs.

use core::ptr::NonNull;

use crate::context::Context;
use crate::error::{Error, Result, Verb};
use crate::ffi;
use crate::parent::Parent;

/// A protection domain (`ibv_pd`), deallocated on drop. Holds its [`Context`] through
/// `C` (`&Context` or `Arc<Context>`, see [`parent`](crate::parent)); MRs, AHs and QPs
/// hold the PD the same way, so it cannot go away while they exist.
pub struct Pd<C> {
    raw: NonNull<ffi::ibv_pd>,
    ctx: C,
}

/// The identity of a live PD (its `ibv_pd` address), opaque. Batches compare the PD of
/// every SGE and peer with the QP's by this value; all three hold their PD alive while
/// they exist, so two live PDs never share an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PdId(usize);

impl PdId {
    /// No PD (an empty SGE list names no memory).
    pub(crate) const NONE: PdId = PdId(0);
    #[cfg(test)]
    pub(crate) const fn test(n: usize) -> PdId {
        PdId(n)
    }
}

// SAFETY: a PD is an immutable kernel handle; every verb taking it is thread-safe. The
// context holder follows its own Send/Sync.
unsafe impl<C: Send> Send for Pd<C> {}
// SAFETY: see above.
unsafe impl<C: Sync> Sync for Pd<C> {}

impl Context {
    /// Allocates a protection domain that borrows this context.
    pub fn alloc_pd(&self) -> Result<Pd<&Context>> {
        Pd::new(self)
    }
}

impl<C: Parent<Target = Context>> Pd<C> {
    /// Allocates a protection domain on `ctx` (`&Context`, or `Arc<Context>` for a PD
    /// without a lifetime).
    pub fn new(ctx: C) -> Result<Pd<C>> {
        // SAFETY: valid open context (kept alive by `ctx`).
        let raw = unsafe { ffi::ibv_alloc_pd(ctx.as_ptr()) };
        match NonNull::new(raw) {
            Some(raw) => Ok(Pd { raw, ctx }),
            None => Err(Error::last_os(Verb::AllocPd)),
        }
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Deallocates the PD, reporting failure; on failure the PD is handed back.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned PD; nothing holds it (close takes it by value, children hold it).
        let rc = unsafe { ffi::ibv_dealloc_pd(self.raw.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DeallocPd, rc)));
        }
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the context holder is moved out
        // exactly once and dropped here, after the PD is gone.
        drop(unsafe { core::ptr::read(&me.ctx) });
        Ok(())
    }
}

impl<C> Pd<C> {
    /// The raw PD pointer.
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.raw.as_ptr()
    }

    /// This PD's identity.
    #[inline]
    pub fn id(&self) -> PdId {
        PdId(self.raw.as_ptr() as usize)
    }
}

impl<C> Drop for Pd<C> {
    fn drop(&mut self) {
        // SAFETY: owned PD, freed once; all users hold it and are gone. A PD still in use
        // (a leaked MR) answers EBUSY and stays allocated.
        unsafe { ffi::ibv_dealloc_pd(self.raw.as_ptr()) };
    }
}

impl<C: Parent<Target = Context>> core::fmt::Debug for Pd<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.ctx.device_name())
            .finish()
    }
}
