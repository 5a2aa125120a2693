//! Which device the tests of this workspace run on, decided at build time.
//!
//! Depending on this crate (as a dev-dependency) is what puts the software device (and
//! the software GPU, efa-sim-gpu, as `libcuda.so.1`) on the library path; the functions here let a test assert it really runs where it
//! was meant to, so a silent fall-back to the system rdma-core (zero devices) fails.
#![no_std]

/// True when tests were built to run on efa-sim (the software device).
pub const SOFTWARE_DEVICE: bool = matches!(env!("EFA_SIM_SELECTED").as_bytes(), b"1");

/// Directory holding efa-sim's `libibverbs.so.1` and `libefa.so.1`, empty when
/// the real rdma-core was selected.
pub const LIB_DIR: &str = env!("EFA_SIM_LIB_DIR");

/// Prefix of the firmware version string that efa-sim reports for its devices.
pub const SIM_FW_PREFIX: &str = "efa-sim";

/// Checks a device's firmware string against the selection: on the software device it
/// must name efa-sim, on real hardware it must not.
pub fn fw_matches_selection(fw_ver: &str) -> bool {
    fw_ver.starts_with(SIM_FW_PREFIX) == SOFTWARE_DEVICE
}

/// True when tests were built to load efa-sim-gpu (the software GPU) as `libcuda.so.1`.
pub const SOFTWARE_GPU: bool = matches!(env!("EFA_SIM_GPU_SELECTED").as_bytes(), b"1");

/// Directory holding efa-sim-gpu's `libcuda.so.1` (on the library path of tests), empty
/// when the real CUDA driver was selected.
pub const GPU_LIB_DIR: &str = env!("EFA_SIM_GPU_LIB_DIR");

/// Prefix of the device names efa-sim-gpu reports (`cuDeviceGetName`).
pub const SIM_GPU_NAME_PREFIX: &str = "efa-sim-gpu";
