//! Layout facts of the extended verbs objects a zero-overhead layer reads directly.
//!
//! rdma-sys generates its types from the rdma-core 44 headers. `ibv_qp_ex` there is 352 bytes:
//! it has `wr_atomic_write` (offset 344) but lacks `wr_flush` (offset 352 in rdma-core 65,
//! size 360). That is harmless: a layer only reads `wr_id`, `wr_flags` and the function pointers
//! up to `wr_abort` at fixed offsets, which never moved (new members are only appended), and it
//! never allocates an `ibv_qp_ex` itself (the provider does). `ibv_cq_ex` is 288 bytes in both.
//!
//! The constants below are the C offsets (x86_64 LP64); compile-time assertions tie them to
//! rdma-sys's structs, and `tests/layout.rs` ties them to the C headers.

use core::mem::{offset_of, size_of};
use rdma_sys::{ibv_cq_ex, ibv_qp, ibv_qp_ex};
use static_assertions::const_assert_eq;

/// `sizeof(struct ibv_qp)`.
pub const IBV_QP_SIZE: usize = 160;
/// `sizeof(struct ibv_qp_ex)` in rdma-core 44 (= `size_of::<rdma_sys::ibv_qp_ex>()`).
pub const IBV_QP_EX_SIZE_V44: usize = 352;
/// `sizeof(struct ibv_qp_ex)` in rdma-core 65 (`wr_flush` appended).
pub const IBV_QP_EX_SIZE_V65: usize = 360;
/// `offsetof(struct ibv_qp_ex, wr_flush)` in rdma-core 65; absent from rdma-sys's struct.
pub const IBV_QP_EX_WR_FLUSH_OFFSET_V65: usize = 352;
/// Bytes of `ibv_qp_ex` a layer may read through rdma-sys's struct: everything up to and
/// including `wr_abort`.
pub const IBV_QP_EX_READ_PREFIX: usize = 344;

/// `offsetof(struct ibv_qp_ex, wr_id)`.
pub const IBV_QP_EX_WR_ID: usize = 168;
/// `offsetof(struct ibv_qp_ex, wr_flags)`.
pub const IBV_QP_EX_WR_FLAGS: usize = 176;
/// `offsetof(struct ibv_qp_ex, wr_rdma_read)`.
pub const IBV_QP_EX_WR_RDMA_READ: usize = 216;
/// `offsetof(struct ibv_qp_ex, wr_rdma_write)`.
pub const IBV_QP_EX_WR_RDMA_WRITE: usize = 224;
/// `offsetof(struct ibv_qp_ex, wr_rdma_write_imm)`.
pub const IBV_QP_EX_WR_RDMA_WRITE_IMM: usize = 232;
/// `offsetof(struct ibv_qp_ex, wr_send)`.
pub const IBV_QP_EX_WR_SEND: usize = 240;
/// `offsetof(struct ibv_qp_ex, wr_send_imm)`.
pub const IBV_QP_EX_WR_SEND_IMM: usize = 248;
/// `offsetof(struct ibv_qp_ex, wr_set_ud_addr)`.
pub const IBV_QP_EX_WR_SET_UD_ADDR: usize = 272;
/// `offsetof(struct ibv_qp_ex, wr_set_inline_data)`.
pub const IBV_QP_EX_WR_SET_INLINE_DATA: usize = 288;
/// `offsetof(struct ibv_qp_ex, wr_set_inline_data_list)`.
pub const IBV_QP_EX_WR_SET_INLINE_DATA_LIST: usize = 296;
/// `offsetof(struct ibv_qp_ex, wr_set_sge)`.
pub const IBV_QP_EX_WR_SET_SGE: usize = 304;
/// `offsetof(struct ibv_qp_ex, wr_set_sge_list)`.
pub const IBV_QP_EX_WR_SET_SGE_LIST: usize = 312;
/// `offsetof(struct ibv_qp_ex, wr_start)`.
pub const IBV_QP_EX_WR_START: usize = 320;
/// `offsetof(struct ibv_qp_ex, wr_complete)`.
pub const IBV_QP_EX_WR_COMPLETE: usize = 328;
/// `offsetof(struct ibv_qp_ex, wr_abort)`.
pub const IBV_QP_EX_WR_ABORT: usize = 336;

const_assert_eq!(size_of::<ibv_qp>(), IBV_QP_SIZE);
const_assert_eq!(size_of::<ibv_qp_ex>(), IBV_QP_EX_SIZE_V44);
const_assert_eq!(offset_of!(ibv_qp_ex, qp_base), 0);
const_assert_eq!(offset_of!(ibv_qp_ex, comp_mask), 160);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_id), IBV_QP_EX_WR_ID);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_flags), IBV_QP_EX_WR_FLAGS);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_atomic_cmp_swp), 184);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_atomic_fetch_add), 192);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_bind_mw), 200);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_local_inv), 208);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_rdma_read), IBV_QP_EX_WR_RDMA_READ);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_rdma_write),
    IBV_QP_EX_WR_RDMA_WRITE
);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_rdma_write_imm),
    IBV_QP_EX_WR_RDMA_WRITE_IMM
);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_send), IBV_QP_EX_WR_SEND);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_send_imm), IBV_QP_EX_WR_SEND_IMM);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_send_inv), 256);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_send_tso), 264);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_set_ud_addr),
    IBV_QP_EX_WR_SET_UD_ADDR
);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_set_xrc_srqn), 280);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_set_inline_data),
    IBV_QP_EX_WR_SET_INLINE_DATA
);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_set_inline_data_list),
    IBV_QP_EX_WR_SET_INLINE_DATA_LIST
);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_set_sge), IBV_QP_EX_WR_SET_SGE);
const_assert_eq!(
    offset_of!(ibv_qp_ex, wr_set_sge_list),
    IBV_QP_EX_WR_SET_SGE_LIST
);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_start), IBV_QP_EX_WR_START);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_complete), IBV_QP_EX_WR_COMPLETE);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_abort), IBV_QP_EX_WR_ABORT);
const_assert_eq!(offset_of!(ibv_qp_ex, wr_atomic_write), 344);
const_assert_eq!(IBV_QP_EX_READ_PREFIX, IBV_QP_EX_WR_ABORT + 8);

/// `sizeof(struct ibv_cq_ex)` (rdma-core 44 and 65).
pub const IBV_CQ_EX_SIZE: usize = 288;
/// `offsetof(struct ibv_cq_ex, status)`: plain field the poll functions update.
pub const IBV_CQ_EX_STATUS: usize = 132;
/// `offsetof(struct ibv_cq_ex, wr_id)`: plain field the poll functions update.
pub const IBV_CQ_EX_WR_ID: usize = 136;
/// `offsetof(struct ibv_cq_ex, start_poll)`.
pub const IBV_CQ_EX_START_POLL: usize = 144;
/// `offsetof(struct ibv_cq_ex, next_poll)`.
pub const IBV_CQ_EX_NEXT_POLL: usize = 152;
/// `offsetof(struct ibv_cq_ex, end_poll)`.
pub const IBV_CQ_EX_END_POLL: usize = 160;
/// `offsetof(struct ibv_cq_ex, read_opcode)`.
pub const IBV_CQ_EX_READ_OPCODE: usize = 168;
/// `offsetof(struct ibv_cq_ex, read_vendor_err)`.
pub const IBV_CQ_EX_READ_VENDOR_ERR: usize = 176;
/// `offsetof(struct ibv_cq_ex, read_byte_len)`.
pub const IBV_CQ_EX_READ_BYTE_LEN: usize = 184;
/// `offsetof(struct ibv_cq_ex, read_imm_data)`.
pub const IBV_CQ_EX_READ_IMM_DATA: usize = 192;
/// `offsetof(struct ibv_cq_ex, read_qp_num)`.
pub const IBV_CQ_EX_READ_QP_NUM: usize = 200;
/// `offsetof(struct ibv_cq_ex, read_src_qp)`.
pub const IBV_CQ_EX_READ_SRC_QP: usize = 208;
/// `offsetof(struct ibv_cq_ex, read_wc_flags)`.
pub const IBV_CQ_EX_READ_WC_FLAGS: usize = 216;
/// `offsetof(struct ibv_cq_ex, read_slid)`.
pub const IBV_CQ_EX_READ_SLID: usize = 224;
/// `offsetof(struct ibv_cq_ex, read_sl)`.
pub const IBV_CQ_EX_READ_SL: usize = 232;

const_assert_eq!(size_of::<ibv_cq_ex>(), IBV_CQ_EX_SIZE);
const_assert_eq!(offset_of!(ibv_cq_ex, comp_mask), 128);
const_assert_eq!(offset_of!(ibv_cq_ex, status), IBV_CQ_EX_STATUS);
const_assert_eq!(offset_of!(ibv_cq_ex, wr_id), IBV_CQ_EX_WR_ID);
const_assert_eq!(offset_of!(ibv_cq_ex, start_poll), IBV_CQ_EX_START_POLL);
const_assert_eq!(offset_of!(ibv_cq_ex, next_poll), IBV_CQ_EX_NEXT_POLL);
const_assert_eq!(offset_of!(ibv_cq_ex, end_poll), IBV_CQ_EX_END_POLL);
const_assert_eq!(offset_of!(ibv_cq_ex, read_opcode), IBV_CQ_EX_READ_OPCODE);
const_assert_eq!(
    offset_of!(ibv_cq_ex, read_vendor_err),
    IBV_CQ_EX_READ_VENDOR_ERR
);
const_assert_eq!(
    offset_of!(ibv_cq_ex, read_byte_len),
    IBV_CQ_EX_READ_BYTE_LEN
);
const_assert_eq!(
    offset_of!(ibv_cq_ex, read_imm_data),
    IBV_CQ_EX_READ_IMM_DATA
);
const_assert_eq!(offset_of!(ibv_cq_ex, read_qp_num), IBV_CQ_EX_READ_QP_NUM);
const_assert_eq!(offset_of!(ibv_cq_ex, read_src_qp), IBV_CQ_EX_READ_SRC_QP);
const_assert_eq!(
    offset_of!(ibv_cq_ex, read_wc_flags),
    IBV_CQ_EX_READ_WC_FLAGS
);
const_assert_eq!(offset_of!(ibv_cq_ex, read_slid), IBV_CQ_EX_READ_SLID);
const_assert_eq!(offset_of!(ibv_cq_ex, read_sl), IBV_CQ_EX_READ_SL);
const_assert_eq!(offset_of!(ibv_cq_ex, read_dlid_path_bits), 240);
const_assert_eq!(offset_of!(ibv_cq_ex, read_completion_ts), 248);
const_assert_eq!(offset_of!(ibv_cq_ex, read_cvlan), 256);
const_assert_eq!(offset_of!(ibv_cq_ex, read_flow_tag), 264);
const_assert_eq!(offset_of!(ibv_cq_ex, read_tm_info), 272);
const_assert_eq!(offset_of!(ibv_cq_ex, read_completion_wallclock_ns), 280);
