//! The codes an [`Error`](super::Error) carries: errno values, verbs, EFA completion
//! statuses and the reasons a feature is unsupported. Numbers come from `libc` and
//! `efa_sys::vendor`, never literals.

use core::fmt;

use efa_sys::vendor::comp_status;

/// A positive `errno` value as rdma-core reports it (EINVAL, ENOMEM, EOPNOTSUPP, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// EPERM.
    pub const EPERM: Errno = Errno(libc::EPERM);
    /// ENOENT.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// EINTR.
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// EIO.
    pub const EIO: Errno = Errno(libc::EIO);
    /// EAGAIN.
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    /// ENOMEM: out of memory, or (on post) the queue is full.
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    /// EBADF: a closed or foreign handle.
    pub const EBADF: Errno = Errno(libc::EBADF);
    /// EFAULT.
    pub const EFAULT: Errno = Errno(libc::EFAULT);
    /// EBUSY: the object is still in use.
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    /// ENODEV.
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    /// EINVAL.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// ENOSYS.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// ENOTTY (kernel lacks the ioctl method).
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    /// EPROTONOSUPPORT.
    pub const EPROTONOSUPPORT: Errno = Errno(libc::EPROTONOSUPPORT);
    /// EOPNOTSUPP: the provider does not implement this.
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// ETIMEDOUT.
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);

    /// Symbolic name and short description, if known.
    pub fn describe(self) -> Option<(&'static str, &'static str)> {
        Some(match self.0 {
            libc::EPERM => ("EPERM", "operation not permitted"),
            libc::ENOENT => ("ENOENT", "no such entry"),
            libc::EINTR => ("EINTR", "interrupted"),
            libc::EIO => ("EIO", "I/O error"),
            libc::EBADF => ("EBADF", "bad handle"),
            libc::EAGAIN => ("EAGAIN", "try again"),
            libc::ENOMEM => ("ENOMEM", "out of memory or queue full"),
            libc::EACCES => ("EACCES", "permission denied"),
            libc::EFAULT => ("EFAULT", "bad address"),
            libc::EBUSY => ("EBUSY", "resource still in use"),
            libc::ENODEV => ("ENODEV", "no such device"),
            libc::EINVAL => ("EINVAL", "invalid argument"),
            libc::EMFILE => ("EMFILE", "too many open files"),
            libc::ENOTTY => ("ENOTTY", "not supported by the kernel"),
            libc::ENOSPC => ("ENOSPC", "no space left"),
            libc::ENOSYS => ("ENOSYS", "not implemented"),
            libc::EPROTONOSUPPORT => ("EPROTONOSUPPORT", "protocol not supported"),
            libc::EOPNOTSUPP => ("EOPNOTSUPP", "operation not supported"),
            libc::ETIMEDOUT => ("ETIMEDOUT", "timed out"),
            _ => return None,
        })
    }

    /// True for the errno values rdma-core uses to say "this provider/kernel cannot do it".
    pub fn is_unsupported(self) -> bool {
        matches!(
            self.0,
            libc::EOPNOTSUPP | libc::ENOSYS | libc::ENOTTY | libc::EPROTONOSUPPORT
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.describe() {
            Some((name, what)) => write!(f, "{name} ({what})"),
            None => write!(f, "errno {}", self.0),
        }
    }
}

/// The verb (or efadv entry point) that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant is the C function of the same name
pub enum Verb {
    GetDeviceList,
    OpenDevice,
    CloseDevice,
    QueryDevice,
    QueryPort,
    QueryGid,
    GetAsyncEvent,
    EfadvQueryDevice,
    AllocPd,
    DeallocPd,
    RegMr,
    RegDmabufMr,
    DeregMr,
    EfadvQueryMr,
    CreateAh,
    DestroyAh,
    EfadvQueryAh,
    CreateCompChannel,
    DestroyCompChannel,
    GetCqEvent,
    CreateCq,
    EfadvCreateCq,
    DestroyCq,
    PollCq,
    ReqNotifyCq,
    EfadvQueryCq,
    CreateQp,
    EfadvCreateQp,
    QpToQpEx,
    ModifyQp,
    QueryQp,
    DestroyQp,
    EfadvQueryQpWqs,
    PostSend,
    PostRecv,
}

impl Verb {
    /// The C name of the verb.
    pub fn name(self) -> &'static str {
        use Verb::*;
        match self {
            GetDeviceList => "ibv_get_device_list",
            OpenDevice => "ibv_open_device",
            CloseDevice => "ibv_close_device",
            QueryDevice => "ibv_query_device",
            QueryPort => "ibv_query_port",
            QueryGid => "ibv_query_gid",
            GetAsyncEvent => "ibv_get_async_event",
            EfadvQueryDevice => "efadv_query_device",
            AllocPd => "ibv_alloc_pd",
            DeallocPd => "ibv_dealloc_pd",
            RegMr => "ibv_reg_mr",
            RegDmabufMr => "ibv_reg_dmabuf_mr",
            DeregMr => "ibv_dereg_mr",
            EfadvQueryMr => "efadv_query_mr",
            CreateAh => "ibv_create_ah",
            DestroyAh => "ibv_destroy_ah",
            EfadvQueryAh => "efadv_query_ah",
            CreateCompChannel => "ibv_create_comp_channel",
            DestroyCompChannel => "ibv_destroy_comp_channel",
            GetCqEvent => "ibv_get_cq_event",
            CreateCq => "ibv_create_cq",
            EfadvCreateCq => "efadv_create_cq",
            DestroyCq => "ibv_destroy_cq",
            PollCq => "ibv_poll_cq",
            ReqNotifyCq => "ibv_req_notify_cq",
            EfadvQueryCq => "efadv_query_cq",
            CreateQp => "ibv_create_qp_ex",
            EfadvCreateQp => "efadv_create_qp_ex",
            QpToQpEx => "ibv_qp_to_qp_ex",
            ModifyQp => "ibv_modify_qp",
            QueryQp => "ibv_query_qp",
            DestroyQp => "ibv_destroy_qp",
            EfadvQueryQpWqs => "efadv_query_qp_wqs",
            PostSend => "ibv_wr_complete",
            PostRecv => "ibv_post_recv",
        }
    }
}

/// Why a feature is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unsupported {
    /// The provider or kernel answered with this errno (EOPNOTSUPP, ENOTTY, ...).
    Provider(Errno),
    /// The loaded libefa does not export the entry point (it predates it).
    NotInLibrary,
    /// The device does not advertise the capability.
    MissingCapability(crate::context::DeviceCaps),
}

/// An EFA completion status (`vendor_err`, `efa_io_comp_status`): what the device says
/// went wrong with one work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EfaStatus(pub u32);

impl EfaStatus {
    /// Success.
    pub const OK: EfaStatus = EfaStatus(comp_status::OK);
    /// Flushed during QP destroy.
    pub const FLUSHED: EfaStatus = EfaStatus(comp_status::FLUSHED);
    /// Local internal QP error.
    pub const LOCAL_QP_INTERNAL_ERROR: EfaStatus =
        EfaStatus(comp_status::LOCAL_ERROR_QP_INTERNAL_ERROR);
    /// Operation not supported on this QP.
    pub const LOCAL_UNSUPPORTED_OP: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_UNSUPPORTED_OP);
    /// Invalid address handle.
    pub const LOCAL_INVALID_AH: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_INVALID_AH);
    /// Local key invalid, range outside its MR or access missing.
    pub const LOCAL_INVALID_LKEY: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_INVALID_LKEY);
    /// Message too long (e.g. larger than the port MTU).
    pub const LOCAL_BAD_LENGTH: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_BAD_LENGTH);
    /// Remote key invalid, range outside its MR or access missing.
    pub const REMOTE_BAD_ADDRESS: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_BAD_ADDRESS);
    /// Connection reset by the remote.
    pub const REMOTE_ABORT: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_ABORT);
    /// Destination QP does not exist or is in error.
    pub const REMOTE_BAD_DEST_QPN: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_BAD_DEST_QPN);
    /// Receiver had no receive posted (RNR retries exhausted).
    pub const REMOTE_RNR: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_RNR);
    /// Receiver's buffer too short.
    pub const REMOTE_BAD_LENGTH: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_BAD_LENGTH);
    /// Unexpected status from the responder.
    pub const REMOTE_BAD_STATUS: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_BAD_STATUS);
    /// Remote stopped responding.
    pub const LOCAL_UNRESP_REMOTE: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_UNRESP_REMOTE);
    /// Remote has no address handle for this sender.
    pub const REMOTE_UNKNOWN_PEER: EfaStatus = EfaStatus(comp_status::REMOTE_ERROR_UNKNOWN_PEER);
    /// Remote never responded.
    pub const LOCAL_UNREACH_REMOTE: EfaStatus = EfaStatus(comp_status::LOCAL_ERROR_UNREACH_REMOTE);
    /// Feature mismatch with the remote.
    pub const REMOTE_FEATURE_MISMATCH: EfaStatus =
        EfaStatus(comp_status::REMOTE_ERROR_FEATURE_MISMATCH);

    /// What this status means, in words.
    pub fn description(self) -> &'static str {
        use comp_status::*;
        match self.0 {
            OK => "success",
            FLUSHED => "flushed during QP destroy",
            LOCAL_ERROR_QP_INTERNAL_ERROR => "local QP internal error",
            LOCAL_ERROR_UNSUPPORTED_OP => "operation not supported by this QP",
            LOCAL_ERROR_INVALID_AH => "invalid address handle",
            LOCAL_ERROR_INVALID_LKEY => "local key invalid, out of range or lacking access",
            LOCAL_ERROR_BAD_LENGTH => "message too long",
            REMOTE_ERROR_BAD_ADDRESS => "remote key invalid, out of range or lacking access",
            REMOTE_ERROR_ABORT => "connection reset by the remote",
            REMOTE_ERROR_BAD_DEST_QPN => "destination QP does not exist or is in error",
            REMOTE_ERROR_RNR => "receiver had no receive buffer posted (RNR retries exhausted)",
            REMOTE_ERROR_BAD_LENGTH => "receiver's buffer is too short",
            REMOTE_ERROR_BAD_STATUS => "unexpected status from the responder",
            LOCAL_ERROR_UNRESP_REMOTE => "remote stopped responding",
            REMOTE_ERROR_UNKNOWN_PEER => "remote has no address handle for this sender",
            LOCAL_ERROR_UNREACH_REMOTE => "remote is unreachable",
            REMOTE_ERROR_FEATURE_MISMATCH => "feature mismatch with the remote",
            _ => "unknown EFA status",
        }
    }
}

impl fmt::Display for EfaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (EFA status {})", self.description(), self.0)
    }
}
