//! Registrations of device memory: `ibv_reg_dmabuf_mr` with the checks the kernel makes, in
//! its order, and `ibv_reg_mr` on a CUDA address (the nvidia_peermem path); then where the
//! device reaches the bytes ([`Backing`]).
//!
//! dma-buf checks (uverbs `REG_DMABUF_MR`, then `efa_reg_user_mr_dmabuf`,
//! `ib_umem_dmabuf_get`): a device without dma-buf MRs (profile `dmabuf_mr=0`)
//! EOPNOTSUPP; `offset` and `iova` in different places of their pages EINVAL; access bits
//! the method does not take (MW bind, zero-based, on-demand, huge pages, ...) EINVAL; then
//! the MR access rules ([`check_access`]); `offset + len` wrapping EINVAL; a closed or
//! negative fd EBADF; an fd that is no dma-buf EINVAL; `offset + len` past the dma-buf's
//! size EINVAL; a zero length EINVAL.
//!
//! The fds efa-sim takes, and how it reaches their bytes:
//! * the software GPU's exports (efa-sim-gpu, asked with `efaSimGpuDmaBufInfo`): dma-buf
//!   byte `k` is CUDA address `base + k` and file offset `base + k` of its memory file,
//!   mapped there; an export that refuses mmap moves through the driver's copies instead;
//! * kernel dma-bufs (`DMA_BUF_MAGIC`; size from `lseek(SEEK_END)`): mapped if the exporter
//!   allows it (NVIDIA from CUDA 13.3 with `DMA_BUF_MMAP_SUPPORTED`); otherwise, with a
//!   CUDA driver loaded and `[iova, iova + len)` device memory of one GPU, through the
//!   driver's copies at the CUDA address `iova` (emulated DMA: efa-sim cannot see which
//!   CUDA range an NVIDIA fd covers, so it relies on `iova - offset` being the export's
//!   base, as every consumer passes it); otherwise unreachable (registration succeeds as in
//!   the kernel, data-path accesses fail);
//! * a sealed efa-sim memfd stands in for an exporter (tests without a GPU): a memfd whose
//!   name starts with `efa-sim` and that carries `F_SEAL_SHRINK | F_SEAL_SEAL`, mapped at
//!   `offset`, size from `fstat`. The seals are what make mapping it safe: nobody can
//!   shrink it under the mapping (a truncated file turns the device's next write into
//!   SIGBUS).
//!
//! Every other fd is refused with EINVAL, as the kernel refuses it: `ib_umem_dmabuf_get`
//! calls `dma_buf_get(fd)`, which fails with -EINVAL for a file that is not a dma-buf
//! (regular files, unsealed or foreign memfds, pipes, ...). A software GPU memory file
//! that is not an export of this process's software GPU is refused too (it would be
//! mapped at the wrong offset), and so is a software GPU export without the seals.

use super::gpu::{self, Class, DeviceMem, SIM_EXPORT_NO_MMAP};
use super::mr::{check_access, AccessFlags, Backing, DmaBuf, Exporter};
use super::mr::{ACCESS_LOCAL_WRITE, ACCESS_OPTIONAL_RANGE, ACCESS_REMOTE_ATOMIC};
use super::mr::{ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};
use super::{Errno, Profile};
use std::os::fd::RawFd;

/// `DMA_BUF_MAGIC` (linux/magic.h): `fstatfs` of a kernel dma-buf fd.
const DMA_BUF_MAGIC: i64 = 0x444d_4142;
/// The software GPU's memory file (`/memfd:` + its memfd name, efa-sim-gpu's convention).
const SIM_GPU_MEMORY_FILE: &str = "/memfd:efa-sim-gpu-memory";
/// The names of efa-sim's own memfds (`/memfd:` + name).
const SIM_MEMFD: &str = "/memfd:efa-sim";
/// Seals a file needs before efa-sim maps it: it can never shrink under the mapping, and
/// nobody can add seals later (seals are never removed).
const NEEDED_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
/// Access bits `REG_DMABUF_MR` takes (`uverbs_get_flags32`; others are EINVAL), plus the
/// optional range, which the model drops.
const DMABUF_ACCESS: AccessFlags = ACCESS_LOCAL_WRITE
    | ACCESS_REMOTE_WRITE
    | ACCESS_REMOTE_READ
    | ACCESS_REMOTE_ATOMIC
    | ACCESS_OPTIONAL_RANGE;

/// The host page size (the kernel's `PAGE_SIZE`).
fn page() -> u64 {
    crate::ring::host_page_size() as u64
}

/// What an fd is.
enum Source {
    SoftwareGpu(gpu::SimExport),
    Kernel { size: u64 },
    File { size: u64 },
}

/// Whether `fd` carries every seal of [`NEEDED_SEALS`].
fn sealed(fd: RawFd) -> bool {
    // SAFETY: fcntl on an open fd; F_GET_SEALS takes no argument (-1 on other files).
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    seals >= 0 && seals & NEEDED_SEALS == NEEDED_SEALS
}

/// Identifies `fd`: EBADF when it is not open, EINVAL when it is nothing efa-sim takes.
fn source(fd: RawFd) -> Result<Source, Errno> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fstat only fills `st`; a closed fd fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid out struct.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(libc::EBADF);
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
    let link = link.to_string_lossy();
    if let Some(e) = gpu::cuda().and_then(|c| c.sim_export(fd)) {
        // The software GPU seals its memory file; one that does not could be truncated.
        return if sealed(fd) {
            Ok(Source::SoftwareGpu(e))
        } else {
            Err(libc::EINVAL)
        };
    }
    // SAFETY: fstatfs only fills `fs`.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: open fd (fstat succeeded), valid out struct.
    let magic = unsafe { libc::fstatfs(fd, &mut fs) } == 0 && fs.f_type as i64 == DMA_BUF_MAGIC;
    // Kernels before 5.3 show dma-bufs as anon inodes, later ones as `/dmabuf:<name>`.
    if magic || link == "anon_inode:dmabuf" || link.starts_with("/dmabuf:") {
        // The dma-buf llseek only answers SEEK_END (with the size) and SEEK_SET 0.
        // SAFETY: plain syscall on an open fd.
        let size = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        return u64::try_from(size)
            .map(|size| Source::Kernel { size })
            .map_err(|_| libc::EINVAL);
    }
    // The kernel: dma_buf_get(fd) is -EINVAL for a file that is no dma-buf. efa-sim only
    // adds its own sealed memfds (a test stand-in that cannot be shrunk under a mapping).
    let stand_in = st.st_mode & libc::S_IFMT == libc::S_IFREG
        && link.starts_with(SIM_MEMFD)
        && !link.starts_with(SIM_GPU_MEMORY_FILE)
        && sealed(fd);
    if !stand_in {
        return Err(libc::EINVAL);
    }
    Ok(Source::File {
        size: st.st_size as u64,
    })
}

/// Maps `[file_off, file_off + len)` of `fd` shared and writable (page-aligned around it).
fn map(fd: RawFd, file_off: u64, len: usize) -> Option<Backing> {
    let page = page();
    let lead = (file_off % page) as usize;
    let map_len = (lead + len).checked_next_multiple_of(page as usize)?;
    // SAFETY: mmap of an open fd into fresh address space; no existing memory is touched;
    // failure is MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            (file_off - lead as u64) as libc::off_t,
        )
    };
    (p != libc::MAP_FAILED).then_some(Backing::Mapping {
        at: p as usize + lead,
        map: p as usize,
        map_len,
    })
}

/// The dma-buf registration of [`super::Pd::reg_dmabuf_mr`]: the kernel's checks (module
/// docs), then the normalised access, the backing and the registration facts.
pub(crate) fn register(
    profile: &Profile,
    offset: u64,
    len: usize,
    iova: u64,
    fd: RawFd,
    access: AccessFlags,
) -> Result<(AccessFlags, Backing, DmaBuf), Errno> {
    if !profile.dmabuf_mr {
        return Err(libc::EOPNOTSUPP);
    }
    if (offset ^ iova) & (page() - 1) != 0 || access & !DMABUF_ACCESS != 0 {
        return Err(libc::EINVAL);
    }
    let access = check_access(access, profile.device_caps)?;
    let end = offset.checked_add(len as u64).ok_or(libc::EINVAL)?;
    let src = source(fd)?;
    let size = match &src {
        Source::SoftwareGpu(e) => e.size,
        Source::Kernel { size } | Source::File { size } => *size,
    };
    if end > size || len == 0 {
        return Err(libc::EINVAL);
    }
    let (backing, exporter) = match src {
        Source::SoftwareGpu(e) => {
            let va = e.base + offset;
            let mapped = (e.flags & SIM_EXPORT_NO_MMAP == 0)
                .then(|| map(fd, va, len))
                .flatten();
            let backing = match (mapped, gpu::cuda()) {
                (Some(m), _) => m,
                (None, Some(c)) => Backing::Device(DeviceMem::new(c, e.device, va)?),
                (None, None) => Backing::Unreachable,
            };
            let exporter = Exporter::SoftwareGpu {
                base: e.base,
                device: e.device,
            };
            (backing, exporter)
        }
        Source::Kernel { .. } => {
            let backing = match map(fd, offset, len) {
                Some(m) => m,
                None => match gpu::cuda().map(|c| (c, c.classify(iova, len as u64))) {
                    Some((c, Class::Device(dev))) => Backing::Device(DeviceMem::new(c, dev, iova)?),
                    _ => Backing::Unreachable,
                },
            };
            (backing, Exporter::Kernel)
        }
        Source::File { .. } => (
            map(fd, offset, len).unwrap_or(Backing::Unreachable),
            Exporter::File,
        ),
    };
    let info = DmaBuf {
        fd,
        offset,
        size,
        exporter,
    };
    Ok((access, backing, info))
}

/// `ibv_reg_mr` of `[addr, addr + len)`: `None` for host memory; for CUDA device memory
/// (asked of a loaded CUDA driver) the nvidia_peermem path: with the device's `peermem`
/// (default on) device memory the NIC may reach (`IS_GPU_DIRECT_RDMA_CAPABLE`), moved with
/// the driver's copies; otherwise EFAULT, as `ib_umem_get` fails to pin GPU pages without
/// nvidia_peermem. A range only partly device memory is EFAULT too.
pub(crate) fn device_address(
    profile: &Profile,
    addr: usize,
    len: usize,
) -> Result<Option<Backing>, Errno> {
    let Some(cuda) = gpu::cuda() else {
        return Ok(None);
    };
    match cuda.classify(addr as u64, len as u64) {
        Class::Host => Ok(None),
        Class::Mixed => Err(libc::EFAULT),
        Class::Device(_) if !profile.peermem || !cuda.rdma_capable(addr as u64) => {
            Err(libc::EFAULT)
        }
        Class::Device(dev) => Ok(Some(Backing::Device(DeviceMem::new(
            cuda,
            dev,
            addr as u64,
        )?))),
    }
}
