//! The device model: what an EFA SRD/UD device and its kernel driver do. No FFI here:
//! the C-ABI layer (`crate::abi`) translates rdma-core structs, the provider layer
//! ([`crate::provider`]) writes and reads the hardware queues ([`crate::ring`]), and the
//! [`crate::transport`] moves packets between devices (in one process, between
//! processes, across network namespaces; UDP, so it can span hosts).
//!
//! * Objects, one file each: [`Device`] and [`Sim`] (the devices of a process), [`Pd`],
//!   [`Mr`], [`Ah`], [`Cq`], [`Qp`] (with [`qp_state`] for `ibv_modify_qp`).
//! * The device's queue engines: [`send_queue`] (on a send doorbell: read, validate and
//!   execute WQEs), [`recv_queue`] (take a receive WQE for an arriving message), the CQ
//!   producer in [`cq`], and the [`watcher`] for doorbells rung by direct consumers.
//! * [`runtime`]: one device in one process: tables, requester, responder, the
//!   same-process path, the trust model, statistics.
//! * [`profile`]: limits and capabilities (`EFA_SIM_PROFILE`); `wr`: the work requests
//!   and completions of the Rust API; `mem`: the only code that touches registered
//!   memory; `dmabuf`: registrations of device memory (dma-buf rules, the nvidia_peermem
//!   path); `gpu`: CUDA device memory as a memory backend (emulated DMA).
//!
//! Configuration comes from one [`crate::config::Config`] (every `EFA_SIM_*` variable).
//! Errors are positive errno values ([`Errno`]), exactly what rdma-core returns. A
//! malformed configuration makes [`Sim::get`] report **zero devices**, with the reason
//! in [`Sim::error`] and on stderr; it never silently falls back to defaults.

mod ah;
pub mod cq;
mod device;
mod dmabuf;
pub(crate) mod gpu;
pub(crate) mod mem;
mod mr;
mod pd;
pub mod profile;
pub mod qp;
mod qp_init;
pub mod qp_state;
pub mod recv_queue;
mod ring_rules;
pub mod runtime;
pub mod send_queue;
pub mod send_wqe;
pub mod watcher;
mod wr;

pub use crate::config::MAX_DEVICES;
pub use crate::ring::Layout as RingLayout;
pub use ah::Ah;
pub use cq::{Cq, CqOptions};
pub use device::{gid_endpoint, gid_for, Device, Sim};
pub use mr::{
    AccessFlags, DmaBuf, Exporter, Mr, MrMemory, ACCESS_LOCAL_WRITE, ACCESS_ON_DEMAND,
    ACCESS_OPTIONAL_RANGE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE,
};
pub use pd::Pd;
pub use profile::{Profile, MAX_MTU_BYTES, MAX_QPS_PER_PROCESS};
pub use qp::{Qp, QpCaps, QpInit, QpType};
pub use qp_state::{ModifyQp, QpAttrs, QpState};
pub use runtime::Stats;
pub use wr::{
    Completion, CompletionKind, Payload, RecvWr, SendOp, SendWr, Sge, MAX_INLINE, MAX_RECV_SGE,
    MAX_SEND_SGE,
};

/// The transport, also reachable here for the model's tests.
pub use crate::transport;

/// Positive errno (EINVAL, ENOMEM, EOPNOTSUPP, ...), as rdma-core reports it.
pub type Errno = i32;

/// 16-byte device address (the port's only GID).
pub type Gid = [u8; 16];

/// Raw EFA completion status (efa_io_comp_status, model §4); 0 = OK.
pub type EfaStatus = u8;
