//! How an installed `efa-sim` finds its library (`efa_sim::install`): the CLI copied out
//! of cargo's target directory writes the library it carries to the per-user cache,
//! prefers an install layout (`../lib/efa-sim/`) and `EFA_SIM_LIB`, survives a damaged
//! cache entry, concurrent first starts and several versions side by side.

mod support;

use efa_sim::install::{cache, CacheRoot, Lookup, Origin, LIBRARY_FILE, VERSION};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh directory under this test target's temp dir, with a `run/` that stands for
/// `$XDG_RUNTIME_DIR` (which exists on a real system).
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("install-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    dir
}

/// The cdylib cargo built for these tests: what the CLI embeds.
fn built_library() -> Vec<u8> {
    let so = support::lib_dir().join("libibverbs.so.1");
    std::fs::read(so).expect("read the built libefa_sim.so")
}

/// `<root>/bin/efa-sim`: the CLI alone, away from cargo's target directory (same file
/// system: CARGO_TARGET_TMPDIR is inside it).
fn copy_cli(root: &Path) -> PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("efa-sim");
    // A hard link, not a copy: a copy's write descriptor can leak into a child another
    // test thread is forking, and exec then fails with ETXTBSY.
    std::fs::hard_link(env!("CARGO_BIN_EXE_efa-sim"), &exe).unwrap();
    exe
}

/// `exe` with a clean environment: caches under `root`, no override.
fn cli(exe: &Path, root: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("XDG_CACHE_HOME", root.join("cache"))
        .env("HOME", root.join("home"))
        .env("XDG_RUNTIME_DIR", root.join("run"))
        .env_remove("EFA_SIM_LIB")
        .env_remove("EFA_SIM_PROFILE")
        .env_remove("EFA_SIM_DEVICES")
        .env_remove("SYSFS_PATH");
    c
}

fn output(cmd: &mut Command) -> Output {
    support::run_with_timeout(cmd, 60)
}

fn ok_stdout(cmd: &mut Command) -> String {
    let out = output(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The library `efa-sim env` selects: the target of the `libibverbs.so.1` link in the
/// directory its LD_LIBRARY_PATH line names.
fn selected_library(env_output: &str) -> PathBuf {
    let line = env_output
        .lines()
        .find(|l| l.starts_with("export LD_LIBRARY_PATH="))
        .unwrap_or_else(|| panic!("no LD_LIBRARY_PATH line:\n{env_output}"));
    let dir = line
        .split('\'')
        .nth(1)
        .unwrap_or_else(|| panic!("unquoted: {line}"));
    std::fs::read_link(Path::new(dir).join("libibverbs.so.1")).expect("selection link")
}

fn is_build_id_entry(name: &str) -> bool {
    let id = name.strip_prefix(&format!("{VERSION}-")).unwrap_or("");
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn a_cli_outside_the_target_directory_writes_its_library_to_the_cache_once() {
    let root = scratch("cache");
    let exe = copy_cli(&root);
    let env = ok_stdout(cli(&exe, &root).arg("env"));
    let so = selected_library(&env);
    let entry = so.parent().unwrap();
    assert_eq!(entry.parent().unwrap(), root.join("cache/efa-sim"), "{env}");
    let name = entry.file_name().unwrap().to_str().unwrap();
    assert!(
        is_build_id_entry(name),
        "entry named by version and build-id: {name}"
    );
    assert_eq!(std::fs::read(&so).unwrap(), built_library(), "cached bytes");
    let before = std::fs::metadata(&so).unwrap();
    // A program really runs on it, and the second start reuses the file.
    let devices = ok_stdout(cli(&exe, &root).args(["run", "--", "ibv_devices"]));
    assert!(
        devices.contains("efa_0") && devices.contains("efa_1"),
        "{devices}"
    );
    let after = std::fs::metadata(&so).unwrap();
    assert_eq!((before.ino(), before.mtime()), (after.ino(), after.mtime()));
    let leftovers: Vec<_> = std::fs::read_dir(entry)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn a_damaged_cache_entry_is_rewritten() {
    let root = scratch("damaged");
    let exe = copy_cli(&root);
    let so = selected_library(&ok_stdout(cli(&exe, &root).arg("env")));
    let good = std::fs::read(&so).unwrap();
    std::fs::write(&so, &good[..good.len() / 2]).unwrap();
    assert_eq!(
        selected_library(&ok_stdout(cli(&exe, &root).arg("env"))),
        so
    );
    assert_eq!(std::fs::read(&so).unwrap(), good);
}

#[test]
fn concurrent_first_starts_all_get_a_complete_library() {
    let root = scratch("concurrent");
    let exe = copy_cli(&root);
    let children: Vec<_> = (0..8)
        .map(|_| {
            cli(&exe, &root)
                .arg("env")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let want = built_library();
    let mut selected = Vec::new();
    for out in &outs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        selected.push(selected_library(&stdout));
    }
    selected.dedup();
    assert_eq!(selected.len(), 1, "one entry for one library: {selected:?}");
    assert_eq!(std::fs::read(&selected[0]).unwrap(), want);
}

#[test]
fn concurrent_stores_from_threads_leave_one_complete_file() {
    let root = scratch("threads");
    let lib = built_library();
    let barrier = std::sync::Barrier::new(8);
    let paths: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    cache::store(&root, VERSION, &lib).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]), "{paths:?}");
    assert_eq!(std::fs::read(&paths[0]).unwrap(), lib);
    let names: Vec<String> = std::fs::read_dir(paths[0].parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [LIBRARY_FILE], "only the library remains");
}

#[test]
fn several_versions_and_builds_live_side_by_side() {
    let root = scratch("versions");
    let lib = built_library();
    // A library without a build-id gets a content hash name instead.
    let other = b"\x7fELF not a real library, no build-id".to_vec();
    let a = cache::store(&root, "0.1.0", &lib).unwrap();
    let b = cache::store(&root, "0.2.0", &lib).unwrap();
    let c = cache::store(&root, "0.2.0", &other).unwrap();
    assert_ne!(a, b);
    assert_ne!(b, c);
    assert!(
        c.parent().unwrap().to_string_lossy().contains("0.2.0-fnv"),
        "{c:?}"
    );
    for (p, want) in [(&a, &lib), (&b, &lib), (&c, &other)] {
        assert_eq!(&std::fs::read(p).unwrap(), want, "{p:?}");
    }
    assert_eq!(cache::store(&root, "0.1.0", &lib).unwrap(), a);
}

#[test]
fn an_install_layout_next_to_the_cli_is_used_without_a_cache() {
    let root = scratch("layout");
    let exe = copy_cli(&root);
    let lib_dir = root.join("lib/efa-sim");
    std::fs::create_dir_all(&lib_dir).unwrap();
    std::fs::write(lib_dir.join(LIBRARY_FILE), built_library()).unwrap();
    let env = ok_stdout(cli(&exe, &root).arg("env"));
    assert_eq!(
        selected_library(&env),
        lib_dir.join(LIBRARY_FILE).canonicalize().unwrap()
    );
    assert!(!root.join("cache").exists(), "no cache written");
    let devices = ok_stdout(cli(&exe, &root).args(["run", "--", "ibv_devices"]));
    assert!(devices.contains("efa_1"), "{devices}");
}

#[test]
fn efa_sim_lib_overrides_and_a_missing_one_is_an_error() {
    let root = scratch("override");
    let exe = copy_cli(&root);
    let so = root.join("custom.so");
    std::fs::write(&so, built_library()).unwrap();
    let env = ok_stdout(cli(&exe, &root).arg("env").env("EFA_SIM_LIB", &so));
    assert_eq!(selected_library(&env), so.canonicalize().unwrap());
    let missing = root.join("nowhere.so");
    let out = output(cli(&exe, &root).arg("env").env("EFA_SIM_LIB", &missing));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("EFA_SIM_LIB=") && err.contains("nowhere.so"),
        "{err}"
    );
}

#[test]
fn an_unusable_user_cache_falls_back_to_a_private_runtime_directory() {
    let root = scratch("fallback");
    let exe = copy_cli(&root);
    // XDG_CACHE_HOME below a regular file cannot be created (even by root).
    std::fs::write(root.join("file"), b"").unwrap();
    let env = ok_stdout(
        cli(&exe, &root)
            .arg("env")
            .env("XDG_CACHE_HOME", root.join("file/c")),
    );
    let so = selected_library(&env);
    let user_dir = root
        .join("run")
        .join(format!("efa-sim-{}", efa_sim::install::current_uid()));
    assert!(so.starts_with(user_dir.join("cache")), "{so:?}");
    assert_eq!(
        std::fs::metadata(user_dir.join("cache")).unwrap().mode() & 0o777,
        0o700
    );
    assert_eq!(std::fs::read(&so).unwrap(), built_library());
}

#[test]
fn a_runtime_directory_others_could_write_is_tightened_and_a_symlinked_one_refused() {
    let root = scratch("refused");
    let exe = copy_cli(&root);
    std::fs::write(root.join("file"), b"").unwrap();
    let broken_cache = root.join("file/c");
    let user_dir = root
        .join("run")
        .join(format!("efa-sim-{}", efa_sim::install::current_uid()));
    // Ours but group/world-writable (a umask of 002, or worse): tightened, then used.
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::set_permissions(&user_dir, PermissionsExt::from_mode(0o777)).unwrap();
    let env = ok_stdout(
        cli(&exe, &root)
            .arg("env")
            .env("XDG_CACHE_HOME", &broken_cache),
    );
    assert!(selected_library(&env).starts_with(&user_dir), "{env}");
    assert_eq!(std::fs::metadata(&user_dir).unwrap().mode() & 0o777, 0o755);
    // A symlink in its place (someone else's directory, say): refused.
    std::fs::remove_dir_all(&user_dir).unwrap();
    std::fs::create_dir_all(root.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(root.join("elsewhere"), &user_dir).unwrap();
    let out = output(
        cli(&exe, &root)
            .arg("env")
            .env("XDG_CACHE_HOME", &broken_cache),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot write libefa_sim.so to a cache directory"),
        "{err}"
    );
    assert!(err.contains("is not a directory owned by uid"), "{err}");
    assert!(
        !root.join("elsewhere/cache").exists(),
        "nothing written through the link"
    );
}

#[test]
fn the_built_cli_uses_the_identical_library_beside_it() {
    let root = scratch("beside");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_efa-sim"));
    let env = ok_stdout(cli(&exe, &root).arg("env"));
    let so = selected_library(&env);
    assert!(so.starts_with(exe.parent().unwrap()), "{so:?}");
    assert_eq!(std::fs::read(&so).unwrap(), built_library());
    assert!(!root.join("cache").exists(), "no cache written");
}

#[test]
fn lookup_without_an_embedded_library_takes_the_newest_file_beside_the_executable() {
    let root = scratch("no-embedded");
    std::fs::create_dir_all(root.join("deps")).unwrap();
    let exe = root.join("efa-sim");
    let lookup = Lookup::new(exe.clone(), None);
    match lookup.locate() {
        Err(efa_sim::install::LocateError::NotFound(paths)) => assert_eq!(paths.len(), 3),
        other => panic!("expected NotFound, got {other:?}"),
    }
    std::fs::write(root.join(LIBRARY_FILE), b"old").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(root.join("deps").join(LIBRARY_FILE), b"new").unwrap();
    let found = lookup.locate().unwrap();
    assert_eq!(found.origin, Origin::BesideExecutable);
    assert_eq!(std::fs::read(found.path).unwrap(), b"new");
}

#[test]
fn a_broken_embedded_library_is_a_typed_error() {
    let root = scratch("broken");
    let mut lookup = Lookup::new(root.join("bin/efa-sim"), Some(b"not an ELF file"));
    lookup.cache_roots.push(CacheRoot {
        dir: root.join("cache"),
        private: false,
    });
    match lookup.locate() {
        Err(efa_sim::install::LocateError::BadEmbedded(e)) => {
            assert_eq!(e, efa_sim::install::elf::ElfError::NotElf)
        }
        other => panic!("expected BadEmbedded, got {other:?}"),
    }
    assert!(!root.join("cache").exists());
}
