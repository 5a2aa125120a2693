//! Completion queues: creation attributes, external ring memory and the CQ extension
//! table (`EFA_1.2`, `EFA_1.4`).

use super::*;

/// `efadv_cq_init_attr.wc_flags` bit: completions can report the sender GID ([`efadv_wc_read_sgid`]).
pub const EFADV_WC_EX_WITH_SGID: u64 = 1 << 0;
/// `efadv_cq_init_attr.wc_flags` bit: completions can report [`efadv_wc_is_unsolicited`].
pub const EFADV_WC_EX_WITH_IS_UNSOLICITED: u64 = 1 << 1;

/// `efadv_cq_init_attr.flags` bit: use `ext_mem_dmabuf` as the CQ ring.
pub const EFADV_CQ_INIT_FLAGS_EXT_MEM_DMABUF: u64 = 1 << 0;

/// The anonymous `ext_mem_dmabuf` member of `struct efadv_cq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct efadv_cq_init_attr_ext_mem_dmabuf {
    /// Virtual address of the ring (if mapped), else NULL.
    pub buffer: *mut u8,
    /// Ring length in bytes.
    pub length: u64,
    /// Offset of the ring inside the dmabuf.
    pub offset: u64,
    /// dmabuf file descriptor.
    pub fd: i32,
    /// Reserved, must be 0.
    pub reserved: [u8; 4],
}
assert_layout!(
    efadv_cq_init_attr_ext_mem_dmabuf,
    size = 32,
    align = 8,
    buffer = 0,
    length = 8,
    offset = 16,
    fd = 24,
    reserved = 28
);

impl Default for efadv_cq_init_attr_ext_mem_dmabuf {
    fn default() -> Self {
        Self {
            buffer: core::ptr::null_mut(),
            length: 0,
            offset: 0,
            fd: 0,
            reserved: [0; 4],
        }
    }
}

/// `struct efadv_cq_init_attr`: EFA-specific input of [`efadv_create_cq`].
///
/// rdma-core 44 has only `comp_mask` and `wc_flags` (16 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_cq_init_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u64,
    /// Bitmask of `EFADV_WC_EX_WITH_*`.
    pub wc_flags: u64,
    /// Bitmask of `EFADV_CQ_INIT_FLAGS_*`.
    pub flags: u64,
    /// External ring memory, used with [`EFADV_CQ_INIT_FLAGS_EXT_MEM_DMABUF`].
    pub ext_mem_dmabuf: efadv_cq_init_attr_ext_mem_dmabuf,
}
assert_layout!(
    efadv_cq_init_attr,
    size = 56,
    align = 8,
    comp_mask = 0,
    wc_flags = 8,
    flags = 16,
    ext_mem_dmabuf = 24
);

/// `struct efadv_cq_attr`: raw completion-ring description, filled by [`efadv_query_cq`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct efadv_cq_attr {
    /// Compatibility mask; output, always 0.
    pub comp_mask: u64,
    /// Start of the ring.
    pub buffer: *mut u8,
    /// Size of one completion entry in bytes.
    pub entry_size: u32,
    /// Number of ring entries.
    pub num_entries: u32,
    /// Doorbell register (rdma-core 60), or NULL.
    pub doorbell: *mut u32,
}
assert_layout!(
    efadv_cq_attr,
    size = 32,
    align = 8,
    comp_mask = 0,
    buffer = 8,
    entry_size = 16,
    num_entries = 20,
    doorbell = 24
);

impl Default for efadv_cq_attr {
    fn default() -> Self {
        Self {
            comp_mask: 0,
            buffer: core::ptr::null_mut(),
            entry_size: 0,
            num_entries: 0,
            doorbell: core::ptr::null_mut(),
        }
    }
}

/// Type of `efadv_cq.wc_read_sgid`.
pub type efadv_wc_read_sgid_fn =
    unsafe extern "C" fn(efadv_cq: *mut efadv_cq, sgid: *mut ibv_gid) -> c_int;
/// Type of `efadv_cq.wc_is_unsolicited` (C `bool` has the ABI of Rust `bool`).
pub type efadv_wc_is_unsolicited_fn = unsafe extern "C" fn(efadv_cq: *mut efadv_cq) -> bool;

/// `struct efadv_cq`: EFA extensions of an extended CQ, from [`efadv_cq_from_ibv_cq_ex`].
///
/// rdma-core 43..51 have only `comp_mask` and `wc_read_sgid` (16 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct efadv_cq {
    /// Compatibility mask.
    pub comp_mask: u64,
    /// Set only if the CQ was created with [`EFADV_WC_EX_WITH_SGID`].
    pub wc_read_sgid: Option<efadv_wc_read_sgid_fn>,
    /// Set only if the CQ was created with [`EFADV_WC_EX_WITH_IS_UNSOLICITED`].
    pub wc_is_unsolicited: Option<efadv_wc_is_unsolicited_fn>,
}
assert_layout!(
    efadv_cq,
    size = 24,
    align = 8,
    comp_mask = 0,
    wc_read_sgid = 8,
    wc_is_unsolicited = 16
);
