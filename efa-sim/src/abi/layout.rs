//! C layouts the software device hands out or reads, at the newest rdma-core layout
//! (v65) where it differs from the v44 headers rdma-sys was generated from. Offsets are
//! checked at compile time against the C headers' values (x86_64 numbers, from
//! `shared/reference/layout-offsets-v65.txt`; structs embedding a `pthread_mutex_t` grow by
//! [`MUTEX_SHIFT`] on aarch64).

use core::mem::{offset_of, size_of};
use efa_sys::layout::MUTEX_SHIFT;
use efa_sys::verbs as v;
use static_assertions::const_assert_eq;

/// Number of pointer-sized `verbs_context` slots before `sz` (v65 layout).
pub const VCTX_SLOTS: usize = 45;

/// `struct verbs_context` (v65, 696 B on x86_64) followed by our private context data.
#[repr(C)]
pub struct VerbsContextV65 {
    /// Every op slot from `free_buf` (newest) to `_ABI_placeholder3`, as raw words.
    pub slots: [usize; VCTX_SLOTS],
    /// Size of the verbs_context as the newest consumer sees it.
    pub sz: usize,
    /// The public context; must be the last member of verbs_context.
    pub context: v::ibv_context,
}
const_assert_eq!(size_of::<VerbsContextV65>(), 696 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(VerbsContextV65, sz), 360);
const_assert_eq!(offset_of!(VerbsContextV65, context), 368);
const_assert_eq!(size_of::<v::ibv_context>(), 328 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(v::ibv_context, abi_compat), 320 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(v::ibv_context, async_fd), 268);

/// Slot indices of `verbs_context` ops (word index from the start, v65). All are
/// listed to document the layout; only some are referenced by name.
#[allow(dead_code)]
pub mod slot {
    pub const FREE_BUF: usize = 0;
    pub const ALLOC_BUF: usize = 1;
    pub const DM_EXPORT_DMABUF_FD: usize = 2;
    pub const REG_MR_EX: usize = 3;
    pub const DEALLOC_DMAH: usize = 4;
    pub const ALLOC_DMAH: usize = 5;
    pub const QUERY_PORT: usize = 6;
    pub const ADVISE_MR: usize = 7;
    pub const ALLOC_NULL_MR: usize = 8;
    pub const READ_COUNTERS: usize = 9;
    pub const ATTACH_COUNTERS_POINT_FLOW: usize = 10;
    pub const CREATE_COUNTERS: usize = 11;
    pub const DESTROY_COUNTERS: usize = 12;
    pub const REG_DM_MR: usize = 13;
    pub const ALLOC_DM: usize = 14;
    pub const FREE_DM: usize = 15;
    pub const MODIFY_FLOW_ACTION_ESP: usize = 16;
    pub const DESTROY_FLOW_ACTION: usize = 17;
    pub const CREATE_FLOW_ACTION_ESP: usize = 18;
    pub const MODIFY_QP_RATE_LIMIT: usize = 19;
    pub const ALLOC_PARENT_DOMAIN: usize = 20;
    pub const DEALLOC_TD: usize = 21;
    pub const ALLOC_TD: usize = 22;
    pub const MODIFY_CQ: usize = 23;
    pub const POST_SRQ_OPS: usize = 24;
    pub const DESTROY_RWQ_IND_TABLE: usize = 25;
    pub const CREATE_RWQ_IND_TABLE: usize = 26;
    pub const DESTROY_WQ: usize = 27;
    pub const MODIFY_WQ: usize = 28;
    pub const CREATE_WQ: usize = 29;
    pub const QUERY_RT_VALUES: usize = 30;
    pub const CREATE_CQ_EX: usize = 31;
    pub const PRIV: usize = 32;
    pub const QUERY_DEVICE_EX: usize = 33;
    pub const IBV_DESTROY_FLOW: usize = 34;
    pub const ABI_PLACEHOLDER2: usize = 35;
    pub const IBV_CREATE_FLOW: usize = 36;
    pub const ABI_PLACEHOLDER1: usize = 37;
    pub const OPEN_QP: usize = 38;
    pub const CREATE_QP_EX: usize = 39;
    pub const GET_SRQ_NUM: usize = 40;
    pub const CREATE_SRQ_EX: usize = 41;
    pub const OPEN_XRCD: usize = 42;
    pub const CLOSE_XRCD: usize = 43;
    pub const ABI_PLACEHOLDER3: usize = 44;
}
const_assert_eq!(slot::QUERY_PORT * 8, 48);
const_assert_eq!(slot::ALLOC_TD * 8, 176);
const_assert_eq!(slot::DEALLOC_TD * 8, 168);
const_assert_eq!(slot::ALLOC_PARENT_DOMAIN * 8, 160);
const_assert_eq!(slot::CREATE_CQ_EX * 8, 248);
const_assert_eq!(slot::QUERY_DEVICE_EX * 8, 264);
const_assert_eq!(slot::CREATE_QP_EX * 8, 312);
const_assert_eq!(slot::OPEN_QP * 8, 304);
const_assert_eq!(slot::MODIFY_CQ * 8, 184);
const_assert_eq!(slot::CREATE_WQ * 8, 232);
const_assert_eq!(slot::ALLOC_DM * 8, 112);
const_assert_eq!(slot::ADVISE_MR * 8, 56);

/// `struct ibv_port_attr` at the v65 layout (56 B; v44 had 52, the legacy exported
/// `ibv_query_port` copies only the first [`COMPAT_PORT_ATTR_LEN`]).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PortAttrV65 {
    /// The v44 part.
    pub base: v::ibv_port_attr,
    /// Added after v44.
    pub active_speed_ex: u32,
}
const_assert_eq!(size_of::<PortAttrV65>(), 56);
const_assert_eq!(offset_of!(PortAttrV65, active_speed_ex), 52);
/// Size of `struct _compat_ibv_port_attr` (everything up to and including `flags`).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

/// `struct ibv_qp_ex` at the v65 layout (360 B on x86_64): rdma-sys' v44 struct (up to
/// `wr_atomic_write`) plus `wr_flush`, appended later.
#[repr(C)]
pub struct QpExV65 {
    /// v44 part.
    pub base: v::ibv_qp_ex,
    /// `wr_flush` (never set by EFA).
    pub wr_flush: usize,
}
const_assert_eq!(size_of::<QpExV65>(), 360 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(v::ibv_qp_ex, wr_start), 320 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(v::ibv_qp_ex, wr_set_ud_addr), 272 + MUTEX_SHIFT);
const_assert_eq!(size_of::<v::ibv_cq_ex>(), 288 + MUTEX_SHIFT);
const_assert_eq!(offset_of!(v::ibv_cq_ex, start_poll), 144 + MUTEX_SHIFT);
const_assert_eq!(size_of::<v::ibv_qp>(), 160 + MUTEX_SHIFT);
const_assert_eq!(size_of::<v::ibv_cq>(), 128 + MUTEX_SHIFT);

/// `struct ibv_wc` (48 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}
const_assert_eq!(size_of::<Wc>(), 48);
const_assert_eq!(offset_of!(Wc, slid), 42);

/// `struct ibv_send_wr` (128 B); `wr` union as raw words.
#[repr(C)]
pub struct SendWrC {
    pub wr_id: u64,
    pub next: *mut SendWrC,
    pub sg_list: *mut v::ibv_sge,
    pub num_sge: i32,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    /// `wr.ud.ah` / `wr.rdma.remote_addr`.
    pub wr_ah_or_addr: u64,
    /// `wr.ud.remote_qpn` / `wr.rdma.rkey`.
    pub wr_qpn_or_rkey: u32,
    /// `wr.ud.remote_qkey`.
    pub wr_qkey: u32,
    pub wr_rest: [u64; 2],
    pub qp_type: [u64; 1],
    pub bind_mw: [u64; 6],
}
const_assert_eq!(size_of::<SendWrC>(), 128);
const_assert_eq!(offset_of!(SendWrC, wr_qkey), 52);

/// `struct ibv_global_route` + `struct ibv_ah_attr` (32 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}
const_assert_eq!(size_of::<AhAttr>(), 32);
const_assert_eq!(offset_of!(AhAttr, dlid), 24);
const_assert_eq!(offset_of!(AhAttr, port_num), 30);

// efadv structs: efa-sys's hand-written v65 bindings (sizes re-checked here because
// the ABI we hand out depends on them).
pub use efa_sys::efadv::{
    efadv_ah_attr as EfadvAhAttr, efadv_cq as EfadvCq, efadv_cq_attr as EfadvCqAttr,
    efadv_cq_init_attr as EfadvCqInitAttr, efadv_device_attr as EfadvDeviceAttr,
    efadv_mr_attr as EfadvMrAttr, efadv_qp as EfadvQp, efadv_qp_init_attr as EfadvQpInitAttr,
    efadv_rq_depth_attr as EfadvRqDepthAttr, efadv_sq_depth_attr as EfadvSqDepthAttr,
    efadv_wq_attr as EfadvWqAttr,
};
const_assert_eq!(size_of::<EfadvDeviceAttr>(), 32);
const_assert_eq!(size_of::<EfadvQpInitAttr>(), 24);
const_assert_eq!(size_of::<EfadvAhAttr>(), 16);
const_assert_eq!(size_of::<EfadvCqInitAttr>(), 56);
const_assert_eq!(size_of::<EfadvCq>(), 24);
const_assert_eq!(size_of::<EfadvQp>(), 16);
const_assert_eq!(size_of::<EfadvMrAttr>(), 16);
const_assert_eq!(size_of::<EfadvSqDepthAttr>(), 24);
const_assert_eq!(offset_of!(EfadvSqDepthAttr, max_inline_data), 20);
const_assert_eq!(size_of::<EfadvRqDepthAttr>(), 16);
const_assert_eq!(size_of::<EfadvWqAttr>(), 40);
const_assert_eq!(offset_of!(EfadvWqAttr, max_batch), 32);
const_assert_eq!(size_of::<EfadvCqAttr>(), 32);
const_assert_eq!(offset_of!(EfadvCqAttr, doorbell), 24);
