//! Decides whether tests run on the software device and, if so, exposes efa-sim's
//! shared object as `libibverbs.so.1` and `libefa.so.1` in a directory that cargo
//! puts on the dynamic library path of tests, benches, examples and doctests.
//!
//! `EFA_SIM=1` forces the software device, `EFA_SIM=0` forces the real rdma-core;
//! unset, the software device is used only when no EFA device is present.
//!
//! efa-sim-gpu's cdylib is exposed as `libcuda.so.1` (in a directory of its own) unless
//! `EFA_SIM_GPU=0`, even on a GPU machine: tests that need the real driver open it by path
//! (efa-cuda's GPU tests do), so the software GPU's tests run everywhere.
use std::path::{Path, PathBuf};

fn real_efa_absent() -> bool {
    let Ok(entries) = std::fs::read_dir("/sys/class/infiniband") else {
        return true;
    };
    !entries.flatten().any(|e| {
        let driver = e.path().join("device/driver");
        std::fs::read_link(driver)
            .ok()
            .and_then(|p| p.file_name().map(|n| n == "efa"))
            .unwrap_or(false)
    })
}

fn flag(name: &str, default: impl FnOnce() -> bool) -> bool {
    match std::env::var(name).as_deref() {
        Ok("1") | Ok("on") | Ok("yes") | Ok("true") => true,
        Ok("0") | Ok("off") | Ok("no") | Ok("false") => false,
        Ok(other) if !other.is_empty() => {
            panic!("{name} must be 1 (software device) or 0 (real one), got {other:?}")
        }
        _ => default(),
    }
}

/// OUT_DIR = target/<profile>/build/<pkg>-<hash>/out; cdylibs land in target/<profile>/deps.
fn deps_dir(out: &Path) -> PathBuf {
    out.ancestors().nth(3).expect("OUT_DIR layout").join("deps")
}

fn select_gpu(out: &Path) {
    println!("cargo:rerun-if-env-changed=EFA_SIM_GPU");
    let use_sim = flag("EFA_SIM_GPU", || true);
    println!(
        "cargo:rustc-env=EFA_SIM_GPU_SELECTED={}",
        if use_sim { "1" } else { "0" }
    );
    if !use_sim {
        println!("cargo:rustc-env=EFA_SIM_GPU_LIB_DIR=");
        return;
    }
    let so = deps_dir(out).join("libefa_sim_gpu.so");
    let dir = out.join("efa-sim-gpu-lib");
    std::fs::create_dir_all(&dir).unwrap();
    link(&so, &dir.join("libcuda.so.1"));
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-env=EFA_SIM_GPU_LIB_DIR={}", dir.display());
}

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    select_gpu(&out);
    println!("cargo:rerun-if-env-changed=EFA_SIM");
    println!("cargo:rerun-if-changed=build.rs");
    let use_sim = flag("EFA_SIM", real_efa_absent);
    println!(
        "cargo:rustc-env=EFA_SIM_SELECTED={}",
        if use_sim { "1" } else { "0" }
    );
    if !use_sim {
        println!("cargo:rustc-env=EFA_SIM_LIB_DIR=");
        return;
    }
    let so = deps_dir(&out).join("libefa_sim.so");
    let dir = out.join("efa-sim-lib");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libibverbs.so.1", "libefa.so.1"] {
        link(&so, &dir.join(name));
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-env=EFA_SIM_LIB_DIR={}", dir.display());
}

fn link(target: &Path, at: &Path) {
    let _ = std::fs::remove_file(at);
    std::os::unix::fs::symlink(target, at).unwrap();
}
