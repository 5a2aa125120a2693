//! Building blocks of the direct data path (issue 26): what a provider writes into EFA's
//! rings and reads out of them, without going through libefa's `ibv_wr_*` function
//! pointers. Nothing here posts yet; the existing posting paths are unchanged.
//!
//! * [`wqe`]: send WQEs (64 and 128 bytes) for SEND, SEND with immediate, inline SEND,
//!   RDMA write (± immediate, ± inline) and RDMA read.
//! * [`rx`]: receive descriptors (16 bytes each, one per receive SGE).
//! * [`cqe`]: completion decoding and the CQ doorbell word.
//! * [`barrier`]: the CPU barriers, the 64-byte-unit copy into a write-combined send
//!   queue (LLQ) and the doorbell store.
//!
//! Encoders and decoders are pure functions over fixed-size byte arrays: no allocation,
//! no FFI, every offset and bit taken from [`efa_sys::io`] (rdma-core's `efa_io_defs.h`).
//! All multi-byte fields are little-endian, as EFA devices and hosts are.
//!
//! Hidden from the documentation: an internal interface for the direct backend and its
//! tests, not a stable API.

#[cfg(feature = "std")]
pub mod backend;
pub mod barrier;
mod bits;
pub mod cqe;
pub mod fast;
pub mod policy;
pub mod rx;
pub mod wqe;

/// A local buffer: registered memory named by its address, local key and length (an SGE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalBuf {
    /// Start address.
    pub addr: u64,
    /// Local key (the device uses its low 24 bits).
    pub lkey: u32,
    /// Length in bytes.
    pub length: u32,
}
