//! Device memory without a host view: registrations by device address
//! ([`DeviceAddressMr`], `ibv_reg_mr` on an address the host cannot dereference) and the
//! owner-returning forms of both device registrations (`try_new`). The "device memory"
//! here is a `PROT_NONE` mapping: host code faults on it, like on a CUDA address, and
//! nothing in these tests moves data through it.

mod common;
use common::*;
use efa_typestate::*;

/// Pages the host cannot touch, unmapped when dropped.
struct NoAccessPages {
    addr: u64,
    len: usize,
}

impl NoAccessPages {
    fn new(len: usize) -> NoAccessPages {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        NoAccessPages {
            addr: p as u64,
            len,
        }
    }
}

impl Drop for NoAccessPages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.addr as usize as *mut libc::c_void, self.len) };
    }
}

// SAFETY: the pages are PROT_NONE (no Rust reference can reach them), owned by the value
// and unmapped only in Drop, so a leaked value keeps them forever.
unsafe impl DeviceAddressMemory for NoAccessPages {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[test]
fn device_address_registrations_are_bounded_tagged_and_give_the_owner_back() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let other_pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let qp = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let peer = pd.connect(&qp.endpoint()).unwrap();

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let pages = NoAccessPages::new(8192);
    let addr = pages.addr;
    let mut mr = pd.register_device_address(pages, access).unwrap();
    assert_eq!((mr.iova(), mr.len(), mr.access()), (addr, 8192, access));
    let sge = mr.sge(100, 50).unwrap();
    assert_eq!(
        (sge.addr(), sge.len(), sge.lkey()),
        (addr + 100, 50, mr.lkey())
    );
    assert_eq!(
        mr.sge(8000, 193).map(drop),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds {
            offset: 8000,
            len: 193
        }))
    );
    let remote = mr.remote();
    assert_eq!(
        (remote.addr(), remote.len(), remote.rkey()),
        (addr, 8192, mr.rkey())
    );

    {
        // Usable in a batch like host memory, under the same PD check.
        let host = pd.register(vec![0u8; 64], AccessFlags::empty()).unwrap();
        let mut s = SendBatch::<4>::new(&qp);
        s.send(1, &peer, host.sge_all().unwrap()).unwrap();
        s.send(2, &peer, mr.sge(0, 64).unwrap()).unwrap();
        s.write(
            3,
            &peer,
            host.sge_all().unwrap(),
            mr.remote().slice(0, 64).unwrap(),
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        let foreign = other_pd
            .register_device_address(NoAccessPages::new(4096), AccessFlags::LOCAL_WRITE)
            .unwrap();
        assert_eq!(
            s.send(4, &peer, foreign.sge_all().unwrap()),
            Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Sge)))
        );
    }

    // Re-registration keeps the range and its address; close gives the owner back.
    mr.reregister().unwrap();
    assert_eq!(mr.sge(0, 1).unwrap().addr(), addr);
    let pages = mr.close().unwrap();
    assert_eq!(pages.addr, addr);
}

#[test]
fn borrowed_device_memory_gets_no_remote_access_and_failures_return_the_owner() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let pages = NoAccessPages::new(4096);
    let needs_owned = Err(Error::Invalid(InvalidInput::RemoteAccessNeedsOwnedMemory));
    for remote in [AccessFlags::REMOTE_READ, AccessFlags::REMOTE_WRITE] {
        assert_eq!(
            pd.register_device_address(&pages, AccessFlags::LOCAL_WRITE | remote)
                .map(drop),
            needs_owned
        );
    }
    let local = pd
        .register_device_address(&pages, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(local.owner().device_addr(), pages.addr);
    drop(local);

    // A registration the provider refuses (EFA has no remote atomics) hands the owner back.
    let atomic = AccessFlags::LOCAL_WRITE | AccessFlags::from_bits_retain(1 << 3);
    let (back, e) = DeviceAddressMr::try_new(&pd, pages, atomic).unwrap_err();
    assert_eq!(back.len, 4096);
    assert!(
        matches!(
            e,
            Error::Unsupported {
                verb: Verb::RegMr,
                ..
            }
        ),
        "{e:?}"
    );

    /// A dma-buf owner whose fd the kernel (here: efa-sim) refuses.
    struct BadFd;
    // SAFETY: the fd is invalid, so no registration can ever reach memory through it.
    unsafe impl DmaBufMemory for BadFd {
        const STAYS_ALLOCATED_IF_LEAKED: bool = true;
        fn fd(&self) -> i32 {
            -1
        }
        fn offset(&self) -> u64 {
            0
        }
        fn len(&self) -> usize {
            4096
        }
    }
    let (back, e) = DmaBufMr::try_new(&pd, BadFd, 0x1000, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(back.len(), 4096);
    assert!(
        matches!(
            e,
            Error::Verb {
                verb: Verb::RegDmabufMr,
                ..
            }
        ),
        "{e:?}"
    );
}
