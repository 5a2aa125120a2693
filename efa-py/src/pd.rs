//! Protection domains and address handles (memory regions: `crate::mr`).

use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use efa_typestate::{AccessFlags, Ah as RAh, DmaBufFd, DmaBufMr, Mr, Pd as RPd};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyTuple};

use crate::args::{int_in, value_error, U64_MAX};
use crate::device::{Context, Gid, SCtx};
use crate::errors::{busy, closed, invalid, OrRaise};
use crate::memory::PyMemory;

pub use crate::mr::{MrKind, MR};

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
    /// Registers memory. `addr` is a buffer object (bytearray, numpy array, mmap,
    /// torch CPU tensor...: kept alive and pinned for the MR's life; it must be
    /// C-contiguous, and writable when `access` has LOCAL_WRITE or REMOTE_WRITE) or, as in
    /// the `efa` package, an integer address the caller keeps valid while the MR lives.
    #[pyo3(signature = (addr, length=None, access=0))]
    fn reg_mr(
        slf: &Bound<'_, Self>,
        addr: &Bound<'_, PyAny>,
        length: Option<&Bound<'_, PyAny>>,
        access: u32,
    ) -> PyResult<Py<MR>> {
        // The package's name; here either an integer address or a buffer object.
        let addr_or_buffer = addr;
        let py = slf.py();
        let flags = access_of(access);
        let wants_write =
            flags.contains(AccessFlags::LOCAL_WRITE) || flags.contains(AccessFlags::REMOTE_WRITE);
        let (addr, len, owner): (usize, usize, PyObject) = if addr_or_buffer
            .is_instance_of::<PyInt>()
        {
            // The package's form and checks (ValueError).
            let addr = int_in(
                addr_or_buffer,
                0,
                U64_MAX,
                "addr must be between 0 and 2**64 - 1",
            )?;
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
                .call1((addr_or_buffer, wants_write))?;
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
        offset: &Bound<'_, PyAny>,
        length: &Bound<'_, PyAny>,
        iova: &Bound<'_, PyAny>,
        fd: i32,
        access: u32,
    ) -> PyResult<Py<MR>> {
        // The package's checks (ValueError).
        let offset = int_in(offset, 0, U64_MAX, "offset must be between 0 and 2**64 - 1")? as u64;
        let length = int_in(length, 1, U64_MAX, "length must be between 1 and 2**64 - 1")?;
        let iova = int_in(iova, 0, U64_MAX, "iova must be between 0 and 2**64 - 1")? as u64;
        let length = usize::try_from(length).map_err(|_| {
            invalid(
                "ibv_reg_dmabuf_mr",
                "the length exceeds this machine's addresses".into(),
            )
        })?;
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
        } else if let Ok(attr) = addr.downcast::<AHAttr>() {
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
            serial: crate::kept::serial(),
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

/// An address handle naming a remote EFA device (by GID).
#[pyclass(module = "efa._efa")]
pub struct AH {
    pub(crate) inner: Option<RAh<SPd>>,
    /// This object's number, never another's (`crate::kept`).
    pub(crate) serial: u64,
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

/// Address-handle attributes: on EFA only `dgid` matters.
#[pyclass(module = "efa._efa", get_all, set_all)]
pub struct AHAttr {
    dgid: Py<PyBytes>,
    sgid_index: u8,
    port_num: u8,
    hop_limit: u8,
    traffic_class: u8,
    flow_label: u32,
    is_global: u8,
}

impl AHAttr {
    pub fn gid(&self, py: Python<'_>) -> PyResult<[u8; 16]> {
        // `dgid` may have been set to bytes of another length since.
        self.dgid
            .bind(py)
            .as_bytes()
            .try_into()
            .map_err(|_| value_error("dgid must be 16 bytes"))
    }
}

#[pymethods]
impl AHAttr {
    #[new]
    #[pyo3(signature = (dgid=None, sgid_index=0, port_num=1, hop_limit=1, traffic_class=0, flow_label=0, is_global=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dgid: Option<&Bound<'_, PyAny>>,
        sgid_index: u8,
        port_num: u8,
        hop_limit: u8,
        traffic_class: u8,
        flow_label: u32,
        is_global: u8,
    ) -> PyResult<Self> {
        // As the package: `bytes(dgid)` (a Gid, bytes, a bytearray...), 16 of them.
        let dgid = match dgid {
            None => PyBytes::new(py, &[0; 16]),
            Some(g) => py
                .get_type::<PyBytes>()
                .call1((g,))?
                .downcast_into::<PyBytes>()?,
        };
        if dgid.as_bytes().len() != 16 {
            return Err(value_error("dgid must be 16 bytes"));
        }
        Ok(AHAttr {
            dgid: dgid.unbind(),
            sgid_index,
            port_num,
            hop_limit,
            traffic_class,
            flow_label,
            is_global,
        })
    }
}
