//! The driver's function table: every entry point this crate calls, resolved with `dlsym`
//! by its **versioned** symbol name (`cuMemAlloc_v2`, not `cuMemAlloc`: the unversioned
//! names are the legacy 32-bit ABIs that `cuda.h` renames away, see cuda-gpudirect.md §1.2).
//!
//! Each entry is optional: a driver that lacks one (too old) still loads, and a call that
//! needs it fails with [`Error::MissingEntryPoint`] naming the symbol.

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::error::Error;
use crate::sys::*;

macro_rules! entry_points {
    ($( $(#[$doc:meta])* $field:ident = $sym:literal : fn($($arg:ty),* $(,)?); )*) => {
        /// Resolved entry points (`None`: the library does not export that symbol).
        #[allow(non_snake_case)]
        pub(crate) struct EntryPoints {
            $( $(#[$doc])* pub(crate) $field: Option<unsafe extern "C" fn($($arg),*) -> CUresult>, )*
        }

        /// Every symbol name the table resolves, in table order.
        pub const SYMBOLS: &[&str] = &[$($sym),*];

        impl EntryPoints {
            /// The symbols this table could not resolve.
            pub(crate) fn missing(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $( if self.$field.is_none() { out.push($sym); } )*
                out
            }

            /// Looks every entry point up in `handle`.
            ///
            /// # Safety
            /// `handle` must be a live `dlopen` handle of a CUDA driver library (or of a
            /// library that does not export these names): a symbol found under one of
            /// these names is taken to have the C signature `cuda.h` gives it.
            pub(crate) unsafe fn resolve(handle: *mut c_void) -> EntryPoints {
                EntryPoints {
                    $( $field: {
                        // SAFETY: NUL-terminated literal; `handle` is live (caller).
                        let p = unsafe {
                            libc::dlsym(handle, concat!($sym, "\0").as_ptr().cast())
                        };
                        if p.is_null() {
                            None
                        } else {
                            // SAFETY: the driver exports this name with this signature
                            // (caller's contract); fn pointers and data pointers have the
                            // same size on the supported targets.
                            Some(unsafe {
                                core::mem::transmute::<
                                    *mut c_void,
                                    unsafe extern "C" fn($($arg),*) -> CUresult,
                                >(p)
                            })
                        }
                    }, )*
                }
            }

            $(
                #[allow(non_snake_case, dead_code)]
                pub(crate) fn $field(
                    &self,
                ) -> Result<unsafe extern "C" fn($($arg),*) -> CUresult, Error> {
                    self.$field.ok_or(Error::MissingEntryPoint { name: $sym })
                }
            )*
        }
    };
}

entry_points! {
    init = "cuInit": fn(c_uint);
    driver_get_version = "cuDriverGetVersion": fn(*mut c_int);
    get_error_name = "cuGetErrorName": fn(CUresult, *mut *const c_char);
    get_error_string = "cuGetErrorString": fn(CUresult, *mut *const c_char);
    device_get = "cuDeviceGet": fn(*mut CUdevice, c_int);
    device_get_count = "cuDeviceGetCount": fn(*mut c_int);
    device_get_name = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice);
    device_get_attribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CUdevice);
    ctx_get_current = "cuCtxGetCurrent": fn(*mut CUcontext);
    ctx_set_current = "cuCtxSetCurrent": fn(CUcontext);
    ctx_get_device = "cuCtxGetDevice": fn(*mut CUdevice);
    ctx_push_current = "cuCtxPushCurrent_v2": fn(CUcontext);
    ctx_pop_current = "cuCtxPopCurrent_v2": fn(*mut CUcontext);
    ctx_synchronize = "cuCtxSynchronize": fn();
    primary_ctx_retain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    primary_ctx_release = "cuDevicePrimaryCtxRelease_v2": fn(CUdevice);
    pointer_get_attribute = "cuPointerGetAttribute": fn(*mut c_void, c_int, CUdeviceptr);
    mem_get_address_range = "cuMemGetAddressRange_v2":
        fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    mem_get_handle_for_address_range = "cuMemGetHandleForAddressRange":
        fn(*mut c_void, CUdeviceptr, usize, c_int, u64);
    flush_gpu_direct_rdma_writes = "cuFlushGPUDirectRDMAWrites": fn(c_int, c_int);
    mem_alloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize);
    mem_free = "cuMemFree_v2": fn(CUdeviceptr);
    memcpy_htod = "cuMemcpyHtoD_v2": fn(CUdeviceptr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2": fn(*mut c_void, CUdeviceptr, usize);
    memcpy_dtod = "cuMemcpyDtoD_v2": fn(CUdeviceptr, CUdeviceptr, usize);
    memset_d8 = "cuMemsetD8_v2": fn(CUdeviceptr, u8, usize);
    mem_get_allocation_granularity = "cuMemGetAllocationGranularity":
        fn(*mut usize, *const CUmemAllocationProp, c_int);
    mem_create = "cuMemCreate":
        fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64);
    mem_release = "cuMemRelease": fn(CUmemGenericAllocationHandle);
    mem_address_reserve = "cuMemAddressReserve":
        fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    mem_address_free = "cuMemAddressFree": fn(CUdeviceptr, usize);
    mem_map = "cuMemMap": fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64);
    mem_unmap = "cuMemUnmap": fn(CUdeviceptr, usize);
    mem_set_access = "cuMemSetAccess": fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize);
}
