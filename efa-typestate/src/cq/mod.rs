//! Completion queues: the [`Completion`] value (and a classic CQ's raw
//! [`WorkCompletion`]), the classic [`Cq`] and the extended
//! [`ExtCq`], completion channels, waiting with a timeout, and the EFA CQ ring layout.

use core::ffi::c_int;
use core::ptr::NonNull;
#[cfg(feature = "std")]
use core::time::Duration;

use arrayvec::ArrayVec;

use crate::context::Context;
use crate::error::{Error, InvalidInput, Result, Unsupported, Verb};
use crate::ffi;

mod channel;
mod classic;
mod completion;
mod extended;
#[cfg(feature = "std")]
pub(crate) mod in_session;
#[cfg(feature = "std")]
mod wait;
mod work_completion;

pub use channel::{CompChannel, CqEvent};
pub use classic::Cq;
pub use completion::{Completion, CompletionFlags, WcOpcode, WcStatus};
pub use extended::ExtCq;
pub use work_completion::WorkCompletion;

#[doc(hidden)]
pub use channel::OwnChannel;

/// Options for creating a CQ.
#[derive(Clone, Copy, Debug)]
pub struct CqOptions {
    depth: u32,
    comp_vector: u32,
    sender_gid: bool,
    unsolicited: bool,
    waitable: bool,
    backend: crate::qp::Backend,
}

impl CqOptions {
    /// A CQ with room for at least `depth` completions.
    pub fn new(depth: u32) -> Self {
        CqOptions {
            depth,
            comp_vector: 0,
            sender_gid: false,
            unsolicited: false,
            waitable: false,
            backend: crate::qp::Backend::Auto,
        }
    }
    /// Completion vector (interrupt) to use.
    pub fn comp_vector(mut self, v: u32) -> Self {
        self.comp_vector = v;
        self
    }
    /// Report the sender GID of receives from senders without an AH here (extended CQs,
    /// needs [`DeviceCaps::CQ_WITH_SGID`](crate::DeviceCaps::CQ_WITH_SGID)).
    pub fn sender_gid(mut self) -> Self {
        self.sender_gid = true;
        self
    }
    /// Report whether a write-with-imm was unsolicited (extended CQs, needs
    /// [`DeviceCaps::UNSOLICITED_WRITE_RECV`](crate::DeviceCaps::UNSOLICITED_WRITE_RECV)).
    pub fn unsolicited_flag(mut self) -> Self {
        self.unsolicited = true;
        self
    }
    /// Give the CQ a completion channel of its own, so that
    /// [`poll_until`](CompletionQueue::poll_until) sleeps in the kernel after a short
    /// spin instead of polling (needs CQ notifications on the device). Excludes an
    /// explicit channel ([`InvalidInput::ChannelConflict`]).
    pub fn waitable(mut self) -> Self {
        self.waitable = true;
        self
    }
    /// Which data path polls the CQ ([`Backend`](crate::Backend); default `Auto`, which is
    /// the provider for now). [`Backend::Direct`](crate::Backend::Direct) is offered on
    /// CQs without a channel, and such a CQ only serves direct QPs.
    pub fn backend(mut self, backend: crate::qp::Backend) -> Self {
        self.backend = backend;
        self
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What QPs need from a CQ, and polling; implemented by [`Cq`] and [`ExtCq`].
pub trait CompletionQueue: sealed::Sealed {
    /// The underlying `ibv_cq`.
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq;

    /// Appends up to `out.remaining_capacity()` completions to `out`; returns how many.
    /// Never allocates, never blocks. A full `out` is [`InvalidInput::OutputFull`]: a
    /// loop polling into it would otherwise see 0 for ever.
    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize>;

    /// Polls one completion.
    fn poll_one(&self) -> Result<Option<Completion>> {
        let mut one = ArrayVec::<Completion, 1>::new();
        self.poll(&mut one)?;
        Ok(one.pop())
    }

    /// Actual depth granted by the device (≥ the requested depth).
    fn depth(&self) -> u32 {
        // SAFETY: valid CQ; `cqe` is a plain field set at creation.
        unsafe { (*self.as_cq_ptr()).cqe as u32 }
    }

    /// Arms the CQ: the next completion wakes its channel (solicited-only is not offered:
    /// EFA rejects it).
    fn request_notify(&self) -> Result<()>;

    /// An id to match [`CqEvent`]s against.
    fn id(&self) -> CqId {
        CqId(self.as_cq_ptr() as usize)
    }

    /// True if the CQ was made [`waitable`](CqOptions::waitable).
    fn is_waitable(&self) -> bool {
        self.own_channel().is_some()
    }

    /// The channel of a [`waitable`](CqOptions::waitable) CQ.
    #[doc(hidden)]
    fn own_channel(&self) -> Option<&OwnChannel>;

    /// The direct backend's state of a direct CQ (internal).
    #[doc(hidden)]
    #[cfg(feature = "std")]
    fn direct_cq(&self) -> Option<&std::sync::Arc<crate::direct::backend::DirectCq>> {
        None
    }

    /// The data path polling this CQ ([`Backend::Direct`](crate::Backend::Direct) or
    /// [`Backend::Provider`](crate::Backend::Provider); `Auto` is resolved at creation).
    fn backend(&self) -> crate::qp::Backend {
        #[cfg(feature = "std")]
        if self.direct_cq().is_some() {
            return crate::qp::Backend::Direct;
        }
        crate::qp::Backend::Provider
    }

    /// Polls into `out` until at least `n` completions arrived (counting those this call
    /// appended), and returns how many it appended. Spins for a few microseconds, then
    /// sleeps on the CQ's own channel if it is [`waitable`](CqOptions::waitable) (arming
    /// the CQ and polling once more before each sleep, so no completion is missed), or
    /// polls with short sleeps if not. After `timeout`, returns [`Error::Timeout`];
    /// what arrived meanwhile is in `out`. `n` larger than the room in `out` is
    /// [`InvalidInput::WaitBeyondCapacity`].
    #[cfg(feature = "std")]
    fn poll_until<const N: usize>(
        &self,
        out: &mut ArrayVec<Completion, N>,
        n: usize,
        timeout: Duration,
    ) -> Result<usize> {
        wait::poll_until(self, out, n, timeout)
    }

    /// Waits up to `timeout` for one completion ([`poll_until`](Self::poll_until) of 1).
    #[cfg(feature = "std")]
    fn wait(&self, timeout: Duration) -> Result<Completion> {
        let mut one = ArrayVec::<Completion, 1>::new();
        self.poll_until(&mut one, 1, timeout)?;
        one.pop().ok_or(Error::Timeout)
    }

    /// EFA ring layout of this CQ (`efadv_query_cq`, for direct data-path users);
    /// [`Error::Unsupported`] when the library or provider does not offer it.
    fn layout(&self) -> Result<CqLayout> {
        let mut a = ffi::efadv_cq_attr::default();
        // SAFETY: valid CQ; `a` writable with `inlen` = its size.
        let rc = unsafe {
            ffi::efadv_query_cq(self.as_cq_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
        }
        .map_err(|e| ffi::not_provided(Verb::EfadvQueryCq, e))?;
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryCq, rc));
        }
        Ok(CqLayout {
            buffer: a.buffer as usize,
            entry_size: a.entry_size,
            num_entries: a.num_entries,
            doorbell: a.doorbell as usize,
        })
    }
}

/// The error of a poll into a full output buffer of capacity `n`.
#[cold]
pub(crate) fn no_room(n: usize) -> Error {
    InvalidInput::OutputFull {
        capacity: u32::try_from(n).unwrap_or(u32::MAX),
    }
    .into()
}

/// Identifies a CQ in a [`CqEvent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId(usize);

impl CqId {
    pub(crate) fn of(cq: *mut ffi::ibv_cq) -> CqId {
        CqId(cq as usize)
    }
}

/// EFA CQ ring layout (`efadv_query_cq`). Addresses are given as integers: only code
/// driving the ring directly has any use for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqLayout {
    /// Ring start.
    pub buffer: usize,
    /// Bytes per entry.
    pub entry_size: u32,
    /// Entries.
    pub num_entries: u32,
    /// Doorbell address (0 if not reported).
    pub doorbell: usize,
}

pub(crate) type ReqNotifyFn = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int) -> c_int;

pub(crate) fn notify_fn(cq: *mut ffi::ibv_cq) -> Result<ReqNotifyFn> {
    // SAFETY: valid CQ whose context is open; the ops table is read, not written.
    let f = unsafe { (*(*cq).context).ops.req_notify_cq };
    f.ok_or(Error::Unsupported {
        verb: Verb::ReqNotifyCq,
        why: Unsupported::NotInLibrary,
    })
}

pub(crate) fn request_notify_with(f: ReqNotifyFn, cq: *mut ffi::ibv_cq) -> Result<()> {
    // SAFETY: valid CQ and its provider's req_notify_cq; solicited_only = 0.
    let rc = unsafe { f(cq, 0) };
    if rc != 0 {
        return Err(Error::verb(Verb::ReqNotifyCq, rc));
    }
    Ok(())
}

pub(crate) fn destroy_cq(cq: *mut ffi::ibv_cq) -> Result<()> {
    // SAFETY: owned CQ destroyed once; events on it were acknowledged when received.
    let rc = unsafe { ffi::ibv_destroy_cq(cq) };
    if rc != 0 {
        return Err(Error::verb(Verb::DestroyCq, rc));
    }
    Ok(())
}

/// Whether a new CQ of `opts` on `ctx` tries the direct backend, and whether it must have
/// it: `None` for the provider; `Some(true)` for [`Backend::Direct`](crate::Backend::Direct),
/// after the checks that need no CQ (the environment's setting, a device without sub-CQs,
/// the `std` feature, barriers proven on this architecture); `Some(false)` for
/// [`Backend::Auto`](crate::Backend::Auto) when the environment turned the direct path on
/// ([`policy`](crate::direct::policy)) and those checks hold (a CQ whose ring cannot be had
/// then stays with the provider). `Auto` is the provider otherwise.
pub(crate) fn wants_direct(ctx: &Context, opts: &CqOptions) -> Result<Option<bool>> {
    use crate::direct::policy::{self, DirectSetting};
    use crate::qp::Backend;
    let required = match opts.backend_value() {
        Backend::Provider => return Ok(None),
        Backend::Direct => true,
        Backend::Auto if policy::setting()? == DirectSetting::On => false,
        Backend::Auto => return Ok(None),
    };
    match direct_allowed(ctx) {
        Ok(()) => Ok(Some(required)),
        Err(e) if required => Err(e),
        Err(_) => Ok(None),
    }
}

/// Whether the direct path may serve objects of `ctx` at all, for CQs and QPs alike: not
/// turned off by the environment, the `std` feature, barriers proven on this
/// architecture, a device without sub-CQs.
pub(crate) fn direct_allowed(ctx: &Context) -> Result<()> {
    use crate::direct::policy::{self, DirectSetting};
    if policy::setting()? == DirectSetting::Off {
        return Err(crate::error::DirectError::DisabledByEnvironment.into());
    }
    if !cfg!(feature = "std") {
        return Err(crate::error::DirectError::NeedsStd.into());
    }
    #[cfg(feature = "std")]
    crate::direct::backend::check_barriers()?;
    let part = ctx.query_device()?.vendor_part_id();
    crate::direct::policy::check_device(part)?;
    Ok(())
}

/// The channel a new CQ is attached to: none, one of its own (waitable), or the
/// caller's (checked to belong to `ctx`).
pub(crate) fn choose_channel(
    ctx: &Context,
    explicit: Option<NonNull<ffi::ibv_comp_channel>>,
    opts: &CqOptions,
) -> Result<(*mut ffi::ibv_comp_channel, Option<OwnChannel>)> {
    match (explicit, opts.waitable) {
        (Some(_), true) => Err(InvalidInput::ChannelConflict.into()),
        (Some(ch), false) => {
            // SAFETY: a live channel (kept alive by the caller's sibling); plain field.
            if unsafe { (*ch.as_ptr()).context } != ctx.as_ptr() {
                return Err(InvalidInput::ForeignObject.into());
            }
            Ok((ch.as_ptr(), None))
        }
        (None, true) => {
            let own = OwnChannel::new(ctx)?;
            Ok((own.as_ptr(), Some(own)))
        }
        (None, false) => Ok((core::ptr::null_mut(), None)),
    }
}

impl CqOptions {
    pub(crate) fn depth_value(&self) -> u32 {
        self.depth
    }
    pub(crate) fn comp_vector_value(&self) -> u32 {
        self.comp_vector
    }
    pub(crate) fn wants_sender_gid(&self) -> bool {
        self.sender_gid
    }
    pub(crate) fn wants_unsolicited(&self) -> bool {
        self.unsolicited
    }
    pub(crate) fn backend_value(&self) -> crate::qp::Backend {
        self.backend
    }
}
