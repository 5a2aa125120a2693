//! Memory regions (`MR`, and what each can register) and their EFA attributes.

use efa_typestate::{DmaBufFd, DmaBufMr, Local, MemoryRegion, Mr, RemoteWrite, Sge};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::args::{int_in, int_or, value_error, U32_MAX};
use crate::errors::{busy, closed, invalid, OrRaise};
use crate::memory::PyMemory;
use crate::pd::{SPd, PD};

/// The registrations an `MR` can hold.
pub enum MrKind {
    Local(Mr<SPd, PyMemory, Local>),
    Remote(Mr<SPd, PyMemory, RemoteWrite>),
    DmaBuf(DmaBufMr<SPd, DmaBufFd>),
    /// A CUDA tensor registered by `efa-cuda` (dma-buf, or the device address).
    Gpu(crate::gpu::GpuRegistration),
}

macro_rules! with_mr {
    ($mr:expr, $m:ident => $body:expr) => {
        match $mr {
            MrKind::Local($m) => $body,
            MrKind::Remote($m) => $body,
            MrKind::DmaBuf($m) => $body,
            MrKind::Gpu(g) => {
                let $m = g.region();
                $body
            }
        }
    };
}

impl MrKind {
    /// An SGE for `[addr, addr + len)`, which must lie inside the registration.
    #[inline]
    pub fn sge_at(&self, addr: u64, len: u64, base: u64) -> efa_typestate::Result<Sge<'_>> {
        let offset = addr.wrapping_sub(base);
        let offset = if addr < base { u64::MAX } else { offset };
        with_mr!(self, m => m.sge(offset, len))
    }
}

/// A registered memory region (`ibv_mr`).
#[pyclass(module = "efa._efa", weakref)]
pub struct MR {
    pub(crate) inner: Option<MrKind>,
    /// The address the user sees (host address, or a dma-buf MR's iova).
    pub(crate) base: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
    /// False for integer addresses (maybe device memory) and dma-bufs: no `read`.
    pub(crate) host_view: bool,
    #[pyo3(get)]
    pd: Py<PD>,
    #[pyo3(get)]
    owner: PyObject,
}

impl MR {
    pub(crate) fn finish(
        pd: &Bound<'_, PD>,
        kind: MrKind,
        base: u64,
        owner: PyObject,
    ) -> PyResult<Py<MR>> {
        let (len, lkey, rkey) = with_mr!(&kind, m => (m.len(), m.lkey(), m.rkey()));
        let mr = Bound::new(
            pd.py(),
            MR {
                inner: Some(kind),
                base,
                len,
                lkey,
                rkey,
                host_view: false,
                pd: pd.clone().unbind(),
                owner,
            },
        )?;
        MR::index(&mr)?;
        Ok(mr.unbind())
    }
    pub(crate) fn get(&self) -> PyResult<&MrKind> {
        self.inner.as_ref().ok_or_else(|| closed("MR"))
    }
    pub(crate) fn lkey_raw(&self) -> u32 {
        self.lkey
    }
    /// The registered length.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
    /// Copies registered bytes at `offset` into `out` (host registrations only).
    pub(crate) fn copy_out(&self, offset: usize, out: &mut [u8]) -> PyResult<()> {
        if !self.host_view {
            return Err(invalid(
                "MR.read",
                "only a buffer object's registration has a host view (not an integer address or a dma-buf)".into(),
            ));
        }
        match self.get()? {
            MrKind::Local(m) => m.copy_to_slice(offset, out),
            MrKind::Remote(m) => m.copy_to_slice(offset, out),
            MrKind::DmaBuf(_) | MrKind::Gpu(_) => {
                unreachable!("device registrations have no host view")
            }
        }
        .or_raise("MR.read")
    }
    /// Copies the registered bytes at `addr` into `out` for an inline send: through the
    /// host view of a buffer object's registration, or from the address itself for an
    /// integer-address one (memory the caller keeps valid while it is registered; read by
    /// `read_own`, so an unreadable address is an error, not a crash). Device memory
    /// (dma-buf, CUDA) has no bytes the host can inline.
    pub(crate) fn inline_bytes(&self, addr: u64, out: &mut [u8]) -> PyResult<()> {
        let kind = self.get()?;
        let end = addr.checked_add(out.len() as u64);
        if addr < self.base || end.map_or(true, |e| e > self.base.saturating_add(self.len)) {
            return Err(invalid(
                "post_send",
                format!(
                    "inline SGE 0x{addr:x}+{} is outside its memory region (0x{:x}+{})",
                    out.len(),
                    self.base,
                    self.len
                ),
            ));
        }
        match kind {
            MrKind::Local(_) | MrKind::Remote(_) if self.host_view => {
                self.copy_out((addr - self.base) as usize, out)
            }
            MrKind::Local(_) | MrKind::Remote(_) => crate::memory::read_own(addr, out),
            MrKind::DmaBuf(_) | MrKind::Gpu(_) => Err(invalid(
                "post_send",
                "an inline send copies host bytes; this SGE's memory region is device memory"
                    .into(),
            )),
        }
    }
    /// Adds this MR to its PD's lkey table (after it became a Python object).
    pub(crate) fn index(mr: &Bound<'_, MR>) -> PyResult<()> {
        let py = mr.py();
        let (pd, lkey) = {
            let me = mr.borrow();
            (me.pd.clone_ref(py), me.lkey)
        };
        let mrs = pd.borrow(py).mrs.clone_ref(py);
        mrs.bind(py).set_item(lkey, mr)
    }
}

#[pymethods]
impl MR {
    #[getter]
    fn addr(&self) -> PyResult<u64> {
        self.get().map(|_| self.base)
    }
    #[getter]
    fn length(&self) -> PyResult<u64> {
        self.get().map(|_| self.len)
    }
    #[getter]
    fn lkey(&self) -> PyResult<u32> {
        self.get().map(|_| self.lkey)
    }
    #[getter]
    fn rkey(&self) -> PyResult<u32> {
        self.get().map(|_| self.rkey)
    }
    /// The provider's MR handle (the `ibv_mr` address, an opaque number).
    #[getter]
    fn handle(&self) -> PyResult<usize> {
        Ok(with_mr!(self.get()?, m => m.as_mr_ptr() as usize))
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }
    /// An `SGE` for `length` bytes (default: the rest) at `offset`; `ValueError` (as in
    /// the package) for a range outside the MR.
    #[pyo3(signature = (length=None, offset=None))]
    fn sge(
        slf: &Bound<'_, Self>,
        length: Option<&Bound<'_, PyAny>>,
        offset: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::wr::SGE> {
        let me = slf.borrow();
        me.get()?;
        let len = i128::from(me.len);
        let offset = int_or(
            offset,
            0,
            (0, len),
            "SGE offset is outside the memory region",
        )?;
        let length = match length {
            None => len - offset,
            Some(l) => int_in(l, 0, U32_MAX, "SGE length must be between 0 and 2**32 - 1")?,
        };
        if length > len - offset || length > U32_MAX {
            return Err(value_error("SGE range exceeds the memory region"));
        }
        Ok(crate::wr::SGE::of_mr(
            slf,
            me.base + offset as u64,
            length as u32,
            me.lkey,
        ))
    }
    /// Interconnect ids of the MR (`efadv_query_mr`).
    fn query_efa(&self) -> PyResult<MRAttr> {
        let ic = with_mr!(self.get()?, m => m.query_efa()).or_raise("efadv_query_mr")?;
        Ok(MRAttr {
            recv_ic_id: ic.recv.unwrap_or(0),
            rdma_read_ic_id: ic.rdma_read.unwrap_or(0),
            rdma_recv_ic_id: ic.rdma_recv.unwrap_or(0),
            ic_id_validity: u16::from(ic.recv.is_some())
                | u16::from(ic.rdma_read.is_some()) << 1
                | u16::from(ic.rdma_recv.is_some()) << 2,
        })
    }
    /// Copies `length` bytes at `offset` out of a host registration (bytes peers wrote).
    #[pyo3(signature = (offset=0, length=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: usize,
        length: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let len = length.unwrap_or((self.len as usize).saturating_sub(offset));
        let mut out = vec![0u8; len];
        self.copy_out(offset, &mut out)?;
        Ok(PyBytes::new(py, &out))
    }
    /// Retains `owner` (the object owning the MR's memory) for the MR's life.
    fn _keepalive(mut slf: PyRefMut<'_, Self>, owner: PyObject) -> PyRefMut<'_, Self> {
        slf.owner = owner;
        slf
    }
    /// Deregisters the memory region and releases the memory's owner.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut me = slf.try_borrow_mut().map_err(|_| busy("MR"))?;
        if me.inner.take().is_some() {
            let _ = me.pd.borrow(py).mrs.bind(py).del_item(me.lkey);
        }
        me.owner = py.None();
        Ok(())
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
        if self.inner.is_none() {
            return "MR(closed=True)".into();
        }
        format!(
            "MR(addr=0x{:x}, length={}, lkey=0x{:x}, rkey=0x{:x})",
            self.base, self.len, self.lkey, self.rkey
        )
    }
}

/// EFA MR attributes from `MR.query_efa`.
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct MRAttr {
    ic_id_validity: u16,
    recv_ic_id: u16,
    rdma_read_ic_id: u16,
    rdma_recv_ic_id: u16,
}

#[pymethods]
impl MRAttr {
    fn __repr__(&self) -> String {
        format!(
            "MRAttr(ic_id_validity=0x{:x}, recv_ic_id={}, rdma_read_ic_id={}, rdma_recv_ic_id={})",
            self.ic_id_validity, self.recv_ic_id, self.rdma_read_ic_id, self.rdma_recv_ic_id
        )
    }
}
