//! The one error type of this crate: small (16 bytes), `Copy`, and specific about what
//! failed.

use core::fmt;

mod codes;
mod direct;
mod invalid;

pub use codes::{EfaStatus, Errno, Unsupported, Verb};
pub use direct::{DirectError, RingKind};
pub use invalid::{CqRole, DeviceLimit, InvalidInput, PdObject, RunArray, SrdOnly};

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
    /// The direct backend cannot serve this QP or CQ (issue 26).
    Direct(DirectError),
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

impl From<DirectError> for Error {
    fn from(e: DirectError) -> Self {
        Error::Direct(e)
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
            Error::Direct(e) => e.fmt(f),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// An `io::Error` of the matching kind that keeps this error (and its message) as source:
/// errno-bearing errors take the kind of their errno.
#[cfg(feature = "std")]
impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match e {
            Error::Invalid(_) => ErrorKind::InvalidInput,
            Error::Timeout => ErrorKind::TimedOut,
            Error::NoSuchDevice => ErrorKind::NotFound,
            Error::SendQueueFull | Error::RecvQueueFull { .. } => ErrorKind::WouldBlock,
            Error::Unsupported { .. } | Error::Direct(_) => ErrorKind::Unsupported,
            Error::Completion { .. } => ErrorKind::Other,
            Error::Verb { errno, .. } => std::io::Error::from_raw_os_error(errno.0).kind(),
        };
        std::io::Error::new(kind, e)
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

static_assertions::assert_impl_all!(Error: Copy, Send, Sync);
static_assertions::const_assert!(core::mem::size_of::<Error>() <= 16);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::WcStatus;

    fn text(e: Error) -> arrayvec::ArrayString<256> {
        let mut s = arrayvec::ArrayString::new();
        core::fmt::write(&mut s, format_args!("{e}")).unwrap();
        s
    }

    #[test]
    fn messages_name_the_value_and_the_limit() {
        let e: Error = InvalidInput::InlineTooLong { len: 200, max: 32 }.into();
        assert_eq!(
            text(e).as_str(),
            "inline data of 200 bytes exceeds the QP's maximum of 32"
        );
        let e: Error = InvalidInput::RdmaTooLong {
            len: 5000,
            max: 4096,
        }
        .into();
        assert_eq!(
            text(e).as_str(),
            "RDMA of 5000 bytes exceeds max_rdma_size 4096"
        );
        let e = Error::Completion {
            status: WcStatus::RNR_RETRY_EXC_ERR,
            efa: EfaStatus::REMOTE_RNR,
        };
        assert_eq!(
            text(e).as_str(),
            "work request failed: receiver had no receive buffer posted (RNR retries \
             exhausted) (EFA status 10) [IBV_WC_RNR_RETRY_EXC_ERR]"
        );
        let e = Error::verb(Verb::DeallocPd, Errno::EBUSY.0);
        assert_eq!(
            text(e).as_str(),
            "ibv_dealloc_pd failed: EBUSY (resource still in use)"
        );
        assert!(Error::verb(Verb::PostSend, Errno::EOPNOTSUPP.0).is_unsupported());
    }

    #[test]
    fn error_fits_sixteen_bytes() {
        assert!(core::mem::size_of::<Error>() <= 16);
        assert!(core::mem::size_of::<InvalidInput>() <= 16);
    }

    #[cfg(feature = "std")]
    #[test]
    fn converts_to_io_error_keeping_kind_and_message() {
        use std::io::ErrorKind;
        let io: std::io::Error = Error::Timeout.into();
        assert_eq!(io.kind(), ErrorKind::TimedOut);
        let io: std::io::Error = Error::verb(Verb::RegMr, Errno::EINVAL.0).into();
        assert_eq!(io.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            io.to_string(),
            "ibv_reg_mr failed: EINVAL (invalid argument)"
        );
        let inner = io.into_inner().unwrap().downcast::<Error>().unwrap();
        assert_eq!(*inner, Error::verb(Verb::RegMr, Errno::EINVAL.0));
        let io: std::io::Error = Error::from(InvalidInput::WrongQp).into();
        assert_eq!(io.kind(), ErrorKind::InvalidInput);
        let io: std::io::Error = Error::SendQueueFull.into();
        assert_eq!(io.kind(), ErrorKind::WouldBlock);
    }
}
