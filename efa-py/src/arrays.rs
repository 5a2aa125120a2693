//! The array API's post (an addition to the `efa` package's API): a whole transfer of
//! RDMA writes or reads, given as arrays of offsets and lengths against one local MR
//! and one remote buffer, checked in full and then posted in one session.
//!
//! The entries are copied from the caller's buffers once (`arrays_buf::Ints::copy_into`:
//! another thread's numpy may write them meanwhile, and what is checked must be what is
//! posted) and handed to efa-typestate's `post_run`: the MR, the
//! destination and the remote buffer are checked once for the whole transfer, each
//! entry only for its ranges (and split at the chunk size, at most the device's
//! `max_rdma_size`), each work request written into the send queue as it is checked, in
//! one session (a doorbell every `max_batch` requests), all or nothing: an entry that
//! fails raises with its index, and a send queue without room for all of them
//! (`EfaError`, "send queue is full") posts none.

use efa_typestate::{
    Errno, Error, InvalidInput, RdmaRun, RemoteBuffer, RunEntries, RunError, RunOp,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrays_buf::Ints;
use crate::errors::{efa, invalid, raise, OrRaise};
use crate::pd::{MrKind, AH, MR};
use crate::qp::QP;
use efa_typestate::sys::verbs::ibv_wr_opcode as Op;

fn bad(i: usize, what: String) -> PyErr {
    PyValueError::new_err(format!("entry {i}: {what}; nothing was posted"))
}

/// `efa.post_array(qp, dest, mr, remote, local_offsets, remote_offsets, lengths,
/// wr_ids=None, imm=None, opcode=None, max_chunk=None)`: see efa-py/README.md.
#[pyfunction]
#[pyo3(signature = (qp, dest, mr, remote, local_offsets, remote_offsets, lengths,
                    wr_ids=None, imm=None, opcode=None, max_chunk=None))]
#[allow(clippy::too_many_arguments)]
pub fn post_array(
    py: Python<'_>,
    qp: &Bound<'_, QP>,
    dest: &Bound<'_, PyAny>,
    mr: &Bound<'_, MR>,
    remote: (u64, u32, u64),
    local_offsets: &Bound<'_, PyAny>,
    remote_offsets: &Bound<'_, PyAny>,
    lengths: &Bound<'_, PyAny>,
    wr_ids: Option<&Bound<'_, PyAny>>,
    imm: Option<&Bound<'_, PyAny>>,
    opcode: Option<u32>,
    max_chunk: Option<u32>,
) -> PyResult<usize> {
    let kind = match (opcode, imm.is_some()) {
        (None, false) | (Some(Op::IBV_WR_RDMA_WRITE), false) => RunOp::Write,
        (None, true) | (Some(Op::IBV_WR_RDMA_WRITE_WITH_IMM), true) => RunOp::WriteImm,
        (Some(Op::IBV_WR_RDMA_READ), false) => RunOp::Read,
        (Some(Op::IBV_WR_RDMA_WRITE_WITH_IMM), false) => {
            return Err(PyValueError::new_err(
                "opcode RDMA_WRITE_WITH_IMM needs imm= (an array of uint32)",
            ))
        }
        (Some(o), _) => {
            let what = "post_array posts RDMA_WRITE, RDMA_WRITE_WITH_IMM (with imm=) or RDMA_READ";
            return Err(PyValueError::new_err(format!("opcode {o}: {what}")));
        }
    };
    let (raddr, rkey, rlen) = remote;
    // The destination: a `Peer` (or anything with `ah`, `qp_num` and `qkey`).
    let ah_obj = dest.getattr("ah")?;
    let ah = ah_obj.downcast::<AH>()?.borrow();
    let qpn: u32 = dest.getattr("qp_num")?.extract()?;
    let qkey: u32 = dest.getattr("qkey")?.extract()?;
    let mr = mr.borrow();
    let region = mr.get()?; // raises for a closed MR
    let mr_len = mr.len();

    let lo = Ints::<u64>::get(local_offsets, "local_offsets")?;
    let ro = Ints::<u64>::get(remote_offsets, "remote_offsets")?;
    let ln = Ints::<u32>::get(lengths, "lengths")?;
    let ids = wr_ids.map(|o| Ints::<u64>::get(o, "wr_ids")).transpose()?;
    let imms = imm.map(|o| Ints::<u32>::get(o, "imm")).transpose()?;
    let n = lo.len;
    for (name, len) in [
        ("remote_offsets", Some(ro.len)),
        ("lengths", Some(ln.len)),
        ("wr_ids", ids.as_ref().map(|a| a.len)),
        ("imm", imms.as_ref().map(|a| a.len)),
    ] {
        if let Some(len) = len.filter(|&l| l != n) {
            return Err(PyValueError::new_err(format!(
                "{name} has {len} entries, local_offsets {n}: the arrays must be as long"
            )));
        }
    }

    let mut qp_ref = qp.try_borrow_mut().map_err(|_| {
        raise(
            py,
            "post_send",
            Errno::EBUSY.0,
            "QP is in use by another thread's post or call; post_array needs it alone".into(),
        )
    })?;
    // The send CQ's free entries (`crate::credits`): taken for the whole transfer before
    // it is posted, as `QP.post_send` takes them, so a small CQ never overflows.
    let (credits, qp_num) = (std::sync::Arc::clone(&qp_ref.send_credits), qp_ref.qp_num);
    let q = qp_ref.get_mut()?;
    let limits = *q.limits();
    let depth = limits.max_send_wr() as usize;
    let chunk = match max_chunk {
        Some(0) => return Err(PyValueError::new_err("max_chunk must be at least 1")),
        Some(c) => c.min(limits.max_rdma_size()),
        None => limits.max_rdma_size(),
    }
    .max(1);
    let dest = ah.get()?;
    let remote = RemoteBuffer::new(raddr, rlen, rkey);
    let run = match region {
        MrKind::Local(m) => RdmaRun::to_ah(kind, m, dest, qpn, qkey, remote),
        MrKind::Remote(m) => RdmaRun::to_ah(kind, m, dest, qpn, qkey, remote),
        MrKind::DmaBuf(m) => RdmaRun::to_ah(kind, m, dest, qpn, qkey, remote),
        MrKind::Gpu(g) => RdmaRun::to_ah(kind, g.region(), dest, qpn, qkey, remote),
    }
    .and_then(|r| r.max_chunk(chunk))
    .map_err(|e| match e {
        Error::Invalid(InvalidInput::AddressWraps { .. }) => PyValueError::new_err(format!(
            "remote: {e} (address 0x{raddr:x}, length {rlen}); nothing was posted"
        )),
        e => efa("post_send", e),
    })?;

    // The arrays copied (see `Ints::copy_into`), checked as long as each other above.
    let mut scratch = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let entries = RunEntries::new(
        lo.copy_into(&mut scratch.0),
        ro.copy_into(&mut scratch.1),
        ln.copy_into(&mut scratch.2),
    );
    let entries = match (&ids, entries) {
        (Some(a), Ok(e)) => e.wr_ids(a.copy_into(&mut scratch.3)),
        (_, e) => e,
    };
    let entries = match (&imms, entries) {
        (Some(a), Ok(e)) => e.imm(a.copy_into(&mut scratch.4)),
        (_, e) => e,
    }
    .or_raise("post_send")?;
    // The send CQ's entries are taken once the transfer's work requests are counted
    // (all checked), before the device sees any: a refusal posts nothing.
    let mut refused: Option<PyErr> = None;
    let mut reserved = 0u32;
    let admit = |count: usize| {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        match credits.reserve("post_send", qp_num, count) {
            Ok(()) => {
                reserved = count;
                Ok(())
            }
            Err(e) => {
                refused = Some(e);
                Err(Error::SendQueueFull) // not raised: `refused` is
            }
        }
    };
    // Posted with the GIL held: a post of a whole queue is short (the device is not
    // waited for), and the credits' accounting (`admit`) is guarded by it.
    // SAFETY: every SGE names memory of the open MR, whose buffer its Python owner keeps
    // allocated while the MR lives; as with `QP.post_send`, the program must not close
    // the MR or reuse its bytes before the completions are polled (a closed MR's key is
    // invalid, so such a request fails at the device).
    let posted = unsafe { q.post_run_admit(&run, &entries, admit) };
    posted.map_err(|e| {
        if reserved != 0 {
            credits.release(qp_num, reserved);
        }
        refused.unwrap_or_else(|| run_error(e, mr_len, rlen, depth))
    })
}

/// A refused run as the package's exceptions: a bad entry's range or length as
/// `ValueError` naming the entry, the rest as `EfaError` (a full queue: `ENOMEM`).
fn run_error(e: RunError, mr_len: u64, rlen: u64, depth: usize) -> PyErr {
    let Some(i) = e.entry else {
        return efa("post_send", e.error);
    };
    match e.error {
        Error::Invalid(InvalidInput::EmptyEntry) => bad(i, "length 0".into()),
        Error::Invalid(InvalidInput::SgeOutOfBounds { offset, len }) => bad(
            i,
            format!("local range {offset}+{len} runs past the memory region's {mr_len} bytes"),
        ),
        Error::Invalid(InvalidInput::RemoteOutOfBounds { offset, len }) => bad(
            i,
            format!("remote range {offset}+{len} runs past the remote buffer's {rlen} bytes"),
        ),
        Error::Invalid(InvalidInput::BatchLargerThanQueue { .. }) => invalid(
            "post_send",
            format!(
                "the transfer needs more than {depth} work requests (entry {i}), the send queue's depth: \
                 nothing was posted (split it, or create the QP with a larger max_send_wr)"
            ),
        ),
        _ => {
            let msg = format!("{e}; nothing was posted");
            Python::with_gil(|py| raise(py, "post_send", crate::errors::EINVAL, msg))
        }
    }
}
