//! Moves packets between software devices: one UDP socket per opened device
//! per process.
//!
//! # Addressing
//!
//! A GID names `(IPv4 address, device index)` (see [`crate::model::gid_for`]).
//! Every process claims a *slot* `0..128` (an `flock`ed file
//! `slot-<N>` under `EFA_SIM_LOCK_DIR`, default `/tmp/efa-sim-<uid>`), so
//! QPNs are unique per device across the processes of one host:
//! `QPN = slot << 9 | index` with `index` in `1..=511` (never 0, fits 16 bits).
//! The UDP port of `(device, slot)` is
//! `EFA_SIM_PORT_BASE (default 47000) + device * 128 + slot`, so
//! `(GID, QPN) → (IP, port)` is computed without any directory. Processes
//! in different network namespaces on one host share the lock directory (it
//! is a file system path), so their slots never collide either.
//!
//! # Owner records
//!
//! Next to `slot-<N>` the holder keeps `slot-<N>.owner` (mode 0600, replaced
//! atomically by rename): its pid, the start time of that pid
//! (`/proc/<pid>/stat`), its pid namespace and every address it has bound.
//! A responder reads it ([`read_owner`]) to prove that a request naming
//! process memory really comes from the process it names (see
//! `crate::model::runtime`, "Trust model").
//!
//! # Faults
//!
//! `EFA_SIM_FAULTS=seed=42,reorder=0.2,delay_us=50,loss=0.05,dup=0.05`
//! (every key optional): each outgoing datagram is dropped with
//! probability `loss`, sent twice with probability `dup`, held back for a
//! random 0..=1 ms (so later datagrams overtake it) with probability
//! `reorder`, and always held back `delay_us` microseconds. Requests and
//! responses are both subject to faults; the reliability layer
//! (retransmission + duplicate suppression in `crate::model`) hides them.
//! `kill_after=N` is the peer-kill knob: the process SIGKILLs itself when it
//! is about to send its N-th datagram (its peers' outstanding WRs then fail
//! within the bounded peer timeout of `crate::model::runtime`).

pub mod faults;
pub mod wire;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use faults::Faults;

/// Slots (processes per host).
pub const SLOTS: u32 = 128;
/// Bits of the QPN that index a QP within its process.
pub const QP_INDEX_BITS: u32 = 9;

/// First UDP port (`EFA_SIM_PORT_BASE`, default 47000).
pub fn port_base() -> u16 {
    static BASE: OnceLock<u16> = OnceLock::new();
    *BASE.get_or_init(|| {
        std::env::var("EFA_SIM_PORT_BASE")
            .ok()
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|b| (*b as u32) + 64 * SLOTS < 65536)
            .unwrap_or(47000)
    })
}

/// UDP port of `(device, slot)`.
pub fn port_for(device: u32, slot: u32) -> Option<u16> {
    let p = port_base() as u32 + device * SLOTS + slot;
    u16::try_from(p).ok()
}

/// The slot a QPN belongs to.
pub fn slot_of_qpn(qpn: u32) -> u32 {
    (qpn >> QP_INDEX_BITS) & (SLOTS - 1)
}

/// UDP address of QP `qpn` on device `(ip, device)`.
pub fn addr_of(ip: Ipv4Addr, device: u32, qpn: u32) -> Option<SocketAddrV4> {
    Some(SocketAddrV4::new(ip, port_for(device, slot_of_qpn(qpn))?))
}

/// The slot lock directory (`EFA_SIM_LOCK_DIR`, default `/tmp/efa-sim-<uid>`).
pub fn lock_dir() -> &'static str {
    static DIR: OnceLock<String> = OnceLock::new();
    DIR.get_or_init(|| {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        std::env::var("EFA_SIM_LOCK_DIR").unwrap_or_else(|_| format!("/tmp/efa-sim-{uid}"))
    })
}

/// This process's slot, claimed once with `flock` (held until exit).
pub fn process_slot() -> Result<u32, String> {
    static SLOT: OnceLock<Result<(u32, std::fs::File), String>> = OnceLock::new();
    SLOT.get_or_init(claim_slot)
        .as_ref()
        .map(|(s, _)| *s)
        .map_err(Clone::clone)
}

fn claim_slot() -> Result<(u32, std::fs::File), String> {
    let dir = lock_dir();
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create lock dir {dir}: {e}"))?;
    // Start at a pid-dependent slot so a slot (and its QPNs) is rarely reused
    // right after its process died.
    let first = std::process::id() % SLOTS;
    for slot in (0..SLOTS).map(|i| (first + i) % SLOTS) {
        let path = format!("{dir}/slot-{slot}");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {path}: {e}"))?;
        // SAFETY: flock on a valid, owned fd; non-blocking.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            // A record left by a dead holder must not survive into our tenure.
            let _ = std::fs::remove_file(owner_path(slot));
            return Ok((slot, file));
        }
    }
    Err(format!("all {SLOTS} process slots under {dir} are in use"))
}

fn owner_path(slot: u32) -> String {
    format!("{}/slot-{slot}.owner", lock_dir())
}

/// What a slot's owner record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotOwner {
    /// The slot.
    pub slot: u32,
    /// Pid of the holder (in its pid namespace).
    pub pid: u32,
    /// Start time of that pid (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
    /// Inode of the holder's pid namespace.
    pub pidns: u64,
    /// Every address the holder has bound.
    pub bound: Vec<SocketAddrV4>,
}

/// Start time (clock ticks after boot) of process `pid`, from `/proc`.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first one after ')'; start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Inode of this process's pid namespace.
pub fn own_pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino()))
}

/// Addresses this process has bound (all slots' endpoints).
static BOUND: Mutex<Vec<SocketAddrV4>> = Mutex::new(Vec::new());

/// Rewrites this process's owner record (write to a private file, rename).
fn publish_owner(slot: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pid = std::process::id();
    let start = process_start_time(pid).ok_or(io::ErrorKind::NotFound)?;
    let pidns = own_pid_namespace().ok_or(io::ErrorKind::NotFound)?;
    let bound = BOUND.lock().unwrap_or_else(|e| e.into_inner());
    let list: Vec<String> = bound.iter().map(|a| a.to_string()).collect();
    let text = format!(
        "efa-sim-owner slot={slot} pid={pid} start={start} pidns={pidns} bound={} end\n",
        list.join(",")
    );
    let path = owner_path(slot);
    let tmp = format!("{path}.{pid}.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, &path)
}

/// The owner record of `slot`, if one exists that this user wrote (owned by
/// our effective uid, writable by nobody else) and parses completely.
pub fn read_owner(slot: u32) -> Option<SlotOwner> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut f = std::fs::File::open(owner_path(slot)).ok()?;
    let meta = f.metadata().ok()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 || meta.len() > 8192 {
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    parse_owner(&text)
}

fn parse_owner(text: &str) -> Option<SlotOwner> {
    let line = text.strip_suffix(" end\n")?;
    let mut words = line.split(' ');
    if words.next()? != "efa-sim-owner" {
        return None;
    }
    let mut field = |key: &str| -> Option<&str> { words.next()?.strip_prefix(key) };
    let slot = field("slot=")?.parse().ok()?;
    let pid = field("pid=")?.parse().ok()?;
    let start = field("start=")?.parse().ok()?;
    let pidns = field("pidns=")?.parse().ok()?;
    let bound = field("bound=")?;
    let bound = if bound.is_empty() {
        Vec::new()
    } else {
        bound
            .split(',')
            .map(|a| a.parse().ok())
            .collect::<Option<Vec<SocketAddrV4>>>()?
    };
    if words.next().is_some() {
        return None;
    }
    Some(SlotOwner {
        slot,
        pid,
        start,
        pidns,
        bound,
    })
}

struct Delayed {
    due: Instant,
    to: SocketAddrV4,
    data: Vec<u8>,
}

/// One device's UDP endpoint in this process.
pub struct Endpoint {
    sock: UdpSocket,
    /// Local address the socket is bound to.
    pub local: SocketAddrV4,
    faults: Faults,
    delayed: Mutex<Vec<Delayed>>,
}

impl Endpoint {
    /// Binds the endpoint of `device` for this process's slot.
    pub fn bind(ip: Ipv4Addr, device: u32, faults: Faults) -> Result<Endpoint, String> {
        let slot = process_slot()?;
        let port = port_for(device, slot).ok_or("port out of range")?;
        let local = SocketAddrV4::new(ip, port);
        let sock = UdpSocket::bind(local).map_err(|e| format!("cannot bind {local}: {e}"))?;
        // Deep socket buffers keep bursts of a full send window from being
        // dropped (and then waiting for a retransmission). The *FORCE variants
        // exceed net.core.[rw]mem_max where we may (root / CAP_NET_ADMIN).
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            let size: libc::c_int = 8 << 20;
            for opt in [force, plain] {
                // SAFETY: valid fd, pointer to a live c_int of the given size.
                let rc = unsafe {
                    libc::setsockopt(
                        sock.as_raw_fd(),
                        libc::SOL_SOCKET,
                        opt,
                        (&size as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
                if rc == 0 {
                    break;
                }
            }
        }
        // Peers may trust process_vm_* requests from this address only once
        // our record names it (a failure just keeps them on the datagram path).
        BOUND.lock().unwrap_or_else(|e| e.into_inner()).push(local);
        let _ = publish_owner(slot);
        Ok(Endpoint {
            sock,
            local,
            faults,
            delayed: Mutex::new(Vec::new()),
        })
    }

    /// The slot this endpoint's process holds.
    pub fn slot(&self) -> u32 {
        (self.local.port() as u32 - port_base() as u32) % SLOTS
    }

    /// Sends one datagram, applying the configured faults. Errors are
    /// swallowed: the reliability layer retransmits.
    pub fn send(&self, data: &[u8], to: SocketAddrV4) {
        if !self.faults.active() {
            let _ = self.sock.send_to(data, to);
            return;
        }
        self.faults.count_send();
        if self.faults.roll(self.faults.loss) {
            return;
        }
        let copies = if self.faults.roll(self.faults.dup) {
            2
        } else {
            1
        };
        let mut delay = Duration::from_micros(self.faults.delay_us);
        if self.faults.roll(self.faults.reorder) {
            delay += Duration::from_micros(self.faults.next() % 1000);
        }
        for _ in 0..copies {
            if delay.is_zero() {
                let _ = self.sock.send_to(data, to);
            } else {
                let mut q = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
                q.push(Delayed {
                    due: Instant::now() + delay,
                    to,
                    data: data.to_vec(),
                });
            }
        }
    }

    /// Sends held-back datagrams that are due; returns whether some remain.
    pub fn flush_delayed(&self) -> bool {
        if !self.faults.active() {
            return false;
        }
        let now = Instant::now();
        let due: Vec<Delayed> = {
            let mut q = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
            if q.is_empty() {
                return false;
            }
            let (due, keep): (Vec<_>, Vec<_>) = q.drain(..).partition(|d| d.due <= now);
            *q = keep;
            due
        };
        for d in &due {
            let _ = self.sock.send_to(&d.data, d.to);
        }
        !self
            .delayed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Waits up to `timeout` for the socket to become readable.
    pub fn wait_readable(&self, timeout: Duration) {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(1000) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }

    /// Receives up to `bufs.len()` datagrams without blocking (recvmmsg);
    /// returns `(len, source)` per received datagram in `out`.
    pub fn recv_batch(
        &self,
        bufs: &mut [Vec<u8>],
        out: &mut Vec<(usize, SocketAddrV4)>,
    ) -> io::Result<()> {
        out.clear();
        let n = bufs.len().min(64);
        // SAFETY: zeroed sockaddr_in/iovec/mmsghdr are valid initial values.
        let mut addrs: [libc::sockaddr_in; 64] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; 64] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            iovs[i] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: bufs[i].len(),
            };
            hdrs[i].msg_hdr.msg_iov = &mut iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
            hdrs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        }
        // SAFETY: every header points at a live iovec/sockaddr of the stated sizes,
        // and every iovec at a live buffer of its length; n <= 64.
        let got = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        for i in 0..got as usize {
            let a = &addrs[i];
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            out.push((
                hdrs[i].msg_len as usize,
                SocketAddrV4::new(ip, u16::from_be(a.sin_port)),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_record_round_trip_and_rejects() {
        let ok = "efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound=127.0.0.1:47005,10.0.0.1:47133 end\n";
        let o = parse_owner(ok).unwrap();
        assert_eq!((o.slot, o.pid, o.start, o.pidns), (5, 42, 99, 7));
        assert_eq!(
            o.bound,
            vec![
                "127.0.0.1:47005".parse().unwrap(),
                "10.0.0.1:47133".parse().unwrap()
            ]
        );
        assert_eq!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound= end\n")
                .unwrap()
                .bound,
            vec![]
        );
        // Truncated, extended or garbled records prove nothing.
        assert!(parse_owner(&ok[..ok.len() - 5]).is_none());
        assert!(parse_owner("efa-sim-owner slot=5 pid=4x start=99 pidns=7 bound= end\n").is_none());
        assert!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound= x end\n").is_none()
        );
        assert!(
            parse_owner("efa-sim-owner slot=5 pid=42 start=99 pidns=7 bound=1.2.3.4 end\n")
                .is_none()
        );
    }

    #[test]
    fn start_time_of_this_process_is_stable() {
        let pid = std::process::id();
        let a = process_start_time(pid).unwrap();
        assert_eq!(process_start_time(pid), Some(a));
        assert!(own_pid_namespace().is_some());
    }
}
