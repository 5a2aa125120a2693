//! EFA identity values and the device's raw completion status codes.

use rdma_sys::ibv_wc_status;

/// PCI vendor id of EFA devices (Amazon), as in `ibv_device_attr.vendor_id`.
pub const EFA_VENDOR_ID: u32 = 0x1d0f;

/// PCI device id of first-generation EFA (`vendor_part_id`, rdma-core 24).
pub const EFA_PART_ID_EFA0: u32 = 0xefa0;
/// PCI device id `0xefa1` (rdma-core 31).
pub const EFA_PART_ID_EFA1: u32 = 0xefa1;
/// PCI device id `0xefa2` (rdma-core 43).
pub const EFA_PART_ID_EFA2: u32 = 0xefa2;
/// PCI device id `0xefa3` (rdma-core 53).
pub const EFA_PART_ID_EFA3: u32 = 0xefa3;
/// PCI device id `0xefa4` (rdma-core 64).
pub const EFA_PART_ID_EFA4: u32 = 0xefa4;
/// Every PCI device id rdma-core 65 binds to the EFA provider.
pub const EFA_PART_IDS: [u32; 5] = [
    EFA_PART_ID_EFA0,
    EFA_PART_ID_EFA1,
    EFA_PART_ID_EFA2,
    EFA_PART_ID_EFA3,
    EFA_PART_ID_EFA4,
];

/// Whether `(vendor_id, vendor_part_id)` from `ibv_query_device` names an EFA device.
pub const fn is_efa_device(vendor_id: u32, vendor_part_id: u32) -> bool {
    if vendor_id != EFA_VENDOR_ID {
        return false;
    }
    let mut i = 0;
    while i < EFA_PART_IDS.len() {
        if EFA_PART_IDS[i] == vendor_part_id {
            return true;
        }
        i += 1;
    }
    false
}

/// `enum efa_io_comp_status`: the raw status an EFA completion carries. It is reported as
/// `vendor_err` (`ibv_wc.vendor_err`, `ibv_wc_read_vendor_err`); [`to_ibv_wc_status`] gives the
/// generic status rdma-core 65 derives from it.
pub mod comp_status {
    /// Success.
    pub const OK: u32 = 0;
    /// Flushed during QP destroy.
    pub const FLUSHED: u32 = 1;
    /// Internal QP error.
    pub const LOCAL_ERROR_QP_INTERNAL_ERROR: u32 = 2;
    /// Unsupported operation (`..._INVALID_OP_TYPE` before rdma-core 52).
    pub const LOCAL_ERROR_UNSUPPORTED_OP: u32 = 3;
    /// Bad address handle.
    pub const LOCAL_ERROR_INVALID_AH: u32 = 4;
    /// lkey not registered, IOVA mismatch or insufficient access.
    pub const LOCAL_ERROR_INVALID_LKEY: u32 = 5;
    /// Message too long.
    pub const LOCAL_ERROR_BAD_LENGTH: u32 = 6;
    /// rkey not registered, remote IOVA mismatch or access denied.
    pub const REMOTE_ERROR_BAD_ADDRESS: u32 = 7;
    /// Connection reset by the remote side.
    pub const REMOTE_ERROR_ABORT: u32 = 8;
    /// Destination QP absent or in error.
    pub const REMOTE_ERROR_BAD_DEST_QPN: u32 = 9;
    /// No receive WR at the destination (after retries).
    pub const REMOTE_ERROR_RNR: u32 = 10;
    /// Receiver's scatter list too short.
    pub const REMOTE_ERROR_BAD_LENGTH: u32 = 11;
    /// Unexpected status from the responder.
    pub const REMOTE_ERROR_BAD_STATUS: u32 = 12;
    /// The remote stopped responding.
    pub const LOCAL_ERROR_UNRESP_REMOTE: u32 = 13;
    /// No valid AH for this peer at the remote (RDMA).
    pub const REMOTE_ERROR_UNKNOWN_PEER: u32 = 14;
    /// The remote never responded.
    pub const LOCAL_ERROR_UNREACH_REMOTE: u32 = 15;
    /// Feature mismatch with the remote.
    pub const REMOTE_ERROR_FEATURE_MISMATCH: u32 = 18;

    /// Name of a status without the `EFA_IO_COMP_STATUS_` prefix, or `None` if unassigned.
    pub const fn name(status: u32) -> Option<&'static str> {
        Some(match status {
            OK => "OK",
            FLUSHED => "FLUSHED",
            LOCAL_ERROR_QP_INTERNAL_ERROR => "LOCAL_ERROR_QP_INTERNAL_ERROR",
            LOCAL_ERROR_UNSUPPORTED_OP => "LOCAL_ERROR_UNSUPPORTED_OP",
            LOCAL_ERROR_INVALID_AH => "LOCAL_ERROR_INVALID_AH",
            LOCAL_ERROR_INVALID_LKEY => "LOCAL_ERROR_INVALID_LKEY",
            LOCAL_ERROR_BAD_LENGTH => "LOCAL_ERROR_BAD_LENGTH",
            REMOTE_ERROR_BAD_ADDRESS => "REMOTE_ERROR_BAD_ADDRESS",
            REMOTE_ERROR_ABORT => "REMOTE_ERROR_ABORT",
            REMOTE_ERROR_BAD_DEST_QPN => "REMOTE_ERROR_BAD_DEST_QPN",
            REMOTE_ERROR_RNR => "REMOTE_ERROR_RNR",
            REMOTE_ERROR_BAD_LENGTH => "REMOTE_ERROR_BAD_LENGTH",
            REMOTE_ERROR_BAD_STATUS => "REMOTE_ERROR_BAD_STATUS",
            LOCAL_ERROR_UNRESP_REMOTE => "LOCAL_ERROR_UNRESP_REMOTE",
            REMOTE_ERROR_UNKNOWN_PEER => "REMOTE_ERROR_UNKNOWN_PEER",
            LOCAL_ERROR_UNREACH_REMOTE => "LOCAL_ERROR_UNREACH_REMOTE",
            REMOTE_ERROR_FEATURE_MISMATCH => "REMOTE_ERROR_FEATURE_MISMATCH",
            _ => return None,
        })
    }
}

/// The `ibv_wc_status` rdma-core 65 reports for a raw EFA completion status
/// (`IBV_WC_GENERAL_ERR` for unassigned values).
pub const fn to_ibv_wc_status(status: u32) -> ibv_wc_status::Type {
    use comp_status::*;
    use ibv_wc_status::*;
    match status {
        OK => IBV_WC_SUCCESS,
        FLUSHED => IBV_WC_WR_FLUSH_ERR,
        LOCAL_ERROR_QP_INTERNAL_ERROR | LOCAL_ERROR_UNSUPPORTED_OP | LOCAL_ERROR_INVALID_AH => {
            IBV_WC_LOC_QP_OP_ERR
        }
        LOCAL_ERROR_INVALID_LKEY => IBV_WC_LOC_PROT_ERR,
        LOCAL_ERROR_BAD_LENGTH => IBV_WC_LOC_LEN_ERR,
        REMOTE_ERROR_BAD_ADDRESS => IBV_WC_REM_ACCESS_ERR,
        REMOTE_ERROR_ABORT => IBV_WC_REM_ABORT_ERR,
        REMOTE_ERROR_BAD_DEST_QPN => IBV_WC_REM_INV_RD_REQ_ERR,
        REMOTE_ERROR_RNR => IBV_WC_RNR_RETRY_EXC_ERR,
        REMOTE_ERROR_BAD_LENGTH | REMOTE_ERROR_FEATURE_MISMATCH => IBV_WC_REM_INV_REQ_ERR,
        REMOTE_ERROR_BAD_STATUS => IBV_WC_BAD_RESP_ERR,
        LOCAL_ERROR_UNRESP_REMOTE | LOCAL_ERROR_UNREACH_REMOTE => IBV_WC_RESP_TIMEOUT_ERR,
        REMOTE_ERROR_UNKNOWN_PEER => IBV_WC_REM_OP_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping_matches_the_device_model_table() {
        // (raw, ibv_wc_status value) from efa-device-model.md §4.
        let table: [(u32, u32); 20] = [
            (0, 0),
            (1, 5),
            (2, 2),
            (3, 2),
            (4, 2),
            (5, 4),
            (6, 1),
            (7, 10),
            (8, 16),
            (9, 15),
            (10, 13),
            (11, 9),
            (12, 7),
            (13, 20),
            (14, 11),
            (15, 20),
            (16, 21),
            (17, 21),
            (18, 9),
            (19, 21),
        ];
        for (raw, expected) in table {
            assert_eq!(to_ibv_wc_status(raw), expected, "raw status {raw}");
        }
        assert_eq!(comp_status::name(16), None);
        assert_eq!(comp_status::name(18), Some("REMOTE_ERROR_FEATURE_MISMATCH"));
        assert_eq!(comp_status::name(10), Some("REMOTE_ERROR_RNR"));
    }

    #[test]
    fn efa_device_ids() {
        assert!(is_efa_device(0x1d0f, 0xefa3));
        assert!(!is_efa_device(0x1d0f, 0xefa5));
        assert!(!is_efa_device(0x15b3, 0xefa0));
    }
}
