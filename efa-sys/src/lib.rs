//! Raw FFI for AWS EFA.
//!
//! * [`verbs`]: everything of `rdma-sys` 0.3 (libibverbs types, functions and its Rust
//!   versions of the header-only helpers, generated from rdma-core 44 headers) plus the few
//!   verbs items it lacks ([`verbs_ext`]) and correct extended-verbs dispatch ([`verbs_ctx`]:
//!   rdma-sys 0.3 checks `abi_compat` against `u32::MAX` instead of `UINTPTR_MAX`).
//! * [`efadv`]: hand-written `efadv.h` bindings at the rdma-core 65 layout, also re-exported
//!   at the crate root. Functions of libefa nodes newer than `EFA_1.2` are resolved at run time
//!   and return [`NotProvided`] when the loaded libefa lacks them.
//! * [`io`]: the hardware queue formats (`efa_io_defs.h`): send WQEs, receive descriptors,
//!   completion entries and the CQ doorbell, for direct data-path code.
//! * [`layout`]: offsets of `ibv_qp_ex`/`ibv_cq_ex` members a zero-overhead layer reads.
//! * [`vendor`]: EFA vendor/part ids and the raw completion status codes.
//!
//! Nothing here allocates. Every hand-written `#[repr(C)]` type carries compile-time
//! size/alignment/offset assertions; `tests/layout.rs` compares them with the C headers.
#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "std")]
extern crate std;

// The layouts below are checked for the two architectures EFA instances have (LP64 glibc).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "efa-sys supports x86_64 and aarch64 Linux only (the architectures of EFA instances)"
);

/// Compile-time checks of a `#[repr(C)]` type against the C layout: size, alignment and the
/// offsets of the listed fields. Defined before the modules so that all of them can use it.
macro_rules! assert_layout {
    ($t:ty, size = $size:expr, align = $align:expr $(, $field:ident = $off:expr)* $(,)?) => {
        static_assertions::const_assert_eq!(core::mem::size_of::<$t>(), $size);
        static_assertions::const_assert_eq!(core::mem::align_of::<$t>(), $align);
        $(static_assertions::const_assert_eq!(core::mem::offset_of!($t, $field), $off);)*
    };
}

pub mod efadv;
pub mod io;
pub mod layout;
pub mod vendor;
pub mod verbs_ctx;
pub mod verbs_ext;

/// libibverbs: all of `rdma-sys` plus [`verbs_ext`], with the [`verbs_ctx`] versions of the
/// extended-verbs helpers replacing rdma-sys's (which never find the extended ops on 64-bit).
///
/// rdma-sys's other header-only helpers (`ibv_wr_*`, `ibv_start_poll`, `ibv_wc_read_*`,
/// `ibv_post_send`, ...) are correct but `unwrap()` the provider's function pointer on every
/// call; a zero-overhead layer validates the pointers once and calls them directly.
pub mod verbs {
    pub use crate::verbs_ctx::{
        ___ibv_query_port, ibv_alloc_parent_domain, ibv_alloc_td, ibv_create_cq_ex,
        ibv_create_qp_ex, ibv_dealloc_td, ibv_modify_cq, ibv_query_device_ex, ibv_query_port,
        verbs_get_ctx, VERBS_ABI_IS_EXTENDED,
    };
    pub use crate::verbs_ext::*;
    pub use rdma_sys::*;
}

pub use efadv::*;

/// The rdma-sys crate itself, e.g. for its own versions of the items [`verbs`] replaces
/// (`rdma_sys::ibv_query_port` is the exported legacy symbol taking `_compat_ibv_port_attr`).
#[doc(no_inline)]
pub use rdma_sys;
