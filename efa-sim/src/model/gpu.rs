//! CUDA device memory as a memory backend of MRs: **emulated DMA**. A NIC reaches GPU
//! memory over PCIe; efa-sim has no PCIe, so where it cannot map the memory (an NVIDIA
//! dma-buf of a driver without `DMA_BUF_MMAP_SUPPORTED`, a registration by CUDA address
//! through the nvidia_peermem path) it moves the bytes with the CUDA driver's synchronous
//! copies (`cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2`, the owning device's primary context
//! pushed around each copy) at the CUDA address the MR records.
//!
//! The driver is never loaded here: only a `libcuda.so.1` the process already loaded is
//! used (`dlopen(RTLD_NOLOAD)`), NVIDIA's or the software GPU (`efa-sim-gpu`), and kept
//! loaded for the rest of the process. What this does not emulate: PCIe ordering and BAR
//! mappings; and the copies run on the legacy default stream, so they wait for work
//! already queued on the device (a kernel that spins until the NIC writes would wait
//! forever here, not on hardware).

use super::Errno;
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

/// `CUresult`.
type CuResult = c_int;
/// `CUcontext` (kept as an address so handles are `Send`).
type CuContext = *mut c_void;

// cuda.h numbers (CUDA 11.x-13.x; no Rust bindings are linked here).
const CUDA_SUCCESS: CuResult = 0;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: c_int = 15;
const CU_MEMORYTYPE_DEVICE: u64 = 2;

/// The software GPU's `EfaSimGpuDmaBuf` (efa-sim-gpu's fd convention).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SimExport {
    /// CUDA address of dma-buf byte 0 (also its file offset in the memory file).
    pub base: u64,
    /// Bytes exported.
    pub size: u64,
    /// Device ordinal.
    pub device: i32,
    /// [`SIM_EXPORT_NO_MMAP`] when the export refuses CPU mappings.
    pub flags: i32,
}

/// `EfaSimGpuDmaBuf.flags`: the software GPU stands in for a driver that refuses `mmap`.
pub(crate) const SIM_EXPORT_NO_MMAP: i32 = 1;

type PointerAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, u64) -> CuResult;
type CopyToDeviceFn = unsafe extern "C" fn(u64, *const c_void, usize) -> CuResult;
type CopyToHostFn = unsafe extern "C" fn(*mut c_void, u64, usize) -> CuResult;
type PushFn = unsafe extern "C" fn(CuContext) -> CuResult;
type PopFn = unsafe extern "C" fn(*mut CuContext) -> CuResult;
type RetainFn = unsafe extern "C" fn(*mut CuContext, c_int) -> CuResult;
type ReleaseFn = unsafe extern "C" fn(c_int) -> CuResult;
type SimExportFn = unsafe extern "C" fn(c_int, *mut SimExport) -> CuResult;

/// The entry points of the process's CUDA driver that the backend calls.
pub(crate) struct Cuda {
    pointer_attribute: PointerAttributeFn,
    copy_to_device: CopyToDeviceFn,
    copy_to_host: CopyToHostFn,
    push: PushFn,
    pop: PopFn,
    retain: RetainFn,
    release: ReleaseFn,
    /// Only the software GPU has it.
    sim_export: Option<SimExportFn>,
}

static CUDA: OnceLock<Cuda> = OnceLock::new();

/// The CUDA driver this process has loaded, if any (looked up again on every call until
/// one is found: a program may load CUDA after opening the device).
pub(crate) fn cuda() -> Option<&'static Cuda> {
    if let Some(c) = CUDA.get() {
        return Some(c);
    }
    let found = Cuda::loaded()?;
    Some(CUDA.get_or_init(|| found))
}

/// What a host-address range is to the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Not device memory (host, pinned host or managed memory, or unknown to CUDA).
    Host,
    /// Device memory of this device ordinal at both ends.
    Device(i32),
    /// One end is device memory and the other is not, or they are on different devices.
    Mixed,
}

impl Cuda {
    fn loaded() -> Option<Cuda> {
        // SAFETY: RTLD_NOLOAD only returns the handle of a library already loaded (it runs
        // no constructors); the handle is never closed, so the library stays loaded.
        let h =
            unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if h.is_null() {
            return None;
        }
        type Sym = *mut c_void;
        let sym = |name: &std::ffi::CStr| -> Option<Sym> {
            // SAFETY: live handle, NUL-terminated name.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        // SAFETY: every transmute turns the driver's exported function of that name into
        // the C signature cuda.h gives it (spelled in the fields above).
        unsafe {
            use std::mem::transmute as cast;
            Some(Cuda {
                pointer_attribute: cast::<Sym, PointerAttributeFn>(sym(c"cuPointerGetAttribute")?),
                copy_to_device: cast::<Sym, CopyToDeviceFn>(sym(c"cuMemcpyHtoD_v2")?),
                copy_to_host: cast::<Sym, CopyToHostFn>(sym(c"cuMemcpyDtoH_v2")?),
                push: cast::<Sym, PushFn>(sym(c"cuCtxPushCurrent_v2")?),
                pop: cast::<Sym, PopFn>(sym(c"cuCtxPopCurrent_v2")?),
                retain: cast::<Sym, RetainFn>(sym(c"cuDevicePrimaryCtxRetain")?),
                release: cast::<Sym, ReleaseFn>(sym(c"cuDevicePrimaryCtxRelease_v2")?),
                sim_export: sym(c"efaSimGpuDmaBufInfo").map(|p| cast::<Sym, SimExportFn>(p)),
            })
        }
    }

    /// A scalar pointer attribute (read into a zeroed 64-bit value: every attribute used
    /// here is at most that wide, little-endian).
    fn attribute(&self, attribute: c_int, va: u64) -> Option<u64> {
        let mut v = 0u64;
        // SAFETY: `v` is valid for any of these attributes' types (≤ 8 bytes).
        let rc = unsafe { (self.pointer_attribute)((&mut v as *mut u64).cast(), attribute, va) };
        (rc == CUDA_SUCCESS).then_some(v)
    }

    fn device_at(&self, va: u64) -> Option<i32> {
        if self.attribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va)? & 0xffff_ffff
            != CU_MEMORYTYPE_DEVICE
        {
            return None;
        }
        // Managed memory is host-accessible: the device reaches it like host memory.
        if self
            .attribute(CU_POINTER_ATTRIBUTE_IS_MANAGED, va)
            .unwrap_or(0)
            & 0xff
            != 0
        {
            return None;
        }
        Some(self.attribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va)? as u32 as i32)
    }

    /// What `[va, va + len)` (`len > 0`) is, judged by its first and last byte.
    pub fn classify(&self, va: u64, len: u64) -> Class {
        let Some(last) = len.checked_sub(1).and_then(|l| va.checked_add(l)) else {
            return Class::Host;
        };
        match (self.device_at(va), self.device_at(last)) {
            (None, None) => Class::Host,
            (Some(a), Some(b)) if a == b => Class::Device(a),
            _ => Class::Mixed,
        }
    }

    /// Whether nvidia_peermem could pin `va`: `IS_GPU_DIRECT_RDMA_CAPABLE` (VMM chunks
    /// created without `gpuDirectRDMACapable` are not); a driver that cannot answer is
    /// taken at its word for `cuMemAlloc` memory.
    pub fn rdma_capable(&self, va: u64) -> bool {
        self.attribute(CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, va)
            .map_or(true, |v| v & 0xffff_ffff != 0)
    }

    /// The software GPU's export behind `fd`, if `fd` is one (never for NVIDIA's driver).
    pub fn sim_export(&self, fd: i32) -> Option<SimExport> {
        let f = self.sim_export?;
        let mut info = SimExport::default();
        // SAFETY: `info` is the documented out struct; `fd` is only looked up.
        (unsafe { f(fd, &mut info) } == CUDA_SUCCESS).then_some(info)
    }
}

/// Device memory an MR records: the CUDA address of its first byte and the owning
/// device's primary context, retained while the MR lives.
pub(crate) struct DeviceMem {
    cuda: &'static Cuda,
    device: i32,
    ctx: usize,
    va: u64,
}

impl DeviceMem {
    /// Device memory at `va` on `device`; EFAULT when the driver cannot give that device's
    /// primary context (as pinning fails in the kernel).
    pub fn new(cuda: &'static Cuda, device: i32, va: u64) -> Result<DeviceMem, Errno> {
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: valid out pointer; a retain is released in Drop.
        if unsafe { (cuda.retain)(&mut ctx, device) } != CUDA_SUCCESS || ctx.is_null() {
            return Err(libc::EFAULT);
        }
        Ok(DeviceMem {
            cuda,
            device,
            ctx: ctx as usize,
            va,
        })
    }

    /// The device address `off` bytes in.
    pub fn at(&self, off: u64) -> DevicePtr {
        DevicePtr {
            cuda: self.cuda,
            ctx: self.ctx,
            va: self.va.wrapping_add(off),
        }
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `new` (a driver already torn down at exit
        // just answers an error).
        unsafe { (self.cuda.release)(self.device) };
    }
}

/// A device address inside a live MR's device memory (valid while the MR table lock that
/// found it is held).
#[derive(Clone, Copy)]
pub(crate) struct DevicePtr {
    cuda: &'static Cuda,
    ctx: usize,
    va: u64,
}

impl DevicePtr {
    /// `n` bytes further.
    pub fn add(self, n: usize) -> DevicePtr {
        DevicePtr {
            va: self.va.wrapping_add(n as u64),
            ..self
        }
    }

    /// Copies device bytes into `dst` (`cuMemcpyDtoH_v2`); the CUresult on failure.
    pub fn read(self, dst: &mut [u8]) -> Result<(), CuResult> {
        self.in_context(|c| {
            // SAFETY: `dst` is writable for its length; the driver checks the device range.
            unsafe { (c.copy_to_host)(dst.as_mut_ptr().cast(), self.va, dst.len()) }
        })
    }

    /// Copies `src` into device memory (`cuMemcpyHtoD_v2`); the CUresult on failure.
    pub fn write(self, src: &[u8]) -> Result<(), CuResult> {
        self.in_context(|c| {
            // SAFETY: `src` is readable for its length; the driver checks the device range.
            unsafe { (c.copy_to_device)(self.va, src.as_ptr().cast(), src.len()) }
        })
    }

    /// Runs `copy` with the memory's primary context pushed on this thread (and popped
    /// again, leaving the caller's context stack as it was).
    fn in_context(self, copy: impl FnOnce(&Cuda) -> CuResult) -> Result<(), CuResult> {
        let c = self.cuda;
        // SAFETY: the context is retained by the MR's DeviceMem (alive while the MR table
        // lock that produced this pointer is held).
        let rc = unsafe { (c.push)(self.ctx as CuContext) };
        if rc != CUDA_SUCCESS {
            return Err(rc);
        }
        let rc = copy(c);
        let mut popped: CuContext = std::ptr::null_mut();
        // SAFETY: pops exactly the context pushed above; valid out pointer.
        unsafe { (c.pop)(&mut popped) };
        if rc == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(rc)
        }
    }
}
