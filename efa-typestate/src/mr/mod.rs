//! Memory regions: registered host memory ([`Mr`], borrowed or owned, of any plain-data
//! element type), dma-buf memory ([`DmaBufMr`], e.g. GPU memory) and device memory
//! registered by its device address ([`DeviceAddressMr`], e.g. GPU memory through
//! `nvidia_peermem`), the SGEs that address them, and the remote view a peer uses for RDMA.
//!
//! # Who may touch registered memory
//!
//! * The device reads or writes it for work requests this process posts: sends and
//!   RDMA-write sources are read, receives and RDMA-read destinations written. Posting
//!   with `unsafe` ([`Qp::post_send`](crate::Qp::post_send)) makes the caller promise not
//!   to touch those bytes until the completion; posting a lease
//!   ([`lease`](crate::lease)) moves them out of reach instead.
//! * Peers read memory registered with [`AccessFlags::REMOTE_READ`] and write memory
//!   registered with `REMOTE_WRITE`, at any time. Both need memory that stays allocated
//!   if the `Mr` is leaked ([`RegionMemory::STAYS_ALLOCATED_IF_LEAKED`]: owned, not
//!   borrowed), or a `mem::forget` would let peers reach memory that is reused.
//! * Memory peers may write is an [`Mr<_, _, RemoteWrite>`](RemoteWrite): it hands out no
//!   `&`/`&mut` slices, only copies ([`Mr::read`], [`Mr::copy_to_slice`], [`Mr::write`],
//!   ...), because a reference would promise bytes that a peer can change under it. The
//!   remote right ends with the registration: [`Mr::close`] deregisters and gives the
//!   memory back as a plain value. `unsafe` slice access states its contract.
// Offsets, lengths and indexes here come from callers or peers: no arithmetic that can wrap.
#![deny(clippy::arithmetic_side_effects)]

use crate::error::{Error, Result, Verb};
use crate::ffi;
use crate::flags::flag_set;
use crate::pd::PdId;

mod device_address;
mod dmabuf;
mod host;
mod memory;
#[cfg(feature = "std")]
mod numa;
mod remote;
mod sge;
pub(crate) mod volatile;

pub use device_address::{DeviceAddressMemory, DeviceAddressMr};
#[cfg(feature = "std")]
pub use dmabuf::DmaBufFd;
pub use dmabuf::{DmaBufMemory, DmaBufMr};
#[cfg(feature = "std")]
pub(crate) use host::reg_mr;
pub use host::Mr;
pub use memory::{Plain, RawMemory, RawRegion, RegionMemory};
#[cfg(feature = "std")]
pub use numa::{NumaBuffer, NumaError, NumaPlacement, MAX_NUMA_NODES};
pub use remote::RemoteBuffer;
pub use sge::{Sge, SgeList, Sges};

pub(crate) use sge::{check_iova, check_range};

flag_set! {
    /// Access rights of a memory region (`IBV_ACCESS_*`). EFA accepts LOCAL_WRITE,
    /// REMOTE_READ (with the RDMA-read capability) and REMOTE_WRITE (with RDMA-write);
    /// RELAXED_ORDERING is an optional hint that is dropped where unsupported.
    pub struct AccessFlags: u32 {
        /// The device may write it (receive buffers, RDMA-read destinations).
        const LOCAL_WRITE = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        /// Peers may RDMA-write it (only through [`RemoteWrite`] registrations).
        const REMOTE_WRITE = ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        /// Peers may RDMA-read it.
        const REMOTE_READ = ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        /// Relaxed PCIe ordering (optional hint).
        const RELAXED_ORDERING = ffi::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0;
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Whether peers may write a host registration: decides what access the [`Mr`] gives.
/// Sealed: [`Local`] and [`RemoteWrite`].
pub trait Access: sealed::Sealed {
    /// True for [`RemoteWrite`].
    const PEER_WRITABLE: bool;
}

/// No peer may write the memory (no `REMOTE_WRITE`): the `Mr` hands out `&`/`&mut`
/// slices (the device writes it only for work requests posted with `unsafe` or through a
/// lease, both of which keep slices away from it meanwhile).
#[derive(Debug)]
pub struct Local;

/// Peers may RDMA-write the memory at any time (`REMOTE_WRITE`): the `Mr` gives access
/// by copying only.
#[derive(Debug)]
pub struct RemoteWrite;

impl sealed::Sealed for Local {}
impl sealed::Sealed for RemoteWrite {}
impl Access for Local {
    const PEER_WRITABLE: bool = false;
}
impl Access for RemoteWrite {
    const PEER_WRITABLE: bool = true;
}

/// The checks every registration makes before the device sees it: the remote rights
/// follow the access type, and remote access needs memory that outlives a leak.
pub(crate) fn check_access(
    access: AccessFlags,
    peer_writable: bool,
    stays_allocated: bool,
) -> Result<AccessFlags> {
    let access = if peer_writable {
        // The kernel refuses REMOTE_WRITE without LOCAL_WRITE (EINVAL); memory peers may
        // write at any time loses nothing by also being locally writable.
        access | AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE
    } else if access.contains(AccessFlags::REMOTE_WRITE) {
        return Err(crate::error::InvalidInput::RemoteWriteOnLocalMr.into());
    } else {
        access
    };
    check_remote_needs_owned(access, stays_allocated)?;
    Ok(access)
}

/// Remote rights need memory that stays allocated if its registration is leaked.
pub(crate) fn check_remote_needs_owned(access: AccessFlags, stays_allocated: bool) -> Result<()> {
    let remote = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    if access.intersects(remote) && !stays_allocated {
        return Err(crate::error::InvalidInput::RemoteAccessNeedsOwnedMemory.into());
    }
    Ok(())
}

pub(crate) mod region_sealed {
    pub trait Sealed {}
}

/// Anything registered: gives keys, the device address space and SGEs. Sealed
/// (implemented by [`Mr`], [`DmaBufMr`] and [`DeviceAddressMr`] only), so an [`Sge`] always names bytes of a
/// real registration of a known PD.
pub trait MemoryRegion: region_sealed::Sealed {
    /// Local key (24 bits on EFA).
    fn lkey(&self) -> u32;
    /// Remote key.
    fn rkey(&self) -> u32;
    /// Device address of the first byte (the registration's iova).
    fn iova(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True if zero bytes long.
    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The raw MR (null after a failed [`Mr::reregister`]).
    fn as_mr_ptr(&self) -> *mut ffi::ibv_mr;
    /// The identity of the PD the region is registered in.
    fn pd_id(&self) -> PdId;
    /// Deregisters and registers the same memory again (see [`Mr::reregister`]).
    #[doc(hidden)]
    fn revoke(&mut self) -> Result<()>;

    /// An SGE for `len` bytes at `offset`; fails unless the range lies inside the region
    /// and `len` fits 32 bits.
    #[inline]
    fn sge(&self, offset: u64, len: u64) -> Result<Sge<'_>> {
        use crate::error::InvalidInput;
        if self.as_mr_ptr().is_null() {
            return Err(InvalidInput::Deregistered.into());
        }
        if len > u32::MAX as u64 {
            return Err(InvalidInput::LengthTooLarge(len).into());
        }
        check_range(offset, len, self.len())?;
        // Registrations check that `[iova, iova + len)` fits; a device-address region's
        // iova is its owner's word, so it is checked here too.
        let Some(addr) = self.iova().checked_add(offset) else {
            return Err(InvalidInput::AddressWraps {
                addr: self.iova(),
                len: len as u32,
            }
            .into());
        };
        check_iova(addr, len)?;
        Ok(Sge::new_checked(
            addr,
            len as u32,
            self.lkey(),
            self.pd_id(),
        ))
    }

    /// An SGE covering the whole region.
    #[inline]
    fn sge_all(&self) -> Result<Sge<'_>> {
        self.sge(0, self.len())
    }

    /// The region as a peer addresses it for RDMA (iova, length, rkey).
    #[inline]
    fn remote(&self) -> RemoteBuffer {
        RemoteBuffer::new(self.iova(), self.len(), self.rkey())
    }

    /// EFA interconnect ids of this MR (`efadv_query_mr`); [`Error::Unsupported`] when the
    /// library or kernel lacks it.
    fn query_efa(&self) -> Result<MrInterconnect> {
        if self.as_mr_ptr().is_null() {
            return Err(crate::error::InvalidInput::Deregistered.into());
        }
        let mut a = ffi::efadv_mr_attr::default();
        // SAFETY: valid MR; `a` is writable and `inlen` is its exact size.
        let rc = unsafe {
            ffi::efadv_query_mr(self.as_mr_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
        }
        .map_err(|e| ffi::not_provided(Verb::EfadvQueryMr, e))?;
        if rc != 0 {
            return Err(Error::verb(Verb::EfadvQueryMr, rc));
        }
        let pick = |bit: u16, v: u16| (a.ic_id_validity & bit != 0).then_some(v);
        Ok(MrInterconnect {
            recv: pick(ffi::EFADV_MR_ATTR_VALIDITY_RECV_IC_ID, a.recv_ic_id),
            rdma_read: pick(
                ffi::EFADV_MR_ATTR_VALIDITY_RDMA_READ_IC_ID,
                a.rdma_read_ic_id,
            ),
            rdma_recv: pick(
                ffi::EFADV_MR_ATTR_VALIDITY_RDMA_RECV_IC_ID,
                a.rdma_recv_ic_id,
            ),
        })
    }
}

/// PCIe interconnect ids the device uses to reach an MR (`efadv_query_mr`); `None`
/// where the device reports no valid id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MrInterconnect {
    /// For receives.
    pub recv: Option<u16>,
    /// For RDMA read.
    pub rdma_read: Option<u16>,
    /// For incoming RDMA writes.
    pub rdma_recv: Option<u16>,
}

/// Deregisters `raw` (owned, deregistered once).
pub(crate) fn dereg(raw: core::ptr::NonNull<ffi::ibv_mr>) -> Result<()> {
    // SAFETY: caller owns the MR and deregisters it once.
    let rc = unsafe { ffi::ibv_dereg_mr(raw.as_ptr()) };
    if rc != 0 {
        return Err(Error::verb(Verb::DeregMr, rc));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::InvalidInput;

    #[test]
    fn remote_rights_follow_the_access_type_and_the_memory() {
        let lw = AccessFlags::LOCAL_WRITE;
        assert_eq!(check_access(lw, false, false), Ok(lw));
        assert_eq!(
            check_access(lw | AccessFlags::REMOTE_WRITE, false, true),
            Err(Error::Invalid(InvalidInput::RemoteWriteOnLocalMr))
        );
        assert_eq!(
            check_access(AccessFlags::REMOTE_READ, false, false),
            Err(Error::Invalid(InvalidInput::RemoteAccessNeedsOwnedMemory))
        );
        assert_eq!(
            check_access(lw, true, false),
            Err(Error::Invalid(InvalidInput::RemoteAccessNeedsOwnedMemory))
        );
        assert_eq!(
            check_access(lw, true, true),
            Ok(lw | AccessFlags::REMOTE_WRITE)
        );
        assert_eq!(
            check_access(AccessFlags::empty(), true, true),
            Ok(lw | AccessFlags::REMOTE_WRITE)
        );
    }
}
