//! The memory model: a `PROT_NONE` address arena (device addresses host code cannot
//! dereference) and one memfd holding the bytes, indexed by device address (file offset
//! `va` = CUDA address `va`; see the crate docs' fd convention). Regions are `cuMemAlloc`
//! allocations or VMM reservations with chunks mapped into them.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

fn memfd() -> std::io::Result<OwnedFd> {
    // SAFETY: NUL-terminated name; the returned fd is new and ours.
    let fd = unsafe { libc::memfd_create(c"efa-sim-gpu-memory".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn pio(fd: &OwnedFd, off: u64, buf: *mut u8, len: usize, write: bool) -> CuResult {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `buf` is valid for `len` bytes (callers pass slices); offsets fit off_t
        // (device addresses are below 2^47).
        let n = unsafe {
            let p = buf.add(done).cast();
            let o = (off + done as u64) as libc::off_t;
            if write {
                libc::pwrite(fd.as_raw_fd(), p, len - done, o)
            } else {
                libc::pread(fd.as_raw_fd(), p, len - done, o)
            }
        };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(OPERATING_SYSTEM);
        }
        if n == 0 {
            // Reading past the end of a store: the rest is zero.
            // SAFETY: within the caller's buffer.
            unsafe { core::ptr::write_bytes(buf.add(done), 0, len - done) };
            return Ok(());
        }
        done += n as usize;
    }
    Ok(())
}

fn copy_fd(src: &OwnedFd, src_off: u64, dst: &OwnedFd, dst_off: u64, len: u64) -> CuResult {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        pio(src, src_off + done, buf.as_mut_ptr(), n, false)?;
        pio(dst, dst_off + done, buf.as_mut_ptr(), n, true)?;
        done += n as u64;
    }
    Ok(())
}

fn punch(fd: &OwnedFd, off: u64, len: u64) {
    // SAFETY: plain syscall on our fd; failure only leaves stale bytes nobody can reach.
    unsafe {
        libc::fallocate(
            fd.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        )
    };
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
        let file = memfd()?;
        let end = start + ARENA_LEN;
        // SAFETY: plain syscalls on our fd; `st` is a valid out struct.
        let ino = unsafe {
            if libc::ftruncate(file.as_raw_fd(), end as libc::off_t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
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

    pub fn reserve(&mut self, size: u64, align: u64) -> CuResult<u64> {
        if size == 0 || size % GRANULARITY != 0 || (align != 0 && !align.is_power_of_two()) {
            return Err(INVALID_VALUE);
        }
        let base = self.take_va(size, align.max(GRANULARITY))?;
        self.add_region(
            base,
            size,
            Kind::Reserve {
                maps: BTreeMap::new(),
            },
        );
        Ok(base)
    }

    pub fn address_free(&mut self, va: u64, size: u64) -> CuResult {
        match self.regions.get(&va) {
            Some(Region {
                size: s,
                kind: Kind::Reserve { maps },
                ..
            }) if *s == size && maps.is_empty() => {
                self.regions.remove(&va);
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        }
    }

    pub fn create(&mut self, device: i32, size: u64, rdma: bool) -> CuResult<u64> {
        if size == 0 || size % GRANULARITY != 0 {
            return Err(INVALID_VALUE);
        }
        self.charge(device, size)?;
        let h = self.next_handle;
        self.next_handle += 1;
        self.handles.insert(
            h,
            Phys {
                device,
                size,
                rdma,
                store: None,
                mapped_at: None,
                released: false,
            },
        );
        Ok(h)
    }

    pub fn release(&mut self, h: u64) -> CuResult {
        let p = self
            .handles
            .get_mut(&h)
            .filter(|p| !p.released)
            .ok_or(INVALID_VALUE)?;
        if p.mapped_at.is_some() {
            // Freed when its last mapping goes (cuMemRelease semantics).
            p.released = true;
            return Ok(());
        }
        let (device, size) = (p.device, p.size);
        self.handles.remove(&h);
        self.uncharge(device, size);
        Ok(())
    }

    pub fn map(&mut self, va: u64, size: u64, offset: u64, h: u64) -> CuResult {
        let p = self
            .handles
            .get(&h)
            .filter(|p| !p.released)
            .ok_or(INVALID_HANDLE)?;
        if offset != 0 || size != p.size || va % GRANULARITY != 0 {
            return Err(INVALID_VALUE);
        }
        if p.mapped_at.is_some() {
            // NVIDIA maps one handle at several addresses; this model keeps one copy of
            // the bytes at one address, so it refuses aliases.
            return Err(NOT_SUPPORTED);
        }
        let (device, rdma) = (p.device, p.rdma);
        let (&base, r) = self.regions.range(..=va).next_back().ok_or(INVALID_VALUE)?;
        let Kind::Reserve { maps } = &r.kind else {
            return Err(INVALID_VALUE);
        };
        let end = va.checked_add(size).ok_or(INVALID_VALUE)?;
        if end > base + r.size || maps.range(..end).any(|(&a, m)| a + m.size > va) {
            return Err(INVALID_VALUE);
        }
        if let Some(store) = &p.store {
            copy_fd(store, 0, &self.file, va, size)?;
        }
        let p = self.handles.get_mut(&h).ok_or(INVALID_HANDLE)?;
        p.store = None;
        p.mapped_at = Some(va);
        if let Some(Region {
            kind: Kind::Reserve { maps },
            ..
        }) = self.regions.get_mut(&base)
        {
            maps.insert(
                va,
                Mapping {
                    size,
                    handle: h,
                    device,
                    rdma,
                    access: false,
                },
            );
        }
        Ok(())
    }

    /// The mappings `[va, va + size)` consists of exactly, in order.
    fn mappings_exactly(&self, va: u64, size: u64) -> CuResult<(u64, Vec<u64>)> {
        let (base, r) = self.region_at(va).ok_or(INVALID_VALUE)?;
        let Kind::Reserve { maps } = &r.kind else {
            return Err(INVALID_VALUE);
        };
        let end = va.checked_add(size).ok_or(INVALID_VALUE)?;
        let mut cursor = va;
        let mut out = Vec::new();
        while cursor < end {
            let m = maps.get(&cursor).ok_or(INVALID_VALUE)?;
            out.push(cursor);
            cursor += m.size;
        }
        if cursor != end || size == 0 {
            return Err(INVALID_VALUE);
        }
        Ok((base, out))
    }

    pub fn unmap(&mut self, va: u64, size: u64) -> CuResult {
        let (base, addrs) = self.mappings_exactly(va, size)?;
        for at in addrs {
            let Some(Region {
                kind: Kind::Reserve { maps },
                ..
            }) = self.regions.get_mut(&base)
            else {
                return Err(INVALID_VALUE);
            };
            let Some(m) = maps.remove(&at) else {
                return Err(INVALID_VALUE);
            };
            let store = memfd().map_err(|_| OPERATING_SYSTEM)?;
            copy_fd(&self.file, at, &store, 0, m.size)?;
            punch(&self.file, at, m.size);
            if let Some(p) = self.handles.get_mut(&m.handle) {
                p.mapped_at = None;
                p.store = Some(store);
                if p.released {
                    let (device, size) = (p.device, p.size);
                    self.handles.remove(&m.handle);
                    self.uncharge(device, size);
                }
            }
        }
        Ok(())
    }

    pub fn set_access(&mut self, va: u64, size: u64, device_ok: bool, flags: i32) -> CuResult {
        if !device_ok || !matches!(flags, 0 | 1 | 3) {
            return Err(INVALID_VALUE);
        }
        let (base, r) = self.region_at(va).ok_or(INVALID_VALUE)?;
        let Kind::Reserve { maps } = &r.kind else {
            return Err(INVALID_VALUE);
        };
        let end = va.checked_add(size).ok_or(INVALID_VALUE)?;
        // The whole range must be mapped.
        let mut cursor = va;
        while cursor < end {
            let (&at, m) = maps.range(..=cursor).next_back().ok_or(INVALID_VALUE)?;
            if cursor >= at + m.size {
                return Err(INVALID_VALUE);
            }
            cursor = at + m.size;
        }
        if let Some(Region {
            kind: Kind::Reserve { maps },
            ..
        }) = self.regions.get_mut(&base)
        {
            for (_, m) in maps.range_mut(..end).filter(|(&a, m)| a + m.size > va) {
                m.access = flags == 3;
            }
        }
        Ok(())
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

    /// `cuMemGetHandleForAddressRange`: a new open file description of the memory file,
    /// positioned at `va` (see the crate docs).
    pub fn export(&mut self, va: u64, size: u64) -> CuResult<i32> {
        if size == 0 || va % self.page != 0 || size % self.page != 0 {
            return Err(INVALID_VALUE);
        }
        let (base, device) = self.check_range(va, size, true)?;
        let path = format!("/proc/self/fd/{}\0", self.file.as_raw_fd());
        // SAFETY: NUL-terminated path; the new fd is handed to the caller.
        let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(OPERATING_SYSTEM);
        }
        // SAFETY: our fresh fd.
        if unsafe { libc::lseek(fd, va as libc::off_t, libc::SEEK_SET) } < 0 {
            // SAFETY: our fresh fd, closed once.
            unsafe { libc::close(fd) };
            return Err(OPERATING_SYSTEM);
        }
        if let Some(r) = self.regions.get_mut(&base) {
            r.exported = true;
        }
        self.exports.insert(
            fd,
            DmaBufInfo {
                base: va,
                size,
                device,
                reserved: 0,
            },
        );
        Ok(fd)
    }

    /// The export `fd` was returned for, if it still is that export.
    pub fn dmabuf_info(&self, fd: i32) -> CuResult<DmaBufInfo> {
        let info = *self.exports.get(&fd).ok_or(INVALID_HANDLE)?;
        // SAFETY: fstat/lseek on an fd number; a closed or foreign fd just fails the check.
        let (ino, pos) = unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return Err(INVALID_HANDLE);
            }
            (st.st_ino, libc::lseek(fd, 0, libc::SEEK_CUR))
        };
        if ino != self.ino || pos != info.base as libc::off_t {
            return Err(INVALID_HANDLE);
        }
        Ok(info)
    }
}
