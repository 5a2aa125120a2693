//! A pinned peer process: proof that a pid still names the very process that was checked.
//!
//! With `pidfd_open` (Linux 5.3) the process is held by a pidfd, which becomes readable
//! when it exits, so a pid reused later proves nothing. Where pidfds are missing (older
//! kernels, seccomp filters, valgrind) the pair `(pid, start time)` from `/proc` stands
//! in: a reused pid has another start time.

use super::slots::process_start_time;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A process proven to be `pid` started at `start`.
pub enum Pinned {
    /// Held by a pidfd.
    Pidfd(OwnedFd),
    /// No pidfds here: compared by start time at every look.
    StartTime {
        /// The pid.
        pid: u32,
        /// Its start time (field 22 of `/proc/<pid>/stat`).
        start: u64,
    },
}

impl Pinned {
    /// Pins process `pid` if it is alive and started at `start`.
    pub fn new(pid: u32, start: u64) -> Option<Pinned> {
        let raw = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
        let pinned = if fd >= 0 {
            // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
            Pinned::Pidfd(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return None;
        } else {
            Pinned::StartTime { pid, start }
        };
        // Read after pinning: if the start time matches, the pin holds that process.
        (process_start_time(pid) == Some(start) && pinned.alive()).then_some(pinned)
    }

    /// Whether the pinned process is still alive (a syscall or a `/proc` read).
    pub fn alive(&self) -> bool {
        match self {
            Pinned::Pidfd(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call; zero timeout.
                let n = unsafe { libc::poll(&mut pfd, 1, 0) };
                n == 0 // readable (exited) or poll failed: not provably alive
            }
            Pinned::StartTime { pid, start } => process_start_time(*pid) == Some(*start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_pins_and_a_wrong_start_time_does_not() {
        let pid = std::process::id();
        let start = process_start_time(pid).unwrap();
        assert!(Pinned::new(pid, start).is_some_and(|p| p.alive()));
        assert!(Pinned::new(pid, start + 1).is_none(), "another incarnation");
        assert!(Pinned::StartTime { pid, start }.alive());
        assert!(!Pinned::StartTime {
            pid,
            start: start + 1
        }
        .alive());
        assert!(Pinned::new(0x7fff_fff0, start).is_none(), "no such pid");
    }
}
