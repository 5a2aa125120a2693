//! Moves packets between software devices: per opened device and process, one UDP
//! socket and one shared-memory inbox ([`shm`]). Packets to an endpoint of this host's
//! address go into its inbox when it has a usable one (same user, pid and network
//! namespace; [`routes`] decides per destination), else over UDP (other hosts, other
//! network namespaces, peers without inbox). `EFA_SIM_TRANSPORT=udp|shm` forces either
//! (see [`crate::config::Transport`]). Both carry the same datagrams, so the reliability
//! layer above is the same for both.
//!
//! # Waking a sleeping receiver
//!
//! A process's engine thread sleeps in `poll` on its UDP socket (after watching its inbox
//! for a moment when it just had work and nobody polls). Before it sleeps it sets its
//! inbox's sleeping flag; the first sender that appends a frame afterwards clears the
//! flag and sends a 4-byte wake datagram ([`WAKE`]) to the socket: a sender that finds
//! the flag clear makes no syscall at all. While a consumer's
//! pollers drive the inbox themselves (see `crate::model::runtime`), its engine sleeps
//! without the flag and nobody pays for a wake-up.
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
//! `EFA_SIM_PORT_BASE (default 24000) + device * 128 + slot`, so
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
//! (every key optional), on both transports alike: each outgoing datagram is dropped with
//! probability `loss`, sent twice with probability `dup`, held back for a
//! random 0..=1 ms (so later datagrams overtake it) with probability
//! `reorder`, and always held back `delay_us` microseconds. Requests,
//! responses and acknowledgement packets are all subject to faults; the reliability layer
//! (retransmission + duplicate suppression in `crate::model`) hides them.
//! `kill_after=N` is the peer-kill knob: the process SIGKILLs itself when it
//! is about to send its N-th datagram (its peers' outstanding WRs then fail
//! within the bounded peer timeout of `crate::model::runtime`).

pub mod faults;
pub mod pinned;
pub mod routes;
pub mod shm;
pub mod shm_identity;
pub mod shm_ring;
pub mod slots;
pub mod wire;

use crate::config::{Config, Transport};
use crate::model::runtime::stats::{bump, StatsInner};
use crate::rcu::Guard;
use routes::{Route, Routes};
use shm::Inbox;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
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

/// The datagram that wakes a sleeping engine (ignored otherwise).
pub const WAKE: &[u8; 4] = b"EFAW";

/// One device's endpoint in this process: its UDP socket and its inbox.
pub struct Endpoint {
    sock: UdpSocket,
    /// Local address the socket is bound to.
    pub local: SocketAddrV4,
    port_base: u16,
    slot: u32,
    lock_dir: PathBuf,
    faults: Faults,
    delayed: Mutex<Vec<Delayed>>,
    inbox: Option<Inbox>,
    routes: Routes,
    stats: Arc<StatsInner>,
    /// The engine sleeps for long and must be woken for new work (see `kick`).
    idle: AtomicBool,
}

impl Endpoint {
    /// Binds the endpoint of `device` at `ip` for this process's slot under the
    /// configured lock directory, and creates its inbox (unless UDP is forced). Its
    /// counters go to `stats`.
    pub(crate) fn bind(
        ip: Ipv4Addr,
        device: u32,
        config: &Config,
        stats: Arc<StatsInner>,
    ) -> Result<Endpoint, String> {
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
        let inbox = match config.transport {
            Transport::Udp => None,
            Transport::Auto => Inbox::create(&config.lock_dir, slot, device, local).ok(),
            Transport::Shm => Some(
                Inbox::create(&config.lock_dir, slot, device, local)
                    .map_err(|e| format!("cannot create the shared-memory inbox: {e}"))?,
            ),
        };
        // Without an inbox of our own, peers cannot answer through shared memory either.
        let mode = if inbox.is_some() {
            config.transport
        } else {
            Transport::Udp
        };
        Ok(Endpoint {
            sock,
            local,
            port_base: config.port_base,
            slot,
            lock_dir: config.lock_dir.clone(),
            faults: Faults::new(&config.faults),
            delayed: Mutex::new(Vec::new()),
            inbox,
            routes: Routes::new(ip, config.port_base, config.lock_dir.clone(), mode),
            stats,
            idle: AtomicBool::new(false),
        })
    }

    /// Wakes this endpoint's own engine thread (it sleeps in `poll` on the socket).
    pub fn send_wake_to_self(&self) {
        let _ = self.sock.send_to(WAKE, self.local);
    }

    /// The engine is about to sleep for long (nothing outstanding): from now on
    /// [`Endpoint::kick`] wakes it. The caller looks for work once more afterwards.
    pub fn enter_idle(&self) {
        self.idle.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The engine woke up (or found work before sleeping).
    pub fn leave_idle(&self) {
        self.idle.store(false, Ordering::Relaxed);
    }

    /// Work appeared that needs the engine's timers (a first outstanding request, a
    /// held-back datagram): wakes it if it sleeps for long. Called after the work was
    /// published, so either the engine's last look sees it or this sees the engine idle.
    pub fn kick(&self) {
        fence(Ordering::SeqCst);
        if self.idle.load(Ordering::Relaxed) && self.idle.swap(false, Ordering::AcqRel) {
            self.send_wake_to_self();
        }
    }

    /// Whether held-back datagrams wait for their time (fault injection).
    pub fn has_delayed(&self) -> bool {
        self.faults.active()
            && !self
                .delayed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
    }

    /// This endpoint's inbox (None when UDP is forced or it could not be created).
    pub fn inbox(&self) -> Option<&Inbox> {
        self.inbox.as_ref()
    }

    /// The destination `to` may be dead (a request towards it timed out): forget its
    /// shared-memory link if its owner is gone.
    pub fn suspect(&self, to: SocketAddrV4) {
        self.routes.suspect(to);
    }

    /// Frees routes replaced since the last call (the engine's timer: no lock held).
    pub fn collect_routes(&self) {
        self.routes.collect();
    }

    /// Sends one datagram over the way `routes` chose for `to` (no faults here).
    fn deliver(&self, data: &[u8], to: SocketAddrV4) {
        {
            let g = Guard::enter();
            match self.routes.get(to, &g) {
                Some(Route::Shm(link)) => {
                    let ring = link.ring();
                    match ring.push(self.local, data) {
                        Ok(()) => {
                            bump(&self.stats.shm_sent);
                            if ring.needs_wake() {
                                bump(&self.stats.wakeups);
                                let _ = self.sock.send_to(WAKE, to);
                            }
                        }
                        Err(_) => {
                            bump(&self.stats.shm_drops);
                            drop(g);
                            self.routes.suspect(to);
                        }
                    }
                    return;
                }
                Some(Route::Udp(_)) if self.routes.shm_only() => {
                    bump(&self.stats.shm_drops);
                    return;
                }
                _ => {}
            }
        }
        let _ = self.sock.send_to(data, to);
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
            self.deliver(data, to);
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
                self.deliver(data, to);
            } else {
                self.delayed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Delayed {
                        due: Instant::now() + delay,
                        to,
                        data: data.to_vec(),
                    });
                self.kick();
            }
        }
    }

    /// Sends every held-back datagram now, due or not (the process exits: datagrams
    /// already "on the wire" still arrive, as a network delivers what a dead sender sent).
    pub fn flush_all_delayed(&self) {
        let all = std::mem::take(&mut *self.delayed.lock().unwrap_or_else(|e| e.into_inner()));
        for d in &all {
            self.deliver(&d.data, d.to);
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
            self.deliver(&d.data, d.to);
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
        // Microsecond precision (strict mode's held WQEs are due within a millisecond).
        let t = timeout.min(Duration::from_secs(1));
        let ts = libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd and a valid timespec for the duration of the call; no
        // signal mask.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
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
