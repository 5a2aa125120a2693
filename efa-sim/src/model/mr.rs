//! Memory regions: registration rules (model §3.7, and the checks the RDMA core and the
//! EFA kernel driver make), keys, where an MR's bytes are ([`MrMemory`]: host memory, a
//! mapping of a dma-buf, or CUDA device memory reached through the driver's copies), and
//! the one range check every device access of registered memory goes through
//! ([`Mr::place`]).

use super::gpu::DeviceMem;
use super::mem::Place;
use super::{Errno, Pd};
use efa_sys::verbs::ibv_access_flags;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// IBV_ACCESS_* bits as given by the caller (the model applies model §3.7 rules).
pub type AccessFlags = u32;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: u32 = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: u32 = ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0;
/// `IBV_ACCESS_ON_DEMAND`.
pub const ACCESS_ON_DEMAND: u32 = ibv_access_flags::IBV_ACCESS_ON_DEMAND.0;
/// `IBV_ACCESS_OPTIONAL_RANGE` (dropped, like the kernel does).
pub const ACCESS_OPTIONAL_RANGE: u32 = efa_sys::verbs_ext::IBV_ACCESS_OPTIONAL_RANGE;
/// Access bits the RDMA core knows (`IB_ACCESS_SUPPORTED`: up to `FLUSH_PERSISTENT`,
/// plus the optional range); others are EINVAL before the driver sees them.
const ACCESS_KNOWN: u32 = (1 << 10) - 1;

/// Memory region.
pub struct Mr {
    pub(crate) pd: Arc<Pd>,
    pub(crate) key: u32,
    backing: Backing,
    pub(crate) len: usize,
    iova: u64,
    pub(crate) access: AccessFlags,
    dmabuf: Option<DmaBuf>,
    pub(crate) dead: AtomicBool,
}

/// How the device reaches an MR's bytes.
pub(crate) enum Backing {
    /// Host memory registered by address (first byte).
    Host(usize),
    /// The model's shared mapping `[map, map + map_len)` of a dma-buf fd, unmapped with
    /// the MR; `at` is the MR's first byte inside it.
    Mapping {
        at: usize,
        map: usize,
        map_len: usize,
    },
    /// CUDA device memory, moved with the driver's copies.
    Device(DeviceMem),
    /// A dma-buf the model can neither map nor copy: only empty accesses succeed.
    Unreachable,
}

/// Where an MR's bytes are, as the device reaches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrMemory {
    /// Host memory, read and written directly.
    Host,
    /// A dma-buf the model mapped (`mmap` of the fd), read and written through that.
    Mapped,
    /// CUDA device memory, moved with `cuMemcpyHtoD_v2`/`cuMemcpyDtoH_v2` (emulated DMA:
    /// an NVIDIA dma-buf that cannot be mapped, or a registration by CUDA address).
    CudaCopies,
    /// A dma-buf that cannot be mapped with no CUDA driver to copy: data-path accesses
    /// fail (local side status 4 or 5, remote side 7).
    Unreachable,
}

/// Who exported a dma-buf fd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exporter {
    /// The software GPU (efa-sim-gpu) of this process: dma-buf byte 0 is CUDA address
    /// `base` of device `device`.
    SoftwareGpu {
        /// CUDA address of the export's first byte.
        base: u64,
        /// Device ordinal.
        device: i32,
    },
    /// A kernel dma-buf (`DMA_BUF_MAGIC`), e.g. NVIDIA's.
    Kernel,
    /// A sealed efa-sim memfd standing in for an exporter (mapped at the offset).
    File,
}

/// What a dma-buf MR was registered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaBuf {
    /// The dma-buf fd given at registration (the model needs it no longer).
    pub fd: i32,
    /// Offset into the dma-buf.
    pub offset: u64,
    /// Size of the dma-buf.
    pub size: u64,
    /// Who exported it.
    pub exporter: Exporter,
}

/// Checks and normalises registration access flags, in the order the kernel does:
/// the RDMA core (`ib_check_mr_access`: remote write or atomic need local write, EINVAL;
/// unknown bits, EINVAL; on-demand paging, which EFA lacks, EOPNOTSUPP), then the EFA
/// driver (`efa_reg_mr`: optional-range bits dropped; anything but local write, remote
/// read with the RDMA_READ cap and remote write with the RDMA_WRITE cap, EOPNOTSUPP).
pub(crate) fn check_access(access: AccessFlags, caps: u32) -> Result<AccessFlags, Errno> {
    use efa_sys::efadv::{EFADV_DEVICE_ATTR_CAPS_RDMA_READ, EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE};
    if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
        && access & ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    if access & !(ACCESS_KNOWN | ACCESS_OPTIONAL_RANGE) != 0 {
        return Err(libc::EINVAL);
    }
    if access & ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let access = access & !ACCESS_OPTIONAL_RANGE;
    let mut allowed = ACCESS_LOCAL_WRITE;
    if caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ != 0 {
        allowed |= ACCESS_REMOTE_READ;
    }
    if caps & EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE != 0 {
        allowed |= ACCESS_REMOTE_WRITE;
    }
    if access & !allowed != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(access)
}

impl Mr {
    pub(crate) fn new(
        pd: Arc<Pd>,
        key: u32,
        backing: Backing,
        len: usize,
        iova: u64,
        access: AccessFlags,
        dmabuf: Option<DmaBuf>,
    ) -> Mr {
        Mr {
            pd,
            key,
            backing,
            len,
            iova,
            access,
            dmabuf,
            dead: AtomicBool::new(false),
        }
    }

    /// Local key (< 2^24).
    pub fn lkey(&self) -> u32 {
        self.key
    }
    /// Remote key (equals the lkey).
    pub fn rkey(&self) -> u32 {
        self.key
    }
    /// Registered length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the MR is zero-length (never: registration refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// IOVA of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Normalised access flags.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// dma-buf registration facts, if this is a dma-buf MR.
    pub fn dmabuf(&self) -> Option<&DmaBuf> {
        self.dmabuf.as_ref()
    }
    /// Where the bytes are and how the device reaches them.
    pub fn memory(&self) -> MrMemory {
        match self.backing {
            Backing::Host(_) => MrMemory::Host,
            Backing::Mapping { .. } => MrMemory::Mapped,
            Backing::Device(_) => MrMemory::CudaCopies,
            Backing::Unreachable => MrMemory::Unreachable,
        }
    }
    /// Deregisters; EINVAL if already deregistered. Waits for in-flight device accesses
    /// (they hold the MR table's read lock).
    pub fn dereg(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        self.pd.rt.remove_mr(self.key);
        self.pd.release_user();
        Ok(())
    }

    /// Where `[iova, iova+len)` is, if it lies inside this live MR and the MR has `need`
    /// access bits.
    #[inline(always)]
    pub(crate) fn place(&self, iova: u64, len: u64, need: AccessFlags) -> Option<Place> {
        if self.dead.load(Ordering::Acquire) || self.access & need != need {
            return None;
        }
        let off = iova.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        match &self.backing {
            Backing::Host(h) => Some(Place::Host(h + off as usize)),
            Backing::Mapping { at, .. } => Some(Place::Host(at + off as usize)),
            Backing::Device(d) => Some(Place::Device(d.at(off))),
            // Unreachable bytes: only empty accesses succeed.
            Backing::Unreachable => (len == 0).then_some(Place::Host(0)),
        }
    }

    /// The host addresses `[start, start + len)` of the whole MR, if it has them.
    pub(crate) fn host_span(&self) -> Option<(usize, usize)> {
        match self.backing {
            Backing::Host(h) => Some((h, self.len)),
            Backing::Mapping { at, .. } => Some((at, self.len)),
            Backing::Device(_) | Backing::Unreachable => None,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Backing::Mapping { map, map_len, .. } = self.backing {
            // SAFETY: the model mapped exactly [map, map+map_len) at registration and
            // nothing references it any more (the MR is being dropped).
            unsafe { libc::munmap(map as *mut libc::c_void, map_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rules_in_kernel_order() {
        let all = 0x1f;
        assert_eq!(check_access(ACCESS_REMOTE_WRITE, all), Err(libc::EINVAL));
        assert_eq!(check_access(ACCESS_REMOTE_ATOMIC, all), Err(libc::EINVAL));
        assert_eq!(check_access(1 << 15, all), Err(libc::EINVAL));
        assert_eq!(
            check_access(ACCESS_LOCAL_WRITE | ACCESS_ON_DEMAND, all),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(
            check_access(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_ATOMIC, all),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(
            check_access(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, 0),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(check_access(ACCESS_REMOTE_READ, 0), Err(libc::EOPNOTSUPP));
        assert_eq!(
            check_access(ACCESS_REMOTE_READ, all),
            Ok(ACCESS_REMOTE_READ)
        );
        assert_eq!(
            check_access(ACCESS_LOCAL_WRITE | 0x0010_0000, all),
            Ok(ACCESS_LOCAL_WRITE)
        );
    }
}
