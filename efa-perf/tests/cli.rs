//! efa-perf as a user runs it, on the device this build selected (efa-sim unless
//! EFA_SIM=0): a short local sweep of every test with data verification, `--json`
//! parsed, and the error paths (one line on stderr, a non-zero exit, never a hang).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-perf");

fn perf(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(EXE);
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run efa-perf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit status `code` and exactly one line on stderr, which contains `needle`.
fn fails_with(o: &Output, code: i32, needle: &str) {
    let err = text(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stderr: {err}\nstdout: {}",
        text(&o.stdout)
    );
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(
        err.starts_with("efa-perf: ") && err.contains(needle),
        "{err:?} lacks {needle:?}"
    );
}

#[test]
fn a_local_sweep_runs_every_test_and_verifies_it() {
    let o = perf(
        &["local", "-n", "40", "--max-size", "16K", "--timeout", "30"],
        &[],
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    let first = out.lines().next().unwrap_or("");
    assert_eq!(
        first.contains("the software EFA device"),
        efa_sim_select::SOFTWARE_DEVICE,
        "first line: {first}"
    );
    for t in ["send_lat", "write_lat", "send_bw", "write_bw", "read_bw"] {
        assert!(out.contains(&format!(" {t}  SRD")), "no {t} table:\n{out}");
    }
    // 8 B .. 16 KiB for RDMA: 12 sizes; SEND stops at max_msg_sz.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("16384 "))
        .collect();
    assert_eq!(rows.len(), 3, "16 KiB rows of the three RDMA tests:\n{out}");
    assert!(
        rows.iter()
            .all(|r| r.split_whitespace().nth(1) == Some("40")),
        "{rows:?}"
    );
}

#[test]
fn json_has_one_object_per_test_and_size() {
    let args = [
        "local",
        "--json",
        "-n",
        "25",
        "--max-size",
        "4K",
        "-q",
        "2",
        "-b",
        "4",
        "-t",
        "16",
    ];
    let o = perf(&args, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    assert_eq!(lines[0]["type"], "device");
    assert_eq!(lines[0]["software"], efa_sim_select::SOFTWARE_DEVICE);
    assert_eq!(lines[0]["peer"]["protocol"], 2);
    let results: Vec<&Value> = lines.iter().filter(|v| v["type"] == "result").collect();
    // 5 tests x 10 sizes (8 B .. 4 KiB; every limit is above 4 KiB).
    assert_eq!(results.len(), 50, "{lines:?}");
    for r in &results {
        assert_eq!(r["verified"], true);
        assert_eq!(r["iterations"], 25, "{r}");
        let test = r["test"].as_str().unwrap();
        if test.ends_with("_lat") {
            assert_eq!(r["qps"], 1);
            let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
            assert!(f("min_us") > 0.0 && f("min_us") <= f("p50_us"), "{r}");
            assert!(
                f("p50_us") <= f("p99_us") && f("p99_us") <= f("p99_9_us"),
                "{r}"
            );
            assert!(f("p99_9_us") <= f("max_us"), "{r}");
        } else {
            assert_eq!(
                (r["qps"].as_u64(), r["batch"].as_u64()),
                (Some(2), Some(4)),
                "{r}"
            );
            assert!(r["gb_per_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["mmsg_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let sizes: Vec<u64> = results
        .iter()
        .filter(|r| r["test"] == "read_bw")
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, (3..=12).map(|k| 1u64 << k).collect::<Vec<_>>());
}

#[test]
fn bad_command_lines_exit_2_with_one_line() {
    fails_with(&perf(&["local", "-s", "0"], &[]), 2, "-s 0 is out of range");
    let huge = "99999999999999999999G";
    fails_with(
        &perf(&["local", "-s", huge], &[]),
        2,
        &format!(
            "-s {huge} is out of range: sizes go from 1 to 1G (1073741824) bytes, both included"
        ),
    );
    fails_with(
        &perf(&["local", "--max-size", "1x"], &[]),
        2,
        "--max-size needs a size",
    );
    fails_with(&perf(&["local", "ib_atomic_bw"], &[]), 2, "unknown test");
    fails_with(&perf(&["local", "-c", "UD"], &[]), 2, "SRD");
    fails_with(&perf(&["client"], &[]), 2, "HOST");
    fails_with(&perf(&["bogus"], &[]), 2, "unknown command");
}

#[test]
fn a_named_test_the_device_cannot_run_is_an_error_a_default_one_is_skipped() {
    let no_write = [("EFA_SIM_PROFILE", "caps=-rdma_write")];
    if !efa_sim_select::SOFTWARE_DEVICE {
        return; // needs efa-sim's profiles
    }
    let o = perf(&["local", "write_bw", "-n", "5", "-s", "64"], &no_write);
    fails_with(
        &o,
        1,
        "efa_0 (this end) has no RDMA write: write_bw needs it",
    );
    let o = perf(&["local", "-n", "5", "--max-size", "64"], &no_write);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        out.contains(
            "note: efa_0 (this end) has no RDMA write: write_lat needs it on both ends; skipped"
        ),
        "{out}"
    );
    assert!(
        out.contains(" read_bw  SRD") && !out.contains(" write_bw  SRD"),
        "{out}"
    );
    let no_read = [("EFA_SIM_PROFILE", "caps=-rdma_read")];
    fails_with(
        &perf(&["local", "ib_read_bw", "-n", "5"], &no_read),
        1,
        "no RDMA read",
    );
}

#[test]
fn sizes_beyond_the_device_limits_are_refused_or_skipped() {
    fails_with(
        &perf(&["local", "send_lat", "-s", "1M", "-n", "5"], &[]),
        1,
        "exceeds the max_msg_sz",
    );
    if efa_sim_select::SOFTWARE_DEVICE {
        let small = [("EFA_SIM_PROFILE", "max_rdma_size=4096")];
        let o = perf(
            &["local", "write_bw", "-n", "5", "--max-size", "16K"],
            &small,
        );
        let out = text(&o.stdout);
        assert!(o.status.success(), "{out}{}", text(&o.stderr));
        assert!(
            out.contains("write_bw: sizes above 4096 B (max_rdma_size) skipped"),
            "{out}"
        );
        assert!(!out.contains("   8192 "), "{out}");
    }
}

/// A TCP listener on a free port that answers the first line with `reply` (or never).
fn fake_server(reply: Option<&'static str>) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        match reply {
            Some(rep) => {
                let _ = (&s).write_all(rep.as_bytes());
            }
            None => std::thread::sleep(Duration::from_secs(3)),
        }
    });
    (port, h)
}

#[test]
fn clients_fail_fast_on_bad_peers() {
    // Nothing listens on a port that was just freed.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = perf(&["client", &format!("127.0.0.1:{port}"), "-n", "5"], &[]);
    fails_with(&o, 1, "cannot connect to 127.0.0.1");
    // A server of another version.
    let (port, h) = fake_server(Some(
        "{\"hello\":\"efa-perf\",\"protocol\":99,\"version\":\"9.0.0\"}\n",
    ));
    let o = perf(
        &["client", "127.0.0.1", "-p", &port.to_string(), "-n", "5"],
        &[],
    );
    fails_with(&o, 1, "runs efa-perf 9.0.0 (protocol 99)");
    h.join().unwrap();
    // Something that is not efa-perf.
    let (port, h) = fake_server(Some("SSH-2.0-OpenSSH_9.2\r\n"));
    let o = perf(&["client", &format!("127.0.0.1:{port}")], &[]);
    fails_with(&o, 1, "does not speak efa-perf's protocol");
    h.join().unwrap();
    // A peer that never answers: the timeout, not a hang.
    let (port, h) = fake_server(None);
    let t = Instant::now();
    let o = perf(
        &["client", &format!("127.0.0.1:{port}"), "--timeout", "1"],
        &[],
    );
    fails_with(&o, 1, "no message from 127.0.0.1");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    h.join().unwrap();
}

/// Starts `efa-perf server` on a free port and returns it with the port.
fn server(env: &[(&str, &str)]) -> (std::process::Child, u16) {
    let mut c = Command::new(EXE);
    c.args([
        "server",
        "--bind",
        "127.0.0.1",
        "-p",
        "0",
        "--announce",
        "--timeout",
        "5",
    ]);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .expect("listening on ADDR:PORT");
    (child, port)
}

#[test]
fn a_server_refuses_a_client_of_another_version() {
    let (mut child, port) = server(&[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"{\"hello\":\"efa-perf\",\"protocol\":7,\"version\":\"7.0.0\"}\n")
        .unwrap();
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).unwrap();
    let v: Value = serde_json::from_str(&reply).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("this client 7.0.0 (protocol 7)"), "{msg}");
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("runs efa-perf 7.0.0 (protocol 7)"), "{err}");
}

/// What a server answers a client that says hello, then `setup`; and its exit status and
/// stderr once it has failed.
fn server_answers_setup(setup: &str) -> (String, Option<i32>, String) {
    let (mut child, port) = server(&[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let hello = format!(
        "{{\"hello\":\"efa-perf\",\"protocol\":{},\"version\":\"t\"}}\n",
        efa_perf::wire::PROTOCOL
    );
    s.write_all(hello.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    s.write_all(setup.as_bytes()).unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    (line, status.code(), err)
}

#[test]
fn a_server_refuses_set_ups_beyond_the_protocol_or_its_device() {
    // 64 QPs of 8192 receive slots (2 x depth) of 1 GiB (2^49 bytes) used to abort the
    // server in the allocation; the device's max_msg_sz refuses it first now.
    for (setup, want) in [
        (
            r#"{"setup":"send_bw","qps":64,"depth":4096,"max_size":1073741824}"#,
            "set-up max_size 1073741824 exceeds the max_msg_sz of ",
        ),
        (
            r#"{"setup":"send_lat","qps":1,"depth":1,"max_size":1073741825}"#,
            r#""max_size" is 1073741825, outside 1..=1073741824"#,
        ),
        (
            r#"{"setup":"write_bw","qps":65,"depth":1,"max_size":8}"#,
            r#""qps" is 65, outside 1..=64"#,
        ),
        (
            r#"{"setup":"write_bw","qps":1,"depth":18446744073709551615,"max_size":8}"#,
            r#""depth" is 18446744073709551615, outside 1..=65536"#,
        ),
        (
            r#"{"setup":"send_bw","qps":1,"depth":-1,"max_size":8}"#,
            r#"no number "depth""#,
        ),
    ] {
        let (reply, code, err) = server_answers_setup(&format!("{setup}\n"));
        let v: Value = serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{reply:?}: {e}"));
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{setup}: {reply}"));
        assert!(msg.contains(want), "{setup}: {msg}");
        assert_eq!(code, Some(1), "{setup}: {err}");
        assert_eq!(err.lines().count(), 1, "{setup}: {err:?}");
        assert!(err.contains(want), "{setup}: {err}");
    }
}

#[test]
fn a_server_that_dies_mid_run_ends_the_client_within_the_timeout() {
    if !efa_sim_select::SOFTWARE_DEVICE {
        return; // needs efa-sim's peer-kill fault
    }
    // The server process SIGKILLs itself at its 200th datagram, in the middle of the run.
    let (mut child, port) = server(&[("EFA_SIM_FAULTS", "kill_after=200")]);
    let t = Instant::now();
    let args = [
        "client",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "send_lat",
        "-n",
        "1000",
        "-s",
        "64",
        "--timeout",
        "3",
    ];
    let o = perf(&args, &[]);
    let _ = child.wait();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "{:?}: {err}",
        t.elapsed()
    );
}

/// A stdout whose reader is gone: the write end of a pipe whose only reader, `true`,
/// has exited, so every write fails with EPIPE as after `efa-perf ... | head -1`. The
/// reader is gone before efa-perf starts, so the test does not depend on timing.
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run true");
    let w = reader.stdin.take().expect("pipe");
    reader.wait().expect("true exits");
    Stdio::from(std::os::fd::OwnedFd::from(w))
}

/// Runs efa-perf with `stdout`; kills it after `limit` (then the status is `None`).
fn perf_into(args: &[&str], stdout: Stdio, limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run efa-perf");
    let start = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    (code, err)
}

#[test]
fn a_closed_stdout_ends_every_command_quietly_with_status_0() {
    // A client whose output nobody reads stops at its first line: five tests of 5 s
    // each would otherwise take 25 s.
    let long_run = ["local", "-s", "8", "-D", "5", "--timeout", "30"];
    let long_json = ["local", "-s", "8", "-D", "5", "--json"];
    let server = ["server", "-p", "0", "--announce"];
    for args in [&["--help"][..], &["-V"], &server, &long_run, &long_json] {
        let (code, err) = perf_into(args, closed_pipe(), Duration::from_secs(15));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}: no message, no panic");
    }
}

#[test]
fn any_other_write_error_is_one_line_and_status_1() {
    for args in [&["-V"][..], &["local", "-s", "8", "-n", "10", "send_lat"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let (code, err) = perf_into(args, Stdio::from(full), Duration::from_secs(30));
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(
            err.starts_with("efa-perf: cannot write to stdout: "),
            "{err:?}"
        );
    }
}
