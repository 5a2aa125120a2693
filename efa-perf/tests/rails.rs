//! `-d all` and `-d` lists: the bandwidth tests run one rail per device at once, on
//! efa-sim's instance shapes (the 2-NIC one and a p5's 32 NICs), every transfer verified,
//! reported per rail and in aggregate (text and `--json`); latency tests stay on the first
//! device and say so; a device that does not exist is bad input (exit 2) naming it, as is
//! `--mem gpu` in a build without the `cuda` feature.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-perf");

/// efa-perf with `EFA_SIM_SHAPE=shape`.
fn perf(shape: &str, args: &[&str]) -> Output {
    // The shapes are efa-sim's: on hardware these tests fail here, they do not skip.
    assert!(
        std::hint::black_box(efa_sim_select::SOFTWARE_DEVICE),
        "needs efa-sim"
    );
    Command::new(EXE)
        .args(args)
        .env("EFA_SIM_SHAPE", shape)
        .stdin(Stdio::null())
        .output()
        .expect("run efa-perf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON lines of a run that must succeed.
fn json_lines(o: &Output) -> Vec<Value> {
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect()
}

/// Checks one bandwidth result over `devices`: a rail per device in order, each with
/// `iters` verified messages of the result's size, and the aggregate the rails' sum.
fn check_rails(r: &Value, devices: &[&str], iters: u64) {
    assert_eq!(r["verified"], true, "{r}");
    let size = r["size"].as_u64().unwrap();
    let rails = r["rails"]
        .as_array()
        .unwrap_or_else(|| panic!("no rails: {r}"));
    let names: Vec<&str> = rails
        .iter()
        .map(|x| x["device"].as_str().unwrap())
        .collect();
    assert_eq!(names, devices, "{r}");
    // Rail i of the client talks to rail i of the server (same -d on both ends here).
    let peers: Vec<&str> = rails
        .iter()
        .map(|x| x["peer_device"].as_str().unwrap())
        .collect();
    assert_eq!(peers, devices, "{r}");
    let (mut bytes, mut msgs, mut gbps, mut mmps) = (0u64, 0u64, 0f64, 0f64);
    for x in rails {
        let b = x["bytes"].as_u64().unwrap();
        let m = x["msgs"].as_u64().unwrap();
        assert_eq!(m, iters, "every rail moves -n messages: {r}");
        assert!(b > 0 && b == m * size, "{x}");
        assert!(x["gb_per_s"].as_f64().unwrap() > 0.0, "{x}");
        bytes += b;
        msgs += m;
        gbps += x["gb_per_s"].as_f64().unwrap();
        mmps += x["mmsg_per_s"].as_f64().unwrap();
    }
    assert_eq!(r["bytes"].as_u64(), Some(bytes), "{r}");
    assert_eq!(r["iterations"].as_u64(), Some(msgs), "{r}");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1e-12);
    assert!(close(r["gb_per_s"].as_f64().unwrap(), gbps), "{r}");
    assert!(close(r["mmsg_per_s"].as_f64().unwrap(), mmps), "{r}");
}

#[test]
fn all_devices_of_the_2nic_shape_run_as_two_rails() {
    let args = [
        "local",
        "-d",
        "all",
        "--json",
        "-n",
        "30",
        "--min-size",
        "1K",
        "--max-size",
        "8K",
        "write_bw",
        "read_bw",
        "send_bw",
    ];
    let lines = json_lines(&perf("2nic", &args));
    assert_eq!(lines[0]["type"], "device");
    let rails: Vec<&str> = lines[0]["rails"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", lines[0]))
        .iter()
        .map(|d| d["device"].as_str().unwrap())
        .collect();
    assert_eq!(rails, ["efa_0", "efa_1"]);
    assert_eq!(lines[0]["peer"]["rails"].as_array().map(Vec::len), Some(2));
    let results: Vec<&Value> = lines.iter().filter(|v| v["type"] == "result").collect();
    // 3 tests x 4 sizes (1 KiB .. 8 KiB, all within max_msg_sz).
    assert_eq!(results.len(), 12, "{lines:?}");
    for r in results {
        check_rails(r, &["efa_0", "efa_1"], 30);
    }
}

#[test]
fn a_list_of_four_p5_devices_runs_four_rails_in_its_order() {
    let devs = ["efa_31", "efa_4", "efa_17", "efa_0"];
    let list = devs.join(",");
    let args = [
        "local", "-d", &list, "--json", "-n", "20", "-q", "2", "-s", "64K", "write_bw", "read_bw",
    ];
    let lines = json_lines(&perf("p5.48xlarge", &args));
    let results: Vec<&Value> = lines.iter().filter(|v| v["type"] == "result").collect();
    assert_eq!(results.len(), 2, "{lines:?}");
    for r in results {
        assert_eq!(r["qps"], 2, "-q is per rail: {r}");
        check_rails(r, &devs, 20);
    }
}

#[test]
fn the_table_shows_the_aggregate_and_each_rail() {
    let o = perf(
        "2nic",
        &[
            "local",
            "-d",
            "efa_1,efa_0",
            "-n",
            "10",
            "-s",
            "4K",
            "write_bw",
        ],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    let first = out.lines().next().unwrap_or("");
    assert!(first.contains("on 2 devices (efa_1, efa_0)"), "{first}");
    assert!(
        out.contains(" write_bw  SRD  2 rails  1 QP per rail"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("4096 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let tags: Vec<&str> = rows.iter().map(|r| *r.last().unwrap()).collect();
    assert_eq!(tags, ["all", "efa_1", "efa_0"], "{out}");
    let iters: Vec<&str> = rows.iter().map(|r| r[1]).collect();
    assert_eq!(iters, ["20", "10", "10"], "{out}");
}

#[test]
fn latency_tests_run_on_the_first_device_and_say_so() {
    let args = [
        "local",
        "-d",
        "all",
        "--json",
        "-n",
        "10",
        "-s",
        "64",
        "write_lat",
        "write_bw",
    ];
    let lines = json_lines(&perf("2nic", &args));
    let note = lines
        .iter()
        .find(|v| v["type"] == "note")
        .unwrap_or_else(|| panic!("no note: {lines:?}"));
    assert_eq!(note["test"], "write_lat");
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .contains("runs on efa_0 only"),
        "{note}"
    );
    let lat = lines
        .iter()
        .find(|v| v["test"] == "write_lat" && v["type"] == "result");
    let lat = lat.unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        lat.get("rails").is_none() && lat["iterations"] == 10,
        "{lat}"
    );
    let bw = lines.iter().find(|v| v["test"] == "write_bw").unwrap();
    check_rails(bw, &["efa_0", "efa_1"], 10);
}

/// Exit status 2 and one line on stderr containing `needle`, nothing on stdout.
fn bad_input(o: &Output, needle: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.starts_with("efa-perf: ") && err.contains(needle),
        "{err:?}"
    );
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

#[test]
fn a_device_list_with_a_name_that_does_not_exist_is_exit_2_naming_it() {
    let o = perf("2nic", &["local", "-d", "efa_0,efa_7", "write_bw"]);
    bad_input(&o, "no EFA device named efa_7 (EFA devices: efa_0, efa_1)");
    // On a p5, efa_32 is one past its last device; the server too refuses it alone.
    let o = perf("p5.48xlarge", &["server", "-d", "efa_2,efa_32"]);
    bad_input(&o, "no EFA device named efa_32");
    let o = perf("2nic", &["local", "-d", "efa_0,,efa_1"]);
    bad_input(&o, "an empty device name");
    let o = perf("2nic", &["local", "-d", "efa_1,efa_1"]);
    bad_input(&o, "device efa_1 is named twice");
}

/// `efa-perf server --announce` on `-d devs` and a free port; its port.
fn server(shape: &str, devs: &str) -> (Child, u16) {
    let mut child = Command::new(EXE)
        .args([
            "server",
            "--bind",
            "127.0.0.1",
            "-p",
            "0",
            "--announce",
            "-d",
            devs,
        ])
        .env("EFA_SIM_SHAPE", shape)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address: {line:?}"));
    (child, port)
}

#[test]
fn a_server_with_fewer_devices_than_rails_is_a_clear_error() {
    let (mut child, port) = server("p5.48xlarge", "efa_0,efa_1");
    let addr = format!("127.0.0.1:{port}");
    let o = perf(
        "p5.48xlarge",
        &[
            "client",
            &addr,
            "-d",
            "efa_0,efa_1,efa_2",
            "-s",
            "8",
            "write_bw",
        ],
    );
    let _ = child.kill();
    let _ = child.wait();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.contains("write_bw over 3 rails: the server has 2 device(s) (efa_0, efa_1)"),
        "{err}"
    );
}

#[test]
fn a_server_on_all_devices_serves_a_client_of_fewer_rails() {
    // The server's first rails are used: rail i of the client to the server's i-th device.
    let (mut child, port) = server("2nic", "all");
    let addr = format!("127.0.0.1:{port}");
    let args = [
        "client", &addr, "--json", "-d", "efa_1", "-n", "10", "-s", "1K", "write_bw",
    ];
    let o = perf("2nic", &args);
    let status = child.wait().unwrap();
    let lines = json_lines(&o);
    assert!(status.success(), "the server exits after its one client");
    let r = lines.iter().find(|v| v["type"] == "result").unwrap();
    assert!(r.get("rails").is_none(), "one device, no rails: {r}");
    assert_eq!(
        (r["iterations"].as_u64(), r["verified"].as_bool()),
        (Some(10), Some(true))
    );
}

#[test]
fn mem_gpu_needs_the_cuda_feature_and_is_bad_input_without_it() {
    let o = perf(
        "2nic",
        &["local", "--mem", "gpu", "-n", "5", "-s", "4K", "write_bw"],
    );
    if cfg!(feature = "cuda") {
        // tests/gpu.rs checks what it does; here only that this build accepts it.
        assert!(o.status.success(), "{}", text(&o.stderr));
    } else {
        bad_input(&o, "--mem gpu: this efa-perf was built without GPU support");
    }
    let o = perf("2nic", &["local", "--mem", "disk"]);
    bad_input(&o, "--mem \"disk\": must be host or gpu");
}
