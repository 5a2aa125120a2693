//! Address handles: a (PD, GID) pair with a device AH number. The number is what a send
//! WQE names; handles of the same (PD, GID) share it (model §3.7).

use super::{Errno, Gid, Pd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

/// Address handle.
#[derive(Debug)]
pub struct Ah {
    pd: Weak<Pd>,
    gid: Gid,
    number: u16,
    dead: AtomicBool,
}

impl Ah {
    pub(crate) fn new(pd: Weak<Pd>, gid: Gid, number: u16) -> Ah {
        Ah {
            pd,
            gid,
            number,
            dead: AtomicBool::new(false),
        }
    }

    /// Device AH number (u16, never 0xFFFF).
    pub fn number(&self) -> u16 {
        self.number
    }

    /// Destination GID.
    pub fn gid(&self) -> &Gid {
        &self.gid
    }

    /// Whether a WR of a QP in `pd` may name this AH: live and of that PD.
    pub(crate) fn usable_in(&self, pd: &Pd) -> bool {
        !self.dead.load(Ordering::Acquire) && core::ptr::eq(self.pd.as_ptr(), pd)
    }

    /// Releases this handle. The device AH lives on while other handles of the same
    /// (PD, GID) exist; with the last one it goes, and send WRs still outstanding to it
    /// complete with status 1 (FLUSHED).
    pub fn destroy(&self) -> Result<(), Errno> {
        if self.dead.swap(true, Ordering::AcqRel) {
            return Err(libc::EINVAL);
        }
        if let Some(pd) = self.pd.upgrade() {
            pd.release_ah(&self.gid);
        }
        Ok(())
    }
}
