//! The trust model: when a responder may copy another process's memory.
//!
//! A datagram is data from an untrusted peer. Memory of *this* process is
//! only ever reached through one of its own MRs: every responder access is
//! checked against the rkey, range and access of a live MR of the target QP's
//! PD (under the MR table lock, so deregistration waits for it), and every
//! requester-side write (small-read data in a response) goes to the WR's own
//! SGE, re-validated against its lkey when the response arrives. Responses
//! carry no addresses; they are matched to a pending WR by id, epoch and
//! source address (the WR's destination). A commit request carries no data
//! and re-validates the whole remote range.
//!
//! The one field that names memory of *another* process is the bulk fast
//! path's `(pid, local_addr)`: in a bulk request, the requester's buffer (a
//! write's source, which the responder reads); in a `STATUS_PULL` response, the
//! responder's validated source of a bulk read, which the requester reads into
//! its own buffer (see `super::pull`: no process ever writes another's memory,
//! so a buffer whose QP was reset or destroyed cannot be written late). Each
//! side acts on it only when it can prove the packet came from that very
//! process:
//!
//! * the datagram's source `(IP, UDP port)` equals the address derived from
//!   the requester GID and the slot of its QPN (a process can send from a
//!   port only while it has it bound, and efa-sim sockets are never shared
//!   through `SO_REUSEPORT`);
//! * that slot's owner record (`slot-<N>.owner` in the lock directory,
//!   written by the slot holder, owned by our effective uid and writable by
//!   nobody else) names `pid`, lists the source address as bound, and is in
//!   our pid namespace;
//! * the live process `pid` has the start time the record names; it is then
//!   pinned with a pidfd, so its exit (and any later reuse of the pid) voids
//!   the proof. A mismatching pid re-reads the record.
//!
//! Anything else (a forged or stale pid, an address the sender does not own, no pidfd
//! support, a different pid namespace) gets the answer `STATUS_FALLBACK` once the rkey
//! and range are valid, and the data moves in datagrams, which is always safe because
//! the bytes are in the packets (counted in
//! [`Stats::unproven`](crate::model::Stats::unproven)). The requester re-validates its
//! own range against its lkey at every (re)transmission before naming it. A request
//! naming this very process is additionally checked against a live MR of one of its
//! devices. What this does not defend against: a process of the same uid that writes
//! false owner records or raw packets (it could read and write the victim's memory
//! through ptrace or `/proc/<pid>/mem` anyway), and deregistering an MR while a WR on
//! it is in flight (user error, as on hardware: the copy may still land).
//!

use super::Runtime;
use crate::model::{gid_endpoint, AccessFlags};
use crate::rcu::Guard;
use crate::transport;
use crate::transport::wire::Header;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What this responder knows about the process behind a source address.
pub(crate) enum Proof {
    /// The owner record named `pid` at this address; `pidfd` pins that very
    /// process (it becomes readable when the process exits).
    Proven {
        pid: u32,
        pidfd: std::os::fd::OwnedFd,
    },
    /// Proof for `pid` failed; not retried before `until`.
    Refused { pid: u32, until: Instant },
}

/// How long a failed proof is remembered (a flood of forged requests costs
/// one owner-record read per address and second).
const PROOF_RETRY: Duration = Duration::from_secs(1);

impl Runtime {
    /// Whether the bulk request `h`, which arrived from `from`, really comes
    /// from process `h.pid` (so process_vm_* on `h.local_addr` touches only
    /// memory that process named itself); the same for a [`STATUS_PULL`](crate::transport::wire::STATUS_PULL)
    /// response, whose `src_gid`, `src_qpn` and `pid` name its responder, before the
    /// requester reads from `h.local_addr`: `from` must be exactly the address
    /// of the sender's GID and QPN slot, and that slot's owner record (see
    /// [`crate::transport::Endpoint::read_owner`]) must name `h.pid`, list `from` as bound, be
    /// in our pid namespace and match the live process's start time. The
    /// process is then pinned by a pidfd, so a pid reused after its exit
    /// proves nothing.
    pub(crate) fn sender_proven(&self, h: &Header, from: SocketAddrV4) -> bool {
        let Some((ip, dev)) = gid_endpoint(&h.src_gid) else {
            return false;
        };
        if self.ep.addr_of(ip, dev, h.src_qpn as u32) != Some(from) {
            return false;
        }
        let now = Instant::now();
        let mut proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        match proofs.get(&from) {
            Some(Proof::Proven { pid, pidfd }) if *pid == h.pid && !process_exited(pidfd) => {
                return true;
            }
            Some(Proof::Refused { pid, until }) if *pid == h.pid && now < *until => return false,
            _ => {}
        }
        if proofs.len() > 4096 {
            proofs.clear();
        }
        let proof = match self.prove(h.pid, transport::slot_of_qpn(h.src_qpn as u32), from) {
            Some(pidfd) => Proof::Proven { pid: h.pid, pidfd },
            None => Proof::Refused {
                pid: h.pid,
                until: now + PROOF_RETRY,
            },
        };
        let ok = matches!(proof, Proof::Proven { .. });
        proofs.insert(from, proof);
        ok
    }

    /// Reads `slot`'s owner record and pins its process if it proves that
    /// `pid` owns `from`.
    fn prove(&self, pid: u32, slot: u32, from: SocketAddrV4) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let owner = self.ep.read_owner(slot)?;
        if owner.slot != slot
            || owner.pid != pid
            || !owner.bound.contains(&from)
            || Some(owner.pidns) != transport::own_pid_namespace()
        {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return None; // no pidfds (old kernel, seccomp): stay on the datagram path
        }
        // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) };
        // Read after pinning: if the start time matches, the pidfd is that process.
        (transport::process_start_time(pid) == Some(owner.start) && !process_exited(&pidfd))
            .then_some(pidfd)
    }

    /// Checks that `[addr, addr+len)` of this process lies in a live MR of
    /// some device of this process (with `need` access), inside the caller's
    /// section `g` (so the MR stays registered while the caller copies). Used
    /// before copying on behalf of a same-process requester named by a packet.
    pub(crate) fn own_range_registered(addr: u64, len: u64, need: AccessFlags, g: &Guard) -> bool {
        let rts = Runtime::all();
        rts.iter().any(|rt| {
            let mut found = false;
            rt.mrs().for_each(g, |mr| {
                let Some((host, host_len)) = mr.host_span() else {
                    return;
                };
                found |= !mr.dead.load(Ordering::Acquire)
                    && mr.access & need == need
                    && addr >= host as u64
                    && addr
                        .checked_add(len)
                        .is_some_and(|end| end <= (host + host_len) as u64);
            });
            found
        })
    }
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable).
fn process_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call; zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n != 0 // readable (exited) or poll failed: either way, not provably alive
}
