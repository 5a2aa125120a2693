//! Queue pairs (UD and SRD) with compile-time states, and posting.
//!
//! A new QP is [`Qp<Reset>`](Qp). Consuming transitions move it through
//! [`Init`] → [`Rtr`] → [`Rts`] (or [`Qp::prepare`] does all three); a failed transition
//! hands the QP back inside [`TransitionError`]. Receives can be posted from `Init` on,
//! sends only in `Rts` — anything else does not compile. [`DynQp`] is the same QP with
//! its state tracked at run time.

use core::ffi::c_int;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ptr::NonNull;

use crate::cq::CompletionQueue;
use crate::endpoint::{EndpointInfo, Gid};
use crate::error::{Error, InvalidInput, Result, Unsupported, Verb};
use crate::ffi;
use crate::pd::Pd;
use crate::wr::{Payload, RecvBatch, RecvBufs, SendBatch, SendOp, SendOps};
use crate::DeviceCaps;

// ibv_qp_attr_mask bits used here.
const ATTR_STATE: u32 = 1;
const ATTR_PKEY_INDEX: u32 = 1 << 4;
const ATTR_PORT: u32 = 1 << 5;
const ATTR_QKEY: u32 = 1 << 6;
const ATTR_RNR_RETRY: u32 = 1 << 11;
const ATTR_SQ_PSN: u32 = 1 << 16;
const ATTR_CAP: u32 = 1 << 19;
// ibv_qp_init_attr_mask bits.
const INIT_ATTR_PD: u32 = 1;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
const QPT_UD: u32 = 4;
const QPT_DRIVER: u32 = 0xff;
const SEND_SIGNALED: u32 = 1 << 1;
const SEND_INLINE: u32 = 1 << 3;
const ENOMEM: c_int = 12;

/// The transport of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Unreliable datagram: SEND/SEND_IMM only; receive buffers start with a 40-byte prefix.
    Ud,
    /// Scalable Reliable Datagram (EFA): reliable, unordered, with RDMA.
    Srd,
}

/// Queue sizes and limits, as requested or as granted by the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Inline bytes per send.
    pub max_inline_data: u32,
}

/// How to create a QP. Start from [`QpConfig::srd`] or [`QpConfig::ud`].
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    qp_type: QpType,
    caps: Option<QpCaps>,
    depth: (u32, u32),
    sges: Option<(u32, u32)>,
    max_inline: Option<u32>,
    send_ops: Option<SendOps>,
    unsolicited_write_recv: bool,
    inline_write: bool,
    sl: u8,
}

impl QpConfig {
    /// An SRD QP with every send operation the device supports, 256-deep queues, 2 send
    /// SGEs (or the device maximum), 1 receive SGE and the device's inline size.
    pub fn srd() -> Self {
        QpConfig {
            qp_type: QpType::Srd,
            caps: None,
            depth: (256, 256),
            sges: None,
            max_inline: None,
            send_ops: None,
            unsolicited_write_recv: false,
            inline_write: false,
            sl: 0,
        }
    }
    /// A UD QP (SEND and SEND_WITH_IMM).
    pub fn ud() -> Self {
        QpConfig {
            qp_type: QpType::Ud,
            ..Self::srd()
        }
    }
    /// Queue depths (requests; the device may grant more).
    pub fn depth(mut self, send: u32, recv: u32) -> Self {
        self.depth = (send, recv);
        self
    }
    /// SGEs per send and per receive (defaults: min(2, device max) and 1).
    pub fn sges(mut self, send: u32, recv: u32) -> Self {
        self.sges = Some((send, recv));
        self
    }
    /// Inline bytes per send (default: the device's `inline_buf_size`).
    pub fn max_inline(mut self, bytes: u32) -> Self {
        self.max_inline = Some(bytes);
        self
    }
    /// Every limit explicitly (overrides `depth`, `sges` and `max_inline`).
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = Some(caps);
        self
    }
    /// Only these send operations (the QP refuses others when posting).
    pub fn send_ops(mut self, ops: SendOps) -> Self {
        self.send_ops = Some(ops);
        self
    }
    /// Receive write-with-immediate without consuming receive WRs (SRD; needs
    /// [`DeviceCaps::UNSOLICITED_WRITE_RECV`]).
    pub fn unsolicited_write_recv(mut self) -> Self {
        self.unsolicited_write_recv = true;
        self
    }
    /// Allow inline RDMA writes (SRD; 128-byte WQEs; needs [`DeviceCaps::RDMA_WRITE`]).
    pub fn inline_write(mut self) -> Self {
        self.inline_write = true;
        self
    }
    /// Service level (traffic class, 0 = default).
    pub fn service_level(mut self, sl: u8) -> Self {
        self.sl = sl;
        self
    }
}

/// A QP state as the device knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpStateKind {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// SQD.
    Sqd,
    /// SQE.
    Sqe,
    /// ERR.
    Err,
    /// A value this crate does not know.
    Unknown(u32),
}

impl QpStateKind {
    fn from_raw(v: u32) -> Self {
        match v {
            0 => QpStateKind::Reset,
            1 => QpStateKind::Init,
            2 => QpStateKind::Rtr,
            3 => QpStateKind::Rts,
            4 => QpStateKind::Sqd,
            5 => QpStateKind::Sqe,
            6 => QpStateKind::Err,
            v => QpStateKind::Unknown(v),
        }
    }
    fn to_raw(self) -> u32 {
        match self {
            QpStateKind::Reset => 0,
            QpStateKind::Init => 1,
            QpStateKind::Rtr => 2,
            QpStateKind::Rts => 3,
            QpStateKind::Sqd => 4,
            QpStateKind::Sqe => 5,
            QpStateKind::Err => 6,
            QpStateKind::Unknown(v) => v,
        }
    }
    fn can_post_recv(self) -> bool {
        matches!(
            self,
            QpStateKind::Init
                | QpStateKind::Rtr
                | QpStateKind::Rts
                | QpStateKind::Sqd
                | QpStateKind::Sqe
        )
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A compile-time QP state. Sealed: only [`Reset`], [`Init`], [`Rtr`] and [`Rts`].
pub trait QpState: sealed::Sealed {
    /// The run-time state this marker stands for.
    const KIND: QpStateKind;
}

/// States in which receives may be posted (Init, Rtr, Rts).
pub trait RecvReady: QpState {}

/// RESET: just created (or reset). Nothing can be posted.
#[derive(Debug)]
pub struct Reset;
/// INIT: qkey set; receives may be posted.
#[derive(Debug)]
pub struct Init;
/// RTR: ready to receive.
#[derive(Debug)]
pub struct Rtr;
/// RTS: ready to send.
#[derive(Debug)]
pub struct Rts;

impl sealed::Sealed for Reset {}
impl sealed::Sealed for Init {}
impl sealed::Sealed for Rtr {}
impl sealed::Sealed for Rts {}
impl QpState for Reset {
    const KIND: QpStateKind = QpStateKind::Reset;
}
impl QpState for Init {
    const KIND: QpStateKind = QpStateKind::Init;
}
impl QpState for Rtr {
    const KIND: QpStateKind = QpStateKind::Rtr;
}
impl QpState for Rts {
    const KIND: QpStateKind = QpStateKind::Rts;
}
impl RecvReady for Init {}
impl RecvReady for Rtr {}
impl RecvReady for Rts {}

/// A failed transition: the error and the QP, unchanged, in its previous state.
#[derive(Debug)]
pub struct TransitionError<Q> {
    /// The QP, still in the state it was in.
    pub qp: Q,
    /// What went wrong.
    pub error: Error,
}

impl<Q> core::fmt::Display for TransitionError<Q> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "QP state transition failed: {}", self.error)
    }
}

#[cfg(feature = "std")]
impl<Q: core::fmt::Debug> std::error::Error for TransitionError<Q> {}

impl<Q> From<TransitionError<Q>> for Error {
    fn from(e: TransitionError<Q>) -> Error {
        e.error
    }
}

/// Options for RTR → RTS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtsOptions {
    /// RNR retry count 0..=7 (7 = forever, the SRD default when unset). SRD only; needs
    /// [`DeviceCaps::RNR_RETRY`].
    pub rnr_retry: Option<u8>,
    /// Send PSN (no visible effect on EFA).
    pub sq_psn: u32,
}

/// Attributes reported by [`Qp::query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Current state.
    pub state: QpStateKind,
    /// Current qkey.
    pub qkey: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Granted limits.
    pub caps: QpCaps,
}

/// Ring layout of one work queue (`efadv_query_qp_wqs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqLayout {
    /// Ring start.
    pub buffer: usize,
    /// Bytes per entry.
    pub entry_size: u32,
    /// Entries.
    pub num_entries: u32,
    /// Doorbell address.
    pub doorbell: usize,
    /// Most entries per doorbell.
    pub max_batch: u32,
}

type QpxFn = unsafe extern "C" fn(*mut ffi::ibv_qp_ex);
type PostRecvFn = unsafe extern "C" fn(
    *mut ffi::ibv_qp,
    *mut ffi::ibv_recv_wr,
    *mut *mut ffi::ibv_recv_wr,
) -> c_int;

/// The provider's `ibv_qp_ex` function pointers, checked once at creation. Operations
/// not enabled at creation point at never-called stubs: posting checks the batch's
/// operation set against the QP's first.
#[derive(Clone, Copy)]
struct SendFns {
    start: QpxFn,
    complete: unsafe extern "C" fn(*mut ffi::ibv_qp_ex) -> c_int,
    set_ud_addr: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, *mut ffi::ibv_ah, u32, u32),
    set_sge: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
    set_sge_list: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, usize, *const ffi::ibv_sge),
    set_inline: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, *mut core::ffi::c_void, usize),
    send: QpxFn,
    send_imm: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32),
    read: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64),
    write: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64),
    write_imm: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
}

unsafe extern "C" fn op_not_enabled(_: *mut ffi::ibv_qp_ex) {}
unsafe extern "C" fn op_not_enabled_imm(_: *mut ffi::ibv_qp_ex, _: u32) {}
unsafe extern "C" fn op_not_enabled_rdma(_: *mut ffi::ibv_qp_ex, _: u32, _: u64) {}
unsafe extern "C" fn op_not_enabled_rdma_imm(_: *mut ffi::ibv_qp_ex, _: u32, _: u64, _: u32) {}

impl SendFns {
    /// # Safety
    /// `qpx` must be a live `ibv_qp_ex`.
    unsafe fn load(qpx: *mut ffi::ibv_qp_ex, ops: SendOps) -> Option<SendFns> {
        // SAFETY: caller guarantees `qpx` is live; the pointers are read once.
        let q = unsafe { &*qpx };
        let need = |bit: SendOps| ops.contains(bit);
        Some(SendFns {
            start: q.wr_start?,
            complete: q.wr_complete?,
            set_ud_addr: q.wr_set_ud_addr?,
            set_sge: q.wr_set_sge?,
            set_sge_list: q.wr_set_sge_list?,
            set_inline: q.wr_set_inline_data?,
            send: if need(SendOps::SEND) {
                q.wr_send?
            } else {
                op_not_enabled
            },
            send_imm: if need(SendOps::SEND_WITH_IMM) {
                q.wr_send_imm?
            } else {
                op_not_enabled_imm
            },
            read: if need(SendOps::RDMA_READ) {
                q.wr_rdma_read?
            } else {
                op_not_enabled_rdma
            },
            write: if need(SendOps::RDMA_WRITE) {
                q.wr_rdma_write?
            } else {
                op_not_enabled_rdma
            },
            write_imm: if need(SendOps::RDMA_WRITE_WITH_IMM) {
                q.wr_rdma_write_imm?
            } else {
                op_not_enabled_rdma_imm
            },
        })
    }
}

/// What every QP form shares: handles, checked function pointers, granted caps.
struct QpInner<'a> {
    qp: NonNull<ffi::ibv_qp>,
    qpx: *mut ffi::ibv_qp_ex,
    fns: SendFns,
    post_recv: PostRecvFn,
    caps: QpCaps,
    qp_type: QpType,
    send_ops: SendOps,
    device_caps: DeviceCaps,
    gid: Gid,
    qkey: u32,
    _life: PhantomData<&'a ()>,
}

// SAFETY: the EFA provider takes the SQ lock in wr_start and releases it in
// wr_complete/wr_abort, and the `wr_id`/`wr_flags` fields are written only inside that
// window; post_recv takes the RQ lock. So a QP may be posted to from several threads.
unsafe impl Send for QpInner<'_> {}
// SAFETY: see above.
unsafe impl Sync for QpInner<'_> {}

impl Drop for QpInner<'_> {
    fn drop(&mut self) {
        // SAFETY: owned QP destroyed once; its PD and CQs outlive it ('a).
        unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

impl<'a> QpInner<'a> {
    fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: valid QP and attribute struct.
        let rc = unsafe { ffi::ibv_modify_qp(self.qp.as_ptr(), attr, mask as c_int) };
        if rc != 0 {
            return Err(Error::verb(Verb::ModifyQp, rc));
        }
        Ok(())
    }

    fn set_init(&mut self, qkey: u32) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = QpStateKind::Init.to_raw();
        a.pkey_index = 0;
        a.port_num = 1;
        a.qkey = qkey;
        self.modify(&mut a, ATTR_STATE | ATTR_PKEY_INDEX | ATTR_PORT | ATTR_QKEY)?;
        self.qkey = qkey;
        Ok(())
    }

    fn set_state(&self, s: QpStateKind) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = s.to_raw();
        self.modify(&mut a, ATTR_STATE)
    }

    fn set_rts(&self, opts: RtsOptions) -> Result<()> {
        let mut a = zeroed_attr();
        a.qp_state = QpStateKind::Rts.to_raw();
        a.sq_psn = opts.sq_psn;
        let mut mask = ATTR_STATE | ATTR_SQ_PSN;
        if let Some(n) = opts.rnr_retry {
            if n > 7 {
                return Err(InvalidInput::RnrRetryOutOfRange(n).into());
            }
            if !self.device_caps.contains(DeviceCaps::RNR_RETRY) {
                return Err(Error::Unsupported {
                    verb: Verb::ModifyQp,
                    why: Unsupported::MissingCapability(DeviceCaps::RNR_RETRY),
                });
            }
            a.rnr_retry = n;
            mask |= ATTR_RNR_RETRY;
        }
        self.modify(&mut a, mask)
    }

    fn query(&self) -> Result<QpAttr> {
        let mut a = zeroed_attr();
        // SAFETY: all-zero is a valid ibv_qp_init_attr (pointers null, integers 0).
        let mut init: ffi::ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        let mask = ATTR_STATE | ATTR_QKEY | ATTR_SQ_PSN | ATTR_CAP | ATTR_RNR_RETRY;
        // SAFETY: valid QP and out-structs.
        let rc = unsafe { ffi::ibv_query_qp(self.qp.as_ptr(), &mut a, mask as c_int, &mut init) };
        if rc != 0 {
            return Err(Error::verb(Verb::QueryQp, rc));
        }
        Ok(QpAttr {
            state: QpStateKind::from_raw(a.qp_state),
            qkey: a.qkey,
            sq_psn: a.sq_psn,
            rnr_retry: a.rnr_retry,
            caps: QpCaps {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
        })
    }

    fn wq_layout(&self) -> Result<(WqLayout, WqLayout)> {
        let (mut sq, mut rq) = (ffi::efadv_wq_attr::default(), ffi::efadv_wq_attr::default());
        // SAFETY: valid QP; both out-structs writable with `inlen` = their size.
        let rc = unsafe {
            ffi::efadv_query_qp_wqs(
                self.qp.as_ptr(),
                &mut sq,
                &mut rq,
                core::mem::size_of_val(&sq) as u32,
            )
        }
        .map_err(|e| ffi::not_provided(Verb::EfadvQueryQpWqs, e))?;
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryQpWqs, rc));
        }
        let conv = |w: ffi::efadv_wq_attr| WqLayout {
            buffer: w.buffer as usize,
            entry_size: w.entry_size,
            num_entries: w.num_entries,
            doorbell: w.doorbell as usize,
            max_batch: w.max_batch,
        };
        Ok((conv(sq), conv(rq)))
    }

    fn qpn(&self) -> u32 {
        // SAFETY: valid QP; qp_num is a plain field set at creation.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    fn endpoint(&self) -> EndpointInfo {
        // QPNs are device-assigned and fit 24 bits (EFA: 16).
        EndpointInfo::from_parts(self.gid, self.qpn(), self.qkey)
    }

    /// # Safety
    /// See [`Qp::post_send`].
    #[inline]
    unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        if batch.wrs.is_empty() {
            return Ok(());
        }
        if !self.send_ops.contains(batch.ops) {
            return Err(Error::Unsupported {
                verb: Verb::PostSend,
                why: Unsupported::SendOpNotEnabled,
            });
        }
        let q = self.qpx;
        let f = &self.fns;
        // SAFETY: `q` is this live QP's ibv_qp_ex; every pointer in `f` was checked at
        // creation, and ops outside `send_ops` (stubs) are excluded above. The session
        // holds the provider's SQ lock, so writing wr_id/wr_flags is race-free. SGEs and
        // AHs are borrowed by the batch and valid for the call; inline bytes are copied
        // before wr_complete returns.
        unsafe {
            (f.start)(q);
            for wr in batch.wrs.iter() {
                (*q).wr_id = wr.wr_id;
                (*q).wr_flags = match wr.payload {
                    Payload::Inline(_) => SEND_SIGNALED | SEND_INLINE,
                    _ => SEND_SIGNALED,
                };
                match wr.op {
                    SendOp::Send => (f.send)(q),
                    SendOp::SendImm(imm) => (f.send_imm)(q, imm.to_be()),
                    SendOp::Write(r) => (f.write)(q, r.rkey(), r.addr()),
                    SendOp::WriteImm(r, imm) => (f.write_imm)(q, r.rkey(), r.addr(), imm.to_be()),
                    SendOp::Read(r) => (f.read)(q, r.rkey(), r.addr()),
                }
                (f.set_ud_addr)(q, wr.peer.ah().as_ptr(), wr.peer.qpn(), wr.peer.qkey());
                match wr.payload {
                    Payload::Sge(s) => (f.set_sge)(q, s.lkey(), s.addr(), s.len()),
                    Payload::Sges(l) => (f.set_sge_list)(q, l.len(), l.as_ptr().cast()),
                    Payload::Inline(b) => (f.set_inline)(q, b.as_ptr() as *mut _, b.len()),
                }
            }
            match (f.complete)(q) {
                0 => Ok(()),
                ENOMEM => Err(Error::SendQueueFull),
                e => Err(Error::verb(Verb::PostSend, e)),
            }
        }
    }

    /// # Safety
    /// See [`Qp::post_recv`].
    #[inline]
    unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        let n = batch.wrs.len();
        if n == 0 {
            return Ok(());
        }
        let mut chain = [const { MaybeUninit::<ffi::ibv_recv_wr>::uninit() }; N];
        let base = chain.as_mut_ptr().cast::<ffi::ibv_recv_wr>();
        for (i, wr) in batch.wrs.iter().enumerate() {
            let (sg_list, num_sge) = match &wr.bufs {
                RecvBufs::Sge(s) => (s.raw() as *const ffi::ibv_sge, 1),
                RecvBufs::Sges(l) => (l.as_ptr().cast::<ffi::ibv_sge>(), l.len() as c_int),
            };
            let next = if i + 1 < n {
                // SAFETY: i < n <= N; `next` points at the following element of the same array.
                unsafe { base.add(i + 1) }
            } else {
                core::ptr::null_mut()
            };
            chain[i].write(ffi::ibv_recv_wr {
                wr_id: wr.wr_id,
                next,
                sg_list: sg_list.cast_mut(),
                num_sge,
            });
        }
        let mut bad: *mut ffi::ibv_recv_wr = core::ptr::null_mut();
        // SAFETY: the first `n` chain entries are initialised and linked; the SGE arrays are
        // borrowed by `batch` for the call and the provider only reads them.
        let rc = unsafe { (self.post_recv)(self.qp.as_ptr(), base, &mut bad) };
        if rc == 0 {
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into `chain` (the provider returns the failing WR).
            unsafe { bad.offset_from(base) }.max(0) as usize
        };
        if rc == ENOMEM {
            Err(Error::RecvQueueFull { posted })
        } else {
            Err(Error::verb(Verb::PostRecv, rc))
        }
    }
}

fn zeroed_attr() -> ffi::ibv_qp_attr {
    // SAFETY: all-zero is a valid ibv_qp_attr (integers and a byte union).
    unsafe { core::mem::zeroed() }
}

/// A queue pair in compile-time state `S`, destroyed on drop. Borrows its PD and CQs
/// (`'a`), so neither can be dropped before it.
pub struct Qp<'a, S: QpState> {
    inner: QpInner<'a>,
    _state: PhantomData<S>,
}

impl<'pd> Pd<'pd> {
    /// Creates a QP (SRD through `efadv_create_qp_ex`, UD through `ibv_create_qp_ex`),
    /// with extended send ops (`ibv_qp_ex`) enabled. The QP starts in [`Reset`].
    pub fn create_qp<'a, S: CompletionQueue, R: CompletionQueue>(
        &'a self,
        send_cq: &'a S,
        recv_cq: &'a R,
        config: &QpConfig,
    ) -> Result<Qp<'a, Reset>> {
        let ctx = self.context();
        let dev = ctx.efa_attr().ok();
        let device_caps = ctx.caps();
        let verb = match config.qp_type {
            QpType::Srd => Verb::EfadvCreateQp,
            QpType::Ud => Verb::CreateQp,
        };
        let missing = |cap: DeviceCaps| Error::Unsupported {
            verb,
            why: Unsupported::MissingCapability(cap),
        };

        let send_ops = config.send_ops.unwrap_or(match config.qp_type {
            QpType::Ud => SendOps::SEND | SendOps::SEND_WITH_IMM,
            QpType::Srd => {
                let mut ops = SendOps::SEND | SendOps::SEND_WITH_IMM;
                if device_caps.contains(DeviceCaps::RDMA_READ) {
                    ops |= SendOps::RDMA_READ;
                }
                if device_caps.contains(DeviceCaps::RDMA_WRITE) {
                    ops |= SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM;
                }
                ops
            }
        });
        if config.qp_type == QpType::Srd {
            if send_ops.contains(SendOps::RDMA_READ) && !device_caps.contains(DeviceCaps::RDMA_READ)
            {
                return Err(missing(DeviceCaps::RDMA_READ));
            }
            if send_ops.intersects(SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM)
                && !device_caps.contains(DeviceCaps::RDMA_WRITE)
            {
                return Err(missing(DeviceCaps::RDMA_WRITE));
            }
            if config.unsolicited_write_recv
                && !device_caps.contains(DeviceCaps::UNSOLICITED_WRITE_RECV)
            {
                return Err(missing(DeviceCaps::UNSOLICITED_WRITE_RECV));
            }
            if config.inline_write && !device_caps.contains(DeviceCaps::RDMA_WRITE) {
                return Err(missing(DeviceCaps::RDMA_WRITE));
            }
        }
        let caps = config.caps.unwrap_or(QpCaps {
            max_send_wr: config.depth.0,
            max_recv_wr: config.depth.1,
            max_send_sge: config.sges.map_or_else(
                || dev.map_or(1, |d| (d.max_sq_sge as u32).clamp(1, 2)),
                |s| s.0,
            ),
            max_recv_sge: config.sges.map_or(1, |s| s.1),
            max_inline_data: config
                .max_inline
                .unwrap_or_else(|| dev.map_or(0, |d| d.inline_buf_size as u32)),
        });
        let gid = ctx.gid()?;

        // SAFETY: all-zero is a valid ibv_qp_init_attr_ex (null pointers, zero integers).
        let mut attr: ffi::ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
        attr.send_cq = send_cq.as_cq_ptr();
        attr.recv_cq = recv_cq.as_cq_ptr();
        attr.cap = ffi::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
        };
        attr.sq_sig_all = 0;
        attr.comp_mask = INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS;
        attr.pd = self.as_ptr();
        attr.send_ops_flags = send_ops.bits();

        let raw = match config.qp_type {
            QpType::Srd => {
                attr.qp_type = QPT_DRIVER;
                let mut efa = ffi::efadv_qp_init_attr {
                    driver_qp_type: ffi::EFADV_QP_DRIVER_TYPE_SRD,
                    sl: config.sl,
                    ..Default::default()
                };
                if config.unsolicited_write_recv {
                    efa.flags |= ffi::EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV;
                }
                if config.inline_write {
                    efa.flags |= ffi::EFADV_QP_FLAGS_INLINE_WRITE;
                }
                // SAFETY: valid context, attribute structs fully initialised; `inlen` is
                // the size of the rdma-core 65 struct (extra fields zero).
                unsafe {
                    ffi::efadv_create_qp_ex(
                        ctx.as_ptr(),
                        &mut attr,
                        &mut efa,
                        core::mem::size_of_val(&efa) as u32,
                    )
                }
            }
            QpType::Ud => {
                attr.qp_type = QPT_UD;
                // SAFETY: valid context and attribute struct.
                unsafe { ffi::ibv_create_qp_ex(ctx.as_ptr(), &mut attr) }
            }
        };
        let Some(qp) = NonNull::new(raw) else {
            return Err(Error::last_os(verb));
        };
        let destroy = |e: Error| {
            // SAFETY: the QP was just created, nothing else references it.
            unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
            Err(e)
        };
        // SAFETY: live QP created with SEND_OPS_FLAGS.
        let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) };
        if qpx.is_null() {
            return destroy(Error::Unsupported {
                verb: Verb::QpToQpEx,
                why: Unsupported::NotInLibrary,
            });
        }
        // SAFETY: live ibv_qp_ex.
        let Some(fns) = (unsafe { SendFns::load(qpx, send_ops) }) else {
            return destroy(Error::Unsupported {
                verb: Verb::QpToQpEx,
                why: Unsupported::NotInLibrary,
            });
        };
        // SAFETY: the QP's context is open; its ops table is readable.
        let Some(post_recv) = (unsafe { (*(*qp.as_ptr()).context).ops.post_recv }) else {
            return destroy(Error::Unsupported {
                verb: Verb::PostRecv,
                why: Unsupported::NotInLibrary,
            });
        };
        let granted = QpCaps {
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge: attr.cap.max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
        };
        Ok(Qp {
            inner: QpInner {
                qp,
                qpx,
                fns,
                post_recv,
                caps: granted,
                qp_type: config.qp_type,
                send_ops,
                device_caps,
                gid,
                qkey: 0,
                _life: PhantomData,
            },
            _state: PhantomData,
        })
    }
}

impl<'a, S: QpState> Qp<'a, S> {
    fn into_state<T: QpState>(self) -> Qp<'a, T> {
        Qp {
            inner: self.inner,
            _state: PhantomData,
        }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }
    /// UD or SRD.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }
    /// Limits granted at creation.
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }
    /// Send operations enabled at creation.
    pub fn send_ops(&self) -> SendOps {
        self.inner.send_ops
    }
    /// The state this type says the QP is in.
    pub fn state(&self) -> QpStateKind {
        S::KIND
    }
    /// Local endpoint info to give peers (GID, QPN, and the qkey set at INIT; 0 before).
    pub fn endpoint(&self) -> EndpointInfo {
        self.inner.endpoint()
    }
    /// Queries the device's view of the QP.
    pub fn query(&self) -> Result<QpAttr> {
        self.inner.query()
    }
    /// EFA send/receive ring layout (`efadv_query_qp_wqs`).
    pub fn wq_layout(&self) -> Result<(WqLayout, WqLayout)> {
        self.inner.wq_layout()
    }
    /// The raw QP.
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.inner.qp.as_ptr()
    }
    /// Back to RESET (posted work requests are forgotten).
    pub fn reset(self) -> Result<Qp<'a, Reset>, TransitionError<Self>> {
        match self.inner.set_state(QpStateKind::Reset) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
    /// Forgets the compile-time state (for QPs whose state is only known at run time).
    pub fn into_dyn(self) -> DynQp<'a> {
        DynQp {
            inner: self.inner,
            state: S::KIND,
        }
    }
    /// Raw `ibv_modify_qp` escape hatch.
    ///
    /// # Safety
    /// The call must leave the QP in state `S` (the type still claims it), or the caller
    /// must convert it with [`into_dyn`](Self::into_dyn) before any other use.
    pub unsafe fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        self.inner.modify(attr, mask)
    }
    /// Destroys the QP, reporting failure.
    pub fn close(self) -> Result<(), (Self, Error)> {
        // SAFETY: owned QP destroyed once (Drop skipped below on success).
        let rc = unsafe { ffi::ibv_destroy_qp(self.inner.qp.as_ptr()) };
        if rc != 0 {
            return Err((self, Error::verb(Verb::DestroyQp, rc)));
        }
        core::mem::forget(self);
        Ok(())
    }
}

impl<'a> Qp<'a, Reset> {
    /// RESET → INIT with `qkey` (pkey index 0, port 1).
    pub fn init(mut self, qkey: u32) -> Result<Qp<'a, Init>, TransitionError<Self>> {
        match self.inner.set_init(qkey) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }

    /// RESET → INIT → RTR → RTS in one call. On failure the QP is reset and handed back
    /// (as a [`DynQp`] in whatever state it ended up if even that failed).
    pub fn prepare(
        self,
        qkey: u32,
        rnr_retry: Option<u8>,
    ) -> Result<Qp<'a, Rts>, TransitionError<DynQp<'a>>> {
        let fail = |qp: DynQp<'a>, error: Error| {
            let mut qp = qp;
            let _ = qp.modify_state(QpStateKind::Reset);
            Err(TransitionError { qp, error })
        };
        let init = self.init(qkey).map_err(|e| TransitionError {
            qp: e.qp.into_dyn(),
            error: e.error,
        })?;
        let rtr = match init.rtr() {
            Ok(q) => q,
            Err(e) => return fail(e.qp.into_dyn(), e.error),
        };
        match rtr.rts(RtsOptions {
            rnr_retry,
            sq_psn: 0,
        }) {
            Ok(q) => Ok(q),
            Err(e) => fail(e.qp.into_dyn(), e.error),
        }
    }
}

impl<'a> Qp<'a, Init> {
    /// INIT → RTR.
    pub fn rtr(self) -> Result<Qp<'a, Rtr>, TransitionError<Self>> {
        match self.inner.set_state(QpStateKind::Rtr) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

impl<'a> Qp<'a, Rtr> {
    /// RTR → RTS.
    pub fn rts(self, opts: RtsOptions) -> Result<Qp<'a, Rts>, TransitionError<Self>> {
        match self.inner.set_rts(opts) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

impl<S: RecvReady> Qp<'_, S> {
    /// Posts a batch of receives as one chain. No allocation.
    ///
    /// # Safety
    /// The device writes incoming data into the batch's buffers at any time until each
    /// receive's completion has been polled (or the QP is reset or destroyed): until then
    /// the caller must not read or write those bytes, and the memory must stay allocated
    /// (not freed or reused — which a leaked `Mr` over borrowed memory would allow).
    /// Dropping the `Mr` early is harmless: the device then fails the receive instead of
    /// writing.
    ///
    /// On [`Error::RecvQueueFull`] the first `posted` receives were posted.
    pub unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_recv(batch) }
    }
}

impl Qp<'_, Rts> {
    /// Posts a batch of sends/RDMA operations in one `ibv_wr_start … ibv_wr_complete`
    /// session (one doorbell). All or nothing: on error none of the batch was posted.
    /// [`Error::SendQueueFull`] means: poll completions, then post again.
    ///
    /// # Safety
    /// The device reads (send, write) or writes (read) the bytes the batch's SGEs name
    /// at any time until that work request's completion has been polled (or the QP is
    /// reset or destroyed): until then the caller must not write those bytes (sources)
    /// or access them at all (RDMA-read destinations), and the memory must stay allocated
    /// (not freed or reused). Inline payloads are copied during the call and are exempt.
    pub unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_send(batch) }
    }
}

impl<S: QpState> core::fmt::Debug for Qp<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("type", &self.inner.qp_type)
            .field("state", &S::KIND)
            .field("caps", &self.inner.caps)
            .finish()
    }
}

/// A QP whose state is tracked at run time: for code that restores QPs, reacts to
/// async errors or drives the state machine from data. Posting checks the state.
pub struct DynQp<'a> {
    inner: QpInner<'a>,
    state: QpStateKind,
}

impl<'a> DynQp<'a> {
    /// The state as last set or queried.
    pub fn state(&self) -> QpStateKind {
        self.state
    }
    /// Re-reads the state from the device.
    pub fn refresh_state(&mut self) -> Result<QpStateKind> {
        self.state = self.inner.query()?.state;
        Ok(self.state)
    }
    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }
    /// Limits granted at creation.
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }
    /// Local endpoint info.
    pub fn endpoint(&self) -> EndpointInfo {
        self.inner.endpoint()
    }
    /// Queries the device's view of the QP.
    pub fn query(&self) -> Result<QpAttr> {
        self.inner.query()
    }
    /// Moves to `state` with no optional attributes (RESET→INIT needs [`DynQp::init`]).
    pub fn modify_state(&mut self, state: QpStateKind) -> Result<()> {
        let r = if state == QpStateKind::Rts {
            self.inner.set_rts(RtsOptions::default())
        } else {
            self.inner.set_state(state)
        };
        match r {
            Ok(()) => {
                self.state = state;
                Ok(())
            }
            Err(e) => {
                let _ = self.refresh_state();
                Err(e)
            }
        }
    }
    /// RESET → INIT with `qkey`.
    pub fn init(&mut self, qkey: u32) -> Result<()> {
        self.inner.set_init(qkey)?;
        self.state = QpStateKind::Init;
        Ok(())
    }
    /// Any `ibv_modify_qp`; the tracked state is re-read afterwards.
    pub fn modify(&mut self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<()> {
        let r = self.inner.modify(attr, mask);
        if mask & ATTR_QKEY != 0 && r.is_ok() {
            self.inner.qkey = attr.qkey;
        }
        let _ = self.refresh_state();
        r
    }
    /// Converts back to a typed QP if it is in state `S`.
    pub fn into_typed<S: QpState>(self) -> Result<Qp<'a, S>, TransitionError<Self>> {
        if self.state == S::KIND {
            Ok(Qp {
                inner: self.inner,
                _state: PhantomData,
            })
        } else {
            let error = InvalidInput::WrongQpState {
                expected: S::KIND,
                actual: self.state,
            }
            .into();
            Err(TransitionError { qp: self, error })
        }
    }
    /// Posts sends if the QP is in RTS (else [`InvalidInput::WrongQpState`]).
    ///
    /// # Safety
    /// As [`Qp::post_send`].
    pub unsafe fn post_send<const N: usize>(&self, batch: &SendBatch<'_, N>) -> Result<()> {
        if self.state != QpStateKind::Rts {
            return Err(InvalidInput::WrongQpState {
                expected: QpStateKind::Rts,
                actual: self.state,
            }
            .into());
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_send(batch) }
    }
    /// Posts receives if the QP is in INIT or later (else [`InvalidInput::WrongQpState`]).
    ///
    /// # Safety
    /// As [`Qp::post_recv`].
    pub unsafe fn post_recv<const N: usize>(&self, batch: &RecvBatch<'_, N>) -> Result<()> {
        if !self.state.can_post_recv() {
            return Err(InvalidInput::WrongQpState {
                expected: QpStateKind::Init,
                actual: self.state,
            }
            .into());
        }
        // SAFETY: forwarded contract.
        unsafe { self.inner.post_recv(batch) }
    }
}

impl core::fmt::Debug for DynQp<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DynQp")
            .field("qpn", &self.qpn())
            .field("state", &self.state)
            .finish()
    }
}
