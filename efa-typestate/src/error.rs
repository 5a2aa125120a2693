//! The one error type of this crate: small, `Copy`, and specific about what failed.

use core::fmt;

/// A positive `errno` value as rdma-core reports it (EINVAL, ENOMEM, EOPNOTSUPP, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// EPERM.
    pub const EPERM: Errno = Errno(1);
    /// ENOENT.
    pub const ENOENT: Errno = Errno(2);
    /// EINTR.
    pub const EINTR: Errno = Errno(4);
    /// EIO.
    pub const EIO: Errno = Errno(5);
    /// EAGAIN.
    pub const EAGAIN: Errno = Errno(11);
    /// ENOMEM: out of memory, or (on post) the queue is full.
    pub const ENOMEM: Errno = Errno(12);
    /// EFAULT.
    pub const EFAULT: Errno = Errno(14);
    /// EBUSY: the object is still in use.
    pub const EBUSY: Errno = Errno(16);
    /// ENODEV.
    pub const ENODEV: Errno = Errno(19);
    /// EINVAL.
    pub const EINVAL: Errno = Errno(22);
    /// ENOSYS.
    pub const ENOSYS: Errno = Errno(38);
    /// ENOTTY (kernel lacks the ioctl method).
    pub const ENOTTY: Errno = Errno(25);
    /// EPROTONOSUPPORT.
    pub const EPROTONOSUPPORT: Errno = Errno(93);
    /// EOPNOTSUPP: the provider does not implement this.
    pub const EOPNOTSUPP: Errno = Errno(95);
    /// ETIMEDOUT.
    pub const ETIMEDOUT: Errno = Errno(110);

    /// Symbolic name and short description, if known.
    pub fn describe(self) -> Option<(&'static str, &'static str)> {
        Some(match self.0 {
            1 => ("EPERM", "operation not permitted"),
            2 => ("ENOENT", "no such entry"),
            4 => ("EINTR", "interrupted"),
            5 => ("EIO", "I/O error"),
            11 => ("EAGAIN", "try again"),
            12 => ("ENOMEM", "out of memory or queue full"),
            13 => ("EACCES", "permission denied"),
            14 => ("EFAULT", "bad address"),
            16 => ("EBUSY", "resource still in use"),
            19 => ("ENODEV", "no such device"),
            22 => ("EINVAL", "invalid argument"),
            24 => ("EMFILE", "too many open files"),
            25 => ("ENOTTY", "not supported by the kernel"),
            28 => ("ENOSPC", "no space left"),
            38 => ("ENOSYS", "not implemented"),
            93 => ("EPROTONOSUPPORT", "protocol not supported"),
            95 => ("EOPNOTSUPP", "operation not supported"),
            110 => ("ETIMEDOUT", "timed out"),
            _ => return None,
        })
    }

    /// True for the errno values rdma-core uses to say "this provider/kernel cannot do it".
    pub fn is_unsupported(self) -> bool {
        matches!(self.0, 95 | 38 | 25 | 93)
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
    /// The QP was created without this send operation in its send-ops set.
    SendOpNotEnabled,
}

/// An EFA completion status (`vendor_err`, `efa_io_comp_status`): what the device says
/// went wrong with one work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EfaStatus(pub u32);

impl EfaStatus {
    /// Success.
    pub const OK: EfaStatus = EfaStatus(0);
    /// Flushed during QP destroy.
    pub const FLUSHED: EfaStatus = EfaStatus(1);
    /// Local internal QP error.
    pub const LOCAL_QP_INTERNAL_ERROR: EfaStatus = EfaStatus(2);
    /// Operation not supported on this QP.
    pub const LOCAL_UNSUPPORTED_OP: EfaStatus = EfaStatus(3);
    /// Invalid address handle.
    pub const LOCAL_INVALID_AH: EfaStatus = EfaStatus(4);
    /// Local key invalid, range outside its MR or access missing.
    pub const LOCAL_INVALID_LKEY: EfaStatus = EfaStatus(5);
    /// Message too long (e.g. larger than the port MTU).
    pub const LOCAL_BAD_LENGTH: EfaStatus = EfaStatus(6);
    /// Remote key invalid, range outside its MR or access missing.
    pub const REMOTE_BAD_ADDRESS: EfaStatus = EfaStatus(7);
    /// Connection reset by the remote.
    pub const REMOTE_ABORT: EfaStatus = EfaStatus(8);
    /// Destination QP does not exist or is in error.
    pub const REMOTE_BAD_DEST_QPN: EfaStatus = EfaStatus(9);
    /// Receiver had no receive posted (RNR retries exhausted).
    pub const REMOTE_RNR: EfaStatus = EfaStatus(10);
    /// Receiver's buffer too short.
    pub const REMOTE_BAD_LENGTH: EfaStatus = EfaStatus(11);
    /// Unexpected status from the responder.
    pub const REMOTE_BAD_STATUS: EfaStatus = EfaStatus(12);
    /// Remote stopped responding.
    pub const LOCAL_UNRESP_REMOTE: EfaStatus = EfaStatus(13);
    /// Remote has no address handle for this sender.
    pub const REMOTE_UNKNOWN_PEER: EfaStatus = EfaStatus(14);
    /// Remote never responded.
    pub const LOCAL_UNREACH_REMOTE: EfaStatus = EfaStatus(15);
    /// Feature mismatch with the remote.
    pub const REMOTE_FEATURE_MISMATCH: EfaStatus = EfaStatus(18);

    /// What this status means, in words.
    pub fn description(self) -> &'static str {
        match self.0 {
            0 => "success",
            1 => "flushed during QP destroy",
            2 => "local QP internal error",
            3 => "operation not supported by this QP",
            4 => "invalid address handle",
            5 => "local key invalid, out of range or lacking access",
            6 => "message too long",
            7 => "remote key invalid, out of range or lacking access",
            8 => "connection reset by the remote",
            9 => "destination QP does not exist or is in error",
            10 => "receiver had no receive buffer posted (RNR retries exhausted)",
            11 => "receiver's buffer is too short",
            12 => "unexpected status from the responder",
            13 => "remote stopped responding",
            14 => "remote has no address handle for this sender",
            15 => "remote is unreachable",
            18 => "feature mismatch with the remote",
            _ => "unknown EFA status",
        }
    }
}

impl fmt::Display for EfaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (EFA status {})", self.description(), self.0)
    }
}

/// Why a user-supplied value was rejected before reaching the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidInput {
    /// An SGE range `[offset, offset+len)` does not lie inside its memory region of `region_len` bytes.
    SgeOutOfBounds {
        /// Offset into the region.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Region length.
        region_len: u64,
    },
    /// A remote range does not lie inside the remote buffer.
    RemoteOutOfBounds {
        /// Offset into the remote buffer.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Remote buffer length.
        buffer_len: u64,
    },
    /// One SGE or RDMA chunk larger than 4 GiB - 1 (the 32-bit length field).
    LengthTooLarge(u64),
    /// A wire format (endpoint info, remote buffer) of the wrong size.
    WireLength {
        /// Bytes the format has.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A QP number that does not fit the 24-bit field.
    QpnOutOfRange(u32),
    /// A work-request batch is full.
    BatchFull,
    /// Inline data longer than the QP's granted `max_inline_data`.
    InlineTooLong {
        /// Bytes given.
        len: usize,
        /// Granted maximum.
        max: u32,
    },
    /// More SGEs in one work request than the QP was created with.
    TooManySges {
        /// SGEs given.
        count: usize,
        /// Granted maximum.
        max: u32,
    },
    /// A chunk size of zero.
    ZeroChunkSize,
    /// The QP is not in the state this operation needs.
    WrongQpState {
        /// State required.
        expected: crate::qp::QpStateKind,
        /// State it is in.
        actual: crate::qp::QpStateKind,
    },
    /// The port number does not exist (EFA devices have port 1 only).
    NoSuchPort(u8),
    /// The completion channel belongs to another device context.
    ForeignObject,
    /// RDMA read into inline data is impossible.
    InlineRead,
    /// REMOTE_WRITE on borrowed memory: a leaked `Mr` would let peers write memory that
    /// is reused (register an owned buffer, or use `Pd::register_raw`).
    RemoteWriteNeedsOwnedMemory,
    /// `rnr_retry` must be 0..=7 (7 = retry forever).
    RnrRetryOutOfRange(u8),
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InvalidInput::SgeOutOfBounds { offset, len, region_len } => write!(
                f,
                "SGE [{offset}, {offset}+{len}) lies outside its memory region of {region_len} bytes"
            ),
            InvalidInput::RemoteOutOfBounds { offset, len, buffer_len } => write!(
                f,
                "remote range [{offset}, {offset}+{len}) lies outside the remote buffer of {buffer_len} bytes"
            ),
            InvalidInput::LengthTooLarge(n) => write!(f, "length {n} does not fit 32 bits"),
            InvalidInput::WireLength { expected, got } => {
                write!(f, "wire format must be {expected} bytes, got {got}")
            }
            InvalidInput::QpnOutOfRange(q) => write!(f, "QP number {q:#x} does not fit 24 bits"),
            InvalidInput::BatchFull => write!(f, "work-request batch is full"),
            InvalidInput::InlineTooLong { len, max } => {
                write!(f, "inline data of {len} bytes exceeds the QP's maximum of {max}")
            }
            InvalidInput::TooManySges { count, max } => {
                write!(f, "{count} SGEs exceed the QP's maximum of {max}")
            }
            InvalidInput::ZeroChunkSize => write!(f, "chunk size must not be zero"),
            InvalidInput::WrongQpState { expected, actual } => {
                write!(f, "QP is in state {actual:?}, this needs {expected:?}")
            }
            InvalidInput::NoSuchPort(p) => write!(f, "port {p} does not exist (EFA has port 1)"),
            InvalidInput::ForeignObject => write!(f, "object belongs to another device context"),
            InvalidInput::InlineRead => write!(f, "RDMA read cannot target inline data"),
            InvalidInput::RemoteWriteNeedsOwnedMemory => write!(
                f,
                "remote write access needs owned memory (Vec/Box) or register_raw, not a borrow"
            ),
            InvalidInput::RnrRetryOutOfRange(n) => write!(f, "rnr_retry {n} is out of range 0..=7"),
        }
    }
}

/// Everything that can go wrong in this crate. Small and `Copy`: cheap to return on
/// the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed with an errno.
    Verb {
        /// Which call.
        verb: Verb,
        /// What it returned.
        errno: Errno,
    },
    /// A feature this device, provider or library does not offer.
    Unsupported {
        /// Which call.
        verb: Verb,
        /// Why.
        why: Unsupported,
    },
    /// The send queue has no free slot (ENOMEM from `ibv_wr_complete`); nothing of the
    /// batch was posted. Poll completions and retry.
    SendQueueFull,
    /// The receive queue has no free slot; the first `posted` receives of the batch were
    /// posted, the rest were not.
    RecvQueueFull {
        /// How many of the batch were posted before the queue filled.
        posted: usize,
    },
    /// A work request completed with an error.
    Completion {
        /// The verbs status (`ibv_wc_status`).
        status: crate::cq::WcStatus,
        /// The EFA status (`vendor_err`), which says precisely what happened.
        efa: EfaStatus,
    },
    /// Input rejected before it reached the device.
    Invalid(InvalidInput),
    /// No (EFA) device with that name or index.
    NoSuchDevice,
    /// A wait ran out of time.
    Timeout,
}

impl Error {
    pub(crate) fn verb(verb: Verb, errno: i32) -> Error {
        let errno = Errno(errno);
        if errno.is_unsupported() {
            Error::Unsupported {
                verb,
                why: Unsupported::Provider(errno),
            }
        } else {
            Error::Verb { verb, errno }
        }
    }
    /// Error from a creator that returned NULL: reads `errno`.
    pub(crate) fn last_os(verb: Verb) -> Error {
        let e = crate::ffi::errno();
        Error::verb(verb, if e == 0 { Errno::EINVAL.0 } else { e })
    }

    /// The errno behind this error, if it came from a verb.
    pub fn errno(&self) -> Option<Errno> {
        match *self {
            Error::Verb { errno, .. } => Some(errno),
            Error::Unsupported {
                why: Unsupported::Provider(e),
                ..
            } => Some(e),
            Error::SendQueueFull | Error::RecvQueueFull { .. } => Some(Errno::ENOMEM),
            _ => None,
        }
    }

    /// True if the device, provider or library cannot do this at all.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    /// The EFA status of a failed completion.
    pub fn efa_status(&self) -> Option<EfaStatus> {
        match *self {
            Error::Completion { efa, .. } => Some(efa),
            _ => None,
        }
    }
}

impl From<InvalidInput> for Error {
    fn from(e: InvalidInput) -> Self {
        Error::Invalid(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Verb { verb, errno } => write!(f, "{} failed: {errno}", verb.name()),
            Error::Unsupported { verb, why } => match why {
                Unsupported::Provider(e) => {
                    write!(f, "{} is not supported by this provider: {e}", verb.name())
                }
                Unsupported::NotInLibrary => {
                    write!(
                        f,
                        "{} is not provided by this libefa (too old)",
                        verb.name()
                    )
                }
                Unsupported::MissingCapability(c) => {
                    write!(f, "{}: the device lacks capability {c:?}", verb.name())
                }
                Unsupported::SendOpNotEnabled => write!(
                    f,
                    "{}: the QP was created without this operation in its send ops",
                    verb.name()
                ),
            },
            Error::SendQueueFull => write!(f, "send queue is full (poll completions, then retry)"),
            Error::RecvQueueFull { posted } => {
                write!(f, "receive queue is full after posting {posted} receives")
            }
            Error::Completion { status, efa } => {
                write!(f, "work request failed: {efa} [{}]", status.name())
            }
            Error::Invalid(e) => e.fmt(f),
            Error::NoSuchDevice => write!(f, "no such EFA device"),
            Error::Timeout => write!(f, "timed out"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

static_assertions::assert_impl_all!(Error: Copy, Send, Sync);
static_assertions::const_assert!(core::mem::size_of::<Error>() <= 32);
