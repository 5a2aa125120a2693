//! Why the direct data path (issue 26) cannot serve a QP or CQ.

use core::fmt;

use super::{CqRole, Verb};

/// Why a QP or CQ asked for [`Backend::Direct`](crate::Backend::Direct) (or a QP posted on
/// the direct path) cannot have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DirectError {
    /// The ring query failed (`efadv_query_qp_wqs` or `efadv_query_cq`): the provider or
    /// library does not hand out its rings.
    RingsUnavailable(Verb),
    /// The CPU barriers are not proven for this architecture
    /// ([`DEVICE_BARRIERS_PROVEN`](crate::direct::barrier::DEVICE_BARRIERS_PROVEN)).
    BarriersUnproven,
    /// Built without the `std` feature (the direct state is allocated at creation).
    NeedsStd,
    /// A ring of a shape the direct path does not drive (entry size, entry count that is
    /// not a power of two, misaligned buffer, missing doorbell).
    UnsupportedRing(RingKind),
    /// A direct QP's CQ (in this role) is a provider CQ: completions of a direct QP can only
    /// be matched to their `wr_id`s by the direct state.
    CqNotDirect(CqRole),
    /// A provider QP's CQ (in this role) is a direct CQ, which only serves direct QPs.
    CqIsDirect(CqRole),
    /// A receive without buffers (libefa writes no descriptor for it, so it would never
    /// complete).
    EmptyReceive,
    /// A work request that does not fit the WQE format (cannot pass the batch checks; kept
    /// as an error rather than a panic).
    WqeFormat,
    /// The environment turned the direct path off
    /// ([`DIRECT_ENV`](crate::DIRECT_ENV)`=0`).
    DisabledByEnvironment,
    /// [`DIRECT_ENV`](crate::DIRECT_ENV) holds a value other than `1`,
    /// `on`, `0` or `off` (its first bytes, for the message).
    BadSetting([u8; 8]),
    /// The device splits each CQ into sub-CQs (first-generation EFA, this
    /// `vendor_part_id`), and `efadv_query_cq` describes only the first: completions on
    /// the others would never be polled. libfabric turns its direct path off there too.
    SubCqs {
        /// The device's PCI device id.
        vendor_part_id: u32,
    },
}

/// Which ring [`DirectError::UnsupportedRing`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingKind {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
    /// The completion queue.
    Completion,
}

impl fmt::Display for DirectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DirectError::*;
        match *self {
            RingsUnavailable(v) => write!(f, "direct backend: {} failed", v.name()),
            BarriersUnproven => write!(
                f,
                "direct backend: device barriers are not proven on this architecture"
            ),
            NeedsStd => write!(f, "direct backend: needs the `std` feature"),
            UnsupportedRing(r) => write!(f, "direct backend: unsupported {r:?} ring layout"),
            CqNotDirect(r) => write!(
                f,
                "direct backend: the QP's {r:?} CQ is not direct (a direct QP needs direct CQs)"
            ),
            CqIsDirect(r) => write!(
                f,
                "the QP's {r:?} CQ is direct, and direct CQs only serve direct QPs"
            ),
            EmptyReceive => write!(f, "direct backend: a receive needs at least one buffer"),
            WqeFormat => write!(f, "direct backend: work request does not fit a WQE"),
            DisabledByEnvironment => write!(
                f,
                "direct backend: turned off by {}=0",
                crate::direct::policy::DIRECT_ENV
            ),
            BadSetting(v) => {
                let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
                write!(
                    f,
                    "direct backend: {}=\"",
                    crate::direct::policy::DIRECT_ENV
                )?;
                for b in &v[..end] {
                    write!(f, "{}", core::ascii::escape_default(*b))?;
                }
                write!(f, "\" is not one of 1, on, 0, off")
            }
            SubCqs { vendor_part_id } => write!(
                f,
                "direct backend: device {vendor_part_id:#x} splits CQs into sub-CQs, which \
                 efadv_query_cq does not describe"
            ),
        }
    }
}
