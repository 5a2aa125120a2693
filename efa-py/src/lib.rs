//! `efa._efa`: the `efa` Python package's handles on the efa-typestate core.
//!
//! One module per concept: [`device`] (devices, context, attributes), [`pd`] (PD, AH), [`mr`] (MR), [`cq`] (CQs, channels), [`wc`] (work completions), [`qp`] (queue pairs), [`wr`] (SGEs and work
//! requests), [`post`] (posting), [`memory`] (Python buffers as registered memory),
//! [`errors`]. The pure-Python parts (enums, endpoint exchange, tensor helpers,
//! `efa.cuda`) are in `python/efa/`.

// Class and method names are the `efa` package's API (SGE, QP, to_rts...), not Rust style.
#![allow(clippy::upper_case_acronyms, clippy::wrong_self_convention)]

use pyo3::prelude::*;

mod abi;
mod args;
mod arrays;
mod arrays_buf;
mod arrays_poll;
mod cq;
mod credits;
mod device;
mod entry;
mod errors;
mod fastcall;
mod gpu;
mod kept;
mod memory;
mod mr;
mod pd;
mod poll_list;
mod post;
mod post_fast;
mod qp;
mod send_checks;
mod wc;
mod wr;

/// True: the extension links libibverbs and libefa (as the package's `_linked` says it
/// loaded them); importing it fails without them.
#[pyfunction]
fn _linked() -> bool {
    true
}

/// True: the extension links `ibv_reg_dmabuf_mr` (rdma-core 34 and newer).
#[pyfunction]
fn _has_dmabuf() -> bool {
    true
}

#[pymodule]
fn _efa(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let (efa_error, completion_error) = errors::classes(py)?;
    m.add("EfaError", efa_error.clone_ref(py))?;
    m.add("CompletionError", completion_error.clone_ref(py))?;
    m.add_function(wrap_pyfunction!(device::get_device_list, m)?)?;
    m.add_function(wrap_pyfunction!(device::get_efa_device_list, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::_register_cuda, m)?)?;
    m.add_function(wrap_pyfunction!(gpu::_flush_gpudirect_writes, m)?)?;
    m.add_function(wrap_pyfunction!(wc::_wc_created, m)?)?;
    m.add_function(wrap_pyfunction!(abi::_abi, m)?)?;
    m.add_function(wrap_pyfunction!(_linked, m)?)?;
    m.add_function(wrap_pyfunction!(_has_dmabuf, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::post_array, m)?)?;
    m.add_function(wrap_pyfunction!(arrays_poll::poll_into, m)?)?;
    wc::install_members(m.py())?;
    post_fast::init_types(py);
    m.add_class::<device::Device>()?;
    m.add_class::<device::Context>()?;
    m.add_class::<device::Gid>()?;
    m.add_class::<device::DeviceAttr>()?;
    m.add_class::<device::EfaDeviceAttr>()?;
    m.add_class::<device::PortAttr>()?;
    m.add_class::<device::AsyncEvent>()?;
    m.add_class::<pd::PD>()?;
    m.add_class::<mr::MR>()?;
    m.add_class::<mr::MRAttr>()?;
    m.add_class::<pd::AH>()?;
    m.add_class::<cq::CQ>()?;
    m.add_class::<cq::CQEx>()?;
    m.add_class::<cq::CQAttr>()?;
    m.add_class::<wc::WC>()?;
    m.add_class::<cq::CompChannel>()?;
    m.add_class::<qp::QP>()?;
    m.add_class::<qp::QPCap>()?;
    m.add_class::<qp::QPInitAttr>()?;
    m.add_class::<pd::AHAttr>()?;
    m.add_class::<qp::WQAttr>()?;
    m.add_class::<wr::SGE>()?;
    m.add_class::<wr::SendWR>()?;
    m.add_class::<wr::RecvWR>()?;
    fastcall::install(py)?;
    Ok(())
}
