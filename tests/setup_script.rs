//! `scripts/setup.sh` decides what to install by asking the package manager, and finds the
//! libclang bindgen loads by its exact file name. These tests run the script against a fake
//! `dpkg-query` / `apt-get` on `PATH` and a temporary file-system root (`SETUP_ROOT`), and
//! assert what it installs and what it prints.
//!
//! The situation that once broke every fresh machine is the first test: `libclang-cpp14` is
//! installed (its `libclang-cpp.so.14` matches a `libclang*.so*` glob), the library bindgen
//! loads is not. `old_glob_fails_the_guard` runs the same check against a copy of the script
//! whose detection is that old glob and asserts the check reports it.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/setup.sh");

/// Packages the workspace needs on the machine, listed here independently of the script.
const NEEDED: &[&str] = &[
    "pkg-config",
    "gcc",
    "libc6-dev",
    "make",
    "binutils",
    "libibverbs-dev",
    "librdmacm-dev",
    "ibverbs-utils",
    "libfabric-bin",
    "iproute2",
    "strace",
    "python3",
];

const LIBCLANG_PACKAGE: &str = "libclang-14-dev";

/// A fake machine: a `bin/` with `dpkg-query`, `apt-get`, `sudo` and `rustup`, a database
/// of installed packages, an apt log, and a file-system root for the libclang lookup.
struct FakeMachine {
    dir: PathBuf,
}

impl FakeMachine {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("efa-setup-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::create_dir_all(dir.join("root")).unwrap();
        fs::write(dir.join("installed"), "").unwrap();
        fs::write(dir.join("apt.log"), "").unwrap();
        let m = FakeMachine { dir };
        // dpkg-query -W -f='${Status}\n' PKG: answers from the database.
        m.tool(
            "dpkg-query",
            r#"pkg="${@: -1}"
if grep -qx -- "$pkg" "$FAKE/installed"; then echo "install ok installed"; exit 0; fi
echo "dpkg-query: no packages found matching $pkg" >&2; exit 1"#,
        );
        // apt-get update | install -y ... PKG: logs, and "installs" what a package brings.
        m.tool(
            "apt-get",
            r#"echo "$*" >> "$FAKE/apt.log"
[ "$1" = install ] || exit 0
pkg="${@: -1}"
echo "$pkg" >> "$FAKE/installed"
case "$pkg" in
  libclang-14-dev)
    lib="$SETUP_ROOT/usr/lib/llvm-14/lib"
    mkdir -p "$lib/clang/14.0.6/include"
    : > "$lib/libclang-14.so.1"; : > "$lib/libclang.so.1"
    : > "$lib/clang/14.0.6/include/stddef.h" ;;
esac"#,
        );
        m.tool("sudo", r#"exec "$@""#);
        m.tool(
            "dpkg",
            r#"[ "$1" = --print-foreign-architectures ] && echo arm64; exit 0"#,
        );
        m.tool("rustup", r#"echo "aarch64-unknown-linux-gnu""#);
        m
    }

    fn tool(&self, name: &str, body: &str) {
        let path = self.dir.join("bin").join(name);
        fs::write(&path, format!("#!/usr/bin/env bash\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn install(&self, packages: &[&str]) {
        let mut db = fs::read_to_string(self.dir.join("installed")).unwrap();
        for p in packages {
            db.push_str(p);
            db.push('\n');
        }
        fs::write(self.dir.join("installed"), db).unwrap();
    }

    fn touch(&self, rel: &str) {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "").unwrap();
    }

    /// `libclang-cpp14` (whose `libclang-cpp.so.14` the old glob mistook for libclang) and
    /// clang's builtin headers, but not the library bindgen loads: only the library check
    /// can tell that libclang is missing.
    fn with_libclang_cpp_only(self) -> Self {
        self.install(&["libclang-cpp14", "libclang-common-14-dev"]);
        self.touch("usr/lib/llvm-14/lib/libclang-cpp.so.14");
        self.touch("usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h");
        self
    }

    fn with_libclang(self) -> Self {
        self.install(&["libclang1-14", "libclang-common-14-dev", LIBCLANG_PACKAGE]);
        self.touch("usr/lib/llvm-14/lib/libclang-14.so.1");
        self.touch("usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h");
        self
    }

    /// Runs `script` sourced (as the project's scripts do), then prints LIBCLANG_PATH.
    fn run(&self, script: &Path) -> Run {
        self.run_with(script, &[])
    }

    /// [`FakeMachine::run`] with extra environment (the script's options).
    fn run_with(&self, script: &Path, env: &[(&str, &str)]) -> Run {
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(r#". "$1" && echo "LIBCLANG_PATH=$LIBCLANG_PATH""#)
            .arg("setup-test")
            .arg(script)
            .env("PATH", path)
            .env("FAKE", &self.dir)
            .env("SETUP_ROOT", self.root())
            .env_remove("SETUP_CROSS")
            .env_remove("SETUP_PROFILE")
            .env_remove("LIBCLANG_PATH")
            .envs(env.iter().copied())
            .output()
            .expect("run bash");
        let installs = fs::read_to_string(self.dir.join("apt.log"))
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("install "))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
            .collect();
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            installs,
        }
    }
}

impl Drop for FakeMachine {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
    installs: Vec<String>,
}

impl Run {
    fn libclang_path(&self) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix("LIBCLANG_PATH="))
    }
}

/// The packages the script owns: its `setup_packages=( ... )` array.
fn owned_packages(script: &str) -> Vec<String> {
    let start = script
        .find("setup_packages=(")
        .expect("setup_packages array")
        + 16;
    let end = start + script[start..].find("\n)").expect("end of array");
    script[start..end]
        .lines()
        .filter_map(|l| l.split('#').next().unwrap().split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The guard: on a machine with every package but libclang, and `libclang-cpp.so.14` on
/// disk, the script must install libclang and point LIBCLANG_PATH at the library it brought.
fn check_installs_missing_libclang(script: &Path, name: &str) -> Result<(), String> {
    let m = FakeMachine::new(name).with_libclang_cpp_only();
    let text = fs::read_to_string(script).unwrap();
    let owned = owned_packages(&text);
    m.install(&owned.iter().map(String::as_str).collect::<Vec<_>>());
    let run = m.run(script);
    if !run.ok {
        return Err(format!("script failed: {}", run.stderr));
    }
    if run.installs != [LIBCLANG_PACKAGE] {
        return Err(format!(
            "expected to install only {LIBCLANG_PACKAGE}, installed {:?}",
            run.installs
        ));
    }
    let want = m.root().join("usr/lib/llvm-14/lib");
    if run.libclang_path() != Some(want.to_str().unwrap()) {
        return Err(format!(
            "LIBCLANG_PATH is {:?}, want {}",
            run.libclang_path(),
            want.display()
        ));
    }
    let lib = Path::new(run.libclang_path().unwrap());
    let loadable = fs::read_dir(lib)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .any(|f| f.starts_with("libclang.so") || f.starts_with("libclang-14.so"));
    if !loadable {
        return Err("LIBCLANG_PATH holds no libclang.so* / libclang-14.so*".into());
    }
    Ok(())
}

#[test]
fn libclang_cpp_alone_is_not_libclang() {
    check_installs_missing_libclang(Path::new(SCRIPT), "guard").unwrap();
}

#[test]
fn old_glob_fails_the_guard() {
    let text = fs::read_to_string(SCRIPT).unwrap();
    let start = text
        .find("setup_libclang_dir() {")
        .expect("detection function");
    let end = start + text[start..].find("\n}\n").expect("end of function") + 3;
    let broken = format!(
        "{}{}{}",
        &text[..start],
        r#"setup_libclang_dir() {
  local root=${SETUP_ROOT:-}
  if ls "$root"/usr/lib/llvm-14/lib/libclang*.so* >/dev/null 2>&1; then echo "$root/usr/lib/llvm-14/lib"; return 0; fi
  return 1
}
"#,
        &text[end..]
    );
    let dir = std::env::temp_dir().join(format!("efa-setup-{}-broken", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let script = dir.join("setup.sh");
    fs::write(&script, broken).unwrap();
    let verdict = check_installs_missing_libclang(&script, "old-glob");
    let _ = fs::remove_dir_all(&dir);
    let err = verdict.expect_err("the old glob must fail the guard");
    assert!(err.contains("expected to install only"), "{err}");
}

#[test]
fn nothing_missing_means_no_apt_and_no_output() {
    let m = FakeMachine::new("complete").with_libclang();
    let text = fs::read_to_string(SCRIPT).unwrap();
    m.install(
        &owned_packages(&text)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let run = m.run(Path::new(SCRIPT));
    assert!(run.ok, "{}", run.stderr);
    assert!(run.installs.is_empty(), "installed {:?}", run.installs);
    assert_eq!(run.stderr, "", "prints nothing when nothing is missing");
    let lib = m.root().join("usr/lib/llvm-14/lib");
    assert_eq!(run.libclang_path(), Some(lib.to_str().unwrap()));
    let apt = fs::read_to_string(m.dir.join("apt.log")).unwrap();
    assert_eq!(apt, "", "not even apt-get update");
}

#[test]
fn each_owned_package_is_installed_when_absent() {
    let text = fs::read_to_string(SCRIPT).unwrap();
    let owned = owned_packages(&text);
    let owned_set: BTreeSet<&str> = owned.iter().map(String::as_str).collect();
    for p in NEEDED {
        assert!(owned_set.contains(p), "setup.sh does not own {p}");
    }
    for absent in &owned {
        let m = FakeMachine::new(&format!("without-{absent}")).with_libclang();
        let others: Vec<&str> = owned
            .iter()
            .map(String::as_str)
            .filter(|p| p != absent)
            .collect();
        m.install(&others);
        let run = m.run(Path::new(SCRIPT));
        assert!(run.ok, "{absent}: {}", run.stderr);
        assert_eq!(run.installs, [absent.as_str()], "{absent}");
        assert_eq!(
            run.stderr.trim_end(),
            format!("setup: installing {absent}"),
            "one line per installed package"
        );
    }
}

#[test]
fn libclang_without_clang_headers_is_incomplete() {
    let m = FakeMachine::new("no-headers");
    let text = fs::read_to_string(SCRIPT).unwrap();
    m.install(
        &owned_packages(&text)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    m.install(&["libclang1-14"]);
    m.touch("usr/lib/llvm-14/lib/libclang.so.1");
    let run = m.run(Path::new(SCRIPT));
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.installs, [LIBCLANG_PACKAGE]);
}

#[test]
fn a_failed_install_stops_with_the_package_named() {
    let m = FakeMachine::new("apt-fails").with_libclang();
    m.tool(
        "apt-get",
        r#"[ "$1" = install ] && { echo "E: Unable to locate package" >&2; exit 100; }; exit 0"#,
    );
    let run = m.run(Path::new(SCRIPT));
    assert!(!run.ok, "must fail");
    assert!(
        run.stderr.contains("setup: could not install pkg-config"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("Unable to locate package"),
        "apt's reason is shown"
    );
}

#[test]
fn valgrind_is_installed_only_when_profiling_is_asked_for() {
    let text = fs::read_to_string(SCRIPT).unwrap();
    let owned = owned_packages(&text);
    let owned: Vec<&str> = owned.iter().map(String::as_str).collect();
    let m = FakeMachine::new("profile").with_libclang();
    m.install(&owned);
    let plain = m.run(Path::new(SCRIPT));
    assert!(plain.ok, "{}", plain.stderr);
    assert!(plain.installs.is_empty(), "{:?}", plain.installs);
    let profiling = m.run_with(Path::new(SCRIPT), &[("SETUP_PROFILE", "1")]);
    assert!(profiling.ok, "{}", profiling.stderr);
    assert_eq!(profiling.installs, ["valgrind"]);
    assert_eq!(profiling.stderr.trim_end(), "setup: installing valgrind");
}
