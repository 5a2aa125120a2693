//! Driver state: configuration, devices with their primary contexts and flush counters,
//! the per-thread context stack, and the memory model (see `memory.rs`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::ffi::*;
use crate::memory::Memory;

/// One software device.
pub struct Device {
    pub ordinal: i32,
    /// Primary context retain count: usable while > 0.
    pub primary_refs: AtomicU32,
    pub flush_to_owner: AtomicU64,
    pub flush_to_all: AtomicU64,
    /// The primary context's identity: its address is the `CUcontext` handed out.
    pub ctx: Box<u8>,
}

/// The whole driver after a successful `cuInit`.
pub struct Gpu {
    pub devices: Vec<Device>,
    pub dmabuf_export: AtomicBool,
    /// Whether new exports allow `mmap` (else their info carries `DMABUF_NO_MMAP`).
    pub dmabuf_mmap: AtomicBool,
    /// Whether an export may span several VMM mappings (cuda.h allows it for chunks of one
    /// device with identical properties; the control `dmabuf_cross_chunk` = 0 models a
    /// driver that assembles no multi-allocation dma-buf).
    pub dmabuf_cross_chunk: AtomicBool,
    pub rdma_writes_ordering: AtomicI64,
    pub flush_options: AtomicI64,
    /// PCI (domain, bus, device) of each device (`EFA_SIM_GPU_PCI_BUS_IDS`).
    pub pci: Vec<[i32; 3]>,
    mem: Mutex<Memory>,
}

/// `EFA_SIM_GPU_PCI_BUS_IDS=DDDD:BB:DD.F,...` (set by `efa-sim run --gpus N` with an
/// instance shape): device `i`'s PCI location; devices it does not name (or a malformed
/// list) get domain 0, bus 0x10 + i, device 0.
fn pci_locations(n: i32) -> Vec<[i32; 3]> {
    let listed: Vec<[i32; 3]> = std::env::var("EFA_SIM_GPU_PCI_BUS_IDS")
        .ok()
        .map(|v| v.split(',').map_while(parse_bus_id).collect())
        .unwrap_or_default();
    (0..n)
        .map(|i| listed.get(i as usize).copied().unwrap_or([0, 0x10 + i, 0]))
        .collect()
}

/// `DDDD:BB:DD.F` (hex) as (domain, bus, device).
fn parse_bus_id(s: &str) -> Option<[i32; 3]> {
    let (domain, rest) = s.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, _function) = rest.split_once('.')?;
    let hex = |x: &str| i32::from_str_radix(x, 16).ok();
    Some([hex(domain)?, hex(bus)?, hex(device)?])
}

static GPU: OnceLock<CuResult<Gpu>> = OnceLock::new();

pub fn driver_version() -> i32 {
    env_num("EFA_SIM_GPU_DRIVER_VERSION").map_or(12080, |v| v as i32)
}

fn env_num(name: &str) -> Option<i64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// `cuInit`: builds the driver state once; the outcome is sticky.
pub fn init() -> CuResult {
    GPU.get_or_init(|| {
        let n = env_num("EFA_SIM_GPU_DEVICES").unwrap_or(2);
        if n <= 0 {
            return Err(NO_DEVICE);
        }
        let n = n.min(64) as i32;
        let capacity = (env_num("EFA_SIM_GPU_MEMORY_MIB").unwrap_or(4096).max(1) as u64) << 20;
        let mem = Memory::new(n as usize, capacity).map_err(|_| OPERATING_SYSTEM)?;
        Ok(Gpu {
            devices: (0..n)
                .map(|ordinal| Device {
                    ordinal,
                    primary_refs: AtomicU32::new(0),
                    flush_to_owner: AtomicU64::new(0),
                    flush_to_all: AtomicU64::new(0),
                    ctx: Box::new(0),
                })
                .collect(),
            dmabuf_export: AtomicBool::new(
                std::env::var("EFA_SIM_GPU_DMABUF").as_deref() != Ok("0"),
            ),
            dmabuf_mmap: AtomicBool::new(
                std::env::var("EFA_SIM_GPU_DMABUF_MMAP").as_deref() != Ok("0"),
            ),
            dmabuf_cross_chunk: AtomicBool::new(true),
            rdma_writes_ordering: AtomicI64::new(0),
            flush_options: AtomicI64::new(1),
            pci: pci_locations(n),
            mem: Mutex::new(mem),
        })
    })
    .as_ref()
    .map(|_| ())
    .map_err(|&e| e)
}

/// The initialized driver, `NOT_INITIALIZED` before a successful `cuInit`.
pub fn gpu() -> CuResult<&'static Gpu> {
    match GPU.get() {
        Some(Ok(g)) => Ok(g),
        _ => Err(NOT_INITIALIZED),
    }
}

impl Gpu {
    pub fn device(&self, ordinal: CUdevice) -> CuResult<&Device> {
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.devices.get(i))
            .ok_or(INVALID_DEVICE)
    }

    pub fn memory(&self) -> MutexGuard<'_, Memory> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device whose primary context `ctx` is.
    pub fn context_device(&self, ctx: CUcontext) -> CuResult<&Device> {
        self.devices
            .iter()
            .find(|d| core::ptr::eq(&*d.ctx, ctx as *const u8))
            .ok_or(INVALID_CONTEXT)
    }

    /// The device of the calling thread's current context; `INVALID_CONTEXT` when there is
    /// none or it has been released.
    pub fn current_device(&self) -> CuResult<&Device> {
        let top = STACK
            .with(|s| s.borrow().last().copied())
            .ok_or(INVALID_CONTEXT)?;
        let dev = self.context_device(top as CUcontext)?;
        if dev.primary_refs.load(Ordering::Acquire) == 0 {
            return Err(INVALID_CONTEXT);
        }
        Ok(dev)
    }
}

thread_local! {
    /// The calling thread's context stack (addresses of primary contexts), top last.
    pub static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}
