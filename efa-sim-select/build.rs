//! Decides whether tests run on the software device and, if so, exposes efa-sim's
//! shared object as `libibverbs.so.1` and `libefa.so.1` in a directory that cargo
//! puts on the dynamic library path of tests, benches, examples and doctests.
//!
//! `EFA_SIM=1` forces the software device, `EFA_SIM=0` forces the real rdma-core;
//! unset, the software device is used only when no EFA device is present.
use std::path::{Path, PathBuf};

fn real_efa_present() -> bool {
    let Ok(entries) = std::fs::read_dir("/sys/class/infiniband") else {
        return false;
    };
    entries.flatten().any(|e| {
        let driver = e.path().join("device/driver");
        std::fs::read_link(driver)
            .ok()
            .and_then(|p| p.file_name().map(|n| n == "efa"))
            .unwrap_or(false)
    })
}

fn main() {
    println!("cargo:rerun-if-env-changed=EFA_SIM");
    println!("cargo:rerun-if-changed=build.rs");
    let use_sim = match std::env::var("EFA_SIM").as_deref() {
        Ok("1") | Ok("on") | Ok("yes") | Ok("true") => true,
        Ok("0") | Ok("off") | Ok("no") | Ok("false") => false,
        Ok(other) if !other.is_empty() => {
            panic!("EFA_SIM must be 1 (software device) or 0 (real rdma-core), got {other:?}")
        }
        _ => !real_efa_present(),
    };
    println!(
        "cargo:rustc-env=EFA_SIM_SELECTED={}",
        if use_sim { "1" } else { "0" }
    );
    if !use_sim {
        println!("cargo:rustc-env=EFA_SIM_LIB_DIR=");
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    // OUT_DIR = target/<profile>/build/<pkg>-<hash>/out; the cdylib lands in target/<profile>/deps.
    let profile_dir = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR layout")
        .to_path_buf();
    let so = profile_dir.join("deps").join("libefa_sim.so");
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
