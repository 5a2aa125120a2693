//! Queue pairs (a run-time-state `DynQp` of the Rust core) and their attribute classes.

use std::sync::Arc;

use efa_typestate::sys::verbs::{ibv_qp_attr_mask as Mask, ibv_qp_type};
use efa_typestate::{DynQp, Qp, QpConfig, QpStateKind, SendOps};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::args::value_error;
use crate::cq::{AnyCq, CQ};
use crate::credits::Credits;
use crate::errors::{busy, closed, invalid, OrRaise};
use crate::pd::{SPd, PD};

pub const QPT_UD: u32 = ibv_qp_type::IBV_QPT_UD;
/// The package's SRD type: verbs' driver-defined QP type.
pub const QPT_SRD: u32 = ibv_qp_type::IBV_QPT_DRIVER;

/// Queue-pair capacities.
#[pyclass(module = "efa._efa", get_all, set_all)]
#[derive(Clone)]
pub struct QPCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

#[pymethods]
impl QPCap {
    #[new]
    #[pyo3(signature = (max_send_wr=128, max_recv_wr=128, max_send_sge=1, max_recv_sge=1, max_inline_data=0))]
    fn new(
        max_send_wr: u32,
        max_recv_wr: u32,
        max_send_sge: u32,
        max_recv_sge: u32,
        max_inline_data: u32,
    ) -> Self {
        QPCap {
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
        }
    }
    fn __repr__(&self) -> String {
        format!(
            "QPCap(max_send_wr={}, max_recv_wr={}, max_send_sge={}, max_recv_sge={}, max_inline_data={})",
            self.max_send_wr, self.max_recv_wr, self.max_send_sge, self.max_recv_sge, self.max_inline_data
        )
    }
}

/// Parameters for `PD.create_qp`.
#[pyclass(module = "efa._efa", get_all, set_all)]
pub struct QPInitAttr {
    send_cq: Py<CQ>,
    recv_cq: Py<CQ>,
    qp_type: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
    sq_sig_all: bool,
    send_ops_flags: Option<u32>,
    sl: u8,
    unsolicited_write_recv: bool,
}

#[pymethods]
impl QPInitAttr {
    #[new]
    #[pyo3(signature = (send_cq, recv_cq, qp_type=None, max_send_wr=128, max_recv_wr=128, max_send_sge=1,
                        max_recv_sge=1, max_inline_data=0, sq_sig_all=false, send_ops_flags=None, sl=0,
                        unsolicited_write_recv=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        send_cq: Py<CQ>,
        recv_cq: Py<CQ>,
        qp_type: Option<u32>,
        max_send_wr: u32,
        max_recv_wr: u32,
        max_send_sge: u32,
        max_recv_sge: u32,
        max_inline_data: u32,
        sq_sig_all: bool,
        send_ops_flags: Option<u32>,
        sl: u8,
        unsolicited_write_recv: bool,
    ) -> Self {
        QPInitAttr {
            send_cq,
            recv_cq,
            qp_type: qp_type.unwrap_or(QPT_SRD),
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            sq_sig_all,
            send_ops_flags,
            sl,
            unsolicited_write_recv,
        }
    }
}

/// A work queue's ring layout from `QP.query_wqs` (process-local addresses).
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct WQAttr {
    buffer_addr: usize,
    entry_size: u32,
    num_entries: u32,
    doorbell_addr: usize,
    max_batch: u32,
}

#[pymethods]
impl WQAttr {
    fn __repr__(&self) -> String {
        format!(
            "WQAttr(buffer_addr=0x{:x}, entry_size={}, num_entries={}, max_batch={})",
            self.buffer_addr, self.entry_size, self.num_entries, self.max_batch
        )
    }
}

/// An EFA queue pair (SRD or UD).
#[pyclass(module = "efa._efa")]
pub struct QP {
    pub(crate) inner: Option<DynQp<SPd>>,
    #[pyo3(get)]
    pub(crate) pd: Py<PD>,
    #[pyo3(get)]
    send_cq: Py<CQ>,
    #[pyo3(get)]
    recv_cq: Py<CQ>,
    #[pyo3(get)]
    qp_type: u32,
    #[pyo3(get)]
    pub(crate) send_ops_flags: u32,
    pub(crate) sq_sig_all: bool,
    pub(crate) qp_num: u32,
    /// This object's number, never another's (`crate::kept`).
    pub(crate) serial: u64,
    /// The free entries of the send and receive CQs, taken by posts (`crate::credits`).
    pub(crate) send_credits: Arc<Credits>,
    pub(crate) recv_credits: Arc<Credits>,
}

impl Drop for QP {
    fn drop(&mut self) {
        self.forget_credits();
    }
}

impl QP {
    pub fn create(pd: &Bound<'_, PD>, a: &QPInitAttr) -> PyResult<QP> {
        let py = pd.py();
        let mut cfg = match a.qp_type {
            QPT_SRD => QpConfig::srd(),
            QPT_UD => QpConfig::ud(),
            t => {
                return Err(value_error(format!(
                    "EFA supports qp_type SRD or UD (got {t}: SRD is {QPT_SRD}, UD {QPT_UD})"
                )))
            }
        }
        .depth(a.max_send_wr, a.max_recv_wr)
        .sges(a.max_send_sge, a.max_recv_sge)
        .max_inline(a.max_inline_data)
        .service_level(a.sl);
        // As the package: by default every operation of the QP type (SRD: SEND and RDMA,
        // UD: SEND), which a device without RDMA read or write refuses (EOPNOTSUPP).
        let mut default = SendOps::SEND | SendOps::SEND_WITH_IMM;
        if a.qp_type == QPT_SRD {
            default |= SendOps::RDMA_WRITE | SendOps::RDMA_WRITE_WITH_IMM | SendOps::RDMA_READ;
        }
        let ops = a.send_ops_flags.unwrap_or(default.bits());
        cfg = cfg.send_ops(SendOps::from_bits_retain(ops));
        if a.unsolicited_write_recv {
            cfg = cfg.unsolicited_write_recv();
        }
        let p = Arc::clone(pd.borrow().get()?);
        let (s, send_credits) = {
            let c = a.send_cq.borrow(py);
            (c.get()?.clone(), Arc::clone(&c.credits))
        };
        let (r, recv_credits) = {
            let c = a.recv_cq.borrow(py);
            (c.get()?.clone(), Arc::clone(&c.credits))
        };
        let ctx = pd.borrow().context.as_ptr();
        if a.send_cq.borrow(py).context.as_ptr() != ctx
            || a.recv_cq.borrow(py).context.as_ptr() != ctx
        {
            return Err(value_error(
                "queue-pair CQs must belong to the PD's context",
            ));
        }
        // CQs smaller than the QP's depths are accepted, as libefa accepts them; posts
        // are bounded by the CQs' free entries instead (`crate::credits`).
        let reset = match (s, r) {
            (AnyCq::Classic(s), AnyCq::Classic(r)) => Qp::new_bounding_cqs(p, s, r, &cfg),
            (AnyCq::Classic(s), AnyCq::Ext(r)) => Qp::new_bounding_cqs(p, s, r, &cfg),
            (AnyCq::Ext(s), AnyCq::Classic(r)) => Qp::new_bounding_cqs(p, s, r, &cfg),
            (AnyCq::Ext(s), AnyCq::Ext(r)) => Qp::new_bounding_cqs(p, s, r, &cfg),
        }
        .or_raise("create_qp")?;
        let dynq = reset.into_dyn();
        Ok(QP {
            qp_num: dynq.qpn(),
            serial: crate::kept::serial(),
            inner: Some(dynq),
            pd: pd.clone().unbind(),
            send_cq: a.send_cq.clone_ref(py),
            recv_cq: a.recv_cq.clone_ref(py),
            qp_type: a.qp_type,
            send_ops_flags: ops,
            sq_sig_all: a.sq_sig_all,
            send_credits,
            recv_credits,
        })
    }
    /// The QP is gone (closed or dropped): its requests no longer hold CQ entries.
    fn forget_credits(&mut self) {
        if self.inner.take().is_some() {
            Python::with_gil(|py| {
                self.send_credits.forget(py, self.qp_num);
                self.recv_credits.forget(py, self.qp_num);
            });
        }
    }
    pub(crate) fn get(&self) -> PyResult<&DynQp<SPd>> {
        self.inner.as_ref().ok_or_else(|| closed("QP"))
    }
    pub(crate) fn get_mut(&mut self) -> PyResult<&mut DynQp<SPd>> {
        self.inner.as_mut().ok_or_else(|| closed("QP"))
    }
    fn rts(&mut self, psn: u32, rnr_retry: Option<u8>) -> PyResult<()> {
        let q = self.get_mut()?;
        if psn == 0 && rnr_retry.is_none() {
            return q.modify_state(QpStateKind::Rts).or_raise("modify_qp(RTS)");
        }
        let mut attr = zeroed_attr();
        attr.qp_state = QpStateKind::Rts.to_raw();
        attr.sq_psn = psn;
        let mut mask = MASK_STATE | MASK_SQ_PSN;
        if let Some(r) = rnr_retry {
            attr.rnr_retry = r;
            mask |= MASK_RNR_RETRY;
        }
        q.modify(&mut attr, mask).or_raise("modify_qp(RTS)")
    }
}

/// The keywords `QP.modify` takes (the package's).
const MODIFY_FIELDS: [&str; 8] = [
    "qp_state",
    "cur_qp_state",
    "qkey",
    "rq_psn",
    "sq_psn",
    "pkey_index",
    "port_num",
    "rnr_retry",
];

const MASK_STATE: u32 = Mask::IBV_QP_STATE.0;
const MASK_CUR_STATE: u32 = Mask::IBV_QP_CUR_STATE.0;
const MASK_PKEY_INDEX: u32 = Mask::IBV_QP_PKEY_INDEX.0;
const MASK_PORT: u32 = Mask::IBV_QP_PORT.0;
const MASK_QKEY: u32 = Mask::IBV_QP_QKEY.0;
const MASK_RNR_RETRY: u32 = Mask::IBV_QP_RNR_RETRY.0;
const MASK_SQ_PSN: u32 = Mask::IBV_QP_SQ_PSN.0;

#[pymethods]
impl QP {
    #[getter]
    fn qp_num(&self) -> PyResult<u32> {
        self.get().map(|_| self.qp_num)
    }
    /// The current state (re-read from the device).
    #[getter]
    fn state(&mut self) -> PyResult<u32> {
        Ok(self
            .get_mut()?
            .refresh_state()
            .or_raise("ibv_query_qp")?
            .to_raw())
    }
    /// RESET -> INIT.
    #[pyo3(signature = (qkey, port=1, pkey_index=0))]
    fn to_init(&mut self, qkey: u32, port: u8, pkey_index: u16) -> PyResult<()> {
        let _ = (port, pkey_index); // one port, one P_Key on EFA
        self.get_mut()?.init(qkey).or_raise("modify_qp(INIT)")
    }
    /// INIT -> RTR.
    fn to_rtr(&mut self) -> PyResult<()> {
        self.get_mut()?
            .modify_state(QpStateKind::Rtr)
            .or_raise("modify_qp(RTR)")
    }
    /// RTR -> RTS (`rnr_retry` 0-7, 7 = forever; default: the Rust core's finite retry).
    #[pyo3(signature = (psn=0, rnr_retry=None))]
    fn to_rts(&mut self, psn: u32, rnr_retry: Option<u8>) -> PyResult<()> {
        self.rts(psn, rnr_retry)
    }
    /// RESET -> INIT -> RTR -> RTS in one call; returns this QP.
    #[pyo3(signature = (qkey, port=1, psn=0, rnr_retry=None))]
    fn prepare(
        mut slf: PyRefMut<'_, Self>,
        qkey: u32,
        port: u8,
        psn: u32,
        rnr_retry: Option<u8>,
    ) -> PyResult<PyRefMut<'_, Self>> {
        slf.to_init(qkey, port, 0)?;
        slf.to_rtr()?;
        slf.rts(psn, rnr_retry)?;
        Ok(slf)
    }
    /// Low-level `ibv_modify_qp`: `attr_mask` (QPAttrMask) and the fields as keywords.
    #[pyo3(signature = (attr_mask, **fields))]
    fn modify(&mut self, attr_mask: u32, fields: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let mut attr = zeroed_attr();
        if let Some(f) = fields {
            // As the package: every unknown keyword named at once, as a TypeError.
            let mut unknown: Vec<String> = Vec::new();
            for k in f.keys() {
                let k: String = k.extract()?;
                if !MODIFY_FIELDS.contains(&k.as_str()) {
                    unknown.push(k);
                }
            }
            if !unknown.is_empty() {
                unknown.sort();
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "unknown QP attribute(s): {}",
                    unknown.join(", ")
                )));
            }
            for (k, v) in f.iter() {
                let k: String = k.extract()?;
                match k.as_str() {
                    "qp_state" => attr.qp_state = QpStateKind::from_raw(v.extract()?).to_raw(),
                    "cur_qp_state" => {
                        attr.cur_qp_state = QpStateKind::from_raw(v.extract()?).to_raw()
                    }
                    "qkey" => attr.qkey = v.extract()?,
                    "port_num" => attr.port_num = v.extract()?,
                    "pkey_index" => attr.pkey_index = v.extract()?,
                    "sq_psn" => attr.sq_psn = v.extract()?,
                    "rq_psn" => attr.rq_psn = v.extract()?,
                    _ => attr.rnr_retry = v.extract()?,
                }
            }
        }
        let allowed = MASK_STATE
            | MASK_CUR_STATE
            | MASK_PKEY_INDEX
            | MASK_PORT
            | MASK_QKEY
            | MASK_RNR_RETRY
            | MASK_SQ_PSN
            | (1 << 12);
        if attr_mask & !allowed != 0 {
            return Err(invalid(
                "ibv_modify_qp",
                format!("attribute mask 0x{attr_mask:x} has bits EFA QPs do not take"),
            ));
        }
        self.get_mut()?
            .modify(&mut attr, attr_mask)
            .or_raise("ibv_modify_qp")
    }
    /// `(attrs, cap)`: the QP's attributes as a dict (the package's keys: `qp_state`,
    /// `qkey`, `sq_psn`, `port_num`, `pkey_index`, `rnr_retry`, as `ibv_query_qp`
    /// reports them) and its capacities.
    fn query<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, QPCap)> {
        let a = self.get()?.query().or_raise("ibv_query_qp")?;
        let d = PyDict::new(py);
        d.set_item("qp_state", a.state.to_raw())?;
        d.set_item("qkey", a.qkey)?;
        d.set_item("sq_psn", a.sq_psn)?;
        d.set_item("port_num", a.port_num)?;
        d.set_item("pkey_index", a.pkey_index)?;
        d.set_item("rnr_retry", a.rnr_retry)?;
        let c = a.caps;
        Ok((
            d,
            QPCap::new(
                c.max_send_wr,
                c.max_recv_wr,
                c.max_send_sge,
                c.max_recv_sge,
                c.max_inline_data,
            ),
        ))
    }
    /// The send and receive rings' layouts (`efadv_query_qp_wqs`).
    fn query_wqs(&self) -> PyResult<(WQAttr, WQAttr)> {
        let (s, r) = self.get()?.wq_layout().or_raise("efadv_query_qp_wqs")?;
        let w = |l: efa_typestate::WqLayout| WQAttr {
            buffer_addr: l.buffer,
            entry_size: l.entry_size,
            num_entries: l.num_entries,
            doorbell_addr: l.doorbell,
            max_batch: l.max_batch,
        };
        Ok((w(s), w(r)))
    }
    /// Posts one `SendWR` or a list of them with one doorbell (all or nothing).
    fn post_send(&self, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::post::post_send(self, py, wrs)
    }
    /// Posts one `RecvWR` or a list of them.
    fn post_recv(&self, py: Python<'_>, wrs: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::post::post_recv(self, py, wrs)
    }
    /// Destroys the QP (its posted work requests are flushed).
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.try_borrow_mut()
            .map_err(|_| busy("QP"))?
            .forget_credits();
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
    fn __repr__(&self) -> String {
        match &self.inner {
            None => "QP(closed=True)".into(),
            Some(_) => format!(
                "QP(qp_num={}, qp_type={})",
                self.qp_num,
                if self.qp_type == QPT_SRD { "SRD" } else { "UD" }
            ),
        }
    }
}

type QpAttrRaw = efa_typestate::sys::verbs::ibv_qp_attr;

fn zeroed_attr() -> QpAttrRaw {
    // SAFETY: `ibv_qp_attr` is plain C data (integers and structs of integers): all zero
    // bytes is a valid value of it.
    unsafe { core::mem::zeroed() }
}
