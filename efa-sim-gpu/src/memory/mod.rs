//! The memory model: a `PROT_NONE` address arena (device addresses host code cannot
//! dereference) and one memfd holding the bytes, indexed by device address (file offset
//! `va` = CUDA address `va`; see the crate docs' fd convention). Regions are `cuMemAlloc`
//! allocations or VMM reservations with chunks mapped into them.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};

mod export;
mod file;
mod vmm;

use file::{copy_fd, pio, punch, sealed_memfd};

use crate::ffi::*;

/// VMM allocation granularity (NVIDIA GPUs report 2 MiB).
pub const GRANULARITY: u64 = 2 << 20;
/// Size of the device address arena.
const ARENA_LEN: u64 = 256 << 30;

struct Mapping {
    size: u64,
    handle: u64,
    device: i32,
    rdma: bool,
    access: bool,
}

enum Kind {
    /// `cuMemAlloc_v2`: `extent` = size rounded up to the host page (exportable).
    Alloc { device: i32, extent: u64 },
    /// `cuMemAddressReserve`: chunks mapped at their addresses.
    Reserve { maps: BTreeMap<u64, Mapping> },
}

struct Region {
    size: u64,
    kind: Kind,
    buffer_id: u64,
    exported: bool,
}

struct Phys {
    device: i32,
    size: u64,
    rdma: bool,
    /// The bytes while unmapped (`None`: never written, all zero).
    store: Option<OwnedFd>,
    mapped_at: Option<u64>,
    released: bool,
}

pub struct Memory {
    file: OwnedFd,
    ino: u64,
    page: u64,
    end: u64,
    next: u64,
    regions: BTreeMap<u64, Region>,
    handles: HashMap<u64, Phys>,
    next_handle: u64,
    next_buffer_id: u64,
    exports: HashMap<i32, DmaBufInfo>,
    used: Vec<u64>,
    capacity: u64,
}

/// What a pointer is, for pointer attributes.
pub struct PointerInfo {
    pub device: i32,
    pub range_start: u64,
    pub range_size: u64,
    pub mapped: bool,
    pub rdma_capable: bool,
    pub buffer_id: u64,
    pub is_alloc: bool,
}

fn round_up(v: u64, a: u64) -> Option<u64> {
    v.checked_add(a - 1).map(|x| x & !(a - 1))
}

impl Memory {
    pub fn new(devices: usize, capacity: u64) -> std::io::Result<Memory> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        let len = (ARENA_LEN + GRANULARITY) as usize;
        // SAFETY: a fresh PROT_NONE reservation; nothing is mapped over existing memory.
        let arena = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if arena == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let start = round_up(arena as u64, GRANULARITY).unwrap_or(arena as u64);
        let end = start + ARENA_LEN;
        let file = sealed_memfd(end)?;
        // SAFETY: plain syscall on our fd; `st` is a valid out struct.
        let ino = unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            libc::fstat(file.as_raw_fd(), &mut st);
            st.st_ino
        };
        Ok(Memory {
            file,
            ino,
            page,
            end,
            next: start,
            regions: BTreeMap::new(),
            handles: HashMap::new(),
            next_handle: 1,
            next_buffer_id: 1,
            exports: HashMap::new(),
            used: vec![0; devices],
            capacity,
        })
    }

    fn charge(&mut self, device: i32, bytes: u64) -> CuResult {
        let used = &mut self.used[device as usize];
        if *used + bytes > self.capacity {
            return Err(OUT_OF_MEMORY);
        }
        *used += bytes;
        Ok(())
    }

    fn uncharge(&mut self, device: i32, bytes: u64) {
        let used = &mut self.used[device as usize];
        *used = used.saturating_sub(bytes);
    }

    /// Fresh addresses, never reused (so no stale mapping reaches a later allocation),
    /// followed by an unmapped guard page.
    fn take_va(&mut self, len: u64, align: u64) -> CuResult<u64> {
        let base = round_up(self.next, align).ok_or(OUT_OF_MEMORY)?;
        let next = base
            .checked_add(len)
            .and_then(|e| e.checked_add(self.page))
            .filter(|&e| e <= self.end)
            .ok_or(OUT_OF_MEMORY)?;
        self.next = next;
        Ok(base)
    }

    fn add_region(&mut self, base: u64, size: u64, kind: Kind) {
        let buffer_id = self.next_buffer_id;
        self.next_buffer_id += 1;
        self.regions.insert(
            base,
            Region {
                size,
                kind,
                buffer_id,
                exported: false,
            },
        );
    }

    fn region_at(&self, va: u64) -> Option<(u64, &Region)> {
        let (&base, r) = self.regions.range(..=va).next_back()?;
        (va < base + r.size).then_some((base, r))
    }

    pub fn alloc(&mut self, device: i32, size: u64) -> CuResult<u64> {
        if size == 0 {
            return Err(INVALID_VALUE);
        }
        let extent = round_up(size, self.page).ok_or(OUT_OF_MEMORY)?;
        self.charge(device, extent)?;
        let base = match self.take_va(extent, self.page) {
            Ok(b) => b,
            Err(e) => {
                self.uncharge(device, extent);
                return Err(e);
            }
        };
        self.add_region(base, size, Kind::Alloc { device, extent });
        Ok(base)
    }

    pub fn free(&mut self, va: u64) -> CuResult {
        match self.regions.get(&va) {
            Some(Region {
                kind: Kind::Alloc { .. },
                ..
            }) => {}
            _ => return Err(INVALID_VALUE),
        }
        let Some(r) = self.regions.remove(&va) else {
            return Err(INVALID_VALUE);
        };
        if let Kind::Alloc { device, extent } = r.kind {
            self.uncharge(device, extent);
            // Exported memory keeps its bytes (a dma-buf pins its pages).
            if !r.exported {
                punch(&self.file, va, extent);
            }
        }
        Ok(())
    }

    /// Checks that `[va, va + len)` is accessible device memory; returns its device.
    /// `extent`: allow the page-rounded extent of a `cuMemAlloc` (exports).
    fn check_range(&self, va: u64, len: u64, extent: bool) -> CuResult<(u64, i32)> {
        let (base, r) = self.region_at(va).ok_or(INVALID_VALUE)?;
        let end = va.checked_add(len).ok_or(INVALID_VALUE)?;
        match &r.kind {
            Kind::Alloc {
                device,
                extent: ext,
            } => {
                let limit = base + if extent { *ext } else { r.size };
                if end > limit {
                    return Err(INVALID_VALUE);
                }
                Ok((base, *device))
            }
            Kind::Reserve { maps } => {
                if end > base + r.size {
                    return Err(INVALID_VALUE);
                }
                let mut cursor = va;
                let mut first: Option<(i32, bool)> = None;
                while cursor < end {
                    let (&at, m) = maps.range(..=cursor).next_back().ok_or(INVALID_VALUE)?;
                    if cursor >= at + m.size {
                        return Err(INVALID_VALUE);
                    }
                    if !extent && !m.access {
                        return Err(ILLEGAL_ADDRESS);
                    }
                    match first {
                        None => first = Some((m.device, m.rdma)),
                        // One device with identical properties (export rule 3).
                        Some(f) if f != (m.device, m.rdma) && extent => return Err(INVALID_VALUE),
                        Some(_) => {}
                    }
                    cursor = at + m.size;
                }
                Ok((base, first.map_or(0, |f| f.0)))
            }
        }
    }

    pub fn write(&self, va: u64, src: &[u8]) -> CuResult {
        if src.is_empty() {
            return Ok(());
        }
        self.check_range(va, src.len() as u64, false)?;
        pio(&self.file, va, src.as_ptr() as *mut u8, src.len(), true)
    }

    pub fn read(&self, va: u64, dst: &mut [u8]) -> CuResult {
        if dst.is_empty() {
            return Ok(());
        }
        self.check_range(va, dst.len() as u64, false)?;
        pio(&self.file, va, dst.as_mut_ptr(), dst.len(), false)
    }

    pub fn copy(&self, dst: u64, src: u64, len: u64) -> CuResult {
        self.check_range(src, len, false)?;
        self.check_range(dst, len, false)?;
        copy_fd(&self.file, src, &self.file, dst, len)
    }

    /// `cuMemGetAddressRange_v2`: the allocation, or for VMM the one chunk at `va`.
    pub fn address_range(&self, va: u64) -> CuResult<(u64, u64)> {
        let (base, r) = self.region_at(va).ok_or(NOT_FOUND)?;
        match &r.kind {
            Kind::Alloc { .. } => Ok((base, r.size)),
            Kind::Reserve { maps } => {
                let (&at, m) = maps.range(..=va).next_back().ok_or(NOT_FOUND)?;
                if va < at + m.size {
                    Ok((at, m.size))
                } else {
                    Err(NOT_FOUND)
                }
            }
        }
    }

    pub fn pointer(&self, va: u64) -> Option<PointerInfo> {
        let (base, r) = self.region_at(va)?;
        Some(match &r.kind {
            Kind::Alloc { device, .. } => PointerInfo {
                device: *device,
                range_start: base,
                range_size: r.size,
                mapped: true,
                rdma_capable: true,
                buffer_id: r.buffer_id,
                is_alloc: true,
            },
            Kind::Reserve { maps } => {
                let m = maps
                    .range(..=va)
                    .next_back()
                    .filter(|(&at, m)| va < at + m.size)
                    .map(|(_, m)| m);
                PointerInfo {
                    device: m.map_or(-1, |m| m.device),
                    range_start: base,
                    range_size: r.size,
                    mapped: m.is_some(),
                    rdma_capable: m.is_some_and(|m| m.rdma),
                    buffer_id: r.buffer_id,
                    is_alloc: false,
                }
            }
        })
    }
}
