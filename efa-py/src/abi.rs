//! The rdma-core ABI values behind `efa.enums`, read from the bindings (`_efa._abi()`),
//! so the suite can prove that the Python enums, written out for readers and IDEs, carry
//! exactly the numbers of the C headers.

use efa_typestate::sys as efa_sys;
use efa_typestate::sys::verbs as v;
use pyo3::prelude::*;
use pyo3::types::PyDict;

type Members = &'static [(&'static str, u32)];

/// Every enum of `efa.enums` but `CreateCQWCFlags` (see [`cq_wc_flags`]): its name and
/// its members' binding values.
const ENUMS: [(&str, Members); 13] = [
    ("AccessFlags", ACCESS),
    ("QPType", QP_TYPE),
    ("QPState", QP_STATE),
    ("QPAttrMask", QP_ATTR_MASK),
    ("QPExSendOpsFlags", SEND_OPS),
    ("WROpcode", WR_OPCODE),
    ("SendFlags", SEND_FLAGS),
    ("WCStatus", WC_STATUS),
    ("WCOpcode", WC_OPCODE),
    ("WCFlags", WC_FLAGS),
    ("EfaDeviceCaps", EFA_CAPS),
    ("MTU", MTU),
    ("PortState", PORT_STATE),
];

/// `CreateCQWCFlags`: the `IBV_WC_EX_WITH_*` bits and `IBV_WC_STANDARD_FLAGS`, a macro
/// of `verbs.h` the bindings lack (the or of the seven).
fn cq_wc_flags() -> [(&'static str, u32); 8] {
    use v::ibv_create_cq_wc_flags as Wcx;
    let bits = [
        ("BYTE_LEN", Wcx::IBV_WC_EX_WITH_BYTE_LEN.0),
        ("IMM", Wcx::IBV_WC_EX_WITH_IMM.0),
        ("QP_NUM", Wcx::IBV_WC_EX_WITH_QP_NUM.0),
        ("SRC_QP", Wcx::IBV_WC_EX_WITH_SRC_QP.0),
        ("SLID", Wcx::IBV_WC_EX_WITH_SLID.0),
        ("SL", Wcx::IBV_WC_EX_WITH_SL.0),
        ("DLID_PATH_BITS", Wcx::IBV_WC_EX_WITH_DLID_PATH_BITS.0),
    ];
    let standard = bits.iter().fold(0, |a, (_, b)| a | b);
    let [a, b, c, d, e, f, g] = bits;
    [a, b, c, d, e, f, g, ("STANDARD", standard)]
}

use v::ibv_access_flags as Acc;
const ACCESS: Members = &[
    ("LOCAL_WRITE", Acc::IBV_ACCESS_LOCAL_WRITE.0),
    ("REMOTE_WRITE", Acc::IBV_ACCESS_REMOTE_WRITE.0),
    ("REMOTE_READ", Acc::IBV_ACCESS_REMOTE_READ.0),
    ("RELAXED_ORDERING", Acc::IBV_ACCESS_RELAXED_ORDERING.0),
];
const QP_TYPE: Members = &[
    ("UD", v::ibv_qp_type::IBV_QPT_UD),
    ("SRD", v::ibv_qp_type::IBV_QPT_DRIVER),
];
use v::ibv_qp_state as Qps;
const QP_STATE: Members = &[
    ("RESET", Qps::IBV_QPS_RESET),
    ("INIT", Qps::IBV_QPS_INIT),
    ("RTR", Qps::IBV_QPS_RTR),
    ("RTS", Qps::IBV_QPS_RTS),
    ("SQD", Qps::IBV_QPS_SQD),
    ("SQE", Qps::IBV_QPS_SQE),
    ("ERR", Qps::IBV_QPS_ERR),
    ("UNKNOWN", Qps::IBV_QPS_UNKNOWN),
];
use v::ibv_qp_attr_mask as Mask;
const QP_ATTR_MASK: Members = &[
    ("STATE", Mask::IBV_QP_STATE.0),
    ("CUR_STATE", Mask::IBV_QP_CUR_STATE.0),
    ("PKEY_INDEX", Mask::IBV_QP_PKEY_INDEX.0),
    ("PORT", Mask::IBV_QP_PORT.0),
    ("QKEY", Mask::IBV_QP_QKEY.0),
    ("RNR_RETRY", Mask::IBV_QP_RNR_RETRY.0),
    ("RQ_PSN", Mask::IBV_QP_RQ_PSN.0),
    ("SQ_PSN", Mask::IBV_QP_SQ_PSN.0),
];
use v::ibv_qp_create_send_ops_flags as Ops;
const SEND_OPS: Members = &[
    ("RDMA_WRITE", Ops::IBV_QP_EX_WITH_RDMA_WRITE.0),
    (
        "RDMA_WRITE_WITH_IMM",
        Ops::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM.0,
    ),
    ("SEND", Ops::IBV_QP_EX_WITH_SEND.0),
    ("SEND_WITH_IMM", Ops::IBV_QP_EX_WITH_SEND_WITH_IMM.0),
    ("RDMA_READ", Ops::IBV_QP_EX_WITH_RDMA_READ.0),
];
use v::ibv_wr_opcode as Wr;
const WR_OPCODE: Members = &[
    ("RDMA_WRITE", Wr::IBV_WR_RDMA_WRITE),
    ("RDMA_WRITE_WITH_IMM", Wr::IBV_WR_RDMA_WRITE_WITH_IMM),
    ("SEND", Wr::IBV_WR_SEND),
    ("SEND_WITH_IMM", Wr::IBV_WR_SEND_WITH_IMM),
    ("RDMA_READ", Wr::IBV_WR_RDMA_READ),
];
use v::ibv_send_flags as Sf;
const SEND_FLAGS: Members = &[
    ("FENCE", Sf::IBV_SEND_FENCE.0),
    ("SIGNALED", Sf::IBV_SEND_SIGNALED.0),
    ("SOLICITED", Sf::IBV_SEND_SOLICITED.0),
    ("INLINE", Sf::IBV_SEND_INLINE.0),
];
use v::ibv_wc_status as St;
const WC_STATUS: Members = &[
    ("SUCCESS", St::IBV_WC_SUCCESS),
    ("LOC_LEN_ERR", St::IBV_WC_LOC_LEN_ERR),
    ("LOC_QP_OP_ERR", St::IBV_WC_LOC_QP_OP_ERR),
    ("LOC_EEC_OP_ERR", St::IBV_WC_LOC_EEC_OP_ERR),
    ("LOC_PROT_ERR", St::IBV_WC_LOC_PROT_ERR),
    ("WR_FLUSH_ERR", St::IBV_WC_WR_FLUSH_ERR),
    ("MW_BIND_ERR", St::IBV_WC_MW_BIND_ERR),
    ("BAD_RESP_ERR", St::IBV_WC_BAD_RESP_ERR),
    ("LOC_ACCESS_ERR", St::IBV_WC_LOC_ACCESS_ERR),
    ("REM_INV_REQ_ERR", St::IBV_WC_REM_INV_REQ_ERR),
    ("REM_ACCESS_ERR", St::IBV_WC_REM_ACCESS_ERR),
    ("REM_OP_ERR", St::IBV_WC_REM_OP_ERR),
    ("RETRY_EXC_ERR", St::IBV_WC_RETRY_EXC_ERR),
    ("RNR_RETRY_EXC_ERR", St::IBV_WC_RNR_RETRY_EXC_ERR),
    ("LOC_RDD_VIOL_ERR", St::IBV_WC_LOC_RDD_VIOL_ERR),
    ("REM_INV_RD_REQ_ERR", St::IBV_WC_REM_INV_RD_REQ_ERR),
    ("REM_ABORT_ERR", St::IBV_WC_REM_ABORT_ERR),
    ("INV_EECN_ERR", St::IBV_WC_INV_EECN_ERR),
    ("INV_EEC_STATE_ERR", St::IBV_WC_INV_EEC_STATE_ERR),
    ("FATAL_ERR", St::IBV_WC_FATAL_ERR),
    ("RESP_TIMEOUT_ERR", St::IBV_WC_RESP_TIMEOUT_ERR),
    ("GENERAL_ERR", St::IBV_WC_GENERAL_ERR),
];
use v::ibv_wc_opcode as Wco;
const WC_OPCODE: Members = &[
    ("SEND", Wco::IBV_WC_SEND),
    ("RDMA_WRITE", Wco::IBV_WC_RDMA_WRITE),
    ("RDMA_READ", Wco::IBV_WC_RDMA_READ),
    ("RECV", Wco::IBV_WC_RECV),
    ("RECV_RDMA_WITH_IMM", Wco::IBV_WC_RECV_RDMA_WITH_IMM),
];
const WC_FLAGS: Members = &[
    ("GRH", v::ibv_wc_flags::IBV_WC_GRH.0),
    ("WITH_IMM", v::ibv_wc_flags::IBV_WC_WITH_IMM.0),
];
const EFA_CAPS: Members = &[
    ("RDMA_READ", efa_sys::EFADV_DEVICE_ATTR_CAPS_RDMA_READ),
    ("RNR_RETRY", efa_sys::EFADV_DEVICE_ATTR_CAPS_RNR_RETRY),
    ("CQ_WITH_SGID", efa_sys::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID),
    ("RDMA_WRITE", efa_sys::EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE),
    (
        "UNSOLICITED_WRITE_RECV",
        efa_sys::EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV,
    ),
    (
        "CQ_WITH_EXT_MEM_DMABUF",
        efa_sys::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_EXT_MEM_DMABUF,
    ),
];
use v::ibv_mtu as Mtu;
const MTU: Members = &[
    ("MTU_256", Mtu::IBV_MTU_256),
    ("MTU_512", Mtu::IBV_MTU_512),
    ("MTU_1024", Mtu::IBV_MTU_1024),
    ("MTU_2048", Mtu::IBV_MTU_2048),
    ("MTU_4096", Mtu::IBV_MTU_4096),
];
use v::ibv_port_state as Ps;
const PORT_STATE: Members = &[
    ("NOP", Ps::IBV_PORT_NOP),
    ("DOWN", Ps::IBV_PORT_DOWN),
    ("INIT", Ps::IBV_PORT_INIT),
    ("ARMED", Ps::IBV_PORT_ARMED),
    ("ACTIVE", Ps::IBV_PORT_ACTIVE),
    ("ACTIVE_DEFER", Ps::IBV_PORT_ACTIVE_DEFER),
];

/// `{enum name: {member: value}}` of every `efa.enums` enum, from the bindings.
#[pyfunction]
pub fn _abi(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    let cq = cq_wc_flags();
    let all = ENUMS
        .iter()
        .map(|&(n, m)| (n, m))
        .chain([("CreateCQWCFlags", &cq[..])]);
    for (name, members) in all {
        let d = PyDict::new(py);
        for (member, value) in members {
            d.set_item(member, value)?;
        }
        out.set_item(name, d)?;
    }
    Ok(out)
}
