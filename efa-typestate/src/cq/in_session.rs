//! The CQs this thread may not poll: the send CQs of QPs with a posting session
//! ([`Qp::post_with`](crate::Qp::post_with)) open on it.
//!
//! A session holds its send queue's lock until it ends (libefa's `ibv_wr_start` takes the
//! queue's `wqlock`; the direct backend holds its send-queue state), and completing one
//! of that queue's requests takes the same lock (libefa's `efa_wq_put_wrid_idx_unlocked`,
//! the direct backend's request-id slots). A poll inside the session, on its own thread,
//! that met such a completion would wait for itself for ever. It is refused instead,
//! before it reads anything, with [`InvalidInput::PollInSession`]. Polls from other
//! threads only wait for the session to end, as they would in C.

use core::cell::Cell;

use crate::error::{InvalidInput, Result};
use crate::ffi;

/// Sessions one thread may nest with their CQs recorded; deeper ones make every poll
/// on the thread refused until they end.
const RECORDED: usize = 8;

thread_local! {
    /// The send CQs (addresses) of this thread's open sessions, innermost last.
    static SEND_CQS: Cell<[usize; RECORDED]> = const { Cell::new([0; RECORDED]) };
    /// How many sessions are open on this thread.
    static OPEN: Cell<usize> = const { Cell::new(0) };
}

/// One open session on this thread, with its QP's send CQ; ends on drop (also when the
/// session's closure panics).
pub(crate) struct SessionMark(());

impl SessionMark {
    /// Records a session of a QP whose sends complete on `send_cq`.
    pub(crate) fn open(send_cq: *mut ffi::ibv_cq) -> SessionMark {
        let n = OPEN.get();
        if n < RECORDED {
            let mut cqs = SEND_CQS.get();
            cqs[n] = send_cq as usize;
            SEND_CQS.set(cqs);
        }
        OPEN.set(n + 1);
        SessionMark(())
    }
}

impl Drop for SessionMark {
    fn drop(&mut self) {
        // Sessions nest (each runs inside its caller's closure), so the one ending is the
        // innermost.
        OPEN.set(OPEN.get().saturating_sub(1));
    }
}

/// Refuses a poll of `cq` on a thread with an open session of a QP whose sends complete
/// on it (see the module docs).
#[inline]
pub(crate) fn check(cq: *mut ffi::ibv_cq) -> Result<()> {
    let n = OPEN.get();
    if n == 0 {
        return Ok(());
    }
    let cqs = SEND_CQS.get();
    if n > RECORDED || cqs[..n].contains(&(cq as usize)) {
        return Err(InvalidInput::PollInSession.into());
    }
    Ok(())
}
