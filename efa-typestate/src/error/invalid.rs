//! [`InvalidInput`]: every way a value can be refused before the device sees it, each
//! naming the value and the limit it broke.
//!
//! Fields are sized so that [`Error`](super::Error) stays within 16 bytes: one 64-bit
//! value and one 32-bit limit at most per variant.

use core::fmt;

use crate::qp::QpStateKind;
use crate::wr::SendOps;

/// Which object of a work request belongs to another protection domain (or device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PdObject {
    /// A scatter/gather element (its memory region's PD).
    Sge,
    /// The destination peer (its address handle's PD).
    Peer,
    /// A buffer lease (its memory region's PD).
    Lease,
}

/// A QP creation option that exists for SRD only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SrdOnly {
    /// [`QpConfig::unsolicited_write_recv`](crate::QpConfig::unsolicited_write_recv).
    UnsolicitedWriteRecv,
    /// [`QpConfig::inline_write`](crate::QpConfig::inline_write).
    InlineWrite,
}

/// Why a user-supplied value was rejected before reaching the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidInput {
    /// An SGE range `[offset, offset+len)` does not lie inside its memory region.
    SgeOutOfBounds {
        /// Offset into the region, in bytes.
        offset: u64,
        /// Requested length, in bytes.
        len: u32,
    },
    /// A remote range `[offset, offset+len)` does not lie inside the remote buffer
    /// (`len` saturates at `u32::MAX` for ranges of 4 GiB and more).
    RemoteOutOfBounds {
        /// Offset into the remote buffer.
        offset: u64,
        /// Requested length.
        len: u32,
    },
    /// One SGE larger than 4 GiB - 1 (the 32-bit length field).
    LengthTooLarge(u64),
    /// A wire format (endpoint info, remote buffer) of the wrong size.
    WireLength {
        /// Bytes the format has.
        expected: u32,
        /// Bytes given.
        got: usize,
    },
    /// A QP number that does not fit the 24-bit field.
    QpnOutOfRange(u32),
    /// A work-request batch is full (its capacity `N`).
    BatchFull,
    /// A batch as long as the QP's queue: it could never be posted, so no more work
    /// requests are accepted (`SendQueueFull` would mean "poll, then retry" forever).
    BatchLargerThanQueue {
        /// The queue depth granted at creation (`max_send_wr` or `max_recv_wr`).
        depth: u32,
    },
    /// Inline data longer than the QP's granted `max_inline_data`.
    InlineTooLong {
        /// Bytes given.
        len: usize,
        /// Granted maximum.
        max: u32,
    },
    /// More SGEs in one work request than the QP accepts (`max_send_sge`,
    /// `max_recv_sge`, 1 for RDMA, or the capacity of an [`SgeList`](crate::SgeList)).
    TooManySges {
        /// SGEs given.
        count: usize,
        /// The maximum.
        max: u32,
    },
    /// A SEND longer than the port's `max_msg_sz` (the device MTU).
    MessageTooLong {
        /// Bytes of the message.
        len: u64,
        /// `max_msg_sz`.
        max: u32,
    },
    /// One RDMA read or write longer than the device's `max_rdma_size`.
    RdmaTooLong {
        /// Bytes of the operation.
        len: u64,
        /// `max_rdma_size`.
        max: u32,
    },
    /// An operation outside the send operations the QP was created with.
    SendOpNotEnabled {
        /// The operation.
        op: SendOps,
        /// What the QP was created with.
        enabled: SendOps,
    },
    /// RDMA on a UD QP (UD has SEND and SEND_WITH_IMM only).
    RdmaOnUd,
    /// An SRD-only creation option on a UD QP.
    SrdOnly(SrdOnly),
    /// An inline RDMA write on a QP created without [`QpConfig::inline_write`](crate::QpConfig::inline_write).
    InlineWriteNotEnabled,
    /// A chunk size of zero.
    ZeroChunkSize,
    /// The QP is not in the state this operation needs.
    WrongQpState {
        /// State required.
        expected: QpStateKind,
        /// State it is in.
        actual: QpStateKind,
    },
    /// The port number does not exist (EFA devices have port 1 only).
    NoSuchPort(u8),
    /// The completion channel belongs to another device context.
    ForeignObject,
    /// A CQ has one completion channel: [`CqOptions::waitable`](crate::CqOptions::waitable)
    /// and an explicit channel exclude each other.
    ChannelConflict,
    /// An SGE, peer or lease of another protection domain or device than the QP's.
    WrongPd(PdObject),
    /// A batch built for another QP.
    WrongQp,
    /// RDMA read into inline data is impossible.
    InlineRead,
    /// `REMOTE_WRITE` on a registration that hands out slices: register with
    /// `register_remote_write` (a [`RemoteWrite`](crate::RemoteWrite) Mr) instead.
    RemoteWriteOnLocalMr,
    /// `REMOTE_READ` or `REMOTE_WRITE` on memory that does not stay allocated if its Mr
    /// is leaked (a borrow): a `mem::forget` would let peers reach reused memory.
    RemoteAccessNeedsOwnedMemory,
    /// A lease over memory that does not stay allocated if the lease is leaked (a borrow).
    LeaseNeedsOwnedMemory,
    /// `rnr_retry` counts must be 0..=6 (say [`RnrRetry::Forever`](crate::RnrRetry::Forever) to retry forever).
    RnrRetryOutOfRange(u8),
    /// A `wr_id` with bit 63 set: reserved for leased posts.
    ReservedWrId(u64),
    /// More completions asked for than the output buffer can hold.
    WaitBeyondCapacity {
        /// Completions asked for.
        wanted: usize,
        /// Room left in the output buffer.
        room: u32,
    },
    /// The memory region was deregistered and could not be registered again.
    Deregistered,
    /// A transfer must poll the QP's own send CQ: completions of another CQ (or
    /// another device, whose QP numbers overlap) say nothing about its chunks.
    NotSendCq,
    /// A CQ polled inside a posting session ([`Qp::post_with`](crate::Qp::post_with)),
    /// on the session's thread, of a QP whose sends complete on it: the session holds
    /// the send queue's lock, which completing that queue's requests needs, so the poll
    /// would wait for itself (see `cq/in_session.rs`). Poll after the session, or from
    /// another thread.
    PollInSession,
    /// A poll into an output buffer with no room left.
    OutputFull {
        /// The buffer's capacity.
        capacity: u32,
    },
    /// An address range `[addr, addr+len)` that runs past the end of the 64-bit address
    /// space (`len` saturates at `u32::MAX`).
    AddressWraps {
        /// First byte.
        addr: u64,
        /// Length in bytes.
        len: u32,
    },
    /// A creation parameter beyond what the device offers (checked before the provider
    /// sees it, which would only say EINVAL).
    ExceedsDeviceLimit {
        /// Which parameter.
        what: DeviceLimit,
        /// The value asked for.
        value: u32,
        /// The device's limit.
        max: u32,
    },
    /// A CQ too small for the QP it is to serve: once full it would overflow on hardware.
    CqTooSmall {
        /// Which CQ of the QP.
        cq: CqRole,
        /// Entries the CQ has (as granted).
        depth: u32,
        /// Completions the QP can have outstanding on it (its granted queue depths).
        needed: u32,
    },
    /// A multi-rail transfer over no rails, or over more than
    /// [`MAX_RAILS`](crate::rail::MAX_RAILS).
    RailCount {
        /// Rails given.
        count: usize,
        /// The most a transfer takes.
        max: u32,
    },
    /// A rail whose local registration or remote buffer differs in length from rail 0's:
    /// every rail must describe the same bytes.
    RailMismatch {
        /// The length found.
        len: u64,
        /// The rail.
        rail: u32,
    },
    /// A list of registrations or remote buffers without exactly one entry per rail.
    RailListLength {
        /// Entries given.
        got: usize,
        /// Rails.
        rails: u32,
    },
    /// A transfer id beyond the 24 bits a notice's immediate carries.
    TransferIdTooLarge(u32),
    /// A notice receive must name no bytes (a write-with-immediate's payload goes to the
    /// RDMA address, never to the receive).
    NoticeSgeNotEmpty(u32),
    /// More transfers partly announced at a target than it tracks at once.
    TooManyPendingTransfers {
        /// Transfers it tracks.
        max: u32,
    },
    /// An entry of 0 bytes in a run of RDMA operations ([`RdmaRun`](crate::RdmaRun)):
    /// it would post no work request, and so complete nothing.
    EmptyEntry,
    /// An array of a run's entries ([`RunEntries`](crate::RunEntries)) whose length
    /// differs from `local_offsets`' (lengths saturate at `u32::MAX`).
    RunArrayLength {
        /// Which array.
        array: RunArray,
        /// Its length.
        len: u32,
        /// The number of entries (`local_offsets`' length).
        entries: u32,
    },
    /// A run of RDMA writes with immediate without an immediate per entry, or a run of
    /// another operation given immediates.
    RunImmediates {
        /// True if the run's operation carries an immediate.
        op_has_imm: bool,
    },
}

/// An array of a run's entries ([`InvalidInput::RunArrayLength`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunArray {
    /// `remote_offsets`.
    RemoteOffsets,
    /// `lengths`.
    Lengths,
    /// `wr_ids`.
    WrIds,
    /// `imm`.
    Imm,
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use InvalidInput::*;
        match *self {
            SgeOutOfBounds { offset, len } => write!(
                f,
                "SGE [{offset}, {offset}+{len}) lies outside its memory region"
            ),
            RemoteOutOfBounds { offset, len } => write!(
                f,
                "remote range [{offset}, {offset}+{len}) lies outside the remote buffer"
            ),
            LengthTooLarge(n) => write!(f, "length {n} does not fit 32 bits"),
            WireLength { expected, got } => {
                write!(f, "wire format must be {expected} bytes, got {got}")
            }
            QpnOutOfRange(q) => write!(f, "QP number {q:#x} does not fit 24 bits"),
            BatchFull => write!(f, "work-request batch is full"),
            BatchLargerThanQueue { depth } => write!(
                f,
                "batch would be longer than the QP's queue of {depth} work requests"
            ),
            InlineTooLong { len, max } => {
                write!(f, "inline data of {len} bytes exceeds the QP's maximum of {max}")
            }
            TooManySges { count, max } => write!(f, "{count} SGEs exceed the maximum of {max}"),
            MessageTooLong { len, max } => {
                write!(f, "message of {len} bytes exceeds max_msg_sz {max}")
            }
            RdmaTooLong { len, max } => {
                write!(f, "RDMA of {len} bytes exceeds max_rdma_size {max}")
            }
            SendOpNotEnabled { op, enabled } => {
                write!(f, "{op:?} is not among the QP's send ops {enabled:?}")
            }
            RdmaOnUd => write!(f, "RDMA needs an SRD QP (UD has SEND only)"),
            SrdOnly(what) => write!(f, "{what:?} exists for SRD QPs only"),
            InlineWriteNotEnabled => {
                write!(f, "inline RDMA write needs a QP created with inline_write")
            }
            ZeroChunkSize => write!(f, "chunk size must not be zero"),
            WrongQpState { expected, actual } => {
                write!(f, "QP is in state {actual:?}, this needs {expected:?}")
            }
            NoSuchPort(p) => write!(f, "port {p} does not exist (EFA has port 1)"),
            ForeignObject => write!(f, "object belongs to another device context"),
            ChannelConflict => write!(
                f,
                "a CQ has one completion channel: waitable() excludes an explicit channel"
            ),
            WrongPd(what) => write!(
                f,
                "{what:?} belongs to another protection domain than the QP"
            ),
            WrongQp => write!(f, "batch was built for another QP"),
            InlineRead => write!(f, "RDMA read cannot target inline data"),
            RemoteWriteOnLocalMr => write!(
                f,
                "REMOTE_WRITE needs a peer-writable registration (register_remote_write)"
            ),
            RemoteAccessNeedsOwnedMemory => write!(
                f,
                "remote access needs memory that stays allocated if its Mr is leaked (owned, not borrowed)"
            ),
            LeaseNeedsOwnedMemory => write!(
                f,
                "a lease needs memory that stays allocated if it is leaked (owned, not borrowed)"
            ),
            RnrRetryOutOfRange(n) => write!(
                f,
                "rnr_retry {n} is out of range 0..=6 (RnrRetry::Forever retries forever)"
            ),
            ReservedWrId(id) => write!(f, "wr_id {id:#x} has bit 63 set (reserved for leases)"),
            WaitBeyondCapacity { wanted, room } => write!(
                f,
                "waiting for {wanted} completions with room for {room}"
            ),
            Deregistered => write!(f, "the memory region is no longer registered"),
            PollInSession => write!(
                f,
                "a CQ polled inside a posting session of a QP whose sends complete on it \
                 (the session holds the send queue's lock, which its completions need): \
                 poll after the session, or from another thread"
            ),
            OutputFull { capacity } => write!(
                f,
                "the output buffer (capacity {capacity}) is full: take completions out first"
            ),
            NotSendCq => write!(f, "the CQ given is not the QP's send CQ"),
            AddressWraps { addr, len } => write!(
                f,
                "range of {len} bytes at {addr:#x} runs past the end of the address space"
            ),
            ExceedsDeviceLimit { what, value, max } => {
                write!(f, "{what} of {value} exceeds the device's limit of {max}")
            }
            CqTooSmall { cq, depth, needed } => write!(
                f,
                "{cq} of {depth} entries cannot hold the QP's {needed} outstanding {}",
                cq.holds()
            ),
            RailCount { count, max } => {
                write!(f, "{count} rails: a transfer takes 1 to {max}")
            }
            RailMismatch { len, rail } => write!(
                f,
                "rail {rail} does not match rail 0 (length {len}): every rail must describe the same bytes"
            ),
            RailListLength { got, rails } => {
                write!(f, "{got} entries given for {rails} rails: one per rail")
            }
            TransferIdTooLarge(id) => {
                write!(f, "transfer id {id:#x} does not fit the notice's 24 bits")
            }
            NoticeSgeNotEmpty(len) => write!(
                f,
                "a notice receive must name no bytes, this SGE has {len}"
            ),
            TooManyPendingTransfers { max } => write!(
                f,
                "more than {max} transfers partly announced at once"
            ),
            EmptyEntry => write!(f, "an entry of 0 bytes (it would post and complete nothing)"),
            RunArrayLength {
                array,
                len,
                entries,
            } => write!(
                f,
                "{array:?} has {len} entries, local_offsets {entries}: the arrays must be as long"
            ),
            RunImmediates { op_has_imm: true } => {
                write!(f, "RDMA writes with immediate need one immediate per entry")
            }
            RunImmediates { op_has_imm: false } => {
                write!(f, "immediates given for an operation that carries none")
            }
        }
    }
}

/// A device limit a creation parameter is checked against
/// ([`InvalidInput::ExceedsDeviceLimit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceLimit {
    /// Send queue depth (`max_send_wr`; the device's deepest send queue for the QP's
    /// inline size, `efadv_get_max_sq_depth`, or `max_sq_wr`).
    SendDepth,
    /// Receive queue depth (`max_recv_wr`; `efadv_get_max_rq_depth` or `max_rq_wr`).
    RecvDepth,
    /// SGEs per send (`max_send_sge`; the device's `max_sq_sge`).
    SendSges,
    /// SGEs per receive (`max_recv_sge`; the device's `max_rq_sge`).
    RecvSges,
    /// Inline bytes per send (`max_inline_data`; the device's inline buffer size).
    InlineData,
    /// CQ entries (the device's `max_cqe`).
    CqEntries,
}

impl fmt::Display for DeviceLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceLimit::SendDepth => "send queue depth (max_send_wr)",
            DeviceLimit::RecvDepth => "receive queue depth (max_recv_wr)",
            DeviceLimit::SendSges => "SGEs per send (max_send_sge)",
            DeviceLimit::RecvSges => "SGEs per receive (max_recv_sge)",
            DeviceLimit::InlineData => "inline data (max_inline_data)",
            DeviceLimit::CqEntries => "CQ entries (cqe)",
        })
    }
}

/// Which CQ of a QP is too small ([`InvalidInput::CqTooSmall`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqRole {
    /// The send CQ (one completion per send work request).
    Send,
    /// The receive CQ (one completion per receive work request).
    Recv,
    /// One CQ for both (sends and receives together).
    Shared,
}

impl CqRole {
    fn holds(self) -> &'static str {
        match self {
            CqRole::Send => "send work requests",
            CqRole::Recv => "receive work requests",
            CqRole::Shared => "send and receive work requests",
        }
    }
}

impl fmt::Display for CqRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CqRole::Send => "send CQ",
            CqRole::Recv => "receive CQ",
            CqRole::Shared => "shared send/receive CQ",
        })
    }
}
