//! Posting: Python work requests checked and handed to the Rust core, one doorbell per
//! list, without the GIL and without heap allocation (everything staged on the stack).

use efa_typestate::{ArrayVec, Payload, RecvBatch, RemoteBuffer, SendOp, SendWr, Sge, SgeList};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::{invalid, OrRaise};
use crate::pd::{MrKind, AH, MR};
use crate::qp::QP;
use crate::wr::{RecvWR, SendWR, SGE};

/// Work requests per doorbell; longer lists go out in several (each all or nothing).
const CHUNK: usize = 64;
const SIGNALED: u32 = 1 << 1;

/// The MR an SGE addresses: its owner, or the MR of its lkey in the QP's PD.
fn mr_of<'py>(qp: &QP, py: Python<'py>, sge: &SGE) -> PyResult<PyRef<'py, MR>> {
    if let Ok(mr) = sge.owner.bind(py).downcast::<MR>() {
        return Ok(mr.clone().borrow());
    }
    let pd = qp.pd.borrow(py);
    match pd
        .mrs
        .bind(py)
        .call_method1("get", (sge.lkey,))?
        .downcast_into::<MR>()
    {
        Ok(mr) => Ok(mr.borrow()),
        Err(_) => Err(invalid(
            "post",
            format!(
                "SGE lkey 0x{:x} names no open memory region of this QP's protection domain",
                sge.lkey
            ),
        )),
    }
}

/// Items of `wrs`: a list, or one object.
fn items<'py>(wrs: &Bound<'py, PyAny>) -> Bound<'py, PyList> {
    match wrs.downcast::<PyList>() {
        Ok(l) => l.clone(),
        Err(_) => PyList::new(wrs.py(), [wrs]).expect("a one-item list"),
    }
}

/// A WR's single SGE (EFA sends and receives here carry at most one).
fn one_sge<'py>(py: Python<'py>, sg_list: &Py<PyList>) -> PyResult<Option<PyRef<'py, SGE>>> {
    let l = sg_list.bind(py);
    match l.len() {
        0 => Ok(None),
        1 => Ok(Some(l.get_item(0)?.downcast_into::<SGE>()?.borrow())),
        n => Err(invalid(
            "post",
            format!("{n} SGEs in one work request: efa-py posts at most one"),
        )),
    }
}

fn sge_of<'a>(mr: &'a MR, s: &SGE) -> PyResult<Sge<'a>> {
    let kind: &MrKind = mr.get()?;
    kind.sge_at(s.addr, u64::from(s.length), mr.base)
        .or_raise("post")
}

pub fn post_send(qp: &mut QP, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
    let list = items(wrs);
    let n = list.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        post_send_chunk(qp, py, &list, start, end)?;
        start = end;
    }
    Ok(())
}

fn post_send_chunk(
    qp: &mut QP,
    py: Python<'_>,
    list: &Bound<'_, PyList>,
    start: usize,
    end: usize,
) -> PyResult<()> {
    // Borrows of the MRs and AHs the requests name, held until the post returned.
    let mut mrs: ArrayVec<PyRef<'_, MR>, CHUNK> = ArrayVec::new();
    let mut ahs: ArrayVec<PyRef<'_, AH>, CHUNK> = ArrayVec::new();
    struct Plan {
        wr_id: u64,
        op: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
        qpn: u32,
        qkey: u32,
        sge: Option<(u64, u32)>,
    }
    let mut plans: ArrayVec<Plan, CHUNK> = ArrayVec::new();
    for i in start..end {
        let item = list.get_item(i)?;
        let wr = item.downcast::<SendWR>()?.borrow();
        if wr.send_flags & SIGNALED == 0 && !qp.sq_sig_all {
            return Err(invalid(
                "post_send",
                format!(
                    "work request {} is not SIGNALED: EFA completes every send (set SendFlags.SIGNALED or sq_sig_all=True)",
                    wr.wr_id
                ),
            ));
        }
        let ah = wr.ah.as_ref().ok_or_else(|| {
            invalid(
                "post_send",
                format!(
                    "work request {} names no destination (dest= or ah=)",
                    wr.wr_id
                ),
            )
        })?;
        ahs.push(ah.bind(py).borrow());
        let sge = match one_sge(py, &wr.sg_list)? {
            None => None,
            Some(s) => {
                mrs.push(mr_of(qp, py, &s)?);
                Some((s.addr, s.length))
            }
        };
        plans.push(Plan {
            wr_id: wr.wr_id,
            op: wr.opcode,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            imm: wr.imm_data,
            qpn: wr.remote_qpn,
            qkey: wr.remote_qkey,
            sge,
        });
    }
    let empty = SgeList::<1>::new(&[]).or_raise("post_send")?;
    let mut staged: ArrayVec<SendWr<'_>, CHUNK> = ArrayVec::new();
    let mut m = 0;
    for (i, p) in plans.iter().enumerate() {
        let payload = match p.sge {
            None => Payload::Sges(empty.as_sges()),
            Some((addr, len)) => {
                let mr = &mrs[m];
                m += 1;
                let kind = mr.get()?;
                Payload::Sge(
                    kind.sge_at(addr, u64::from(len), mr.base)
                        .or_raise("post_send")?,
                )
            }
        };
        let remote = RemoteBuffer::new(p.remote_addr, payload.len(), p.rkey);
        let op = match p.op {
            0 => SendOp::Write(remote),
            1 => SendOp::WriteImm(remote, p.imm),
            2 => SendOp::Send,
            3 => SendOp::SendImm(p.imm),
            4 => SendOp::Read(remote),
            o => {
                return Err(invalid(
                    "post_send",
                    format!("opcode {o} is not one EFA posts"),
                ))
            }
        };
        let ah = ahs[i].get()?;
        staged.push(SendWr::to_ah(p.wr_id, op, ah, p.qpn, p.qkey, payload).or_raise("post_send")?);
    }
    let q = qp.get_mut()?;
    py.allow_threads(|| {
        // SAFETY: every SGE names memory of an open MR, whose buffer its Python owner
        // keeps allocated while the MR lives; as in the `efa` package, the program must
        // not close an MR or reuse its bytes before the request's completion is polled
        // (a closed MR's key is invalid, so such a request fails at the device).
        unsafe {
            q.post_with(|s| {
                for wr in staged {
                    s.push(wr)?;
                }
                Ok(())
            })
        }
    })
    .or_raise("post_send")
}

pub fn post_recv(qp: &mut QP, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
    let list = items(wrs);
    let n = list.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        let mut mrs: ArrayVec<PyRef<'_, MR>, CHUNK> = ArrayVec::new();
        let mut plans: ArrayVec<(u64, u64, u32), CHUNK> = ArrayVec::new();
        for i in start..end {
            let item = list.get_item(i)?;
            let wr = item.downcast::<RecvWR>()?.borrow();
            let s = one_sge(py, &wr.sg_list)?
                .ok_or_else(|| invalid("post_recv", format!("receive {} has no SGE", wr.wr_id)))?;
            mrs.push(mr_of(qp, py, &s)?);
            plans.push((wr.wr_id, s.addr, s.length));
        }
        let q = qp.get()?;
        let mut batch = RecvBatch::<'_, CHUNK>::new(q);
        for (mr, &(wr_id, addr, len)) in mrs.iter().zip(plans.iter()) {
            let sge = sge_of(
                mr,
                &SGE {
                    addr,
                    length: len,
                    lkey: 0,
                    owner: py.None(),
                },
            )?;
            batch.push(wr_id, sge).or_raise("post_recv")?;
        }
        // SAFETY: as for sends (see `post_send_chunk`): the receive buffers are kept
        // allocated by their MRs' owners.
        py.allow_threads(|| unsafe { q.post_recv(&batch) })
            .or_raise("post_recv")?;
        start = end;
    }
    Ok(())
}
