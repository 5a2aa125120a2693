//! `efa`: safe, zero-overhead access to AWS Elastic Fabric Adapter from Rust.
//!
//! This facade re-exports the safe API of [`efa_typestate`]. With the `cuda` feature,
//! `efa::cuda` re-exports `efa_cuda` (dma-buf registration of CUDA memory, loaded at run time).
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]

pub use efa_typestate::*;

/// CUDA memory support (dma-buf export, registration, GPUDirect flush), loaded at run time.
#[cfg(feature = "cuda")]
pub use efa_cuda as cuda;

/// The README's code blocks, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
