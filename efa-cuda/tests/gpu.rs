//! The same checks on a real NVIDIA GPU through NVIDIA's driver. Ignored by default; run
//! on a GPU machine with
//! `cargo test -p efa-cuda --test gpu -- --ignored --nocapture`
//! (`EFA_CUDA_REAL_LIBRARY=/path/libcuda.so.1` if the driver is not on the default path),
//! or from prepared binaries with `scripts/gpu-check.sh` (efa-cuda's README).
//! Registration and transfers run on efa-sim, which cannot map a real NVIDIA dma-buf (unless
//! the driver reports `DMA_BUF_MMAP_SUPPORTED`) and moves its bytes with the driver's copies
//! at the registered CUDA address instead (emulated DMA, see efa-sim's README): the same
//! transfers as `tests/transfers*.rs` on real CUDA memory.
//! Measured times are printed as `gpu-check: <what>: <microseconds> us` lines (printed,
//! never asserted: speed claims come from benchmarks).

mod support;
#[path = "support/transfers.rs"]
mod transfers;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use efa_cuda::*;
use efa_typestate::AccessFlags;
use transfers::{Checks, Gpus, Mem};

fn real_driver() -> &'static Driver {
    let candidates = [
        std::env::var("EFA_CUDA_REAL_LIBRARY").unwrap_or_default(),
        // Without the software GPU on the library path, the name finds the real one.
        if efa_sim_select::SOFTWARE_GPU {
            String::new()
        } else {
            "libcuda.so.1".into()
        },
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
        "/usr/lib/aarch64-linux-gnu/libcuda.so.1".into(),
        "/usr/lib64/libcuda.so.1".into(),
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1".into(),
    ];
    for c in candidates.iter().filter(|c| !c.is_empty()) {
        if let Ok(d) = Driver::open(c) {
            let name = d.device(0).and_then(|dev| dev.name()).expect("a GPU");
            assert!(
                !name.starts_with(efa_sim_select::SIM_GPU_NAME_PREFIX),
                "{c} is the software GPU"
            );
            println!("driver {c}: {name}, version {}", d.version().unwrap());
            return d;
        }
    }
    panic!("no NVIDIA driver found (set EFA_CUDA_REAL_LIBRARY)");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_alloc_and_vmm_copies() {
    let d = real_driver();
    let dev = d.device(0).unwrap();
    let data: Vec<u8> = (0..64 << 20).map(|i: usize| (i % 251) as u8).collect();
    let a = DeviceAlloc::from_host(&dev, &data).unwrap();
    assert_eq!(a.to_vec().unwrap(), data);
    let g = dev.vmm_granularity().unwrap();
    let mut v = VmmAllocation::with_chunk_size(&dev, 3 * g, g).unwrap();
    v.copy_from_host(g - 3, b"across").unwrap();
    let mut out = [0u8; 6];
    v.copy_to_host(g - 3, &mut out).unwrap();
    assert_eq!(&out, b"across");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_dmabuf_export_is_a_kernel_dmabuf() {
    let d = real_driver();
    let dev = d.device(0).unwrap();
    assert!(
        dev.dmabuf_supported().unwrap(),
        "driver reports no dma-buf support"
    );
    let a = DeviceAlloc::new(&dev, 1 << 20).unwrap();
    let g = dev.vmm_granularity().unwrap();
    let v = VmmAllocation::with_chunk_size(&dev, 2 * g, g).unwrap();
    for buf in [export_dmabuf(&a).unwrap(), export_dmabuf(&v).unwrap()] {
        let fd = buf.fd().as_raw_fd();
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        println!("export {:?} -> {}", buf.range(), link.display());
        assert!(
            link.to_string_lossy().contains("dmabuf"),
            "{}",
            link.display()
        );
        // SAFETY: plain queries on our fd.
        let (magic, size) = unsafe {
            let mut s: libc::statfs = std::mem::zeroed();
            assert_eq!(libc::fstatfs(fd, &mut s), 0);
            (s.f_type as u64, libc::lseek(fd, 0, libc::SEEK_END))
        };
        assert_eq!(magic, 0x444d_4142, "DMA_BUF_MAGIC");
        assert_eq!(size as u64, buf.range().export_len);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_flush_with_and_without_a_current_context() {
    let d = real_driver();
    let dev = d.device(0).unwrap();
    println!("flush support: {:?}", dev.flush_support().unwrap());
    std::thread::spawn(move || {
        assert_eq!(
            d.flush_current_context(FlushScope::ToOwner),
            Err(Error::NoContext {
                call: "cuFlushGPUDirectRDMAWrites"
            })
        );
        let t = Instant::now();
        let r = dev.flush_gpudirect_writes(FlushScope::ToOwner).unwrap();
        println!("flush to owner without a current context: {r:?}");
        report(
            "flush_gpudirect_writes, pushing the primary context",
            t.elapsed(),
            1,
        );
        let _ctx = dev.make_current().unwrap();
        for scope in [FlushScope::ToOwner, FlushScope::ToAllDevices] {
            let t = Instant::now();
            for _ in 0..1000 {
                d.flush_current_context(scope).unwrap();
            }
            report(
                &format!("cuFlushGPUDirectRDMAWrites {scope:?} (mean of 1000)"),
                t.elapsed(),
                1000,
            );
        }
        let t = Instant::now();
        for _ in 0..1000 {
            dev.flush_gpudirect_writes(FlushScope::ToOwner).unwrap();
        }
        report(
            "flush_gpudirect_writes ToOwner, context current (mean of 1000)",
            t.elapsed(),
            1000,
        );
    })
    .join()
    .unwrap();
}

/// Prints a measured time in the line format scripts/gpu-check.sh collects.
fn report(what: &str, elapsed: Duration, count: u32) {
    println!(
        "gpu-check: {what}: {:.1} us",
        elapsed.as_secs_f64() * 1e6 / f64::from(count)
    );
}

fn efa_pd_test(body: impl FnOnce(&efa_typestate::Pd<&efa_typestate::Context>)) {
    let ctx = efa_typestate::Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    let pd = ctx.alloc_pd().unwrap();
    body(&pd);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_registration_on_efa_sim() {
    let d = real_driver();
    let dev = d.device(0).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    efa_pd_test(|pd| {
        // cuMemAlloc memory, whole.
        let a = DeviceAlloc::new(&dev, 4 << 20).unwrap();
        let va = a.device_ptr();
        let t = Instant::now();
        let mr = register(pd, a, access).unwrap();
        report("register cuMemAlloc 4 MiB (first)", t.elapsed(), 1);
        assert_eq!(mr.path(), RegistrationPath::DmaBuf);
        assert_eq!(mr.sge(0, 8).unwrap().addr(), va);
        assert_eq!(mr.remote().addr(), va);
        let e = *mr.export().unwrap();
        assert_eq!((e.export_base, e.offset, e.iova), (va, 0, va));
        let t = Instant::now();
        let a = mr.close().map_err(|(_, e)| e).unwrap();
        report("deregister + close the export", t.elapsed(), 1);
        let t = Instant::now();
        let mut a = Some(a);
        for _ in 0..100 {
            let mr = register(pd, a.take().unwrap(), access).unwrap();
            a = Some(mr.close().map_err(|(_, e)| e).unwrap());
        }
        report(
            "register + close cuMemAlloc 4 MiB (mean of 100)",
            t.elapsed(),
            100,
        );

        // An unaligned interior range of it (export of the pages around it).
        let a = a.unwrap();
        // SAFETY: a sub-range of `a`, which outlives the registration.
        let raw = unsafe { RawDeviceMemory::new(d, a.device_ptr() + 1000, 3 << 20) }.unwrap();
        let mr = register(pd, raw, AccessFlags::LOCAL_WRITE).unwrap();
        let e = *mr.export().unwrap();
        let page = host_page_size();
        assert_eq!(e.export_base, a.device_ptr());
        assert_eq!(e.offset, 1000);
        assert_eq!(e.export_len, (1000 + (3u64 << 20)).div_ceil(page) * page);
        drop(mr);

        // VMM memory spanning three chunks, GPUDirect-capable.
        let g = dev.vmm_granularity().unwrap();
        let v = VmmAllocation::with_chunk_size(&dev, 3 * g, g).unwrap();
        let t = Instant::now();
        let mr = register(pd, v, access).unwrap();
        report("register VMM 3 chunks", t.elapsed(), 1);
        assert_eq!(mr.path(), RegistrationPath::DmaBuf);
        assert_eq!(mr.export().unwrap().export_len, 3 * g as u64);

        // From a thread with no current context: the device's primary context is pushed
        // for the export and popped again.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(d.current_context().unwrap(), None);
                let a = DeviceAlloc::new(&dev, 1 << 20).unwrap();
                let t = Instant::now();
                let mr = register(pd, a, AccessFlags::LOCAL_WRITE).unwrap();
                report(
                    "register 1 MiB from a thread without a context",
                    t.elapsed(),
                    1,
                );
                assert_eq!(mr.path(), RegistrationPath::DmaBuf);
                assert_eq!(d.current_context().unwrap(), None);
            });
        });
    });
}

/// The real GPUs of a run: device 0 to device 1 if there are two, else 0 to 0.
fn real_gpus() -> Gpus {
    let driver = real_driver();
    let dst = if driver.device(1).is_ok() { 1 } else { 0 };
    Gpus {
        driver,
        src: 0,
        dst,
    }
}

/// What registrations show on a real GPU: the path only (no software-GPU counters).
fn real_checks(path: RegistrationPath) -> Checks {
    Checks {
        path,
        maps_per_mr: None,
        flushes: None,
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_transfers_in_one_process_dmabuf() {
    let gpus = real_gpus();
    for mem in [Mem::Alloc, Mem::Vmm] {
        let t = Instant::now();
        transfers::in_process(&gpus, mem, &real_checks(RegistrationPath::DmaBuf));
        report(
            &format!("transfer matrix in one process, {mem:?}"),
            t.elapsed(),
            1,
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_transfers_in_one_process_fallback() {
    // efa-sim refuses dma-buf MRs (a kernel without them): registration takes the
    // ibv_reg_mr path, which efa-sim serves as emulated nvidia_peermem.
    support::in_child(
        "gpu_transfers_in_one_process_fallback",
        &[("EFA_SIM_PROFILE", "dmabuf_mr=0,max_rdma_size=65536")],
        || {
            let gpus = real_gpus();
            for mem in [Mem::Alloc, Mem::Vmm] {
                transfers::in_process(&gpus, mem, &real_checks(RegistrationPath::Peermem));
            }
        },
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_transfers_between_two_processes() {
    let gpus = real_gpus();
    for mem in [Mem::Alloc, Mem::Vmm] {
        transfers::target(
            &gpus,
            mem,
            &real_checks(RegistrationPath::DmaBuf),
            support::child("gpu_initiator_side"),
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU; the initiator of gpu_transfers_between_two_processes, started by it"]
fn gpu_initiator_side() {
    transfers::initiator_from_env(real_driver(), &real_checks(RegistrationPath::DmaBuf));
}
