//! [`Cq`]: the classic completion queue (`ibv_create_cq`), polled with `ibv_poll_cq`.

use core::ffi::c_int;
use core::mem::MaybeUninit;
use core::ops::Deref;
use core::ptr::NonNull;

use arrayvec::ArrayVec;

use super::completion::VERBS_WC_FLAGS;
use super::{choose_channel, destroy_cq, notify_fn, request_notify_with, sealed, wants_direct};
use super::{CompChannel, Completion, CompletionFlags, CompletionQueue, CqOptions, OwnChannel};
use super::{ReqNotifyFn, WorkCompletion};
use crate::context::Context;
use crate::error::{Error, Result, Unsupported, Verb};
use crate::ffi;
use crate::parent::{Keep, Parent, Sibling};

type PollCqFn = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int, *mut ffi::ibv_wc) -> c_int;

/// A classic CQ (`ibv_create_cq`), polled with `ibv_poll_cq`. Holds its context through
/// `C` (and, if it has one, its shared completion channel the same way).
pub struct Cq<C> {
    raw: NonNull<ffi::ibv_cq>,
    poll_cq: PollCqFn,
    req_notify: ReqNotifyFn,
    own: Option<OwnChannel>,
    /// The direct backend's state (a CQ created [`Backend::Direct`](crate::Backend)).
    #[cfg(feature = "std")]
    direct: Option<std::sync::Arc<crate::direct::backend::DirectCq>>,
    _channel: Option<Keep>,
    _ctx: C,
}

// SAFETY: the EFA provider serialises polling and arming of a CQ with its own lock, so
// the CQ may be used from several threads; the holders follow their own Send/Sync.
unsafe impl<C: Send> Send for Cq<C> {}
// SAFETY: see above.
unsafe impl<C: Sync> Sync for Cq<C> {}

impl Context {
    /// Creates a classic CQ borrowing this context: [`Cq::new`].
    pub fn create_cq(&self, opts: CqOptions) -> Result<Cq<&Context>> {
        Cq::new(self, opts)
    }
    /// Creates a classic CQ that notifies `channel`: [`Cq::with_channel`].
    pub fn create_cq_with_channel<'a, X>(
        &'a self,
        channel: &'a CompChannel<X>,
        opts: CqOptions,
    ) -> Result<Cq<&'a Context>> {
        Cq::with_channel(self, channel, opts)
    }
}

impl<C: Parent<Target = Context>> Cq<C> {
    /// Creates a classic CQ on `ctx` (`&Context` or `Arc<Context>`).
    pub fn new(ctx: C, opts: CqOptions) -> Result<Self> {
        Self::create(ctx, None, opts)
    }
    /// Creates a classic CQ whose notifications go to `channel` (a borrow beside a
    /// borrowed context, an `Arc` beside a shared one); the channel must belong to `ctx`.
    pub fn with_channel<Ch, X>(ctx: C, channel: Ch, opts: CqOptions) -> Result<Self>
    where
        Ch: Sibling<C> + Deref<Target = CompChannel<X>>,
    {
        Self::create(ctx, Some((channel.raw(), channel.into_keep())), opts)
    }

    fn create(
        ctx: C,
        channel: Option<(NonNull<ffi::ibv_comp_channel>, Keep)>,
        opts: CqOptions,
    ) -> Result<Self> {
        let (ch_raw, keep) = match channel {
            Some((raw, keep)) => (Some(raw), Some(keep)),
            None => (None, None),
        };
        let direct = wants_direct(&ctx, &opts)?;
        #[cfg(not(feature = "std"))]
        let _ = direct;
        crate::qp::check_cq_depth(&ctx, opts.depth_value())?;
        let (ch, own) = choose_channel(&ctx, ch_raw, &opts)?;
        // SAFETY: valid context, optional channel of this context, no cq_context.
        let raw = unsafe {
            ffi::ibv_create_cq(
                ctx.as_ptr(),
                opts.depth_value() as c_int,
                core::ptr::null_mut(),
                ch,
                opts.comp_vector_value() as c_int,
            )
        };
        let Some(raw) = NonNull::new(raw) else {
            return Err(Error::last_os(Verb::CreateCq));
        };
        // SAFETY: the ops table of an open context is readable.
        let poll_cq = unsafe { (*ctx.as_ptr()).ops.poll_cq };
        let (Some(poll_cq), Ok(req_notify)) = (poll_cq, notify_fn(raw.as_ptr())) else {
            let _ = destroy_cq(raw.as_ptr());
            return Err(Error::Unsupported {
                verb: Verb::PollCq,
                why: Unsupported::NotInLibrary,
            });
        };
        #[allow(unused_mut)] // mutated only with the direct backend (std)
        let mut cq = Cq {
            raw,
            poll_cq,
            req_notify,
            own,
            #[cfg(feature = "std")]
            direct: None,
            _channel: keep,
            _ctx: ctx,
        };
        #[cfg(feature = "std")]
        if let Some(required) = direct {
            let channel = !ch.is_null();
            let d = cq
                .layout()
                .map_err(|_| crate::error::DirectError::RingsUnavailable(Verb::EfadvQueryCq).into())
                .and_then(|l| {
                    crate::direct::backend::DirectCq::new(raw.as_ptr(), l, false, false, channel)
                });
            match d {
                Ok(d) => cq.direct = Some(d),
                // Dropping `cq` destroys it.
                Err(e) if required => return Err(e),
                Err(_) => {} // `Auto`: the provider serves it
            }
        }
        Ok(cq)
    }
}

impl<C> Cq<C> {
    /// Turns the `n` entries (or negative errno) the `ibv_poll_cq` of
    /// [`poll`](CompletionQueue::poll) wrote, as a packed `ibv_wc` array at the start of
    /// `out`'s spare capacity, into completions: each moves to its own slot (the last
    /// first, so that none is overwritten before it has moved), has the fields the
    /// provider may have left unwritten cleared, and is then counted in `out`.
    #[inline]
    fn take<const N: usize>(
        out: &mut ArrayVec<Completion, N>,
        n: c_int,
        want: usize,
    ) -> Result<usize> {
        let n = entries(n, want)?;
        let len = out.len();
        // SAFETY: `len + n <= N`: the spare slots `len..len + n` are in the buffer.
        let slots = unsafe { out.as_mut_ptr().add(len) };
        let wcs = slots.cast::<ffi::ibv_wc>();
        for i in (0..n).rev() {
            // SAFETY: entry `i` of the packed array ends before slot `i + 1` begins
            // (48 * (i + 1) <= 64 * (i + 1)) and later entries have moved already, so
            // the copy (memmove) moves only entry `i`'s bytes, into slot `i`, whose
            // first 48 bytes are laid out as an `ibv_wc`.
            unsafe { core::ptr::copy(wcs.add(i).cast::<u8>(), slots.add(i).cast::<u8>(), WC_SIZE) };
            // SAFETY: slot `i` holds entry `i`, written by the provider.
            unsafe { settle(slots.add(i)) };
        }
        // SAFETY: slots `len..len + n` are now initialised completions.
        unsafe { out.set_len(len + n) };
        Ok(n)
    }
}

/// How many entries an `ibv_poll_cq` that was asked for `want` wrote, from what it
/// returned (a count, or a negative errno).
#[inline]
fn entries(n: c_int, want: usize) -> Result<usize> {
    if n < 0 {
        return Err(Error::verb(Verb::PollCq, -n));
    }
    // A provider never returns more than asked; if one did, the rest is dropped.
    Ok((n as usize).min(want))
}

/// Bytes of one `ibv_wc`: the prefix of a [`Completion`] that `ibv_poll_cq` writes.
const WC_SIZE: usize = core::mem::size_of::<ffi::ibv_wc>();

/// Makes the `ibv_wc` the provider wrote at the start of `c` a complete [`Completion`]:
/// the flags masked to those verbs defines, the receive-only fields (which the
/// provider leaves unwritten for send completions) set to 0. A receive's immediate is
/// left as it is: it is written, and read, only with `IBV_WC_WITH_IMM`; the sender GID
/// is never read (the mask leaves `SENDER_GID` clear).
///
/// # Safety
/// `c` must be valid for writes and its first 48 bytes an `ibv_wc` written by
/// `ibv_poll_cq` (wr_id, status, opcode, vendor_err, qp_num and wc_flags always; for
/// receives byte_len, src_qp and slid too, and imm_data with `IBV_WC_WITH_IMM`).
#[inline(always)]
pub(super) unsafe fn settle(c: *mut Completion) {
    use core::ptr::addr_of_mut;
    // SAFETY: per the contract, every field read here was written by the provider, and
    // every field written is in bounds; no reference to the partly written value is made.
    unsafe {
        let flags = addr_of_mut!((*c).flags);
        let bits = flags.read().bits() & VERBS_WC_FLAGS;
        flags.write(CompletionFlags::from_bits_retain(bits));
        if !addr_of_mut!((*c).opcode).read().is_recv() {
            addr_of_mut!((*c).byte_len).write(0);
            addr_of_mut!((*c).imm_be).write(MaybeUninit::new(0));
            addr_of_mut!((*c).src_qp).write(0);
            addr_of_mut!((*c).slid).write(0);
        }
    }
}

impl<C> Cq<C> {
    /// Polls up to `out`'s spare capacity of entries straight into `out`, as the
    /// provider writes them (`ibv_poll_cq` into an `ibv_wc` array: nothing is converted
    /// or copied); returns how many arrived. [`poll`](CompletionQueue::poll) gives the
    /// same entries as [`Completion`]s. A full `out` is
    /// [`InvalidInput::OutputFull`](crate::InvalidInput::OutputFull) (a loop polling
    /// into it would otherwise see 0 for ever).
    #[inline]
    pub fn poll_wc<const N: usize>(&self, out: &mut ArrayVec<WorkCompletion, N>) -> Result<usize> {
        let want = out.remaining_capacity().min(c_int::MAX as usize);
        if want == 0 {
            return Err(super::no_room(N));
        }
        #[cfg(feature = "std")]
        super::in_session::check(self.raw.as_ptr())?;
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            if !d.pending_after_progress() {
                return Ok(0);
            }
            return Ok(d.poll_each(want, |c| out.push(WorkCompletion::from_completion(&c))));
        }
        let len = out.len();
        // SAFETY: `len <= N`, so this is the start of the spare capacity;
        // `WorkCompletion` is a transparent `ibv_wc`.
        let spare = unsafe { out.as_mut_ptr().add(len) }.cast::<ffi::ibv_wc>();
        // SAFETY: valid CQ; the spare capacity holds `want` entries; the provider writes
        // `n` of them and returns n (or a negative errno).
        let n = unsafe { (self.poll_cq)(self.raw.as_ptr(), want as c_int, spare) };
        let n = entries(n, want)?;
        // SAFETY: any bytes are a valid `WorkCompletion` (a `MaybeUninit<ibv_wc>`); the
        // first `n` spare entries are the ones the provider wrote.
        unsafe { out.set_len(len + n) };
        Ok(n)
    }

    /// [`poll_wc`](Self::poll_wc) until at least `n` entries arrived or `timeout`
    /// passed, waiting as [`poll_until`](CompletionQueue::poll_until) does (spin, then
    /// sleep on the CQ's own channel or nap); returns how many it appended, or
    /// [`Error::Timeout`] with what arrived meanwhile in `out`.
    #[cfg(feature = "std")]
    pub fn poll_wc_until<const N: usize>(
        &self,
        out: &mut ArrayVec<WorkCompletion, N>,
        n: usize,
        timeout: core::time::Duration,
    ) -> Result<usize> {
        super::wait::poll_until_with(self, out, n, timeout, |out| self.poll_wc(out))
    }
}

impl<C> sealed::Sealed for Cq<C> {}

impl<C> CompletionQueue for Cq<C> {
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.as_ptr()
    }

    // The `ibv_poll_cq` call, and with it the empty case, is inlined into the caller
    // (as C's `ibv_poll_cq` is); moving the entries into place is `Cq::take`.
    #[inline]
    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            return d.poll(out, || super::in_session::check(self.raw.as_ptr()));
        }
        let want = out.remaining_capacity().min(c_int::MAX as usize);
        if want == 0 {
            return Err(super::no_room(N));
        }
        #[cfg(feature = "std")]
        super::in_session::check(self.raw.as_ptr())?;
        // SAFETY: `len <= N`, so this is the start of the spare capacity.
        let spare = unsafe { out.as_mut_ptr().add(out.len()) }.cast::<ffi::ibv_wc>();
        // SAFETY: valid CQ; the spare capacity (`want` slots of 64 bytes) has room for
        // `want` packed `ibv_wc`s (48 bytes each); the provider writes `n` of them and
        // returns n (or a negative errno).
        let n = unsafe { (self.poll_cq)(self.raw.as_ptr(), want as c_int, spare) };
        if n == 0 {
            return Ok(0);
        }
        Self::take(out, n, want)
    }

    fn request_notify(&self) -> Result<()> {
        // A direct CQ's consumer index is the direct state's (see `ExtCq`).
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            d.arm();
            return Ok(());
        }
        request_notify_with(self.req_notify, self.raw.as_ptr())
    }

    fn own_channel(&self) -> Option<&OwnChannel> {
        self.own.as_ref()
    }

    #[cfg(feature = "std")]
    fn direct_cq(&self) -> Option<&std::sync::Arc<crate::direct::backend::DirectCq>> {
        self.direct.as_ref()
    }
}

impl<C> Cq<C> {
    /// Destroys the CQ, reporting failure (EBUSY while a QP still uses it cannot happen:
    /// QPs hold their CQs).
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = destroy_cq(self.raw.as_ptr()) {
            return Err((self, e));
        }
        let mut me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; each remaining field is dropped in
        // place once, after the CQ is gone (own channel first, then the holders).
        unsafe {
            core::ptr::drop_in_place(&mut me.own);
            #[cfg(feature = "std")]
            core::ptr::drop_in_place(&mut me.direct);
            core::ptr::drop_in_place(&mut me._channel);
            core::ptr::drop_in_place(&mut me._ctx);
        }
        Ok(())
    }
}

impl<C> Drop for Cq<C> {
    fn drop(&mut self) {
        let _ = destroy_cq(self.raw.as_ptr());
    }
}

impl<C> core::fmt::Debug for Cq<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cq")
            .field("depth", &self.depth())
            .field("waitable", &self.own.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::{WcOpcode, WcStatus};
    use crate::ffi::ibv_wc_opcode::{IBV_WC_RECV, IBV_WC_SEND};

    /// What a provider writes: every field of a receive, and for a send completion only
    /// what verbs requires (the rest keeps whatever the memory held: here 0xee bytes).
    fn write_wc(at: *mut ffi::ibv_wc, wr_id: u64, opcode: u32, flags: u32, imm_be: u32) {
        // SAFETY: `at` is valid for one ibv_wc (the tests pass spare ArrayVec capacity).
        unsafe {
            at.cast::<u8>().write_bytes(0xee, WC_SIZE);
            (*at).wr_id = wr_id;
            (*at).status = 0;
            (*at).opcode = opcode;
            (*at).vendor_err = 0;
            (*at).qp_num = 7;
            (*at).wc_flags = flags;
            if opcode == IBV_WC_RECV {
                (*at).byte_len = 100 + wr_id as u32;
                (*at).src_qp = 9;
                (*at).slid = 3;
                (*at).imm_data_invalidated_rkey_union.imm_data = imm_be;
            }
        }
    }

    #[test]
    fn packed_entries_move_into_their_slots_with_stale_fields_cleared() {
        let mut out = ArrayVec::<Completion, 5>::new();
        let mut first = ArrayVec::<Completion, 1>::new();
        let wcs = first.as_mut_ptr().cast::<ffi::ibv_wc>();
        write_wc(wcs, 1, IBV_WC_RECV, 0, 0);
        Cq::<()>::take(&mut first, 1, 1).unwrap();
        out.push(first[0]);

        // Four packed entries at the start of the spare capacity (after one completion).
        // SAFETY: slot 1.. is spare capacity, room for 4 * 64 >= 4 * 48 bytes.
        let wcs = unsafe { out.as_mut_ptr().add(1) }.cast::<ffi::ibv_wc>();
        let with_imm = ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0;
        // SAFETY: entries 0..4 of the packed array lie inside the spare capacity.
        unsafe {
            write_wc(wcs, 2, IBV_WC_SEND, 0, 0);
            write_wc(wcs.add(1), 3, IBV_WC_RECV, with_imm, 0x1234u32.to_be());
            // Bit 16 is the crate's UNSOLICITED: a provider's bit there is dropped.
            write_wc(wcs.add(2), 4, IBV_WC_RECV, 1 << 16, 0);
            write_wc(wcs.add(3), 5, IBV_WC_SEND, 0, 0);
        }
        // More than asked for is never taken in.
        assert_eq!(Cq::<()>::take(&mut out, 5, 4), Ok(4));
        assert_eq!(out.len(), 5);

        let ids: ArrayVec<u64, 5> = out.iter().map(|c| c.wr_id()).collect();
        assert_eq!(ids.as_slice(), &[1, 2, 3, 4, 5]);
        for c in &out {
            assert_eq!((c.status(), c.qp_num()), (WcStatus::SUCCESS, 7));
            assert_eq!(c.sender_gid(), None);
            assert!(!c.is_unsolicited());
        }
        for send in [&out[1], &out[4]] {
            assert_eq!(send.opcode(), WcOpcode::SEND);
            assert_eq!((send.byte_len(), send.src_qp(), send.slid()), (0, 0, 0));
            assert_eq!(send.imm(), None);
        }
        assert_eq!((out[0].byte_len(), out[0].imm()), (101, None));
        assert_eq!((out[2].byte_len(), out[2].imm()), (103, Some(0x1234)));
        assert_eq!((out[2].src_qp(), out[2].slid()), (9, 3));
        assert_eq!(out[3].flags(), CompletionFlags::empty());
        assert_eq!(out[3].imm(), None);

        // A negative count is the provider's errno.
        let mut none = ArrayVec::<Completion, 2>::new();
        assert_eq!(
            Cq::<()>::take(&mut none, -libc::EIO, 2),
            Err(Error::verb(Verb::PollCq, libc::EIO))
        );
        assert!(none.is_empty());
    }
}
