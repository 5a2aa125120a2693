//! Raw FFI for AWS EFA. Placeholder until issue 2's bindings land.
#![no_std]
pub use rdma_sys as verbs;
