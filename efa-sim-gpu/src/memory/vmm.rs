//! The VMM half of the model: reservations, physical chunks, maps and access.

use std::collections::BTreeMap;

use super::file::{copy_fd, memfd, punch};
use super::{Kind, Mapping, Memory, Phys, Region, GRANULARITY};
use crate::ffi::*;

impl Memory {
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
}
