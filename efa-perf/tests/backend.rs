//! `--backend`: each data path runs every transfer verified and is named in the header
//! and the JSON; `auto` resolves to what the device can do; a refused choice is one line.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-perf");

fn perf(args: &[&str], profile: Option<&str>) -> Output {
    perf_direct(args, profile, None)
}

/// [`perf`] with `EFA_RS_DIRECT` set to `direct` (removed for None).
fn perf_direct(args: &[&str], profile: Option<&str>, direct: Option<&str>) -> Output {
    let mut c = Command::new(EXE);
    c.args(args).stdin(Stdio::null());
    if let Some(p) = profile {
        c.env("EFA_SIM_PROFILE", p);
    }
    match direct {
        Some(d) => c.env("EFA_RS_DIRECT", d),
        None => c.env_remove("EFA_RS_DIRECT"),
    };
    c.output().expect("run efa-perf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The device line's `backend` and the number of verified results of a short run.
fn run_json(backend: &str, profile: Option<&str>) -> (String, usize) {
    run_json_direct(backend, profile, None)
}

/// [`run_json`] with `EFA_RS_DIRECT` set to `direct` (removed for None).
fn run_json_direct(backend: &str, profile: Option<&str>, direct: Option<&str>) -> (String, usize) {
    let args = [
        "local",
        "--json",
        "--backend",
        backend,
        "-n",
        "20",
        "-s",
        "256",
        "send_lat",
        "write_bw",
        "read_bw",
    ];
    let o = perf_direct(&args, profile, direct);
    assert!(o.status.success(), "{backend}: {}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "device");
    let verified = lines
        .iter()
        .filter(|v| v["type"] == "result" && v["verified"] == true)
        .count();
    (lines[0]["backend"].as_str().unwrap().to_string(), verified)
}

#[test]
fn every_backend_runs_verified_and_is_named() {
    // `auto` is libefa's path until the direct one is qualified on hardware (issue 35).
    for (asked, used) in [
        ("auto", "provider"),
        ("direct", "direct"),
        ("provider", "provider"),
    ] {
        assert_eq!(
            run_json(asked, None),
            (used.to_string(), 3),
            "--backend {asked}"
        );
    }
    // With EFA_RS_DIRECT=1, efa-sim hands out its rings (as libefa does since rdma-core
    // 59), so `auto` is the direct path.
    assert_eq!(
        run_json_direct("auto", None, Some("1")),
        ("direct".to_string(), 3),
        "--backend auto, EFA_RS_DIRECT=1"
    );
    let o = perf(
        &[
            "local",
            "--backend",
            "provider",
            "-n",
            "10",
            "-s",
            "64",
            "write_lat",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let first = text(&o.stdout).lines().next().unwrap_or("").to_string();
    assert!(first.ends_with("; provider data path"), "{first}");
}

#[test]
fn auto_is_the_provider_where_the_device_refuses_its_rings() {
    // The profile is efa-sim's: on hardware this test fails here, it does not skip.
    assert!(
        std::hint::black_box(efa_sim_select::SOFTWARE_DEVICE),
        "needs efa-sim"
    );
    // Asked for the direct path, `auto` falls back where the rings are refused.
    assert_eq!(
        run_json_direct("auto", Some("ring_query=0"), Some("1")),
        ("provider".into(), 3)
    );
    let o = perf(
        &["local", "--backend", "direct", "-s", "64"],
        Some("ring_query=0"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--backend direct") && err.contains("efadv_query_cq"),
        "{err}"
    );
}

#[test]
fn an_unknown_backend_is_a_usage_error() {
    let o = perf(&["local", "--backend", "fast"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--backend \"fast\": must be auto, direct or provider"),
        "{}",
        text(&o.stderr)
    );
}
