//! An open device context: attribute queries, the GID, async events, and the factory
//! for protection domains, completion queues and completion channels.

use core::ffi::{c_int, c_void, CStr};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::time::Duration;

use crate::endpoint::Gid;
use crate::error::{Error, Result, Verb};
use crate::ffi;
use crate::flags::flag_set;

flag_set! {
    /// EFA device capabilities (`efadv_device_attr.device_caps`).
    pub struct DeviceCaps: u32 {
        /// RDMA read.
        const RDMA_READ = ffi::EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
        /// `rnr_retry` settable on SRD QPs.
        const RNR_RETRY = ffi::EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
        /// CQs can report the sender GID of receives from unknown peers.
        const CQ_WITH_SGID = ffi::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID;
        /// RDMA write and write-with-immediate.
        const RDMA_WRITE = ffi::EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE;
        /// QPs may receive write-with-immediate without consuming receive WRs.
        const UNSOLICITED_WRITE_RECV = ffi::EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV;
        /// CQ rings in user dma-buf memory.
        const CQ_WITH_EXT_MEM_DMABUF = ffi::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_EXT_MEM_DMABUF;
        /// Completion counters.
        const COMP_CNTR = ffi::EFADV_DEVICE_ATTR_CAPS_COMP_CNTR;
    }
}

/// EFA-specific device limits and capabilities (`efadv_query_device`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EfaDeviceAttr {
    /// Deepest send queue (work requests).
    pub max_sq_wr: u32,
    /// Deepest receive queue (buffer descriptors).
    pub max_rq_wr: u32,
    /// Most SGEs per send.
    pub max_sq_sge: u16,
    /// Most SGEs per receive.
    pub max_rq_sge: u16,
    /// Most inline bytes with the default (64-byte) WQE.
    pub inline_buf_size: u16,
    /// Most inline bytes with wide WQEs (equals `inline_buf_size` on devices without them).
    pub inline_buf_size_ex: u16,
    /// Capability set.
    pub caps: DeviceCaps,
    /// Largest single RDMA read/write in bytes.
    pub max_rdma_size: u32,
}

/// Generic device attributes (`ibv_query_device`).
#[derive(Clone, Copy)]
pub struct DeviceAttr {
    raw: ffi::ibv_device_attr,
}

impl DeviceAttr {
    /// Firmware version string (efa-sim's starts with `"efa-sim"`).
    pub fn fw_ver(&self) -> &str {
        let bytes = &self.raw.fw_ver;
        // SAFETY: c_char and u8 have the same size and alignment; the slice stays inside the array.
        let bytes: &[u8] =
            unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        core::str::from_utf8(&bytes[..end]).unwrap_or("")
    }
    /// PCI vendor id (0x1d0f for Amazon).
    pub fn vendor_id(&self) -> u32 {
        self.raw.vendor_id
    }
    /// PCI device id (0xefa0..0xefa4).
    pub fn vendor_part_id(&self) -> u32 {
        self.raw.vendor_part_id
    }
    /// Hardware version.
    pub fn hw_ver(&self) -> u32 {
        self.raw.hw_ver
    }
    /// Node GUID (host byte order).
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.raw.node_guid)
    }
    /// Largest memory region in bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.raw.max_mr_size
    }
    /// Most QPs.
    pub fn max_qp(&self) -> u32 {
        self.raw.max_qp as u32
    }
    /// Most work requests per queue.
    pub fn max_qp_wr(&self) -> u32 {
        self.raw.max_qp_wr as u32
    }
    /// Most SGEs per work request.
    pub fn max_sge(&self) -> u32 {
        self.raw.max_sge as u32
    }
    /// Most CQs.
    pub fn max_cq(&self) -> u32 {
        self.raw.max_cq as u32
    }
    /// Deepest CQ.
    pub fn max_cqe(&self) -> u32 {
        self.raw.max_cqe as u32
    }
    /// Most MRs.
    pub fn max_mr(&self) -> u32 {
        self.raw.max_mr as u32
    }
    /// Most PDs.
    pub fn max_pd(&self) -> u32 {
        self.raw.max_pd as u32
    }
    /// Most AHs.
    pub fn max_ah(&self) -> u32 {
        self.raw.max_ah as u32
    }
    /// Number of ports (1 on EFA).
    pub fn phys_port_cnt(&self) -> u8 {
        self.raw.phys_port_cnt
    }
    /// The raw struct.
    pub fn raw(&self) -> &ffi::ibv_device_attr {
        &self.raw
    }
}

impl core::fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("vendor_id", &format_args!("{:#x}", self.vendor_id()))
            .field(
                "vendor_part_id",
                &format_args!("{:#x}", self.vendor_part_id()),
            )
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_cqe", &self.max_cqe())
            .finish_non_exhaustive()
    }
}

/// Port attributes (`ibv_query_port`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// `ibv_port_state` (4 = active).
    pub state: u32,
    /// Physical state (IB encoding: 5 = link up).
    pub phys_state: u8,
    /// Largest message in bytes (the real send/receive size limit on EFA).
    pub max_msg_sz: u32,
    /// Largest MTU the port supports (`ibv_mtu` enum; on EFA the device MTU, as active).
    pub max_mtu: u32,
    /// Active MTU enum (`IBV_MTU_4096` = 5 on EFA).
    pub active_mtu: u32,
    /// GID table length (1 on EFA).
    pub gid_tbl_len: i32,
    /// P_Key table length (1 on EFA).
    pub pkey_tbl_len: u16,
    /// `IBV_PORT_*` capability bits (none on EFA).
    pub port_cap_flags: u32,
    /// The port's LID (0 on EFA, which has no subnet manager).
    pub lid: u16,
    /// The subnet manager's LID (0 on EFA).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes supported (IB encoding).
    pub max_vl_num: u8,
    /// Link layer (0 = unspecified on EFA).
    pub link_layer: u8,
    /// Active width (IB encoding).
    pub active_width: u8,
    /// Active speed (IB encoding).
    pub active_speed: u8,
}

impl PortAttr {
    /// True if the port is active.
    pub fn is_active(&self) -> bool {
        self.state == ffi::ibv_port_state::IBV_PORT_ACTIVE
    }
}

/// One asynchronous event of a device (`ibv_get_async_event`), already acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `ibv_event_type` value (e.g. 8 = device fatal).
    pub event_type: u32,
    /// The object it concerns (CQ/QP pointer, or the port number), as an opaque value.
    pub element: usize,
}

impl AsyncEvent {
    /// True for `IBV_EVENT_DEVICE_FATAL`.
    pub fn is_device_fatal(&self) -> bool {
        self.event_type == ffi::ibv_event_type::IBV_EVENT_DEVICE_FATAL as u32
    }
}

/// `struct ibv_async_event` with the enum read as a plain integer (an unknown value must
/// not become an invalid Rust enum).
#[repr(C)]
struct RawAsyncEvent {
    element: *mut c_void,
    event_type: u32,
}
static_assertions::assert_eq_size!(RawAsyncEvent, ffi::ibv_async_event);

/// EFA devices have one port, number 1.
fn check_port(port: u8) -> Result<()> {
    if port != crate::qp::EFA_PORT {
        return Err(crate::error::InvalidInput::NoSuchPort(port).into());
    }
    Ok(())
}

pub(crate) fn timeout_ms(timeout: Option<Duration>) -> c_int {
    match timeout {
        None => -1,
        Some(d) => d.as_millis().min(i32::MAX as u128) as c_int,
    }
}

/// An open device context (`ibv_context`), closed on drop.
///
/// Everything made from it (PDs, CQs, channels) holds it, by borrow or by `Arc` (see
/// [`parent`](crate::parent)), so it cannot be closed while they exist.
pub struct Context {
    raw: NonNull<ffi::ibv_context>,
    efa: Option<EfaDeviceAttr>,
    /// `ibv_query_device`'s `max_cqe` at open (0: the query failed).
    max_cqe: u32,
}

// SAFETY: libibverbs contexts may be used from any thread; all verbs on a context are
// thread-safe (rdma-core documents this), and the cached attributes are immutable.
unsafe impl Send for Context {}
// SAFETY: see above.
unsafe impl Sync for Context {}

impl Context {
    /// Wraps an opened context.
    ///
    /// # Safety
    /// `raw` must come from `ibv_open_device`, be exclusively owned by the new value and
    /// not be closed elsewhere.
    pub unsafe fn from_raw(raw: NonNull<ffi::ibv_context>) -> Context {
        let mut ctx = Context {
            raw,
            efa: None,
            max_cqe: 0,
        };
        ctx.efa = ctx.query_efa().ok();
        ctx.max_cqe = ctx.query_device().map_or(0, |a| a.max_cqe());
        ctx
    }

    /// Opens the first EFA device (convenience for single-NIC programs and tests).
    pub fn open_first_efa() -> Result<Context> {
        let list = crate::device::DeviceList::new()?;
        let dev = list.efa().next().ok_or(Error::NoSuchDevice)?;
        dev.open()
    }

    /// Opens the EFA device called `name`.
    pub fn open_by_name(name: &str) -> Result<Context> {
        let list = crate::device::DeviceList::new()?;
        let dev = list.by_name(name).ok_or(Error::NoSuchDevice)?;
        dev.open()
    }

    /// The raw context pointer.
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.raw.as_ptr()
    }

    /// Device name, e.g. `"efa_0"`.
    pub fn device_name(&self) -> &str {
        // SAFETY: ctx->device points at the device struct, valid while the context is open;
        // its name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*(*self.raw.as_ptr()).device).name.as_ptr()) };
        name.to_str().unwrap_or("")
    }

    /// Generic device attributes.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut raw = MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: valid context and out-pointer to a zeroed attr struct.
        let rc = unsafe { ffi::ibv_query_device(self.as_ptr(), raw.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::verb(Verb::QueryDevice, rc));
        }
        Ok(DeviceAttr {
            // SAFETY: all-zero is a valid ibv_device_attr (plain integers) and the call filled it.
            raw: unsafe { raw.assume_init() },
        })
    }

    /// EFA attributes as cached when the context was opened.
    pub fn efa_attr(&self) -> Result<EfaDeviceAttr> {
        self.efa.ok_or(Error::Unsupported {
            verb: Verb::EfadvQueryDevice,
            why: crate::error::Unsupported::Provider(crate::error::Errno::EOPNOTSUPP),
        })
    }

    /// The device's `max_cqe` as read when the context was opened (`None` if that query
    /// failed).
    pub(crate) fn max_cqe(&self) -> Option<u32> {
        (self.max_cqe != 0).then_some(self.max_cqe)
    }

    /// Queries the EFA attributes (`efadv_query_device`, rdma-core 65 layout).
    pub fn query_efa(&self) -> Result<EfaDeviceAttr> {
        let mut a = ffi::efadv_device_attr::default();
        // SAFETY: valid context; `a` is a writable struct of exactly `inlen` bytes.
        let rc = unsafe {
            ffi::efadv_query_device(self.as_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
        };
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryDevice, rc));
        }
        Ok(EfaDeviceAttr {
            max_sq_wr: a.max_sq_wr,
            max_rq_wr: a.max_rq_wr,
            max_sq_sge: a.max_sq_sge,
            max_rq_sge: a.max_rq_sge,
            inline_buf_size: a.inline_buf_size,
            inline_buf_size_ex: if a.inline_buf_size_ex == 0 {
                a.inline_buf_size
            } else {
                a.inline_buf_size_ex
            },
            caps: DeviceCaps::from_bits_retain(a.device_caps),
            max_rdma_size: a.max_rdma_size,
        })
    }

    /// Device capabilities (empty if the device is not EFA).
    pub fn caps(&self) -> DeviceCaps {
        self.efa.map(|a| a.caps).unwrap_or_default()
    }

    /// Attributes of `port` (EFA devices have port 1 only: any other is
    /// [`InvalidInput::NoSuchPort`](crate::InvalidInput::NoSuchPort)).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        check_port(port)?;
        let mut raw = MaybeUninit::<ffi::ibv_port_attr>::zeroed();
        // SAFETY: valid context and zeroed out-struct; rdma-sys picks the length-aware
        // verbs_context op or the exported compat symbol.
        let rc = unsafe { ffi::___ibv_query_port(self.as_ptr(), port, raw.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::verb(Verb::QueryPort, rc));
        }
        // SAFETY: zero-initialised plain-integer struct, filled by the call.
        let raw = unsafe { raw.assume_init() };
        Ok(PortAttr {
            state: raw.state,
            phys_state: raw.phys_state,
            max_msg_sz: raw.max_msg_sz,
            max_mtu: raw.max_mtu,
            active_mtu: raw.active_mtu,
            gid_tbl_len: raw.gid_tbl_len,
            pkey_tbl_len: raw.pkey_tbl_len,
            port_cap_flags: raw.port_cap_flags,
            lid: raw.lid,
            sm_lid: raw.sm_lid,
            lmc: raw.lmc,
            max_vl_num: raw.max_vl_num,
            link_layer: raw.link_layer,
            active_width: raw.active_width,
            active_speed: raw.active_speed,
        })
    }

    /// The device's network address (port 1, GID index 0).
    pub fn gid(&self) -> Result<Gid> {
        self.query_gid(crate::qp::EFA_PORT, 0)
    }

    /// GID `index` of `port` (port 1 only, as for [`query_port`](Self::query_port)).
    pub fn query_gid(&self, port: u8, index: i32) -> Result<Gid> {
        check_port(port)?;
        let mut gid = ffi::ibv_gid { raw: [0; 16] };
        // SAFETY: valid context, `gid` is a writable 16-byte union.
        let rc = unsafe { ffi::ibv_query_gid(self.as_ptr(), port, index, &mut gid) };
        if rc != 0 {
            // Legacy verb: returns -1 without a useful errno.
            return Err(Error::verb(Verb::QueryGid, crate::error::Errno::EINVAL.0));
        }
        // SAFETY: every bit pattern is a valid [u8; 16].
        Ok(Gid(unsafe { gid.raw }))
    }

    /// The async-event file descriptor: pollable, readable when
    /// [`get_async_event`](Self::get_async_event) would not block.
    pub fn async_fd(&self) -> i32 {
        // SAFETY: valid context; async_fd is a plain field set at open.
        unsafe { (*self.as_ptr()).async_fd }
    }

    /// Completion vectors of the device (`ibv_context.num_comp_vectors`): a CQ's
    /// [`comp_vector`](crate::CqOptions::comp_vector) is below it.
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: valid context; num_comp_vectors is a plain field set at open.
        let n = unsafe { (*self.as_ptr()).num_comp_vectors };
        u32::try_from(n).unwrap_or(0)
    }

    /// Blocks until the next async event, returns it acknowledged.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        let mut ev = RawAsyncEvent {
            element: core::ptr::null_mut(),
            event_type: 0,
        };
        // SAFETY: valid context; RawAsyncEvent has the layout of ibv_async_event (asserted),
        // with the enum read as an integer.
        let rc = unsafe {
            ffi::ibv_get_async_event(self.as_ptr(), (&mut ev as *mut RawAsyncEvent).cast())
        };
        if rc != 0 {
            return Err(Error::last_os(Verb::GetAsyncEvent));
        }
        let out = AsyncEvent {
            event_type: ev.event_type,
            element: ev.element as usize,
        };
        // SAFETY: `ev` was filled by ibv_get_async_event and is acknowledged exactly once.
        unsafe { ffi::ibv_ack_async_event((&mut ev as *mut RawAsyncEvent).cast()) };
        Ok(out)
    }

    /// Waits up to `timeout` (None = forever) for an async event.
    pub fn wait_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        match ffi::wait_readable(self.async_fd(), timeout_ms(timeout)) {
            Ok(true) => self.get_async_event().map(Some),
            Ok(false) => Ok(None),
            Err(e) => Err(Error::verb(Verb::GetAsyncEvent, e)),
        }
    }

    /// Closes the context, reporting failure (dropping closes it silently).
    pub fn close(self) -> Result<()> {
        let raw = self.raw;
        core::mem::forget(self);
        // SAFETY: owned context, closed exactly once (Drop is skipped by forget).
        let rc = unsafe { ffi::ibv_close_device(raw.as_ptr()) };
        if rc != 0 {
            return Err(Error::verb(Verb::CloseDevice, crate::ffi::errno().max(rc)));
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: owned context, closed exactly once; all children borrow `self` and are gone.
        unsafe { ffi::ibv_close_device(self.raw.as_ptr()) };
    }
}

impl core::fmt::Debug for Context {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device_name())
            .finish()
    }
}

#[cfg(feature = "std")]
impl std::os::fd::AsRawFd for Context {
    /// The async-event fd.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.async_fd()
    }
}

#[cfg(feature = "std")]
impl std::os::fd::AsFd for Context {
    /// The async-event fd.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // SAFETY: the fd is open as long as the context is.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.async_fd()) }
    }
}
