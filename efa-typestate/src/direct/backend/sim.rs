//! efa-sim's calls for direct consumers (issue 38), found with `dlsym` and cached per
//! queue: the device does the work a doorbell or an empty poll asks for on this thread,
//! with no signal and no wait for its watcher thread. On rdma-core the symbols do not
//! exist, the cached hooks are `None`, and each call site costs one predictable branch.
//!
//! They change only when the (software) device does its work, never what this crate
//! writes into the rings: the direct path that runs here is the one that runs on a NIC.

use core::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::ffi;

type QpHook = unsafe extern "C" fn(*mut ffi::ibv_qp) -> c_int;
type CqHook = unsafe extern "C" fn(*mut ffi::ibv_cq) -> c_int;

struct Hooks {
    sq_doorbell: Option<QpHook>,
    cq_doorbell: Option<CqHook>,
    progress: Option<CqHook>,
}

fn hooks() -> &'static Hooks {
    static HOOKS: OnceLock<Hooks> = OnceLock::new();
    HOOKS.get_or_init(|| {
        let find = |name: &core::ffi::CStr| {
            // SAFETY: a symbol lookup in the loaded objects; the name is NUL-terminated.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        Hooks {
            sq_doorbell: find(c"efa_sim_direct_sq_doorbell").map(qp_hook),
            cq_doorbell: find(c"efa_sim_direct_cq_doorbell").map(cq_hook),
            progress: find(c"efa_sim_direct_progress").map(cq_hook),
        }
    })
}

fn qp_hook(p: *mut c_void) -> QpHook {
    // SAFETY: efa-sim exports this name with exactly this C signature
    // (efa-sim/src/abi/direct_hooks.rs), and nothing else exports it.
    unsafe { core::mem::transmute::<*mut c_void, QpHook>(p) }
}

fn cq_hook(p: *mut c_void) -> CqHook {
    // SAFETY: as for `qp_hook`.
    unsafe { core::mem::transmute::<*mut c_void, CqHook>(p) }
}

/// A QP's send-queue doorbell hook (None on rdma-core, or for a null `qp`: the tests'
/// rings in host memory).
#[derive(Clone, Copy)]
pub(super) struct SqHook(Option<(QpHook, usize)>);

impl SqHook {
    pub(super) fn new(qp: *mut ffi::ibv_qp) -> SqHook {
        SqHook(
            hooks()
                .sq_doorbell
                .filter(|_| !qp.is_null())
                .map(|f| (f, qp as usize)),
        )
    }

    /// The doorbell was just stored.
    #[inline(always)]
    pub(super) fn rung(self) {
        if let Some((f, qp)) = self.0 {
            // SAFETY: `qp` is the live QP this direct state belongs to (the QP outlives
            // its direct state's posts); the hook only reads its doorbell.
            unsafe { f(qp as *mut ffi::ibv_qp) };
        }
    }
}

/// A CQ's hooks: its doorbell and its progress.
#[derive(Clone, Copy)]
pub(super) struct CqHooks(Option<(CqHook, CqHook, usize)>);

impl CqHooks {
    pub(super) fn new(cq: *mut ffi::ibv_cq) -> CqHooks {
        let h = hooks();
        CqHooks(match (h.cq_doorbell, h.progress) {
            (Some(d), Some(p)) if !cq.is_null() => Some((d, p, cq as usize)),
            _ => None,
        })
    }

    /// The CQ doorbell was just stored with the arm bit.
    #[inline]
    pub(super) fn armed(self) {
        if let Some((f, _, cq)) = self.0 {
            // SAFETY: `cq` is the live CQ of this direct state (destroyed only after the
            // state's last poll or arm).
            unsafe { f(cq as *mut ffi::ibv_cq) };
        }
    }

    /// The CQ looked empty: whether the device did work that may have added entries.
    #[inline(always)]
    pub(super) fn progress(self) -> bool {
        match self.0 {
            Some((_, f, cq)) => {
                // SAFETY: as in `armed`.
                let did = unsafe { f(cq as *mut ffi::ibv_cq) };
                did > 0
            }
            None => false,
        }
    }
}
