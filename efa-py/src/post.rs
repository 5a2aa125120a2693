//! Posting: Python work requests checked and handed to the Rust core, one doorbell per
//! list, without the GIL and without heap allocation (everything staged on the stack).
//!
//! A list is read in two passes: the first borrows every MR and AH it names (one borrow
//! per run of requests naming the same ones) and copies the scalars out, the second
//! builds the Rust work requests borrowing those MRs and AHs; both hold the GIL, the
//! post itself runs without it. Lists of the common shape (one SGE made from an MR per
//! request, nothing inline) take a leaner path than gather lists, inline sends and SGEs
//! given by address and lkey.

use efa_typestate::{
    ArrayVec, Payload, RecvBatch, RecvBufs, RemoteBuffer, SendBatch, SendWr, Sge, SgeList,
};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::{invalid, OrRaise};
use crate::pd::{MrKind, AH, MR};
use crate::post_fast::{exact, Cached, TypeOf, Types};
use crate::qp::QP;
use crate::send_checks::{check_wr, send_op, too_long, Refusals};
use crate::wr::{RecvWR, SendWR, SGE};
use efa_typestate::sys::verbs::ibv_send_flags;

/// Work requests per doorbell; longer lists go out in several (each all or nothing).
pub(crate) const CHUNK: usize = 64;
/// SGEs per work request (EFA devices offer 1 or 2).
const MAX_SGE: usize = 4;
/// Largest inline payload staged (EFA's inline buffers are 32 bytes).
const INLINE_MAX: usize = 64;
const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;

/// The MR an SGE addresses: the one it was made from, or the MR of its lkey in the QP's PD.
fn mr_of<'py>(qp: &QP, py: Python<'py>, sge: &SGE) -> PyResult<PyRef<'py, MR>> {
    if let Some(mr) = &sge.mr {
        return Ok(mr.bind(py).borrow());
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

/// The work requests of a post: a list, or one object (no list is made for it).
enum Items<'a, 'py> {
    List(&'a Bound<'py, PyList>),
    One(&'a Bound<'py, PyAny>),
}

impl<'py> Items<'_, 'py> {
    fn of<'a>(wrs: &'a Bound<'py, PyAny>) -> Items<'a, 'py> {
        if wrs.is_exact_instance_of::<PyList>() {
            // SAFETY: `wrs`'s type is exactly `list`.
            return Items::List(unsafe { wrs.downcast_unchecked::<PyList>() });
        }
        match wrs.downcast::<PyList>() {
            Ok(l) => Items::List(l),
            Err(_) => Items::One(wrs),
        }
    }
    fn len(&self) -> usize {
        match self {
            Items::List(l) => l.len(),
            Items::One(_) => 1,
        }
    }
    fn get_item(&self, i: usize) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Items::List(l) => l.get_item(i),
            Items::One(o) => Ok((*o).clone()),
        }
    }
}

/// `wrs` as a list when it is another iterable (a tuple, a generator: the package posts
/// `list(wrs)`); None for a list or one work request, which are read as they are.
fn as_list<'py, W: Cached>(wrs: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if wrs.is_instance_of::<PyList>() || exact::<W>(wrs).is_some() || wrs.is_instance_of::<W>() {
        return Ok(None);
    }
    let items = wrs.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    Ok(Some(PyList::new(wrs.py(), items)?.into_any()))
}

/// One SGE of a plan: which borrowed MR (none: an inline request's integer address), and
/// the range.
#[derive(Clone, Copy)]
struct PlannedSge {
    mr: Option<usize>,
    addr: u64,
    len: u32,
}

/// Reads a WR's SGE list, borrowing each SGE's MR into `mrs`. An `inline` request's SGE
/// made from an integer address names its bytes by address alone (they are copied at the
/// post; its lkey is not used), as in the package.
fn plan_sges<'py>(
    qp: &QP,
    py: Python<'py>,
    sge_type: &TypeOf<'py, SGE>,
    sg_list: &Py<PyList>,
    inline: bool,
    mrs: &mut ArrayVec<PyRef<'py, MR>, { CHUNK * MAX_SGE }>,
) -> PyResult<ArrayVec<PlannedSge, MAX_SGE>> {
    let l = sg_list.bind(py);
    if l.len() > MAX_SGE {
        return Err(invalid(
            "post",
            format!("{} SGEs in one work request: at most {MAX_SGE}", l.len()),
        ));
    }
    let mut out = ArrayVec::new();
    for item in l.iter() {
        let s = sge_type.cast(&item)?.get();
        let mr = if inline && s.mr.is_none() {
            None
        } else {
            mrs.push(mr_of(qp, py, s)?);
            Some(mrs.len() - 1)
        };
        out.push(PlannedSge {
            mr,
            addr: s.addr,
            len: s.length,
        });
    }
    Ok(out)
}

fn sge_of<'a>(mrs: &'a [PyRef<'_, MR>], p: PlannedSge) -> PyResult<Sge<'a>> {
    // Only inline requests plan SGEs without an MR, and their bytes are copied instead.
    let mr =
        p.mr.and_then(|i| mrs.get(i))
            .ok_or_else(|| invalid("post", "an SGE without a memory region".into()))?;
    let kind: &MrKind = mr.get()?;
    kind.sge_at(p.addr, u64::from(p.len), mr.base)
        .or_raise("post")
}

/// Copies the bytes of `sges` into `out` (inline sends): host registrations, and integer
/// addresses of this process's memory (registered or not).
fn copy_inline(
    mrs: &[PyRef<'_, MR>],
    sges: &[PlannedSge],
    out: &mut ArrayVec<u8, INLINE_MAX>,
) -> PyResult<()> {
    for p in sges {
        let start = out.len();
        let end = start + p.len as usize;
        if end > INLINE_MAX {
            return Err(invalid(
                "post_send",
                format!("inline payload of more than {INLINE_MAX} bytes (EFA inlines at most 32)"),
            ));
        }
        out.extend(core::iter::repeat(0).take(p.len as usize));
        match p.mr.and_then(|i| mrs.get(i)) {
            Some(mr) => mr.inline_bytes(p.addr, &mut out[start..end])?,
            None => crate::memory::read_own(p.addr, &mut out[start..end])?,
        }
    }
    Ok(())
}

struct Plan {
    wr_id: u64,
    op: u32,
    remote_addr: u64,
    rkey: u32,
    imm: u32,
    qpn: u32,
    qkey: u32,
    inline: bool,
    sges: ArrayVec<PlannedSge, MAX_SGE>,
}

/// `QP.post_send(wrs)`: one `SendWR` (the cheapest test first, inlined into the
/// caller), else a list, else any iterable.
#[inline(always)]
pub fn post_send(qp: &QP, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
    if exact::<SendWR>(wrs).is_none() {
        return post_many(qp, py, wrs);
    }
    qp.send_credits.reserve_py(py, "post_send", qp.qp_num, 1)?;
    let posted = match crate::post_fast::post_single(qp, py, wrs) {
        Ok(true) => return Ok(()),
        Ok(false) => post_chunk_checked(qp, py, &Items::One(wrs), (0, 1)),
        Err(e) => Err(e),
    };
    posted.inspect_err(|_| qp.send_credits.release_py(py, qp.qp_num, 1))
}

/// [`post_send`] of a list or another iterable.
#[inline(never)]
fn post_many(qp: &QP, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
    let listed = as_list::<SendWR>(wrs)?;
    let list = Items::of(listed.as_ref().unwrap_or(wrs));
    let n = list.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        // The send CQ's entries for these requests (given back if the post fails).
        let k = (end - start) as u32;
        qp.send_credits.reserve_py(py, "post_send", qp.qp_num, k)?;
        let fast = match &list {
            Items::List(l) => crate::post_fast::post_chunk(qp, py, Some(l), None, (start, end)),
            Items::One(o) => crate::post_fast::post_chunk(qp, py, None, Some(o), (start, end)),
        };
        let posted = match fast {
            Ok(true) => Ok(()),
            Ok(false) => post_chunk_checked(qp, py, &list, (start, end)),
            Err(e) => Err(e),
        };
        if let Err(e) = posted {
            qp.send_credits.release_py(py, qp.qp_num, k);
            return Err(e);
        }
        start = end;
    }
    Ok(())
}

/// A chunk the lean path (`crate::post_fast`) did not take, its CQ entries taken: the
/// common shape, else any, each check raising what the package raises; the SENDs too
/// long for the port, posted, fail by their completions. Apart, so that the lean path's
/// callers do not carry its stack frame.
#[inline(never)]
fn post_chunk_checked<'py>(
    qp: &QP,
    py: Python<'py>,
    list: &Items<'_, 'py>,
    (start, end): (usize, usize),
) -> PyResult<()> {
    let t = Types::<SendWR>::new(py);
    let mut refused = ArrayVec::new();
    if !post_simple_chunk(qp, py, &t, list, (start, end), &mut refused)? {
        post_send_chunk(qp, py, &t, list, (start, end), &mut refused)?;
    }
    qp.send_credits.refuse(py, &refused);
    Ok(())
}

fn post_send_chunk<'py>(
    qp: &QP,
    py: Python<'py>,
    t: &Types<'py, SendWR>,
    list: &Items<'_, 'py>,
    (start, end): (usize, usize),
    refused: &mut Refusals,
) -> PyResult<()> {
    // Pass 1: borrows of the MRs and AHs named, held until the post returned.
    let mut mrs: ArrayVec<PyRef<'_, MR>, { CHUNK * MAX_SGE }> = ArrayVec::new();
    let mut ahs: ArrayVec<PyRef<'_, AH>, CHUNK> = ArrayVec::new();
    let mut plans: ArrayVec<Plan, CHUNK> = ArrayVec::new();
    for i in start..end {
        let item = list.get_item(i)?;
        let wr = t.wr.cast(&item)?.get().fields(py);
        let ah = check_wr(qp, &wr)?;
        ahs.push(ah.bind(py).borrow());
        plans.push(Plan {
            wr_id: wr.wr_id,
            op: wr.opcode,
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            imm: wr.imm_data,
            qpn: wr.remote_qpn,
            qkey: wr.remote_qkey,
            inline: wr.send_flags & INLINE != 0,
            sges: plan_sges(
                qp,
                py,
                &t.sge,
                &wr.sg_list,
                wr.send_flags & INLINE != 0,
                &mut mrs,
            )?,
        });
    }
    // Pass 2: SGE lists and inline bytes staged on the stack, then the work requests.
    let mut lists: ArrayVec<Option<SgeList<'_, MAX_SGE>>, CHUNK> = ArrayVec::new();
    let mut inlines: ArrayVec<ArrayVec<u8, INLINE_MAX>, CHUNK> = ArrayVec::new();
    for p in &plans {
        let mut bytes = ArrayVec::new();
        let mut list = None;
        if p.inline {
            copy_inline(&mrs, &p.sges, &mut bytes)?;
        } else if p.sges.len() != 1 {
            let mut sges: ArrayVec<Sge<'_>, MAX_SGE> = ArrayVec::new();
            for s in &p.sges {
                sges.push(sge_of(&mrs, *s)?);
            }
            list = Some(SgeList::new(&sges).or_raise("post_send")?);
        }
        lists.push(list);
        inlines.push(bytes);
    }
    let q = qp.get()?;
    let mut batch = SendBatch::<'_, CHUNK>::new(q);
    for (i, p) in plans.iter().enumerate() {
        let payload = if p.inline {
            Payload::Inline(&inlines[i])
        } else if let Some(l) = &lists[i] {
            Payload::Sges(l.as_sges())
        } else {
            Payload::Sge(sge_of(&mrs, p.sges[0])?)
        };
        if too_long(q, p.op, payload.len(), p.wr_id, refused) {
            continue;
        }
        let remote = RemoteBuffer::new(p.remote_addr, payload.len(), p.rkey);
        let op = send_op(p.op, remote, p.imm)?;
        let wr = SendWr::to_ah(p.wr_id, op, ahs[i].get()?, p.qpn, p.qkey, payload)
            .or_raise("post_send")?;
        batch.push(wr).or_raise("post_send")?;
    }
    if batch.is_empty() {
        return Ok(());
    }
    let batch = Staged(&batch);
    py.allow_threads(move || {
        let batch = batch;
        // SAFETY: every SGE names memory of an open MR, whose buffer its Python owner
        // keeps allocated while the MR lives; as in the `efa` package, the program must
        // not close an MR or reuse its bytes before the request's completion is polled
        // (a closed MR's key is invalid, so such a request fails at the device).
        unsafe { q.post_send(batch.0) }
    })
    .or_raise("post_send")
}

/// A staged batch handed to the GIL-free post (`allow_threads` wants `Send`).
pub(crate) struct Staged<'b, T>(pub(crate) &'b T);
// SAFETY: `allow_threads` runs the closure on this same thread; `Send` is asked only
// because the GIL is released meanwhile. The batch is only read, and the MRs and AHs it
// points into stay borrowed (so open: `close` is refused) until the call returns.
unsafe impl<T> Send for Staged<'_, T> {}

pub fn post_recv(qp: &QP, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
    let t = Types::<RecvWR>::new(py);
    let listed = as_list::<RecvWR>(wrs)?;
    let list = Items::of(listed.as_ref().unwrap_or(wrs));
    let n = list.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        let mut mrs: ArrayVec<PyRef<'_, MR>, { CHUNK * MAX_SGE }> = ArrayVec::new();
        let mut plans: ArrayVec<(u64, ArrayVec<PlannedSge, MAX_SGE>), CHUNK> = ArrayVec::new();
        for i in start..end {
            let item = list.get_item(i)?;
            let wr = t.wr.cast(&item)?.borrow();
            plans.push((
                wr.wr_id,
                plan_sges(qp, py, &t.sge, &wr.sg_list, false, &mut mrs)?,
            ));
        }
        let mut lists: ArrayVec<Option<SgeList<'_, MAX_SGE>>, CHUNK> = ArrayVec::new();
        for (_, sges) in &plans {
            let mut list = None;
            if sges.len() != 1 {
                let mut v: ArrayVec<Sge<'_>, MAX_SGE> = ArrayVec::new();
                for s in sges {
                    v.push(sge_of(&mrs, *s)?);
                }
                list = Some(SgeList::new(&v).or_raise("post_recv")?);
            }
            lists.push(list);
        }
        let q = qp.get()?;
        let mut batch = RecvBatch::<'_, CHUNK>::new(q);
        for (i, (wr_id, sges)) in plans.iter().enumerate() {
            let bufs = match &lists[i] {
                Some(l) => RecvBufs::Sges(l.as_sges()),
                None => RecvBufs::Sge(sge_of(&mrs, sges[0])?),
            };
            batch.push(*wr_id, bufs).or_raise("post_recv")?;
        }
        let staged = Staged(&batch);
        // The receive CQ's entries for these requests (given back if the post fails).
        let k = (end - start) as u32;
        qp.recv_credits.reserve_py(py, "post_recv", qp.qp_num, k)?;
        py.allow_threads(move || {
            let staged = staged;
            // SAFETY: as for sends (see `post_send_chunk`): the receive buffers are kept
            // allocated by their MRs' owners.
            unsafe { q.post_recv(staged.0) }
        })
        .or_raise("post_recv")
        .inspect_err(|_| qp.recv_credits.release_py(py, qp.qp_num, k))?;
        start = end;
    }
    Ok(())
}

/// The common shape in one pass: every request has one SGE whose owner is its MR, and
/// none is inline. Returns false (nothing posted, nothing checked) for any other list.
fn post_simple_chunk<'py>(
    qp: &QP,
    py: Python<'py>,
    t: &Types<'py, SendWR>,
    list: &Items<'_, 'py>,
    (start, end): (usize, usize),
    refused: &mut Refusals,
) -> PyResult<bool> {
    struct Rec {
        ah: usize,
        mr: usize,
        wr_id: u64,
        remote_addr: u64,
        addr: u64,
        op: u32,
        rkey: u32,
        imm: u32,
        qpn: u32,
        qkey: u32,
        len: u32,
    }
    let mut mrs: ArrayVec<PyRef<'_, MR>, CHUNK> = ArrayVec::new();
    let mut ahs: ArrayVec<PyRef<'_, AH>, CHUNK> = ArrayVec::new();
    let mut recs: ArrayVec<Rec, CHUNK> = ArrayVec::new();
    for i in start..end {
        let item = list.get_item(i)?;
        let wr = t.wr.cast(&item)?.get().fields(py);
        if wr.send_flags & INLINE != 0 {
            return Ok(false);
        }
        let sgl = wr.sg_list.bind(py);
        if sgl.len() != 1 {
            return Ok(false);
        }
        let sge_obj = sgl.get_item(0)?;
        let sge = t.sge.cast(&sge_obj)?.get();
        let Some(mr) = &sge.mr else {
            return Ok(false);
        };
        let ah = check_wr(qp, &wr)?;
        // Consecutive requests usually name the same AH and MR: one borrow serves them.
        if !ahs.last().is_some_and(|last| last.as_ptr() == ah.as_ptr()) {
            ahs.push(ah.bind(py).borrow());
        }
        if !mrs.last().is_some_and(|last| last.as_ptr() == mr.as_ptr()) {
            mrs.push(mr.bind(py).borrow());
        }
        recs.push(Rec {
            ah: ahs.len() - 1,
            mr: mrs.len() - 1,
            wr_id: wr.wr_id,
            remote_addr: wr.remote_addr,
            addr: sge.addr,
            op: wr.opcode,
            rkey: wr.rkey,
            imm: wr.imm_data,
            qpn: wr.remote_qpn,
            qkey: wr.remote_qkey,
            len: sge.length,
        });
    }
    let q = qp.get()?;
    // Each MR and AH is checked open once, not once per request naming it.
    let mut regions: ArrayVec<(&MrKind, u64), CHUNK> = ArrayVec::new();
    for mr in &mrs {
        regions.push((mr.get()?, mr.base));
    }
    let mut dests = ArrayVec::<_, CHUNK>::new();
    for ah in &ahs {
        dests.push(ah.get()?);
    }
    let mut batch = SendBatch::<'_, CHUNK>::new(q);
    for r in &recs {
        if too_long(q, r.op, u64::from(r.len), r.wr_id, refused) {
            continue;
        }
        let (region, base) = regions[r.mr];
        let sge = region
            .sge_at(r.addr, u64::from(r.len), base)
            .or_raise("post_send")?;
        let remote = RemoteBuffer::new(r.remote_addr, u64::from(r.len), r.rkey);
        let op = send_op(r.op, remote, r.imm)?;
        let wr = SendWr::to_ah(r.wr_id, op, dests[r.ah], r.qpn, r.qkey, Payload::Sge(sge))
            .or_raise("post_send")?;
        batch.push(wr).or_raise("post_send")?;
    }
    if batch.is_empty() {
        return Ok(true);
    }
    let batch = Staged(&batch);
    py.allow_threads(move || {
        let batch = batch;
        // SAFETY: as in `post_send_chunk`: the MRs and AHs are borrowed for the call.
        unsafe { q.post_send(batch.0) }
    })
    .or_raise("post_send")?;
    Ok(true)
}
