//! Loading the driver: `libcuda.so.1` opened with `dlopen` on first use (no CUDA at build
//! or link time), its entry points resolved once, `cuInit` called once.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use crate::cuda_result::builtin_name;
use crate::entry_points::{EntryPoints, SYMBOLS};
use crate::error::{CudaError, Error, Result};
use crate::sys::*;

/// A loaded CUDA driver library. Lives for the rest of the process (the library is never
/// `dlclose`d, like NCCL and libfabric do), so handles to it are `&'static`.
pub struct Driver {
    library: String,
    api: EntryPoints,
    init: OnceLock<Result<()>>,
}

impl core::fmt::Debug for Driver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Driver")
            .field("library", &self.library)
            .finish()
    }
}

/// The environment variable that names the library [`Driver::get`] loads (a file name
/// searched on the library path, or a path).
pub const LIBRARY_ENV: &str = "EFA_CUDA_LIBRARY";

static GLOBAL: OnceLock<Result<&'static Driver>> = OnceLock::new();

impl Driver {
    /// The library [`Driver::get`] loads unless [`LIBRARY_ENV`] names another: the
    /// driver's soname (never `libcuda.so`, which only a development package installs).
    pub const DEFAULT_LIBRARY: &'static str = "libcuda.so.1";

    /// The process-wide driver, loaded on first use from `$EFA_CUDA_LIBRARY` or
    /// [`DEFAULT_LIBRARY`](Self::DEFAULT_LIBRARY). The outcome, failure included, is
    /// remembered.
    pub fn get() -> Result<&'static Driver> {
        GLOBAL
            .get_or_init(|| {
                let lib = std::env::var(LIBRARY_ENV)
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| Self::DEFAULT_LIBRARY.to_owned());
                Driver::open(&lib)
            })
            .clone()
    }

    /// Loads the driver library `library` (a file name searched on the library path, or
    /// a path) as a driver of its own, independent of [`Driver::get`]'s. Loading the same
    /// file twice gives the same library (and driver state) twice.
    pub fn open(library: &str) -> Result<&'static Driver> {
        let no_driver = |reason: String| Error::NoDriver {
            library: library.to_owned(),
            reason,
        };
        let name = CString::new(library).map_err(|_| no_driver("name contains NUL".into()))?;
        // SAFETY: NUL-terminated name; dlopen runs the library's constructors, which is
        // what loading a driver means.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(no_driver(dl_error()));
        }
        // SAFETY: live handle; the names are the driver's versioned symbols, whose
        // signatures the table spells as cuda.h does.
        let api = unsafe { EntryPoints::resolve(handle) };
        if api.init.is_none() {
            return Err(no_driver("not a CUDA driver: it has no cuInit".into()));
        }
        let driver = Box::new(Driver {
            library: library.to_owned(),
            api,
            init: OnceLock::new(),
        });
        Ok(Box::leak(driver))
    }

    /// The library name or path this driver was loaded from.
    pub fn library(&self) -> &str {
        &self.library
    }

    /// Every entry point this crate may call, by versioned symbol name.
    pub fn entry_point_names() -> &'static [&'static str] {
        SYMBOLS
    }

    /// The entry points this library lacks (those features fail with
    /// [`Error::MissingEntryPoint`]).
    pub fn missing_entry_points(&self) -> Vec<&'static str> {
        self.api.missing()
    }

    pub(crate) fn api(&self) -> &EntryPoints {
        &self.api
    }

    /// `cuDriverGetVersion` (e.g. 12080 for CUDA 12.8); works before `cuInit`.
    pub fn version(&self) -> Result<i32> {
        let f = self.api.driver_get_version()?;
        let mut v = 0;
        // SAFETY: valid out pointer.
        self.check("cuDriverGetVersion", unsafe { f(&mut v) })?;
        Ok(v)
    }

    /// `cuInit(0)`, once per driver; later calls return the first outcome.
    /// `CUDA_ERROR_NO_DEVICE` becomes [`Error::NoDevice`].
    pub fn init(&self) -> Result<()> {
        self.init
            .get_or_init(|| {
                let f = self.api.init()?;
                // SAFETY: cuInit takes flags only; 0 is the only valid value.
                let rc = unsafe { f(0) };
                if rc == CUDA_ERROR_NO_DEVICE {
                    return Err(Error::NoDevice);
                }
                self.check("cuInit", rc)
            })
            .clone()
    }

    /// The name of a `CUresult`: the driver's `cuGetErrorName`, else the built-in table.
    pub fn error_name(&self, code: i32) -> Option<&'static str> {
        self.driver_string(self.api.get_error_name, code)
            .or_else(|| builtin_name(code))
    }

    /// The driver's description of a `CUresult` (`cuGetErrorString`), if it has one.
    pub fn error_string(&self, code: i32) -> Option<&'static str> {
        self.driver_string(self.api.get_error_string, code)
    }

    fn driver_string(
        &self,
        f: Option<unsafe extern "C" fn(CUresult, *mut *const core::ffi::c_char) -> CUresult>,
        code: i32,
    ) -> Option<&'static str> {
        let f = f?;
        let mut s: *const core::ffi::c_char = core::ptr::null();
        // SAFETY: valid out pointer; works before cuInit (cuda.h).
        let rc = unsafe { f(code, &mut s) };
        if rc != CUDA_SUCCESS || s.is_null() {
            return None;
        }
        // SAFETY: the driver returns a pointer to a static NUL-terminated string, and the
        // library is never unloaded, so it lives for the rest of the process.
        unsafe { CStr::from_ptr(s) }.to_str().ok()
    }

    /// `Ok` for `CUDA_SUCCESS`, else the error named.
    pub(crate) fn check(&self, call: &'static str, rc: CUresult) -> Result<()> {
        if rc == CUDA_SUCCESS {
            return Ok(());
        }
        Err(Error::Cuda(CudaError {
            call,
            code: rc,
            name: self.error_name(rc),
        }))
    }

    /// Number of CUDA devices (after `cuInit`).
    pub fn device_count(&self) -> Result<i32> {
        self.init()?;
        let f = self.api.device_get_count()?;
        let mut n = 0;
        // SAFETY: valid out pointer.
        self.check("cuDeviceGetCount", unsafe { f(&mut n) })?;
        Ok(n)
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated thread-local string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: non-null NUL-terminated string, copied before any other dl* call.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}
