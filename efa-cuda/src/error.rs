//! Typed errors: every failure names what went wrong (the library, the missing entry
//! point, the `CUresult` by name, the call that returned it).

use core::fmt;

use crate::align::AlignError;

/// A `CUresult` other than `CUDA_SUCCESS`, with the call that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError {
    /// The driver entry point that failed (its symbol name).
    pub call: &'static str,
    /// The `CUresult` code.
    pub code: i32,
    /// Its name: from the driver's `cuGetErrorName` when it has one, else the built-in
    /// table ([`crate::CU_RESULT_NAMES`]); `None` for a code neither knows.
    pub name: Option<&'static str>,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(n) => write!(f, "{} failed: {} ({})", self.call, n, self.code),
            None => write!(f, "{} failed: unknown CUresult {}", self.call, self.code),
        }
    }
}

/// Everything that can fail in this crate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The driver library could not be loaded (`dlopen` failed).
    NoDriver {
        /// The library name or path that was tried.
        library: String,
        /// `dlerror()`'s text.
        reason: String,
    },
    /// The driver is too old for the feature asked for: it lacks this entry point.
    MissingEntryPoint {
        /// The versioned symbol name that is missing.
        name: &'static str,
    },
    /// `cuInit` found no CUDA device (`CUDA_ERROR_NO_DEVICE`).
    NoDevice,
    /// The call needs a current CUDA context and the calling thread has none.
    NoContext {
        /// What needed it.
        call: &'static str,
    },
    /// The calling thread's current context is on another device than the one the call
    /// is for ([`Device::check_current`](crate::Device::check_current)).
    WrongContext {
        /// The device the call is for.
        device: i32,
        /// The device of the current context.
        current: i32,
    },
    /// A device ordinal outside `0..count`.
    InvalidDevice {
        /// The ordinal asked for.
        ordinal: i32,
        /// How many devices the driver reports.
        count: i32,
    },
    /// A driver call returned an error.
    Cuda(CudaError),
    /// The pointer is not CUDA device memory (host memory, or unknown to the driver).
    NotDeviceMemory {
        /// The pointer.
        ptr: u64,
        /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (0 when the driver does not know it).
        memory_type: u32,
    },
    /// The buffer is zero bytes long.
    EmptyBuffer,
    /// `offset + len` lies outside a buffer of `buffer_len` bytes.
    OutOfBounds {
        /// Start of the access.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Length of the buffer.
        buffer_len: usize,
    },
    /// The export range arithmetic failed (see [`AlignError`]).
    Align(AlignError),
    /// A VMM allocation parameter is not a multiple of the granularity, or zero.
    BadVmmSize {
        /// The size or chunk size given.
        size: usize,
        /// The driver's allocation granularity.
        granularity: usize,
    },
    /// `REMOTE_READ` or `REMOTE_WRITE` asked for memory that could be reused after a
    /// leak of its MR (a borrow): peers could then read or write memory that is no
    /// longer the buffer's.
    RemoteAccessNeedsOwnedMemory,
    /// A verbs call failed.
    Verbs(efa_typestate::Error),
    /// Both registration paths failed: dma-buf export/registration, then `ibv_reg_mr` on
    /// the CUDA address (nvidia_peermem).
    RegistrationFailed {
        /// Why the dma-buf path failed.
        dmabuf: Box<Error>,
        /// Why the `ibv_reg_mr` fallback failed.
        fallback: Box<Error>,
    },
    /// An SGE of a [`SplitGpuMr`](crate::SplitGpuMr) would cross from one piece (one
    /// MR) into the next: a work request addresses one MR.
    CrossesPieces {
        /// Start of the access.
        offset: u64,
        /// Its length.
        len: u64,
        /// Offset of the piece boundary inside it.
        boundary: u64,
    },
    /// The largest piece allowed (the device's `max_mr_size`, or the one asked for) is
    /// less than one host page.
    PieceLimitTooSmall {
        /// The limit in bytes.
        limit: u64,
        /// The host page size.
        page: u64,
    },
    /// Remote pieces of a split registration do not follow each other in the address
    /// space (or their lengths overflow).
    PiecesNotContiguous {
        /// Index of the first piece that does not start where the previous one ends.
        piece: usize,
    },
    /// The topology could not be read from sysfs (the file and what was wrong).
    Topology(efa_typestate::TopologyError),
    /// A system call failed.
    Os {
        /// The call.
        call: &'static str,
        /// `errno`.
        errno: i32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDriver { library, reason } => {
                write!(f, "no CUDA driver: cannot load {library}: {reason}")
            }
            Error::MissingEntryPoint { name } => {
                write!(f, "CUDA driver too old: it has no entry point {name}")
            }
            Error::NoDevice => write!(f, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"),
            Error::NoContext { call } => write!(f, "{call} needs a current CUDA context"),
            Error::WrongContext { device, current } => write!(
                f,
                "the current CUDA context is on device {current}, not on device {device}"
            ),
            Error::InvalidDevice { ordinal, count } => {
                write!(f, "CUDA device {ordinal} does not exist ({count} devices)")
            }
            Error::Cuda(e) => e.fmt(f),
            Error::NotDeviceMemory { ptr, memory_type } => write!(
                f,
                "{ptr:#x} is not CUDA device memory (memory type {memory_type})"
            ),
            Error::EmptyBuffer => write!(f, "empty buffer"),
            Error::OutOfBounds {
                offset,
                len,
                buffer_len,
            } => write!(
                f,
                "{len} bytes at offset {offset} exceed a buffer of {buffer_len} bytes"
            ),
            Error::Align(e) => e.fmt(f),
            Error::BadVmmSize { size, granularity } => write!(
                f,
                "VMM size {size} is zero or not a multiple of the granularity {granularity}"
            ),
            Error::RemoteAccessNeedsOwnedMemory => write!(
                f,
                "remote access (REMOTE_READ/REMOTE_WRITE) needs memory that stays allocated if the MR is leaked"
            ),
            Error::Verbs(e) => write!(f, "verbs: {e}"),
            Error::RegistrationFailed { dmabuf, fallback } => write!(
                f,
                "GPU memory registration failed: dma-buf path: {dmabuf}; ibv_reg_mr fallback: {fallback}"
            ),
            Error::CrossesPieces {
                offset,
                len,
                boundary,
            } => write!(
                f,
                "{len} bytes at offset {offset} cross the boundary between two registrations at offset {boundary}"
            ),
            Error::PieceLimitTooSmall { limit, page } => write!(
                f,
                "registrations of at most {limit} bytes cannot hold one host page of {page} bytes"
            ),
            Error::PiecesNotContiguous { piece } => write!(
                f,
                "remote piece {piece} does not start where the previous one ends"
            ),
            Error::Os { call, errno } => write!(f, "{call} failed: errno {errno}"),
            Error::Topology(e) => write!(f, "topology: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<AlignError> for Error {
    fn from(e: AlignError) -> Self {
        Error::Align(e)
    }
}

impl From<efa_typestate::TopologyError> for Error {
    fn from(e: efa_typestate::TopologyError) -> Self {
        Error::Topology(e)
    }
}

impl From<efa_typestate::Error> for Error {
    fn from(e: efa_typestate::Error) -> Self {
        Error::Verbs(e)
    }
}

/// A failed QP transition becomes its verbs error (the QP it hands back is dropped), so
/// `?` works on QP set-up in functions returning this crate's [`Result`].
impl<Q> From<efa_typestate::TransitionError<Q>> for Error {
    fn from(e: efa_typestate::TransitionError<Q>) -> Self {
        Error::Verbs(e.error)
    }
}

/// Result of this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;
