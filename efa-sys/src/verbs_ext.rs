//! Verbs items that rdma-sys 0.3 lacks and an EFA layer needs (all re-exported in
//! [`crate::verbs`]).
//!
//! * `_ibv_query_gid_ex`/`_ibv_query_gid_table` (node `IBVERBS_1.11`, in rdma-core 44, so linked)
//!   and their header-only wrappers. rdma-sys has `ibv_gid_entry`, `ibv_query_qp_data_in_order`
//!   and `ibv_is_fork_initialized` already.
//! * The `ibv_query_qp_data_in_order` flag/caps values (named in headers only from rdma-core 52).
//! * The completion-counter types of rdma-core 65 (`IBVERBS_1.18`) that
//!   [`efadv_create_comp_cntr`](crate::efadv::efadv_create_comp_cntr) takes. The `ibv_*_comp_cntr`
//!   functions themselves are not bound.
#![allow(non_camel_case_types)]

use core::ffi::c_int;
use rdma_sys::{ibv_context, ibv_gid_entry};
use static_assertions::const_assert_eq;

#[link(name = "ibverbs")]
extern "C" {
    /// Reads GID table entry `gid_index` of `port_num`; `entry_size` is the caller's
    /// `sizeof(struct ibv_gid_entry)`. Node `IBVERBS_1.11`. Returns 0 or a positive errno.
    pub fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> c_int;

    /// Reads up to `max_entries` valid GID entries of all ports. Node `IBVERBS_1.11`. Returns
    /// the number of entries written, or a negative errno.
    pub fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize;
}

/// Header-only `ibv_query_gid_ex`: [`_ibv_query_gid_ex`] with this crate's entry size.
///
/// # Safety
/// `context` must be a live device context and `entry` valid for one `ibv_gid_entry` write.
#[inline]
pub unsafe fn ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    // SAFETY: forwarded under the caller's guarantees; the size is that of the pointee type.
    unsafe {
        _ibv_query_gid_ex(
            context,
            port_num,
            gid_index,
            entry,
            flags,
            core::mem::size_of::<ibv_gid_entry>(),
        )
    }
}

/// Header-only `ibv_query_gid_table`: [`_ibv_query_gid_table`] with this crate's entry size.
///
/// # Safety
/// `context` must be a live device context and `entries` valid for `max_entries` writes.
#[inline]
pub unsafe fn ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
) -> isize {
    // SAFETY: forwarded under the caller's guarantees; the size is that of the pointee type.
    unsafe {
        _ibv_query_gid_table(
            context,
            entries,
            max_entries,
            flags,
            core::mem::size_of::<ibv_gid_entry>(),
        )
    }
}

const_assert_eq!(core::mem::size_of::<ibv_gid_entry>(), 32);

/// First of the optional access bits (`IBV_ACCESS_OPTIONAL_FIRST`, a `#define` in verbs.h):
/// registration drops the ones a device does not support instead of failing.
pub const IBV_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
/// Every optional access bit (`IBV_ACCESS_OPTIONAL_RANGE`, bits 20..29).
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 =
    ((IBV_ACCESS_OPTIONAL_FIRST << 10) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);
const_assert_eq!(IBV_ACCESS_OPTIONAL_RANGE, 0x3ff0_0000);
const_assert_eq!(
    IBV_ACCESS_OPTIONAL_FIRST,
    rdma_sys::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0
);

/// `ibv_query_qp_data_in_order` flag: return a caps vector (`IBV_QUERY_QP_DATA_IN_ORDER_*`)
/// instead of 0/1.
pub const IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS: u32 = 1 << 0;
/// `ibv_query_qp_data_in_order` flag: ask about the device only (not the CPU/PCIe path).
pub const IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY: u32 = 1 << 1;
/// Cap: the whole message is written in order.
pub const IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG: u32 = 1 << 0;
/// Cap: data is written in order in aligned 128-byte units.
pub const IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES: u32 = 1 << 1;

/// `enum ibv_qp_attach_comp_cntr_op`: count completed sends.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_SEND: u32 = 1 << 0;
/// `enum ibv_qp_attach_comp_cntr_op`: count completed receives.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_RECV: u32 = 1 << 1;
/// `enum ibv_qp_attach_comp_cntr_op`: count completed RDMA reads.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ: u32 = 1 << 2;
/// `enum ibv_qp_attach_comp_cntr_op`: count RDMA reads served for a remote peer.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ: u32 = 1 << 3;
/// `enum ibv_qp_attach_comp_cntr_op`: count completed RDMA writes.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE: u32 = 1 << 4;
/// `enum ibv_qp_attach_comp_cntr_op`: count RDMA writes received from a remote peer.
pub const IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE: u32 = 1 << 5;

/// `enum ibv_comp_cntr_type`: count work requests.
pub const IBV_COMP_CNTR_TYPE_WRS: u32 = 0;
/// `enum ibv_comp_cntr_type`: count bytes.
pub const IBV_COMP_CNTR_TYPE_BYTES: u32 = 1;

/// `struct ibv_comp_cntr_caps` (rdma-core 65).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ibv_comp_cntr_caps {
    /// Largest counter value.
    pub max_value: u64,
    /// Number of counters the device supports.
    pub max_counters: u32,
    /// Bitmask of `IBV_QP_ATTACH_COMP_CNTR_OP_*`.
    pub supported_qp_attach_ops: u32,
}
assert_layout!(
    ibv_comp_cntr_caps,
    size = 16,
    align = 8,
    max_value = 0,
    max_counters = 8,
    supported_qp_attach_ops = 12
);

/// `struct ibv_comp_cntr` (rdma-core 65): a completion counter object.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_comp_cntr {
    /// Owning context.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}
assert_layout!(ibv_comp_cntr, size = 16, align = 8, context = 0, handle = 8);

/// `struct ibv_comp_cntr_init_attr` (rdma-core 65).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ibv_comp_cntr_init_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u32,
    /// `IBV_COMP_CNTR_TYPE_*` (the C field is named `type`).
    pub type_: u32,
    /// Flags; must be 0.
    pub flags: u32,
}
assert_layout!(
    ibv_comp_cntr_init_attr,
    size = 12,
    align = 4,
    comp_mask = 0,
    type_ = 4,
    flags = 8
);

/// `struct ibv_qp_attach_comp_cntr_attr` (rdma-core 65).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ibv_qp_attach_comp_cntr_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u32,
    /// Bitmask of `IBV_QP_ATTACH_COMP_CNTR_OP_*`.
    pub op_mask: u32,
}
assert_layout!(
    ibv_qp_attach_comp_cntr_attr,
    size = 8,
    align = 4,
    comp_mask = 0,
    op_mask = 4
);
