//! C conformance suite: each `tests/conformance/*.c` is compiled by gcc against the
//! system rdma-core 44 headers, linked `-libverbs -lefa`, and run on the software device.
//! A C test prints `FAIL <test> <file>:<line>: <what>` and exits non-zero on failure.

mod support;

#[test]
fn data_srd() {
    support::run_c("data_srd", &[]);
}

#[test]
fn data_srd_read_opcode_rdma_read() {
    support::run_c("data_srd", &[("EFA_SIM_READ_OPCODE", "rdma_read")]);
}

#[test]
fn api_device() {
    support::run_c("api_device", &[]);
}
