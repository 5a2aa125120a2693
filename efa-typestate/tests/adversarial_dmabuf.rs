//! Adversarial dma-buf registrations through the safe API: `DmaBufFd::new` takes any fd,
//! so the device must refuse what the kernel refuses. A regular file (or a memfd without
//! seals) mapped as a "dma-buf" could be truncated under the mapping, and the device's
//! next write into it would kill the process with SIGBUS; `ibv_reg_dmabuf_mr` answers
//! EINVAL instead, as the kernel's `dma_buf_get` does for a file that is no dma-buf.

#[macro_use]
mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use common::*;
use efa_typestate::*;

const LEN: u64 = 8192;

/// A memfd named `name` of `LEN` bytes carrying `seals`.
fn memfd(name: &std::ffi::CStr, seals: libc::c_int) -> std::fs::File {
    // SAFETY: NUL-terminated name and flags; returns a new fd or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: the fd was just created and is owned by nobody else.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(LEN).unwrap();
    if seals != 0 {
        // SAFETY: fcntl on our own fd with an int seal argument.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, seals) };
        assert_eq!(rc, 0, "F_ADD_SEALS");
    }
    f
}

/// Registering `file` as a dma-buf: the typed error, or the registration's length.
fn register(pd: &BPd<'_>, file: &std::fs::File) -> Result<usize> {
    let fd = DmaBufFd::new(OwnedFd::from(file.try_clone().unwrap()), 0, LEN as usize);
    pd.register_dmabuf(fd, 0x4000_0000, AccessFlags::LOCAL_WRITE)
        .map(|mr| mr.len() as usize)
}

fn einval() -> Result<usize> {
    Err(Error::Verb {
        verb: Verb::RegDmabufMr,
        errno: Errno::EINVAL,
    })
}

#[test]
fn a_regular_file_is_not_a_dmabuf() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let path = std::env::temp_dir().join(format!("efa-ts-adv-dmabuf-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    file.set_len(LEN).unwrap();
    assert_eq!(register(&pd, &file), einval());
    // The attack that followed (shrink it, then have the device write): nothing is mapped,
    // and the device keeps working.
    file.set_len(0).unwrap();
    pair!(_c, pd2, cqa, _cqb, a, _b, to_b, _to_a);
    let src = pd2
        .register(b"still alive".to_vec(), AccessFlags::empty())
        .unwrap();
    let dst = write_target(&pd2, 64);
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        1,
        &to_b,
        src.sge_all().unwrap(),
        dst.remote().slice(0, 11).unwrap(),
    )
    .unwrap();
    // SAFETY: `src` is owned by a live Mr and not written after the post; the completion
    // is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    assert_eq!(&dst.to_vec()[..11], b"still alive");
}

#[test]
fn a_memfd_without_the_seals_is_not_a_dmabuf() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(register(&pd, &memfd(c"efa-sim-unsealed", 0)), einval());
    // Shrinking alone is not enough: without F_SEAL_SEAL it is not efa-sim's stand-in.
    let shrink_only = memfd(c"efa-sim-shrink", libc::F_SEAL_SHRINK);
    assert_eq!(register(&pd, &shrink_only), einval());
    // Sealed, but not an efa-sim file.
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    assert_eq!(register(&pd, &memfd(c"someone-else", seals)), einval());
}

#[test]
fn a_sealed_stand_in_registers_and_cannot_be_shrunk() {
    let ctx = open(0);
    let pd = ctx.alloc_pd().unwrap();
    let file = memfd(c"efa-sim-ts-adv", libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL);
    assert_eq!(register(&pd, &file), Ok(LEN as usize));
    let e = file.set_len(0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    // And RDMA into it lands.
    pair!(_c, pd2, cqa, _cqb, a, _b, to_b, _to_a);
    let fd = DmaBufFd::new(OwnedFd::from(file.try_clone().unwrap()), 0, LEN as usize);
    let mr = pd2
        .register_dmabuf(
            fd,
            0x4000_0000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let src = pd2
        .register(b"sealed".to_vec(), AccessFlags::empty())
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        1,
        &to_b,
        src.sge_all().unwrap(),
        mr.remote().slice(100, 6).unwrap(),
    )
    .unwrap();
    // SAFETY: `src` is owned by a live Mr and not written after the post; the completion
    // is polled on the next line, while `mr` is registered.
    unsafe { a.post_send(&s) }.unwrap();
    expect_n(&cqa, 1)[0].result().unwrap();
    let mut back = [0u8; 6];
    file.read_exact_at(&mut back, 100).unwrap();
    assert_eq!(&back, b"sealed");
}
