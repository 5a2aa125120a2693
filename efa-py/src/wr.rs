//! Scatter/gather entries and work requests, as the `efa` package spells them.

use std::cell::{Ref, RefCell, RefMut};

use pyo3::prelude::*;
use pyo3::sync::GILProtected;
use pyo3::types::PyList;

use crate::args::{int_in, int_or, value_error, U32_MAX, U64_MAX};
use crate::pd::{AH, MR};

/// A scatter/gather entry: `SGE(target, length, lkey=0, offset=0)`, `target` an `MR`
/// (address and lkey from it) or an integer address (then its MR is found by `lkey` in
/// the posting QP's PD). Immutable, so posting reads it without a borrow.
#[pyclass(module = "efa._efa", frozen)]
pub struct SGE {
    #[pyo3(get)]
    pub(crate) addr: u64,
    #[pyo3(get)]
    pub(crate) length: u32,
    #[pyo3(get)]
    pub(crate) lkey: u32,
    /// The MR addressed, when the SGE was made from one.
    pub(crate) mr: Option<Py<MR>>,
    /// What `_keepalive` retains besides.
    keep: PyObject,
    /// This object's number, never another's (`crate::kept`).
    pub(crate) serial: u64,
}

impl SGE {
    pub fn of_mr(mr: &Bound<'_, MR>, addr: u64, length: u32, lkey: u32) -> SGE {
        SGE {
            addr,
            length,
            lkey,
            mr: Some(mr.clone().unbind()),
            keep: mr.py().None(),
            serial: crate::kept::serial(),
        }
    }
}

#[pymethods]
impl SGE {
    #[new]
    #[pyo3(signature = (target, length, lkey=None, offset=None))]
    fn new(
        target: &Bound<'_, PyAny>,
        length: &Bound<'_, PyAny>,
        lkey: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SGE> {
        // The package's checks and messages (ValueError).
        let py = target.py();
        let length = int_in(
            length,
            0,
            U32_MAX,
            "SGE length must be between 0 and 2**32 - 1",
        )?;
        let offset = int_or(offset, 0, (0, i128::MAX), "SGE offset must be non-negative")?;
        let lkey = int_or(
            lkey,
            0,
            (0, U32_MAX),
            "SGE lkey must be between 0 and 2**32 - 1",
        )? as u32;
        if let Ok(mr) = target.downcast::<MR>() {
            let m = mr.borrow();
            m.get()?;
            let len = i128::from(m.len());
            if offset > len || length > len - offset {
                return Err(value_error("SGE range exceeds the memory region"));
            }
            return Ok(SGE {
                addr: m.base + offset as u64,
                length: length as u32,
                lkey: if lkey == 0 { m.lkey_raw() } else { lkey },
                mr: Some(mr.clone().unbind()),
                keep: py.None(),
                serial: crate::kept::serial(),
            });
        }
        let addr = int_in(
            target,
            0,
            U64_MAX,
            "SGE address must be between 0 and 2**64 - 1",
        )?;
        if addr + offset > U64_MAX {
            return Err(value_error("SGE address plus offset exceeds 2**64 - 1"));
        }
        Ok(SGE {
            addr: (addr + offset) as u64,
            length: length as u32,
            lkey,
            mr: None,
            keep: py.None(),
            serial: crate::kept::serial(),
        })
    }
    /// The object this SGE retains: what `_keepalive` was given, else its MR (or None).
    #[getter]
    fn owner(&self, py: Python<'_>) -> PyObject {
        match &self.mr {
            Some(mr) if self.keep.is_none(py) => mr.clone_ref(py).into_any(),
            _ => self.keep.clone_ref(py),
        }
    }
    /// An SGE like this one that also retains `owner` (for as long as it is retained).
    fn _keepalive(&self, py: Python<'_>, owner: PyObject) -> SGE {
        SGE {
            addr: self.addr,
            length: self.length,
            lkey: self.lkey,
            mr: self.mr.as_ref().map(|m| m.clone_ref(py)),
            keep: owner,
            serial: crate::kept::serial(),
        }
    }
    fn __repr__(&self) -> String {
        format!(
            "SGE(addr=0x{:x}, length={}, lkey=0x{:x})",
            self.addr, self.length, self.lkey
        )
    }
}

/// A send work request. Name the destination with `dest=` (anything with `.ah`,
/// `.qp_num` and `.qkey`) or the `ah`/`remote_qpn`/`remote_qkey` trio.
///
/// Every attribute is settable, as in the package. Frozen to PyO3 (a post reads it with
/// no borrow flag to take): its fields are behind the GIL instead, in a `RefCell` never
/// borrowed while Python code runs. The setters of the fields a kept request copies
/// (`crate::kept`) forget it; `sg_list` and `ah` are compared at the post instead (the
/// list may change in place).
#[pyclass(module = "efa._efa", frozen)]
pub struct SendWR {
    f: GILProtected<RefCell<WrFields>>,
    /// The request as the Rust core last checked it (`crate::kept`).
    pub(crate) kept: crate::kept::Slot,
}

/// A `SendWR`'s attributes.
pub struct WrFields {
    pub(crate) wr_id: u64,
    pub(crate) sg_list: Py<PyList>,
    pub(crate) opcode: u32,
    pub(crate) send_flags: u32,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    pub(crate) imm_data: u32,
    pub(crate) ah: Option<Py<AH>>,
    pub(crate) remote_qpn: u32,
    pub(crate) remote_qkey: u32,
    dest: PyObject,
}

impl SendWR {
    /// The attributes, read (a post: no Python code runs while they are borrowed).
    #[inline(always)]
    pub(crate) fn fields<'a>(&'a self, py: Python<'a>) -> Ref<'a, WrFields> {
        self.f.get(py).borrow()
    }
    /// The attributes, read, unless they are being written (never, while the GIL is held
    /// by the reader: no Python code runs while they are borrowed).
    #[inline(always)]
    pub(crate) fn try_fields<'a>(&'a self, py: Python<'a>) -> Option<Ref<'a, WrFields>> {
        self.f.get(py).try_borrow().ok()
    }
    fn fields_mut<'a>(&'a self, py: Python<'a>) -> RefMut<'a, WrFields> {
        self.f.get(py).borrow_mut()
    }
}

fn list_of(py: Python<'_>, sg_list: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyList>> {
    match sg_list {
        None => Ok(PyList::empty(py).unbind()),
        Some(l) => match l.downcast::<PyList>() {
            Ok(l) => Ok(l.clone().unbind()),
            Err(_) => Ok(PyList::new(py, l.try_iter()?.collect::<PyResult<Vec<_>>>()?)?.unbind()),
        },
    }
}

#[pymethods]
impl SendWR {
    #[new]
    #[pyo3(signature = (wr_id=0, sg_list=None, opcode=2, send_flags=0, remote_addr=0, rkey=0,
                        imm_data=0, ah=None, remote_qpn=0, remote_qkey=0, dest=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        wr_id: u64,
        sg_list: Option<&Bound<'_, PyAny>>,
        opcode: u32,
        send_flags: u32,
        remote_addr: u64,
        rkey: u32,
        imm_data: u32,
        ah: Option<Py<AH>>,
        remote_qpn: u32,
        remote_qkey: u32,
        dest: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<SendWR> {
        let wr = SendWR {
            f: GILProtected::new(RefCell::new(WrFields {
                wr_id,
                sg_list: list_of(py, sg_list)?,
                opcode,
                send_flags,
                remote_addr,
                rkey,
                imm_data,
                ah,
                remote_qpn,
                remote_qkey,
                dest: py.None(),
            })),
            kept: crate::kept::Slot::default(),
        };
        if let Some(d) = dest {
            wr.set_dest(d)?;
        }
        Ok(wr)
    }
    #[getter]
    fn wr_id(&self, py: Python<'_>) -> u64 {
        self.fields(py).wr_id
    }
    #[setter]
    fn set_wr_id(&self, py: Python<'_>, wr_id: u64) {
        self.fields_mut(py).wr_id = wr_id;
        self.kept.forget(py);
    }
    #[getter]
    fn opcode(&self, py: Python<'_>) -> u32 {
        self.fields(py).opcode
    }
    #[setter]
    fn set_opcode(&self, py: Python<'_>, opcode: u32) {
        self.fields_mut(py).opcode = opcode;
        self.kept.forget(py);
    }
    #[getter]
    fn send_flags(&self, py: Python<'_>) -> u32 {
        self.fields(py).send_flags
    }
    #[setter]
    fn set_send_flags(&self, py: Python<'_>, send_flags: u32) {
        self.fields_mut(py).send_flags = send_flags;
        self.kept.forget(py);
    }
    #[getter]
    fn remote_addr(&self, py: Python<'_>) -> u64 {
        self.fields(py).remote_addr
    }
    #[setter]
    fn set_remote_addr(&self, py: Python<'_>, remote_addr: u64) {
        self.fields_mut(py).remote_addr = remote_addr;
        self.kept.forget(py);
    }
    #[getter]
    fn rkey(&self, py: Python<'_>) -> u32 {
        self.fields(py).rkey
    }
    #[setter]
    fn set_rkey(&self, py: Python<'_>, rkey: u32) {
        self.fields_mut(py).rkey = rkey;
        self.kept.forget(py);
    }
    #[getter]
    fn imm_data(&self, py: Python<'_>) -> u32 {
        self.fields(py).imm_data
    }
    #[setter]
    fn set_imm_data(&self, py: Python<'_>, imm_data: u32) {
        self.fields_mut(py).imm_data = imm_data;
        self.kept.forget(py);
    }
    #[getter]
    fn remote_qpn(&self, py: Python<'_>) -> u32 {
        self.fields(py).remote_qpn
    }
    #[setter]
    fn set_remote_qpn(&self, py: Python<'_>, remote_qpn: u32) {
        self.fields_mut(py).remote_qpn = remote_qpn;
        self.kept.forget(py);
    }
    #[getter]
    fn remote_qkey(&self, py: Python<'_>) -> u32 {
        self.fields(py).remote_qkey
    }
    #[setter]
    fn set_remote_qkey(&self, py: Python<'_>, remote_qkey: u32) {
        self.fields_mut(py).remote_qkey = remote_qkey;
        self.kept.forget(py);
    }
    #[getter]
    fn sg_list(&self, py: Python<'_>) -> Py<PyList> {
        self.fields(py).sg_list.clone_ref(py)
    }
    #[setter]
    fn set_sg_list(&self, py: Python<'_>, sg_list: Py<PyList>) {
        // The old list goes after the borrow ends (dropping it may run Python code).
        let old = core::mem::replace(&mut self.fields_mut(py).sg_list, sg_list);
        drop(old);
    }
    #[getter]
    fn ah(&self, py: Python<'_>) -> Option<Py<AH>> {
        self.fields(py).ah.as_ref().map(|a| a.clone_ref(py))
    }
    #[setter]
    fn set_ah(&self, py: Python<'_>, ah: Option<Py<AH>>) {
        let old = core::mem::replace(&mut self.fields_mut(py).ah, ah);
        drop(old);
    }
    /// The destination (`Peer`-like): setting it sets `ah`, `remote_qpn` and `remote_qkey`.
    #[getter]
    fn get_dest(&self, py: Python<'_>) -> PyObject {
        self.fields(py).dest.clone_ref(py)
    }
    #[setter]
    fn set_dest(&self, dest: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = dest.py();
        // Each attribute read (Python code) before the fields are borrowed to store it.
        if !dest.is_none() {
            self.kept.forget(py);
            let ah: Py<AH> = dest.getattr("ah")?.extract()?;
            self.set_ah(py, Some(ah));
            let qpn: u32 = dest.getattr("qp_num")?.extract()?;
            self.fields_mut(py).remote_qpn = qpn;
            let qkey: u32 = dest.getattr("qkey")?.extract()?;
            self.fields_mut(py).remote_qkey = qkey;
        }
        let old = core::mem::replace(&mut self.fields_mut(py).dest, dest.clone().unbind());
        drop(old);
        Ok(())
    }
}

/// A receive work request.
#[pyclass(module = "efa._efa")]
pub struct RecvWR {
    #[pyo3(get, set)]
    pub(crate) wr_id: u64,
    #[pyo3(get, set)]
    pub(crate) sg_list: Py<PyList>,
}

#[pymethods]
impl RecvWR {
    #[new]
    #[pyo3(signature = (wr_id=0, sg_list=None))]
    fn new(py: Python<'_>, wr_id: u64, sg_list: Option<&Bound<'_, PyAny>>) -> PyResult<RecvWR> {
        Ok(RecvWR {
            wr_id,
            sg_list: list_of(py, sg_list)?,
        })
    }
}
