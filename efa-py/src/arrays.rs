//! The array API's post (an addition to the `efa` package's API): a whole transfer of
//! RDMA writes or reads, given as arrays of offsets and lengths against one local MR
//! and one remote buffer, checked in full and then posted in one session.
//!
//! Two passes. The first, with the GIL, reads every entry from the caller's buffers,
//! checks its local range against the MR and its remote range against the remote
//! buffer's length, splits it at the chunk size (at most the device's `max_rdma_size`)
//! and stages the resulting work requests (SGE, remote address, `wr_id`, immediate) in
//! one vector; an entry that fails raises with its index and nothing is posted. The
//! second, without the GIL, hands them to the QP in one `post_with` session
//! (efa-typestate's `SendSession`: each request checked against the QP and written
//! into the send queue, a doorbell every `max_batch` requests), all or nothing: a send
//! queue without room for all of them posts none (`EfaError`, "send queue is full").

use efa_typestate::{Errno, MemoryRegion, Payload, RemoteBuffer, SendOp, SendWr, Sge};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrays_buf::Ints;
use crate::errors::{invalid, raise, OrRaise};
use crate::pd::{MrKind, AH, MR};
use crate::qp::QP;
use efa_typestate::sys::verbs::ibv_wr_opcode as Op;

/// One staged work request.
struct Rec<'a> {
    sge: Sge<'a>,
    wr_id: u64,
    raddr: u64,
    len: u32,
    imm: u32,
}

#[derive(Clone, Copy)]
enum Kind {
    Write,
    WriteImm,
    Read,
}

/// What the GIL-free post reads (`allow_threads` wants `Send`).
struct Staged<'a, T>(T, core::marker::PhantomData<&'a ()>);
// SAFETY: `allow_threads` runs the closure on this same thread; `Send` is asked only
// because the GIL is released meanwhile. The QP, AH and MR it points into stay borrowed
// from their Python handles (so open: `close` is refused) until the call returns.
unsafe impl<T> Send for Staged<'_, T> {}

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
        (None, false) | (Some(Op::IBV_WR_RDMA_WRITE), false) => Kind::Write,
        (None, true) | (Some(Op::IBV_WR_RDMA_WRITE_WITH_IMM), true) => Kind::WriteImm,
        (Some(Op::IBV_WR_RDMA_READ), false) => Kind::Read,
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
    let mr_len: u64 = mr.getattr("length")?.extract()?; // raises for a closed MR
    let mr = mr.borrow();
    let region = mr.get()?;

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

    // Pass 1: every entry checked and split; nothing is posted before all passed. The
    // loop is specialised per kind of registration (its SGEs made without a dispatch).
    let mut recs: Vec<Rec<'_>> = Vec::with_capacity(n.min(depth));
    let arrays = Arrays {
        lo: &lo,
        ro: &ro,
        ln: &ln,
        ids: ids.as_ref(),
        imms: imms.as_ref(),
        n,
    };
    let lim = Limits {
        mr_len,
        raddr,
        rlen,
        chunk,
        depth,
    };
    match region {
        MrKind::Local(m) => stage(m, &arrays, &lim, &mut recs)?,
        MrKind::Remote(m) => stage(m, &arrays, &lim, &mut recs)?,
        MrKind::DmaBuf(m) => stage(m, &arrays, &lim, &mut recs)?,
        MrKind::Gpu(g) => stage(g.region(), &arrays, &lim, &mut recs)?,
    }
    drop((lo, ro, ln, ids, imms)); // the exports are released with the GIL held
    let dest = ah.get()?;
    let count = u32::try_from(recs.len()).unwrap_or(u32::MAX);
    credits.reserve("post_send", qp_num, count)?;
    let staged = Staged((q, &recs, dest), core::marker::PhantomData);
    py.allow_threads(move || {
        let staged = staged;
        let (q, recs, dest) = staged.0;
        // SAFETY: every SGE names memory of the open MR, whose buffer its Python owner
        // keeps allocated while the MR lives; as with `QP.post_send`, the program must
        // not close the MR or reuse its bytes before the completions are polled (a
        // closed MR's key is invalid, so such a request fails at the device).
        unsafe {
            q.post_with(|s| {
                for r in recs.iter() {
                    let remote = RemoteBuffer::new(r.raddr, u64::from(r.len), rkey);
                    let op = match kind {
                        Kind::Write => SendOp::Write(remote),
                        Kind::WriteImm => SendOp::WriteImm(remote, r.imm),
                        Kind::Read => SendOp::Read(remote),
                    };
                    s.push(SendWr::to_ah(
                        r.wr_id,
                        op,
                        dest,
                        qpn,
                        qkey,
                        Payload::Sge(r.sge),
                    )?)?;
                }
                Ok(())
            })
        }
    })
    .or_raise("post_send")
    .inspect_err(|_| credits.release(qp_num, count))?;
    Ok(recs.len())
}

/// The caller's arrays, each checked to hold `n` items.
struct Arrays<'a, 'py> {
    lo: &'a Ints<'py, u64>,
    ro: &'a Ints<'py, u64>,
    ln: &'a Ints<'py, u32>,
    ids: Option<&'a Ints<'py, u64>>,
    imms: Option<&'a Ints<'py, u32>>,
    n: usize,
}

/// What entries are checked against: the MR's length, the remote buffer, the chunk
/// size and the send queue's depth.
struct Limits {
    mr_len: u64,
    raddr: u64,
    rlen: u64,
    chunk: u32,
    depth: usize,
}

/// Checks every entry and stages its work requests (SGEs of `m`) into `recs`; the first
/// bad entry raises with its index.
fn stage<'m, M: MemoryRegion + ?Sized>(
    m: &'m M,
    a: &Arrays<'_, '_>,
    lim: &Limits,
    recs: &mut Vec<Rec<'m>>,
) -> PyResult<()> {
    let Limits {
        mr_len,
        raddr,
        rlen,
        chunk,
        depth,
    } = *lim;
    for i in 0..a.n {
        // SAFETY: `i < n`, and every array holds `n` items (checked by the caller).
        let (off, roff, len) = unsafe { (a.lo.at(i), a.ro.at(i), a.ln.at(i)) };
        if len == 0 {
            return Err(bad(i, "length 0".into()));
        }
        let l64 = u64::from(len);
        if off > mr_len || l64 > mr_len - off {
            return Err(bad(
                i,
                format!("local range {off}+{len} runs past the memory region's {mr_len} bytes"),
            ));
        }
        if roff > rlen || l64 > rlen - roff {
            return Err(bad(
                i,
                format!("remote range {roff}+{len} runs past the remote buffer's {rlen} bytes"),
            ));
        }
        let Some(rstart) = raddr.checked_add(roff) else {
            return Err(bad(i, format!("remote address 0x{raddr:x}+{roff} wraps")));
        };
        // SAFETY: as above (`wr_ids` and `imm`, when given, hold `n` items).
        let (wr_id, imm) = unsafe {
            (
                a.ids.map_or(i as u64, |x| x.at(i)),
                a.imms.map_or(0, |x| x.at(i)),
            )
        };
        // One request per entry unless it is longer than a chunk (no division then).
        let pieces = if len <= chunk {
            1
        } else {
            len.div_ceil(chunk) as usize
        };
        if recs.len() + pieces > depth {
            return Err(invalid(
                "post_send",
                format!(
                    "the transfer needs more than {depth} work requests (entry {i}), the send queue's depth: \
                     nothing was posted (split it, or create the QP with a larger max_send_wr)"
                ),
            ));
        }
        let mut done = 0u32;
        while done < len {
            let part = (len - done).min(chunk);
            // In range: `off + len <= mr_len`, checked above (so no wrap either).
            let sge = m
                .sge(off + u64::from(done), u64::from(part))
                .map_err(|e| bad(i, format!("local range: {e}")))?;
            recs.push(Rec {
                sge,
                wr_id,
                raddr: rstart + u64::from(done),
                len: part,
                imm,
            });
            done += part;
        }
    }
    Ok(())
}
