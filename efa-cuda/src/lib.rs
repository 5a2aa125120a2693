//! CUDA memory support for EFA (dma-buf export, registration with fallback, GPUDirect flush).
//!
//! Not built yet: this crate only reserves its place in the workspace. It will load
//! `libcuda.so.1` with `dlopen` at run time and never link CUDA at build time.
#![deny(missing_docs)]
