//! Bindings for `<infiniband/efadv.h>` at the rdma-core 65 layout (libefa nodes `EFA_1.0` ..
//! `EFA_1.7`).
//!
//! Every efadv entry point takes an `inlen` argument. rdma-core accepts a struct larger than
//! its own as long as the extra bytes are zero, so these newest layouts work against older
//! libefa builds when the fields they do not know are left zero.
//!
//! * Functions of nodes `EFA_1.0` .. `EFA_1.2` are linked normally (`-lefa`).
//! * Functions of nodes `EFA_1.3` and later are resolved from `libefa.so.1` at run time (see
//!   [`runtime`]); their wrappers here return `Result<_, NotProvided>` so that "this libefa does
//!   not have the function" can never be confused with an errno from the device.
//! * The header-only helpers (`efadv_wc_read_sgid`, `efadv_wc_is_unsolicited`,
//!   `efadv_wr_set_processing_hints`) are `#[inline]` Rust functions calling through the
//!   provider's function pointers.
#![allow(non_camel_case_types)]

mod counters;
mod cq;
mod mr;
mod qp;
pub mod runtime;

pub use counters::*;
pub use cq::*;
pub use mr::*;
pub use qp::*;

pub use runtime::{
    efadv_create_comp_cntr, efadv_get_max_rq_depth, efadv_get_max_sq_depth,
    efadv_qp_from_ibv_qp_ex, efadv_query_cq, efadv_query_mr, efadv_query_qp_wqs, NotProvided,
    NotProvidedReason, RuntimeSymbol,
};

use core::ffi::c_int;
use rdma_sys::{
    ibv_ah, ibv_context, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_gid, ibv_pd, ibv_qp, ibv_qp_init_attr,
    ibv_qp_init_attr_ex,
};

// ---------------------------------------------------------------------------------------------
// Device attributes (EFA_1.1)
// ---------------------------------------------------------------------------------------------

/// `device_caps` bit: RDMA read is supported (rdma-core 27).
pub const EFADV_DEVICE_ATTR_CAPS_RDMA_READ: u32 = 1 << 0;
/// `device_caps` bit: `IBV_QP_RNR_RETRY` can be set on SRD QPs (rdma-core 32).
pub const EFADV_DEVICE_ATTR_CAPS_RNR_RETRY: u32 = 1 << 1;
/// `device_caps` bit: CQs can report the source GID of receives from unknown senders (rdma-core 43).
pub const EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID: u32 = 1 << 2;
/// `device_caps` bit: RDMA write (with and without immediate) is supported (rdma-core 46).
pub const EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE: u32 = 1 << 3;
/// `device_caps` bit: QPs may receive write-with-immediate without consuming a receive WR (rdma-core 52).
pub const EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV: u32 = 1 << 4;
/// `device_caps` bit: a CQ ring can live in user-provided dmabuf memory (rdma-core 59).
pub const EFADV_DEVICE_ATTR_CAPS_CQ_WITH_EXT_MEM_DMABUF: u32 = 1 << 5;
/// `device_caps` bit: completion counters are supported (rdma-core 65).
pub const EFADV_DEVICE_ATTR_CAPS_COMP_CNTR: u32 = 1 << 6;

/// `struct efadv_device_attr`: EFA-specific device limits, filled by [`efadv_query_device`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_device_attr {
    /// Compatibility mask; output, always 0.
    pub comp_mask: u64,
    /// Maximum send queue depth in work requests.
    pub max_sq_wr: u32,
    /// Maximum receive queue depth (counted in buffer descriptors).
    pub max_rq_wr: u32,
    /// Maximum scatter/gather entries per send WR.
    pub max_sq_sge: u16,
    /// Maximum scatter/gather entries per receive WR.
    pub max_rq_sge: u16,
    /// Maximum inline data size of a regular (64-byte) send WQE.
    pub inline_buf_size: u16,
    /// Maximum inline data size with extended WQEs (rdma-core 63; `reserved[2]` before).
    pub inline_buf_size_ex: u16,
    /// Bitmask of `EFADV_DEVICE_ATTR_CAPS_*`.
    pub device_caps: u32,
    /// Maximum RDMA read/write transfer size in bytes.
    pub max_rdma_size: u32,
}
assert_layout!(
    efadv_device_attr,
    size = 32,
    align = 8,
    comp_mask = 0,
    max_sq_wr = 8,
    max_rq_wr = 12,
    max_sq_sge = 16,
    max_rq_sge = 18,
    inline_buf_size = 20,
    inline_buf_size_ex = 22,
    device_caps = 24,
    max_rdma_size = 28
);

// ---------------------------------------------------------------------------------------------
// Address handles (EFA_1.1)
// ---------------------------------------------------------------------------------------------

/// `struct efadv_ah_attr`: filled by [`efadv_query_ah`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_ah_attr {
    /// Compatibility mask; output, always 0.
    pub comp_mask: u64,
    /// Device address-handle number (`0xFFFF` means "no AH").
    pub ahn: u16,
    /// Reserved, zero.
    pub reserved: [u8; 6],
}
assert_layout!(
    efadv_ah_attr,
    size = 16,
    align = 8,
    comp_mask = 0,
    ahn = 8,
    reserved = 10
);

// ---------------------------------------------------------------------------------------------
// Queue depths (EFA_1.5)
// ---------------------------------------------------------------------------------------------

/// `efadv_sq_depth_attr.flags` bit: size the send queue for inline RDMA write (128-byte WQEs).
pub const EFADV_SQ_DEPTH_ATTR_INLINE_WRITE: u32 = 1 << 0;

/// `struct efadv_sq_depth_attr`: input of [`efadv_get_max_sq_depth`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_sq_depth_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u64,
    /// Bitmask of `EFADV_SQ_DEPTH_ATTR_*`.
    pub flags: u32,
    /// Scatter/gather entries per send WR the QP will use.
    pub max_send_sge: u32,
    /// Scatter/gather entries per RDMA WR the QP will use.
    pub max_rdma_sge: u32,
    /// Inline data size the QP will use.
    pub max_inline_data: u32,
}
assert_layout!(
    efadv_sq_depth_attr,
    size = 24,
    align = 8,
    comp_mask = 0,
    flags = 8,
    max_send_sge = 12,
    max_rdma_sge = 16,
    max_inline_data = 20
);

/// `struct efadv_rq_depth_attr`: input of [`efadv_get_max_rq_depth`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_rq_depth_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u64,
    /// Scatter/gather entries per receive WR the QP will use.
    pub max_recv_sge: u32,
}
assert_layout!(
    efadv_rq_depth_attr,
    size = 16,
    align = 8,
    comp_mask = 0,
    max_recv_sge = 8
);

// ---------------------------------------------------------------------------------------------
// Linked entry points (EFA_1.0 .. EFA_1.2; present in every libefa this crate supports)
// ---------------------------------------------------------------------------------------------

#[link(name = "efa")]
extern "C" {
    /// Creates an SRD QP from a legacy `ibv_qp_init_attr` (`qp_type` must be
    /// `IBV_QPT_DRIVER`). Node `EFA_1.0`. Returns NULL and sets `errno` on failure.
    pub fn efadv_create_driver_qp(
        ibvpd: *mut ibv_pd,
        attr: *mut ibv_qp_init_attr,
        driver_qp_type: u32,
    ) -> *mut ibv_qp;

    /// Creates an SRD QP with extended attributes (`attr_ex.qp_type` must be
    /// `IBV_QPT_DRIVER`). Node `EFA_1.1`. Returns NULL and sets `errno` on failure.
    pub fn efadv_create_qp_ex(
        ibvctx: *mut ibv_context,
        attr_ex: *mut ibv_qp_init_attr_ex,
        efa_attr: *mut efadv_qp_init_attr,
        inlen: u32,
    ) -> *mut ibv_qp;

    /// Reads the device AH number of `ibvah`. Node `EFA_1.1`. Returns 0 or a positive errno.
    pub fn efadv_query_ah(ibvah: *mut ibv_ah, attr: *mut efadv_ah_attr, inlen: u32) -> c_int;

    /// Reads EFA device limits and capabilities. Node `EFA_1.1`. Returns 0 or a positive errno
    /// (`EOPNOTSUPP` if the context is not an EFA device).
    pub fn efadv_query_device(
        ibvctx: *mut ibv_context,
        attr: *mut efadv_device_attr,
        inlen: u32,
    ) -> c_int;

    /// Creates an extended CQ with EFA extensions. Node `EFA_1.2`. Returns NULL and sets
    /// `errno` on failure.
    pub fn efadv_create_cq(
        ibvctx: *mut ibv_context,
        attr_ex: *mut ibv_cq_init_attr_ex,
        efa_attr: *mut efadv_cq_init_attr,
        inlen: u32,
    ) -> *mut ibv_cq_ex;

    /// Returns the `efadv_cq` embedded in an EFA CQ. Node `EFA_1.2`.
    pub fn efadv_cq_from_ibv_cq_ex(ibvcqx: *mut ibv_cq_ex) -> *mut efadv_cq;
}

// ---------------------------------------------------------------------------------------------
// Header-only helpers
// ---------------------------------------------------------------------------------------------

/// Copies the source GID of the current receive completion into `*sgid`.
///
/// Returns 0 on success, `-ENOENT` when the sender is known by an AH (no GID reported), and
/// `-EOPNOTSUPP` when the CQ was not created with [`EFADV_WC_EX_WITH_SGID`] (the C inline would
/// call a NULL pointer instead).
///
/// # Safety
/// `efadv_cq` must come from [`efadv_cq_from_ibv_cq_ex`] on a live CQ that is inside a poll
/// (after a successful `ibv_start_poll`/`ibv_next_poll`, before the next poll call), and
/// `sgid` must be valid for a 16-byte write.
#[inline]
pub unsafe fn efadv_wc_read_sgid(efadv_cq: *mut efadv_cq, sgid: *mut ibv_gid) -> c_int {
    // SAFETY: the caller guarantees `efadv_cq` points to a live `efadv_cq`.
    match unsafe { (*efadv_cq).wc_read_sgid } {
        // SAFETY: the provider installed this pointer for this CQ; arguments as promised by the caller.
        Some(read_sgid) => unsafe { read_sgid(efadv_cq, sgid) },
        None => -libc::EOPNOTSUPP,
    }
}

/// Whether the current completion is an unsolicited write-with-immediate (one that consumed no
/// receive WR). Returns `false` when the CQ was not created with
/// [`EFADV_WC_EX_WITH_IS_UNSOLICITED`].
///
/// # Safety
/// `efadv_cq` must come from [`efadv_cq_from_ibv_cq_ex`] on a live CQ that is inside a poll.
#[inline]
pub unsafe fn efadv_wc_is_unsolicited(efadv_cq: *mut efadv_cq) -> bool {
    // SAFETY: the caller guarantees `efadv_cq` points to a live `efadv_cq`.
    match unsafe { (*efadv_cq).wc_is_unsolicited } {
        // SAFETY: the provider installed this pointer for this CQ.
        Some(is_unsolicited) => unsafe { is_unsolicited(efadv_cq) },
        None => false,
    }
}

/// Sets processing hints (`EFADV_WR_PROCESSING_HINT_*`) on the work request being built.
///
/// Returns `false` (and does nothing) when the QP was not created with
/// [`EFADV_WR_EX_WITH_PROCESSING_HINTS`] (the C inline would call a NULL pointer instead).
/// Hints never change what data arrives, so ignoring them is safe.
///
/// # Safety
/// `efadv_qp` must come from [`efadv_qp_from_ibv_qp_ex`] on a live QP, between
/// `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`, after the opcode call of the WR.
#[inline]
pub unsafe fn efadv_wr_set_processing_hints(efadv_qp: *mut efadv_qp, hints: u32) -> bool {
    // SAFETY: the caller guarantees `efadv_qp` points to a live `efadv_qp`.
    match unsafe { (*efadv_qp).wr_set_processing_hints } {
        Some(set_hints) => {
            // SAFETY: the provider installed this pointer for this QP.
            unsafe { set_hints(efadv_qp, hints) };
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    unsafe extern "C" fn read_sgid_known_sender(_cq: *mut efadv_cq, _sgid: *mut ibv_gid) -> c_int {
        -libc::ENOENT
    }

    unsafe extern "C" fn read_sgid_unknown_sender(_cq: *mut efadv_cq, sgid: *mut ibv_gid) -> c_int {
        // SAFETY: the helper under test forwards the caller's valid `sgid`.
        unsafe { (*sgid).raw = [0xfe; 16] };
        0
    }

    unsafe extern "C" fn unsolicited(cq: *mut efadv_cq) -> bool {
        // SAFETY: the helper under test forwards the caller's valid `cq`.
        unsafe { (*cq).comp_mask == 7 }
    }

    static LAST_HINTS: AtomicU32 = AtomicU32::new(0);
    unsafe extern "C" fn record_hints(_qp: *mut efadv_qp, hints: u32) {
        LAST_HINTS.store(hints, Ordering::SeqCst);
    }

    #[test]
    fn wc_read_sgid_forwards_result_and_reports_missing_pointer() {
        let mut gid = ibv_gid { raw: [0; 16] };
        let mut cq = efadv_cq {
            wc_read_sgid: Some(read_sgid_unknown_sender),
            ..Default::default()
        };
        // SAFETY: `cq` and `gid` are live locals.
        assert_eq!(unsafe { efadv_wc_read_sgid(&mut cq, &mut gid) }, 0);
        // SAFETY: `raw` is the plain-bytes view of the union.
        assert_eq!(unsafe { gid.raw }, [0xfe; 16]);
        cq.wc_read_sgid = Some(read_sgid_known_sender);
        assert_eq!(
            // SAFETY: as above.
            unsafe { efadv_wc_read_sgid(&mut cq, &mut gid) },
            -libc::ENOENT
        );
        cq.wc_read_sgid = None;
        assert_eq!(
            // SAFETY: as above.
            unsafe { efadv_wc_read_sgid(&mut cq, &mut gid) },
            -libc::EOPNOTSUPP
        );
    }

    #[test]
    fn wc_is_unsolicited_calls_through_and_defaults_to_false() {
        let mut cq = efadv_cq {
            comp_mask: 7,
            wc_is_unsolicited: Some(unsolicited),
            ..Default::default()
        };
        // SAFETY: `cq` is a live local.
        assert!(unsafe { efadv_wc_is_unsolicited(&mut cq) });
        cq.comp_mask = 0;
        // SAFETY: as above.
        assert!(!unsafe { efadv_wc_is_unsolicited(&mut cq) });
        cq.wc_is_unsolicited = None;
        cq.comp_mask = 7;
        // SAFETY: as above.
        assert!(!unsafe { efadv_wc_is_unsolicited(&mut cq) });
    }

    #[test]
    fn wr_set_processing_hints_calls_through_or_reports_disabled() {
        let mut qp = efadv_qp {
            comp_mask: 0,
            wr_set_processing_hints: Some(record_hints),
        };
        // SAFETY: `qp` is a live local.
        assert!(unsafe {
            efadv_wr_set_processing_hints(&mut qp, EFADV_WR_PROCESSING_HINT_BURST_PPS_SENSITIVE)
        });
        assert_eq!(
            LAST_HINTS.load(Ordering::SeqCst),
            EFADV_WR_PROCESSING_HINT_BURST_PPS_SENSITIVE
        );
        qp.wr_set_processing_hints = None;
        // SAFETY: as above.
        assert!(!unsafe { efadv_wr_set_processing_hints(&mut qp, 0) });
    }

    #[test]
    fn defaults_are_all_zero_bytes() {
        fn zeroed<T: Copy>(value: T) -> bool {
            // SAFETY: reading the bytes of a plain `repr(C)` value without padding.
            let bytes = unsafe {
                core::slice::from_raw_parts(
                    (&value as *const T).cast::<u8>(),
                    core::mem::size_of::<T>(),
                )
            };
            bytes.iter().all(|&b| b == 0)
        }
        assert!(zeroed(efadv_device_attr::default()));
        assert!(zeroed(efadv_qp_init_attr::default()));
        assert!(zeroed(efadv_cq_init_attr::default()));
        assert!(zeroed(efadv_wq_attr::default()));
        assert!(zeroed(efadv_cq_attr::default()));
        assert!(zeroed(efadv_comp_cntr_init_attr::default()));
        assert!(zeroed(efadv_mr_attr::default()));
    }
}
