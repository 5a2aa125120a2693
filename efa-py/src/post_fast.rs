//! The lean path of `QP.post_send` for the common shape of a list: each `SendWR` has one
//! SGE made from an MR, nothing inline, and passes every check. It reads the list and
//! its SGE lists by borrowed references, borrows each run of requests' MR and AH once,
//! and stages each request straight into the batch (one pass, no intermediate plan).
//!
//! It decides nothing on its own: any request it does not take as it is (another shape,
//! a closed MR or AH, a request a check refuses, one too long for the device) makes it
//! return `Ok(false)` before anything was posted or recorded, and the post goes the
//! general way (`crate::post`), which raises what it always raised.

use std::sync::atomic::{AtomicPtr, Ordering};

use efa_typestate::sys::verbs::{ibv_send_flags, ibv_wr_opcode as Op};
use efa_typestate::{ArrayVec, DynQp, Payload, RemoteBuffer, SendBatch, SendOp, SendOps, SendWr};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::PyClass;
use std::marker::PhantomData;

use crate::errors::OrRaise;
use crate::mr::{MrKind, MR};
use crate::pd::{SPd, AH};
use crate::post::CHUNK;
use crate::qp::QP;
use crate::wr::{SendWR, WrFields, SGE};

const INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;
const SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;

/// The type objects of the classes a post reads, stored once at import
/// ([`init_types`]): PyO3's lookup of a class's type object costs about a hundred
/// instructions a call.
static SEND_WR: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());
static SGE_T: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());
static RECV_WR: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(core::ptr::null_mut());

/// Records the type objects (at import; they live as long as the process).
pub fn init_types(py: Python<'_>) {
    let set = |at: &AtomicPtr<ffi::PyTypeObject>, t: *mut ffi::PyTypeObject| {
        at.store(t, Ordering::Relaxed)
    };
    set(&SEND_WR, py.get_type::<SendWR>().as_type_ptr());
    set(&SGE_T, py.get_type::<SGE>().as_type_ptr());
    set(&RECV_WR, py.get_type::<crate::wr::RecvWR>().as_type_ptr());
}

/// A class whose type object [`init_types`] stored.
pub trait Cached: PyClass {
    fn type_ptr() -> *mut ffi::PyTypeObject;
}
impl Cached for SendWR {
    fn type_ptr() -> *mut ffi::PyTypeObject {
        SEND_WR.load(Ordering::Relaxed)
    }
}
impl Cached for SGE {
    fn type_ptr() -> *mut ffi::PyTypeObject {
        SGE_T.load(Ordering::Relaxed)
    }
}
impl Cached for crate::wr::RecvWR {
    fn type_ptr() -> *mut ffi::PyTypeObject {
        RECV_WR.load(Ordering::Relaxed)
    }
}

/// `obj` as a `T` if its type is exactly `T` (no subclass: `SendWR`, `RecvWR` and `SGE`
/// have none).
#[inline(always)]
pub fn exact<'a, 'py, T: Cached>(obj: &'a Bound<'py, PyAny>) -> Option<&'a Bound<'py, T>> {
    let t = T::type_ptr();
    if t.is_null() || obj.get_type_ptr() != t {
        return None;
    }
    // SAFETY: `t` is `T`'s type object (stored by `init_types`) and `obj`'s type is
    // exactly it, so `obj` is a `T`.
    Some(unsafe { obj.downcast_unchecked::<T>() })
}

/// A class's type object (`crate::post_fast::init_types` stored it at import).
pub(crate) struct TypeOf<'py, T>(PhantomData<(Python<'py>, T)>);

impl<'py, T: Cached> TypeOf<'py, T> {
    pub(crate) fn new(_py: Python<'py>) -> Self {
        TypeOf(PhantomData)
    }
    /// `obj` as a `T`: an exact type match is taken as is, anything else goes through
    /// `downcast` (which raises the usual `TypeError`).
    pub(crate) fn cast<'a>(&self, obj: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, T>> {
        match exact::<T>(obj) {
            Some(t) => Ok(t),
            None => Ok(obj.downcast::<T>()?),
        }
    }
}

/// The type objects a post of `W`s (`SendWR` or `RecvWR`) reads.
pub(crate) struct Types<'py, W> {
    pub(crate) wr: TypeOf<'py, W>,
    pub(crate) sge: TypeOf<'py, SGE>,
}

impl<'py, W: Cached> Types<'py, W> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        Types {
            wr: TypeOf::new(py),
            sge: TypeOf::new(py),
        }
    }
}

/// Item `i` of `list`, borrowed (no reference taken), if it has one.
#[inline(always)]
fn item<'a, 'py>(list: &'a Bound<'py, PyList>, i: usize) -> Option<Borrowed<'a, 'py, PyAny>> {
    let py = list.py();
    // SAFETY: `list` is a list; `PyList_GetItem` returns a borrowed reference (or NULL
    // with IndexError set, cleared here), valid while the list holds the item: the GIL is
    // held and no Python code runs until the caller is done with it.
    let p = unsafe { ffi::PyList_GetItem(list.as_ptr(), i as ffi::Py_ssize_t) };
    if p.is_null() {
        let _ = PyErr::take(py);
        return None;
    }
    // SAFETY: `p` is a valid, non-null borrowed reference (see above).
    Some(unsafe { Borrowed::from_ptr(py, p) })
}

/// `list`'s length, read from the object (`Py_SIZE`, part of the stable ABI: a list's
/// `ob_size` is its length), not by a call of `PyList_Size`.
#[inline(always)]
fn list_len(list: &Bound<'_, PyList>) -> isize {
    // SAFETY: `list` is a live list (a `PyVarObject`), read with the GIL held.
    unsafe { ffi::Py_SIZE(list.as_ptr()) }
}

/// The GIL released around a post, taken back on drop (also if the post panics):
/// `PyEval_SaveThread` and `PyEval_RestoreThread` themselves. PyO3's `allow_threads`
/// does the same with its own bookkeeping besides (its thread-local GIL count, its
/// pending reference counts), about thirty instructions a post, which code that touches
/// no Python object while the GIL is away has no use for.
struct Released(*mut ffi::PyThreadState);

impl Released {
    /// # Safety
    /// Until the guard drops, this thread calls no Python API (and uses no object bound
    /// to `_py`).
    #[inline(always)]
    unsafe fn gil(_py: Python<'_>) -> Released {
        // SAFETY: the GIL is held (`_py`); the caller keeps off the Python API until the
        // guard gives it back.
        Released(unsafe { ffi::PyEval_SaveThread() })
    }
}

impl Drop for Released {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: `self.0` is this thread's state, saved by `gil`; restored once.
        unsafe { ffi::PyEval_RestoreThread(self.0) }
    }
}

/// The MRs or AHs a post borrows: the first apart (most posts name one), so that a post
/// of one request drops no array.
struct Held<'py, T: PyClass, const N: usize> {
    first: Option<PyRef<'py, T>>,
    more: ArrayVec<PyRef<'py, T>, N>,
}

impl<T: PyClass, const N: usize> Default for Held<'_, T, N> {
    fn default() -> Self {
        Held {
            first: None,
            more: ArrayVec::new(),
        }
    }
}

impl<'py, T: PyClass, const N: usize> Held<'py, T, N> {
    /// Keeps `r` until the post is done; false if full (one per request at most).
    #[inline(always)]
    fn push(&mut self, r: PyRef<'py, T>) -> bool {
        if self.first.is_none() {
            self.first = Some(r);
            return true;
        }
        self.more.try_push(r).is_ok()
    }
}

/// Checks `wr` (one SGE, `sge`, of the MR `region` at `base`; destination `dest`) for
/// `qp` and adds it to `batch`: the checks of `send_checks::check_wr` and the Rust core's,
/// as yes or no (no: nothing added; the general path raises what it raises).
#[inline(always)]
fn stage_checked<'a, const N: usize>(
    qp: &QP,
    wr: &WrFields,
    sge: &SGE,
    (region, base): (&'a MrKind, u64),
    dest: &'a efa_typestate::Ah<SPd>,
    batch: &mut SendBatch<'a, N>,
) -> bool {
    let limits = batch.limits();
    let (max_msg, max_rdma) = (limits.max_msg_sz(), limits.max_rdma_size());
    let len = u64::from(sge.length);
    // One decoding of the opcode: the operation, the bit the QP must have enabled, and
    // the longest request the device takes (longer ones fail by their completions,
    // which the general path gives).
    let remote = RemoteBuffer::new(wr.remote_addr, len, wr.rkey);
    let (op, need, max) = match wr.opcode {
        Op::IBV_WR_RDMA_WRITE => (SendOp::Write(remote), SendOps::RDMA_WRITE, max_rdma),
        Op::IBV_WR_RDMA_WRITE_WITH_IMM => (
            SendOp::WriteImm(remote, wr.imm_data),
            SendOps::RDMA_WRITE_WITH_IMM,
            max_rdma,
        ),
        Op::IBV_WR_SEND => (SendOp::Send, SendOps::SEND, max_msg),
        Op::IBV_WR_SEND_WITH_IMM => (
            SendOp::SendImm(wr.imm_data),
            SendOps::SEND_WITH_IMM,
            max_msg,
        ),
        Op::IBV_WR_RDMA_READ => (SendOp::Read(remote), SendOps::RDMA_READ, max_rdma),
        _ => return false,
    };
    if qp.send_ops_flags & need.bits() == 0 || (max != 0 && len > u64::from(max)) {
        return false;
    }
    let Ok(local) = region.sge_at(sge.addr, len, base) else {
        return false;
    };
    let Ok(w) = SendWr::to_ah(
        wr.wr_id,
        op,
        dest,
        wr.remote_qpn,
        wr.remote_qkey,
        Payload::Sge(local),
    ) else {
        return false;
    };
    batch.push(w).is_ok()
}

/// The lean post of `items[start..end]` (a list, or one `SendWR` when `one` is given):
/// true if posted, false if this path did not take it (nothing posted; see the module
/// docs). Errors only from the post itself (the provider's refusal, a QP not in RTS).
pub fn post_chunk<'py>(
    qp: &QP,
    py: Python<'py>,
    list: Option<&Bound<'py, PyList>>,
    one: Option<&Bound<'py, PyAny>>,
    (start, end): (usize, usize),
) -> PyResult<bool> {
    // One request: a batch of one, on a frame of its own (a 64-request batch's frame
    // costs a one-request post more than its staging).
    if end - start == 1 {
        post_n::<1>(qp, py, list, one, (start, end))
    } else {
        post_n::<CHUNK>(qp, py, list, one, (start, end))
    }
}

/// The lean post of one `SendWR`, `obj` (`QP.post_send(wr)`): [`post_n`] without its
/// loop and the bookkeeping of many MRs and AHs. Same answers.
#[inline(never)]
pub fn post_single<'py>(qp: &QP, py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<bool> {
    let Some(q) = qp.inner.as_ref() else {
        return Ok(false);
    };
    let Some(wr) = exact::<SendWR>(obj) else {
        return Ok(false);
    };
    let this = wr.get();
    let Some(wr) = this.try_fields(py) else {
        return Ok(false);
    };
    if wr.send_flags & INLINE != 0 || (wr.send_flags & SIGNALED == 0 && !qp.sq_sig_all) {
        return Ok(false);
    }
    let Some(ah) = &wr.ah else {
        return Ok(false);
    };
    let sgl = wr.sg_list.bind(py);
    if list_len(sgl) != 1 {
        return Ok(false);
    }
    let Some(sge_obj) = item(sgl, 0) else {
        return Ok(false);
    };
    let Some(sge) = exact::<SGE>(&sge_obj) else {
        return Ok(false);
    };
    let sge = sge.get();
    let Some(mr) = &sge.mr else {
        return Ok(false);
    };
    // Borrowed (so open: `close` is refused) until after the post; declared before the
    // batch, which points into them.
    let Ok(mr) = mr.bind(py).try_borrow() else {
        return Ok(false);
    };
    let Ok(ah) = ah.bind(py).try_borrow() else {
        return Ok(false);
    };
    let (Some(region), Some(dest)) = (mr.inner.as_ref(), ah.inner.as_ref()) else {
        return Ok(false);
    };
    let mut batch = SendBatch::<'_, 1>::new(q);
    let key = [qp.serial, sge.serial, ah.serial];
    // SAFETY: the SGE's MR and the AH are borrowed in `mr` and `ah` (open: checked
    // above) until after the batch is posted or dropped.
    if !unsafe { this.kept.push_again(py, key, &mut batch) } {
        if !stage_checked(qp, &wr, sge, (region, mr.base), dest, &mut batch) {
            return Ok(false);
        }
        if let Some(send) = batch.keep_last() {
            this.kept.keep(py, key, send);
        }
    }
    post(q, py, &batch)?;
    Ok(true)
}

/// Posts `batch` to `q` with the GIL released.
#[inline(always)]
fn post<const N: usize>(q: &DynQp<SPd>, py: Python<'_>, batch: &SendBatch<'_, N>) -> PyResult<()> {
    let posted = {
        // SAFETY: this thread holds the GIL (`py`); until `_released` drops, it runs only
        // the Rust core's post, which calls no Python API.
        let _released = unsafe { Released::gil(py) };
        // SAFETY: every SGE names memory of an open MR, kept allocated by its Python
        // owner while the MR lives; the caller keeps the MRs and AHs borrowed (so open)
        // until the call returns. As in the `efa` package, the program must not reuse the
        // bytes before the request's completion is polled.
        unsafe { q.post_send(batch) }
    };
    posted.or_raise("post_send")
}

/// [`post_chunk`] with batches of `N` (at least `end - start`).
#[inline(never)]
fn post_n<'py, const N: usize>(
    qp: &QP,
    py: Python<'py>,
    list: Option<&Bound<'py, PyList>>,
    one: Option<&Bound<'py, PyAny>>,
    (start, end): (usize, usize),
) -> PyResult<bool> {
    let Some(q) = qp.inner.as_ref() else {
        return Ok(false);
    };
    // Declared before the batch, so that they outlive it: the batch points into the
    // MRs and AHs they keep borrowed.
    let mut mrs: Held<'py, MR, N> = Held::default();
    let mut ahs: Held<'py, AH, N> = Held::default();
    let mut batch = SendBatch::<'_, N>::new(q);
    let mut last_mr: Option<(*mut ffi::PyObject, &MrKind, u64)> = None;
    let mut last_ah: Option<(*mut ffi::PyObject, &efa_typestate::Ah<SPd>, u64)> = None;
    for i in start..end {
        let obj = match (list, one) {
            (Some(l), _) => match item(l, i) {
                Some(o) => o,
                None => return Ok(false),
            },
            (None, Some(o)) => o.as_borrowed(),
            (None, None) => return Ok(false),
        };
        let Some(wr) = exact::<SendWR>(&obj) else {
            return Ok(false);
        };
        let this = wr.get();
        let Some(wr) = this.try_fields(py) else {
            return Ok(false);
        };
        // The checks of `send_checks::check_wr` (the opcode's below), as yes or no.
        if wr.send_flags & INLINE != 0 || (wr.send_flags & SIGNALED == 0 && !qp.sq_sig_all) {
            return Ok(false);
        }
        let Some(ah) = &wr.ah else {
            return Ok(false);
        };
        // One SGE, made from an MR.
        let sgl = wr.sg_list.bind(py);
        if list_len(sgl) != 1 {
            return Ok(false);
        }
        let Some(sge_obj) = item(sgl, 0) else {
            return Ok(false);
        };
        let Some(sge) = exact::<SGE>(&sge_obj) else {
            return Ok(false);
        };
        let sge = sge.get();
        let Some(mr) = &sge.mr else {
            return Ok(false);
        };
        let (region, base) = match last_mr {
            Some((p, region, base)) if p == mr.as_ptr() => (region, base),
            _ => {
                let Ok(m) = mr.bind(py).try_borrow() else {
                    return Ok(false);
                };
                let Some(kind) = m.inner.as_ref() else {
                    return Ok(false);
                };
                // SAFETY: the `MrKind` lives in the MR's Python object, not in the
                // `PyRef` moved into `mrs`: `mrs` keeps the object alive and shared-
                // borrowed (so never mutated: `close` is refused) until it is dropped,
                // after `batch`, the only holder of what is derived from this reference.
                let kind: &MrKind = unsafe { &*(kind as *const MrKind) };
                let base = m.base;
                if !mrs.push(m) {
                    return Ok(false);
                }
                last_mr = Some((mr.as_ptr(), kind, base));
                (kind, base)
            }
        };
        let (dest, ah_serial) = match last_ah {
            Some((p, dest, serial)) if p == ah.as_ptr() => (dest, serial),
            _ => {
                let Ok(a) = ah.bind(py).try_borrow() else {
                    return Ok(false);
                };
                let Some(dest) = a.inner.as_ref() else {
                    return Ok(false);
                };
                // SAFETY: as for the MR above: `ahs` keeps the AH alive and borrowed
                // until after `batch` is dropped.
                let dest: &efa_typestate::Ah<SPd> = unsafe { &*(dest as *const _) };
                let serial = a.serial;
                if !ahs.push(a) {
                    return Ok(false);
                }
                last_ah = Some((ah.as_ptr(), dest, serial));
                (dest, serial)
            }
        };
        let key = [qp.serial, sge.serial, ah_serial];
        // SAFETY: the SGE's MR and the AH are borrowed in `mrs` and `ahs` (open: checked
        // above) until after the batch is posted or dropped.
        if unsafe { this.kept.push_again(py, key, &mut batch) } {
            continue;
        }
        if !stage_checked(qp, &wr, sge, (region, base), dest, &mut batch) {
            return Ok(false);
        }
        if let Some(send) = batch.keep_last() {
            this.kept.keep(py, key, send);
        }
    }
    if batch.is_empty() {
        return Ok(false);
    }
    // `mrs` and `ahs` keep the MRs and AHs borrowed until after the post.
    post(q, py, &batch)?;
    Ok(true)
}
