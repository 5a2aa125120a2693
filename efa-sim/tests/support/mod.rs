//! Shared by efa-sim's integration tests: finds the built `libefa_sim.so`, exposes it as
//! `libibverbs.so.1` + `libefa.so.1` in a directory, and runs programs on it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `target/<profile>/deps` (the test binary lives there, and so does the cdylib).
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .expect("test binary has a parent dir")
        .to_path_buf()
}

/// Directory holding `libibverbs.so.1` and `libefa.so.1` symlinks to the stand-in.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let deps = deps_dir();
        let so = [deps.join("libefa_sim.so"), deps.parent().unwrap().join("libefa_sim.so")]
            .into_iter()
            .find(|p| p.exists())
            .expect("libefa_sim.so not built next to the test binary (cargo builds the cdylib for integration tests)");
        let dir = deps.join("efa-sim-testlib");
        std::fs::create_dir_all(&dir).expect("create lib dir");
        for name in ["libibverbs.so.1", "libefa.so.1"] {
            // Atomic replace: test binaries of several runs may share the directory.
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&so, &tmp).expect("symlink");
            std::fs::rename(&tmp, dir.join(name)).expect("rename symlink");
        }
        dir
    })
}

/// Scratch directory for compiled C programs.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = deps_dir().join("efa-sim-testbin");
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        dir
    })
}

/// A command that runs on the software device (LD_LIBRARY_PATH points at [`lib_dir`]).
pub fn on_sim(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", lib_dir());
    c.env_remove("EFA_SIM_PROFILE");
    c.env_remove("EFA_SIM_DEVICES");
    c
}

/// Runs `cmd` under `timeout` (seconds), returning its output.
pub fn run_with_timeout(cmd: &mut Command, secs: u32) -> Output {
    let prog = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
        .collect();
    let mut t = Command::new("timeout");
    t.arg("-k")
        .arg("5")
        .arg(secs.to_string())
        .arg(prog)
        .args(args);
    for (k, v) in envs {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    t.output().expect("spawn timeout")
}

/// Fails if the dynamic loader complained about symbol versions.
pub fn assert_no_loader_warnings(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("no version information available"),
        "{what}: loader warning on stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("version `"),
        "{what}: missing version node:\n{stderr}"
    );
}

/// Compiles `tests/conformance/<name>.c` with gcc against the system rdma-core headers
/// (`-libverbs -lefa`) and returns the binary.
pub fn compile_c(name: &str) -> PathBuf {
    compile_c_with(name, &[])
}

/// [`compile_c`] with extra gcc arguments (e.g. `-I` for other rdma-core headers).
pub fn compile_c_with(name: &str, extra: &[&std::ffi::OsStr]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(format!("{name}.c"));
    // Unique output per call: tests compile concurrently, sometimes the same source.
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let bin = scratch_dir().join(format!("{name}-{}-{n}", std::process::id()));
    let out = Command::new("gcc")
        .args([
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-function",
        ])
        .arg("-Wno-missing-field-initializers")
        .args(extra)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .args(["-libverbs", "-lefa"])
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc failed for {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Compiles and runs one C conformance program on the software device; it must exit 0
/// and print its PASS line.
pub fn run_c(name: &str, extra_env: &[(&str, &str)]) -> String {
    run_compiled(name, compile_c(name), extra_env)
}

/// Runs an already compiled conformance program (see [`run_c`]).
pub fn run_compiled(name: &str, bin: PathBuf, extra_env: &[(&str, &str)]) -> String {
    let mut cmd = on_sim(&bin);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = run_with_timeout(&mut cmd, 120);
    let _ = std::fs::remove_file(&bin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("PASS {name}")),
        "{name}: no PASS line:\n{stdout}"
    );
    assert_no_loader_warnings(name, &out);
    stdout
}

/// rdma-core 65 development headers: the workspace's `.headers-v65/include`, else fetched
/// once with `shared/tools/rdma-core-headers` into this test target's temp dir.
pub fn v65_headers() -> Result<PathBuf, String> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.headers-v65/include");
    if ws.join("infiniband/efadv.h").is_file() {
        return Ok(ws);
    }
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-core-65-headers");
    let include = cache.join("include");
    if include.join("infiniband/efadv.h").is_file() {
        return Ok(include);
    }
    let shared = std::env::var_os("EFA_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let tool = shared.join("tools/rdma-core-headers");
    if !tool.is_file() {
        return Err(format!("{} not found (set EFA_SHARED_DIR)", tool.display()));
    }
    let staging = cache.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let out = Command::new(&tool)
        .arg(&staging)
        .arg("sid")
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stderr.contains("libibverbs-dev_65.") {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!(
            "fetching rdma-core 65 headers failed: {}",
            stderr.trim()
        ));
    }
    if std::fs::rename(&staging, &cache).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    Ok(include)
}
