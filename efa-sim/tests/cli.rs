//! The `efa-sim` command line: `info`, `env`, `run`.

mod support;

use std::process::{Command, Output};

fn efa_sim() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_efa-sim"));
    c.env_remove("EFA_SIM_PROFILE")
        .env_remove("EFA_SIM_DEVICES")
        .env_remove("EFA_SIM_LIB")
        .env_remove("EFA_SIM_GPU_LIB")
        .env_remove("EFA_SIM_GPU_DEVICES");
    c
}

/// Python that loads `libcuda.so.1` by name and prints `cuInit`, the device count and
/// device 0's name.
const CUDA_PROBE: &str = r#"
import ctypes
c = ctypes.CDLL("libcuda.so.1")
n = ctypes.c_int(-1)
name = ctypes.create_string_buffer(64)
rc = c.cuInit(0)
c.cuDeviceGetCount(ctypes.byref(n))
c.cuDeviceGetName(name, 64, 0)
print(rc, n.value, name.value.decode())
"#;

#[test]
fn run_with_gpus_selects_the_software_gpu() {
    // efa-sim's dev-dependency on efa-sim-gpu builds the library the CLI finds in deps/.
    let out = efa_sim()
        .args(["run", "--gpus", "3", "--", "python3", "-c", CUDA_PROBE])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.trim(), "0 3 efa-sim-gpu software GPU 0");
    // `env --gpus` prints the same selection.
    let env = efa_sim().args(["env", "--gpus", "2"]).output().unwrap();
    let e = String::from_utf8_lossy(&env.stdout);
    assert!(e.contains("export EFA_SIM_GPU_DEVICES='2'"), "{e}");
    assert!(e.contains("efa-sim-gpu-lib"), "{e}");
    // Bad counts are refused with the reason, nothing runs.
    for bad in ["x", "65"] {
        let out = efa_sim()
            .args(["run", "--gpus", bad, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("efa-sim: --gpus `{bad}`: must be a number of devices 0..=64\n")
        );
    }
    // A named library that does not exist is an error, not a silent fallback.
    let out = efa_sim()
        .args(["run", "--gpus", "1", "--", "true"])
        .env("EFA_SIM_GPU_LIB", "/nonexistent/libefa_sim_gpu.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "efa-sim: EFA_SIM_GPU_LIB=`/nonexistent/libefa_sim_gpu.so`: not a file; \
         it must name libefa_sim_gpu.so (a 64-bit ELF shared object)\n"
    );
}

#[test]
fn info_shows_the_model_devices() {
    let out = efa_sim().arg("info").output().expect("run efa-sim info");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        s.contains("hca_id:\tefa_0") && s.contains("hca_id:\tefa_1"),
        "{s}"
    );
    assert!(s.contains("vendor_id:\t0x1d0f"), "{s}");
    assert!(s.contains("fw_ver:\tefa-sim"), "{s}");
    assert!(s.contains("port 1 state:\tPORT_ACTIVE (4)"), "{s}");
}

#[test]
fn info_reflects_profile_overrides_and_rejects_bad_ones() {
    let out = efa_sim()
        .arg("info")
        .env("EFA_SIM_DEVICES", "3")
        .env("EFA_SIM_PROFILE", "max_sq_wr=16,caps=-rdma_write")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("hca_id:\tefa_2"), "{s}");
    assert!(s.contains("max_sq_wr:\t16"), "{s}");
    assert!(!s.contains("RDMA_WRITE"), "{s}");
    let bad = efa_sim()
        .arg("info")
        .env("EFA_SIM_PROFILE", "no_such_key=1")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no_such_key"),
        "{:?}",
        bad
    );
}

#[test]
fn run_puts_programs_on_the_software_device() {
    let out = efa_sim()
        .args(["run", "--", "ibv_devices"])
        .output()
        .expect("efa-sim run");
    let s = String::from_utf8_lossy(&out.stdout);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{s}\n{e}");
    assert!(s.contains("efa_0") && s.contains("efa_1"), "{s}");
    assert!(!e.contains("no version information"), "{e}");
    // The exit status of the program is passed through.
    let st = efa_sim()
        .args(["run", "--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    let none = efa_sim().args(["run", "--"]).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
}

#[test]
fn env_prints_a_working_shell_line() {
    let out = efa_sim().arg("env").output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success());
    assert!(line.starts_with("export LD_LIBRARY_PATH="), "{line}");
    let script = format!("{line}\nibv_devices");
    let run = Command::new("sh").arg("-c").arg(script).output().unwrap();
    let s = String::from_utf8_lossy(&run.stdout);
    assert!(
        s.contains("efa_0") && s.contains("efa_1"),
        "{s}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn run_provides_a_sysfs_tree_for_the_devices() {
    let script = r#"set -e
test -n "$SYSFS_PATH"
cat "$SYSFS_PATH/class/infiniband_verbs/abi_version"
for d in efa_0 efa_1; do
  basename "$(readlink -f "$SYSFS_PATH/class/infiniband/$d/device")"
  basename "$(readlink -f "$SYSFS_PATH/class/infiniband/$d/device/driver")"
done"#;
    let out = efa_sim()
        .args(["run", "--", "sh", "-c", script])
        .env_remove("SYSFS_PATH")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 5, "{s}");
    assert!(lines[0].parse::<u32>().is_ok(), "abi_version: {s}");
    for pair in lines[1..].chunks(2) {
        let dbdf: Vec<&str> = pair[0].split([':', '.']).collect();
        assert_eq!(dbdf.len(), 4, "PCI address expected: {s}");
        assert_eq!(pair[1], "efa", "{s}");
    }
    assert_ne!(lines[1], lines[3], "distinct PCI functions: {s}");
    // A caller's SYSFS_PATH is left alone.
    let out = efa_sim()
        .args(["run", "--", "sh", "-c", "echo $SYSFS_PATH"])
        .env("SYSFS_PATH", "/custom")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/custom");
}

#[test]
fn cli_binary_does_not_export_verbs_symbols() {
    // The CLI links the crate's rlib (model); the verbs entry points it carries must not
    // leak into its dynamic symbol table (they would interpose on a real libibverbs).
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W", env!("CARGO_BIN_EXE_efa-sim")])
        .output()
        .unwrap();
    assert!(out.status.success());
    let syms = String::from_utf8_lossy(&out.stdout);
    let leaked: Vec<&str> = syms
        .lines()
        .filter(|l| l.contains(" ibv_") || l.contains(" efadv_"))
        .collect();
    assert!(leaked.is_empty(), "exported from the CLI: {leaked:?}");
}

#[test]
fn info_dies_quietly_on_a_closed_pipe() {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' info | head -c 1 >/dev/null; echo done",
            env!("CARGO_BIN_EXE_efa-sim")
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// libfabric (Debian 1.17, built against the real rdma-core) finds the software devices
/// through `efa-sim run` (verbs + efadv + the generated sysfs tree).
#[test]
fn libfabric_fi_info_sees_the_software_devices() {
    let have = Command::new("sh")
        .arg("-c")
        .arg("command -v fi_info")
        .output()
        .map(|o| o.status.success());
    assert!(
        have.unwrap_or(false),
        "fi_info (libfabric-bin) is not installed"
    );
    let out = efa_sim()
        .args(["run", "--", "fi_info", "-p", "efa"])
        .env_remove("SYSFS_PATH")
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{s}\n{e}");
    for d in ["efa_0-rdm", "efa_1-rdm", "efa_0-dgrm", "efa_1-dgrm"] {
        assert!(s.contains(&format!("domain: {d}")), "missing {d}:\n{s}");
    }
    assert!(!e.contains("no version information"), "{e}");
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unknown_command_is_named_before_the_usage() {
    let out = efa_sim().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    let mut lines = e.lines();
    assert_eq!(lines.next(), Some("efa-sim: unknown command: frobnicate"));
    assert_eq!(lines.next(), Some("usage:"));
    assert!(out.stdout.is_empty());
    let out = efa_sim().args(["env", "extra"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("efa-sim: env: unexpected argument: extra\nusage:\n"),
        "{}",
        stderr(&out)
    );
}

const DIRECT_YES: &str = "efa-sim: configuration error, no devices: \
    EFA_SIM_DIRECT=`yes`: must be 0, 1, off, on, false or true\n";

#[test]
fn a_configuration_error_is_one_line_and_exit_2() {
    for args in [&["info"][..], &["env"], &["run", "--", "touch", "ran"]] {
        let out = efa_sim()
            .args(args)
            .env("EFA_SIM_DIRECT", "yes")
            .env("SYSFS_PATH", "/unused") // run/env check the configuration anyway
            .current_dir(support::scratch_dir())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&out), DIRECT_YES, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(!support::scratch_dir().join("ran").exists(), "nothing ran");
    let out = efa_sim()
        .arg("info")
        .env("EFA_SIM_PROFILE", "max_rdma_size=0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "efa-sim: configuration error, no devices: EFA_SIM_PROFILE: efa_0: max_rdma_size=0: \
         must be 1..=4294967295 while caps has rdma_read or rdma_write \
         (drop them with caps=-rdma_read-rdma_write)\n"
    );
}

/// Loaded into a program, the library cannot exit: it lists no devices and prints the
/// same single line.
#[test]
fn a_program_on_a_rejected_configuration_sees_no_devices_and_one_line() {
    let out = support::on_sim("ibv_devices")
        .env("EFA_SIM_DIRECT", "yes")
        .output()
        .unwrap();
    assert_eq!(stderr(&out), DIRECT_YES);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(!s.contains("efa_0"), "{s}");
}

/// `EFA_SIM_LIB` must be a shared library; anything else is refused before a link
/// directory is created next to it.
#[test]
fn efa_sim_lib_must_be_an_elf_shared_library() {
    let dir = support::scratch_dir().join(format!("efa-sim-lib-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("passwd");
    std::fs::write(&text, "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let exe = dir.join("prog");
    std::fs::copy(env!("CARGO_BIN_EXE_efa-sim"), &exe).unwrap();
    let missing = dir.join("missing.so");
    // An ELF executable that is not position-independent (ET_EXEC).
    let mut head = std::fs::read(&exe).unwrap();
    head.truncate(64 * 1024);
    head[16] = 2;
    let static_exe = dir.join("exec");
    std::fs::write(&static_exe, head).unwrap();
    let must = "it must name libefa_sim.so (a 64-bit ELF shared object)";
    for (path, why) in [
        (&text, "not an ELF file"),
        (&static_exe, "not an ELF shared object"),
        (
            &exe,
            "an executable (it has a program interpreter), not a library",
        ),
        (&missing, "not a file"),
        (&dir, "not a file"),
    ] {
        for cmd in ["env", "run"] {
            let out = efa_sim()
                .args([cmd, "--", "true"][..if cmd == "env" { 1 } else { 3 }].iter())
                .env("EFA_SIM_LIB", path)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{cmd} {path:?}");
            assert_eq!(
                stderr(&out),
                format!("efa-sim: EFA_SIM_LIB=`{}`: {why}; {must}\n", path.display())
            );
        }
    }
    let mut left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["exec", "passwd", "prog"],
        "nothing created beside them"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
