//! [`ExtCq`]: the extended completion queue (`ibv_create_cq_ex` / `efadv_create_cq`).

use core::ffi::c_int;
use core::mem::MaybeUninit;
use core::ops::Deref;
use core::ptr::NonNull;

use arrayvec::ArrayVec;

use super::completion::VERBS_WC_FLAGS;
use super::{choose_channel, destroy_cq, notify_fn, request_notify_with, sealed, wants_direct};
use super::{CompChannel, Completion, CompletionFlags, CompletionQueue, CqOptions, OwnChannel};
use super::{ReqNotifyFn, WcOpcode, WcStatus};
use crate::ah::AH_UNKNOWN;
use crate::context::{Context, DeviceCaps};
use crate::endpoint::Gid;
use crate::error::{Error, Result, Unsupported, Verb};
use crate::ffi;
use crate::parent::{Keep, Parent, Sibling};

/// Function pointers of an extended CQ, checked once at creation.
#[derive(Clone, Copy)]
struct CqExOps {
    start_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex, *mut ffi::ibv_poll_cq_attr) -> c_int,
    next_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> c_int,
    end_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex),
    read_opcode: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_vendor_err: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_byte_len: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_imm_data: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_qp_num: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_src_qp: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_wc_flags: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    read_slid: unsafe extern "C" fn(*mut ffi::ibv_cq_ex) -> u32,
    efa: *mut ffi::efadv_cq,
    read_sgid: Option<unsafe extern "C" fn(*mut ffi::efadv_cq, *mut ffi::ibv_gid) -> c_int>,
    is_unsolicited: Option<unsafe extern "C" fn(*mut ffi::efadv_cq) -> bool>,
    /// Either of the two above is set (one test per completion instead of two).
    efadv_fields: bool,
}

/// An extended CQ (`ibv_cq_ex`), polled with `start_poll`/`next_poll`/`end_poll` through
/// function pointers checked once at creation. Can report sender GIDs and the
/// unsolicited flag (efadv). Holds its context through `C` (and, if it has one, its
/// shared completion channel the same way).
pub struct ExtCq<C> {
    raw: NonNull<ffi::ibv_cq_ex>,
    ops: CqExOps,
    req_notify: ReqNotifyFn,
    own: Option<OwnChannel>,
    /// The direct backend's state (a CQ created [`Backend::Direct`](crate::Backend)).
    #[cfg(feature = "std")]
    direct: Option<std::sync::Arc<crate::direct::backend::DirectCq>>,
    _channel: Option<Keep>,
    _ctx: C,
}

// SAFETY: the EFA provider locks the CQ from start_poll to end_poll, and the plain fields
// (`status`, `wr_id`) are only read inside that window, so concurrent pollers are
// serialised; the holders follow their own Send/Sync.
unsafe impl<C: Send> Send for ExtCq<C> {}
// SAFETY: see above.
unsafe impl<C: Sync> Sync for ExtCq<C> {}

/// Standard wc_flags every ExtCq requests: BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID.
const EXT_WC_FLAGS: u64 = {
    use ffi::ibv_create_cq_wc_flags as F;
    (F::IBV_WC_EX_WITH_BYTE_LEN.0
        | F::IBV_WC_EX_WITH_IMM.0
        | F::IBV_WC_EX_WITH_QP_NUM.0
        | F::IBV_WC_EX_WITH_SRC_QP.0
        | F::IBV_WC_EX_WITH_SLID.0) as u64
};

impl Context {
    /// Creates an extended CQ borrowing this context: [`ExtCq::new`].
    pub fn create_ext_cq(&self, opts: CqOptions) -> Result<ExtCq<&Context>> {
        ExtCq::new(self, opts)
    }
    /// Creates an extended CQ that notifies `channel`: [`ExtCq::with_channel`].
    pub fn create_ext_cq_with_channel<'a, X>(
        &'a self,
        channel: &'a CompChannel<X>,
        opts: CqOptions,
    ) -> Result<ExtCq<&'a Context>> {
        ExtCq::with_channel(self, channel, opts)
    }
}

impl<C: Parent<Target = Context>> ExtCq<C> {
    /// Creates an extended CQ on `ctx` (`&Context` or `Arc<Context>`):
    /// `ibv_create_cq_ex`, or `efadv_create_cq` when sender GIDs or unsolicited flags are
    /// requested.
    pub fn new(ctx: C, opts: CqOptions) -> Result<Self> {
        Self::create(ctx, None, opts)
    }
    /// Creates an extended CQ whose notifications go to `channel` (a borrow beside a
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
        let caps = ctx.caps();
        for (wanted, cap) in [
            (opts.wants_sender_gid(), DeviceCaps::CQ_WITH_SGID),
            (opts.wants_unsolicited(), DeviceCaps::UNSOLICITED_WRITE_RECV),
        ] {
            if wanted && !caps.contains(cap) {
                return Err(Error::Unsupported {
                    verb: Verb::EfadvCreateCq,
                    why: Unsupported::MissingCapability(cap),
                });
            }
        }
        let direct = wants_direct(&ctx, &opts)?;
        #[cfg(not(feature = "std"))]
        let _ = direct;
        crate::qp::check_cq_depth(&ctx, opts.depth_value())?;
        let (ch, own) = choose_channel(&ctx, ch_raw, &opts)?;
        // SAFETY: all-zero is a valid ibv_cq_init_attr_ex (integers and null pointers).
        let mut attr: ffi::ibv_cq_init_attr_ex = unsafe { core::mem::zeroed() };
        attr.cqe = opts.depth_value();
        attr.channel = ch;
        attr.comp_vector = opts.comp_vector_value();
        attr.wc_flags = EXT_WC_FLAGS;
        let efa_flags = if opts.wants_sender_gid() {
            ffi::EFADV_WC_EX_WITH_SGID
        } else {
            0
        } | if opts.wants_unsolicited() {
            ffi::EFADV_WC_EX_WITH_IS_UNSOLICITED
        } else {
            0
        };
        let (raw, verb) = if efa_flags != 0 {
            let mut efa = ffi::efadv_cq_init_attr {
                wc_flags: efa_flags,
                ..Default::default()
            };
            // SAFETY: valid context and attribute structs; `inlen` is the struct size.
            let raw = unsafe {
                ffi::efadv_create_cq(
                    ctx.as_ptr(),
                    &mut attr,
                    &mut efa,
                    core::mem::size_of_val(&efa) as u32,
                )
            };
            (raw, Verb::EfadvCreateCq)
        } else {
            // SAFETY: valid context and attribute struct.
            (
                unsafe { ffi::ibv_create_cq_ex(ctx.as_ptr(), &mut attr) },
                Verb::CreateCq,
            )
        };
        let Some(raw) = NonNull::new(raw) else {
            return Err(Error::last_os(verb));
        };
        let cq = raw.as_ptr();
        let base = cq.cast::<ffi::ibv_cq>();
        // SAFETY: a freshly created ibv_cq_ex; function pointers are read once.
        let ops = unsafe { Self::load_ops(cq, &opts) };
        match (ops, notify_fn(base)) {
            (Some(ops), Ok(req_notify)) => {
                let cq = ExtCq {
                    raw,
                    ops,
                    req_notify,
                    own,
                    #[cfg(feature = "std")]
                    direct: None,
                    _channel: keep,
                    _ctx: ctx,
                };
                #[cfg(feature = "std")]
                if let Some(required) = direct {
                    return cq.into_direct(&opts, !ch.is_null(), required);
                }
                Ok(cq)
            }
            _ => {
                let _ = destroy_cq(base);
                Err(Error::Unsupported {
                    verb,
                    why: Unsupported::NotInLibrary,
                })
            }
        }
    }

    /// # Safety
    /// `cq` must be a live `ibv_cq_ex`.
    unsafe fn load_ops(cq: *mut ffi::ibv_cq_ex, opts: &CqOptions) -> Option<CqExOps> {
        // SAFETY: caller guarantees `cq` is live; fields are read, not written.
        let c = unsafe { &*cq };
        let (sender_gid, unsolicited) = (opts.wants_sender_gid(), opts.wants_unsolicited());
        let (read_sgid, is_unsolicited, efa) = if sender_gid || unsolicited {
            // SAFETY: the CQ came from efadv_create_cq; this returns its embedded efadv_cq.
            let efa = unsafe { ffi::efadv_cq_from_ibv_cq_ex(cq) };
            if efa.is_null() {
                return None;
            }
            // SAFETY: non-null efadv_cq owned by the CQ.
            let e = unsafe { &*efa };
            let sg = if sender_gid {
                Some(e.wc_read_sgid?)
            } else {
                None
            };
            let un = if unsolicited {
                Some(e.wc_is_unsolicited?)
            } else {
                None
            };
            (sg, un, efa)
        } else {
            (None, None, core::ptr::null_mut())
        };
        Some(CqExOps {
            start_poll: c.start_poll?,
            next_poll: c.next_poll?,
            end_poll: c.end_poll?,
            read_opcode: c.read_opcode?,
            read_vendor_err: c.read_vendor_err?,
            read_byte_len: c.read_byte_len?,
            read_imm_data: c.read_imm_data?,
            read_qp_num: c.read_qp_num?,
            read_src_qp: c.read_src_qp?,
            read_wc_flags: c.read_wc_flags?,
            read_slid: c.read_slid?,
            efa,
            efadv_fields: read_sgid.is_some() || is_unsolicited.is_some(),
            read_sgid,
            is_unsolicited,
        })
    }
}

#[cfg(feature = "std")]
impl<C> ExtCq<C> {
    /// Gives a new CQ its direct state (`with_channel`: it has a completion channel). When
    /// its ring cannot be had the CQ is destroyed if the direct backend was `required`,
    /// else kept on the provider (`Auto`).
    fn into_direct(mut self, opts: &CqOptions, with_channel: bool, required: bool) -> Result<Self> {
        let raw = self.as_cq_ptr();
        let d = self
            .layout()
            .map_err(|_| crate::error::DirectError::RingsUnavailable(Verb::EfadvQueryCq).into())
            .and_then(|l| {
                crate::direct::backend::DirectCq::new(
                    raw,
                    l,
                    opts.wants_sender_gid(),
                    opts.wants_unsolicited(),
                    with_channel,
                )
            });
        match d {
            Ok(d) => self.direct = Some(d),
            Err(e) if required => return Err(e),
            Err(_) => {}
        }
        Ok(self)
    }
}

impl<C> ExtCq<C> {
    /// Writes the current entry (between a successful start/next_poll and the next
    /// call) into the slot `c`, field by field as each call returns (as C fills its own
    /// struct), so that nothing is kept across the provider calls and nothing is
    /// written twice: every field a [`Completion`] needs initialised is written once
    /// (the immediate and sender GID only when their flag says they are there).
    ///
    /// # Safety
    /// Must be called only while the CQ is positioned on a valid entry; `c` must be
    /// valid for writes of a `Completion`.
    #[inline(always)]
    unsafe fn read_current(&self, c: *mut Completion) {
        use core::ptr::addr_of_mut;
        let cq = self.raw.as_ptr();
        let o = &self.ops;
        // SAFETY: caller guarantees a current entry and a writable slot; all pointers were
        // checked at creation and the plain fields are valid while start_poll holds the
        // CQ. No reference to the partly written slot is made.
        unsafe {
            addr_of_mut!((*c).wr_id).write((*cq).wr_id);
            let status = WcStatus((*cq).status);
            addr_of_mut!((*c).status).write(status);
            let opcode = WcOpcode((o.read_opcode)(cq));
            addr_of_mut!((*c).opcode).write(opcode);
            // EFA reports vendor status 0 with every success: skip the call then.
            let vendor_err = if status != WcStatus::SUCCESS {
                (o.read_vendor_err)(cq)
            } else {
                0
            };
            addr_of_mut!((*c).vendor_err).write(vendor_err);
            addr_of_mut!((*c).qp_num).write((o.read_qp_num)(cq));
            // Send-side completions carry nothing more on EFA (flags 0): read only for receives.
            if !opcode.is_recv() {
                addr_of_mut!((*c).byte_len).write(0);
                addr_of_mut!((*c).src_qp).write(0);
                addr_of_mut!((*c).slid).write(0);
                addr_of_mut!((*c).flags).write(CompletionFlags::empty());
                return;
            }
            let mut flags =
                CompletionFlags::from_bits_retain((o.read_wc_flags)(cq) & VERBS_WC_FLAGS);
            addr_of_mut!((*c).byte_len).write((o.read_byte_len)(cq));
            addr_of_mut!((*c).src_qp).write((o.read_src_qp)(cq));
            let slid = (o.read_slid)(cq) as u16;
            addr_of_mut!((*c).slid).write(slid);
            if flags.contains(CompletionFlags::WITH_IMM) {
                addr_of_mut!((*c).imm_be).write(MaybeUninit::new((o.read_imm_data)(cq)));
            }
            if o.efadv_fields {
                if let Some(f) = o.is_unsolicited {
                    if opcode == WcOpcode::RECV_RDMA_WITH_IMM && f(o.efa) {
                        flags |= CompletionFlags::UNSOLICITED;
                    }
                }
                if let Some(f) = o.read_sgid {
                    if slid == AH_UNKNOWN {
                        let mut gid = ffi::ibv_gid { raw: [0; 16] };
                        if f(o.efa, &mut gid) == 0 {
                            addr_of_mut!((*c).sgid).write(MaybeUninit::new(Gid(gid.raw)));
                            flags |= CompletionFlags::SENDER_GID;
                        }
                    }
                }
            }
            addr_of_mut!((*c).flags).write(flags);
        }
    }

    /// Destroys the CQ, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = destroy_cq(self.raw.as_ptr().cast()) {
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

impl<C> sealed::Sealed for ExtCq<C> {}

impl<C> CompletionQueue for ExtCq<C> {
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.as_ptr().cast()
    }

    // The empty case (start_poll says ENOENT) is inlined into the caller, as C's
    // `ibv_start_poll` is; reading entries is `ExtCq::read_session`.
    #[inline]
    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            return d.poll(out, || super::in_session::check(self.as_cq_ptr()));
        }
        if out.is_full() {
            return Err(super::no_room(N));
        }
        #[cfg(feature = "std")]
        super::in_session::check(self.as_cq_ptr())?;
        let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
        // SAFETY: valid CQ and attr with comp_mask 0.
        let rc = unsafe { (self.ops.start_poll)(self.raw.as_ptr(), &mut attr) };
        if rc == libc::ENOENT {
            return Ok(0); // empty: the CQ is not locked
        }
        self.read_session(out, rc)
    }

    fn request_notify(&self) -> Result<()> {
        // A direct CQ's consumer index is the direct state's: the provider's arming would
        // tell the device its own (stale) one.
        #[cfg(feature = "std")]
        if let Some(d) = &self.direct {
            d.arm();
            return Ok(());
        }
        request_notify_with(self.req_notify, self.as_cq_ptr())
    }

    fn own_channel(&self) -> Option<&OwnChannel> {
        self.own.as_ref()
    }

    #[cfg(feature = "std")]
    fn direct_cq(&self) -> Option<&std::sync::Arc<crate::direct::backend::DirectCq>> {
        self.direct.as_ref()
    }
}

impl<C> ExtCq<C> {
    /// Reads the entries of a poll session `start_poll` opened with `rc` (0, or an
    /// error to report), while `out` has room, and closes it.
    fn read_session<const N: usize>(
        &self,
        out: &mut ArrayVec<Completion, N>,
        rc: c_int,
    ) -> Result<usize> {
        if rc != 0 {
            return Err(Error::verb(Verb::PollCq, rc));
        }
        let cq = self.raw.as_ptr();
        let mut n = 0;
        loop {
            // Room was checked before this entry was fetched (`len < N`); the entry is
            // read into the next spare slot in place, then counted.
            let len = out.len();
            // SAFETY: `len < N`: the slot is inside the buffer.
            let slot = unsafe { out.as_mut_ptr().add(len) };
            // SAFETY: positioned on a valid entry (start/next_poll returned 0); the slot
            // is spare capacity, valid for writes.
            unsafe { self.read_current(slot) };
            // SAFETY: `read_current` initialised the slot.
            unsafe { out.set_len(len + 1) };
            n += 1;
            if out.is_full() {
                break;
            }
            // SAFETY: inside a poll session.
            let rc = unsafe { (self.ops.next_poll)(cq) };
            if rc == libc::ENOENT {
                break;
            }
            if rc != 0 {
                // SAFETY: close the session before reporting.
                unsafe { (self.ops.end_poll)(cq) };
                return Err(Error::verb(Verb::PollCq, rc));
            }
        }
        // SAFETY: inside a poll session; retires the current entry and unlocks.
        unsafe { (self.ops.end_poll)(cq) };
        Ok(n)
    }
}

impl<C> Drop for ExtCq<C> {
    fn drop(&mut self) {
        let _ = destroy_cq(self.raw.as_ptr().cast());
    }
}

impl<C> core::fmt::Debug for ExtCq<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExtCq")
            .field("depth", &self.depth())
            .field("sender_gid", &self.ops.read_sgid.is_some())
            .field("unsolicited", &self.ops.is_unsolicited.is_some())
            .field("waitable", &self.own.is_some())
            .finish()
    }
}
