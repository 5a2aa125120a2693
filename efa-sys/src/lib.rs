//! Raw FFI for AWS EFA.
//!
//! * [`verbs`]: everything of `rdma-sys` 0.3 (libibverbs types, functions and its Rust
//!   versions of the header-only helpers, generated from rdma-core 44 headers) plus the few
//!   verbs items it lacks ([`verbs_ext`]).
//! * [`efadv`]: hand-written `efadv.h` bindings at the rdma-core 65 layout, also re-exported
//!   at the crate root. Functions of libefa nodes newer than `EFA_1.2` are resolved at run time
//!   and return [`NotProvided`] when the loaded libefa lacks them.
//! * [`layout`]: offsets of `ibv_qp_ex`/`ibv_cq_ex` members a zero-overhead layer reads.
//! * [`vendor`]: EFA vendor/part ids and the raw completion status codes.
//!
//! Nothing here allocates. Every hand-written `#[repr(C)]` type carries compile-time
//! size/alignment/offset assertions; `tests/layout.rs` compares them with the C headers.
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod efadv;
pub mod layout;
pub mod vendor;
pub mod verbs_ext;

/// libibverbs: all of `rdma-sys` plus [`verbs_ext`].
pub mod verbs {
    pub use crate::verbs_ext::*;
    pub use rdma_sys::*;
}

pub use efadv::*;
