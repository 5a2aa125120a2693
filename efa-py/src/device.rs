//! Devices, the open context and its attribute objects.

use std::sync::Arc;

use efa_typestate::{Context as RContext, DeviceList, Gid as RGid};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{busy, closed, OrRaise};

pub type SCtx = Arc<RContext>;

/// An RDMA device discovered by `get_device_list`.
#[pyclass(module = "efa._efa", frozen)]
pub struct Device {
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    guid: u64,
    #[pyo3(get)]
    is_efa: bool,
}

#[pymethods]
impl Device {
    #[new]
    #[pyo3(signature = (name, guid=0))]
    fn new(name: String, guid: u64) -> Self {
        Device {
            name,
            guid,
            is_efa: true,
        }
    }
    /// Opens this device, returning a `Context`.
    fn open(&self, py: Python<'_>) -> PyResult<Context> {
        let name = self.name.clone();
        let ctx = py
            .allow_threads(|| RContext::open_by_name(&name))
            .or_raise("ibv_open_device")?;
        Ok(Context::wrap(ctx))
    }
    fn __repr__(&self) -> String {
        format!(
            "Device(name={}, guid=0x{:x})",
            crate::args::py_repr(&self.name),
            self.guid
        )
    }
}

fn list(py: Python<'_>, efa_only: bool) -> PyResult<Vec<Device>> {
    py.allow_threads(|| -> efa_typestate::Result<Vec<Device>> {
        let devices = DeviceList::new()?;
        Ok(devices
            .iter()
            .filter(|d| !efa_only || d.is_efa())
            .map(|d| {
                // The GUID needs the device open; a device that will not open lists with 0.
                let guid = d
                    .open()
                    .and_then(|c| c.query_device())
                    .map(|a| a.node_guid())
                    .unwrap_or(0);
                Device {
                    name: d.name().to_owned(),
                    guid,
                    is_efa: d.is_efa(),
                }
            })
            .collect())
    })
    .or_raise("ibv_get_device_list")
}

/// Every RDMA `Device` on this host (EFA or not).
#[pyfunction]
pub fn get_device_list(py: Python<'_>) -> PyResult<Vec<Device>> {
    list(py, false)
}

/// The `Device` list filtered to EFA devices.
#[pyfunction]
pub fn get_efa_device_list(py: Python<'_>) -> PyResult<Vec<Device>> {
    list(py, true)
}

/// A 16-byte GID (the EFA device address).
#[pyclass(module = "efa._efa", frozen)]
#[derive(PartialEq, Eq, Hash, Clone, Copy)]
pub struct Gid(pub [u8; 16]);

#[pymethods]
impl Gid {
    #[new]
    fn new(raw: &[u8]) -> PyResult<Self> {
        let raw: [u8; 16] = raw
            .try_into()
            .map_err(|_| crate::args::value_error("gid must be exactly 16 bytes"))?;
        Ok(Gid(raw))
    }
    #[getter]
    fn raw<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.0)
    }
    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.0)
    }
    /// Equal to a `Gid` or to bytes/bytearray of the same 16 bytes (as the package).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyObject {
        let py = other.py();
        let eq = if let Ok(g) = other.downcast::<Gid>() {
            g.get().0 == self.0
        } else if let Ok(b) = other.downcast::<PyBytes>() {
            b.as_bytes() == self.0
        } else if let Ok(b) = other.downcast::<pyo3::types::PyByteArray>() {
            b.to_vec() == self.0
        } else {
            return py.NotImplemented();
        };
        pyo3::types::PyBool::new(py, eq)
            .to_owned()
            .into_any()
            .unbind()
    }
    /// The hash of its bytes, which it equals.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        PyBytes::new(py, &self.0).hash()
    }
    /// The most-significant 64 bits (network byte order).
    #[getter]
    fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The least-significant 64 bits (network byte order).
    #[getter]
    fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
    fn __repr__(&self) -> String {
        let hex: Vec<String> = self
            .0
            .chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect();
        format!("Gid('{}')", hex.join(":"))
    }
}

impl From<RGid> for Gid {
    fn from(g: RGid) -> Gid {
        Gid(*g.as_bytes())
    }
}

/// Generic verbs device capabilities from `Context.query_device`.
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct DeviceAttr {
    fw_ver: String,
    hw_ver: u32,
    vendor_id: u32,
    vendor_part_id: u32,
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    max_qp: u32,
    max_qp_wr: u32,
    max_sge: u32,
    max_cq: u32,
    max_cqe: u32,
    max_mr: u32,
    max_pd: u32,
    max_ah: u32,
    max_pkeys: u32,
    phys_port_cnt: u8,
}

#[pymethods]
impl DeviceAttr {
    fn __repr__(&self) -> String {
        format!(
            "DeviceAttr(fw_ver={}, max_qp={}, max_cqe={}, phys_port_cnt={})",
            crate::args::py_repr(&self.fw_ver),
            self.max_qp,
            self.max_cqe,
            self.phys_port_cnt
        )
    }
}

/// EFA-specific capabilities from `Context.query_efa_device`.
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct EfaDeviceAttr {
    max_sq_wr: u32,
    max_rq_wr: u32,
    max_sq_sge: u16,
    max_rq_sge: u16,
    inline_buf_size: u16,
    max_rdma_size: u32,
    device_caps: u32,
}

#[pymethods]
impl EfaDeviceAttr {
    fn __repr__(&self) -> String {
        format!(
            "EfaDeviceAttr(max_sq_wr={}, max_rq_wr={}, inline_buf_size={}, device_caps=0x{:x}, \
             max_rdma_size={})",
            self.max_sq_wr,
            self.max_rq_wr,
            self.inline_buf_size,
            self.device_caps,
            self.max_rdma_size
        )
    }
}

/// Port attributes from `Context.query_port`.
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct PortAttr {
    state: u32,
    max_msg_sz: u32,
    active_mtu: u32,
    max_mtu: u32,
    gid_tbl_len: i32,
    link_layer: u8,
    active_width: u8,
    active_speed: u8,
    lid: u16,
    pkey_tbl_len: u16,
    port_cap_flags: u32,
}

#[pymethods]
impl PortAttr {
    fn __repr__(&self) -> String {
        format!(
            "PortAttr(state={}, active_mtu={}, max_msg_sz={})",
            self.state, self.active_mtu, self.max_msg_sz
        )
    }
}

/// An asynchronous device event from `Context.get_async_event`.
#[pyclass(module = "efa._efa", frozen, get_all)]
pub struct AsyncEvent {
    event_type: u32,
}

#[pymethods]
impl AsyncEvent {
    /// The event type's name (`ibv_event_type`).
    #[getter]
    fn event_type_str(&self) -> &'static str {
        const NAMES: [&str; 22] = [
            "CQ error",
            "QP fatal",
            "QP request error",
            "QP access error",
            "communication established",
            "SQ drained",
            "path migrated",
            "path migration request failed",
            "local catastrophic error",
            "port active",
            "port error",
            "LID change",
            "P_Key change",
            "SM change",
            "SRQ error",
            "SRQ limit reached",
            "last WQE reached",
            "client reregistration",
            "GID table change",
            "WQ fatal",
            "unknown",
            "unknown",
        ];
        NAMES
            .get(self.event_type as usize)
            .copied()
            .unwrap_or("unknown")
    }
    fn __repr__(&self) -> String {
        format!("AsyncEvent({})", self.event_type_str())
    }
}

/// An open device context (`ibv_context`).
#[pyclass(module = "efa._efa")]
pub struct Context {
    pub(crate) inner: Option<SCtx>,
    #[pyo3(get)]
    name: String,
}

impl Context {
    fn wrap(ctx: RContext) -> Context {
        Context {
            name: ctx.device_name().to_owned(),
            inner: Some(Arc::new(ctx)),
        }
    }
    pub(crate) fn get(&self) -> PyResult<&SCtx> {
        self.inner.as_ref().ok_or_else(|| closed("Context"))
    }
}

#[pymethods]
impl Context {
    /// Generic verbs capabilities.
    fn query_device(&self) -> PyResult<DeviceAttr> {
        let a = self.get()?.query_device().or_raise("ibv_query_device")?;
        let raw = a.raw();
        Ok(DeviceAttr {
            fw_ver: a.fw_ver().to_owned(),
            hw_ver: a.hw_ver(),
            vendor_id: a.vendor_id(),
            vendor_part_id: a.vendor_part_id(),
            node_guid: a.node_guid(),
            sys_image_guid: raw.sys_image_guid,
            max_mr_size: a.max_mr_size(),
            max_qp: a.max_qp(),
            max_qp_wr: a.max_qp_wr(),
            max_sge: a.max_sge(),
            max_cq: a.max_cq(),
            max_cqe: a.max_cqe(),
            max_mr: a.max_mr(),
            max_pd: a.max_pd(),
            max_ah: a.max_ah(),
            max_pkeys: raw.max_pkeys as u32,
            phys_port_cnt: a.phys_port_cnt(),
        })
    }
    /// EFA capabilities (`efadv_query_device`).
    fn query_efa_device(&self) -> PyResult<EfaDeviceAttr> {
        let a = self.get()?.query_efa().or_raise("efadv_query_device")?;
        Ok(EfaDeviceAttr {
            max_sq_wr: a.max_sq_wr,
            max_rq_wr: a.max_rq_wr,
            max_sq_sge: a.max_sq_sge,
            max_rq_sge: a.max_rq_sge,
            inline_buf_size: a.inline_buf_size,
            max_rdma_size: a.max_rdma_size,
            device_caps: a.caps.bits(),
        })
    }
    /// True if the device is driven by the EFA provider.
    fn is_efa(&self) -> PyResult<bool> {
        Ok(self.get()?.efa_attr().is_ok())
    }
    #[pyo3(signature = (port_num=1))]
    fn query_port(&self, port_num: u8) -> PyResult<PortAttr> {
        let p = self
            .get()?
            .query_port(port_num)
            .or_raise("ibv_query_port")?;
        Ok(PortAttr {
            state: p.state,
            max_msg_sz: p.max_msg_sz,
            active_mtu: p.active_mtu,
            max_mtu: p.max_mtu,
            gid_tbl_len: p.gid_tbl_len,
            link_layer: p.link_layer,
            active_width: p.active_width,
            active_speed: p.active_speed,
            lid: p.lid,
            pkey_tbl_len: p.pkey_tbl_len,
            port_cap_flags: p.port_cap_flags,
        })
    }
    /// The device GID, the EFA device's network address.
    #[pyo3(signature = (port_num=1, index=0))]
    fn query_gid(&self, port_num: u8, index: i32) -> PyResult<Gid> {
        Ok(self
            .get()?
            .query_gid(port_num, index)
            .or_raise("ibv_query_gid")?
            .into())
    }
    /// Number of completion vectors (`comp_vector` of `create_cq` is below it).
    #[getter]
    fn num_comp_vectors(&self) -> PyResult<u32> {
        Ok(self.get()?.num_comp_vectors())
    }
    /// The file descriptor of asynchronous device events.
    #[getter]
    fn async_fd(&self) -> PyResult<i32> {
        Ok(self.get()?.async_fd())
    }
    /// Blocks (without the GIL) until an asynchronous device event arrives.
    fn get_async_event(&self, py: Python<'_>) -> PyResult<AsyncEvent> {
        let ctx = Arc::clone(self.get()?);
        let ev = py
            .allow_threads(|| ctx.get_async_event())
            .or_raise("ibv_get_async_event")?;
        Ok(AsyncEvent {
            event_type: ev.event_type,
        })
    }
    /// Acknowledges an event of `get_async_event` (the Rust core acknowledges each
    /// event as it returns it, so this only checks the context is open).
    fn ack_async_event(&self, ev: &AsyncEvent) -> PyResult<()> {
        let _ = ev;
        self.get().map(|_| ())
    }
    /// Allocates a protection domain.
    fn alloc_pd(slf: &Bound<'_, Self>) -> PyResult<crate::pd::PD> {
        crate::pd::PD::alloc(slf)
    }
    /// Creates a completion event channel.
    fn create_comp_channel(slf: &Bound<'_, Self>) -> PyResult<crate::cq::CompChannel> {
        crate::cq::CompChannel::create(slf)
    }
    /// Creates a classic completion queue of at least `cqe` entries.
    #[pyo3(signature = (cqe, channel=None, comp_vector=0))]
    fn create_cq(
        slf: &Bound<'_, Self>,
        cqe: i32,
        channel: Option<Py<crate::cq::CompChannel>>,
        comp_vector: i32,
    ) -> PyResult<PyObject> {
        let (cqe, comp_vector) = crate::cq::cq_args(slf, cqe, channel.as_ref(), comp_vector)?;
        crate::cq::CQ::create(slf, cqe, channel, comp_vector, false, false, false)
    }
    /// Creates an extended EFA completion queue (`efadv_create_cq`).
    #[pyo3(signature = (cqe, channel=None, comp_vector=0, wc_flags=None, sgid=false, unsolicited=false))]
    fn create_cq_ex(
        slf: &Bound<'_, Self>,
        cqe: i32,
        channel: Option<Py<crate::cq::CompChannel>>,
        comp_vector: i32,
        wc_flags: Option<u64>,
        sgid: bool,
        unsolicited: bool,
    ) -> PyResult<PyObject> {
        let _ = wc_flags; // every standard field is always reported
        let (cqe, comp_vector) = crate::cq::cq_args(slf, cqe, channel.as_ref(), comp_vector)?;
        crate::cq::CQ::create(slf, cqe, channel, comp_vector, true, sgid, unsolicited)
    }
    /// Closes the device context; as in the package, `EfaError` (`EBUSY`) while objects
    /// made from it (PDs, CQs, completion channels, and what they hold) are open.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let mut me = slf.try_borrow_mut().map_err(|_| busy("Context"))?;
        if let Some(ctx) = &me.inner {
            let children = Arc::strong_count(ctx) - 1;
            if children != 0 {
                return Err(crate::errors::invalid_errno(
                    "ibv_close_device",
                    crate::errors::EBUSY,
                    format!("cannot close context with {children} open child resource(s)"),
                ));
            }
        }
        me.inner = None;
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
    fn __exit__(slf: &Bound<'_, Self>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        Self::close(slf)?;
        Ok(false)
    }
    fn __repr__(&self) -> String {
        format!("Context(name={})", crate::args::py_repr(&self.name))
    }
}
