//! [`Cq`]: the classic completion queue (`ibv_create_cq`), polled with `ibv_poll_cq`.

use core::ffi::c_int;
use core::mem::MaybeUninit;
use core::ops::Deref;
use core::ptr::NonNull;

use arrayvec::ArrayVec;

use super::completion::VERBS_WC_FLAGS;
use super::{choose_channel, destroy_cq, notify_fn, request_notify_with, sealed};
use super::{CompChannel, Completion, CompletionFlags, CompletionQueue, CqOptions, OwnChannel};
use super::{ReqNotifyFn, WcOpcode, WcStatus};
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
        Ok(Cq {
            raw,
            poll_cq,
            req_notify,
            own,
            _channel: keep,
            _ctx: ctx,
        })
    }
}

/// Entries fetched per `ibv_poll_cq` call.
const CHUNK: usize = 16;

impl<C> Cq<C> {
    /// Converts the `n` entries the first `ibv_poll_cq` of [`poll`](CompletionQueue::poll)
    /// returned (asked for `want`, or a negative errno) into `out`, polling on while the
    /// CQ fills every chunk and `out` has room.
    fn take<const N: usize>(
        &self,
        out: &mut ArrayVec<Completion, N>,
        wcs: &mut [MaybeUninit<ffi::ibv_wc>; CHUNK],
        mut n: c_int,
        mut want: usize,
    ) -> Result<usize> {
        let mut total = 0;
        loop {
            if n < 0 {
                return Err(Error::verb(Verb::PollCq, -n));
            }
            for wc in &wcs[..n as usize] {
                // SAFETY: the provider initialised the first `n` entries' fields it sets;
                // we read them through a raw pointer without assuming the rest.
                let c = unsafe { completion_from_wc(wc.as_ptr()) };
                // `n <= want <= remaining capacity`, so this cannot fail.
                let _ = out.try_push(c);
            }
            total += n as usize;
            if (n as usize) < want {
                return Ok(total);
            }
            want = out.remaining_capacity().min(CHUNK);
            if want == 0 {
                return Ok(total);
            }
            // SAFETY: as in `poll`.
            n = unsafe {
                (self.poll_cq)(self.raw.as_ptr(), want as c_int, wcs.as_mut_ptr().cast())
            };
        }
    }
}

impl<C> sealed::Sealed for Cq<C> {}

impl<C> CompletionQueue for Cq<C> {
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.as_ptr()
    }

    // The first `ibv_poll_cq` call, and with it the empty case, is inlined into the
    // caller (as C's `ibv_poll_cq` is); converting entries is `Cq::take`.
    #[inline]
    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        let want = out.remaining_capacity().min(CHUNK);
        if want == 0 {
            return Ok(0);
        }
        let mut wcs = [const { MaybeUninit::<ffi::ibv_wc>::uninit() }; CHUNK];
        // SAFETY: valid CQ; `wcs` has room for `want` entries; the provider writes `n`
        // of them and returns n (or a negative errno).
        let n =
            unsafe { (self.poll_cq)(self.raw.as_ptr(), want as c_int, wcs.as_mut_ptr().cast()) };
        if n == 0 {
            return Ok(0);
        }
        self.take(out, &mut wcs, n, want)
    }

    fn request_notify(&self) -> Result<()> {
        request_notify_with(self.req_notify, self.raw.as_ptr())
    }

    fn own_channel(&self) -> Option<&OwnChannel> {
        self.own.as_ref()
    }
}

/// Reads a `struct ibv_wc` the provider filled.
///
/// # Safety
/// `wc` must point at an `ibv_wc` written by `ibv_poll_cq`. Fields the provider leaves
/// untouched for send completions (byte_len, imm, src_qp, slid) may be stale: they are
/// only read for receive completions.
#[inline]
unsafe fn completion_from_wc(wc: *const ffi::ibv_wc) -> Completion {
    // SAFETY: caller guarantees the struct was written by the provider (status, opcode,
    // vendor_err, qp_num, wc_flags, wr_id always).
    unsafe {
        let opcode = WcOpcode((*wc).opcode);
        let mut c = Completion {
            wr_id: (*wc).wr_id,
            status: WcStatus((*wc).status),
            opcode,
            vendor_err: (*wc).vendor_err,
            qp_num: (*wc).qp_num,
            flags: CompletionFlags::from_bits_retain((*wc).wc_flags & VERBS_WC_FLAGS),
            ..Completion::EMPTY
        };
        if opcode.is_recv() {
            c.byte_len = (*wc).byte_len;
            c.src_qp = (*wc).src_qp;
            c.slid = (*wc).slid;
            if c.flags.contains(CompletionFlags::WITH_IMM) {
                c.imm = u32::from_be((*wc).imm_data_invalidated_rkey_union.imm_data);
            }
        }
        c
    }
}

impl<C> Cq<C> {
    /// Destroys the CQ, reporting failure (EBUSY while a QP still uses it cannot happen:
    /// QPs hold their CQs).
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = destroy_cq(self.raw.as_ptr()) {
            return Err((self, e));
        }
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; each remaining field is moved out
        // once and dropped after the CQ is gone (own channel first, then the holders).
        unsafe {
            drop(core::ptr::read(&me.own));
            drop(core::ptr::read(&me._channel));
            drop(core::ptr::read(&me._ctx));
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
