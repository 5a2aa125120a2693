//! The C baseline's functions and structs (csrc/vs_c.h), declared for Rust.

pub use efa::sys::verbs::{ibv_cq, ibv_cq_ex, ibv_qp, ibv_qp_ex, ibv_qp_to_qp_ex, ibv_wc};

/// `struct vs_dest`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VsDest {
    /// The address handle.
    pub ah: *mut efa::sys::verbs::ibv_ah,
    /// Remote QP number.
    pub qpn: u32,
    /// Remote qkey.
    pub qkey: u32,
}

/// `struct vs_local`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VsLocal {
    /// Device address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
}

/// `struct vs_remote`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VsRemote {
    /// Device address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `struct vs_comp`: what the C side keeps of an extended-CQ completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VsComp {
    /// Work request id.
    pub wr_id: u64,
    /// `ibv_wc_status`.
    pub status: u32,
    /// `ibv_wc_opcode`.
    pub opcode: u32,
    /// Vendor error (0 on success).
    pub vendor_err: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Immediate data (host order).
    pub imm: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Sender's QP number.
    pub src_qp: u32,
    /// `ibv_wc_flags`.
    pub wc_flags: u32,
    /// Sender's AH number.
    pub slid: u16,
}

/// `struct vs_staged`: one RDMA write a C engine staged for posting.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VsStaged {
    /// Work request id.
    pub wr_id: u64,
    /// Destination AH.
    pub ah: *mut efa::sys::verbs::ibv_ah,
    /// Destination QP number.
    pub qpn: u32,
    /// Destination qkey.
    pub qkey: u32,
    /// Local address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote address.
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `struct vs_limits`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VsLimits {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Longest RDMA operation.
    pub max_rdma_size: u32,
}

extern "C" {
    /// `count` SENDs of `len` bytes from slot `i & slot_mask` of `m`, one doorbell each.
    pub fn vs_c_send(
        q: *mut ibv_qp_ex,
        d: *const VsDest,
        m: *const VsLocal,
        len: u32,
        slot_mask: u32,
        wr_id: u64,
        count: u32,
    ) -> i32;
    /// `count` RDMA writes of `len` bytes, slot `i & slot_mask` to the same slot of `r`.
    pub fn vs_c_write(
        q: *mut ibv_qp_ex,
        d: *const VsDest,
        m: *const VsLocal,
        r: *const VsRemote,
        len: u32,
        slot_mask: u32,
        wr_id: u64,
        count: u32,
    ) -> i32;
    /// `count` inline SENDs of `len` bytes at `bytes`.
    pub fn vs_c_send_inline(
        q: *mut ibv_qp_ex,
        d: *const VsDest,
        bytes: *const u8,
        len: u32,
        wr_id: u64,
        count: u32,
    ) -> i32;
    /// `count` SENDs of two SGEs of `len` bytes each.
    pub fn vs_c_send_2sge(
        q: *mut ibv_qp_ex,
        d: *const VsDest,
        m: *const VsLocal,
        len: u32,
        slot_mask: u32,
        wr_id: u64,
        count: u32,
    ) -> i32;
    /// One doorbell of `n` RDMA writes of `len` bytes.
    pub fn vs_c_write_batch(
        q: *mut ibv_qp_ex,
        d: *const VsDest,
        m: *const VsLocal,
        r: *const VsRemote,
        len: u32,
        n: u32,
        wr_id: u64,
    ) -> i32;
    /// `n` receives on `rq`, `n` SENDs in one doorbell, and a drain of `2n` from `cq`.
    pub fn vs_c_round_trip(
        q: *mut ibv_qp_ex,
        rq: *mut ibv_qp,
        cq: *mut ibv_cq_ex,
        d: *const VsDest,
        src: *const VsLocal,
        inbox: *const VsLocal,
        len: u32,
        n: u32,
        wr_id: u64,
        out: *mut VsComp,
    ) -> i32;
    /// `count` polls of an empty extended CQ.
    pub fn vs_c_poll_empty_ex(cq: *mut ibv_cq_ex, count: u32) -> i32;
    /// `count` polls of an empty classic CQ.
    pub fn vs_c_poll_empty(cq: *mut ibv_cq, count: u32) -> i32;
    /// Reads `n` completions of an extended CQ into `out`.
    pub fn vs_c_drain_ex(cq: *mut ibv_cq_ex, out: *mut VsComp, n: u32) -> i32;
    /// Polls `n` completions of a classic CQ into `out`.
    pub fn vs_c_drain(cq: *mut ibv_cq, out: *mut ibv_wc, n: u32) -> i32;
    /// Stages `n` RDMA writes into `out` (room for `cap`), checked against `lim`.
    pub fn vs_c_build_writes(
        out: *mut VsStaged,
        cap: u32,
        lim: *const VsLimits,
        d: *const VsDest,
        m: *const VsLocal,
        r: *const VsRemote,
        len: u32,
        n: u32,
        wr_id: u64,
    ) -> i32;
    /// `count` endpoint encodes and decodes; returns a sum of the decoded fields.
    pub fn vs_c_endpoint(gid: *const u8, qpn: u32, qkey: u32, count: u32) -> i64;
}
