//! Compares every hand-written struct, constant and function of efa-sys (and the rdma-sys
//! structs an EFA layer reads directly) with real C headers: the system rdma-core 44 headers
//! always, and rdma-core 65 headers fetched once with `shared/tools/rdma-core-headers`
//! (printing `skipped: <reason>` when they cannot be fetched).
//!
//! One table below drives both sides: it records Rust's offsets/sizes and names the C members;
//! a C program generated from it prints the C values, so a wrong Rust offset fails here.

use efa_sys::efadv::*;
use efa_sys::verbs::{
    ibv_ah, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device_attr_ex, ibv_gid_entry,
    ibv_modify_cq_attr, ibv_mr, ibv_parent_domain_init_attr, ibv_pd, ibv_port_attr, ibv_qp,
    ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_query_device_ex_input, ibv_send_wr,
    ibv_td, ibv_td_init_attr, ibv_wc, verbs_context,
};
use efa_sys::verbs_ext::*;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Version {
    V44,
    V65,
}

/// How the C struct's size relates to Rust's in one header version.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SizeRule {
    /// Same size (and alignment).
    Equal,
    /// The C struct is an older, shorter prefix of the Rust struct (efadv `inlen` rule).
    CShorter,
    /// The Rust struct is a prefix of the C struct (rdma-sys's v44 `ibv_qp_ex` vs v65).
    CLonger,
    /// The struct does not exist in this version.
    Absent,
}

/// What a Rust field corresponds to in the rdma-core 44 header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum InV44 {
    /// Same member name.
    Same,
    /// Not in rdma-core 44 (appended later).
    Absent,
    /// Carved out of this older (reserved) member: the Rust field must lie inside it.
    Inside(&'static str),
}

struct FieldCheck {
    c_member: &'static str,
    offset: usize,
    size: usize,
    v44: InV44,
}

struct StructCheck {
    c_name: &'static str,
    size: usize,
    align: usize,
    v44: SizeRule,
    v65: SizeRule,
    fields: Vec<FieldCheck>,
}

struct ConstCheck {
    c_name: &'static str,
    value: i128,
}

/// An arbitrary C expression compared with a Rust value in one version.
struct ExprCheck {
    label: &'static str,
    c_expr: &'static str,
    value: usize,
    versions: &'static [Version],
}

fn size_of_pointee<T, F>(_project: fn(*const T) -> *const F) -> usize {
    size_of::<F>()
}

macro_rules! field {
    ($t:ty, $f:ident) => {
        field!($t, $f, stringify!($f))
    };
    ($t:ty, $f:ident, $c:expr) => {
        FieldCheck {
            c_member: $c,
            offset: offset_of!($t, $f),
            // SAFETY: the projection is never called (`size_of_pointee` ignores it); it
            // only names the field's type, so no pointer is ever dereferenced.
            size: size_of_pointee::<$t, _>(|p| unsafe { std::ptr::addr_of!((*p).$f) }),
            v44: InV44::Same,
        }
    };
}

/// A member of an anonymous inner struct, e.g. `ext_mem_dmabuf.fd`.
macro_rules! nested {
    ($t:ty, $outer:ident, $inner_t:ty, $f:ident) => {
        FieldCheck {
            c_member: concat!(stringify!($outer), ".", stringify!($f)),
            offset: offset_of!($t, $outer) + offset_of!($inner_t, $f),
            // SAFETY: as in `field!`: the projection is never called, it only names the
            // inner field's type.
            size: size_of_pointee::<$inner_t, _>(|p| unsafe { std::ptr::addr_of!((*p).$f) }),
            v44: InV44::Same,
        }
    };
}

impl FieldCheck {
    fn v44(mut self, v44: InV44) -> Self {
        self.v44 = v44;
        self
    }
}

fn strukt<T>(
    c_name: &'static str,
    v44: SizeRule,
    v65: SizeRule,
    fields: Vec<FieldCheck>,
) -> StructCheck {
    StructCheck {
        c_name,
        size: size_of::<T>(),
        align: align_of::<T>(),
        v44,
        v65,
        fields,
    }
}

fn structs() -> Vec<StructCheck> {
    use InV44::{Absent, Inside};
    use SizeRule::*;
    vec![
        strukt::<efadv_device_attr>(
            "efadv_device_attr",
            Equal,
            Equal,
            vec![
                field!(efadv_device_attr, comp_mask),
                field!(efadv_device_attr, max_sq_wr),
                field!(efadv_device_attr, max_rq_wr),
                field!(efadv_device_attr, max_sq_sge),
                field!(efadv_device_attr, max_rq_sge),
                field!(efadv_device_attr, inline_buf_size),
                field!(efadv_device_attr, inline_buf_size_ex).v44(Inside("reserved")),
                field!(efadv_device_attr, device_caps),
                field!(efadv_device_attr, max_rdma_size),
            ],
        ),
        strukt::<efadv_ah_attr>(
            "efadv_ah_attr",
            Equal,
            Equal,
            vec![
                field!(efadv_ah_attr, comp_mask),
                field!(efadv_ah_attr, ahn),
                field!(efadv_ah_attr, reserved),
            ],
        ),
        strukt::<efadv_sq_depth_attr>(
            "efadv_sq_depth_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_sq_depth_attr, comp_mask),
                field!(efadv_sq_depth_attr, flags),
                field!(efadv_sq_depth_attr, max_send_sge),
                field!(efadv_sq_depth_attr, max_rdma_sge),
                field!(efadv_sq_depth_attr, max_inline_data),
            ],
        ),
        strukt::<efadv_rq_depth_attr>(
            "efadv_rq_depth_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_rq_depth_attr, comp_mask),
                field!(efadv_rq_depth_attr, max_recv_sge),
            ],
        ),
        strukt::<efadv_qp_init_attr>(
            "efadv_qp_init_attr",
            CShorter,
            Equal,
            vec![
                field!(efadv_qp_init_attr, comp_mask),
                field!(efadv_qp_init_attr, driver_qp_type),
                field!(efadv_qp_init_attr, flags).v44(Inside("reserved")),
                field!(efadv_qp_init_attr, sl).v44(Inside("reserved")),
                field!(efadv_qp_init_attr, reserved).v44(Inside("reserved")),
                field!(efadv_qp_init_attr, wr_flags).v44(Absent),
            ],
        ),
        strukt::<efadv_wq_attr>(
            "efadv_wq_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_wq_attr, comp_mask),
                field!(efadv_wq_attr, buffer),
                field!(efadv_wq_attr, entry_size),
                field!(efadv_wq_attr, num_entries),
                field!(efadv_wq_attr, doorbell),
                field!(efadv_wq_attr, max_batch),
                field!(efadv_wq_attr, caps),
                field!(efadv_wq_attr, reserved),
            ],
        ),
        strukt::<efadv_qp>(
            "efadv_qp",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_qp, comp_mask),
                field!(efadv_qp, wr_set_processing_hints),
            ],
        ),
        strukt::<efadv_cq_init_attr>(
            "efadv_cq_init_attr",
            CShorter,
            Equal,
            vec![
                field!(efadv_cq_init_attr, comp_mask),
                field!(efadv_cq_init_attr, wc_flags),
                field!(efadv_cq_init_attr, flags).v44(Absent),
                field!(efadv_cq_init_attr, ext_mem_dmabuf).v44(Absent),
                nested!(
                    efadv_cq_init_attr,
                    ext_mem_dmabuf,
                    efadv_cq_init_attr_ext_mem_dmabuf,
                    buffer
                )
                .v44(Absent),
                nested!(
                    efadv_cq_init_attr,
                    ext_mem_dmabuf,
                    efadv_cq_init_attr_ext_mem_dmabuf,
                    length
                )
                .v44(Absent),
                nested!(
                    efadv_cq_init_attr,
                    ext_mem_dmabuf,
                    efadv_cq_init_attr_ext_mem_dmabuf,
                    offset
                )
                .v44(Absent),
                nested!(
                    efadv_cq_init_attr,
                    ext_mem_dmabuf,
                    efadv_cq_init_attr_ext_mem_dmabuf,
                    fd
                )
                .v44(Absent),
                nested!(
                    efadv_cq_init_attr,
                    ext_mem_dmabuf,
                    efadv_cq_init_attr_ext_mem_dmabuf,
                    reserved
                )
                .v44(Absent),
            ],
        ),
        strukt::<efadv_cq_attr>(
            "efadv_cq_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_cq_attr, comp_mask),
                field!(efadv_cq_attr, buffer),
                field!(efadv_cq_attr, entry_size),
                field!(efadv_cq_attr, num_entries),
                field!(efadv_cq_attr, doorbell),
            ],
        ),
        strukt::<efadv_cq>(
            "efadv_cq",
            CShorter,
            Equal,
            vec![
                field!(efadv_cq, comp_mask),
                field!(efadv_cq, wc_read_sgid),
                field!(efadv_cq, wc_is_unsolicited).v44(Absent),
            ],
        ),
        strukt::<efadv_memory_location>(
            "efadv_memory_location",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_memory_location, ptr),
                field!(efadv_memory_location, dmabuf),
                nested!(
                    efadv_memory_location,
                    dmabuf,
                    efadv_memory_location_dmabuf,
                    offset
                ),
                nested!(
                    efadv_memory_location,
                    dmabuf,
                    efadv_memory_location_dmabuf,
                    fd
                ),
                nested!(
                    efadv_memory_location,
                    dmabuf,
                    efadv_memory_location_dmabuf,
                    reserved
                ),
                field!(efadv_memory_location, type_, "type"),
                field!(efadv_memory_location, reserved),
            ],
        ),
        strukt::<efadv_comp_cntr_init_attr>(
            "efadv_comp_cntr_init_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_comp_cntr_init_attr, comp_mask),
                field!(efadv_comp_cntr_init_attr, flags),
                field!(efadv_comp_cntr_init_attr, reserved),
                field!(efadv_comp_cntr_init_attr, comp_cntr_ext_mem),
                field!(efadv_comp_cntr_init_attr, err_cntr_ext_mem),
            ],
        ),
        strukt::<efadv_mr_attr>(
            "efadv_mr_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(efadv_mr_attr, comp_mask),
                field!(efadv_mr_attr, ic_id_validity),
                field!(efadv_mr_attr, recv_ic_id),
                field!(efadv_mr_attr, rdma_read_ic_id),
                field!(efadv_mr_attr, rdma_recv_ic_id),
            ],
        ),
        // Verbs structs efa-sys adds.
        strukt::<ibv_comp_cntr_caps>(
            "ibv_comp_cntr_caps",
            SizeRule::Absent,
            Equal,
            vec![
                field!(ibv_comp_cntr_caps, max_value),
                field!(ibv_comp_cntr_caps, max_counters),
                field!(ibv_comp_cntr_caps, supported_qp_attach_ops),
            ],
        ),
        strukt::<ibv_comp_cntr>(
            "ibv_comp_cntr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(ibv_comp_cntr, context),
                field!(ibv_comp_cntr, handle),
            ],
        ),
        strukt::<ibv_comp_cntr_init_attr>(
            "ibv_comp_cntr_init_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(ibv_comp_cntr_init_attr, comp_mask),
                field!(ibv_comp_cntr_init_attr, type_, "type"),
                field!(ibv_comp_cntr_init_attr, flags),
            ],
        ),
        strukt::<ibv_qp_attach_comp_cntr_attr>(
            "ibv_qp_attach_comp_cntr_attr",
            SizeRule::Absent,
            Equal,
            vec![
                field!(ibv_qp_attach_comp_cntr_attr, comp_mask),
                field!(ibv_qp_attach_comp_cntr_attr, op_mask),
            ],
        ),
        // rdma-sys structs an EFA layer relies on.
        strukt::<ibv_gid_entry>(
            "ibv_gid_entry",
            Equal,
            Equal,
            vec![
                field!(ibv_gid_entry, gid),
                field!(ibv_gid_entry, gid_index),
                field!(ibv_gid_entry, port_num),
                field!(ibv_gid_entry, gid_type),
                field!(ibv_gid_entry, ndev_ifindex),
            ],
        ),
        strukt::<ibv_qp_ex>(
            "ibv_qp_ex",
            Equal,
            CLonger,
            vec![
                field!(ibv_qp_ex, qp_base),
                field!(ibv_qp_ex, comp_mask),
                field!(ibv_qp_ex, wr_id),
                field!(ibv_qp_ex, wr_flags),
                field!(ibv_qp_ex, wr_atomic_cmp_swp),
                field!(ibv_qp_ex, wr_atomic_fetch_add),
                field!(ibv_qp_ex, wr_bind_mw),
                field!(ibv_qp_ex, wr_local_inv),
                field!(ibv_qp_ex, wr_rdma_read),
                field!(ibv_qp_ex, wr_rdma_write),
                field!(ibv_qp_ex, wr_rdma_write_imm),
                field!(ibv_qp_ex, wr_send),
                field!(ibv_qp_ex, wr_send_imm),
                field!(ibv_qp_ex, wr_send_inv),
                field!(ibv_qp_ex, wr_send_tso),
                field!(ibv_qp_ex, wr_set_ud_addr),
                field!(ibv_qp_ex, wr_set_xrc_srqn),
                field!(ibv_qp_ex, wr_set_inline_data),
                field!(ibv_qp_ex, wr_set_inline_data_list),
                field!(ibv_qp_ex, wr_set_sge),
                field!(ibv_qp_ex, wr_set_sge_list),
                field!(ibv_qp_ex, wr_start),
                field!(ibv_qp_ex, wr_complete),
                field!(ibv_qp_ex, wr_abort),
                field!(ibv_qp_ex, wr_atomic_write),
            ],
        ),
        strukt::<ibv_cq_ex>(
            "ibv_cq_ex",
            Equal,
            Equal,
            vec![
                field!(ibv_cq_ex, context),
                field!(ibv_cq_ex, channel),
                field!(ibv_cq_ex, cq_context),
                field!(ibv_cq_ex, handle),
                field!(ibv_cq_ex, cqe),
                field!(ibv_cq_ex, mutex),
                field!(ibv_cq_ex, cond),
                field!(ibv_cq_ex, comp_events_completed),
                field!(ibv_cq_ex, async_events_completed),
                field!(ibv_cq_ex, comp_mask),
                field!(ibv_cq_ex, status),
                field!(ibv_cq_ex, wr_id),
                field!(ibv_cq_ex, start_poll),
                field!(ibv_cq_ex, next_poll),
                field!(ibv_cq_ex, end_poll),
                field!(ibv_cq_ex, read_opcode),
                field!(ibv_cq_ex, read_vendor_err),
                field!(ibv_cq_ex, read_byte_len),
                field!(ibv_cq_ex, read_imm_data),
                field!(ibv_cq_ex, read_qp_num),
                field!(ibv_cq_ex, read_src_qp),
                field!(ibv_cq_ex, read_wc_flags),
                field!(ibv_cq_ex, read_slid),
                field!(ibv_cq_ex, read_sl),
                field!(ibv_cq_ex, read_dlid_path_bits),
                field!(ibv_cq_ex, read_completion_ts),
                field!(ibv_cq_ex, read_cvlan),
                field!(ibv_cq_ex, read_flow_tag),
                field!(ibv_cq_ex, read_tm_info),
                field!(ibv_cq_ex, read_completion_wallclock_ns),
            ],
        ),
        // Other rdma-sys structs the safe layer fills or reads (ibv_wc and ibv_send_wr are
        // hand-written in rdma-sys, not generated).
        strukt::<ibv_context>(
            "ibv_context",
            Equal,
            Equal,
            vec![
                field!(ibv_context, device),
                field!(ibv_context, ops),
                field!(ibv_context, cmd_fd),
                field!(ibv_context, async_fd),
                field!(ibv_context, num_comp_vectors),
                field!(ibv_context, mutex),
                field!(ibv_context, abi_compat),
            ],
        ),
        strukt::<ibv_qp_init_attr_ex>(
            "ibv_qp_init_attr_ex",
            Equal,
            Equal,
            vec![
                field!(ibv_qp_init_attr_ex, qp_context),
                field!(ibv_qp_init_attr_ex, send_cq),
                field!(ibv_qp_init_attr_ex, recv_cq),
                field!(ibv_qp_init_attr_ex, srq),
                field!(ibv_qp_init_attr_ex, cap),
                field!(ibv_qp_init_attr_ex, qp_type),
                field!(ibv_qp_init_attr_ex, sq_sig_all),
                field!(ibv_qp_init_attr_ex, comp_mask),
                field!(ibv_qp_init_attr_ex, pd),
                field!(ibv_qp_init_attr_ex, xrcd),
                field!(ibv_qp_init_attr_ex, create_flags),
                field!(ibv_qp_init_attr_ex, max_tso_header),
                field!(ibv_qp_init_attr_ex, rwq_ind_tbl),
                field!(ibv_qp_init_attr_ex, rx_hash_conf),
                field!(ibv_qp_init_attr_ex, source_qpn),
                field!(ibv_qp_init_attr_ex, send_ops_flags),
            ],
        ),
        strukt::<ibv_cq_init_attr_ex>(
            "ibv_cq_init_attr_ex",
            Equal,
            Equal,
            vec![
                field!(ibv_cq_init_attr_ex, cqe),
                field!(ibv_cq_init_attr_ex, cq_context),
                field!(ibv_cq_init_attr_ex, channel),
                field!(ibv_cq_init_attr_ex, comp_vector),
                field!(ibv_cq_init_attr_ex, wc_flags),
                field!(ibv_cq_init_attr_ex, comp_mask),
                field!(ibv_cq_init_attr_ex, flags),
                field!(ibv_cq_init_attr_ex, parent_domain),
            ],
        ),
        // rdma-core 65 appended `active_speed_ex`; `ibv_query_port` passes the length.
        strukt::<ibv_port_attr>(
            "ibv_port_attr",
            Equal,
            CLonger,
            vec![
                field!(ibv_port_attr, state),
                field!(ibv_port_attr, max_mtu),
                field!(ibv_port_attr, active_mtu),
                field!(ibv_port_attr, gid_tbl_len),
                field!(ibv_port_attr, port_cap_flags),
                field!(ibv_port_attr, max_msg_sz),
                field!(ibv_port_attr, pkey_tbl_len),
                field!(ibv_port_attr, lid),
                field!(ibv_port_attr, sm_lid),
                field!(ibv_port_attr, lmc),
                field!(ibv_port_attr, active_width),
                field!(ibv_port_attr, active_speed),
                field!(ibv_port_attr, phys_state),
                field!(ibv_port_attr, link_layer),
                field!(ibv_port_attr, flags),
                field!(ibv_port_attr, port_cap_flags2),
            ],
        ),
        strukt::<ibv_wc>(
            "ibv_wc",
            Equal,
            Equal,
            vec![
                field!(ibv_wc, wr_id),
                field!(ibv_wc, status),
                field!(ibv_wc, opcode),
                field!(ibv_wc, vendor_err),
                field!(ibv_wc, byte_len),
                field!(ibv_wc, imm_data_invalidated_rkey_union, "imm_data"),
                field!(ibv_wc, qp_num),
                field!(ibv_wc, src_qp),
                field!(ibv_wc, wc_flags),
                field!(ibv_wc, pkey_index),
                field!(ibv_wc, slid),
                field!(ibv_wc, sl),
                field!(ibv_wc, dlid_path_bits),
            ],
        ),
        strukt::<ibv_send_wr>(
            "ibv_send_wr",
            Equal,
            Equal,
            vec![
                field!(ibv_send_wr, wr_id),
                field!(ibv_send_wr, next),
                field!(ibv_send_wr, sg_list),
                field!(ibv_send_wr, num_sge),
                field!(ibv_send_wr, opcode),
                field!(ibv_send_wr, send_flags),
                field!(ibv_send_wr, imm_data_invalidated_rkey_union, "imm_data"),
                field!(ibv_send_wr, wr),
                field!(ibv_send_wr, qp_type),
                field!(ibv_send_wr, bind_mw_tso_union, "bind_mw"),
            ],
        ),
    ]
}

macro_rules! consts {
    ($($name:ident),* $(,)?) => {
        vec![$(ConstCheck { c_name: stringify!($name), value: $name as i128 }),*]
    };
}

/// Every constant efa-sys defines from a C enum; each is compared where the header has it.
fn constants() -> Vec<ConstCheck> {
    consts![
        EFADV_DEVICE_ATTR_CAPS_RDMA_READ,
        EFADV_DEVICE_ATTR_CAPS_RNR_RETRY,
        EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID,
        EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE,
        EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV,
        EFADV_DEVICE_ATTR_CAPS_CQ_WITH_EXT_MEM_DMABUF,
        EFADV_DEVICE_ATTR_CAPS_COMP_CNTR,
        EFADV_SQ_DEPTH_ATTR_INLINE_WRITE,
        EFADV_QP_DRIVER_TYPE_SRD,
        EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV,
        EFADV_QP_FLAGS_INLINE_WRITE,
        EFADV_WR_EX_WITH_PROCESSING_HINTS,
        EFADV_WQ_CAPS_64_BIT_REQ_ID,
        EFADV_WR_PROCESSING_HINT_BURST_PPS_SENSITIVE,
        EFADV_WC_EX_WITH_SGID,
        EFADV_WC_EX_WITH_IS_UNSOLICITED,
        EFADV_CQ_INIT_FLAGS_EXT_MEM_DMABUF,
        EFADV_MEMORY_LOCATION_VA,
        EFADV_MEMORY_LOCATION_DMABUF,
        EFADV_COMP_CNTR_INIT_WITH_COMP_EXTERNAL_MEM,
        EFADV_COMP_CNTR_INIT_WITH_ERR_EXTERNAL_MEM,
        EFADV_MR_ATTR_VALIDITY_RECV_IC_ID,
        EFADV_MR_ATTR_VALIDITY_RDMA_READ_IC_ID,
        EFADV_MR_ATTR_VALIDITY_RDMA_RECV_IC_ID,
        IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS,
        IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY,
        IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG,
        IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES,
        IBV_QP_ATTACH_COMP_CNTR_OP_SEND,
        IBV_QP_ATTACH_COMP_CNTR_OP_RECV,
        IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_READ,
        IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_READ,
        IBV_QP_ATTACH_COMP_CNTR_OP_RDMA_WRITE,
        IBV_QP_ATTACH_COMP_CNTR_OP_REMOTE_RDMA_WRITE,
        IBV_COMP_CNTR_TYPE_WRS,
        IBV_COMP_CNTR_TYPE_BYTES,
    ]
}

fn exprs() -> Vec<ExprCheck> {
    use efa_sys::layout::*;
    let mut checks = vec![
        ExprCheck {
            label: "IBV_QP_EX_SIZE_V44",
            c_expr: "sizeof(struct ibv_qp_ex)",
            value: IBV_QP_EX_SIZE_V44,
            versions: &[Version::V44],
        },
        ExprCheck {
            label: "IBV_QP_EX_SIZE_V65",
            c_expr: "sizeof(struct ibv_qp_ex)",
            value: IBV_QP_EX_SIZE_V65,
            versions: &[Version::V65],
        },
        ExprCheck {
            label: "IBV_QP_EX_WR_FLUSH_OFFSET_V65",
            c_expr: "offsetof(struct ibv_qp_ex, wr_flush)",
            value: IBV_QP_EX_WR_FLUSH_OFFSET_V65,
            versions: &[Version::V65],
        },
        ExprCheck {
            label: "IBV_QP_SIZE",
            c_expr: "sizeof(struct ibv_qp)",
            value: IBV_QP_SIZE,
            versions: &[Version::V65],
        },
        ExprCheck {
            label: "IBV_CQ_EX_SIZE",
            c_expr: "sizeof(struct ibv_cq_ex)",
            value: IBV_CQ_EX_SIZE,
            versions: &[Version::V65],
        },
    ];
    // efa_sys::verbs_ctx reaches each op at a fixed distance before the embedded ibv_context,
    // using rdma-sys's rdma-core 44 struct; the distances must hold in every version.
    let context = offset_of!(verbs_context, context);
    let distances = [
        ("sz", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, sz)", context - offset_of!(verbs_context, sz)),
        ("query_port", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, query_port)", context - offset_of!(verbs_context, query_port)),
        ("create_cq_ex", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, create_cq_ex)", context - offset_of!(verbs_context, create_cq_ex)),
        ("create_qp_ex", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, create_qp_ex)", context - offset_of!(verbs_context, create_qp_ex)),
        ("query_device_ex", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, query_device_ex)", context - offset_of!(verbs_context, query_device_ex)),
        ("alloc_td", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, alloc_td)", context - offset_of!(verbs_context, alloc_td)),
        ("dealloc_td", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, dealloc_td)", context - offset_of!(verbs_context, dealloc_td)),
        ("alloc_parent_domain", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, alloc_parent_domain)", context - offset_of!(verbs_context, alloc_parent_domain)),
        ("modify_cq", "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, modify_cq)", context - offset_of!(verbs_context, modify_cq)),
    ];
    checks.extend(
        distances
            .into_iter()
            .map(|(label, c_expr, value)| ExprCheck {
                label,
                c_expr,
                value,
                versions: &[Version::V44, Version::V65],
            }),
    );
    checks.push(ExprCheck {
        label: "verbs_context_size_v44",
        c_expr: "sizeof(struct verbs_context)",
        value: size_of::<verbs_context>(),
        versions: &[Version::V44],
    });
    checks
}

/// Renders a Rust FFI type as the C type it must be compatible with.
trait CType {
    fn c_type() -> String;
}

macro_rules! c_types {
    ($($t:ty => $c:expr),* $(,)?) => {
        $(impl CType for $t {
            fn c_type() -> String {
                $c.to_string()
            }
        })*
    };
}

c_types! {
    () => "void", std::ffi::c_void => "void", bool => "bool", i32 => "int", u8 => "uint8_t",
    u16 => "uint16_t", u32 => "uint32_t", u64 => "uint64_t", usize => "size_t",
    isize => "ssize_t", efa_sys::verbs::ibv_gid => "union ibv_gid",
}

macro_rules! c_structs {
    ($($t:ident),* $(,)?) => {
        c_types! { $($t => concat!("struct ", stringify!($t))),* }
    };
}

c_structs! {
    efadv_device_attr, efadv_ah_attr, efadv_sq_depth_attr, efadv_rq_depth_attr,
    efadv_qp_init_attr, efadv_wq_attr, efadv_qp, efadv_cq_init_attr, efadv_cq_attr, efadv_cq,
    efadv_comp_cntr_init_attr, efadv_mr_attr, ibv_comp_cntr, ibv_comp_cntr_init_attr,
    ibv_context, ibv_pd, ibv_qp, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_ah, ibv_cq,
    ibv_cq_ex, ibv_cq_init_attr_ex, ibv_mr, ibv_gid_entry, ibv_device_attr_ex,
    ibv_query_device_ex_input, ibv_port_attr, ibv_td, ibv_td_init_attr,
    ibv_parent_domain_init_attr, ibv_modify_cq_attr,
}

impl<T: CType> CType for *mut T {
    fn c_type() -> String {
        format!("{} *", T::c_type())
    }
}

impl<T: CType> CType for *const T {
    fn c_type() -> String {
        format!("const {} *", T::c_type())
    }
}

/// Function pointers, C ABI and (for the Rust versions of header-only helpers) Rust ABI.
macro_rules! c_fns {
    ($($a:ident),*) => {
        impl<R: CType, $($a: CType),*> CType for unsafe extern "C" fn($($a),*) -> R {
            fn c_type() -> String {
                let params: Vec<String> = vec![$($a::c_type()),*];
                let params = if params.is_empty() { "void".to_string() } else { params.join(", ") };
                format!("{} (*)({})", R::c_type(), params)
            }
        }
        impl<R: CType, $($a: CType),*> CType for unsafe fn($($a),*) -> R {
            fn c_type() -> String {
                <unsafe extern "C" fn($($a),*) -> R as CType>::c_type()
            }
        }
    };
}
c_fns!();
c_fns!(A);
c_fns!(A, B);
c_fns!(A, B, C);
c_fns!(A, B, C, D);
c_fns!(A, B, C, D, E);
c_fns!(A, B, C, D, E, G);

fn c_type_of<F: CType>(_f: F) -> String {
    F::c_type()
}

/// A C expression whose type must be compatible with the C rendering of a Rust signature.
struct SigCheck {
    label: &'static str,
    /// Identifier that must occur in the headers for the check to apply.
    needs: &'static str,
    c_expr: &'static str,
    rust: String,
}

fn sig(label: &'static str, needs: &'static str, c_expr: &'static str, rust: String) -> SigCheck {
    SigCheck {
        label,
        needs,
        c_expr,
        rust,
    }
}

type ReadSgid = unsafe fn(*mut efadv_cq, *mut efa_sys::verbs::ibv_gid) -> i32;
type IsUnsolicited = unsafe fn(*mut efadv_cq) -> bool;
type SetHints = unsafe fn(*mut efadv_qp, u32) -> bool;
type GidEx = unsafe fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32) -> i32;
type GidTable = unsafe fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32) -> isize;
type CreateCqEx = unsafe fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
type CreateQpEx = unsafe fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
type QueryDeviceEx =
    unsafe fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex) -> i32;
type QueryPort = unsafe fn(*mut ibv_context, u8, *mut ibv_port_attr) -> i32;
type AllocTd = unsafe fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
type DeallocTd = unsafe fn(*mut ibv_td) -> i32;
type AllocParentDomain =
    unsafe fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
type ModifyCq = unsafe fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> i32;

/// Every function signature efa-sys declares or re-implements, against the C declaration.
fn signatures() -> Vec<SigCheck> {
    use efa_sys::efadv::runtime::*;
    use efa_sys::verbs_ctx as ctx;
    vec![
        // Linked efadv entry points.
        sig(
            "efadv_create_driver_qp",
            "efadv_create_driver_qp",
            "&efadv_create_driver_qp",
            c_type_of(efadv_create_driver_qp as unsafe extern "C" fn(_, _, _) -> _),
        ),
        sig(
            "efadv_create_qp_ex",
            "efadv_create_qp_ex",
            "&efadv_create_qp_ex",
            c_type_of(efadv_create_qp_ex as unsafe extern "C" fn(_, _, _, _) -> _),
        ),
        sig(
            "efadv_query_ah",
            "efadv_query_ah",
            "&efadv_query_ah",
            c_type_of(efadv_query_ah as unsafe extern "C" fn(_, _, _) -> _),
        ),
        sig(
            "efadv_query_device",
            "efadv_query_device",
            "&efadv_query_device",
            c_type_of(efadv_query_device as unsafe extern "C" fn(_, _, _) -> _),
        ),
        sig(
            "efadv_create_cq",
            "efadv_create_cq",
            "&efadv_create_cq",
            c_type_of(efadv_create_cq as unsafe extern "C" fn(_, _, _, _) -> _),
        ),
        sig(
            "efadv_cq_from_ibv_cq_ex",
            "efadv_cq_from_ibv_cq_ex",
            "&efadv_cq_from_ibv_cq_ex",
            c_type_of(efadv_cq_from_ibv_cq_ex as unsafe extern "C" fn(_) -> _),
        ),
        // Run-time resolved entry points: the pointer types they are called through.
        sig(
            "efadv_query_mr",
            "efadv_query_mr",
            "&efadv_query_mr",
            efadv_query_mr_fn::c_type(),
        ),
        sig(
            "efadv_query_qp_wqs",
            "efadv_query_qp_wqs",
            "&efadv_query_qp_wqs",
            efadv_query_qp_wqs_fn::c_type(),
        ),
        sig(
            "efadv_query_cq",
            "efadv_query_cq",
            "&efadv_query_cq",
            efadv_query_cq_fn::c_type(),
        ),
        sig(
            "efadv_get_max_sq_depth",
            "efadv_get_max_sq_depth",
            "&efadv_get_max_sq_depth",
            efadv_get_max_sq_depth_fn::c_type(),
        ),
        sig(
            "efadv_get_max_rq_depth",
            "efadv_get_max_rq_depth",
            "&efadv_get_max_rq_depth",
            efadv_get_max_rq_depth_fn::c_type(),
        ),
        sig(
            "efadv_qp_from_ibv_qp_ex",
            "efadv_qp_from_ibv_qp_ex",
            "&efadv_qp_from_ibv_qp_ex",
            efadv_qp_from_ibv_qp_ex_fn::c_type(),
        ),
        sig(
            "efadv_create_comp_cntr",
            "efadv_create_comp_cntr",
            "&efadv_create_comp_cntr",
            efadv_create_comp_cntr_fn::c_type(),
        ),
        // Provider function pointers the header-only helpers call through.
        sig(
            "efadv_cq.wc_read_sgid",
            "wc_read_sgid",
            "((struct efadv_cq *)0)->wc_read_sgid",
            efadv_wc_read_sgid_fn::c_type(),
        ),
        sig(
            "efadv_cq.wc_is_unsolicited",
            "wc_is_unsolicited",
            "((struct efadv_cq *)0)->wc_is_unsolicited",
            efadv_wc_is_unsolicited_fn::c_type(),
        ),
        sig(
            "efadv_qp.wr_set_processing_hints",
            "wr_set_processing_hints",
            "((struct efadv_qp *)0)->wr_set_processing_hints",
            efadv_wr_set_processing_hints_fn::c_type(),
        ),
        // The Rust versions of the header-only helpers.
        sig(
            "efadv_wc_read_sgid",
            "efadv_wc_read_sgid",
            "&efadv_wc_read_sgid",
            c_type_of(efadv_wc_read_sgid as ReadSgid),
        ),
        sig(
            "efadv_wc_is_unsolicited",
            "efadv_wc_is_unsolicited",
            "&efadv_wc_is_unsolicited",
            c_type_of(efadv_wc_is_unsolicited as IsUnsolicited),
        ),
        // Same parameters; the Rust helper returns `bool` (pointer present) where C returns void.
        sig(
            "efadv_wr_set_processing_hints",
            "efadv_wr_set_processing_hints",
            "&efadv_wr_set_processing_hints",
            c_type_of(efadv_wr_set_processing_hints as SetHints).replacen("bool ", "void ", 1),
        ),
        // Verbs additions.
        sig(
            "_ibv_query_gid_ex",
            "_ibv_query_gid_ex",
            "&_ibv_query_gid_ex",
            c_type_of(_ibv_query_gid_ex as unsafe extern "C" fn(_, _, _, _, _, _) -> _),
        ),
        sig(
            "_ibv_query_gid_table",
            "_ibv_query_gid_table",
            "&_ibv_query_gid_table",
            c_type_of(_ibv_query_gid_table as unsafe extern "C" fn(_, _, _, _, _) -> _),
        ),
        sig(
            "ibv_query_gid_ex",
            "ibv_query_gid_ex",
            "&ibv_query_gid_ex",
            c_type_of(ibv_query_gid_ex as GidEx),
        ),
        sig(
            "ibv_query_gid_table",
            "ibv_query_gid_table",
            "&ibv_query_gid_table",
            c_type_of(ibv_query_gid_table as GidTable),
        ),
        // Extended-verbs dispatch.
        sig(
            "ibv_create_cq_ex",
            "ibv_create_cq_ex",
            "&ibv_create_cq_ex",
            c_type_of(ctx::ibv_create_cq_ex as CreateCqEx),
        ),
        sig(
            "ibv_create_qp_ex",
            "ibv_create_qp_ex",
            "&ibv_create_qp_ex",
            c_type_of(ctx::ibv_create_qp_ex as CreateQpEx),
        ),
        sig(
            "ibv_query_device_ex",
            "ibv_query_device_ex",
            "&ibv_query_device_ex",
            c_type_of(ctx::ibv_query_device_ex as QueryDeviceEx),
        ),
        sig(
            "___ibv_query_port",
            "___ibv_query_port",
            "&___ibv_query_port",
            c_type_of(ctx::ibv_query_port as QueryPort),
        ),
        sig(
            "ibv_alloc_td",
            "ibv_alloc_td",
            "&ibv_alloc_td",
            c_type_of(ctx::ibv_alloc_td as AllocTd),
        ),
        sig(
            "ibv_dealloc_td",
            "ibv_dealloc_td",
            "&ibv_dealloc_td",
            c_type_of(ctx::ibv_dealloc_td as DeallocTd),
        ),
        sig(
            "ibv_alloc_parent_domain",
            "ibv_alloc_parent_domain",
            "&ibv_alloc_parent_domain",
            c_type_of(ctx::ibv_alloc_parent_domain as AllocParentDomain),
        ),
        sig(
            "ibv_modify_cq",
            "ibv_modify_cq",
            "&ibv_modify_cq",
            c_type_of(ctx::ibv_modify_cq as ModifyCq),
        ),
    ]
}

/// What the C program must print for one header version, keyed like its output lines.
fn c_program(version: Version, efadv_h: &str, verbs_h: &str) -> (String, Vec<String>) {
    let mut body = String::new();
    let mut skipped = Vec::new();
    for s in structs() {
        let rule = match version {
            Version::V44 => s.v44,
            Version::V65 => s.v65,
        };
        if rule == SizeRule::Absent {
            assert!(
                !efadv_h.contains(&format!("struct {} {{", s.c_name))
                    && !verbs_h.contains(&format!("struct {} {{", s.c_name)),
                "{:?}: struct {} is in the header but the table says it is absent",
                version,
                s.c_name
            );
            skipped.push(s.c_name.to_string());
            continue;
        }
        writeln!(body, "  S({});", s.c_name).unwrap();
        for f in &s.fields {
            let member = match (version, f.v44) {
                (Version::V44, InV44::Absent) => continue,
                (Version::V44, InV44::Inside(older)) => older,
                _ => f.c_member,
            };
            writeln!(body, "  F({}, {});", s.c_name, member).unwrap();
        }
    }
    for c in constants() {
        let in_header = [efadv_h, verbs_h]
            .iter()
            .any(|h| contains_word(h, c.c_name));
        if in_header {
            writeln!(body, "  K({});", c.c_name).unwrap();
        } else {
            skipped.push(c.c_name.to_string());
        }
    }
    let mut asserts = String::new();
    for g in signatures() {
        if [efadv_h, verbs_h].iter().any(|h| contains_word(h, g.needs)) {
            writeln!(
                asserts,
                "_Static_assert(__builtin_types_compatible_p(__typeof__({}), {}), \"{}: Rust has {}\");",
                g.c_expr, g.rust, g.label, g.rust
            )
            .unwrap();
        } else {
            skipped.push(g.label.to_string());
        }
    }
    for e in exprs()
        .into_iter()
        .filter(|e| e.versions.contains(&version))
    {
        writeln!(
            body,
            "  printf(\"E {} %zu\\n\", (size_t)({}));",
            e.label, e.c_expr
        )
        .unwrap();
    }
    let program = format!(
        r#"#include <stdio.h>
#include <stddef.h>
#include <stdalign.h>
#include <stdbool.h>
#include <infiniband/verbs.h>
#include <infiniband/efadv.h>
{asserts}
#define S(T) printf("S %s %zu %zu\n", #T, sizeof(struct T), alignof(struct T))
#define F(T, m) printf("F %s %s %zu %zu\n", #T, #m, offsetof(struct T, m), sizeof(((struct T *)0)->m))
#define K(N) printf("K %s %lld\n", #N, (long long)(N))
int main(void) {{
{body}  return 0;
}}
"#
    );
    (program, skipped)
}

fn contains_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// Compiles and runs the generated program against `include`; returns its output lines.
fn run_c(version: Version, include: Option<&Path>, program: &str) -> Vec<String> {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("efa-sys-layout-{version:?}"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, program).unwrap();
    // A cross run (scripts/check-aarch64.sh) names the target's C compiler and the runner
    // of its programs, so the C side is laid out for the same architecture as the Rust side.
    let compiler = std::env::var("EFA_TEST_TARGET_CC").unwrap_or_else(|_| "cc".into());
    let mut cc = Command::new(&compiler);
    cc.arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .arg(&src);
    if let Some(include) = include {
        cc.arg("-I").arg(include);
    }
    let out = cc
        .output()
        .unwrap_or_else(|e| panic!("running {compiler} failed: {e}"));
    assert!(
        out.status.success(),
        "cc failed for {version:?}:\n{}\n--- program ---\n{program}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut run = match std::env::var("EFA_TEST_TARGET_RUNNER") {
        Ok(runner) => {
            let mut c = Command::new(runner);
            c.arg(&exe);
            c
        }
        Err(_) => Command::new(&exe),
    };
    let run = run.output().expect("running the layout program failed");
    assert!(run.status.success(), "layout program failed: {run:?}");
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Checks the C output against the table; returns the number of comparisons made.
fn compare(version: Version, lines: &[String]) -> usize {
    let mut c_structs: HashMap<String, (usize, usize)> = HashMap::new();
    let mut c_fields: HashMap<(String, String), (usize, usize)> = HashMap::new();
    let mut c_consts: HashMap<String, i128> = HashMap::new();
    let mut c_exprs: HashMap<String, usize> = HashMap::new();
    for line in lines {
        let w: Vec<&str> = line.split(' ').collect();
        match w[0] {
            "S" => {
                c_structs.insert(w[1].into(), (w[2].parse().unwrap(), w[3].parse().unwrap()));
            }
            "F" => {
                c_fields.insert(
                    (w[1].into(), w[2].into()),
                    (w[3].parse().unwrap(), w[4].parse().unwrap()),
                );
            }
            "K" => {
                c_consts.insert(w[1].into(), w[2].parse().unwrap());
            }
            "E" => {
                c_exprs.insert(w[1].into(), w[2].parse().unwrap());
            }
            other => panic!("unexpected line kind {other:?} in {line:?}"),
        }
    }

    let mut errors = Vec::new();
    let mut checks = 0;
    for s in structs() {
        let rule = match version {
            Version::V44 => s.v44,
            Version::V65 => s.v65,
        };
        if rule == SizeRule::Absent {
            continue;
        }
        let (c_size, c_align) = c_structs[s.c_name];
        checks += 1;
        let size_ok = match rule {
            SizeRule::Equal => c_size == s.size && c_align == s.align,
            SizeRule::CShorter => c_size < s.size && c_align == s.align,
            SizeRule::CLonger => c_size > s.size && c_align == s.align,
            SizeRule::Absent => unreachable!(),
        };
        if !size_ok {
            errors.push(format!(
                "{version:?} struct {}: C size {c_size} align {c_align}, Rust size {} align {} (expected {rule:?})",
                s.c_name, s.size, s.align
            ));
        }
        for f in &s.fields {
            let member = match (version, f.v44) {
                (Version::V44, InV44::Absent) => continue,
                (Version::V44, InV44::Inside(older)) => older,
                _ => f.c_member,
            };
            let (c_off, c_size) = c_fields[&(s.c_name.to_string(), member.to_string())];
            checks += 1;
            let ok = match (version, f.v44) {
                (Version::V44, InV44::Inside(_)) => {
                    f.offset >= c_off && f.offset + f.size <= c_off + c_size
                }
                _ => f.offset == c_off && f.size == c_size,
            };
            if !ok {
                errors.push(format!(
                    "{version:?} {}.{}: C offset {c_off} size {c_size}, Rust `{}` offset {} size {}",
                    s.c_name, member, f.c_member, f.offset, f.size
                ));
            }
        }
    }
    for c in constants() {
        if let Some(&c_value) = c_consts.get(c.c_name) {
            checks += 1;
            if c_value != c.value {
                errors.push(format!(
                    "{version:?} {}: C {c_value}, Rust {}",
                    c.c_name, c.value
                ));
            }
        }
    }
    for e in exprs()
        .into_iter()
        .filter(|e| e.versions.contains(&version))
    {
        checks += 1;
        let c_value = c_exprs[e.label];
        if c_value != e.value {
            errors.push(format!(
                "{version:?} {} ({}): C {c_value}, Rust {}",
                e.label, e.c_expr, e.value
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "layout mismatches:\n{}",
        errors.join("\n")
    );
    checks
}

/// Every `EFADV_*` constant, `efadv_*` function and `struct efadv_*` of the header is bound.
fn assert_complete(version: Version, efadv_h: &str) {
    let known_consts: BTreeSet<&str> = constants().iter().map(|c| c.c_name).collect();
    let known_fns: BTreeSet<&str> = signatures().iter().map(|f| f.label).collect();
    let known_structs: BTreeSet<&str> = structs().iter().map(|s| s.c_name).collect();
    let mut missing = Vec::new();
    for word in identifiers(efadv_h) {
        if word.starts_with("EFADV_") && word != "__EFADV_H__" && !known_consts.contains(word) {
            missing.push(format!("constant {word}"));
        }
    }
    for (i, _) in efadv_h.match_indices("efadv_") {
        let start_ok =
            i == 0 || !efadv_h[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if !start_ok {
            continue;
        }
        let rest = &efadv_h[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        let after = rest[end..].trim_start();
        let before = efadv_h[..i].trim_end();
        if after.starts_with('(') && !before.ends_with("->") && !before.ends_with("(*") {
            // A declaration or inline definition of a function `name(`, not a call inside a body.
            let line_start = efadv_h[..i].rfind('\n').map_or(0, |n| n + 1);
            let line = &efadv_h[line_start..i];
            let is_decl = line.contains("int ")
                || line.contains("bool ")
                || line.contains("void ")
                || line.contains('*')
                || line.trim().is_empty();
            if is_decl && !line.contains("return") && !known_fns.contains(name) {
                missing.push(format!("function {name}"));
            }
        }
        if before.ends_with("struct") && after.starts_with('{') && !known_structs.contains(name) {
            missing.push(format!("struct {name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "{version:?} efadv.h items without a binding: {missing:?}"
    );
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

fn check_headers(version: Version, include: Option<&Path>) -> usize {
    let root = include.map_or_else(|| PathBuf::from("/usr/include"), Path::to_path_buf);
    let efadv_h = std::fs::read_to_string(root.join("infiniband/efadv.h")).unwrap();
    let verbs_h = std::fs::read_to_string(root.join("infiniband/verbs.h")).unwrap();
    assert_complete(version, &efadv_h);
    let (program, skipped) = c_program(version, &efadv_h, &verbs_h);
    let lines = run_c(version, include, &program);
    let checks = compare(version, &lines);
    // The program compiled, so every emitted signature assertion held.
    let signatures = program.matches("_Static_assert(").count();
    println!(
        "{version:?}: {checks} layout/value comparisons and {signatures} signature checks passed; \
         not in these headers: {skipped:?}"
    );
    checks + signatures
}

#[test]
fn layout_matches_system_rdma_core_44_headers() {
    let checks = check_headers(Version::V44, None);
    assert!(checks >= 200, "only {checks} comparisons");
}

/// `X/shared` next to the `X/main` checkout, or `$EFA_SHARED_DIR`.
fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("EFA_SHARED_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// rdma-core 65 headers, fetched once into the target dir.
fn v65_headers() -> Result<PathBuf, String> {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-core-65-headers");
    let include = cache.join("include");
    if include.join("infiniband/efadv.h").is_file() {
        return Ok(include);
    }
    let tool = shared_dir().join("tools/rdma-core-headers");
    if !tool.is_file() {
        return Err(format!("{} not found (set EFA_SHARED_DIR)", tool.display()));
    }
    let staging = cache.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let out = Command::new(&tool)
        .arg(&staging)
        .arg("sid")
        .output()
        .map_err(|e| format!("running {}: {e}", tool.display()))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!(
            "{} failed: {}",
            tool.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // The tool names the package it unpacked, e.g. "headers from libibverbs-dev_65.0-1.1_amd64.deb".
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("libibverbs-dev_65.") {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!(
            "the mirror no longer has rdma-core 65 ({})",
            stderr.trim()
        ));
    }
    // Another test process may have won the race; either copy is complete.
    if std::fs::rename(&staging, &cache).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    Ok(include)
}

#[test]
fn layout_matches_rdma_core_65_headers() {
    match v65_headers() {
        Ok(include) => {
            let checks = check_headers(Version::V65, Some(&include));
            assert!(checks >= 310, "only {checks} comparisons");
        }
        // Written straight to stderr so the line shows without --nocapture.
        Err(reason) => {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: rdma-core 65 layout check: {reason}"
            );
        }
    }
}
