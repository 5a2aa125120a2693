//! QP creation: options checked against the device and the QP type, SRD through
//! `efadv_create_qp_ex`, UD through `ibv_create_qp_ex`, with extended send ops.

use core::marker::PhantomData;
use core::ptr::NonNull;

use super::config::{Backend, QpCaps, QpConfig, QpType};
use super::device_limits;
use super::raw::{QpInner, EFA_PORT};
use super::send_fns::{PostRecvFn, SendFns};
use super::{Qp, Reset};
use crate::context::{Context, DeviceCaps};
use crate::cq::CompletionQueue;
use crate::error::{CqRole, DirectError, Error, InvalidInput, Result, SrdOnly, Unsupported, Verb};
use crate::ffi::{self, ibv_qp_init_attr_mask as InitMask, ibv_qp_type};
use crate::parent::{Parent, Sibling};
use crate::pd::Pd;
use crate::wr::{QpLimits, SendOps};

impl<C: Parent<Target = Context>> Pd<C> {
    /// Creates a QP borrowing this PD and its CQs: [`Qp::new`]. The QP starts in
    /// [`Reset`].
    pub fn create_qp<'a, S: CompletionQueue, R: CompletionQueue>(
        &'a self,
        send_cq: &'a S,
        recv_cq: &'a R,
        config: &QpConfig,
    ) -> Result<Qp<&'a Self, Reset>> {
        Qp::new(self, send_cq, recv_cq, config)
    }
}

/// The send operations a QP gets: as configured, or every one the device offers.
fn send_ops_for(config: &QpConfig, device_caps: DeviceCaps) -> SendOps {
    config.send_ops.unwrap_or(match config.qp_type {
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
    })
}

/// Refuses, before the device sees them, options the QP type or the device cannot have.
fn check_config(config: &QpConfig, send_ops: SendOps, caps: DeviceCaps, verb: Verb) -> Result<()> {
    let rdma = SendOps::RDMA_READ | SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM;
    if config.qp_type == QpType::Ud {
        if send_ops.intersects(rdma) {
            return Err(InvalidInput::RdmaOnUd.into());
        }
        if config.unsolicited_write_recv {
            return Err(InvalidInput::SrdOnly(SrdOnly::UnsolicitedWriteRecv).into());
        }
        if config.inline_write {
            return Err(InvalidInput::SrdOnly(SrdOnly::InlineWrite).into());
        }
        return Ok(());
    }
    let missing = |cap: DeviceCaps| Error::Unsupported {
        verb,
        why: Unsupported::MissingCapability(cap),
    };
    if send_ops.contains(SendOps::RDMA_READ) && !caps.contains(DeviceCaps::RDMA_READ) {
        return Err(missing(DeviceCaps::RDMA_READ));
    }
    let write = SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM;
    if send_ops.intersects(write) && !caps.contains(DeviceCaps::RDMA_WRITE) {
        return Err(missing(DeviceCaps::RDMA_WRITE));
    }
    if config.unsolicited_write_recv && !caps.contains(DeviceCaps::UNSOLICITED_WRITE_RECV) {
        return Err(missing(DeviceCaps::UNSOLICITED_WRITE_RECV));
    }
    if config.inline_write && !caps.contains(DeviceCaps::RDMA_WRITE) {
        return Err(missing(DeviceCaps::RDMA_WRITE));
    }
    Ok(())
}

impl<P> Qp<P, Reset> {
    /// Creates a QP in `pd` whose sends complete on `send_cq` and receives on `recv_cq`
    /// (SRD through `efadv_create_qp_ex`, UD through `ibv_create_qp_ex`), with extended
    /// send ops (`ibv_qp_ex`). The CQs are held the way `pd` is: borrows of the same
    /// lifetime beside `&Pd`, `Arc`s beside `Arc<Pd>`. Options the QP type or the device
    /// cannot have are refused before the device sees them. The QP starts in [`Reset`].
    ///
    /// Limits are checked before the provider is called: queue depths, SGE counts and
    /// inline size beyond the device's are
    /// [`InvalidInput::ExceedsDeviceLimit`],
    /// naming the parameter, the value asked for and the device's limit.
    ///
    /// The CQs must hold every completion the QP can have outstanding, or they could
    /// overflow on hardware: the send CQ at least the QP's send depth, the receive CQ its
    /// receive depth, a CQ serving both their sum, else
    /// [`InvalidInput::CqTooSmall`]. Both sides of this
    /// check are the *granted* sizes: the QP's depths as the device granted them (it may
    /// round a request up, to a power of two for instance; those are what batches and the
    /// rings allow outstanding), so this check runs right after creation and destroys
    /// the new QP when it fails; and the CQs' granted depths ([`CompletionQueue::depth`]).
    /// Only this QP is counted: a CQ shared by several QPs must hold all of theirs.
    pub fn new<C, SC, RC>(pd: P, send_cq: SC, recv_cq: RC, config: &QpConfig) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
        SC: Sibling<P>,
        SC::Target: CompletionQueue,
        RC: Sibling<P>,
        RC::Target: CompletionQueue,
    {
        Self::with_cqs(pd, send_cq, recv_cq, config, true)
    }
}

impl<P> Qp<P, Reset> {
    /// For efa-py (hidden: Rust programs get [`InvalidInput::CqTooSmall`]'s protection).
    /// As [`Qp::new`], but CQs smaller than the QP's depths are accepted, as libefa
    /// accepts them (no [`InvalidInput::CqTooSmall`]); every other check is the same.
    ///
    /// The caller takes over what that check guarded: a CQ must never hold more
    /// completions than its depth (the device would overflow it and completions would
    /// be lost), so the caller bounds the work requests outstanding on each CQ by its
    /// free entries when posting. efa-py does (its CQs count the requests posted to
    /// them and refuse a post that could overflow one).
    #[doc(hidden)]
    pub fn new_bounding_cqs<C, SC, RC>(
        pd: P,
        send_cq: SC,
        recv_cq: RC,
        config: &QpConfig,
    ) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
        SC: Sibling<P>,
        SC::Target: CompletionQueue,
        RC: Sibling<P>,
        RC::Target: CompletionQueue,
    {
        Self::with_cqs(pd, send_cq, recv_cq, config, false)
    }

    /// [`Qp::new`]; `check_depths`: whether the CQs must hold the QP's depths.
    fn with_cqs<C, SC, RC>(
        pd: P,
        send_cq: SC,
        recv_cq: RC,
        config: &QpConfig,
        check_depths: bool,
    ) -> Result<Self>
    where
        P: Parent<Target = Pd<C>>,
        C: Parent<Target = Context>,
        SC: Sibling<P>,
        SC::Target: CompletionQueue,
        RC: Sibling<P>,
        RC::Target: CompletionQueue,
    {
        // Without the check, depths no QP can exceed: `check_cqs` passes.
        let depth = |d: u32| if check_depths { d } else { u32::MAX };
        let cqs = CqsOf {
            send: send_cq.as_cq_ptr(),
            recv: recv_cq.as_cq_ptr(),
            send_depth: depth(send_cq.depth()),
            recv_depth: depth(recv_cq.depth()),
            #[cfg(feature = "std")]
            direct: [send_cq.direct_cq().cloned(), recv_cq.direct_cq().cloned()],
            direct_roles: [
                send_cq.backend() == Backend::Direct,
                recv_cq.backend() == Backend::Direct,
            ],
        };
        let inner = create_inner(&pd, cqs, config)?;
        Ok(Qp {
            inner,
            _state: PhantomData,
            _cqs: [send_cq.into_keep(), recv_cq.into_keep()],
            _pd: pd,
        })
    }
}

/// The QP's CQs and their granted depths.
struct CqsOf {
    send: *mut ffi::ibv_cq,
    recv: *mut ffi::ibv_cq,
    send_depth: u32,
    recv_depth: u32,
    /// The direct state of each CQ (send, receive) that has one.
    #[cfg(feature = "std")]
    direct: [Option<std::sync::Arc<crate::direct::backend::DirectCq>>; 2],
    /// Whether each CQ (send, receive) is direct.
    direct_roles: [bool; 2],
}

/// Refuses a QP whose backend its CQs cannot serve: a direct QP needs direct CQs, a
/// provider QP provider CQs (naming the CQ's role).
fn check_backends(cqs: &CqsOf, backend: Backend) -> Result<()> {
    let direct = backend == Backend::Direct;
    let role = |i: usize| {
        if cqs.send == cqs.recv {
            CqRole::Shared
        } else if i == 0 {
            CqRole::Send
        } else {
            CqRole::Recv
        }
    };
    for (i, &is_direct) in cqs.direct_roles.iter().enumerate() {
        if direct && !is_direct {
            return Err(DirectError::CqNotDirect(role(i)).into());
        }
        if !direct && is_direct {
            return Err(DirectError::CqIsDirect(role(i)).into());
        }
    }
    Ok(())
}

fn create_inner<C: Parent<Target = Context>>(
    pd: &Pd<C>,
    cqs: CqsOf,
    config: &QpConfig,
) -> Result<QpInner> {
    let ctx = pd.context();
    let dev = ctx.efa_attr().ok();
    let device_caps = ctx.caps();
    let verb = match config.qp_type {
        QpType::Srd => Verb::EfadvCreateQp,
        QpType::Ud => Verb::CreateQp,
    };
    let send_ops = send_ops_for(config, device_caps);
    check_config(config, send_ops, device_caps, verb)?;
    // `Auto` follows the CQs: direct where both are (a direct CQ only serves direct QPs).
    let backend = match config.backend {
        Backend::Auto if cqs.direct_roles == [true, true] => Backend::Direct,
        Backend::Auto => Backend::Provider,
        chosen => chosen,
    };
    if backend == Backend::Direct {
        // The operator's switch and the device's sub-CQs come first, so the error names
        // why rather than that the CQs are not direct.
        crate::cq::direct_allowed(ctx)?;
    }
    check_backends(&cqs, backend)?;
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
    device_limits::check_qp_caps(ctx, dev.as_ref(), &caps, config.inline_write)?;
    let gid = ctx.gid()?;
    let max_msg = ctx.query_port(EFA_PORT)?.max_msg_sz;

    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex (null pointers, zero integers).
    let mut attr: ffi::ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    attr.send_cq = cqs.send;
    attr.recv_cq = cqs.recv;
    attr.cap = ffi::ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline_data,
    };
    attr.sq_sig_all = 0;
    attr.comp_mask = InitMask::IBV_QP_INIT_ATTR_PD.0 | InitMask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0;
    attr.pd = pd.as_ptr();
    attr.send_ops_flags = send_ops.bits() as u64;

    let raw = match config.qp_type {
        QpType::Srd => {
            attr.qp_type = ibv_qp_type::IBV_QPT_DRIVER;
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
            attr.qp_type = ibv_qp_type::IBV_QPT_UD;
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
    let not_in_library = |verb| Error::Unsupported {
        verb,
        why: Unsupported::NotInLibrary,
    };
    // SAFETY: live QP created with SEND_OPS_FLAGS.
    let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) };
    if qpx.is_null() {
        return destroy(not_in_library(Verb::QpToQpEx));
    }
    // SAFETY: live ibv_qp_ex.
    let Some(fns) = (unsafe { SendFns::load(qpx, send_ops) }) else {
        return destroy(not_in_library(Verb::QpToQpEx));
    };
    // SAFETY: the QP's context is open; its ops table is readable.
    let post_recv: Option<PostRecvFn> = unsafe { (*(*qp.as_ptr()).context).ops.post_recv };
    let Some(post_recv) = post_recv else {
        return destroy(not_in_library(Verb::PostRecv));
    };
    let granted = QpCaps {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    if let Err(e) = device_limits::check_cqs(
        cqs.send == cqs.recv,
        cqs.send_depth,
        cqs.recv_depth,
        &granted,
    ) {
        return destroy(e);
    }
    let limits = QpLimits {
        pd: pd.id(),
        qp_type: config.qp_type,
        send_ops,
        max_send_wr: granted.max_send_wr,
        max_recv_wr: granted.max_recv_wr,
        max_send_sge: granted.max_send_sge,
        max_recv_sge: granted.max_recv_sge,
        max_inline: granted.max_inline_data,
        max_msg,
        max_rdma: dev.map_or(0, |d| d.max_rdma_size),
        inline_write: config.inline_write,
    };
    #[allow(unused_mut)] // mutated only with the direct backend (std)
    let mut inner = QpInner {
        qp,
        qpx,
        fns,
        post_recv,
        limits,
        caps: granted,
        device_caps,
        gid,
        qkey: 0,
        #[cfg(feature = "std")]
        direct: None,
    };
    #[cfg(feature = "std")]
    if backend == Backend::Direct {
        // Dropping `inner` on failure destroys the new QP.
        inner.direct = Some(direct_link(&inner, cqs)?);
    }
    Ok(inner)
}

/// The direct state of a new direct QP, registered with its CQs. Querying the rings is
/// also what tells the device (efa-sim: its doorbell watcher) that they are driven
/// directly; the QP is never posted through the provider from then on.
#[cfg(feature = "std")]
fn direct_link(inner: &QpInner, cqs: CqsOf) -> Result<super::raw::DirectLink> {
    let (sq, rq) = inner
        .wq_layout()
        .map_err(|_| DirectError::RingsUnavailable(Verb::EfadvQueryQpWqs))?;
    let qp = crate::direct::backend::DirectQp::new(
        inner.qp.as_ptr(),
        inner.qpn(),
        sq,
        rq,
        inner.caps.max_recv_wr,
    )?;
    let mut list = arrayvec::ArrayVec::new();
    let [send, recv] = cqs.direct;
    for cq in [send, recv].into_iter().flatten() {
        if !list.iter().any(|c| std::sync::Arc::ptr_eq(c, &cq)) {
            cq.register(&qp);
            list.push(cq);
        }
    }
    Ok(super::raw::DirectLink { qp, cqs: list })
}
