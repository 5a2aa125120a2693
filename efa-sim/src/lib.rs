//! A software EFA device. Being built for issue 3.
#![deny(missing_docs)]
mod abi;
pub mod install;
pub mod model;
pub mod sysfs;
