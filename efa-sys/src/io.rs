//! The EFA hardware queue formats of rdma-core 65's `providers/efa/efa_io_defs.h` and
//! `efa_io_regs_defs.h`: what a provider writes into a send or receive ring, what the device
//! writes into a completion ring, and the CQ doorbell word. These are the entries a direct
//! data-path consumer handles after `efadv_query_qp_wqs` / `efadv_query_cq`.
//!
//! The header is provider-internal (not installed), so these layouts are checked at compile
//! time against the sizes and offsets of rdma-core 65's header rather than by
//! `tests/layout.rs`. All fields are little-endian (EFA devices and hosts are). Bit fields are
//! given as masks of the byte or word that holds them, named as in the C header without the
//! `EFA_IO_` prefix; the raw completion status values are in [`crate::vendor::comp_status`].
#![allow(non_camel_case_types)]

/// Buffer descriptors a send WQE holds (`EFA_IO_TX_DESC_NUM_BUFS`).
pub const TX_DESC_NUM_BUFS: usize = 2;
/// Local buffer descriptors an RDMA WQE holds (`EFA_IO_TX_DESC_NUM_RDMA_BUFS`).
pub const TX_DESC_NUM_RDMA_BUFS: usize = 1;
/// Inline bytes of a 64-byte WQE (`EFA_IO_TX_DESC_INLINE_MAX_SIZE`).
pub const TX_DESC_INLINE_MAX_SIZE: usize = 32;
/// Inline bytes of a 128-byte WQE (`EFA_IO_TX_DESC_INLINE_MAX_SIZE_128`).
pub const TX_DESC_INLINE_MAX_SIZE_128: usize = 80;
/// Bytes of immediate data (`EFA_IO_TX_DESC_IMM_DATA_SIZE`).
pub const TX_DESC_IMM_DATA_SIZE: usize = 4;
/// Size of a regular send WQE (`sizeof(struct efa_io_tx_wqe)`).
pub const TX_DESC_SIZE_64: usize = 64;
/// Size of a wide send WQE (`sizeof(struct efa_io_tx_wqe_128)`).
pub const TX_DESC_SIZE_128: usize = 128;

/// `enum efa_io_queue_type`: the queue a completion belongs to.
pub mod queue_type {
    /// The send queue of a QP.
    pub const SEND: u8 = 1;
    /// The receive queue of a QP.
    pub const RECV: u8 = 2;
}

/// `enum efa_io_send_op_type`: the operation of a send WQE (and of its completion).
pub mod send_op_type {
    /// SEND (with or without immediate).
    pub const SEND: u8 = 0;
    /// RDMA read.
    pub const RDMA_READ: u8 = 1;
    /// RDMA write (with or without immediate).
    pub const RDMA_WRITE: u8 = 2;
}

/// `EFA_IO_PROCESSING_HINT_BURST_PPS_SENSITIVE` (`ctrl3` processing hints).
pub const PROCESSING_HINT_BURST_PPS_SENSITIVE: u8 = 1 << 0;

/// `struct efa_io_req_id_ex`: bits 16..63 of a 64-bit request id.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_req_id_ex {
    /// Request id bits 16..31, 32..47, 48..63.
    pub w: [u16; 3],
}
assert_layout!(efa_io_req_id_ex, size = 6, align = 2, w = 0);

/// `struct efa_io_tx_meta_desc`: the first 32 bytes of every send WQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_tx_meta_desc {
    /// Provider-chosen request id, echoed in the completion.
    pub req_id: u16,
    /// `TX_META_DESC_OP_TYPE`, `HAS_IMM`, `INLINE_MSG`, `META_EXTENSION`, `META_DESC`.
    pub ctrl1: u8,
    /// `TX_META_DESC_PHASE`, `FIRST`, `LAST`, `COMP_REQ`.
    pub ctrl2: u8,
    /// Destination QP number.
    pub dest_qp_num: u16,
    /// Inline byte count when `INLINE_MSG` is set, else the number of buffer descriptors.
    pub length: u16,
    /// Immediate data (host order of the big-endian verbs value) when `HAS_IMM` is set.
    pub immediate_data: u32,
    /// Destination address handle number.
    pub ah: u16,
    /// `TX_META_DESC_PROCESSING_HINTS`.
    pub ctrl3: u8,
    /// Reserved, zero.
    pub reserved: u8,
    /// Destination Q_Key.
    pub qkey: u32,
    /// Reserved, zero.
    pub reserved2: [u8; 6],
    /// Upper request id bits (64-bit request ids).
    pub req_id_ex: efa_io_req_id_ex,
}
assert_layout!(
    efa_io_tx_meta_desc,
    size = 32,
    align = 4,
    req_id = 0,
    ctrl1 = 2,
    ctrl2 = 3,
    dest_qp_num = 4,
    length = 6,
    immediate_data = 8,
    ah = 12,
    ctrl3 = 14,
    reserved = 15,
    qkey = 16,
    reserved2 = 20,
    req_id_ex = 26
);

/// `ctrl1` bits 3:0: the [`send_op_type`].
pub const TX_META_DESC_OP_TYPE_MASK: u8 = 0x0f;
/// `ctrl1` bit 4: `immediate_data` is valid.
pub const TX_META_DESC_HAS_IMM_MASK: u8 = 1 << 4;
/// `ctrl1` bit 5: inline message data follows (no buffer descriptors).
pub const TX_META_DESC_INLINE_MSG_MASK: u8 = 1 << 5;
/// `ctrl1` bit 6: extended metadata, must be zero.
pub const TX_META_DESC_META_EXTENSION_MASK: u8 = 1 << 6;
/// `ctrl1` bit 7: metadata descriptor, must be set.
pub const TX_META_DESC_META_DESC_MASK: u8 = 1 << 7;
/// `ctrl2` bit 0: the producer's phase for this ring slot.
pub const TX_META_DESC_PHASE_MASK: u8 = 1 << 0;
/// `ctrl2` bit 2: first descriptor of the transaction, must be set.
pub const TX_META_DESC_FIRST_MASK: u8 = 1 << 2;
/// `ctrl2` bit 3: last descriptor of the transaction, must be set.
pub const TX_META_DESC_LAST_MASK: u8 = 1 << 3;
/// `ctrl2` bit 4: a completion is requested.
pub const TX_META_DESC_COMP_REQ_MASK: u8 = 1 << 4;
/// `ctrl3` bits 1:0: processing hints.
pub const TX_META_DESC_PROCESSING_HINTS_MASK: u8 = 0x03;

/// `struct efa_io_tx_buf_desc`: one local buffer of a send WQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_tx_buf_desc {
    /// Length in bytes.
    pub length: u32,
    /// Bits 23:0 local key (`TX_BUF_DESC_LKEY_MASK`), the rest zero.
    pub lkey: u32,
    /// Address bits 31:0.
    pub buf_addr_lo: u32,
    /// Address bits 63:32.
    pub buf_addr_hi: u32,
}
assert_layout!(
    efa_io_tx_buf_desc,
    size = 16,
    align = 4,
    length = 0,
    lkey = 4,
    buf_addr_lo = 8,
    buf_addr_hi = 12
);

/// `lkey` bits 23:0.
pub const TX_BUF_DESC_LKEY_MASK: u32 = 0x00ff_ffff;

/// `struct efa_io_remote_mem_addr`: the remote side of an RDMA WQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_remote_mem_addr {
    /// Length in bytes.
    pub length: u32,
    /// Remote key.
    pub rkey: u32,
    /// Address bits 31:0.
    pub buf_addr_lo: u32,
    /// Address bits 63:32.
    pub buf_addr_hi: u32,
}
assert_layout!(
    efa_io_remote_mem_addr,
    size = 16,
    align = 4,
    length = 0,
    rkey = 4,
    buf_addr_lo = 8,
    buf_addr_hi = 12
);

/// `struct efa_io_rdma_req`: the payload of a 64-byte RDMA WQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_rdma_req {
    /// Remote memory.
    pub remote_mem: efa_io_remote_mem_addr,
    /// Local memory.
    pub local_mem: [efa_io_tx_buf_desc; TX_DESC_NUM_RDMA_BUFS],
}
assert_layout!(
    efa_io_rdma_req,
    size = 32,
    align = 4,
    remote_mem = 0,
    local_mem = 16
);

/// The local side of `struct efa_io_rdma_req_128`: one buffer or inline data.
#[repr(C)]
#[derive(Clone, Copy)]
pub union efa_io_rdma_req_128_local {
    /// Local memory.
    pub local_mem: [efa_io_tx_buf_desc; TX_DESC_NUM_RDMA_BUFS],
    /// Inline data of an inline RDMA write.
    pub inline_data: [u8; TX_DESC_INLINE_MAX_SIZE_128],
}

/// `struct efa_io_rdma_req_128`: the payload of a 128-byte RDMA WQE.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct efa_io_rdma_req_128 {
    /// Remote memory.
    pub remote_mem: efa_io_remote_mem_addr,
    /// Local memory or inline data.
    pub local: efa_io_rdma_req_128_local,
}
assert_layout!(
    efa_io_rdma_req_128,
    size = 96,
    align = 4,
    remote_mem = 0,
    local = 16
);

/// The payload of `struct efa_io_tx_wqe`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union efa_io_tx_wqe_data {
    /// Send buffer descriptors.
    pub sgl: [efa_io_tx_buf_desc; TX_DESC_NUM_BUFS],
    /// Inline send data.
    pub inline_data: [u8; TX_DESC_INLINE_MAX_SIZE],
    /// RDMA local and remote memory.
    pub rdma_req: efa_io_rdma_req,
}

/// `struct efa_io_tx_wqe`: a 64-byte send WQE.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct efa_io_tx_wqe {
    /// Metadata.
    pub meta: efa_io_tx_meta_desc,
    /// Buffers, inline data or RDMA addresses.
    pub data: efa_io_tx_wqe_data,
}
assert_layout!(
    efa_io_tx_wqe,
    size = TX_DESC_SIZE_64,
    align = 4,
    meta = 0,
    data = 32
);

/// The payload of `struct efa_io_tx_wqe_128`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union efa_io_tx_wqe_128_data {
    /// Send buffer descriptors.
    pub sgl: [efa_io_tx_buf_desc; TX_DESC_NUM_BUFS],
    /// Inline send data.
    pub inline_data: [u8; TX_DESC_INLINE_MAX_SIZE_128],
    /// RDMA local and remote memory, or inline RDMA write data.
    pub rdma_req: efa_io_rdma_req_128,
}

/// `struct efa_io_tx_wqe_128`: a 128-byte send WQE (wide inline data).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct efa_io_tx_wqe_128 {
    /// Metadata.
    pub meta: efa_io_tx_meta_desc,
    /// Buffers, inline data or RDMA addresses.
    pub data: efa_io_tx_wqe_128_data,
}
assert_layout!(
    efa_io_tx_wqe_128,
    size = TX_DESC_SIZE_128,
    align = 4,
    meta = 0,
    data = 32
);

/// `struct efa_io_rx_desc`: one receive buffer; a receive WQE is one or more of them.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_rx_desc {
    /// Address bits 31:0.
    pub buf_addr_lo: u32,
    /// Address bits 63:32.
    pub buf_addr_hi: u32,
    /// Provider-chosen request id (of the WQE's first descriptor), echoed in the completion.
    pub req_id: u16,
    /// Length in bytes.
    pub length: u16,
    /// `RX_DESC_LKEY`, `RX_DESC_FIRST`, `RX_DESC_LAST`.
    pub lkey_ctrl: u32,
}
assert_layout!(
    efa_io_rx_desc,
    size = 16,
    align = 4,
    buf_addr_lo = 0,
    buf_addr_hi = 4,
    req_id = 8,
    length = 10,
    lkey_ctrl = 12
);

/// `lkey_ctrl` bits 23:0: local key.
pub const RX_DESC_LKEY_MASK: u32 = 0x00ff_ffff;
/// `lkey_ctrl` bit 30: first descriptor of a WQE.
pub const RX_DESC_FIRST_MASK: u32 = 1 << 30;
/// `lkey_ctrl` bit 31: last descriptor of a WQE.
pub const RX_DESC_LAST_MASK: u32 = 1 << 31;

/// `struct efa_io_cdesc_common`: the first 6 bytes of every completion.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_cdesc_common {
    /// The request id of the completed WQE.
    pub req_id: u16,
    /// Raw completion status ([`crate::vendor::comp_status`]).
    pub status: u8,
    /// `CDESC_COMMON_PHASE`, `Q_TYPE`, `HAS_IMM`, `OP_TYPE`, `UNSOLICITED`.
    pub flags: u8,
    /// Local QP number.
    pub qp_num: u16,
}
assert_layout!(
    efa_io_cdesc_common,
    size = 6,
    align = 2,
    req_id = 0,
    status = 2,
    flags = 3,
    qp_num = 4
);

/// `flags` bit 0: the device's phase for this ring slot.
pub const CDESC_COMMON_PHASE_MASK: u8 = 1 << 0;
/// `flags` bits 2:1: the [`queue_type`].
pub const CDESC_COMMON_Q_TYPE_MASK: u8 = 0x06;
/// Shift of `CDESC_COMMON_Q_TYPE`.
pub const CDESC_COMMON_Q_TYPE_SHIFT: u32 = 1;
/// `flags` bit 3: immediate data is present (receive completions).
pub const CDESC_COMMON_HAS_IMM_MASK: u8 = 1 << 3;
/// `flags` bits 6:4: the [`send_op_type`].
pub const CDESC_COMMON_OP_TYPE_MASK: u8 = 0x70;
/// Shift of `CDESC_COMMON_OP_TYPE`.
pub const CDESC_COMMON_OP_TYPE_SHIFT: u32 = 4;
/// `flags` bit 7: write-with-immediate that consumed no receive WQE.
pub const CDESC_COMMON_UNSOLICITED_MASK: u8 = 1 << 7;

/// `struct efa_io_tx_cdesc`: a send completion (16 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_tx_cdesc {
    /// Common part.
    pub common: efa_io_cdesc_common,
    /// Upper request id bits (64-bit request ids).
    pub req_id_ex: efa_io_req_id_ex,
    /// Must be zero.
    pub reserved: [u8; 4],
}
assert_layout!(
    efa_io_tx_cdesc,
    size = 16,
    align = 2,
    common = 0,
    req_id_ex = 6,
    reserved = 12
);

/// `struct efa_io_rx_cdesc`: a receive completion (16 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_rx_cdesc {
    /// Common part.
    pub common: efa_io_cdesc_common,
    /// Transferred length bits 15:0.
    pub length: u16,
    /// The receiver's AH number for the sender, `0xFFFF` if it has none.
    pub ah: u16,
    /// Sender QP number.
    pub src_qp_num: u16,
    /// Immediate data (host order) when `HAS_IMM` is set.
    pub imm: u32,
}
assert_layout!(
    efa_io_rx_cdesc,
    size = 16,
    align = 4,
    common = 0,
    length = 6,
    ah = 8,
    src_qp_num = 10,
    imm = 12
);

/// `struct efa_io_rx_cdesc_rdma_write`: extension of an RDMA-write-with-immediate receive.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efa_io_rx_cdesc_rdma_write {
    /// Transferred length bits 31:16.
    pub length_hi: u16,
}
assert_layout!(
    efa_io_rx_cdesc_rdma_write,
    size = 2,
    align = 2,
    length_hi = 0
);

/// The extension of `struct efa_io_rx_cdesc_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union efa_io_rx_cdesc_ex_u {
    /// RDMA write with immediate: the high length bits.
    pub rdma_write: efa_io_rx_cdesc_rdma_write,
    /// Sender GID, when the AH is unknown (`0xFFFF`) and the CQ reports source addresses.
    pub src_addr: [u8; 16],
}

/// `struct efa_io_rx_cdesc_ex`: the 32-byte extended receive completion. rdma-core allocates
/// every CQ with 32-byte entries (send completions use the first 16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct efa_io_rx_cdesc_ex {
    /// Base receive completion.
    pub base: efa_io_rx_cdesc,
    /// Extension.
    pub u: efa_io_rx_cdesc_ex_u,
}
assert_layout!(efa_io_rx_cdesc_ex, size = 32, align = 4, base = 0, u = 16);

/// CQ doorbell bits 15:0: the consumer index (completions polled, modulo 2^16).
pub const REGS_CQ_DB_CONSUMER_INDEX_MASK: u32 = 0x0000_ffff;
/// CQ doorbell bits 30:29: the command sequence number (incremented per CQ event).
pub const REGS_CQ_DB_CMD_SN_MASK: u32 = 0x6000_0000;
/// Shift of `REGS_CQ_DB_CMD_SN`.
pub const REGS_CQ_DB_CMD_SN_SHIFT: u32 = 29;
/// CQ doorbell bit 31: arm the CQ for one completion event.
pub const REGS_CQ_DB_ARM_MASK: u32 = 0x8000_0000;
