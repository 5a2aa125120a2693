//! Safe API over EFA. Placeholder until issue 4 lands.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
pub use efa_sys as sys;
