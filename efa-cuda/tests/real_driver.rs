//! NVIDIA's real user-space driver, on a machine without a GPU: Debian bookworm non-free
//! `libcuda1` (535.x), fetched by `scripts/fetch-libcuda1.sh` into the target directory
//! (private apt lists, `dpkg-deb -x`, nothing installed). Shows that every entry point this
//! crate resolves exists under that name in NVIDIA's library, that the legacy names are
//! different functions (the `_v2` trap), that the built-in error table agrees with
//! `cuGetErrorName`, and that `cuInit` reporting no device is `Error::NoDevice`.
//! Prints "skipped: <reason>" when the package cannot be fetched.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;

use efa_cuda::{Driver, Error, CU_RESULT_NAMES};

fn fetch() -> Result<PathBuf, String> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err("the bookworm libcuda1 package used here is for x86_64".into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-libcuda1.sh");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libcuda1");
    let run = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !run.status.success() {
        return Err(String::from_utf8_lossy(&run.stderr).trim().to_owned());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&run.stdout).trim()))
}

fn nvidia_nodes() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/dev") else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("nvidia"))
        })
        .collect()
}

#[test]
fn nvidia_driver_without_gpu() {
    let lib = match fetch() {
        Ok(lib) => lib,
        Err(reason) => {
            println!("skipped: cannot fetch Debian's libcuda1: {reason}");
            return;
        }
    };
    let nodes_before = nvidia_nodes();
    let result = std::panic::catch_unwind(|| check(&lib));
    // As root, cuInit creates /dev/nvidiactl; leave /dev as it was.
    for node in nvidia_nodes() {
        if !nodes_before.contains(&node) {
            let _ = std::fs::remove_file(&node);
        }
    }
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

fn check(lib: &Path) {
    let d = Driver::open(lib.to_str().unwrap()).expect("NVIDIA's libcuda.so.1 loads");
    assert_eq!(
        d.missing_entry_points(),
        Vec::<&str>::new(),
        "entry points efa-cuda resolves that NVIDIA's driver lacks"
    );
    assert_eq!(
        d.version().unwrap() / 10,
        1202,
        "bookworm ships the 535 (CUDA 12.2) driver"
    );

    // The _v2 trap: the legacy names are exported too, as other functions.
    let path = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: the library is loaded already (Driver::open); RTLD_NOLOAD returns its handle.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!h.is_null());
    let sym = |n: &str| {
        let n = CString::new(n).unwrap();
        // SAFETY: live handle, NUL-terminated name.
        unsafe { libc::dlsym(h, n.as_ptr()) }
    };
    for v2 in Driver::entry_point_names()
        .iter()
        .filter(|n| n.ends_with("_v2"))
    {
        let legacy = v2.trim_end_matches("_v2");
        assert!(!sym(legacy).is_null(), "{legacy} exported");
        assert_ne!(
            sym(legacy),
            sym(v2),
            "{legacy} and {v2} are different functions"
        );
    }

    // Error names: every code NVIDIA's 535 driver names, the built-in table names alike.
    let mut agreed = 0;
    for &(code, name) in CU_RESULT_NAMES {
        if let Some(nv) = d.error_name(code) {
            assert_eq!(nv, name, "CUresult {code}");
            agreed += 1;
        }
    }
    assert!(agreed >= 90, "only {agreed} codes named by the driver");
    assert_eq!(d.error_name(12345), None);

    // No GPU here: cuInit says CUDA_ERROR_NO_DEVICE, and everything that needs a device
    // reports it typed.
    assert_eq!(d.init(), Err(Error::NoDevice));
    assert_eq!(d.device_count().unwrap_err(), Error::NoDevice);
    assert_eq!(d.device(0).unwrap_err(), Error::NoDevice);
    assert_eq!(d.current_context().unwrap_err(), Error::NoDevice);
}
