//! The provider's `ibv_qp_ex` send functions and `post_recv`, read from the QP and
//! checked once at creation, and how a staged work request is handed to them.

use core::ffi::c_int;

use crate::error::{Error, Result, Verb};
use crate::ffi::{self, ibv_send_flags};
use crate::wr::{LocalKind, OpKind, SendOps, StagedSend};

const SEND_SIGNALED: u32 = ibv_send_flags::IBV_SEND_SIGNALED.0;
const SEND_INLINE: u32 = ibv_send_flags::IBV_SEND_INLINE.0;

type QpxFn = unsafe extern "C" fn(*mut ffi::ibv_qp_ex);
pub(crate) type PostRecvFn = unsafe extern "C" fn(
    *mut ffi::ibv_qp,
    *mut ffi::ibv_recv_wr,
    *mut *mut ffi::ibv_recv_wr,
) -> c_int;

/// The provider's `ibv_qp_ex` function pointers, checked once at creation. Operations
/// not enabled at creation point at never-called stubs: a batch refuses them when a work
/// request is added.
#[derive(Clone, Copy)]
pub(crate) struct SendFns {
    start: QpxFn,
    complete: unsafe extern "C" fn(*mut ffi::ibv_qp_ex) -> c_int,
    abort: QpxFn,
    set_ud_addr: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, *mut ffi::ibv_ah, u32, u32),
    set_sge: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
    set_sge_list: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, usize, *const ffi::ibv_sge),
    set_inline: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, *mut core::ffi::c_void, usize),
    send: QpxFn,
    send_imm: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32),
    read: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64),
    write: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64),
    write_imm: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
}

unsafe extern "C" fn op_not_enabled(_: *mut ffi::ibv_qp_ex) {}
unsafe extern "C" fn op_not_enabled_imm(_: *mut ffi::ibv_qp_ex, _: u32) {}
unsafe extern "C" fn op_not_enabled_rdma(_: *mut ffi::ibv_qp_ex, _: u32, _: u64) {}
unsafe extern "C" fn op_not_enabled_rdma_imm(_: *mut ffi::ibv_qp_ex, _: u32, _: u64, _: u32) {}

impl SendFns {
    /// Reads one pointer where it is called, as C's `ibv_wr_*` helpers read `qp->wr_*`:
    /// a plain read would be hoisted out of the post loop and every pointer of the
    /// table spilled to the stack, ten loads and stores for a one-WR batch.
    #[inline(always)]
    fn at<F: Copy>(f: &F) -> F {
        // SAFETY: `f` is a reference, so valid, aligned and initialised for the read.
        unsafe { core::ptr::read_volatile(f) }
    }

    /// Opens a posting session (`ibv_wr_start`): takes the provider's SQ lock.
    ///
    /// # Safety
    /// `q` must be the live `ibv_qp_ex` these pointers were loaded from, with no session
    /// open; [`complete`](Self::complete) or [`abort`](Self::abort) must follow.
    #[inline(always)]
    pub(crate) unsafe fn start(&self, q: *mut ffi::ibv_qp_ex) {
        // SAFETY: forwarded contract.
        unsafe { (Self::at(&self.start))(q) }
    }

    /// Rings the doorbell for the session's work requests (`ibv_wr_complete`); on error
    /// the provider has discarded all of them.
    ///
    /// # Safety
    /// A session opened by [`start`](Self::start) on `q`.
    #[inline(always)]
    pub(crate) unsafe fn complete(&self, q: *mut ffi::ibv_qp_ex) -> Result<()> {
        // SAFETY: forwarded contract.
        match unsafe { (Self::at(&self.complete))(q) } {
            0 => Ok(()),
            libc::ENOMEM => Err(Error::SendQueueFull),
            e => Err(Error::verb(Verb::PostSend, e)),
        }
    }

    /// Discards the session's work requests and releases the SQ lock (`ibv_wr_abort`).
    ///
    /// # Safety
    /// A session opened by [`start`](Self::start) on `q`.
    #[inline(always)]
    pub(crate) unsafe fn abort(&self, q: *mut ffi::ibv_qp_ex) {
        // SAFETY: forwarded contract.
        unsafe { (Self::at(&self.abort))(q) }
    }

    /// Hands one checked work request to the provider (`wr_id`, flags, the operation,
    /// the address, the local side), inside an open session.
    ///
    /// # Safety
    /// A session opened by [`start`](Self::start) on `q`; `wr` was checked against this
    /// QP (so its operation is enabled: the stubs are never called), and the AH, SGE
    /// list or inline bytes it borrows are alive (the provider copies them into the WQE
    /// before this returns).
    #[inline(always)]
    pub(crate) unsafe fn emit(&self, q: *mut ffi::ibv_qp_ex, wr: &StagedSend<'_>) {
        let f = self;
        // SAFETY: per the contract; the session holds the SQ lock, so writing
        // wr_id/wr_flags is race-free.
        unsafe {
            (*q).wr_id = wr.wr_id;
            (*q).wr_flags = match wr.local {
                LocalKind::Inline => SEND_SIGNALED | SEND_INLINE,
                LocalKind::Sge | LocalKind::Sges => SEND_SIGNALED,
            };
            match wr.kind {
                OpKind::Send => (SendFns::at(&f.send))(q),
                OpKind::SendImm => (SendFns::at(&f.send_imm))(q, wr.imm().to_be()),
                OpKind::Write => (SendFns::at(&f.write))(q, wr.rkey(), wr.raddr),
                OpKind::WriteImm => {
                    (SendFns::at(&f.write_imm))(q, wr.rkey(), wr.raddr, wr.imm().to_be())
                }
                OpKind::Read => (SendFns::at(&f.read))(q, wr.rkey(), wr.raddr),
            }
            (SendFns::at(&f.set_ud_addr))(q, wr.ah.as_ptr(), wr.qpn, wr.qkey);
            match wr.local {
                LocalKind::Sge => (SendFns::at(&f.set_sge))(q, wr.lkey(), wr.addr(), wr.len()),
                LocalKind::Sges => {
                    (SendFns::at(&f.set_sge_list))(q, wr.len() as usize, wr.sge_list())
                }
                LocalKind::Inline => {
                    (SendFns::at(&f.set_inline))(q, wr.inline_bytes() as *mut _, wr.len() as usize)
                }
            }
        }
    }

    /// Makes the next work requests signaled (`wr_flags`, which providers only read),
    /// for a run of [`RdmaCalls::emit`]s.
    ///
    /// # Safety
    /// A session opened by [`start`](Self::start) on `q`.
    #[inline(always)]
    pub(crate) unsafe fn set_signaled(q: *mut ffi::ibv_qp_ex) {
        // SAFETY: per the contract: the session holds the SQ lock.
        unsafe { (*q).wr_flags = SEND_SIGNALED };
    }

    /// The three calls of an RDMA work request of a run (operation `OP`, an [`OpKind`]
    /// as `u8`), copied out so that a loop calls them from registers or its stack frame
    /// (one instruction a call) instead of loading each through `self` again.
    #[inline(always)]
    pub(crate) fn rdma_calls<const OP: u8>(&self) -> RdmaCalls {
        RdmaCalls {
            rdma: if OP == OpKind::Read as u8 {
                self.read
            } else {
                self.write
            },
            rdma_imm: self.write_imm,
            set_ud_addr: self.set_ud_addr,
            set_sge: self.set_sge,
        }
    }
    /// # Safety
    /// `qpx` must be a live `ibv_qp_ex`.
    pub(crate) unsafe fn load(qpx: *mut ffi::ibv_qp_ex, ops: SendOps) -> Option<SendFns> {
        // SAFETY: caller guarantees `qpx` is live; the pointers are read once.
        let q = unsafe { &*qpx };
        let need = |bit: SendOps| ops.contains(bit);
        Some(SendFns {
            start: q.wr_start?,
            complete: q.wr_complete?,
            abort: q.wr_abort?,
            set_ud_addr: q.wr_set_ud_addr?,
            set_sge: q.wr_set_sge?,
            set_sge_list: q.wr_set_sge_list?,
            set_inline: q.wr_set_inline_data?,
            send: if need(SendOps::SEND) {
                q.wr_send?
            } else {
                op_not_enabled
            },
            send_imm: if need(SendOps::SEND_WITH_IMM) {
                q.wr_send_imm?
            } else {
                op_not_enabled_imm
            },
            read: if need(SendOps::RDMA_READ) {
                q.wr_rdma_read?
            } else {
                op_not_enabled_rdma
            },
            write: if need(SendOps::RDMA_WRITE) {
                q.wr_rdma_write?
            } else {
                op_not_enabled_rdma
            },
            write_imm: if need(SendOps::RDMA_WRITE_WITH_IMM) {
                q.wr_rdma_write_imm?
            } else {
                op_not_enabled_rdma_imm
            },
        })
    }
}

/// The provider's calls for the RDMA work requests of a run ([`SendFns::rdma_calls`]).
#[derive(Clone, Copy)]
pub(crate) struct RdmaCalls {
    rdma: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64),
    rdma_imm: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
    set_ud_addr: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, *mut ffi::ibv_ah, u32, u32),
    set_sge: unsafe extern "C" fn(*mut ffi::ibv_qp_ex, u32, u64, u32),
}

impl RdmaCalls {
    /// Hands one RDMA work request of a run to the provider: `wr_id`, operation `OP`
    /// (the one these calls were made for: write, write with immediate or read) at
    /// `raddr` (`rkey`), the destination, one SGE (`local()`: its address and length,
    /// asked for after the opcode's call). `wr_flags` are those
    /// [`SendFns::set_signaled`] set.
    ///
    /// # Safety
    /// A session opened by [`SendFns::start`] on `q` (the QP these calls were read
    /// from), `set_signaled` called in it; `OP` enabled on this QP (checked: its pointer
    /// is not a stub); `ah` a live AH of the QP's PD; the SGE inside a live registration
    /// of that PD, the remote range inside the peer's buffer (checked by the caller).
    #[inline(always)]
    pub(crate) unsafe fn emit<const OP: u8>(
        &self,
        q: *mut ffi::ibv_qp_ex,
        wr_id: u64,
        (raddr, rkey, imm): (u64, u32, u32),
        (ah, qpn, qkey): (*mut ffi::ibv_ah, u32, u32),
        (local, lkey): (impl FnOnce() -> (u64, u32), u32),
    ) {
        // SAFETY: per the contract; the session holds the SQ lock, so writing wr_id is
        // race-free. The opcode call comes first (it starts the WQE the others fill).
        unsafe {
            (*q).wr_id = wr_id;
            if OP == OpKind::WriteImm as u8 {
                (self.rdma_imm)(q, rkey, raddr, imm.to_be());
            } else {
                (self.rdma)(q, rkey, raddr);
            }
            let (addr, len) = local();
            (self.set_sge)(q, lkey, addr, len);
            (self.set_ud_addr)(q, ah, qpn, qkey);
        }
    }
}
