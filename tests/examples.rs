//! Every example of `examples/` runs, as a program, on the device this build selected
//! (efa-sim unless EFA_SIM=0), and prints what it verified. `cargo test` builds the
//! examples before it runs the tests.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// target/<profile>/examples/<name>: this test is target/<profile>/deps/examples-<hash>.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo test` builds the examples (or `cargo build --examples`)",
        path.display()
    );
    path
}

/// Runs an example with a deadline (killed and failed after it).
fn run(name: &str, args: &[&str], env: &[(&str, &str)], limit: Duration) -> String {
    let mut c = Command::new(example(name));
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("start the example");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{name} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("output");
    let (out, err) = (
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
    );
    assert!(status.success(), "{name} failed: {status}\n{out}\n{err}");
    out.into_owned()
}

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn srd_pingpong_runs_between_two_processes_over_tcp() {
    let out = run("srd_pingpong", &[], &[], LIMIT);
    assert!(
        out.contains("1000 round trips of 64 bytes verified"),
        "{out}"
    );
}

#[test]
fn rdma_write_imm_learns_the_sender_from_its_gid_and_verifies_the_write() {
    let out = run("rdma_write_imm", &[], &[], LIMIT);
    assert!(out.contains("B: hello from GID fe80:"), "{out}");
    assert!(
        out.contains("write-with-immediate 0xc0ffee from AH Some("),
        "{out}"
    );
    assert!(out.contains("65536 bytes written by A verified"), "{out}");
}

#[test]
fn chunked_transfer_splits_at_max_rdma_size() {
    // efa-sim's small-limit profile: 64 KiB RDMA, so the default transfer takes 5 chunks.
    let env: &[(&str, &str)] = if efa_sim_select::SOFTWARE_DEVICE {
        &[("EFA_SIM_PROFILE", "max_rdma_size=65536")]
    } else {
        &[]
    };
    let out = run("chunked_transfer", &[], env, LIMIT);
    if efa_sim_select::SOFTWARE_DEVICE {
        assert!(
            out.contains("266241 bytes, max_rdma_size 65536: 5 chunks"),
            "{out}"
        );
    }
    assert!(
        out.contains("write_all + read_all:") && out.contains("every byte verified"),
        "{out}"
    );
    assert!(out.contains("fill_writes:"), "{out}");
}

#[test]
fn event_loop_sleeps_on_the_channel_until_completions() {
    let out = run("event_loop", &[], &[], LIMIT);
    assert!(
        out.contains("64 messages received and verified by a thread that woke up"),
        "{out}"
    );
}

#[test]
fn srd_demo_runs_as_a_program() {
    let out = run(
        "srd_demo",
        &["--messages", "2000", "--bytes", "100000"],
        &[],
        LIMIT,
    );
    assert!(out.contains("ping: 2000 x 64-byte SENDs verified"), "{out}");
    assert!(out.trim_end().ends_with("ok"), "{out}");
}
