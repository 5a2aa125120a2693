//! Moves packets between software devices: one UDP socket per opened device
//! per process.
//!
//! # Addressing
//!
//! A GID names `(IPv4 address, device index)` (see [`crate::model::gid_for`]).
//! Every process claims a *slot* `0..128` (an `flock`ed file
//! `slot-<N>` under the lock directory, `EFA_SIM_LOCK_DIR`, default
//! `/tmp/efa-sim-<uid>`; see [`slots`]), so
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
//! A responder reads it ([`Endpoint::read_owner`]) to prove that a request naming
//! process memory really comes from the process it names (see
//! `crate::model::runtime`, "Trust model").
//!
//! # Faults
//!
//! `EFA_SIM_FAULTS=seed=42,reorder=0.2,delay_us=50,loss=0.05,dup=0.05` ([`FaultSpec`])
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
pub mod slots;
pub mod wire;

use crate::config::Config;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use faults::{FaultSpec, Faults};
pub use slots::{own_pid_namespace, process_start_time, SlotOwner};

/// Slots (processes per host).
pub const SLOTS: u32 = 128;
/// Bits of the QPN that index a QP within its process.
pub const QP_INDEX_BITS: u32 = 9;

/// UDP port of `(device, slot)` above `base`.
pub fn port_for(base: u16, device: u32, slot: u32) -> Option<u16> {
    let p = base as u32 + device * SLOTS + slot;
    u16::try_from(p).ok()
}

/// The slot a QPN belongs to.
pub fn slot_of_qpn(qpn: u32) -> u32 {
    (qpn >> QP_INDEX_BITS) & (SLOTS - 1)
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
    port_base: u16,
    slot: u32,
    lock_dir: PathBuf,
    faults: Faults,
    delayed: Mutex<Vec<Delayed>>,
}

impl Endpoint {
    /// Binds the endpoint of `device` at `ip` for this process's slot under the
    /// configured lock directory.
    pub fn bind(ip: Ipv4Addr, device: u32, config: &Config) -> Result<Endpoint, String> {
        let slot = slots::process_slot(&config.lock_dir)?;
        let port = port_for(config.port_base, device, slot).ok_or("port out of range")?;
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
        slots::publish_bound(&config.lock_dir, local);
        Ok(Endpoint {
            sock,
            local,
            port_base: config.port_base,
            slot,
            lock_dir: config.lock_dir.clone(),
            faults: Faults::new(&config.faults),
            delayed: Mutex::new(Vec::new()),
        })
    }

    /// The slot this endpoint's process holds.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// UDP address of QP `qpn` on device `(ip, device)` (same port layout as ours).
    pub fn addr_of(&self, ip: Ipv4Addr, device: u32, qpn: u32) -> Option<SocketAddrV4> {
        Some(SocketAddrV4::new(
            ip,
            port_for(self.port_base, device, slot_of_qpn(qpn))?,
        ))
    }

    /// The owner record of `slot` in this endpoint's lock directory.
    pub fn read_owner(&self, slot: u32) -> Option<SlotOwner> {
        slots::read_owner(&self.lock_dir, slot)
    }

    /// Whether datagrams of this endpoint are subject to faults.
    pub fn faulty(&self) -> bool {
        self.faults.active()
    }

    /// Sends one datagram, applying the configured faults. Errors are
    /// swallowed: the reliability layer retransmits.
    pub fn send(&self, data: &[u8], to: SocketAddrV4) {
        if !self.faults.active() {
            let _ = self.sock.send_to(data, to);
            return;
        }
        self.faults.count_send();
        if self.faults.roll(self.faults.spec.loss) {
            return;
        }
        let copies = if self.faults.roll(self.faults.spec.dup) {
            2
        } else {
            1
        };
        let mut delay = Duration::from_micros(self.faults.spec.delay_us);
        if self.faults.roll(self.faults.spec.reorder) {
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
    ) -> std::io::Result<()> {
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
            return Err(std::io::Error::last_os_error());
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
