//! Python users of efa-sim, from this source tree (the installed wheel is exercised by
//! `scripts/check-install.sh`): the ctypes consumer `python/tests/verbs_consumer.py`
//! (two processes, SENDs both ways and an RDMA write, bytes checked) through
//! `efa-sim run`, the `efa_sim` module's `env()` / `library_path()` (`test_api.py`), and
//! a unittest suite started with `efa-sim run -- python3 -m unittest` (`test_on_device.py`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

fn tests_dir() -> PathBuf {
    python_dir().join("tests")
}

/// A command with the built CLI first on PATH and the `efa_sim` module importable.
fn with_module(program: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_efa-sim")).parent().unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    // (support::run_with_timeout does not keep a working directory: paths are absolute.)
    let pythonpath = std::env::join_paths([python_dir(), tests_dir()]).unwrap();
    let mut c = Command::new(program);
    c.env("PATH", std::env::join_paths(paths).unwrap())
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("EFA_SIM_LIB")
        .env_remove("EFA_SIM_PROFILE")
        .env_remove("EFA_SIM_DEVICES")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("SYSFS_PATH");
    c
}

fn assert_ok(cmd: &mut Command, expect: &str) {
    let out = support::run_with_timeout(cmd, 180);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(expect) || stderr.contains(expect),
        "{cmd:?}: no {expect:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    support::assert_no_loader_warnings(&format!("{cmd:?}"), &out);
}

#[test]
fn ctypes_consumer_exchanges_sends_and_an_rdma_write_through_efa_sim_run() {
    let mut cmd = with_module(env!("CARGO_BIN_EXE_efa-sim"));
    cmd.args(["run", "--", "python3"])
        .arg(tests_dir().join("verbs_consumer.py"));
    assert_ok(
        &mut cmd,
        "PASS verbs_consumer (SENDs both ways, RDMA write; fw_ver efa-sim",
    );
}

#[test]
fn efa_sim_module_env_and_library_path_select_the_device_for_children() {
    let mut cmd = with_module("python3");
    cmd.args(["-m", "unittest", "-v", "test_api"]);
    assert_ok(&mut cmd, "Ran 6 tests");
}

#[test]
fn a_unittest_suite_runs_on_the_device_under_efa_sim_run() {
    let mut cmd = with_module(env!("CARGO_BIN_EXE_efa-sim"));
    cmd.args([
        "run",
        "--",
        "python3",
        "-m",
        "unittest",
        "-v",
        "test_on_device",
    ]);
    assert_ok(&mut cmd, "Ran 2 tests");
}
