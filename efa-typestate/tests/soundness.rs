//! The three soundness holes of issue 10, closed (each was demonstrated on the old API by
//! `tests/holes.rs`, which passed before the fix and no longer compiles after it):
//!
//! 1. safe references to memory a peer may write: a [`RemoteWrite`] Mr hands out no
//!    slices (compile-fail doctests in `rules`), `REMOTE_WRITE` on a slice-giving
//!    registration is refused, and the remote right ends with the registration;
//! 2. SGEs and peers of another protection domain or device: refused while building;
//! 3. remote access to borrowed memory: refused, for reads as for writes.

mod common;
use common::*;
use efa_typestate::*;

#[test]
fn hole_1_peer_writable_memory_is_reached_by_copies_and_the_right_is_revocable() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
    let to_a = pd.connect(&a.endpoint()).unwrap();
    // A slice-giving registration cannot grant REMOTE_WRITE.
    assert_eq!(
        pd.register(
            vec![0u8; 64],
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
        )
        .map(drop),
        Err(Error::Invalid(InvalidInput::RemoteWriteOnLocalMr))
    );
    // SAFETY: a leaked, never-freed buffer used only through the registration.
    let raw = unsafe {
        let leaked: &'static mut [u8] = Box::leak(vec![0u8; 32].into_boxed_slice());
        pd.register_raw(leaked.as_mut_ptr(), 32, None, AccessFlags::REMOTE_WRITE)
    };
    assert_eq!(
        raw.map(drop),
        Err(Error::Invalid(InvalidInput::RemoteWriteOnLocalMr))
    );

    let src = pd.register(vec![0x5au8; 64], AccessFlags::empty()).unwrap();
    let mut target = pd
        .register_remote_write(vec![0u64; 8], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(target.access().contains(AccessFlags::REMOTE_WRITE));
    target.write(7, 0x0102_0304_0506_0708).unwrap();
    let old = target.remote();
    let mut s = SendBatch::<1>::new(&a);
    s.write(1, &to_a, src.sge(0, 56).unwrap(), old).unwrap();
    // SAFETY: `src` is never written; the completion is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cq, 1)[0].result().unwrap();
    // Access by copying: the peer's bytes, then ours untouched beyond its range.
    let mut seen = [0u64; 8];
    target.copy_to_slice(0, &mut seen).unwrap();
    assert_eq!(&seen[..7], &[0x5a5a_5a5a_5a5a_5a5a; 7]);
    assert_eq!(seen[7], 0x0102_0304_0506_0708);
    assert_eq!(target.read(3).unwrap(), 0x5a5a_5a5a_5a5a_5a5a);
    assert_eq!(
        target.read(8),
        Err(Error::Invalid(InvalidInput::SgeOutOfBounds {
            offset: 64,
            len: 8
        }))
    );

    // Re-registration revokes the old keys: a write through them reaches nothing.
    target.reregister().unwrap();
    let fresh = target.remote();
    assert_ne!(fresh.rkey(), old.rkey());
    s.clear();
    s.write(2, &to_a, src.sge(0, 8).unwrap(), old).unwrap();
    // SAFETY: as above.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cq, 1)[0];
    assert_eq!(c.efa_status(), EfaStatus::REMOTE_BAD_ADDRESS);

    // Closing ends the remote right and gives plain memory back.
    let back: Vec<u64> = target.close().unwrap();
    assert_eq!(back[7], 0x0102_0304_0506_0708);
    s.clear();
    s.write(3, &to_a, src.sge(0, 8).unwrap(), fresh).unwrap();
    // SAFETY: as above.
    unsafe { a.post_send(&s) }.unwrap();
    let c = expect_n(&cq, 1)[0];
    assert_eq!(c.efa_status(), EfaStatus::REMOTE_BAD_ADDRESS);
    assert_eq!(
        back[0], 0x5a5a_5a5a_5a5a_5a5a,
        "nothing written after close"
    );
}

#[test]
fn hole_2_sges_and_peers_of_another_pd_or_device_are_refused() {
    const IOVA: u64 = 0x7000_0000;
    let ctx0 = open(0);
    let ctx1 = open(1);
    let pd0 = ctx0.alloc_pd().unwrap();
    let pd1 = ctx1.alloc_pd().unwrap();
    let other_pd0 = ctx0.alloc_pd().unwrap();
    let cq = ctx0.create_ext_cq(CqOptions::new(1024)).unwrap();
    let b = rts_qp(&pd0, &cq, &QpConfig::srd(), QKEY_B);
    // The collision the hole used: registrations on both devices until a device-0 MR and
    // a device-1 MR share an lkey (the keys are per device).
    fn reg<'pd>(pd: &'pd BPd<'_>) -> Mr<&'pd BPd<'pd>, Vec<u8>> {
        pd.register_with_iova(vec![0u8; 64], IOVA, AccessFlags::LOCAL_WRITE)
            .unwrap()
    }
    // Alternate between the devices until a key of one is also a key of the other (other
    // tests of this binary register and deregister on the same devices meanwhile, so the
    // keys need not grow in step).
    let (mut victims, mut foreign) = (Vec::new(), Vec::new());
    let (mut keys0, mut keys1) = (
        std::collections::HashMap::new(),
        std::collections::HashMap::new(),
    );
    let mut pair = None;
    while pair.is_none() && victims.len() < 30_000 {
        let v = reg(&pd0);
        keys0.insert(v.lkey(), victims.len());
        pair = keys1.get(&v.lkey()).map(|&j| (victims.len(), j));
        victims.push(v);
        if pair.is_none() {
            let f = reg(&pd1);
            keys1.insert(f.lkey(), foreign.len());
            pair = keys0.get(&f.lkey()).map(|&i| (i, foreign.len()));
            foreign.push(f);
        }
    }
    let (i, j) = pair.expect("no colliding lkeys found");
    let (victim, other) = (&victims[i], &foreign[j]);
    assert_eq!(victim.lkey(), other.lkey(), "no colliding lkeys found");
    let same_device = other_pd0
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let wrong_sge = Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Sge)));
    let mut r = RecvBatch::<4>::new(&b);
    assert_eq!(r.push(1, other.sge(0, 64).unwrap()), wrong_sge);
    // Another PD of the same device: refused the same way.
    assert_eq!(r.push(2, same_device.sge_all().unwrap()), wrong_sge);
    assert!(r.is_empty(), "nothing of another PD was added");
    // A list may not mix PDs either.
    assert_eq!(
        SgeList::<2>::new(&[victim.sge_all().unwrap(), same_device.sge_all().unwrap()]).map(drop),
        wrong_sge
    );
    r.push(3, victim.sge_all().unwrap()).unwrap();

    // Peers: an AH of another PD (or device) is refused for sends.
    let a = rts_qp(&pd0, &cq, &QpConfig::srd(), QKEY_A);
    let foreign_peer = other_pd0.connect(&b.endpoint()).unwrap();
    let far_peer = pd1.connect(&b.endpoint()).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    assert_eq!(
        s.send_inline(1, &foreign_peer, b"x"),
        Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Peer)))
    );
    assert_eq!(
        s.send_inline(1, &far_peer, b"x"),
        Err(Error::Invalid(InvalidInput::WrongPd(PdObject::Peer)))
    );
    assert!(s.is_empty());

    // A batch built for one QP is refused by another (its checks were the other's).
    let mut for_b = RecvBatch::<1>::new(&b);
    for_b.push(4, victim.sge_all().unwrap()).unwrap();
    assert_eq!(
        // SAFETY: refused before the device (asserted); `victim` is not touched anyway.
        unsafe { a.post_recv(&for_b) },
        Err(Error::Invalid(InvalidInput::WrongQp))
    );
    assert!(victim.as_slice().iter().all(|&x| x == 0));
}

#[test]
fn hole_3_remote_access_to_borrowed_memory_is_refused() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let mut stack = [0u8; 64];
    let needs_owned = Err(Error::Invalid(InvalidInput::RemoteAccessNeedsOwnedMemory));
    assert_eq!(
        pd.register(&mut stack[..], AccessFlags::REMOTE_READ)
            .map(drop),
        needs_owned
    );
    assert_eq!(
        pd.register_remote_write(&mut stack[..], AccessFlags::LOCAL_WRITE)
            .map(drop),
        needs_owned
    );
    // Borrowed memory is fine without remote rights ...
    let mr = pd
        .register(&mut stack[..], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(mr.len(), 64);
    drop(mr);
    // ... and owned memory with them (a leaked Mr leaks its Vec: never reused).
    let owned = pd
        .register(vec![0u8; 64], AccessFlags::REMOTE_READ)
        .unwrap();
    assert_eq!(owned.close().unwrap().len(), 64);
    // The same rule for dma-buf registrations whose owner is borrowed.
    let file = tempfile(4096);
    let fd = DmaBufFd::new(
        std::os::fd::OwnedFd::from(file.try_clone().unwrap()),
        0,
        4096,
    );
    assert_eq!(
        pd.register_dmabuf(&fd, 0x3000_0000, AccessFlags::REMOTE_READ)
            .map(drop),
        needs_owned
    );
    let local = pd
        .register_dmabuf(&fd, 0x3000_0000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    drop(local);
    let owned = pd
        .register_dmabuf(
            fd,
            0x3000_0000,
            // Remote write needs local write (the kernel's rule, EINVAL otherwise).
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    assert_eq!(owned.len(), 4096);
}

/// A sealed efa-sim memfd standing in for a dma-buf (the software device maps the fd
/// range; it refuses plain files and unsealed memfds, as the kernel refuses non-dma-bufs).
fn tempfile(len: u64) -> std::fs::File {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: NUL-terminated name and flags; returns a new fd or -1.
    let fd =
        unsafe { libc::memfd_create(c"efa-sim-ts-soundness".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: the fd was just created and is owned by nobody else.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(len).unwrap();
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own fd with an int seal argument.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    assert_eq!(rc, 0, "F_ADD_SEALS");
    f
}
