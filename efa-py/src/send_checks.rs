//! The checks a send request passes before it is staged, in the `efa` package's order,
//! and the opcodes it maps to.

use efa_typestate::sys::verbs::ibv_send_flags;
use efa_typestate::{ArrayVec, DynQp, RemoteBuffer, SendOp};
use pyo3::prelude::*;

use crate::args::value_error;
use crate::credits::Refused;
use crate::errors::invalid;
use crate::pd::{SPd, AH};
use crate::post::CHUNK;
use crate::qp::QP;
use crate::wr::WrFields;

const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;

/// A request's checks before its SGEs are looked at, in the package's order: a
/// destination, an opcode EFA posts, one the QP was created with (`ValueError`, as the
/// package raises them), then signaling (the package's `EfaError`, `EINVAL`). Returns
/// the destination.
pub fn check_wr<'a>(qp: &QP, wr: &'a WrFields) -> PyResult<&'a Py<AH>> {
    use efa_typestate::sys::verbs::ibv_wr_opcode as Op;
    use efa_typestate::SendOps;
    let ah = wr.ah.as_ref().ok_or_else(|| {
        value_error(
            "EFA sends are connectionless: each SendWR needs a destination \
             (dest=Peer or ah/remote_qpn/remote_qkey)",
        )
    })?;
    let need = match wr.opcode {
        Op::IBV_WR_SEND => SendOps::SEND,
        Op::IBV_WR_SEND_WITH_IMM => SendOps::SEND_WITH_IMM,
        Op::IBV_WR_RDMA_READ => SendOps::RDMA_READ,
        Op::IBV_WR_RDMA_WRITE => SendOps::RDMA_WRITE,
        Op::IBV_WR_RDMA_WRITE_WITH_IMM => SendOps::RDMA_WRITE_WITH_IMM,
        o => {
            return Err(value_error(format!(
                "EFA supports SEND, SEND_WITH_IMM, RDMA_READ, RDMA_WRITE and \
                 RDMA_WRITE_WITH_IMM (got opcode {o})"
            )))
        }
    };
    if qp.send_ops_flags & need.bits() == 0 {
        return Err(value_error(format!(
            "opcode {} is not enabled in this QP's send_ops_flags",
            wr.opcode
        )));
    }
    if wr.send_flags & SIGNALED == 0 && !qp.sq_sig_all {
        return Err(invalid(
            "post_send",
            format!(
                "work request {} is not SIGNALED: EFA completes every send (set SendFlags.SIGNALED or sq_sig_all=True)",
                wr.wr_id
            ),
        ));
    }
    Ok(ah)
}

/// The requests of a chunk that fail by their completions (`crate::credits::Refused`).
pub type Refusals = ArrayVec<Refused, CHUNK>;

/// True (and the request noted in `refused`) for a SEND longer than the port's
/// `max_msg_sz` or an RDMA read or write longer than the device's `max_rdma_size`: the
/// Rust core refuses to post it, where the device (and so the `efa` package) fails it by
/// an error completion; this package gives that completion.
pub fn too_long(q: &DynQp<SPd>, op: u32, len: u64, wr_id: u64, refused: &mut Refusals) -> bool {
    use efa_typestate::sys::verbs::{ibv_wc_opcode as Wc, ibv_wr_opcode as Op};
    let limits = q.limits();
    let (max, opcode) = match op {
        Op::IBV_WR_SEND | Op::IBV_WR_SEND_WITH_IMM => (limits.max_msg_sz(), Wc::IBV_WC_SEND),
        Op::IBV_WR_RDMA_WRITE | Op::IBV_WR_RDMA_WRITE_WITH_IMM => {
            (limits.max_rdma_size(), Wc::IBV_WC_RDMA_WRITE)
        }
        Op::IBV_WR_RDMA_READ => (limits.max_rdma_size(), Wc::IBV_WC_RDMA_READ),
        _ => return false,
    };
    // A device that reports no RDMA size (0) leaves the Rust core to judge.
    if max == 0 || len <= u64::from(max) {
        return false;
    }
    refused.push(Refused {
        wr_id,
        qp_num: q.qpn(),
        opcode,
    });
    true
}

pub fn send_op(op: u32, remote: RemoteBuffer, imm: u32) -> PyResult<SendOp> {
    use efa_typestate::sys::verbs::ibv_wr_opcode as Op;
    Ok(match op {
        Op::IBV_WR_RDMA_WRITE => SendOp::Write(remote),
        Op::IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteImm(remote, imm),
        Op::IBV_WR_SEND => SendOp::Send,
        Op::IBV_WR_SEND_WITH_IMM => SendOp::SendImm(imm),
        Op::IBV_WR_RDMA_READ => SendOp::Read(remote),
        o => {
            return Err(invalid(
                "post_send",
                format!("opcode {o} is not one EFA posts"),
            ))
        }
    })
}
