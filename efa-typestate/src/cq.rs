//! Completion queues (classic and extended), the `Completion` value, completion
//! channels, and the EFA CQ ring layout query.

use core::ffi::c_int;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::time::Duration;

use arrayvec::ArrayVec;

use crate::ah::AH_UNKNOWN;
use crate::context::{timeout_ms, Context, DeviceCaps};
use crate::endpoint::Gid;
use crate::error::{EfaStatus, Error, Result, Unsupported, Verb};
use crate::ffi;
use crate::flags::flag_set;

/// A verbs completion status (`ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// Success.
    pub const SUCCESS: WcStatus = WcStatus(0);
    /// Local length error (e.g. a send larger than the MTU).
    pub const LOC_LEN_ERR: WcStatus = WcStatus(1);
    /// Local QP operation error.
    pub const LOC_QP_OP_ERR: WcStatus = WcStatus(2);
    /// Local protection error.
    pub const LOC_PROT_ERR: WcStatus = WcStatus(4);
    /// Flushed.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(5);
    /// Bad response.
    pub const BAD_RESP_ERR: WcStatus = WcStatus(7);
    /// Remote invalid request.
    pub const REM_INV_REQ_ERR: WcStatus = WcStatus(9);
    /// Remote access error.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(10);
    /// Remote operation error.
    pub const REM_OP_ERR: WcStatus = WcStatus(11);
    /// RNR retries exceeded.
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(13);
    /// Remote invalid read request (EFA: bad destination QPN).
    pub const REM_INV_RD_REQ_ERR: WcStatus = WcStatus(15);
    /// Remote abort.
    pub const REM_ABORT_ERR: WcStatus = WcStatus(16);
    /// Response timeout.
    pub const RESP_TIMEOUT_ERR: WcStatus = WcStatus(20);
    /// General error.
    pub const GENERAL_ERR: WcStatus = WcStatus(21);

    /// The C enumerator name.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "IBV_WC_SUCCESS",
            1 => "IBV_WC_LOC_LEN_ERR",
            2 => "IBV_WC_LOC_QP_OP_ERR",
            3 => "IBV_WC_LOC_EEC_OP_ERR",
            4 => "IBV_WC_LOC_PROT_ERR",
            5 => "IBV_WC_WR_FLUSH_ERR",
            6 => "IBV_WC_MW_BIND_ERR",
            7 => "IBV_WC_BAD_RESP_ERR",
            8 => "IBV_WC_LOC_ACCESS_ERR",
            9 => "IBV_WC_REM_INV_REQ_ERR",
            10 => "IBV_WC_REM_ACCESS_ERR",
            11 => "IBV_WC_REM_OP_ERR",
            12 => "IBV_WC_RETRY_EXC_ERR",
            13 => "IBV_WC_RNR_RETRY_EXC_ERR",
            14 => "IBV_WC_LOC_RDD_VIOL_ERR",
            15 => "IBV_WC_REM_INV_RD_REQ_ERR",
            16 => "IBV_WC_REM_ABORT_ERR",
            17 => "IBV_WC_INV_EECN_ERR",
            18 => "IBV_WC_INV_EEC_STATE_ERR",
            19 => "IBV_WC_FATAL_ERR",
            20 => "IBV_WC_RESP_TIMEOUT_ERR",
            21 => "IBV_WC_GENERAL_ERR",
            _ => "IBV_WC_(unknown)",
        }
    }
}

/// A completion opcode (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    /// Send or send-with-immediate finished. EFA also reports RDMA-read requester
    /// completions with this opcode (rdma-core behaviour).
    pub const SEND: WcOpcode = WcOpcode(0);
    /// RDMA write (with or without immediate) finished.
    pub const RDMA_WRITE: WcOpcode = WcOpcode(1);
    /// RDMA read finished (on devices/providers that report it as such).
    pub const RDMA_READ: WcOpcode = WcOpcode(2);
    /// A message arrived in a posted receive.
    pub const RECV: WcOpcode = WcOpcode(128);
    /// A peer's RDMA write with immediate landed.
    pub const RECV_RDMA_WITH_IMM: WcOpcode = WcOpcode(129);

    /// True for receive-side completions.
    pub fn is_recv(self) -> bool {
        self.0 & 128 != 0
    }
}

flag_set! {
    /// Per-completion flags.
    pub struct CompletionFlags: u32 {
        /// Carries immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = 1 << 1;
        /// A write-with-immediate that consumed no receive WR (`wr_id` is 0).
        const UNSOLICITED = 1 << 16;
        /// The sender GID is valid (sender unknown to this receiver, CQ made with sender GID).
        const SENDER_GID = 1 << 17;
    }
}

/// One completion, copied out of the CQ: a plain `Copy` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Completion {
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    vendor_err: u32,
    byte_len: u32,
    imm: u32,
    qp_num: u32,
    src_qp: u32,
    slid: u16,
    flags: CompletionFlags,
    sgid: Gid,
}

impl Completion {
    /// The work request id given when posting (0 for unsolicited write-with-imm).
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// Verbs status.
    pub fn status(&self) -> WcStatus {
        self.status
    }
    /// True on success.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::SUCCESS
    }
    /// Opcode.
    pub fn opcode(&self) -> WcOpcode {
        self.opcode
    }
    /// The EFA status (`vendor_err`): exactly what the device reported.
    pub fn efa_status(&self) -> EfaStatus {
        EfaStatus(self.vendor_err)
    }
    /// Bytes received (receive completions; for write-with-imm the write length).
    pub fn byte_len(&self) -> u32 {
        self.byte_len
    }
    /// Immediate data in host byte order, if any.
    pub fn imm(&self) -> Option<u32> {
        self.flags
            .contains(CompletionFlags::WITH_IMM)
            .then_some(self.imm)
    }
    /// Local QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
    /// Sender's QP number (receive completions).
    pub fn src_qp(&self) -> u32 {
        self.src_qp
    }
    /// Receiver-side AH number of the sender, [`AH_UNKNOWN`] (0xffff) if this side has none.
    pub fn slid(&self) -> u16 {
        self.slid
    }
    /// The sender's AH number if this side has an AH for it.
    pub fn sender_ah(&self) -> Option<u16> {
        (self.opcode.is_recv() && self.slid != AH_UNKNOWN).then_some(self.slid)
    }
    /// Flags.
    pub fn flags(&self) -> CompletionFlags {
        self.flags
    }
    /// True for write-with-imm completions that consumed no receive WR.
    pub fn is_unsolicited(&self) -> bool {
        self.flags.contains(CompletionFlags::UNSOLICITED)
    }
    /// The sender's GID, reported for receives from senders this side has no AH for, on
    /// CQs created with [`CqOptions::sender_gid`].
    pub fn sender_gid(&self) -> Option<Gid> {
        self.flags
            .contains(CompletionFlags::SENDER_GID)
            .then_some(self.sgid)
    }
    /// `Ok(self)` on success, else the typed error.
    pub fn result(&self) -> Result<&Self> {
        match self.into_error() {
            None => Ok(self),
            Some(e) => Err(e),
        }
    }
    /// The error this completion reports, if it failed.
    pub fn into_error(&self) -> Option<Error> {
        (!self.is_ok()).then_some(Error::Completion {
            status: self.status,
            efa: self.efa_status(),
        })
    }
}

/// Options for creating a CQ.
#[derive(Clone, Copy, Debug)]
pub struct CqOptions<'ch> {
    depth: u32,
    channel: Option<&'ch CompChannel<'ch>>,
    comp_vector: u32,
    sender_gid: bool,
    unsolicited: bool,
}

impl<'ch> CqOptions<'ch> {
    /// A CQ with room for at least `depth` completions.
    pub fn new(depth: u32) -> Self {
        CqOptions {
            depth,
            channel: None,
            comp_vector: 0,
            sender_gid: false,
            unsolicited: false,
        }
    }
    /// Deliver notifications to `channel`.
    pub fn channel(mut self, channel: &'ch CompChannel<'ch>) -> Self {
        self.channel = Some(channel);
        self
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
}

mod sealed {
    pub trait Sealed {}
}

/// What QPs need from a CQ, and polling; implemented by [`Cq`] and [`ExtCq`].
pub trait CompletionQueue: sealed::Sealed {
    /// The underlying `ibv_cq`.
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq;

    /// Appends up to `out.remaining_capacity()` completions to `out`; returns how many.
    /// Never allocates.
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

/// Identifies a CQ in a [`CqEvent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId(usize);

type PollCqFn = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int, *mut ffi::ibv_wc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int) -> c_int;

fn notify_fn(cq: *mut ffi::ibv_cq) -> Result<ReqNotifyFn> {
    // SAFETY: valid CQ whose context is open; the ops table is read, not written.
    let f = unsafe { (*(*cq).context).ops.req_notify_cq };
    f.ok_or(Error::Unsupported {
        verb: Verb::ReqNotifyCq,
        why: Unsupported::NotInLibrary,
    })
}

fn request_notify_with(f: ReqNotifyFn, cq: *mut ffi::ibv_cq) -> Result<()> {
    // SAFETY: valid CQ and its provider's req_notify_cq; solicited_only = 0.
    let rc = unsafe { f(cq, 0) };
    if rc != 0 {
        return Err(Error::verb(Verb::ReqNotifyCq, rc));
    }
    Ok(())
}

fn destroy_cq(cq: *mut ffi::ibv_cq) -> Result<()> {
    // SAFETY: owned CQ destroyed once; events on it were acknowledged when received.
    let rc = unsafe { ffi::ibv_destroy_cq(cq) };
    if rc != 0 {
        return Err(Error::verb(Verb::DestroyCq, rc));
    }
    Ok(())
}

/// A classic CQ (`ibv_create_cq`), polled with `ibv_poll_cq`.
pub struct Cq<'ctx> {
    raw: NonNull<ffi::ibv_cq>,
    poll_cq: PollCqFn,
    req_notify: ReqNotifyFn,
    _ctx: PhantomData<&'ctx Context>,
}

// SAFETY: the EFA provider serialises polling and arming of a CQ with its own lock, so
// the CQ may be used from several threads.
unsafe impl Send for Cq<'_> {}
// SAFETY: see above.
unsafe impl Sync for Cq<'_> {}

impl Context {
    /// Creates a classic CQ.
    pub fn create_cq<'a>(&'a self, opts: CqOptions<'a>) -> Result<Cq<'a>> {
        let ch = channel_ptr(self, opts.channel)?;
        // SAFETY: valid context, optional channel of this context, no cq_context.
        let raw = unsafe {
            ffi::ibv_create_cq(
                self.as_ptr(),
                opts.depth as c_int,
                core::ptr::null_mut(),
                ch,
                opts.comp_vector as c_int,
            )
        };
        let Some(raw) = NonNull::new(raw) else {
            return Err(Error::last_os(Verb::CreateCq));
        };
        // SAFETY: the ops table of an open context is readable.
        let poll_cq = unsafe { (*self.as_ptr()).ops.poll_cq };
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
            _ctx: PhantomData,
        })
    }

    /// Creates an extended CQ (`ibv_create_cq_ex`, or `efadv_create_cq` when sender GIDs
    /// or unsolicited flags are requested).
    pub fn create_ext_cq<'a>(&'a self, opts: CqOptions<'a>) -> Result<ExtCq<'a>> {
        ExtCq::create(self, opts)
    }
}

fn channel_ptr(ctx: &Context, ch: Option<&CompChannel<'_>>) -> Result<*mut ffi::ibv_comp_channel> {
    match ch {
        None => Ok(core::ptr::null_mut()),
        Some(ch) => {
            // SAFETY: valid channel; `context` is a plain field.
            if unsafe { (*ch.raw.as_ptr()).context } != ctx.as_ptr() {
                return Err(crate::error::InvalidInput::ForeignObject.into());
            }
            Ok(ch.raw.as_ptr())
        }
    }
}

impl sealed::Sealed for Cq<'_> {}

impl CompletionQueue for Cq<'_> {
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.as_ptr()
    }

    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        const CHUNK: usize = 16;
        let mut wcs = [const { MaybeUninit::<ffi::ibv_wc>::uninit() }; CHUNK];
        let mut total = 0;
        loop {
            let want = out.remaining_capacity().min(CHUNK);
            if want == 0 {
                return Ok(total);
            }
            // SAFETY: valid CQ; `wcs` has room for `want` entries; the provider writes
            // `n` of them and returns n (or a negative errno).
            let n = unsafe {
                (self.poll_cq)(self.raw.as_ptr(), want as c_int, wcs.as_mut_ptr().cast())
            };
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
        }
    }

    fn request_notify(&self) -> Result<()> {
        request_notify_with(self.req_notify, self.raw.as_ptr())
    }
}

/// Reads a `struct ibv_wc` the provider filled.
///
/// # Safety
/// `wc` must point at an `ibv_wc` written by `ibv_poll_cq`. Fields the provider leaves
/// untouched for send completions (byte_len, imm, src_qp, slid) may be stale: they are
/// only read for receive completions.
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
            flags: CompletionFlags::from_bits_retain((*wc).wc_flags & 0xffff),
            ..Completion::default()
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

impl Cq<'_> {
    /// Destroys the CQ, reporting failure (EBUSY while a QP still uses it cannot happen:
    /// QPs borrow their CQs).
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = destroy_cq(self.raw.as_ptr()) {
            return Err((self, e));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl Drop for Cq<'_> {
    fn drop(&mut self) {
        let _ = destroy_cq(self.raw.as_ptr());
    }
}

impl core::fmt::Debug for Cq<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cq").field("depth", &self.depth()).finish()
    }
}

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
}

/// An extended CQ (`ibv_cq_ex`), polled with `start_poll`/`next_poll`/`end_poll` through
/// function pointers checked once at creation. Can report sender GIDs and the
/// unsolicited flag (efadv).
pub struct ExtCq<'ctx> {
    raw: NonNull<ffi::ibv_cq_ex>,
    ops: CqExOps,
    req_notify: ReqNotifyFn,
    _ctx: PhantomData<&'ctx Context>,
}

// SAFETY: the EFA provider locks the CQ from start_poll to end_poll, and the plain fields
// (`status`, `wr_id`) are only read inside that window, so concurrent pollers are serialised.
unsafe impl Send for ExtCq<'_> {}
// SAFETY: see above.
unsafe impl Sync for ExtCq<'_> {}

/// Standard wc_flags every ExtCq requests: BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID.
const EXT_WC_FLAGS: u64 = 0x1f;

impl<'ctx> ExtCq<'ctx> {
    fn create(ctx: &'ctx Context, opts: CqOptions<'ctx>) -> Result<ExtCq<'ctx>> {
        let ch = channel_ptr(ctx, opts.channel)?;
        let caps = ctx.caps();
        for (wanted, cap) in [
            (opts.sender_gid, DeviceCaps::CQ_WITH_SGID),
            (opts.unsolicited, DeviceCaps::UNSOLICITED_WRITE_RECV),
        ] {
            if wanted && !caps.contains(cap) {
                return Err(Error::Unsupported {
                    verb: Verb::EfadvCreateCq,
                    why: Unsupported::MissingCapability(cap),
                });
            }
        }
        // SAFETY: all-zero is a valid ibv_cq_init_attr_ex (integers and null pointers).
        let mut attr: ffi::ibv_cq_init_attr_ex = unsafe { core::mem::zeroed() };
        attr.cqe = opts.depth;
        attr.channel = ch;
        attr.comp_vector = opts.comp_vector;
        attr.wc_flags = EXT_WC_FLAGS;
        let efa_flags = if opts.sender_gid {
            ffi::EFADV_WC_EX_WITH_SGID
        } else {
            0
        } | if opts.unsolicited {
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
        let ops = unsafe { Self::load_ops(cq, opts) };
        match (ops, notify_fn(base)) {
            (Some(ops), Ok(req_notify)) => Ok(ExtCq {
                raw,
                ops,
                req_notify,
                _ctx: PhantomData,
            }),
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
    unsafe fn load_ops(cq: *mut ffi::ibv_cq_ex, opts: CqOptions<'_>) -> Option<CqExOps> {
        // SAFETY: caller guarantees `cq` is live; fields are read, not written.
        let c = unsafe { &*cq };
        let (read_sgid, is_unsolicited, efa) = if opts.sender_gid || opts.unsolicited {
            // SAFETY: the CQ came from efadv_create_cq; this returns its embedded efadv_cq.
            let efa = unsafe { ffi::efadv_cq_from_ibv_cq_ex(cq) };
            if efa.is_null() {
                return None;
            }
            // SAFETY: non-null efadv_cq owned by the CQ.
            let e = unsafe { &*efa };
            let sg = if opts.sender_gid {
                Some(e.wc_read_sgid?)
            } else {
                None
            };
            let un = if opts.unsolicited {
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
            read_sgid,
            is_unsolicited,
        })
    }

    /// Reads the current entry (between a successful start/next_poll and the next call).
    ///
    /// # Safety
    /// Must be called only while the CQ is positioned on a valid entry.
    #[inline]
    unsafe fn read_current(&self) -> Completion {
        let cq = self.raw.as_ptr();
        let o = &self.ops;
        // SAFETY: caller guarantees a current entry; all pointers were checked at creation
        // and the plain fields are valid while the CQ is locked by start_poll.
        unsafe {
            let opcode = WcOpcode((o.read_opcode)(cq));
            let mut flags = CompletionFlags::empty();
            let status = WcStatus((*cq).status);
            let mut c = Completion {
                wr_id: (*cq).wr_id,
                status,
                opcode,
                // EFA reports vendor status 0 with every success: skip the call then.
                vendor_err: if status == WcStatus::SUCCESS {
                    0
                } else {
                    (o.read_vendor_err)(cq)
                },
                qp_num: (o.read_qp_num)(cq),
                ..Completion::default()
            };
            // Send-side completions carry nothing more on EFA (flags 0): read only for receives.
            if opcode.is_recv() {
                flags = CompletionFlags::from_bits_retain((o.read_wc_flags)(cq) & 0xffff);
                c.byte_len = (o.read_byte_len)(cq);
                c.src_qp = (o.read_src_qp)(cq);
                c.slid = (o.read_slid)(cq) as u16;
                if flags.contains(CompletionFlags::WITH_IMM) {
                    c.imm = u32::from_be((o.read_imm_data)(cq));
                }
                if let Some(f) = o.is_unsolicited {
                    if opcode == WcOpcode::RECV_RDMA_WITH_IMM && f(o.efa) {
                        flags |= CompletionFlags::UNSOLICITED;
                    }
                }
                if let Some(f) = o.read_sgid {
                    if c.slid == AH_UNKNOWN {
                        let mut gid = ffi::ibv_gid { raw: [0; 16] };
                        if f(o.efa, &mut gid) == 0 {
                            c.sgid = Gid(gid.raw);
                            flags |= CompletionFlags::SENDER_GID;
                        }
                    }
                }
            }
            c.flags = flags;
            c
        }
    }

    /// Destroys the CQ, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        if let Err(e) = destroy_cq(self.raw.as_ptr().cast()) {
            return Err((self, e));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl sealed::Sealed for ExtCq<'_> {}

impl CompletionQueue for ExtCq<'_> {
    fn as_cq_ptr(&self) -> *mut ffi::ibv_cq {
        self.raw.as_ptr().cast()
    }

    fn poll<const N: usize>(&self, out: &mut ArrayVec<Completion, N>) -> Result<usize> {
        if out.is_full() {
            return Ok(0);
        }
        let cq = self.raw.as_ptr();
        let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
        // SAFETY: valid CQ and attr with comp_mask 0.
        let rc = unsafe { (self.ops.start_poll)(cq, &mut attr) };
        match rc {
            0 => {}
            2 /* ENOENT: empty, CQ not locked */ => return Ok(0),
            e => return Err(Error::verb(Verb::PollCq, e)),
        }
        let mut n = 0;
        loop {
            // SAFETY: positioned on a valid entry (start/next_poll returned 0).
            let c = unsafe { self.read_current() };
            // Room was checked before this entry was fetched.
            let _ = out.try_push(c);
            n += 1;
            if out.is_full() {
                break;
            }
            // SAFETY: inside a poll session.
            let rc = unsafe { (self.ops.next_poll)(cq) };
            if rc == 2 {
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

    fn request_notify(&self) -> Result<()> {
        request_notify_with(self.req_notify, self.as_cq_ptr())
    }
}

impl Drop for ExtCq<'_> {
    fn drop(&mut self) {
        let _ = destroy_cq(self.raw.as_ptr().cast());
    }
}

impl core::fmt::Debug for ExtCq<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExtCq")
            .field("depth", &self.depth())
            .field("sender_gid", &self.ops.read_sgid.is_some())
            .field("unsolicited", &self.ops.is_unsolicited.is_some())
            .finish()
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

/// A completion channel (`ibv_comp_channel`): a pollable fd that becomes readable when
/// an armed CQ attached to it gets a completion.
pub struct CompChannel<'ctx> {
    raw: NonNull<ffi::ibv_comp_channel>,
    _ctx: PhantomData<&'ctx Context>,
}

// SAFETY: the channel is a kernel fd plus immutable fields; ibv_get_cq_event is thread-safe.
unsafe impl Send for CompChannel<'_> {}
// SAFETY: see above.
unsafe impl Sync for CompChannel<'_> {}

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
    pub fn is_for<C: CompletionQueue>(&self, cq: &C) -> bool {
        self.cq == cq.id()
    }
}

impl Context {
    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> Result<CompChannel<'_>> {
        // SAFETY: valid open context.
        let raw = unsafe { ffi::ibv_create_comp_channel(self.as_ptr()) };
        match NonNull::new(raw) {
            Some(raw) => Ok(CompChannel {
                raw,
                _ctx: PhantomData,
            }),
            None => Err(Error::last_os(Verb::CreateCompChannel)),
        }
    }
}

impl CompChannel<'_> {
    /// The channel's fd (for epoll/poll).
    pub fn fd(&self) -> i32 {
        // SAFETY: valid channel; plain field.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// Waits up to `timeout` (None = forever) for a CQ notification; `Ok(None)` on timeout.
    /// Re-arm the CQ ([`CompletionQueue::request_notify`]) and poll it after each event.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<CqEvent>> {
        match ffi::wait_readable(self.fd(), timeout_ms(timeout)) {
            Ok(true) => self.get_event().map(Some),
            Ok(false) => Ok(None),
            Err(e) => Err(Error::verb(Verb::GetCqEvent, e)),
        }
    }

    /// Blocks (unless the fd was made non-blocking) until a notification arrives.
    pub fn get_event(&self) -> Result<CqEvent> {
        let mut cq: *mut ffi::ibv_cq = core::ptr::null_mut();
        let mut cq_ctx: *mut core::ffi::c_void = core::ptr::null_mut();
        // SAFETY: valid channel and out-pointers.
        let rc = unsafe { ffi::ibv_get_cq_event(self.raw.as_ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 {
            return Err(Error::last_os(Verb::GetCqEvent));
        }
        // SAFETY: `cq` is the live CQ the event is for; one event is acknowledged once.
        unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        Ok(CqEvent {
            cq: CqId(cq as usize),
        })
    }

    /// Destroys the channel, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned channel; its CQs borrowed it and are gone.
        let rc = unsafe { ffi::ibv_destroy_comp_channel(self.raw.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyCompChannel, rc)));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl Drop for CompChannel<'_> {
    fn drop(&mut self) {
        // SAFETY: owned channel destroyed once.
        unsafe { ffi::ibv_destroy_comp_channel(self.raw.as_ptr()) };
    }
}

impl core::fmt::Debug for CompChannel<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

#[cfg(feature = "std")]
impl std::os::fd::AsRawFd for CompChannel<'_> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd()
    }
}

#[cfg(feature = "std")]
impl std::os::fd::AsFd for CompChannel<'_> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as the channel.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) }
    }
}
