//! The CUDA ABI as this library exports it: result codes, the argument structs, and the
//! `cu_fn!` macro that turns a `Result` body into an exported `CUresult` function.

use core::ffi::{c_int, c_void};

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;

pub const SUCCESS: CUresult = 0;
pub const INVALID_VALUE: CUresult = 1;
pub const OUT_OF_MEMORY: CUresult = 2;
pub const NOT_INITIALIZED: CUresult = 3;
pub const NO_DEVICE: CUresult = 100;
pub const INVALID_DEVICE: CUresult = 101;
pub const INVALID_CONTEXT: CUresult = 201;
pub const OPERATING_SYSTEM: CUresult = 304;
pub const INVALID_HANDLE: CUresult = 400;
pub const NOT_FOUND: CUresult = 500;
pub const ILLEGAL_ADDRESS: CUresult = 700;
pub const NOT_SUPPORTED: CUresult = 801;

/// Names and descriptions of the codes this library returns (and a few neighbours).
pub const NAMES: &[(CUresult, &str, &str)] = &[
    (0, "CUDA_SUCCESS\0", "no error\0"),
    (1, "CUDA_ERROR_INVALID_VALUE\0", "invalid argument\0"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY\0", "out of memory\0"),
    (3, "CUDA_ERROR_NOT_INITIALIZED\0", "initialization error\0"),
    (4, "CUDA_ERROR_DEINITIALIZED\0", "driver shutting down\0"),
    (
        100,
        "CUDA_ERROR_NO_DEVICE\0",
        "no CUDA-capable device is detected\0",
    ),
    (
        101,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device ordinal\0",
    ),
    (
        201,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid device context\0",
    ),
    (
        304,
        "CUDA_ERROR_OPERATING_SYSTEM\0",
        "OS call failed or operation not supported on this OS\0",
    ),
    (
        400,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid resource handle\0",
    ),
    (500, "CUDA_ERROR_NOT_FOUND\0", "named symbol not found\0"),
    (
        700,
        "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "an illegal memory access was encountered\0",
    ),
    (
        801,
        "CUDA_ERROR_NOT_SUPPORTED\0",
        "operation not supported\0",
    ),
    (999, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocationProp {
    pub type_: c_int,
    pub requested_handle_types: c_int,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AccessDesc {
    pub location: MemLocation,
    pub flags: c_int,
}

/// `EfaSimGpuDmaBuf` (this library's own, see the crate docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DmaBufInfo {
    pub base: u64,
    pub size: u64,
    pub device: i32,
    /// [`DMABUF_NO_MMAP`] when the export refuses CPU mappings.
    pub flags: i32,
}

/// `EfaSimGpuDmaBuf.flags` bit: the export refuses `mmap` (a driver without
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_MMAP_SUPPORTED`); importers must move its bytes with the
/// driver's copies.
pub const DMABUF_NO_MMAP: i32 = 1;

const _: () = {
    assert!(core::mem::size_of::<AllocationProp>() == 32);
    assert!(core::mem::offset_of!(AllocationProp, gpu_direct_rdma_capable) == 25);
    assert!(core::mem::size_of::<AccessDesc>() == 12);
    assert!(core::mem::size_of::<DmaBufInfo>() == 24);
};

pub type CuResult<T = ()> = Result<T, CUresult>;

/// Writes `v` through an out pointer, `INVALID_VALUE` when it is null.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> CuResult {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null and valid for writes (caller).
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads through an in pointer, `INVALID_VALUE` when it is null.
///
/// # Safety
/// `p` is null or valid for a read of `T`.
pub unsafe fn get<T: Copy>(p: *const T) -> CuResult<T> {
    if p.is_null() {
        return Err(INVALID_VALUE);
    }
    // SAFETY: non-null and valid for reads (caller).
    Ok(unsafe { p.read_unaligned() })
}

/// Defines an exported driver entry point whose body returns `CuResult`.
macro_rules! cu_fn {
    ($(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Pointer arguments must be valid as `cuda.h` documents for this entry point.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $crate::ffi::CUresult {
            #[allow(unused_unsafe, clippy::redundant_closure_call)]
            let r: $crate::ffi::CuResult = (|| $body)();
            match r {
                Ok(()) => $crate::ffi::SUCCESS,
                Err(e) => e,
            }
        }
    };
}
pub(crate) use cu_fn;
