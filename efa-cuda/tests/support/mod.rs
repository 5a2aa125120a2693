//! Helpers shared by efa-cuda's tests: the software GPU's driver, its test controls, and
//! "old driver" copies of it with entry points removed.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use efa_cuda::Driver;

/// The software GPU's `libcuda.so.1` (efa-sim-select puts it on the library path).
pub fn sim_library() -> PathBuf {
    if !efa_sim_select::SOFTWARE_GPU {
        panic!("these tests run on efa-sim-gpu, which EFA_SIM_GPU=0 took off the library path");
    }
    PathBuf::from(efa_sim_select::GPU_LIB_DIR).join("libcuda.so.1")
}

/// The software GPU as efa-cuda's process-wide driver (`libcuda.so.1` by name), checked
/// to really be efa-sim-gpu.
pub fn sim() -> &'static Driver {
    let lib = sim_library();
    let d = Driver::get().expect("libcuda.so.1 loads");
    let name = d.device(0).expect("device 0").name().expect("name");
    assert!(
        name.starts_with(efa_sim_select::SIM_GPU_NAME_PREFIX),
        "libcuda.so.1 is {name:?}, not {}",
        lib.display()
    );
    d
}

/// Tests that change the software GPU's global controls (or count its flushes) take this.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A symbol of the software GPU's library (the same library `Driver::get` loaded).
pub fn sim_symbol(name: &str) -> *mut c_void {
    let lib = CString::new(sim_library().to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path; the library is already loaded, so this only returns
    // its handle (RTLD_NOLOAD).
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!h.is_null(), "efa-sim-gpu is loaded");
    let sym = CString::new(name).unwrap();
    // SAFETY: live handle, NUL-terminated name.
    let p = unsafe { libc::dlsym(h, sym.as_ptr()) };
    assert!(!p.is_null(), "efa-sim-gpu exports {name}");
    p
}

/// `efaSimGpuControl(key, value)`.
pub fn control(key: &str, value: i64) {
    type F = unsafe extern "C" fn(*const c_char, i64) -> c_int;
    // SAFETY: the library documents this signature.
    let f: F = unsafe { std::mem::transmute(sim_symbol("efaSimGpuControl")) };
    let k = CString::new(key).unwrap();
    // SAFETY: NUL-terminated key.
    let rc = unsafe { f(k.as_ptr(), value) };
    assert_eq!(rc, 0, "efaSimGpuControl({key}, {value})");
}

/// `efaSimGpuFlushCount(device)`: (to owner, to all devices).
pub fn flush_count(device: i32) -> (u64, u64) {
    type F = unsafe extern "C" fn(c_int, *mut u64, *mut u64) -> c_int;
    // SAFETY: the library documents this signature.
    let f: F = unsafe { std::mem::transmute(sim_symbol("efaSimGpuFlushCount")) };
    let (mut a, mut b) = (0, 0);
    // SAFETY: valid out pointers.
    assert_eq!(unsafe { f(device, &mut a, &mut b) }, 0);
    (a, b)
}

/// `EfaSimGpuDmaBuf`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaBufInfo {
    pub base: u64,
    pub size: u64,
    pub device: i32,
    /// Bit 0: the export refuses mmap.
    pub flags: i32,
}

/// `efaSimGpuDmaBufInfo(fd)`: the export behind `fd`, or the CUresult.
pub fn dmabuf_info(fd: c_int) -> Result<DmaBufInfo, c_int> {
    type F = unsafe extern "C" fn(c_int, *mut DmaBufInfo) -> c_int;
    // SAFETY: the library documents this signature.
    let f: F = unsafe { std::mem::transmute(sim_symbol("efaSimGpuDmaBufInfo")) };
    let mut info = DmaBufInfo::default();
    // SAFETY: valid out pointer.
    match unsafe { f(fd, &mut info) } {
        0 => Ok(info),
        rc => Err(rc),
    }
}

/// A copy of the software GPU's library whose dynamic symbol table lacks `hidden` (each
/// name's first letter overwritten in `.dynstr`, so the loader no longer finds it under
/// that name): an "old driver" for the loader's missing-entry-point paths.
pub fn old_driver(tag: &str, hidden: &[&str]) -> PathBuf {
    let mut bytes = std::fs::read(sim_library()).expect("read efa-sim-gpu");
    for name in hidden {
        let needle = format!("\0{name}\0").into_bytes();
        let mut found = 0;
        let mut i = 0;
        while i + needle.len() <= bytes.len() {
            if bytes[i..i + needle.len()] == needle[..] {
                bytes[i + 1] = b'X';
                found += 1;
                i += needle.len();
            } else {
                i += 1;
            }
        }
        assert!(found > 0, "{name} is in efa-sim-gpu's string tables");
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("old-driver-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("libcuda.so.1");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The CUresult of an `efa_cuda::Error::Cuda`, for asserts.
pub fn cu_code(e: &efa_cuda::Error) -> Option<i32> {
    match e {
        efa_cuda::Error::Cuda(c) => Some(c.code),
        _ => None,
    }
}

/// Runs `body` in a child process of this test binary (only `test_name`, with `env` added),
/// so a test can have its own efa-sim or software-GPU configuration: the parent starts the
/// child and fails with its output if it failed; the child runs `body`.
pub fn in_child(test_name: &str, env: &[(&str, &str)], body: impl FnOnce()) {
    const MARK: &str = "EFA_CUDA_TEST_CHILD";
    if std::env::var(MARK).as_deref() == Ok(test_name) {
        for (k, v) in env {
            assert_eq!(std::env::var(k).as_deref(), Ok(*v), "child environment");
        }
        body();
        return;
    }
    let out = child(test_name)
        .env(MARK, test_name)
        .envs(env.iter().copied())
        .output()
        .expect("start the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("1 passed"), "child ran no test:\n{stdout}");
}

/// This test binary, set to run exactly `test_name` (ignored or not) on one thread.
pub fn child(test_name: &str) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        test_name,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    c
}
