//! A software EFA device: a stand-in `libibverbs.so.1` + `libefa.so.1` that behaves like
//! an EFA SRD/UD device. See the crate README for running programs on it.
//!
//! The layers, top to bottom:
//! * `abi` (private): the C ABI of libibverbs and libefa; it only translates C
//!   structs and calls the layers below.
//! * [`provider`]: what libefa does in user space: posting rules, WQE and descriptor
//!   encoding, doorbells, CQ polling.
//! * [`ring`]: the hardware queues in EFA's formats, shared by provider and device (and by
//!   consumers that drive them directly).
//! * [`model`]: the device: objects, queue engines, the runtime that executes requests.
//! * [`transport`]: datagrams between devices (UDP, addressing, faults).
//! * [`config`]: every `EFA_SIM_*` variable, read once; [`sysfs`]: the sysfs view;
//!   [`shape`]: instance shapes (devices, PCIe switches, NUMA nodes).
#![deny(missing_docs)]
mod abi;
pub mod config;
pub mod install;
pub mod model;
pub mod provider;
pub(crate) mod rcu;
pub mod ring;
pub mod shape;
pub mod sysfs;
pub mod transport;
