//! The multi-rail example (`examples/multi_rail.rs`, `cuda` feature) between two
//! processes on efa-sim's p5 shape (32 devices) and the software GPU: this test is the
//! target (re-run in a child with `EFA_SIM_SHAPE=p5.48xlarge`), the initiator is this
//! test binary re-run for `initiator_side`. Every byte is verified through the driver's
//! copies, and the target counts one notice per rail.
#[allow(dead_code)]
#[path = "../examples/multi_rail.rs"]
mod multi_rail;

use std::process::Command;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const SHAPE: &str = "p5.48xlarge";

#[test]
fn gpu_to_gpu_over_four_rails_of_a_p5_between_two_processes() {
    if std::env::var("EFA_SIM_SHAPE").as_deref() != Ok(SHAPE) {
        // The device reads the shape at start-up: run this test again with it set.
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "gpu_to_gpu_over_four_rails_of_a_p5_between_two_processes",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EFA_SIM_SHAPE", SHAPE)
            .output()
            .unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    // Several chunks per rail at 1 MiB, and a short last one.
    let bytes = 24 * (1 << 20) + 4099;
    let a =
        multi_rail::parse_args(args(&["--bytes", &bytes.to_string(), "--device", "1"])).unwrap();
    let report = multi_rail::run_target(&a, |env| {
        Command::new(std::env::current_exe()?)
            .args([
                "initiator_side",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("EFA_MULTI_RAIL_CHILD", "1")
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .spawn()
    })
    .unwrap_or_else(|e| panic!("example failed: {e}"));
    assert!(efa_sim_select::fw_matches_selection(&report.fw_ver));
    assert_eq!(report.bytes, bytes);
    assert_eq!(report.rails.len(), 4);
    assert_eq!(report.notices, 4, "one notice per rail, counted once");
    assert_eq!(report.flushed, efa::cuda::Flushed::Flushed);
}

#[test]
fn initiator_side() {
    if std::env::var("EFA_MULTI_RAIL_CHILD").as_deref() != Ok("1") {
        return; // only meaningful when started by the test above
    }
    multi_rail::run_initiator_from_env().unwrap_or_else(|e| panic!("initiator failed: {e}"));
}

#[test]
fn multi_rail_rejects_bad_arguments() {
    let err = |a: &[&str]| multi_rail::parse_args(args(a)).err().unwrap();
    assert!(err(&["--bytes", "0"]).contains("--bytes must be"));
    assert!(err(&["--rails", "0"]).contains("--rails must be"));
    assert!(err(&["--rails", "33"]).contains("--rails must be"));
    assert!(err(&["--chunk", "0"]).contains("--chunk must be"));
    assert!(err(&["--frobnicate"]).contains("unknown argument"));
    let ok = multi_rail::parse_args(args(&["--bytes", "10", "--rails", "2"])).unwrap();
    assert_eq!((ok.bytes, ok.rails, ok.chunk), (10, 2, 1 << 20));
}

#[test]
fn the_pattern_is_the_same_whatever_the_pieces() {
    let mut whole = vec![0u8; 100];
    multi_rail::fill_pattern(&mut whole, 0);
    let mut tail = vec![0u8; 60];
    multi_rail::fill_pattern(&mut tail, 40);
    assert_eq!(&whole[40..], &tail[..]);
    assert_ne!(whole[..8], whole[8..16]);
    // The base repeats every 16 MiB; the block stamps tell the copies apart.
    let (mut a, mut b) = (vec![0u8; 8192], vec![0u8; 8192]);
    multi_rail::fill_pattern(&mut a, 0);
    multi_rail::fill_pattern(&mut b, 16 << 20);
    assert_eq!(a[8..4096], b[8..4096]);
    assert_ne!(a[..8], b[..8]);
    assert_eq!(b[4096..4104], ((16u64 << 20) + 4096).to_le_bytes());
}
