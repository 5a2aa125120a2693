//! Driver loading: missing library, not a driver, old driver (entry points absent),
//! error naming, versioned names.
mod support;

use efa_cuda::*;

#[test]
fn missing_library_is_no_driver_with_the_loader_message() {
    let e = Driver::open("/nonexistent/dir/libcuda.so.1").unwrap_err();
    match &e {
        Error::NoDriver { library, reason } => {
            assert_eq!(library, "/nonexistent/dir/libcuda.so.1");
            assert!(reason.contains("No such file"), "{reason}");
        }
        other => panic!("expected NoDriver, got {other:?}"),
    }
    assert!(e
        .to_string()
        .starts_with("no CUDA driver: cannot load /nonexistent"));
}

#[test]
fn a_library_without_cu_init_is_not_a_driver() {
    // efa-sim's libibverbs.so.1 is a real shared object with no CUDA symbols.
    let lib = format!("{}/libibverbs.so.1", efa_sim_select::LIB_DIR);
    match Driver::open(&lib).unwrap_err() {
        Error::NoDriver { reason, .. } => assert!(reason.contains("cuInit"), "{reason}"),
        other => panic!("expected NoDriver, got {other:?}"),
    }
}

#[test]
fn process_wide_driver_is_the_software_gpu_with_every_entry_point() {
    let d = support::sim();
    assert_eq!(d.library(), Driver::DEFAULT_LIBRARY);
    assert_eq!(d.missing_entry_points(), Vec::<&str>::new());
    assert_eq!(d.version().unwrap(), 12080);
    assert_eq!(d.device_count().unwrap(), 2);
}

#[test]
fn entry_points_are_the_versioned_names() {
    let names = Driver::entry_point_names();
    for versioned in [
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemcpyHtoD_v2",
        "cuMemcpyDtoH_v2",
        "cuMemGetAddressRange_v2",
        "cuCtxPushCurrent_v2",
        "cuCtxPopCurrent_v2",
        "cuDevicePrimaryCtxRelease_v2",
    ] {
        assert!(names.contains(&versioned), "{versioned}");
        let legacy = versioned.trim_end_matches("_v2");
        assert!(!names.contains(&legacy), "binds legacy {legacy}");
    }
}

#[test]
fn legacy_names_on_the_software_gpu_fail_visibly() {
    support::sim();
    type Alloc = unsafe extern "C" fn(*mut u32, u32) -> i32;
    // SAFETY: efa-sim-gpu exports the legacy symbol with this signature.
    let legacy: Alloc = unsafe { std::mem::transmute(support::sim_symbol("cuMemAlloc")) };
    let mut p = 0u32;
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { legacy(&mut p, 4096) }, 801);
    assert_eq!(p, 0);
}

#[test]
fn old_driver_without_dmabuf_and_flush_names_the_missing_entry_point() {
    support::sim();
    let hidden = [
        "cuMemGetHandleForAddressRange",
        "cuFlushGPUDirectRDMAWrites",
    ];
    let path = support::old_driver("no-dmabuf-flush", &hidden);
    let old = Driver::open(path.to_str().unwrap()).unwrap();
    let mut missing = old.missing_entry_points();
    missing.sort();
    assert_eq!(
        missing,
        vec![
            "cuFlushGPUDirectRDMAWrites",
            "cuMemGetHandleForAddressRange"
        ]
    );

    // The rest works: it is a separate copy of the software GPU.
    let dev = old.device(0).unwrap();
    let mem = DeviceAlloc::from_host(&dev, &[7u8; 100]).unwrap();
    assert_eq!(mem.to_vec().unwrap(), vec![7u8; 100]);
    assert!(!dev.dmabuf_supported().unwrap());

    let e = export_dmabuf(&mem).unwrap_err();
    assert_eq!(
        e,
        Error::MissingEntryPoint {
            name: "cuMemGetHandleForAddressRange"
        }
    );
    assert_eq!(
        e.to_string(),
        "CUDA driver too old: it has no entry point cuMemGetHandleForAddressRange"
    );
    let _ctx = dev.make_current().unwrap();
    assert_eq!(
        old.flush_current_context(FlushScope::ToOwner).unwrap_err(),
        Error::MissingEntryPoint {
            name: "cuFlushGPUDirectRDMAWrites"
        }
    );
}

#[test]
fn old_driver_without_vmm_fails_vmm_allocation_by_name() {
    support::sim();
    let path = support::old_driver("no-vmm", &["cuMemCreate"]);
    let old = Driver::open(path.to_str().unwrap()).unwrap();
    let dev = old.device(0).unwrap();
    assert_eq!(
        VmmAllocation::new(&dev, 1 << 20).unwrap_err(),
        Error::MissingEntryPoint {
            name: "cuMemCreate"
        }
    );
}

#[test]
fn error_names_come_from_the_driver_and_the_builtin_table_agrees() {
    let d = support::sim();
    for code in [0, 1, 2, 3, 100, 101, 201, 400, 500, 700, 801, 999] {
        assert_eq!(d.error_name(code), builtin_name(code), "code {code}");
        assert!(d.error_name(code).is_some());
    }
    assert_eq!(
        d.error_string(100),
        Some("no CUDA-capable device is detected")
    );
    assert_eq!(d.error_name(12345), None);
}

#[test]
fn builtin_table_names_codes_when_the_driver_lacks_cu_get_error_name() {
    support::sim();
    let path = support::old_driver("no-error-name", &["cuGetErrorName"]);
    let old = Driver::open(path.to_str().unwrap()).unwrap();
    // efa-sim-gpu has no name for 702; the built-in table does.
    assert_eq!(old.error_name(702), Some("CUDA_ERROR_LAUNCH_TIMEOUT"));
    let dev = old.device(0).unwrap();
    let e = DeviceAlloc::new(&dev, 1 << 40).unwrap_err();
    match e {
        Error::Cuda(c) => {
            assert_eq!(
                (c.call, c.code, c.name),
                ("cuMemAlloc_v2", 2, Some("CUDA_ERROR_OUT_OF_MEMORY"))
            );
            assert_eq!(
                Error::Cuda(c).to_string(),
                "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)"
            );
        }
        other => panic!("expected a CUDA error, got {other:?}"),
    }
}

#[test]
fn no_device_is_a_typed_error() {
    // A child process with zero software devices: cuInit returns CUDA_ERROR_NO_DEVICE.
    if std::env::var_os("EFA_CUDA_TEST_CHILD").is_some() {
        let d = Driver::get().unwrap();
        assert_eq!(d.init(), Err(Error::NoDevice));
        assert_eq!(d.device(0).unwrap_err(), Error::NoDevice);
        assert_eq!(d.init(), Err(Error::NoDevice), "sticky");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "no_device_is_a_typed_error", "--nocapture"])
        .env("EFA_CUDA_TEST_CHILD", "1")
        .env("EFA_SIM_GPU_DEVICES", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
fn library_env_selects_the_process_wide_driver() {
    if std::env::var_os("EFA_CUDA_TEST_CHILD").is_some() {
        match Driver::get().unwrap_err() {
            Error::NoDriver { library, .. } => assert_eq!(library, "/nonexistent/libcuda.so.1"),
            other => panic!("expected NoDriver, got {other:?}"),
        }
        assert!(Device::get(0).is_err());
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "library_env_selects_the_process_wide_driver",
            "--nocapture",
        ])
        .env("EFA_CUDA_TEST_CHILD", "1")
        .env(LIBRARY_ENV, "/nonexistent/libcuda.so.1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}
