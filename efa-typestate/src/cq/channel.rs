//! Completion channels: a pollable fd that becomes readable when an armed CQ attached to
//! it gets a completion. [`CompChannel`] is the shareable, user-visible one;
//! [`OwnChannel`] the private one of a [`waitable`](super::CqOptions::waitable) CQ.

use core::ptr::NonNull;
use core::time::Duration;

use super::CqId;
use crate::context::{timeout_ms, Context};
use crate::error::{Error, Result, Verb};
use crate::ffi;
use crate::parent::Parent;

fn create(ctx: &Context) -> Result<NonNull<ffi::ibv_comp_channel>> {
    // SAFETY: valid open context.
    let raw = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
    NonNull::new(raw).ok_or_else(|| Error::last_os(Verb::CreateCompChannel))
}

fn fd_of(ch: NonNull<ffi::ibv_comp_channel>) -> i32 {
    // SAFETY: valid channel; plain field.
    unsafe { (*ch.as_ptr()).fd }
}

/// Reads one notification (blocking unless the fd was made non-blocking) and
/// acknowledges it.
fn get_event(ch: NonNull<ffi::ibv_comp_channel>) -> Result<CqEvent> {
    let mut cq: *mut ffi::ibv_cq = core::ptr::null_mut();
    let mut cq_ctx: *mut core::ffi::c_void = core::ptr::null_mut();
    // SAFETY: valid channel and out-pointers.
    let rc = unsafe { ffi::ibv_get_cq_event(ch.as_ptr(), &mut cq, &mut cq_ctx) };
    if rc != 0 {
        return Err(Error::last_os(Verb::GetCqEvent));
    }
    // SAFETY: `cq` is the live CQ the event is for; one event is acknowledged once.
    unsafe { ffi::ibv_ack_cq_events(cq, 1) };
    // A direct CQ counts its events itself (its next arm is a new request).
    #[cfg(feature = "std")]
    crate::direct::backend::events::delivered(cq);
    Ok(CqEvent { cq: CqId::of(cq) })
}

/// Waits up to `timeout` (None = forever) for a notification; `Ok(None)` on timeout.
fn wait(ch: NonNull<ffi::ibv_comp_channel>, timeout: Option<Duration>) -> Result<Option<CqEvent>> {
    match ffi::wait_readable(fd_of(ch), timeout_ms(timeout)) {
        Ok(true) => get_event(ch).map(Some),
        Ok(false) => Ok(None),
        Err(e) => Err(Error::verb(Verb::GetCqEvent, e)),
    }
}

fn destroy(ch: NonNull<ffi::ibv_comp_channel>) -> i32 {
    // SAFETY: owned channel destroyed once; its CQs are gone.
    unsafe { ffi::ibv_destroy_comp_channel(ch.as_ptr()) }
}

/// A completion channel (`ibv_comp_channel`) several CQs may share; holds its context
/// through `C`.
pub struct CompChannel<C> {
    raw: NonNull<ffi::ibv_comp_channel>,
    _ctx: C,
}

// SAFETY: the channel is a kernel fd plus immutable fields; ibv_get_cq_event is
// thread-safe; the context holder follows its own Send/Sync.
unsafe impl<C: Send> Send for CompChannel<C> {}
// SAFETY: see above.
unsafe impl<C: Sync> Sync for CompChannel<C> {}

/// A notification received on a [`CompChannel`] (already acknowledged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    cq: CqId,
}

impl CqEvent {
    /// The CQ that fired.
    pub fn cq(&self) -> CqId {
        self.cq
    }
    /// True if `cq` fired.
    pub fn is_for<Q: super::CompletionQueue>(&self, cq: &Q) -> bool {
        self.cq == cq.id()
    }
}

impl Context {
    /// Creates a completion channel borrowing this context: [`CompChannel::new`].
    pub fn create_comp_channel(&self) -> Result<CompChannel<&Context>> {
        CompChannel::new(self)
    }
}

impl<C: Parent<Target = Context>> CompChannel<C> {
    /// Creates a completion channel on `ctx` (`&Context` or `Arc<Context>`).
    pub fn new(ctx: C) -> Result<Self> {
        Ok(CompChannel {
            raw: create(&ctx)?,
            _ctx: ctx,
        })
    }
}

impl<C> CompChannel<C> {
    pub(crate) fn raw(&self) -> NonNull<ffi::ibv_comp_channel> {
        self.raw
    }

    /// The channel's fd (for epoll/poll).
    pub fn fd(&self) -> i32 {
        fd_of(self.raw)
    }

    /// Waits up to `timeout` (None = forever) for a CQ notification; `Ok(None)` on timeout.
    /// Re-arm the CQ ([`CompletionQueue::request_notify`](super::CompletionQueue::request_notify))
    /// and poll it after each event.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<CqEvent>> {
        wait(self.raw, timeout)
    }

    /// Blocks (unless the fd was made non-blocking) until a notification arrives.
    pub fn get_event(&self) -> Result<CqEvent> {
        get_event(self.raw)
    }

    /// Destroys the channel, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        let rc = destroy(self.raw);
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyCompChannel, rc)));
        }
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the holder is moved out once.
        drop(unsafe { core::ptr::read(&me._ctx) });
        Ok(())
    }
}

impl<C> Drop for CompChannel<C> {
    fn drop(&mut self) {
        destroy(self.raw);
    }
}

impl<C> core::fmt::Debug for CompChannel<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

#[cfg(feature = "std")]
impl<C> std::os::fd::AsRawFd for CompChannel<C> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd()
    }
}

#[cfg(feature = "std")]
impl<C> std::os::fd::AsFd for CompChannel<C> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as the channel.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) }
    }
}

/// The private channel of a waitable CQ: only that CQ is attached to it, so every event
/// on it is that CQ's. Destroyed by the CQ, after the CQ itself.
pub struct OwnChannel {
    raw: NonNull<ffi::ibv_comp_channel>,
}

// SAFETY: as for CompChannel: a kernel fd plus immutable fields.
unsafe impl Send for OwnChannel {}
// SAFETY: see above.
unsafe impl Sync for OwnChannel {}

impl OwnChannel {
    pub(crate) fn new(ctx: &Context) -> Result<OwnChannel> {
        Ok(OwnChannel { raw: create(ctx)? })
    }
    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.raw.as_ptr()
    }
    /// Waits up to `timeout` for the CQ's next notification (acknowledged).
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    pub(crate) fn wait(&self, timeout: Duration) -> Result<bool> {
        wait(self.raw, Some(timeout)).map(|e| e.is_some())
    }
    /// The channel's fd.
    pub fn fd(&self) -> i32 {
        fd_of(self.raw)
    }
}

impl Drop for OwnChannel {
    fn drop(&mut self) {
        destroy(self.raw);
    }
}

impl core::fmt::Debug for OwnChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OwnChannel")
            .field("fd", &self.fd())
            .finish()
    }
}
