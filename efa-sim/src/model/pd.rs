//! Protection domains: they own MRs, AHs and QPs (EBUSY while any exists) and keep the
//! device's address book (GID → AH number, model §3.7).

use super::dmabuf;
use super::mr::{check_access, AccessFlags, Backing, DmaBuf, Mr};
use super::runtime::Runtime;
use super::{Ah, Errno, Gid, Qp, QpCaps, QpInit};
use crate::rcu::{Guard, RcuBox};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Page size of the registration range checks (the kernel pins whole pages).
const PAGE: usize = 4096;

/// Protection domain.
pub struct Pd {
    pub(crate) rt: Arc<Runtime>,
    number: u16,
    users: AtomicU32,
    dead: AtomicBool,
    /// (GID → (AH number, handles)) of this PD: the device's address book.
    ahs: Mutex<HashMap<Gid, (u16, u32)>>,
    /// The address book as the data path reads it: (GID, AH number), sorted by GID,
    /// republished whenever an AH number comes or goes.
    book: RcuBox<Vec<(Gid, u16)>>,
}

impl Pd {
    /// `ibv_alloc_pd`; ENOMEM beyond `max_pd`.
    pub(crate) fn alloc(rt: Arc<Runtime>) -> Result<Arc<Pd>, Errno> {
        // Beyond max_pd the device fails the admin ALLOC_PD (no check in the kernel or
        // libefa): kernel efa_com.c efa_com_comp_status_to_errno maps
        // RESOURCE_ALLOCATION_FAILURE to ENOMEM. Which status the device sends is
        // UNCONFIRMED (model §7); ENOMEM is the plausible one.
        let n = rt.pd_count.fetch_add(1, Ordering::AcqRel);
        if n >= rt.profile.max_pd {
            rt.pd_count.fetch_sub(1, Ordering::AcqRel);
            return Err(libc::ENOMEM);
        }
        let number = (rt.next_pd.fetch_add(1, Ordering::Relaxed) & 0xffff) as u16;
        Ok(Arc::new(Pd {
            rt,
            number,
            users: AtomicU32::new(0),
            dead: AtomicBool::new(false),
            ahs: Mutex::new(HashMap::new()),
            book: RcuBox::new(Vec::new()),
        }))
    }

    /// The device PD number.
    pub fn number(&self) -> u16 {
        self.number
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub(crate) fn add_user(&self) {
        self.users.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn release_user(&self) {
        self.users.fetch_sub(1, Ordering::AcqRel);
    }

    fn add_mr(
        self: &Arc<Self>,
        backing: Backing,
        len: usize,
        iova: u64,
        access: AccessFlags,
        dmabuf: Option<DmaBuf>,
    ) -> Result<Arc<Mr>, Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        // Beyond max_mr_size (the kernel's max_mr_pages × PAGE_SIZE) neither libefa nor
        // kernel efa_verbs.c efa_reg_mr checks: the device refuses the admin REG_MR with more
        // than max_mr_pages pages. Its status is UNCONFIRMED (model §7); EINVAL
        // (ILLEGAL_PARAMETER in efa_com_comp_status_to_errno) is the plausible one. The
        // model counts bytes, not the pages the range spans.
        if len as u64 > self.rt.profile.max_mr_size || iova.checked_add(len as u64).is_none() {
            return Err(libc::EINVAL);
        }
        let mr = self.rt.insert_mr(|key| {
            Arc::new(Mr::new(
                self.clone(),
                key,
                backing,
                len,
                iova,
                access,
                dmabuf,
            ))
        })?;
        self.add_user();
        Ok(mr)
    }

    /// Host memory `[addr, addr+len)` addressed by the peer as `[iova, iova+len)`.
    /// Besides the access rules (`check_access`): EINVAL for a zero length, a NULL
    /// address, or a range (or its page-rounded end) that wraps, as the kernel's
    /// `ib_umem_get` answers. CUDA device memory (with a CUDA driver loaded in the process)
    /// takes the nvidia_peermem path: reached through the driver's copies, or EFAULT
    /// without peermem (profile `peermem=0`) or for memory the NIC may not reach
    /// (`crate::model::dmabuf` has the rules).
    ///
    /// # Safety
    /// `[addr, addr+len)` must stay valid, readable and (if any write access is
    /// granted) writable memory until [`Mr::dereg`] returns; peers and the device
    /// read and write it at any time in between (like DMA). For CUDA memory: it must stay
    /// allocated until then.
    pub unsafe fn reg_mr(
        self: &Arc<Self>,
        addr: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Arc<Mr>, Errno> {
        let access = check_access(access, self.rt.profile.device_caps)?;
        let wraps = addr
            .checked_add(len)
            .and_then(|end| end.checked_next_multiple_of(PAGE))
            .is_none();
        if len == 0 || addr == 0 || wraps {
            return Err(libc::EINVAL);
        }
        let backing = dmabuf::device_address(&self.rt.profile, addr, len)?;
        self.add_mr(
            backing.unwrap_or(Backing::Host(addr)),
            len,
            iova,
            access,
            None,
        )
    }

    /// dma-buf registration of `[offset, offset+len)` of the dma-buf `fd`, addressed as
    /// `[iova, iova+len)`, with the kernel's checks in its order (`crate::model::dmabuf`).
    /// The device reaches the bytes through a mapping of the fd (the software GPU's exports
    /// at their CUDA address, mappable dma-bufs, files), through the CUDA driver's copies
    /// (an NVIDIA dma-buf that cannot be mapped, a software-GPU export that refuses mmap),
    /// or not at all: then the MR registers but every data-path access to it fails (local
    /// side status 4/5, remote side 7). [`Mr::memory`] says which. The fd is not kept.
    pub fn reg_dmabuf_mr(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: AccessFlags,
    ) -> Result<Arc<Mr>, Errno> {
        let (access, backing, info) =
            dmabuf::register(&self.rt.profile, offset, len, iova, fd, access)?;
        self.add_mr(backing, len, iova, access, Some(info))
    }

    /// Same (PD, GID) gives the same AH number (model §3.7).
    pub fn create_ah(self: &Arc<Self>, gid: &Gid) -> Result<Arc<Ah>, Errno> {
        if self.is_dead() {
            return Err(libc::EINVAL);
        }
        let mut ahs = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        let number = match ahs.get_mut(gid) {
            Some((n, uses)) => {
                *uses += 1;
                *n
            }
            None => {
                let n = self.rt.alloc_ah(Arc::as_ptr(self) as usize, gid)?;
                ahs.insert(*gid, (n, 1));
                self.publish_book(&ahs);
                n
            }
        };
        self.add_user();
        Ok(Arc::new(Ah::new(Arc::downgrade(self), *gid, number)))
    }

    /// Drops one handle of `gid`'s AH; the device AH (and its number) goes with the
    /// last one.
    pub(crate) fn release_ah(&self, gid: &Gid) {
        let mut ahs = self.ahs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((n, uses)) = ahs.get_mut(gid) {
            *uses -= 1;
            if *uses == 0 {
                let n = *n;
                ahs.remove(gid);
                self.publish_book(&ahs);
                drop(ahs);
                self.rt.free_ah(n);
            }
        }
        self.release_user();
    }

    /// Creates a QP (model §3.1 checks); returns it in RESET with the granted caps.
    pub fn create_qp(self: &Arc<Self>, init: &QpInit) -> Result<(Arc<Qp>, QpCaps), Errno> {
        Qp::create(self, init)
    }

    /// EBUSY while MRs/AHs/QPs use it.
    pub fn dealloc(&self) -> Result<(), Errno> {
        if self.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        if !self.dead.swap(true, Ordering::AcqRel) {
            self.rt.pd_count.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Republishes the data path's copy of the address book (the caller holds `ahs`).
    fn publish_book(&self, ahs: &HashMap<Gid, (u16, u32)>) {
        let mut v: Vec<(Gid, u16)> = ahs.iter().map(|(g, (n, _))| (*g, *n)).collect();
        v.sort_unstable();
        self.book.replace(v);
    }

    /// The receiver-side AH number of `gid` in this PD, or 0xFFFF (no lock, no hashing:
    /// a search of the sorted book inside a read section).
    #[inline(always)]
    pub(crate) fn ah_number_of(&self, gid: &Gid, g: &Guard) -> u16 {
        let book = self.book.get(g);
        let found = if book.len() <= 8 {
            book.iter().find(|(k, _)| k == gid).map(|(_, n)| *n)
        } else {
            book.binary_search_by(|(k, _)| k.cmp(gid))
                .ok()
                .map(|i| book[i].1)
        };
        found.unwrap_or(crate::ring::cqe::NO_AH)
    }
}
