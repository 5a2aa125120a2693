//! **A software GPU for tests** — not a GPU and not NVIDIA's driver. This cdylib stands in
//! for `libcuda.so.1` (its soname) the way `efa-sim` stands in for the EFA NIC: a process
//! that opens the CUDA driver by name gets this library when its directory is first on
//! the library path (`efa-sim-select` arranges that for the workspace's tests). It
//! implements the subset of the CUDA driver API that `efa-cuda` and its tests use, with
//! the driver's documented semantics; it runs no kernels.
//!
//! # What it models
//! * **Versioned names.** Entry points are exported under the symbols `cuda.h` maps to
//!   (`cuMemAlloc_v2`, `cuCtxPushCurrent_v2`, `cuDevicePrimaryCtxRelease_v2`, ...). The
//!   legacy unversioned names exist too and return `CUDA_ERROR_NOT_SUPPORTED`, so a caller
//!   that binds the wrong ABI fails visibly instead of truncating pointers.
//! * **Init and errors.** Everything but `cuDriverGetVersion`, `cuGetErrorName` and
//!   `cuGetErrorString` returns `CUDA_ERROR_NOT_INITIALIZED` before `cuInit(0)`; bad
//!   arguments return `CUDA_ERROR_INVALID_VALUE`; with zero devices `cuInit` returns
//!   `CUDA_ERROR_NO_DEVICE`, sticky.
//! * **Contexts.** One primary context per device (`cuDevicePrimaryCtxRetain` /
//!   `Release_v2`, reference counted; usable while retained) and a per-thread current
//!   context stack (`cuCtxPushCurrent_v2`, `PopCurrent_v2`, `SetCurrent`, `GetCurrent`,
//!   `GetDevice`). Allocation, copies, exports and flushes need a current context
//!   (`CUDA_ERROR_INVALID_CONTEXT` otherwise).
//! * **Device memory host code cannot touch.** Device addresses lie in a `PROT_NONE`
//!   reservation of the process: dereferencing one faults, as on a discrete GPU. The bytes
//!   live in a memfd (below) and move only through `cuMemcpyHtoD_v2`/`DtoH_v2`/`DtoD_v2`
//!   and `cuMemsetD8_v2`, which check that the whole range is allocated (and, for VMM,
//!   mapped with access granted).
//! * **`cuMemAlloc_v2`** allocations are host-page aligned and followed by an unmapped
//!   guard page; **VMM** (`cuMemCreate`, `cuMemAddressReserve`, `cuMemMap`,
//!   `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`, `cuMemAddressFree`) with a 2 MiB
//!   granularity and `gpuDirectRDMACapable` recorded per chunk. `cuMemGetAddressRange_v2`
//!   reports the single VMM chunk containing a pointer (as NVIDIA's driver does, the trap
//!   cuda-gpudirect.md §2.2 describes); pointer attributes report the reservation.
//! * **dma-buf export** (`cuMemGetHandleForAddressRange`, handle type DMA_BUF_FD, flags 0):
//!   pointer and size must be multiples of the host page size (`sysconf`), the range must
//!   lie in one `cuMemAlloc` allocation (its page-rounded extent) or be fully mapped VMM
//!   chunks of one device with identical properties; otherwise `CUDA_ERROR_INVALID_VALUE`.
//!   The PCIe mapping flag gives `CUDA_ERROR_NOT_SUPPORTED` (as on x86 GPUs).
//! * **GPUDirect flush** (`cuFlushGPUDirectRDMAWrites`, target current context, scope
//!   owner or all devices), counted per device and scope.
//!
//! # dma-buf fd convention (for efa-sim)
//! All device memory of the process lives in one memfd, `/memfd:efa-sim-gpu-memory`, sealed
//! against shrinking, growing and further seals (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`:
//! no holder of an export can truncate it under efa-sim's mapping; efa-sim checks the seals),
//! **indexed by device address**: the byte at CUDA address `va` is at file offset `va`
//! (the file is sparse; only touched pages use memory). An exported handle is a new open
//! file description of that memfd (`O_RDWR | O_CLOEXEC`, its own fd), whose **file position
//! is the export's base address**, so:
//!
//! * dma-buf byte `k` of an export is file offset `base + k`, i.e. CUDA address `base + k`;
//! * `lseek(fd, 0, SEEK_CUR)` returns `base` (do not `read`/`write` the fd: that moves it);
//! * `mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, base + off)` with `off` a
//!   multiple of the host page maps dma-buf bytes `[off, off + n)`, coherent with the
//!   driver's copies (same pages);
//! * `efaSimGpuDmaBufInfo(fd, &info)` (below) gives base, size, device and flags and checks
//!   that `fd` is a live export of this library.
//!
//! An export made while mmap is refused (`EFA_SIM_GPU_DMABUF_MMAP=0`, or the control
//! `dmabuf_mmap` = 0) carries the flag `EFA_SIM_GPU_DMABUF_NO_MMAP` (1): it stands for an
//! NVIDIA dma-buf of a driver without `CU_DEVICE_ATTRIBUTE_DMA_BUF_MMAP_SUPPORTED`, so
//! efa-sim does not map it and moves its bytes with `cuMemcpyHtoD_v2`/`DtoH_v2` instead
//! (its emulated DMA for real GPUs). The fd itself stays a mappable memfd.
//!
//! Unlike a kernel dma-buf, `fstatfs` shows tmpfs (not `DMA_BUF_MAGIC`) and
//! `lseek(fd, 0, SEEK_END)` the whole file size. Freed memory that was exported is never
//! reused, so a stale mapping cannot reach a later allocation.
//!
//! # Test controls (not CUDA API)
//! Environment, read by `cuInit`: `EFA_SIM_GPU_DEVICES` (default 2),
//! `EFA_SIM_GPU_DRIVER_VERSION` (default 12080), `EFA_SIM_GPU_MEMORY_MIB` per device
//! (default 4096), `EFA_SIM_GPU_DMABUF=0` (refuse exports, attribute 124 = 0),
//! `EFA_SIM_GPU_DMABUF_MMAP=0` (exports refuse mmap, above), `EFA_SIM_GPU_PCI_BUS_IDS`
//! (`DDDD:BB:DD.F,...`: each device's PCI location, default bus 0x10 + ordinal; `efa-sim
//! run --gpus N` sets it to the GPUs of `EFA_SIM_SHAPE`).
//! Extra C entry points:
//! * `int efaSimGpuControl(const char *key, long long value)`: `"dmabuf_export"` (0/1),
//!   `"dmabuf_mmap"` (0/1, for exports made afterwards), `"dmabuf_cross_chunk"` (1, the
//!   default: an export may span VMM chunks of one device with identical properties, as
//!   cuda.h allows; 0: an export over more than one mapped chunk is refused with
//!   `CUDA_ERROR_INVALID_VALUE`, a driver that exports one physical allocation at a time),
//!   `"rdma_writes_ordering"`
//!   (attribute 118: 0, 100, 200), `"flush_options"` (attribute 117 bitmask); 0 on
//!   success, `CUDA_ERROR_INVALID_VALUE` otherwise.
//! * `int efaSimGpuFlushCount(int device, unsigned long long *to_owner, unsigned long long
//!   *to_all)`: flushes so far.
//! * `int efaSimGpuDmaBufInfo(int fd, EfaSimGpuDmaBuf *out)`, `out` = `{ u64 base;
//!   u64 size; i32 device; i32 flags; }`: the export `fd` was returned for.
//!
//! An old driver (entry points absent) is a copy of this library with names removed from
//! its dynamic symbol table (see efa-cuda's tests).
#![allow(non_snake_case)]

mod abi_context;
mod abi_device;
mod abi_gpudirect;
mod abi_memory;
mod abi_vmm;
mod ffi;
mod memory;
mod state;
