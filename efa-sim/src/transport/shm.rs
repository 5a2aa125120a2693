//! Shared-memory inboxes: how processes of one host exchange packets without a socket.
//!
//! Every endpoint (one device in one process) owns an inbox, a file
//! `slot-<S>.dev-<D>.inbox` in the lock directory next to its slot lock (mode 0600, created
//! under a private name and renamed into place): a control page and a byte ring
//! ([`super::shm_ring`]) that any process of the same user may append frames to and only
//! the owner consumes. A sender maps the inbox of a destination `(IP, port)` when
//!
//! * the destination has our own address (`EFA_SIM_ADDR`: one host per address, as for
//!   libfabric), and its port names a `(device, slot)` of our port layout;
//! * the inbox is a regular file owned by our effective uid and accessible to nobody
//!   else, whose identity block names exactly that address, our pid namespace and our
//!   network namespace (a process in another network namespace keeps using UDP, which is
//!   how it is reached there), and an owner process that is alive with the start time it
//!   recorded (pinned with a pidfd, so a dead owner is noticed and a reused pid proves
//!   nothing).
//!
//! Anything else goes over UDP ([`super::Endpoint`]); `EFA_SIM_TRANSPORT=udp` turns
//! inboxes off, `=shm` makes them mandatory between processes of one address.
//!
//! Identity block (the first 64 bytes of the control page, little-endian, written before
//! the rename and read by openers with `pread`, never through the mapping):
//! `magic u64 "EFASIMQ1", version u32, ring_bytes u32, owner_pid u32, 0 u32,
//! owner_start u64, pidns u64, netns u64, ip u32, port u16, 0 u16, nonce u64`.

use super::shm_ring::{Ring, CONTROL};
use super::slots::{own_pid_namespace, process_start_time};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Bytes of an inbox's ring (a power of two).
pub const RING_BYTES: u64 = 2 << 20;
const MAGIC: u64 = u64::from_le_bytes(*b"EFASIMQ1");
const VERSION: u32 = 1;
const IDENTITY: usize = 64;

/// The inbox file of `(slot, device)` under `dir`.
pub fn inbox_path(dir: &Path, slot: u32, device: u32) -> PathBuf {
    dir.join(format!("slot-{slot}.dev-{device}.inbox"))
}

/// Inode of this process's network namespace.
pub fn own_net_namespace() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino()))
}

/// What an inbox says about its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    ring_bytes: u32,
    owner_pid: u32,
    owner_start: u64,
    pidns: u64,
    netns: u64,
    addr: SocketAddrV4,
    nonce: u64,
}

impl Identity {
    fn encode(&self) -> [u8; IDENTITY] {
        let mut b = [0u8; IDENTITY];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.ring_bytes.to_le_bytes());
        b[16..20].copy_from_slice(&self.owner_pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.owner_start.to_le_bytes());
        b[32..40].copy_from_slice(&self.pidns.to_le_bytes());
        b[40..48].copy_from_slice(&self.netns.to_le_bytes());
        b[48..52].copy_from_slice(&u32::from(*self.addr.ip()).to_le_bytes());
        b[52..54].copy_from_slice(&self.addr.port().to_le_bytes());
        b[56..64].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    fn decode(b: &[u8; IDENTITY]) -> Option<Identity> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        if u64_at(0) != MAGIC || u32_at(8) != VERSION {
            return None;
        }
        let ring_bytes = u32_at(12);
        if !ring_bytes.is_power_of_two() || !(1 << 16..=1 << 26).contains(&ring_bytes) {
            return None;
        }
        Some(Identity {
            ring_bytes,
            owner_pid: u32_at(16),
            owner_start: u64_at(24),
            pidns: u64_at(32),
            netns: u64_at(40),
            addr: SocketAddrV4::new(
                Ipv4Addr::from(u32_at(48)),
                u16::from_le_bytes([b[52], b[53]]),
            ),
            nonce: u64_at(56),
        })
    }
}

/// A shared mapping of a whole inbox file, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; see `Ring` for its accesses.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &std::fs::File, len: usize) -> io::Result<Mapping> {
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

/// This process's inbox for one endpoint.
pub struct Inbox {
    ring: Ring,
    _map: Mapping,
}

impl Inbox {
    /// Creates (or replaces) the inbox of `(slot, device)` under `dir` for the endpoint
    /// bound at `addr`.
    pub fn create(dir: &Path, slot: u32, device: u32, addr: SocketAddrV4) -> io::Result<Inbox> {
        let pid = std::process::id();
        let missing = || io::Error::new(io::ErrorKind::NotFound, "no /proc view of this process");
        let id = Identity {
            ring_bytes: RING_BYTES as u32,
            owner_pid: pid,
            owner_start: process_start_time(pid).ok_or_else(missing)?,
            pidns: own_pid_namespace().ok_or_else(missing)?,
            netns: own_net_namespace().ok_or_else(missing)?,
            addr,
            nonce: nonce(),
        };
        let path = inbox_path(dir, slot, device);
        let tmp = dir.join(format!("slot-{slot}.dev-{device}.inbox.{pid}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let len = CONTROL + RING_BYTES as usize;
        file.set_len(len as u64)?;
        let map = Mapping::new(&file, len)?;
        // SAFETY: the mapping is page aligned, CONTROL + RING_BYTES long, and lives as
        // long as the ring (both in this Inbox).
        let ring = unsafe { Ring::new(map.ptr, RING_BYTES) };
        ring.reset();
        file.write_all_at(&id.encode(), 0)?;
        std::fs::rename(&tmp, &path)?;
        Ok(Inbox { ring, _map: map })
    }

    /// The ring (this process is its only consumer).
    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

/// A mapped inbox of another endpoint on this host.
pub struct Link {
    ring: Ring,
    _map: Mapping,
    owner: OwnedFd,
}

impl Link {
    /// Maps the inbox of `(slot, device)` under `dir` if it proves to be the live inbox of
    /// the endpoint at `to` in our namespaces (see the module docs).
    pub fn open(dir: &Path, slot: u32, device: u32, to: SocketAddrV4) -> Option<Link> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(inbox_path(dir, slot, device))
            .ok()?;
        let meta = file.metadata().ok()?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return None;
        }
        let mut raw = [0u8; IDENTITY];
        file.read_exact_at(&mut raw, 0).ok()?;
        let id = Identity::decode(&raw)?;
        let len = CONTROL + id.ring_bytes as usize;
        if id.addr != to
            || meta.len() < len as u64
            || Some(id.pidns) != own_pid_namespace()
            || Some(id.netns) != own_net_namespace()
        {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, id.owner_pid as libc::pid_t, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let owner = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        // Read after pinning: if the start time matches, the pidfd is that process.
        if process_start_time(id.owner_pid) != Some(id.owner_start) || exited(&owner) {
            return None;
        }
        let map = Mapping::new(&file, len).ok()?;
        // SAFETY: page aligned (mmap), CONTROL + ring_bytes long (the file holds that
        // much, checked above), kept alive with the ring in this Link.
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
        !exited(&self.owner)
    }
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call; zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n != 0
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
    use super::*;

    #[test]
    fn identity_round_trips_and_rejects_garbage() {
        let id = Identity {
            ring_bytes: RING_BYTES as u32,
            owner_pid: 42,
            owner_start: 7,
            pidns: 9,
            netns: 11,
            addr: "127.0.0.1:47005".parse().unwrap(),
            nonce: 0xdead,
        };
        let b = id.encode();
        assert_eq!(Identity::decode(&b), Some(id));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(Identity::decode(&bad), None, "magic");
        let mut bad = b;
        bad[12..16].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(Identity::decode(&bad), None, "ring size");
    }

    #[test]
    fn an_inbox_is_found_only_by_its_own_address_and_while_its_owner_lives() {
        let dir = std::env::temp_dir().join(format!("efa-sim-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
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
        drop(inbox);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
