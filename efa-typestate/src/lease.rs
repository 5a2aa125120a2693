//! Safe posting: a buffer *lease* is moved into the post and handed back by its
//! completion, like io_uring's owned-buffer APIs.
//!
//! [`Qp::post_send_lease`] and [`Qp::post_recv_lease`] take the lease by value (an
//! [`Mr`] over owned memory, or a [`Slot`](crate::pool::Slot) of a
//! [`BufferPool`](crate::pool::BufferPool)) and return a [`Posted`] ticket. While the
//! ticket exists nothing in safe code can reach the bytes; [`Posted::reclaim`] gives the
//! lease back when called with the completion of that work request, which the device
//! reports only once it is done with the memory. The post path adds one atomic
//! increment (the ticket's `wr_id`) to the unsafe path and allocates nothing.
//!
//! Why this is sound:
//! * a ticket's `wr_id` has bit 63 set and comes from a process-wide 63-bit counter, so
//!   no two work requests ever share it (the chunks of [`Qp::write_all`] /
//!   [`Qp::read_all`] take theirs from the same counter); batches refuse user `wr_id`s
//!   with bit 63 ([`InvalidInput::ReservedWrId`]), and a [`Completion`] cannot be made
//!   except by polling, so only the device can produce the completion that matches a
//!   ticket;
//! * a ticket dropped unredeemed, or forgotten with `mem::forget`, leaks its lease: the
//!   memory stays allocated and registered for the rest of the process, so the device
//!   can finish the work request into memory nobody else owns. Deregistering it instead
//!   would let a later registration get the same key (devices reissue keys: efa-sim
//!   after 255 generations of a key slot) at the same address, and the device would
//!   write that one. Leases over borrowed memory are refused
//!   ([`InvalidInput::LeaseNeedsOwnedMemory`]). A [`BufferPool`](crate::pool::BufferPool)
//!   dropped while any slot is out (posted, abandoned or forgotten) leaks its
//!   registration the same way;
//! * the normal path pays nothing for this: no reference count, no table, no lock.
//!   Reclaim tickets to get leases back (by their completion, or by
//!   [`Posted::reclaim_reset`] once their QP is reset, e.g. receive pools at teardown);
//!   an abandoned one costs its memory until exit.

use core::mem::ManuallyDrop;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::ah::Peer;
use crate::cq::Completion;
use crate::error::{Error, InvalidInput, PdObject, Result};
use crate::mr::{Local, MemoryRegion, Mr, RegionMemory, Sge};
use crate::qp::{Qp, RecvReady, Rts};
use crate::wr::{Dest, Payload, RecvBatch, RecvBufs, SendBatch, SendOp, SendWr};

/// The `wr_id` bit that marks leased work requests.
pub(crate) const LEASE_WR_ID_BIT: u64 = 1 << 63;

static NEXT_LEASE_ID: AtomicU64 = AtomicU64::new(0);

/// A `wr_id` no other work request of this process ever had.
fn next_wr_id() -> u64 {
    reserve_wr_ids(1)
}

/// The first of `n` consecutive `wr_id`s (bit 63 set) that no other work request of
/// this process ever had or will have. The counter has 63 bits: at one id per
/// nanosecond it lasts 292 years.
#[cfg_attr(not(feature = "std"), allow(dead_code))] // chunked transfers are std-only
pub(crate) fn reserve_wr_ids(n: u64) -> u64 {
    LEASE_WR_ID_BIT | (NEXT_LEASE_ID.fetch_add(n, Ordering::Relaxed) & !LEASE_WR_ID_BIT)
}

mod sealed {
    pub trait Sealed {}
}

/// A buffer that can be moved into a post. Sealed: an [`Mr`] (its whole region; memory
/// that stays allocated if leaked) and a pool [`Slot`](crate::pool::Slot).
pub trait Lease: sealed::Sealed + Sized {
    /// Whether the memory stays allocated if the lease is leaked.
    #[doc(hidden)]
    const LEAK_SAFE: bool;
    /// The whole leased region.
    #[doc(hidden)]
    fn lease_sge(&self) -> Result<Sge<'_>>;
    /// Gives up the lease while its work request may still be in flight: its memory and
    /// registration must stay alive (see the [module docs](self)).
    #[doc(hidden)]
    fn abandon(self);
}

impl<P, M: RegionMemory> sealed::Sealed for Mr<P, M, Local> {}

impl<P, M: RegionMemory> Lease for Mr<P, M, Local> {
    const LEAK_SAFE: bool = M::STAYS_ALLOCATED_IF_LEAKED;
    fn lease_sge(&self) -> Result<Sge<'_>> {
        self.sge_all()
    }
    fn abandon(self) {
        // Leaked: registered and allocated for good (LEAK_SAFE memory), so its key can
        // never be reissued to memory the device would then write.
        core::mem::forget(self);
    }
}

#[cfg(feature = "std")]
impl<H: crate::parent::Parent<Target = crate::pool::BufferPool<P>>, P> sealed::Sealed
    for crate::pool::Slot<H>
{
}

#[cfg(feature = "std")]
impl<H: crate::parent::Parent<Target = crate::pool::BufferPool<P>>, P> Lease
    for crate::pool::Slot<H>
{
    const LEAK_SAFE: bool = true;
    fn lease_sge(&self) -> Result<Sge<'_>> {
        Ok(self.sge())
    }
    fn abandon(self) {
        self.lose();
    }
}

/// A leased work request in flight. Nothing reaches the lease until
/// [`reclaim`](Self::reclaim) gives it back for the work request's completion; dropping
/// the ticket leaks the lease (memory and registration stay alive until the process
/// exits, see the [module docs](self)).
#[must_use = "dropping the ticket leaks the lease"]
pub struct Posted<L: Lease> {
    lease: ManuallyDrop<L>,
    wr_id: u64,
    qpn: u32,
    // The QP it was posted on, as an identity only (never dereferenced).
    qp: *const crate::ffi::ibv_qp,
}

// SAFETY: `qp` is an address compared, never dereferenced; the rest follows `L`.
unsafe impl<L: Lease + Send> Send for Posted<L> {}
// SAFETY: as above; `&Posted` gives no access to the lease.
unsafe impl<L: Lease + Sync> Sync for Posted<L> {}

impl<L: Lease> Posted<L> {
    /// The `wr_id` the work request's completion carries.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The QP it was posted on.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }
    /// True if `c` is this work request's completion.
    pub fn matches(&self, c: &Completion) -> bool {
        c.wr_id() == self.wr_id && c.qp_num() == self.qpn
    }
    /// The lease back, if `c` is this work request's completion (successful or not: the
    /// device is done with the memory either way); the ticket back otherwise.
    pub fn reclaim(self, c: &Completion) -> core::result::Result<L, Self> {
        if !self.matches(c) {
            return Err(self);
        }
        Ok(self.into_lease())
    }
    /// The lease back after the QP it was posted on has been reset (the ticket back if
    /// `qp` is another QP): a reset ends the device's window over every work request
    /// posted before it, completed or not, so a receive pool can be taken back at
    /// teardown instead of being leaked by dropping its tickets.
    ///
    /// Sound for any `qp` whose address is the ticket's: either it is the QP the lease
    /// was posted on, now in RESET, or that QP was destroyed (which also ended the
    /// window) and another took its place.
    pub fn reclaim_reset<P>(
        self,
        qp: &crate::qp::Qp<P, crate::qp::Reset>,
    ) -> core::result::Result<L, Self> {
        if qp.as_ptr().cast_const() != self.qp {
            return Err(self);
        }
        Ok(self.into_lease())
    }
    fn into_lease(self) -> L {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the lease is taken exactly once.
        unsafe { ManuallyDrop::take(&mut me.lease) }
    }
}

impl<L: Lease> Drop for Posted<L> {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here.
        let lease = unsafe { ManuallyDrop::take(&mut self.lease) };
        lease.abandon();
    }
}

impl<L: Lease> core::fmt::Debug for Posted<L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Posted")
            .field("wr_id", &format_args!("{:#x}", self.wr_id))
            .field("qpn", &self.qpn)
            .finish()
    }
}

/// A lease the QP refused, handed back with the reason; nothing was posted.
#[derive(Debug)]
pub struct Rejected<L> {
    /// The lease, untouched.
    pub lease: L,
    /// Why.
    pub error: Error,
}

impl<L> From<Rejected<L>> for Error {
    fn from(r: Rejected<L>) -> Error {
        r.error
    }
}

fn lease_pd(e: Error) -> Error {
    match e {
        Error::Invalid(InvalidInput::WrongPd(PdObject::Sge)) => {
            InvalidInput::WrongPd(PdObject::Lease).into()
        }
        e => e,
    }
}

fn ticket<L: Lease>(
    lease: L,
    wr_id: u64,
    qpn: u32,
    qp: *const crate::ffi::ibv_qp,
    r: Result<()>,
) -> core::result::Result<Posted<L>, Rejected<L>> {
    match r {
        Ok(()) => Ok(Posted {
            lease: ManuallyDrop::new(lease),
            wr_id,
            qpn,
            qp,
        }),
        Err(e) => Err(Rejected {
            lease,
            error: lease_pd(e),
        }),
    }
}

impl<P> Qp<P, Rts> {
    /// Posts `op` (a send, or an RDMA read or write) with the first `len` bytes of
    /// `lease` as its local side, safely: the lease is moved into the returned ticket
    /// until the completion. Checked like a batch (PD, operation, lengths); a refused
    /// lease comes back in [`Rejected`].
    pub fn post_send_lease<L: Lease, X>(
        &self,
        peer: &Peer<X>,
        op: SendOp,
        lease: L,
        len: u32,
    ) -> core::result::Result<Posted<L>, Rejected<L>> {
        let wr_id = next_wr_id();
        let posted = if L::LEAK_SAFE {
            let dest = Dest::of(peer);
            (|| {
                let sge = lease.lease_sge()?.slice(0, len)?;
                let mut batch = SendBatch::<1>::new(self);
                let wr = SendWr::with_dest(wr_id, op, dest, Payload::Sge(sge))?;
                batch.push_from(wr, crate::wr::Origin::Lease)?;
                // SAFETY: the lease's memory is owned by the lease, which the ticket
                // keeps out of reach until the completion (see the module docs).
                unsafe { self.inner.post_send(&batch) }
            })()
        } else {
            Err(InvalidInput::LeaseNeedsOwnedMemory.into())
        };
        ticket(lease, wr_id, self.qpn(), self.as_ptr(), posted)
    }
}

impl<P, S: RecvReady> Qp<P, S> {
    /// Posts a receive into the whole of `lease`, safely: the lease is moved into the
    /// returned ticket until the completion. A refused lease comes back in [`Rejected`].
    pub fn post_recv_lease<L: Lease>(
        &self,
        lease: L,
    ) -> core::result::Result<Posted<L>, Rejected<L>> {
        let wr_id = next_wr_id();
        let posted = if L::LEAK_SAFE {
            (|| {
                let sge = lease.lease_sge()?;
                let mut batch = RecvBatch::<1>::new(self);
                batch.push_from(wr_id, RecvBufs::Sge(sge), crate::wr::Origin::Lease)?;
                // SAFETY: as for sends: the ticket keeps the memory out of reach.
                unsafe { self.inner.post_recv(&batch) }
            })()
        } else {
            Err(InvalidInput::LeaseNeedsOwnedMemory.into())
        };
        ticket(lease, wr_id, self.qpn(), self.as_ptr(), posted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_are_unique_and_marked() {
        let a = next_wr_id();
        let b = next_wr_id();
        assert_ne!(a, b);
        assert_eq!(a & LEASE_WR_ID_BIT, LEASE_WR_ID_BIT);
        assert_eq!(b & LEASE_WR_ID_BIT, LEASE_WR_ID_BIT);
    }
}
