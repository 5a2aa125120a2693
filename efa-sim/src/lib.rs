//! A software EFA device. Being built for issue 3.
#![deny(missing_docs)]
pub mod model;
