//! Shared-memory inboxes: how processes of one host exchange packets without a socket.
//!
//! Every endpoint (one device in one process) owns an inbox: a control page and a byte
//! ring ([`super::shm_ring`]) that any process of the same user may append frames to and
//! only the owner consumes. The ring lives in an anonymous shared-memory file
//! (`memfd_create`, so it is RAM, never a disk file system) sealed against shrinking and
//! growing (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): nobody can truncate it under a
//! mapping, so no process that maps it can be made to fault (`SIGBUS`) by a peer. It goes
//! away with its owner (once its last mapping is gone).
//!
//! It is found through a 64-byte *pointer file* `slot-<S>.dev-<D>.inbox` in the lock
//! directory next to the slot lock (mode 0600, created under a private name and renamed
//! into place), which names the owner and the descriptor number of the ring in it; a
//! sender opens the ring as `/proc/<pid>/fd/<fd>` (same user: allowed without ptrace
//! rights). The owner removes its pointer file at exit; one left by a killed process is
//! removed by whoever finds its owner dead while nobody holds that slot (see
//! [`super::slots::sweep_slot`]), and by the next claimant of the slot.
//!
//! A sender maps the inbox of a destination `(IP, port)` when
//!
//! * the destination has our own address (`EFA_SIM_ADDR`: one host per address, as for
//!   libfabric), and its port names a `(device, slot)` of our port layout;
//! * the pointer file is a regular file owned by our effective uid and accessible to
//!   nobody else, whose identity block names exactly that address, our pid namespace and
//!   our network namespace (a process in another network namespace keeps using UDP,
//!   which is how it is reached there), and an owner process that is alive with the start
//!   time it recorded ([`super::pinned::Pinned`], so a dead owner is noticed and a reused
//!   pid proves nothing);
//! * the descriptor it names is a sealed shared-memory file of at least the ring's size
//!   whose own identity block equals the pointer file's (nonce included).
//!
//! Anything else goes over UDP ([`super::Endpoint`]), which is also the fallback where
//! memfds or `/proc` are not available; `EFA_SIM_TRANSPORT=udp` turns inboxes off,
//! `=shm` makes them mandatory between processes of one address.
//!
//! The identity block (the pointer file and the first 64 bytes of the ring's control page,
//! read with `pread`, never through the mapping) is [`super::shm_identity`].

use super::pinned::Pinned;
use super::shm_identity::Identity;
pub use super::shm_identity::IDENTITY;
use super::shm_ring::Ring;
use super::slots::{self, own_pid_namespace, process_start_time};
use std::fs::File;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Bytes of an inbox's ring (a power of two).
pub const RING_BYTES: u64 = 2 << 20;
/// The seals every ring carries (a mapping of it can never lose its pages).
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// The pointer file of `(slot, device)` under `dir`.
pub fn inbox_path(dir: &Path, slot: u32, device: u32) -> PathBuf {
    dir.join(format!("slot-{slot}.dev-{device}.inbox"))
}

/// Inode of this process's network namespace.
pub fn own_net_namespace() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino()))
}

/// A shared mapping of a whole ring file, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; see `Ring` for its accesses.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file`, which the caller proved to be a ring file
    /// sealed against shrinking and at least `len` long (so no access can fault).
    fn new(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file we opened read-write; no existing memory
        // is touched; failure is reported as MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`; its rings are gone with it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Whether `file` is a shared-memory file carrying every seal of [`SEALS`] and at least
/// `len` bytes long (it can then never shrink under a mapping).
fn sealed_ring_file(file: &File, len: usize) -> bool {
    // SAFETY: fcntl on a valid fd; F_GET_SEALS takes no argument (-1 on other files).
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SEALS == SEALS && file.metadata().is_ok_and(|m| m.len() >= len as u64)
}

/// This process's inbox for one endpoint.
pub struct Inbox {
    ring: Ring,
    _map: Mapping,
    /// The ring file (its descriptor number is published: kept open for life).
    _file: File,
    pointer: PathBuf,
}

impl Inbox {
    /// Creates (or replaces) the inbox of `(slot, device)` under `dir` for the endpoint
    /// bound at `addr`.
    pub fn create(dir: &Path, slot: u32, device: u32, addr: SocketAddrV4) -> io::Result<Inbox> {
        let pid = std::process::id();
        let missing = || io::Error::new(io::ErrorKind::NotFound, "no /proc view of this process");
        // SAFETY: a NUL-terminated name and flags; returns a new fd or -1.
        let fd = unsafe {
            libc::memfd_create(
                c"efa-sim-inbox".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let id = Identity {
            ring_bytes: RING_BYTES as u32,
            owner_pid: pid,
            ring_fd: fd as u32,
            owner_start: process_start_time(pid).ok_or_else(missing)?,
            pidns: own_pid_namespace().ok_or_else(missing)?,
            netns: own_net_namespace().ok_or_else(missing)?,
            addr,
            nonce: nonce(),
        };
        let len = id.file_len();
        file.set_len(len as u64)?;
        // SAFETY: fcntl on our own memfd, adding seals (an int argument).
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, SEALS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::new(&file, len)?;
        // SAFETY: the mapping is page aligned, CONTROL + RING_BYTES long (sealed: it stays
        // so), and lives as long as the ring (both in this Inbox).
        let ring = unsafe { Ring::new(map.ptr, RING_BYTES) };
        ring.reset();
        file.write_all_at(&id.encode(), 0)?;
        let pointer = inbox_path(dir, slot, device);
        let tmp = dir.join(format!("slot-{slot}.dev-{device}.inbox.{pid}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all_at(&id.encode(), 0)?;
        drop(f);
        std::fs::rename(&tmp, &pointer)?;
        slots::remove_at_exit(&pointer);
        Ok(Inbox {
            ring,
            _map: map,
            _file: file,
            pointer,
        })
    }

    /// The ring (this process is its only consumer).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        slots::keep_at_exit(&self.pointer);
        // Our slot is ours until exit: nobody else can have replaced the pointer file.
        let _ = std::fs::remove_file(&self.pointer);
    }
}

/// The ring file the pointer file of `(slot, device)` under `dir` names, proven as the
/// module docs say, with what the pointer says and the pinned owner. A pointer whose owner
/// is dead is swept away (if nobody holds its slot).
fn open_ring(dir: &Path, slot: u32, device: u32) -> Option<(File, Identity, Pinned)> {
    let path = inbox_path(dir, slot, device);
    let pointer = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let meta = pointer.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return None;
    }
    let mut raw = [0u8; IDENTITY];
    pointer.read_exact_at(&mut raw, 0).ok()?;
    drop(pointer);
    let id = Identity::decode(&raw)?;
    if Some(id.pidns) != own_pid_namespace() || Some(id.netns) != own_net_namespace() {
        return None;
    }
    let Some(owner) = Pinned::new(id.owner_pid, id.owner_start) else {
        slots::sweep_slot(dir, slot);
        return None;
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/{}/fd/{}", id.owner_pid, id.ring_fd))
        .ok()?;
    let mut inner = [0u8; IDENTITY];
    if !sealed_ring_file(&file, id.file_len())
        || file.metadata().ok()?.uid() != euid
        || file.read_exact_at(&mut inner, 0).is_err()
        || inner != raw
        || !owner.alive()
    {
        return None;
    }
    Some((file, id, owner))
}

/// Opens the ring file of the live inbox of `(slot, device)` under `dir` read-write,
/// unmapped (for tools and tests that inspect or damage a ring the way a hostile
/// process of the same user could).
pub fn open_ring_file(dir: &Path, slot: u32, device: u32) -> io::Result<File> {
    open_ring(dir, slot, device)
        .map(|(f, _, _)| f)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no live inbox there"))
}

/// A mapped inbox of another endpoint on this host.
pub struct Link {
    ring: Ring,
    _map: Mapping,
    owner: Pinned,
}

impl Link {
    /// Maps the inbox of `(slot, device)` under `dir` if it proves to be the live inbox of
    /// the endpoint at `to` in our namespaces (see the module docs).
    pub fn open(dir: &Path, slot: u32, device: u32, to: SocketAddrV4) -> Option<Link> {
        let (file, id, owner) = open_ring(dir, slot, device)?;
        if id.addr != to {
            return None;
        }
        let map = Mapping::new(&file, id.file_len()).ok()?;
        // SAFETY: page aligned (mmap), CONTROL + ring_bytes long and sealed against
        // shrinking (checked in `open_ring`), kept alive with the ring in this Link.
        let ring = unsafe { Ring::new(map.ptr, u64::from(id.ring_bytes)) };
        Some(Link {
            ring,
            _map: map,
            owner,
        })
    }

    /// The peer's ring (we append to it).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Whether the inbox's owner is still alive (a syscall: call it when in doubt).
    pub fn alive(&self) -> bool {
        self.owner.alive()
    }
}

/// A number that differs between inbox incarnations.
fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::super::shm_ring::CONTROL;
    use super::*;

    fn test_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("efa-sim-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_inbox_is_found_only_by_its_own_address_and_while_its_owner_lives() {
        let dir = test_dir("shm-test");
        let me: SocketAddrV4 = "127.0.0.1:40001".parse().unwrap();
        let inbox = Inbox::create(&dir, 3, 0, me).unwrap();
        let link = Link::open(&dir, 3, 0, me).expect("own inbox opens");
        assert!(link.alive());
        link.ring().push(me, b"hello").unwrap();
        let (mut head, mut buf) = (0u64, vec![0u8; 64]);
        assert_eq!(
            inbox.ring().pop(&mut head, &mut buf, 64),
            super::super::shm_ring::Pop::Frame(5, me)
        );
        assert_eq!(&buf[..5], b"hello");
        let other: SocketAddrV4 = "127.0.0.1:40002".parse().unwrap();
        assert!(
            Link::open(&dir, 3, 0, other).is_none(),
            "names another address"
        );
        assert!(Link::open(&dir, 4, 0, me).is_none(), "no such inbox");
        // Readable by others: refused.
        use std::os::unix::fs::PermissionsExt;
        let p = inbox_path(&dir, 3, 0);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(Link::open(&dir, 3, 0, me).is_none(), "mode 0644");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        drop(link);
        drop(inbox);
        assert!(!p.exists(), "the owner removes its pointer file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nobody_can_shrink_a_ring_under_its_mappings() {
        let dir = test_dir("shm-seal");
        let me: SocketAddrV4 = "127.0.0.1:40003".parse().unwrap();
        let inbox = Inbox::create(&dir, 5, 1, me).unwrap();
        let link = Link::open(&dir, 5, 1, me).unwrap();
        // What a hostile process of the same user can open: the ring file itself.
        let f = open_ring_file(&dir, 5, 1).unwrap();
        let len = f.metadata().unwrap().len();
        assert_eq!(len, (CONTROL as u64) + RING_BYTES);
        for short in [0, 4096, len - 1] {
            let e = f.set_len(short).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "shrink to {short}");
        }
        assert_eq!(f.metadata().unwrap().len(), len);
        // The whole ring is still there: a frame at the very end of the data area.
        let (mut head, mut buf) = (0u64, vec![0u8; 64]);
        let frame = super::super::shm_ring::frame_len(48);
        let mut at = 0;
        while at + frame <= RING_BYTES - frame {
            link.ring().push(me, &[7; 48]).unwrap();
            assert!(matches!(
                inbox.ring().pop(&mut head, &mut buf, 64),
                super::super::shm_ring::Pop::Frame(48, _)
            ));
            at += frame;
        }
        link.ring().push(me, &[9; 48]).unwrap();
        inbox.ring().pop(&mut head, &mut buf, 64);
        assert_eq!(&buf[..48], &[9; 48]);
        drop((link, inbox));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pointer_to_an_unsealed_or_foreign_file_is_refused() {
        let dir = test_dir("shm-forged");
        let me: SocketAddrV4 = "127.0.0.1:40004".parse().unwrap();
        let inbox = Inbox::create(&dir, 6, 0, me).unwrap();
        let p = inbox_path(&dir, 6, 0);
        let mut raw = [0u8; IDENTITY];
        File::open(&p).unwrap().read_exact_at(&mut raw, 0).unwrap();
        let good = Identity::decode(&raw).unwrap();
        // Point at an ordinary (unsealable) file of ours with the same identity in it.
        let plain = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("plain"))
            .unwrap();
        plain.set_len(good.file_len() as u64).unwrap();
        plain.write_all_at(&raw, 0).unwrap();
        let forged = Identity {
            ring_fd: plain.as_raw_fd() as u32,
            ..good
        };
        plain.write_all_at(&forged.encode(), 0).unwrap();
        std::fs::write(&p, forged.encode()).unwrap();
        assert!(Link::open(&dir, 6, 0, me).is_none(), "not sealed");
        // The right descriptor but another nonce: not the inbox it claims to be.
        let stale = Identity { nonce: 1, ..good };
        std::fs::write(&p, stale.encode()).unwrap();
        assert!(Link::open(&dir, 6, 0, me).is_none(), "nonce");
        std::fs::write(&p, raw).unwrap();
        assert!(Link::open(&dir, 6, 0, me).is_some(), "restored");
        drop(inbox);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_dead_owners_pointer_is_swept_when_its_slot_is_free() {
        let dir = test_dir("shm-dead");
        let me: SocketAddrV4 = "127.0.0.1:40005".parse().unwrap();
        let id = Identity {
            ring_bytes: RING_BYTES as u32,
            owner_pid: 0x7fff_fff0,
            ring_fd: 3,
            owner_start: 1,
            pidns: own_pid_namespace().unwrap(),
            netns: own_net_namespace().unwrap(),
            addr: me,
            nonce: 2,
        };
        let p = inbox_path(&dir, 9, 0);
        let lock = dir.join("slot-9");
        std::fs::write(&lock, b"").unwrap();
        let write_pointer = || {
            std::fs::write(&p, id.encode()).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        // While somebody holds the slot, the pointer stays (the holder may be starting).
        write_pointer();
        let held = File::open(&lock).unwrap();
        // SAFETY: flock on a valid fd.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert!(Link::open(&dir, 9, 0, me).is_none());
        assert!(p.exists(), "slot held: kept");
        drop(held);
        assert!(Link::open(&dir, 9, 0, me).is_none());
        assert!(!p.exists(), "dead owner, free slot: swept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
