//! Layout facts of the extended verbs objects a zero-overhead layer reads directly.
//!
//! rdma-sys generates its types from the rdma-core 44 headers. `ibv_qp_ex` there is 352 bytes:
//! it has `wr_atomic_write` (offset 344) but lacks `wr_flush` (offset 352 in rdma-core 65,
//! size 360). That is harmless: a layer only reads `wr_id`, `wr_flags` and the function pointers
//! up to `wr_abort` at fixed offsets, which never moved (new members are only appended), and it
//! never allocates an `ibv_qp_ex` itself (the provider does). `ibv_cq_ex` is 288 bytes in both.
//!
//! The constants below are the C offsets on the target (LP64 glibc: x86_64 or aarch64);
//! compile-time assertions tie them to rdma-sys's structs, and `tests/layout.rs` ties them to
//! the C headers. `ibv_qp` and `ibv_cq_ex` embed a `pthread_mutex_t`, which glibc makes 8 bytes
//! larger on aarch64 than on x86_64, so every member behind it moves by [`MUTEX_SHIFT`].

use rdma_sys::{ibv_cq_ex, ibv_qp, ibv_qp_ex};
use static_assertions::const_assert_eq;

/// `sizeof(pthread_mutex_t)` on x86_64 glibc, the base of the offsets below.
const X86_64_MUTEX_SIZE: usize = 40;
/// How much larger glibc's `pthread_mutex_t` is on the target than on x86_64 (0 on x86_64,
/// 8 on aarch64, where `__SIZEOF_PTHREAD_MUTEX_T` is 48). Offsets of `ibv_qp`, `ibv_qp_ex`
/// and `ibv_cq_ex` members behind the embedded mutex move by this much.
pub const MUTEX_SHIFT: usize = core::mem::size_of::<libc::pthread_mutex_t>() - X86_64_MUTEX_SIZE;
#[cfg(target_arch = "x86_64")]
const_assert_eq!(MUTEX_SHIFT, 0);
#[cfg(target_arch = "aarch64")]
const_assert_eq!(MUTEX_SHIFT, 8);

/// `sizeof(struct ibv_qp)`.
pub const IBV_QP_SIZE: usize = 160 + MUTEX_SHIFT;
/// `sizeof(struct ibv_qp_ex)` in rdma-core 44 (= `size_of::<rdma_sys::ibv_qp_ex>()`).
pub const IBV_QP_EX_SIZE_V44: usize = 352 + MUTEX_SHIFT;
/// `sizeof(struct ibv_qp_ex)` in rdma-core 65 (`wr_flush` appended).
pub const IBV_QP_EX_SIZE_V65: usize = 360 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_flush)` in rdma-core 65; absent from rdma-sys's struct.
pub const IBV_QP_EX_WR_FLUSH_OFFSET_V65: usize = 352 + MUTEX_SHIFT;
/// Bytes of `ibv_qp_ex` a layer may read through rdma-sys's struct: everything up to and
/// including `wr_abort`.
pub const IBV_QP_EX_READ_PREFIX: usize = 344 + MUTEX_SHIFT;

/// `offsetof(struct ibv_qp_ex, wr_id)`.
pub const IBV_QP_EX_WR_ID: usize = 168 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_flags)`.
pub const IBV_QP_EX_WR_FLAGS: usize = 176 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_rdma_read)`.
pub const IBV_QP_EX_WR_RDMA_READ: usize = 216 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_rdma_write)`.
pub const IBV_QP_EX_WR_RDMA_WRITE: usize = 224 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_rdma_write_imm)`.
pub const IBV_QP_EX_WR_RDMA_WRITE_IMM: usize = 232 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_send)`.
pub const IBV_QP_EX_WR_SEND: usize = 240 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_send_imm)`.
pub const IBV_QP_EX_WR_SEND_IMM: usize = 248 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_set_ud_addr)`.
pub const IBV_QP_EX_WR_SET_UD_ADDR: usize = 272 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_set_inline_data)`.
pub const IBV_QP_EX_WR_SET_INLINE_DATA: usize = 288 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_set_inline_data_list)`.
pub const IBV_QP_EX_WR_SET_INLINE_DATA_LIST: usize = 296 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_set_sge)`.
pub const IBV_QP_EX_WR_SET_SGE: usize = 304 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_set_sge_list)`.
pub const IBV_QP_EX_WR_SET_SGE_LIST: usize = 312 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_start)`.
pub const IBV_QP_EX_WR_START: usize = 320 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_complete)`.
pub const IBV_QP_EX_WR_COMPLETE: usize = 328 + MUTEX_SHIFT;
/// `offsetof(struct ibv_qp_ex, wr_abort)`.
pub const IBV_QP_EX_WR_ABORT: usize = 336 + MUTEX_SHIFT;

assert_layout!(ibv_qp, size = IBV_QP_SIZE, align = 8);
assert_layout!(
    ibv_qp_ex,
    size = IBV_QP_EX_SIZE_V44,
    align = 8,
    qp_base = 0,
    comp_mask = 160 + MUTEX_SHIFT,
    wr_id = IBV_QP_EX_WR_ID,
    wr_flags = IBV_QP_EX_WR_FLAGS,
    wr_atomic_cmp_swp = 184 + MUTEX_SHIFT,
    wr_atomic_fetch_add = 192 + MUTEX_SHIFT,
    wr_bind_mw = 200 + MUTEX_SHIFT,
    wr_local_inv = 208 + MUTEX_SHIFT,
    wr_rdma_read = IBV_QP_EX_WR_RDMA_READ,
    wr_rdma_write = IBV_QP_EX_WR_RDMA_WRITE,
    wr_rdma_write_imm = IBV_QP_EX_WR_RDMA_WRITE_IMM,
    wr_send = IBV_QP_EX_WR_SEND,
    wr_send_imm = IBV_QP_EX_WR_SEND_IMM,
    wr_send_inv = 256 + MUTEX_SHIFT,
    wr_send_tso = 264 + MUTEX_SHIFT,
    wr_set_ud_addr = IBV_QP_EX_WR_SET_UD_ADDR,
    wr_set_xrc_srqn = 280 + MUTEX_SHIFT,
    wr_set_inline_data = IBV_QP_EX_WR_SET_INLINE_DATA,
    wr_set_inline_data_list = IBV_QP_EX_WR_SET_INLINE_DATA_LIST,
    wr_set_sge = IBV_QP_EX_WR_SET_SGE,
    wr_set_sge_list = IBV_QP_EX_WR_SET_SGE_LIST,
    wr_start = IBV_QP_EX_WR_START,
    wr_complete = IBV_QP_EX_WR_COMPLETE,
    wr_abort = IBV_QP_EX_WR_ABORT,
    wr_atomic_write = 344 + MUTEX_SHIFT,
);
const_assert_eq!(IBV_QP_EX_READ_PREFIX, IBV_QP_EX_WR_ABORT + 8);

/// `sizeof(struct ibv_cq_ex)` (rdma-core 44 and 65).
pub const IBV_CQ_EX_SIZE: usize = 288 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, status)`: plain field the poll functions update.
pub const IBV_CQ_EX_STATUS: usize = 132 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, wr_id)`: plain field the poll functions update.
pub const IBV_CQ_EX_WR_ID: usize = 136 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, start_poll)`.
pub const IBV_CQ_EX_START_POLL: usize = 144 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, next_poll)`.
pub const IBV_CQ_EX_NEXT_POLL: usize = 152 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, end_poll)`.
pub const IBV_CQ_EX_END_POLL: usize = 160 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_opcode)`.
pub const IBV_CQ_EX_READ_OPCODE: usize = 168 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_vendor_err)`.
pub const IBV_CQ_EX_READ_VENDOR_ERR: usize = 176 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_byte_len)`.
pub const IBV_CQ_EX_READ_BYTE_LEN: usize = 184 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_imm_data)`.
pub const IBV_CQ_EX_READ_IMM_DATA: usize = 192 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_qp_num)`.
pub const IBV_CQ_EX_READ_QP_NUM: usize = 200 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_src_qp)`.
pub const IBV_CQ_EX_READ_SRC_QP: usize = 208 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_wc_flags)`.
pub const IBV_CQ_EX_READ_WC_FLAGS: usize = 216 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_slid)`.
pub const IBV_CQ_EX_READ_SLID: usize = 224 + MUTEX_SHIFT;
/// `offsetof(struct ibv_cq_ex, read_sl)`.
pub const IBV_CQ_EX_READ_SL: usize = 232 + MUTEX_SHIFT;

assert_layout!(
    ibv_cq_ex,
    size = IBV_CQ_EX_SIZE,
    align = 8,
    comp_mask = 128 + MUTEX_SHIFT,
    status = IBV_CQ_EX_STATUS,
    wr_id = IBV_CQ_EX_WR_ID,
    start_poll = IBV_CQ_EX_START_POLL,
    next_poll = IBV_CQ_EX_NEXT_POLL,
    end_poll = IBV_CQ_EX_END_POLL,
    read_opcode = IBV_CQ_EX_READ_OPCODE,
    read_vendor_err = IBV_CQ_EX_READ_VENDOR_ERR,
    read_byte_len = IBV_CQ_EX_READ_BYTE_LEN,
    read_imm_data = IBV_CQ_EX_READ_IMM_DATA,
    read_qp_num = IBV_CQ_EX_READ_QP_NUM,
    read_src_qp = IBV_CQ_EX_READ_SRC_QP,
    read_wc_flags = IBV_CQ_EX_READ_WC_FLAGS,
    read_slid = IBV_CQ_EX_READ_SLID,
    read_sl = IBV_CQ_EX_READ_SL,
    read_dlid_path_bits = 240 + MUTEX_SHIFT,
    read_completion_ts = 248 + MUTEX_SHIFT,
    read_cvlan = 256 + MUTEX_SHIFT,
    read_flow_tag = 264 + MUTEX_SHIFT,
    read_tm_info = 272 + MUTEX_SHIFT,
    read_completion_wallclock_ns = 280 + MUTEX_SHIFT,
);
