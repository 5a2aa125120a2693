//! Queue pairs: SRD creation attributes, the raw work-queue description and the QP
//! extension table (`EFA_1.0`, `EFA_1.1`, `EFA_1.4`, `EFA_1.6`).

/// `driver_qp_type`: Scalable Reliable Datagram QP (the only driver QP type).
pub const EFADV_QP_DRIVER_TYPE_SRD: u32 = 0;

/// `efadv_qp_init_attr.flags` bit: receive write-with-immediate without consuming receive WRs.
pub const EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV: u16 = 1 << 0;
/// `efadv_qp_init_attr.flags` bit: allow inline RDMA write (forces 128-byte WQEs).
pub const EFADV_QP_FLAGS_INLINE_WRITE: u16 = 1 << 1;

/// `efadv_qp_init_attr.wr_flags` bit: enable [`efadv_wr_set_processing_hints`](super::efadv_wr_set_processing_hints).
pub const EFADV_WR_EX_WITH_PROCESSING_HINTS: u64 = 1 << 0;

/// `struct efadv_qp_init_attr`: EFA-specific input of [`efadv_create_qp_ex`](super::efadv_create_qp_ex).
///
/// rdma-core 44 has only `comp_mask`, `driver_qp_type` and `reserved[4]` (16 bytes); `flags`,
/// `sl` and `reserved` occupy those 4 bytes now, and `wr_flags` was appended (rdma-core 64).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_qp_init_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u64,
    /// `EFADV_QP_DRIVER_TYPE_*`.
    pub driver_qp_type: u32,
    /// Bitmask of `EFADV_QP_FLAGS_*`.
    pub flags: u16,
    /// Service level (0 = default).
    pub sl: u8,
    /// Reserved, must be 0.
    pub reserved: u8,
    /// Bitmask of `EFADV_WR_EX_WITH_*`.
    pub wr_flags: u64,
}
assert_layout!(
    efadv_qp_init_attr,
    size = 24,
    align = 8,
    comp_mask = 0,
    driver_qp_type = 8,
    flags = 12,
    sl = 14,
    reserved = 15,
    wr_flags = 16
);

/// `efadv_wq_attr.caps` bit: the work queue uses 64-bit request ids.
pub const EFADV_WQ_CAPS_64_BIT_REQ_ID: u16 = 1 << 0;

/// `struct efadv_wq_attr`: raw work-queue ring description, filled by [`efadv_query_qp_wqs`](super::efadv_query_qp_wqs).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct efadv_wq_attr {
    /// Compatibility mask; output, always 0.
    pub comp_mask: u64,
    /// Start of the ring.
    pub buffer: *mut u8,
    /// Size of one ring entry in bytes.
    pub entry_size: u32,
    /// Number of ring entries.
    pub num_entries: u32,
    /// Doorbell register.
    pub doorbell: *mut u32,
    /// Maximum number of entries per doorbell ring.
    pub max_batch: u32,
    /// Bitmask of `EFADV_WQ_CAPS_*`.
    pub caps: u16,
    /// Reserved, zero.
    pub reserved: [u8; 2],
}
assert_layout!(
    efadv_wq_attr,
    size = 40,
    align = 8,
    comp_mask = 0,
    buffer = 8,
    entry_size = 16,
    num_entries = 20,
    doorbell = 24,
    max_batch = 32,
    caps = 36,
    reserved = 38
);

impl Default for efadv_wq_attr {
    fn default() -> Self {
        Self {
            comp_mask: 0,
            buffer: core::ptr::null_mut(),
            entry_size: 0,
            num_entries: 0,
            doorbell: core::ptr::null_mut(),
            max_batch: 0,
            caps: 0,
            reserved: [0; 2],
        }
    }
}

/// `enum efadv_wr_processing_hint`: the hint is burst/packets-per-second sensitive.
pub const EFADV_WR_PROCESSING_HINT_BURST_PPS_SENSITIVE: u32 = 1 << 0;

/// Type of `efadv_qp.wr_set_processing_hints`.
pub type efadv_wr_set_processing_hints_fn =
    unsafe extern "C" fn(efadv_qp: *mut efadv_qp, hints: u32);

/// `struct efadv_qp`: EFA extensions of an extended QP, from [`efadv_qp_from_ibv_qp_ex`](super::efadv_qp_from_ibv_qp_ex).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct efadv_qp {
    /// Compatibility mask.
    pub comp_mask: u64,
    /// Set only if the QP was created with [`EFADV_WR_EX_WITH_PROCESSING_HINTS`].
    pub wr_set_processing_hints: Option<efadv_wr_set_processing_hints_fn>,
}
assert_layout!(
    efadv_qp,
    size = 16,
    align = 8,
    comp_mask = 0,
    wr_set_processing_hints = 8
);
