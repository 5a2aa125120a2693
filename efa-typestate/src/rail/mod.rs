//! Multi-rail transfers: one large buffer (host or GPU memory) moved over QPs on several
//! EFA devices at once, as instances with many NICs need (p5: 32, 4 per GPU).
//!
//! * [`Rails`] describes the rails of one initiator: per rail a QP in RTS on its own
//!   device and PD, that QP's send CQ, and the peer (the target's QP on that rail).
//! * [`Rails::write_all`] writes the buffer: the caller hands one registration of the
//!   source per rail (each on that rail's PD: [`RailMr`] registers host memory on every
//!   rail's PD at once; GPU memory is registered once per PD through an `Arc`) and the target's remote buffer per rail (its
//!   registration on that rail's PD). The bytes are cut into chunks of
//!   [`RailTransfer::chunk_size`] (1 MiB by default, a multiple of the 64 KiB GPU page,
//!   so chunks of a page-aligned GPU buffer start on pages), and the chunks go to
//!   whichever rail has a free credit, round-robin: a slow rail takes fewer. A rail's
//!   credits are its send queue depth (and its CQ's room, shared among the rails that
//!   share a CQ), so a post never meets a full queue: the rails' QPs are the transfer's
//!   for its duration, and a full queue (someone else posted) is an error of that rail,
//!   not a "poll and retry" loop.
//! * The target learns "all of transfer T landed" once. The last chunk of each rail is a
//!   **notice**: an RDMA write with immediate, posted only after every other chunk of
//!   that rail has completed at the initiator (SRD does not order a QP's writes, and an
//!   initiator's completion means the bytes were placed). Its immediate
//!   ([`Notice`]) carries the transfer id and how many notices the transfer has, so
//!   [`RailNotices`] at the target counts arrivals, with no other agreement, and posts
//!   the zero-length receives notices consume. The tail costs one round trip per rail,
//!   the rails in parallel; no receive per chunk is needed (receives are credits the
//!   initiator cannot see).
//! * A rail that fails (a failed completion, a refused post, a CQ that fails to poll)
//!   ends the transfer with a [`RailError`] naming the rail, its device and, per rail,
//!   the chunks and bytes whose completions succeeded; a transfer that does not finish
//!   in its timeout names the rail with the most chunks still in flight.
//!
//! The safety rules are [`Qp::write_all`]'s, per rail: the sources are borrowed for the
//! call; each rail's completions are counted only from its own QP, send-side, with
//! `wr_id`s reserved for this call (the rail's index in the upper bits); after an error,
//! the timeout or a panic in `others`, nothing more is posted, the chunks in flight are
//! waited for (up to the timeout again) and those still missing are cut off by
//! resetting their rail's QP, so the call returns (or unwinds) only when the device can
//! no longer read the sources. Nothing is allocated: the per-rail state lives in a
//! fixed array of [`MAX_RAILS`].
//!
//! Which devices to use is the caller's choice; for GPU memory the rails nearest the GPU
//! ([`Topology::nearest`](crate::Topology::nearest), `efa_cuda::InstanceTopology`: the
//! NICs behind the GPU's PCIe switch, 4 per GPU on p5) are the usual ones.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

mod mr;
mod notice;
mod write;

pub use mr::{RailMr, RailRegion};
pub use notice::{Landed, RailNotices};

use core::fmt;
use std::time::Duration;

use arrayvec::{ArrayString, ArrayVec};

use crate::ah::Peer;
use crate::cq::CompletionQueue;
use crate::error::{Error, InvalidInput, PdObject, Result};
use crate::qp::{Qp, Rts};

/// The most rails one transfer takes (a p5 instance has 32 EFA devices).
pub const MAX_RAILS: usize = 32;

/// The default chunk size: 1 MiB, a multiple of the 64 KiB GPU page.
pub const DEFAULT_CHUNK: u32 = 1 << 20;

/// Transfer ids fit 24 bits: the notice's immediate carries one with the notice count.
pub const MAX_TRANSFER_ID: u32 = (1 << 24) - 1;

/// Options of [`Rails::write_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailTransfer {
    pub(crate) id: u32,
    pub(crate) timeout: Duration,
    pub(crate) chunk: u32,
    pub(crate) local_offset: u64,
    pub(crate) in_flight: u32,
}

impl RailTransfer {
    /// Transfer `id` (at most [`MAX_TRANSFER_ID`]; the target sees it in the notices),
    /// whose chunks must all be posted and completed within `timeout`.
    pub fn new(id: u32, timeout: Duration) -> Self {
        RailTransfer {
            id,
            timeout,
            chunk: DEFAULT_CHUNK,
            local_offset: 0,
            in_flight: u32::MAX,
        }
    }
    /// Chunks of at most `bytes` (also at most every rail's `max_rdma_size`).
    pub fn chunk_size(mut self, bytes: u32) -> Self {
        self.chunk = bytes;
        self
    }
    /// At most `chunks` chunks in flight per rail (at least 1; by default the rail's
    /// queue depth): a cap on the bytes outstanding on each device, for fabrics (or
    /// software devices) that serve less than the queues hold within their timeouts.
    pub fn in_flight(mut self, chunks: u32) -> Self {
        self.in_flight = chunks.max(1);
        self
    }
    /// The local bytes start at `offset` of each rail's registration.
    pub fn local_offset(mut self, offset: u64) -> Self {
        self.local_offset = offset;
        self
    }
    /// The transfer id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// What a notice's 32-bit immediate says: the transfer id (24 bits) and how many notices
/// the transfer sends (8 bits; one per rail that carries one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Notice {
    /// The transfer id ([`RailTransfer::new`]).
    pub id: u32,
    /// Notices of this transfer, 1 to [`MAX_RAILS`].
    pub count: u32,
}

impl Notice {
    /// The immediate value (`id << 8 | count`).
    pub fn to_imm(self) -> u32 {
        (self.id & MAX_TRANSFER_ID) << 8 | (self.count & 0xff)
    }
    /// The notice an immediate carries; `None` when its count is 0 or above
    /// [`MAX_RAILS`] (not a notice of a multi-rail transfer).
    pub fn from_imm(imm: u32) -> Option<Notice> {
        let count = imm & 0xff;
        (1..=MAX_RAILS as u32).contains(&count).then_some(Notice {
            id: imm >> 8,
            count,
        })
    }
}

/// What one rail moved: chunks whose completions succeeded, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailTally {
    /// Chunks completed without error (the notice included).
    pub chunks: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A finished multi-rail transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailReport {
    /// The transfer id.
    pub id: u32,
    /// Chunks of the whole transfer.
    pub chunks: u64,
    /// Bytes of the whole transfer.
    pub bytes: u64,
    /// Notices sent (one per rail that carried one): what the target counts.
    pub notices: u32,
    /// Per rail, in the order of the [`Rails`].
    pub rails: ArrayVec<RailTally, MAX_RAILS>,
}

/// A device name, as `ibv_get_device_name` gives it (at most 64 bytes).
pub type DeviceName = ArrayString<64>;

/// Why a multi-rail transfer (or a target's wait) failed: the rail and its device, when
/// one rail is to blame, the error, and what landed on each rail before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailError {
    /// The rail that failed (its index in the [`Rails`] or [`RailNotices`]); `None`
    /// when no rail is to blame (input refused as a whole, a panic in `others`).
    pub rail: Option<usize>,
    /// Its device (empty when `rail` is `None`).
    pub device: DeviceName,
    /// What went wrong.
    pub error: Error,
    /// Per rail, the chunks and bytes whose completions succeeded (at a target: the
    /// notices that arrived). Empty when the input was refused before anything was posted.
    pub landed: ArrayVec<RailTally, MAX_RAILS>,
}

impl RailError {
    /// An error no rail is to blame for.
    pub(crate) fn whole(error: Error) -> RailError {
        RailError {
            rail: None,
            device: DeviceName::new(),
            error,
            landed: ArrayVec::new(),
        }
    }
    /// An error of rail `rail`, on the device of `qp`.
    pub(crate) fn of_rail<P, S: crate::QpState>(
        rail: usize,
        qp: &Qp<P, S>,
        error: Error,
    ) -> RailError {
        RailError {
            rail: Some(rail),
            device: device_name(qp),
            error,
            landed: ArrayVec::new(),
        }
    }
    /// Bytes that landed, over all rails.
    pub fn landed_bytes(&self) -> u64 {
        self.landed
            .iter()
            .fold(0u64, |sum, t| sum.saturating_add(t.bytes))
    }
}

impl fmt::Display for RailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rail {
            Some(r) => write!(f, "rail {r} ({}): {}", self.device, self.error)?,
            None => write!(f, "{}", self.error)?,
        }
        if !self.landed.is_empty() {
            write!(f, "; landed per rail:")?;
            for (i, t) in self.landed.iter().enumerate() {
                write!(f, " {i}: {} chunks, {} bytes;", t.chunks, t.bytes)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for RailError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<RailError> for Error {
    /// The error alone (the rail and what landed are dropped).
    fn from(e: RailError) -> Error {
        e.error
    }
}

/// The name of the device `qp` lives on.
pub(crate) fn device_name<P, S: crate::QpState>(qp: &Qp<P, S>) -> DeviceName {
    // SAFETY: a live QP's context and device pointers are valid while the QP lives, and
    // the device name is a NUL-terminated array.
    let name = unsafe {
        let ctx = (*qp.as_ptr()).context;
        core::ffi::CStr::from_ptr((*(*ctx).device).name.as_ptr())
    };
    let mut out = DeviceName::new();
    for ch in name.to_string_lossy().chars() {
        if out.try_push(ch).is_err() {
            break;
        }
    }
    out
}

/// One rail of an initiator: a QP in RTS, its send CQ and the peer on that rail.
pub struct Rail<'a, P, Q, X> {
    pub(crate) qp: &'a Qp<P, Rts>,
    pub(crate) cq: &'a Q,
    pub(crate) peer: &'a Peer<X>,
}

/// The rails of an initiator (at most [`MAX_RAILS`]), in order: rail `i` of a transfer
/// is the `i`-th pushed. Every rail should be a QP of its own (on its own device, for
/// the bandwidth); the target's [`RailNotices`] should list its QPs in the same order,
/// so that a missing notice names the same rail on both sides.
pub struct Rails<'a, P, Q, X> {
    pub(crate) rails: ArrayVec<Rail<'a, P, Q, X>, MAX_RAILS>,
}

impl<P, Q, X> Default for Rails<'_, P, Q, X> {
    fn default() -> Self {
        Rails {
            rails: ArrayVec::new(),
        }
    }
}

impl<'a, P, Q: CompletionQueue, X> Rails<'a, P, Q, X> {
    /// No rails yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a rail: `qp`, its send CQ `cq` ([`InvalidInput::NotSendCq`] otherwise) and
    /// `peer`, the target's QP on that rail (of `qp`'s PD: [`InvalidInput::WrongPd`]).
    /// More than [`MAX_RAILS`] is [`InvalidInput::RailCount`].
    pub fn push(&mut self, qp: &'a Qp<P, Rts>, cq: &'a Q, peer: &'a Peer<X>) -> Result<()> {
        if self.rails.is_full() {
            return Err(InvalidInput::RailCount {
                count: MAX_RAILS.saturating_add(1),
                max: MAX_RAILS as u32,
            }
            .into());
        }
        qp.check_send_cq(cq)?;
        if peer.ah().pd_id() != qp.limits().pd {
            return Err(InvalidInput::WrongPd(PdObject::Peer).into());
        }
        self.rails.push(Rail { qp, cq, peer });
        Ok(())
    }

    /// Number of rails.
    pub fn len(&self) -> usize {
        self.rails.len()
    }
    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.rails.is_empty()
    }
    /// The QP of rail `i`.
    pub fn qp(&self, i: usize) -> Option<&'a Qp<P, Rts>> {
        self.rails.get(i).map(|r| r.qp)
    }
    /// The device of rail `i`.
    pub fn device(&self, i: usize) -> Option<DeviceName> {
        self.rails.get(i).map(|r| device_name(r.qp))
    }
}

/// Notices a transfer of `len` bytes in chunks of `chunk` over `rails` rails sends: one
/// per rail, or one per chunk when there are fewer chunks than rails (0 for no bytes).
pub fn notice_count(len: u64, chunk: u32, rails: usize) -> u32 {
    let chunks = len.div_ceil(u64::from(chunk.max(1)));
    chunks.min(rails as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_through_the_immediate() {
        for (id, count) in [(0, 1), (7, 4), (MAX_TRANSFER_ID, 32), (0x12_3456, 9)] {
            let n = Notice { id, count };
            assert_eq!(Notice::from_imm(n.to_imm()), Some(n));
        }
        assert_eq!(Notice { id: 5, count: 3 }.to_imm(), 0x503);
        assert_eq!(Notice::from_imm(0x500), None, "no notices: not one");
        assert_eq!(Notice::from_imm(0x521), None, "more than MAX_RAILS");
    }

    #[test]
    fn notice_count_is_one_per_rail_or_per_chunk() {
        assert_eq!(notice_count(10 << 20, 1 << 20, 4), 4);
        assert_eq!(notice_count(3 << 20, 1 << 20, 4), 3);
        assert_eq!(notice_count((3 << 20) + 1, 1 << 20, 4), 4);
        assert_eq!(notice_count(1, 1 << 20, 32), 1);
        assert_eq!(notice_count(0, 1 << 20, 4), 0);
    }

    #[test]
    fn rail_errors_name_the_rail_and_what_landed() {
        let mut e = RailError::whole(Error::Timeout);
        assert_eq!(e.to_string(), "timed out");
        e.rail = Some(2);
        e.device.push_str("efa_6");
        e.landed.push(RailTally {
            chunks: 3,
            bytes: 300,
        });
        e.landed.push(RailTally::default());
        assert_eq!(
            e.to_string(),
            "rail 2 (efa_6): timed out; landed per rail: 0: 3 chunks, 300 bytes; 1: 0 chunks, 0 bytes;"
        );
        assert_eq!(e.landed_bytes(), 300);
    }
}
