//! A software EFA device. Placeholder until issue 3 lands.
#![deny(missing_docs)]
