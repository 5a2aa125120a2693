//! Registration of software-GPU memory with efa-sim: the dma-buf path for cuMemAlloc and
//! multi-chunk VMM memory, the ibv_reg_mr fallback (by device address, no host view) when
//! the driver refuses exports, is too old, or the kernel refuses dma-buf MRs (efa-sim then
//! emulates nvidia_peermem: the NIC reaches the memory through the driver's copies), both
//! failing (also without nvidia_peermem: EFAULT), and the typed rejections.
mod support;

use efa_cuda::*;
use efa_typestate::{
    AccessFlags, CompletionQueue, Context, CqOptions, DeviceCaps, Errno, MemoryRegion, Pd,
    QpConfig, SendBatch, Unsupported, Verb,
};
use std::time::Duration;

fn efa() -> Context {
    let ctx = Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    ctx
}

fn remote_access(ctx: &Context) -> AccessFlags {
    let mut a = AccessFlags::LOCAL_WRITE;
    if ctx.caps().contains(DeviceCaps::RDMA_READ) {
        a |= AccessFlags::REMOTE_READ;
    }
    if ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
        a |= AccessFlags::REMOTE_WRITE;
    }
    a
}

/// RDMA-writes 16 host bytes into `mr` at offset 8 through efa-sim and reads them back with
/// the driver's copies: the registration reaches the memory (`mr` needs remote write).
fn write_lands<P, M: DeviceMemory>(ctx: &Context, pd: &Pd<&Context>, mr: &GpuMr<P, M>) {
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x55, None)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x66, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src = pd
        .register(b"sixteen bytes!!!".to_vec(), AccessFlags::empty())
        .unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.write(
        1,
        &to_b,
        src.sge_all().unwrap(),
        mr.remote().slice(8, 16).unwrap(),
    )
    .unwrap();
    // SAFETY: `src` is not written until the completion is polled on the next line.
    unsafe { a.post_send(&s) }.unwrap();
    cq.wait(Duration::from_secs(10)).unwrap().result().unwrap();
    let mut got = [0u8; 16];
    mr.copy_to_host(8, &mut got).unwrap();
    assert_eq!(&got, b"sixteen bytes!!!");
}

fn fd_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only queries the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

#[test]
fn cumemalloc_memory_registers_by_dmabuf_with_cuda_addresses() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let mem = DeviceAlloc::from_host(&dev, &[3u8; 10000]).unwrap();
    let va = mem.device_ptr();
    let mr = register(&pd, mem, remote_access(&ctx)).unwrap();
    assert_eq!(mr.path(), RegistrationPath::DmaBuf);
    assert_eq!((mr.device_ptr(), mr.len()), (va, 10000));
    let export = *mr.export().unwrap();
    assert_eq!(
        (export.export_base, export.offset, export.iova),
        (va, 0, va)
    );
    assert_eq!(
        export.export_len,
        10000u64.div_ceil(host_page_size()) * host_page_size()
    );
    let fd = mr.dmabuf_fd().unwrap();
    let info = support::dmabuf_info(fd).unwrap();
    assert_eq!(
        (info.base, info.size),
        (export.export_base, export.export_len)
    );

    let sge = mr.sge(100, 50).unwrap();
    assert_eq!(
        (sge.addr(), sge.len(), sge.lkey()),
        (va + 100, 50, mr.lkey())
    );
    assert!(mr.sge(9990, 11).is_err(), "SGE past the end");
    let remote = mr.remote();
    assert_eq!(
        (remote.addr(), remote.len(), remote.rkey()),
        (va, 10000, mr.rkey())
    );

    // Closing deregisters, closes the dma-buf fd and gives the memory back intact.
    let mem = mr.close().map_err(|(_, e)| e).unwrap();
    assert!(!fd_open(fd), "dma-buf fd closed with the MR");
    assert_eq!(mem.to_vec().unwrap(), vec![3u8; 10000]);
}

#[test]
fn vmm_memory_spanning_chunks_registers_an_unaligned_sub_range() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(1).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let vmm = VmmAllocation::with_chunk_size(&dev, 3 << 21, 2 << 20).unwrap();
    let start = vmm.device_ptr() + (2 << 20) - 1000;
    // SAFETY: a sub-range of `vmm` crossing two chunk boundaries; `vmm` outlives the MR.
    let raw = unsafe { RawDeviceMemory::new(d, start, (2 << 20) + 2000) }.unwrap();
    let mr = register(&pd, raw, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(mr.path(), RegistrationPath::DmaBuf);
    let e = *mr.export().unwrap();
    let page = host_page_size();
    assert_eq!(e.export_base, start & !(page - 1));
    assert_eq!(e.offset, start - e.export_base);
    assert_eq!(e.iova, start);
    assert!(e.export_base + e.export_len >= start + (2 << 20) + 2000);
    assert_eq!(mr.sge(0, 1).unwrap().addr(), start);
    drop(mr);
    drop(vmm);
}

#[test]
fn refused_exports_fall_back_to_ibv_reg_mr_on_the_cuda_address() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let mem = DeviceAlloc::new(&dev, 4096).unwrap();
    let va = mem.device_ptr();
    support::control("dmabuf_export", 0);
    let mr = register(&pd, mem, remote_access(&ctx));
    support::control("dmabuf_export", 1);
    let mr = mr.unwrap();
    assert_eq!(mr.path(), RegistrationPath::Peermem);
    assert_eq!((mr.export(), mr.dmabuf_fd()), (None, None));
    assert_eq!(mr.sge(0, 4096).unwrap().addr(), va);
    assert_eq!(mr.remote().addr(), va);
    // efa-sim emulates nvidia_peermem: the NIC reaches the CUDA address.
    write_lands(&ctx, &pd, &mr);
}

#[test]
fn an_old_driver_without_export_falls_back_too() {
    let _serial = support::serial();
    let path = support::old_driver("register-no-export", &["cuMemGetHandleForAddressRange"]);
    // The old driver must be the process's libcuda.so.1 (the one efa-sim uses): a child
    // process that loads it first.
    let env = [(LIBRARY_ENV, path.to_str().unwrap())];
    support::in_child("an_old_driver_without_export_falls_back_too", &env, || {
        let old = Driver::get().unwrap();
        assert_eq!(old.device(0).unwrap().dmabuf_supported(), Ok(false));
        let dev = old.device(0).unwrap();
        let ctx = efa();
        let pd = ctx.alloc_pd().unwrap();
        let mr = register(
            &pd,
            DeviceAlloc::new(&dev, 100).unwrap(),
            remote_access(&ctx),
        )
        .unwrap();
        assert_eq!(mr.path(), RegistrationPath::Peermem);
        write_lands(&ctx, &pd, &mr);
    });
}

#[test]
fn a_kernel_without_dmabuf_mrs_makes_registration_fall_back() {
    support::in_child(
        "a_kernel_without_dmabuf_mrs_makes_registration_fall_back",
        &[("EFA_SIM_PROFILE", "dmabuf_mr=0")],
        || {
            let dev = support::sim().device(0).unwrap();
            let ctx = efa();
            let pd = ctx.alloc_pd().unwrap();
            let before = gpu_memory_fds();
            let mr = register(
                &pd,
                DeviceAlloc::new(&dev, 8192).unwrap(),
                remote_access(&ctx),
            )
            .unwrap();
            // The export was made, refused by the kernel, and closed before the fallback.
            assert_eq!(mr.path(), RegistrationPath::Peermem);
            assert_eq!(
                gpu_memory_fds(),
                before,
                "the refused export's fd was closed"
            );
            write_lands(&ctx, &pd, &mr);
        },
    );
}

#[test]
fn without_nvidia_peermem_the_fallback_fails_with_efault() {
    support::in_child(
        "without_nvidia_peermem_the_fallback_fails_with_efault",
        &[
            ("EFA_SIM_PROFILE", "peermem=0"),
            ("EFA_SIM_GPU_DMABUF", "0"),
        ],
        || {
            let dev = support::sim().device(0).unwrap();
            let ctx = efa();
            let pd = ctx.alloc_pd().unwrap();
            match register(
                &pd,
                DeviceAlloc::new(&dev, 4096).unwrap(),
                AccessFlags::LOCAL_WRITE,
            )
            .unwrap_err()
            {
                Error::RegistrationFailed { dmabuf, fallback } => {
                    assert_eq!(support::cu_code(&dmabuf), Some(801), "{dmabuf}");
                    assert_eq!(
                        *fallback,
                        Error::Verbs(efa_typestate::Error::Verb {
                            verb: Verb::RegMr,
                            errno: Errno(libc::EFAULT)
                        })
                    );
                }
                other => panic!("expected RegistrationFailed, got {other:?}"),
            }
        },
    );
}

#[test]
fn both_paths_failing_reports_both_causes() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    // Remote atomics: EFA has none, so efa-sim refuses the fallback registration too.
    let atomic = AccessFlags::LOCAL_WRITE | AccessFlags::from_bits_retain(1 << 3);
    support::control("dmabuf_export", 0);
    let r = register(&pd, DeviceAlloc::new(&dev, 4096).unwrap(), atomic);
    support::control("dmabuf_export", 1);
    match r.unwrap_err() {
        Error::RegistrationFailed { dmabuf, fallback } => {
            assert_eq!(support::cu_code(&dmabuf), Some(801), "{dmabuf}");
            assert_eq!(
                *fallback,
                Error::Verbs(efa_typestate::Error::Unsupported {
                    verb: Verb::RegMr,
                    why: Unsupported::Provider(Errno(libc::EOPNOTSUPP))
                })
            );
            let text = Error::RegistrationFailed { dmabuf, fallback }.to_string();
            assert!(text.contains("CUDA_ERROR_NOT_SUPPORTED"), "{text}");
        }
        other => panic!("expected RegistrationFailed, got {other:?}"),
    }
}

#[test]
fn borrowed_memory_cannot_be_remote_writable_and_host_or_empty_memory_is_rejected() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = DeviceAlloc::new(&dev, 4096).unwrap();
    for remote in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_READ] {
        assert_eq!(
            register(&pd, &mut mem, AccessFlags::LOCAL_WRITE | remote).unwrap_err(),
            Error::RemoteAccessNeedsOwnedMemory
        );
    }
    // A borrow without remote write is fine, and the memory is usable again afterwards.
    let mr = register(&pd, &mut mem, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(mr.path(), RegistrationPath::DmaBuf);
    let fd = mr.dmabuf_fd().unwrap();
    drop(mr);
    assert!(!fd_open(fd));
    mem.copy_from_host(0, b"ok").unwrap();

    /// Host memory that claims to be device memory: register must check with the driver.
    struct Liar(Vec<u8>);
    // SAFETY: test-only; register rejects it before anything touches the memory.
    unsafe impl DeviceMemory for Liar {
        const STAYS_ALLOCATED_IF_LEAKED: bool = true;
        fn device_ptr(&self) -> u64 {
            self.0.as_ptr() as u64
        }
        fn byte_len(&self) -> usize {
            self.0.len()
        }
        fn device_ordinal(&self) -> i32 {
            0
        }
        fn driver(&self) -> Option<&'static Driver> {
            Some(support::sim())
        }
    }
    let liar = Liar(vec![0u8; 64]);
    let p = liar.device_ptr();
    assert_eq!(
        register(&pd, liar, AccessFlags::LOCAL_WRITE).unwrap_err(),
        Error::NotDeviceMemory {
            ptr: p,
            memory_type: 0
        }
    );
    assert_eq!(
        register(&pd, Liar(Vec::new()), AccessFlags::LOCAL_WRITE).unwrap_err(),
        Error::EmptyBuffer
    );
}

/// Open descriptors of this process that are the software GPU's memory file (its own
/// plus one per live export).
fn gpu_memory_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .map(|l| l.to_string_lossy().starts_with("/memfd:efa-sim-gpu-memory"))
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn a_refused_dmabuf_registration_closes_its_export_and_reports_both_causes() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let mem = DeviceAlloc::new(&dev, 4096).unwrap();
    let before = gpu_memory_fds();
    // The export succeeds; efa-sim refuses remote atomics on both registration paths.
    let atomic = AccessFlags::LOCAL_WRITE | AccessFlags::from_bits_retain(1 << 3);
    match register(&pd, mem, atomic).unwrap_err() {
        Error::RegistrationFailed { dmabuf, fallback } => {
            assert!(
                matches!(
                    *dmabuf,
                    Error::Verbs(efa_typestate::Error::Unsupported {
                        verb: Verb::RegDmabufMr,
                        ..
                    })
                ),
                "{dmabuf:?}"
            );
            assert!(
                matches!(
                    *fallback,
                    Error::Verbs(efa_typestate::Error::Unsupported {
                        verb: Verb::RegMr,
                        ..
                    })
                ),
                "{fallback:?}"
            );
        }
        other => panic!("expected RegistrationFailed, got {other:?}"),
    }
    assert_eq!(gpu_memory_fds(), before, "the export's fd was closed");
    // A working registration holds exactly one export, closed with it.
    let mr = register(
        &pd,
        DeviceAlloc::new(&dev, 4096).unwrap(),
        AccessFlags::LOCAL_WRITE,
    )
    .unwrap();
    assert_eq!(gpu_memory_fds(), before + 1);
    drop(mr);
    assert_eq!(gpu_memory_fds(), before);
}
