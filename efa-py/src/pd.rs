//! Protection domains, memory regions and address handles.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use efa_typestate::{
    AccessFlags, Ah as RAh, DmaBufFd, DmaBufMr, Local, MemoryRegion, Mr, Pd as RPd, RemoteWrite,
    Sge,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyTuple};

use crate::args::{int_in, int_or, value_error, U32_MAX, U64_MAX};
use crate::device::{Context, Gid, SCtx};
use crate::errors::{busy, closed, invalid, OrRaise};
use crate::memory::PyMemory;

pub type SPd = Arc<RPd<SCtx>>;

/// A protection domain (`ibv_pd`).
#[pyclass(module = "efa._efa", weakref)]
pub struct PD {
    pub(crate) inner: Option<SPd>,
    #[pyo3(get)]
    pub(crate) context: Py<Context>,
    /// lkey -> MR (a `WeakValueDictionary`): SGEs given as address + lkey find their MR here.
    pub(crate) mrs: PyObject,
}

impl PD {
    pub fn alloc(ctx: &Bound<'_, Context>) -> PyResult<PD> {
        let py = ctx.py();
        let c = Arc::clone(ctx.borrow().get()?);
        let pd = RPd::new(c).or_raise("ibv_alloc_pd")?;
        let mrs = py
            .import("weakref")?
            .getattr("WeakValueDictionary")?
            .call0()?;
        Ok(PD {
            inner: Some(Arc::new(pd)),
            context: ctx.clone().unbind(),
            mrs: mrs.unbind(),
        })
    }
    pub(crate) fn get(&self) -> PyResult<&SPd> {
        self.inner.as_ref().ok_or_else(|| closed("PD"))
    }
}

fn access_of(access: u32) -> AccessFlags {
    AccessFlags::from_bits_retain(access)
}

#[pymethods]
impl PD {
    /// Registers memory. `target` is a buffer object (bytearray, numpy array, mmap,
    /// torch CPU tensor...: kept alive and pinned for the MR's life; it must be
    /// C-contiguous, and writable when `access` has LOCAL_WRITE or REMOTE_WRITE) or, as in
    /// the `efa` package, an integer address the caller keeps valid while the MR lives.
    #[pyo3(signature = (target, length=None, access=0))]
    fn reg_mr(
        slf: &Bound<'_, Self>,
        target: &Bound<'_, PyAny>,
        length: Option<&Bound<'_, PyAny>>,
        access: u32,
    ) -> PyResult<Py<MR>> {
        let py = slf.py();
        let flags = access_of(access);
        let wants_write =
            flags.contains(AccessFlags::LOCAL_WRITE) || flags.contains(AccessFlags::REMOTE_WRITE);
        let (addr, len, owner): (usize, usize, PyObject) = if target.is_instance_of::<PyInt>() {
            // The package's form and checks (ValueError).
            let addr = int_in(target, 0, U64_MAX, "addr must be between 0 and 2**64 - 1")?;
            let length = length
                .ok_or_else(|| invalid("ibv_reg_mr", "an integer address needs a length".into()))?;
            let len = int_in(length, 1, U64_MAX, "length must be between 1 and 2**64 - 1")?;
            if addr + len > U64_MAX + 1 {
                return Err(value_error("memory region address range exceeds 2**64"));
            }
            let too_big = || {
                invalid(
                    "ibv_reg_mr",
                    "the range exceeds this machine's addresses".into(),
                )
            };
            let addr = usize::try_from(addr).map_err(|_| too_big())?;
            let len = usize::try_from(len).map_err(|_| too_big())?;
            (addr, len, py.None())
        } else {
            let length: Option<usize> = length.map(|l| l.extract()).transpose()?;
            let span = py
                .import("efa._buffers")?
                .getattr("host_span")?
                .call1((target, wants_write))?;
            let (addr, n, keep): (usize, usize, PyObject) = span.extract()?;
            let len = match length {
                Some(l) if l > n => {
                    return Err(invalid(
                        "ibv_reg_mr",
                        format!("length {l} exceeds the buffer's {n} bytes"),
                    ))
                }
                Some(l) => l,
                None => n,
            };
            (addr, len, keep)
        };
        let ptr = NonNull::new(addr as *mut u8)
            .ok_or_else(|| invalid("ibv_reg_mr", "cannot register address 0".into()))?;
        let pd = Arc::clone(slf.borrow().get()?);
        // SAFETY: a buffer object's span stays allocated (and pinned by the memoryview
        // or tensor in `owner`) while `owner` lives; an integer address is the package's
        // unchecked form, which the caller vouches for (see `PD.reg_mr`'s docs).
        let mem = unsafe { PyMemory::new(ptr, len, owner.clone_ref(py)) };
        let kind = if flags.contains(AccessFlags::REMOTE_WRITE) {
            MrKind::Remote(Mr::new_remote_write(pd, mem, flags).or_raise("ibv_reg_mr")?)
        } else {
            MrKind::Local(Mr::new(pd, mem, flags).or_raise("ibv_reg_mr")?)
        };
        let host_view = !owner.is_none(py);
        let mr = MR::finish(slf, kind, addr as u64, owner)?;
        mr.borrow_mut(py).host_view = host_view;
        Ok(mr)
    }
    /// Registers a dma-buf range (`[offset, offset + length)` of `fd`, addressed by the
    /// device as `iova`). The fd is duplicated: the caller may close its own.
    fn reg_dmabuf_mr(
        slf: &Bound<'_, Self>,
        offset: u64,
        length: usize,
        iova: u64,
        fd: i32,
        access: u32,
    ) -> PyResult<Py<MR>> {
        if fd < 0 {
            return Err(invalid(
                "ibv_reg_dmabuf_mr",
                format!("bad file descriptor {fd}"),
            ));
        }
        // SAFETY: the fd is only borrowed for the duplication below, while the caller
        // still holds it open (they pass it to this call).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let owned: OwnedFd = borrowed.try_clone_to_owned().map_err(|e| {
            invalid(
                "ibv_reg_dmabuf_mr",
                format!("cannot duplicate fd {fd}: {e}"),
            )
        })?;
        let pd = Arc::clone(slf.borrow().get()?);
        let mr = DmaBufMr::new(
            pd,
            DmaBufFd::new(owned, offset, length),
            iova,
            access_of(access),
        )
        .or_raise("ibv_reg_dmabuf_mr")?;
        MR::finish(slf, MrKind::DmaBuf(mr), iova, slf.py().None())
    }
    /// Creates an address handle for a remote EFA device: `addr` is an `AHAttr`, a
    /// `Gid` or 16 GID bytes.
    #[pyo3(signature = (addr, sgid_index=0, port_num=1))]
    fn create_ah(
        slf: &Bound<'_, Self>,
        addr: &Bound<'_, PyAny>,
        sgid_index: u8,
        port_num: u8,
    ) -> PyResult<AH> {
        let _ = (sgid_index, port_num); // one port, one GID on EFA
        let raw: [u8; 16] = if let Ok(g) = addr.downcast::<Gid>() {
            g.get().0
        } else if let Ok(attr) = addr.downcast::<crate::qp::AHAttr>() {
            attr.borrow().gid(slf.py())?
        } else {
            // As the package: `bytes(addr)`, which must be 16 bytes (ValueError).
            let b = slf.py().get_type::<PyBytes>().call1((addr,))?;
            let b: &[u8] = b.downcast::<PyBytes>()?.as_bytes();
            b.try_into()
                .map_err(|_| value_error("dgid must be 16 bytes"))?
        };
        let pd = Arc::clone(slf.borrow().get()?);
        let ah = RAh::new(pd, efa_typestate::Gid(raw)).or_raise("ibv_create_ah")?;
        Ok(AH {
            inner: Some(ah),
            pd: slf.clone().unbind(),
        })
    }
    /// Creates an SRD (default) or UD queue pair.
    fn create_qp(
        slf: &Bound<'_, Self>,
        init_attr: &Bound<'_, crate::qp::QPInitAttr>,
    ) -> PyResult<crate::qp::QP> {
        crate::qp::QP::create(slf, &init_attr.borrow())
    }
    /// Closes this handle; the PD is deallocated once no MR, QP or AH uses it.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.try_borrow_mut().map_err(|_| busy("PD"))?.inner = None;
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
    host_view: bool,
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

/// An address handle naming a remote EFA device (by GID).
#[pyclass(module = "efa._efa")]
pub struct AH {
    pub(crate) inner: Option<RAh<SPd>>,
    #[pyo3(get)]
    pd: Py<PD>,
}

impl AH {
    pub(crate) fn get(&self) -> PyResult<&RAh<SPd>> {
        self.inner.as_ref().ok_or_else(|| closed("AH"))
    }
}

#[pymethods]
impl AH {
    /// The EFA address handle number.
    #[getter]
    fn ahn(&self) -> PyResult<u16> {
        Ok(self.get()?.number())
    }
    #[getter]
    fn gid(&self) -> PyResult<Gid> {
        Ok(self.get()?.gid().into())
    }
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.try_borrow_mut().map_err(|_| busy("AH"))?.inner = None;
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
