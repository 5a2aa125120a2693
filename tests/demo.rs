//! The `srd_demo` example (`examples/srd_demo.rs`), run in-process with small sizes: it
//! must move and verify its traffic on the selected device. (The README's main job,
//! `efa-perf local`, is tested by efa-perf's own tests.)
#[allow(dead_code)]
#[path = "../examples/srd_demo.rs"]
mod srd_demo;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn srd_demo_moves_and_verifies_data() {
    let a = srd_demo::parse_args(args(&["--messages", "3000", "--bytes", "300001"])).unwrap();
    let report = srd_demo::run(&a).unwrap_or_else(|e| panic!("demo failed: {e}"));
    assert!(
        efa_sim_select::fw_matches_selection(&report.fw_ver),
        "demo ran on an unexpected device: {}",
        report.fw_ver
    );
    assert_eq!(report.messages, 3000);
    if efa_sim_select::SOFTWARE_DEVICE {
        // efa-sim's default profile has RDMA read and write.
        assert_eq!(report.rdma_bytes, Some(300001));
    }
}

#[test]
fn srd_demo_rejects_bad_arguments() {
    let err = |a: &[&str]| srd_demo::parse_args(args(a)).err().unwrap();
    assert!(err(&["--bytes", "0"]).contains("--bytes must be between"));
    assert!(err(&["--messages"]).contains("--messages needs a number"));
    assert!(err(&["--frobnicate"]).contains("unknown argument"));
}
