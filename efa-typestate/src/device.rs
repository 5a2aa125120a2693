//! Device enumeration: a borrowed view of `ibv_get_device_list`, freed on drop.

use core::ffi::{c_int, CStr};
use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::context::Context;
use crate::error::{Error, Result, Verb};
use crate::ffi;

/// `IBV_NODE_UNSPECIFIED` / `IBV_TRANSPORT_UNSPECIFIED`: what EFA devices report.
const NODE_UNSPECIFIED: i32 = ffi::ibv_node_type::IBV_NODE_UNSPECIFIED;
const TRANSPORT_UNSPECIFIED: i32 = ffi::ibv_transport_type::IBV_TRANSPORT_UNSPECIFIED;

/// The RDMA devices of this host, as returned by `ibv_get_device_list` (no copy; freed
/// with `ibv_free_device_list` on drop).
pub struct DeviceList {
    list: NonNull<*mut ffi::ibv_device>,
    len: usize,
}

// SAFETY: the list is an immutable array of device pointers owned by this value;
// libibverbs allows reading it and opening its devices from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: see above; no interior mutability.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists all RDMA devices (EFA or not).
    pub fn new() -> Result<DeviceList> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is owned by us until freed.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList {
                list,
                len: n.max(0) as usize,
            }),
            None => Err(Error::last_os(Verb::GetDeviceList)),
        }
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if there are no devices.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device at `index`.
    pub fn get(&self, index: usize) -> Option<Device<'_>> {
        if index >= self.len {
            return None;
        }
        // SAFETY: index < len, and the array has `len` valid non-null entries.
        let raw = unsafe { *self.list.as_ptr().add(index) };
        NonNull::new(raw).map(|raw| Device {
            raw,
            _list: PhantomData,
        })
    }

    /// All devices.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).filter_map(move |i| self.get(i))
    }

    /// Only the EFA devices.
    pub fn efa(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        self.iter().filter(|d| d.is_efa())
    }

    /// The device called `name` (e.g. `"efa_0"`).
    pub fn by_name(&self, name: &str) -> Option<Device<'_>> {
        self.iter().find(|d| d.name() == name)
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed exactly once.
        unsafe { ffi::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// One device of a [`DeviceList`], valid while the list lives.
#[derive(Clone, Copy)]
pub struct Device<'list> {
    raw: NonNull<ffi::ibv_device>,
    _list: PhantomData<&'list DeviceList>,
}

impl<'list> Device<'list> {
    fn raw(&self) -> &ffi::ibv_device {
        // SAFETY: the device struct lives as long as the list that `'list` borrows.
        unsafe { self.raw.as_ref() }
    }

    /// Kernel name, e.g. `"efa_0"` (empty if not UTF-8).
    pub fn name(&self) -> &'list str {
        // SAFETY: `name` is a NUL-terminated char array inside the device struct, which
        // outlives `'list`; the pointer is read, never written.
        let name = unsafe { CStr::from_ptr(self.raw.as_ref().name.as_ptr()) };
        name.to_str().unwrap_or("")
    }

    /// True for devices that look like EFA (node and transport type "unspecified", as the
    /// EFA kernel driver reports).
    pub fn is_efa(&self) -> bool {
        let d = self.raw();
        d.node_type == NODE_UNSPECIFIED && d.transport_type == TRANSPORT_UNSPECIFIED
    }

    /// Opens a context on this device. The context stays valid after the list is dropped.
    pub fn open(&self) -> Result<Context> {
        // SAFETY: the device pointer is valid (borrowed from the live list).
        let ctx = unsafe { ffi::ibv_open_device(self.raw.as_ptr()) };
        match NonNull::new(ctx) {
            // SAFETY: a freshly opened, exclusively owned context.
            Some(ctx) => Ok(unsafe { Context::from_raw(ctx) }),
            None => Err(Error::last_os(Verb::OpenDevice)),
        }
    }

    /// The raw `ibv_device` (for calls this crate does not wrap).
    pub fn as_ptr(&self) -> *mut ffi::ibv_device {
        self.raw.as_ptr()
    }
}

impl core::fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("efa", &self.is_efa())
            .finish()
    }
}
