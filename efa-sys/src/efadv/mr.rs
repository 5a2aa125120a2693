//! Memory regions: interconnect ids of a registration (`EFA_1.3`).

/// `efadv_mr_attr.ic_id_validity` bit: `recv_ic_id` is valid.
pub const EFADV_MR_ATTR_VALIDITY_RECV_IC_ID: u16 = 1 << 0;
/// `efadv_mr_attr.ic_id_validity` bit: `rdma_read_ic_id` is valid.
pub const EFADV_MR_ATTR_VALIDITY_RDMA_READ_IC_ID: u16 = 1 << 1;
/// `efadv_mr_attr.ic_id_validity` bit: `rdma_recv_ic_id` is valid.
pub const EFADV_MR_ATTR_VALIDITY_RDMA_RECV_IC_ID: u16 = 1 << 2;

/// `struct efadv_mr_attr`: filled by [`efadv_query_mr`](super::efadv_query_mr).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_mr_attr {
    /// Compatibility mask; output, always 0.
    pub comp_mask: u64,
    /// Bitmask of `EFADV_MR_ATTR_VALIDITY_*`.
    pub ic_id_validity: u16,
    /// Interconnect id used to reach the MR for receives.
    pub recv_ic_id: u16,
    /// Interconnect id used to reach the MR for RDMA read.
    pub rdma_read_ic_id: u16,
    /// Interconnect id used to reach the MR for incoming RDMA write.
    pub rdma_recv_ic_id: u16,
}
assert_layout!(
    efadv_mr_attr,
    size = 16,
    align = 8,
    comp_mask = 0,
    ic_id_validity = 8,
    recv_ic_id = 10,
    rdma_read_ic_id = 12,
    rdma_recv_ic_id = 14
);
