//! The GPUDirect example (`examples/gpu_rdma.rs`, `cuda` feature) between two processes:
//! this test is the target, the initiator is this test binary re-run for
//! `initiator_side`. Every byte is verified through the driver's copies.
#[allow(dead_code)]
#[path = "../examples/gpu_rdma.rs"]
mod gpu_rdma;

use std::process::Command;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn gpu_to_gpu_write_with_immediate_and_flush_between_two_processes() {
    // Unaligned, several chunks at the default max_rdma_size, plus the 64-byte tail.
    let a = gpu_rdma::parse_args(args(&["--bytes", "3000001", "--device", "1"])).unwrap();
    let report = gpu_rdma::run_target(&a, |env| {
        Command::new(std::env::current_exe()?)
            .args([
                "initiator_side",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EFA_GPU_RDMA_CHILD", "1")
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .spawn()
    })
    .unwrap_or_else(|e| panic!("example failed: {e}"));
    assert!(efa_sim_select::fw_matches_selection(&report.fw_ver));
    assert_eq!(report.bytes, 3000001);
    let expected: Vec<u8> = (0..3000001).map(gpu_rdma::pattern_byte).collect();
    assert_eq!(report.imm, gpu_rdma::checksum(&expected));
    // The software GPU orders nothing by default (attribute 118 = 0): a real flush.
    assert_eq!(report.flushed, efa::cuda::Flushed::Flushed);
    assert_eq!(report.path, efa::cuda::RegistrationPath::DmaBuf);
}

#[test]
fn initiator_side() {
    if std::env::var("EFA_GPU_RDMA_CHILD").as_deref() != Ok("1") {
        return; // only meaningful when started by the test above
    }
    gpu_rdma::run_initiator_from_env().unwrap_or_else(|e| panic!("initiator failed: {e}"));
}

#[test]
fn gpu_rdma_rejects_bad_arguments() {
    let err = |a: &[&str]| gpu_rdma::parse_args(args(a)).err().unwrap();
    assert!(err(&["--bytes", "0"]).contains("--bytes must be between"));
    assert!(err(&["--bytes", "4294967296"]).contains("--bytes must be between"));
    assert!(err(&["--device"]).contains("--device needs a number"));
    assert!(err(&["--frobnicate"]).contains("unknown argument"));
    let ok = gpu_rdma::parse_args(args(&["--bytes", "10", "--device", "1"])).unwrap();
    assert_eq!((ok.bytes, ok.device), (10, 1));
}
