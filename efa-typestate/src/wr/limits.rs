//! [`QpLimits`]: what a QP was created with, and the checks every work request passes
//! when it is added to a batch (one compare per rule; nothing per byte).
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use super::{OpKind, Payload, RecvBufs, SendOps, SendWr};
use crate::error::{InvalidInput, PdObject, Result};
use crate::lease::LEASE_WR_ID_BIT;
use crate::pd::PdId;
use crate::qp::QpType;

/// The limits of one QP, as granted at creation: batches are checked against them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLimits {
    pub(crate) pd: PdId,
    pub(crate) qp_type: QpType,
    pub(crate) send_ops: SendOps,
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_msg: u32,
    pub(crate) max_rdma: u32,
    pub(crate) inline_write: bool,
}

/// Who builds the work request: user batches may not use the lease `wr_id` bit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    User,
    Lease,
}

impl QpLimits {
    /// UD or SRD.
    #[inline]
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// The send operations the QP was created with.
    #[inline]
    pub fn send_ops(&self) -> SendOps {
        self.send_ops
    }
    /// Send queue depth (`max_send_wr`): the longest send batch.
    #[inline]
    pub fn max_send_wr(&self) -> u32 {
        self.max_send_wr
    }
    /// Receive queue depth (`max_recv_wr`): the longest receive batch.
    #[inline]
    pub fn max_recv_wr(&self) -> u32 {
        self.max_recv_wr
    }
    /// SGEs per send (`max_send_sge`; RDMA takes 1).
    #[inline]
    pub fn max_send_sge(&self) -> u32 {
        self.max_send_sge
    }
    /// SGEs per receive (`max_recv_sge`).
    #[inline]
    pub fn max_recv_sge(&self) -> u32 {
        self.max_recv_sge
    }
    /// Inline bytes per send (`max_inline_data`).
    #[inline]
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline
    }
    /// Longest SEND in bytes (the port's `max_msg_sz`).
    #[inline]
    pub fn max_msg_sz(&self) -> u32 {
        self.max_msg
    }
    /// Longest single RDMA read or write in bytes (the device's `max_rdma_size`).
    #[inline]
    pub fn max_rdma_size(&self) -> u32 {
        self.max_rdma
    }

    #[inline(always)]
    fn check_wr_id(wr_id: u64, origin: Origin) -> Result<()> {
        if origin == Origin::User && wr_id & LEASE_WR_ID_BIT != 0 {
            return Err(InvalidInput::ReservedWrId(wr_id).into());
        }
        Ok(())
    }

    #[inline(always)]
    fn check_pd(&self, pd: PdId, what: PdObject) -> Result<()> {
        if pd != self.pd {
            return Err(InvalidInput::WrongPd(what).into());
        }
        Ok(())
    }

    /// Checks one send work request against the QP (see the module docs).
    #[inline(always)]
    pub(crate) fn check_send(&self, wr: &SendWr<'_>, origin: Origin) -> Result<()> {
        Self::check_wr_id(wr.wr_id, origin)?;
        self.check_pd(wr.dest.pd, PdObject::Peer)?;
        let op = wr.op.kind.op_bit();
        let rdma = wr.op.kind.is_rdma();
        if rdma && self.qp_type == QpType::Ud {
            return Err(InvalidInput::RdmaOnUd.into());
        }
        if !self.send_ops.contains(op) {
            return Err(InvalidInput::SendOpNotEnabled {
                op,
                enabled: self.send_ops,
            }
            .into());
        }
        // RDMA takes one SGE whatever `max_send_sge` says (the device's `max_sge_rd`).
        let max_sges = if rdma { 1 } else { self.max_send_sge };
        match wr.payload {
            Payload::Sge(s) => {
                // One SGE on a QP granted none: the provider would refuse it (EINVAL).
                if max_sges == 0 {
                    return Err(InvalidInput::TooManySges { count: 1, max: 0 }.into());
                }
                self.check_pd(s.pd(), PdObject::Sge)?
            }
            Payload::Sges(l) => {
                if l.len() > max_sges as usize {
                    return Err(InvalidInput::TooManySges {
                        count: l.len(),
                        max: max_sges,
                    }
                    .into());
                }
                if !l.is_empty() {
                    self.check_pd(l.pd(), PdObject::Sge)?;
                }
            }
            Payload::Inline(b) => {
                if wr.op.kind == OpKind::Read {
                    return Err(InvalidInput::InlineRead.into());
                }
                if rdma && !self.inline_write {
                    return Err(InvalidInput::InlineWriteNotEnabled.into());
                }
                if b.len() > self.max_inline as usize {
                    return Err(InvalidInput::InlineTooLong {
                        len: b.len(),
                        max: self.max_inline,
                    }
                    .into());
                }
            }
        }
        let len = wr.payload.len();
        if rdma && len > self.max_rdma as u64 {
            return Err(InvalidInput::RdmaTooLong {
                len,
                max: self.max_rdma,
            }
            .into());
        }
        if !rdma && len > self.max_msg as u64 {
            return Err(InvalidInput::MessageTooLong {
                len,
                max: self.max_msg,
            }
            .into());
        }
        Ok(())
    }

    /// Checks one receive work request against the QP.
    #[inline(always)]
    pub(crate) fn check_recv(&self, wr_id: u64, bufs: &RecvBufs<'_>, origin: Origin) -> Result<()> {
        Self::check_wr_id(wr_id, origin)?;
        match bufs {
            RecvBufs::Sge(s) => {
                // One SGE on a QP granted none: the provider would refuse it (EINVAL).
                if self.max_recv_sge == 0 {
                    return Err(InvalidInput::TooManySges { count: 1, max: 0 }.into());
                }
                self.check_pd(s.pd(), PdObject::Sge)
            }
            RecvBufs::Sges(l) => {
                if l.len() > self.max_recv_sge as usize {
                    return Err(InvalidInput::TooManySges {
                        count: l.len(),
                        max: self.max_recv_sge,
                    }
                    .into());
                }
                if l.is_empty() {
                    return Ok(());
                }
                self.check_pd(l.pd(), PdObject::Sge)
            }
        }
    }

    /// The error for a batch that already holds a whole queue's worth.
    pub(crate) fn queue_full(depth: u32) -> crate::Error {
        InvalidInput::BatchLargerThanQueue { depth }.into()
    }
}

/// Limits for tests that need no device.
#[cfg(test)]
pub(crate) fn test_limits(pd: PdId, qp_type: QpType) -> QpLimits {
    QpLimits {
        pd,
        qp_type,
        send_ops: match qp_type {
            QpType::Ud => SendOps::SEND | SendOps::SEND_WITH_IMM,
            QpType::Srd => SendOps::all(),
        },
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline: 32,
        max_msg: 8192,
        max_rdma: 4096,
        inline_write: false,
    }
}

#[cfg(test)]
impl super::TargetSealed for QpLimits {}
#[cfg(test)]
impl super::SendTarget for QpLimits {
    fn limits(&self) -> &QpLimits {
        self
    }
}
#[cfg(test)]
impl super::RecvTarget for QpLimits {
    fn limits(&self) -> &QpLimits {
        self
    }
}
