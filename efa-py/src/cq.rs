//! Completion queues (classic `CQ`, extended `CQEx`), completion channels and work
//! completions (`WC`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use efa_typestate::{
    CompChannel as RChannel, CompletionQueue, Cq as RCq, CqOptions, ExtCq as RExtCq,
};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::args::value_error;
use crate::credits::Credits;
use crate::device::{Context, SCtx};
use crate::errors::{busy, closed, OrRaise};
use crate::wc::WcPool;

pub type SChannel = Arc<RChannel<SCtx>>;

/// Either form of CQ, both reference counted (QPs hold them).
#[derive(Clone)]
pub enum AnyCq {
    Classic(Arc<RCq<SCtx>>),
    Ext(Arc<RExtCq<SCtx>>),
}

macro_rules! with_cq {
    ($cq:expr, $c:ident => $body:expr) => {
        match $cq {
            AnyCq::Classic($c) => $body,
            AnyCq::Ext($c) => $body,
        }
    };
}

/// A completion event channel (`ibv_comp_channel`).
#[pyclass(module = "efa._efa")]
pub struct CompChannel {
    inner: Option<SChannel>,
    #[pyo3(get)]
    pub(crate) context: Py<Context>,
    /// The CQs made on this channel, to hand back from `get_cq_event` (weak: a CQ keeps
    /// its channel, not the other way round). Behind a lock, not `&mut self`: a CQ may
    /// be made on the channel while another thread waits in `get_cq_event`.
    cqs: Mutex<Vec<(efa_typestate::CqId, PyObject)>>,
}

impl CompChannel {
    pub fn create(ctx: &Bound<'_, Context>) -> PyResult<CompChannel> {
        let c = Arc::clone(ctx.borrow().get()?);
        let ch = RChannel::new(c).or_raise("ibv_create_comp_channel")?;
        Ok(CompChannel {
            inner: Some(Arc::new(ch)),
            context: ctx.clone().unbind(),
            cqs: Mutex::new(Vec::new()),
        })
    }
    fn get(&self) -> PyResult<&SChannel> {
        self.inner.as_ref().ok_or_else(|| closed("CompChannel"))
    }
}

#[pymethods]
impl CompChannel {
    /// The channel's pollable file descriptor.
    #[getter]
    fn fd(&self) -> PyResult<i32> {
        Ok(self.get()?.fd())
    }
    /// Blocks (without the GIL) until a CQ event arrives; returns that CQ, which counts
    /// the event as received and not yet acknowledged (`CQ.ack_events`). The Rust core
    /// acknowledges each event to libibverbs as it reads it.
    fn get_cq_event(&self, py: Python<'_>) -> PyResult<PyObject> {
        let ch = Arc::clone(self.get()?);
        let ev = py
            .allow_threads(|| ch.get_event())
            .or_raise("ibv_get_cq_event")?;
        let matching: Vec<PyObject> = {
            let cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
            cqs.iter()
                .filter(|(id, _)| *id == ev.cq())
                .map(|(_, weak)| weak.clone_ref(py))
                .collect()
        };
        for weak in matching {
            let cq = weak.call0(py)?;
            if let Ok(c) = cq.downcast_bound::<CQ>(py) {
                // A shared borrow: only `close()` borrows a CQ mutably, under the GIL this
                // thread holds, so it cannot be in progress.
                if let Ok(c) = c.try_borrow() {
                    c.unacked.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(cq);
            }
        }
        Ok(py.None())
    }
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.try_borrow_mut().map_err(|_| busy("CompChannel"))?.inner = None;
        Ok(())
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (*_exc))]
    fn __exit__(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        Self::close(slf)?;
        Ok(false)
    }
}

/// A completion queue: classic (`ibv_create_cq`) or, as the `CQEx` subclass, extended.
#[pyclass(module = "efa._efa", subclass, weakref)]
pub struct CQ {
    /// Events `CompChannel.get_cq_event` returned for this CQ and `ack_events` has not
    /// acknowledged yet (atomic: read through shared borrows).
    unacked: AtomicU32,
    pub(crate) inner: Option<AnyCq>,
    #[pyo3(get)]
    pub(crate) context: Py<Context>,
    #[pyo3(get)]
    channel: Option<Py<CompChannel>>,
    sgid: bool,
    unsolicited: bool,
    /// The `WC`s polls handed out, rewritten once the program dropped them.
    pool: WcPool,
    /// The work requests posted to this CQ's QPs and not yet polled (shared with them).
    pub(crate) credits: Arc<Credits>,
}

/// An extended EFA completion queue (`efadv_create_cq`): sender GIDs and unsolicited
/// write-with-immediate metadata.
#[pyclass(module = "efa._efa", extends = CQ)]
pub struct CQEx {}

impl CQ {
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        ctx: &Bound<'_, Context>,
        cqe: u32,
        channel: Option<Py<CompChannel>>,
        comp_vector: u32,
        ext: bool,
        sgid: bool,
        unsolicited: bool,
    ) -> PyResult<PyObject> {
        let py = ctx.py();
        let c = Arc::clone(ctx.borrow().get()?);
        let mut opts = CqOptions::new(cqe).comp_vector(comp_vector);
        if sgid {
            opts = opts.sender_gid();
        }
        if unsolicited {
            opts = opts.unsolicited_flag();
        }
        let ch = match &channel {
            Some(ch) => Some(Arc::clone(ch.borrow(py).get()?)),
            None => None,
        };
        let inner = match (ext, ch) {
            (false, None) => AnyCq::Classic(Arc::new(RCq::new(c, opts).or_raise("ibv_create_cq")?)),
            (false, Some(ch)) => AnyCq::Classic(Arc::new(
                RCq::with_channel(c, ch, opts).or_raise("ibv_create_cq")?,
            )),
            (true, None) => AnyCq::Ext(Arc::new(RExtCq::new(c, opts).or_raise("efadv_create_cq")?)),
            (true, Some(ch)) => AnyCq::Ext(Arc::new(
                RExtCq::with_channel(c, ch, opts).or_raise("efadv_create_cq")?,
            )),
        };
        let id = with_cq!(&inner, q => q.id());
        let credits = Credits::new(with_cq!(&inner, q => q.depth()));
        let base = CQ {
            credits,
            unacked: AtomicU32::new(0),
            inner: Some(inner),
            context: ctx.clone().unbind(),
            channel: channel.as_ref().map(|c| c.clone_ref(py)),
            sgid,
            unsolicited,
            pool: WcPool::default(),
        };
        let obj: PyObject = if ext {
            Py::new(py, PyClassInitializer::from(base).add_subclass(CQEx {}))?.into_any()
        } else {
            Py::new(py, base)?.into_any()
        };
        if let Some(ch) = channel {
            let weakref = py
                .import("weakref")?
                .getattr("ref")?
                .call1((obj.bind(py),))?;
            // Shared: another thread may be waiting in this channel's `get_cq_event`.
            let ch = ch.try_borrow(py).map_err(|_| busy("CompChannel"))?;
            let mut cqs = ch.cqs.lock().unwrap_or_else(|e| e.into_inner());
            cqs.push((id, weakref.unbind()));
        }
        Ok(obj)
    }
    #[inline]
    pub(crate) fn get(&self) -> PyResult<&AnyCq> {
        self.inner.as_ref().ok_or_else(|| closed("CQ"))
    }
    /// `CQ.poll` (also called by `crate::fastcall`).
    #[inline(always)]
    pub(crate) fn poll_list<'py>(
        &self,
        py: Python<'py>,
        num_entries: i32,
    ) -> PyResult<Bound<'py, PyList>> {
        let polled = crate::poll_list::Polled {
            cq: self.get()?,
            credits: &self.credits,
            pool: &self.pool,
            sgid: self.sgid,
        };
        crate::poll_list::poll(&polled, py, num_entries)
    }
}

#[pymethods]
impl CQ {
    /// Polls up to `num_entries` completions (never blocks); returns a list of `WC`.
    fn poll<'py>(&self, py: Python<'py>, num_entries: i32) -> PyResult<Bound<'py, PyList>> {
        self.poll_list(py, num_entries)
    }
    /// Arms the CQ: the next completion wakes its channel. `solicited_only=True` raises
    /// `EfaError` with `EOPNOTSUPP`, the EFA provider's answer (it arms nothing then).
    #[pyo3(signature = (solicited_only=false))]
    fn req_notify(&self, solicited_only: bool) -> PyResult<()> {
        let cq = self.get()?;
        if solicited_only {
            return Err(crate::errors::invalid_errno(
                "ibv_req_notify_cq",
                crate::errors::EOPNOTSUPP,
                "solicited-only notification is not supported by EFA (the provider \
                 answers EOPNOTSUPP and does not arm the CQ)"
                    .into(),
            ));
        }
        with_cq!(cq, q => q.request_notify()).or_raise("ibv_req_notify_cq")
    }
    /// Acknowledges `nevents` of the events `get_cq_event` returned for this CQ;
    /// `ValueError` (as in the package) for more than were received and not yet
    /// acknowledged. The Rust core has already acknowledged each event to libibverbs as it
    /// read it, so this keeps the count only.
    #[pyo3(signature = (nevents=1))]
    fn ack_events(&self, nevents: u32) -> PyResult<()> {
        self.get()?;
        if nevents == 0 {
            return Err(value_error("nevents must be positive"));
        }
        self.unacked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                n.checked_sub(nevents)
            })
            .map(|_| ())
            .map_err(|held| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "cannot acknowledge more CQ events than were received ({nevents} \
                     acknowledged, {held} received and not yet acknowledged)"
                ))
            })
    }
    /// The CQ's granted depth.
    #[getter]
    fn cqe(&self) -> PyResult<u32> {
        Ok(with_cq!(self.get()?, q => q.depth()))
    }
    /// The provider's CQ ring layout (`efadv_query_cq`).
    fn query_efa(&self) -> PyResult<CQAttr> {
        let l = with_cq!(self.get()?, q => q.layout()).or_raise("efadv_query_cq")?;
        Ok(CQAttr {
            buffer_addr: l.buffer,
            entry_size: l.entry_size,
            num_entries: l.num_entries,
            doorbell_addr: l.doorbell,
        })
    }
    /// Closes this handle; the CQ is destroyed once no QP uses it.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.try_borrow_mut().map_err(|_| busy("CQ"))?.inner = None;
        Ok(())
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (*_exc))]
    fn __exit__(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        Self::close(slf)?;
        Ok(false)
    }
}

#[pymethods]
impl CQEx {
    /// Whether polled completions carry sender GIDs.
    #[getter]
    fn sgid_enabled(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().sgid
    }
    /// Whether unsolicited write-with-immediate completions are flagged.
    #[getter]
    fn unsolicited_enabled(slf: PyRef<'_, Self>) -> PyResult<bool> {
        slf.as_super().get()?;
        Ok(slf.as_super().unsolicited)
    }
}

/// An EFA CQ's ring layout from `query_efa` (process-local addresses).
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct CQAttr {
    buffer_addr: usize,
    entry_size: u32,
    num_entries: u32,
    doorbell_addr: usize,
}

#[pymethods]
impl CQAttr {
    fn __repr__(&self) -> String {
        format!(
            "CQAttr(buffer_addr=0x{:x}, entry_size={}, num_entries={}, doorbell_addr=0x{:x})",
            self.buffer_addr, self.entry_size, self.num_entries, self.doorbell_addr
        )
    }
}

/// `create_cq`'s arguments, checked as the package checks them (`ValueError`): a
/// positive size, a completion vector of the context, a channel of this context.
pub fn cq_args(
    ctx: &Bound<'_, Context>,
    cqe: i32,
    channel: Option<&Py<crate::cq::CompChannel>>,
    comp_vector: i32,
) -> PyResult<(u32, u32)> {
    let vectors = ctx.borrow().get()?.num_comp_vectors();
    if cqe <= 0 {
        return Err(crate::args::value_error("cqe must be positive"));
    }
    let comp_vector = u32::try_from(comp_vector)
        .ok()
        .filter(|v| *v < vectors)
        .ok_or_else(|| crate::args::value_error("comp_vector is outside the context's range"))?;
    if let Some(ch) = channel {
        let ch = ch.bind(ctx.py());
        if !ch.borrow().context.bind(ctx.py()).is(ctx) {
            return Err(crate::args::value_error(
                "completion channel must belong to this context",
            ));
        }
    }
    Ok((cqe as u32, comp_vector))
}
