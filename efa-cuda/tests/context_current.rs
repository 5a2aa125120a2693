//! Every GPU path for GPU 1, called while GPU 0's context is current (and with no context
//! at all), runs on GPU 1 and leaves the caller's context as it was: allocation (plain and
//! VMM), copies, export, registration (one MR and split), flush. The software GPU has two
//! devices by default (`efa-sim run --gpus 2` gives the same); its pointer attributes,
//! dma-buf info and per-device flush counts say which device each call reached.
mod support;

use efa_cuda::*;
use efa_typestate::{AccessFlags, Context};

fn efa() -> Context {
    let ctx = Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    ctx
}

/// Runs every path for `gpu1` and checks after each that the thread's current context is
/// still `before` (GPU 0's primary context, or none).
fn every_path_on(gpu1: Device, before: Option<sys::CUcontext>) {
    let d = gpu1.driver();
    let still = |what: &str| {
        assert_eq!(
            d.current_context().unwrap(),
            before,
            "{what} left the caller's context current"
        );
    };
    let on_gpu1 = |ptr: u64| {
        assert_eq!(
            d.pointer_attribute(ptr, sys::ptr_attr::DEVICE_ORDINAL)
                .unwrap(),
            1
        );
    };
    // GPU 1's primary context, to compare with the allocation's.
    let ctx1 = {
        let _g = gpu1.make_current().unwrap();
        d.current_context().unwrap().unwrap()
    };
    still("make_current's guard");

    let mut mem = DeviceAlloc::new(&gpu1, 1 << 20).unwrap();
    still("DeviceAlloc::new");
    on_gpu1(mem.device_ptr());
    assert_eq!(
        d.pointer_attribute(mem.device_ptr(), sys::ptr_attr::CONTEXT)
            .unwrap(),
        ctx1 as u64,
        "allocated in GPU 1's primary context"
    );

    mem.copy_from_host(100, b"on GPU 1").unwrap();
    still("copy_to_device");
    let mut back = [0u8; 8];
    mem.copy_to_host(100, &mut back).unwrap();
    still("copy_to_host");
    assert_eq!(&back, b"on GPU 1");
    fill(&mut mem, 7).unwrap();
    still("fill");
    assert!(mem.to_vec().unwrap().iter().all(|&b| b == 7));

    let buf = export_dmabuf(&mem).unwrap();
    still("export_dmabuf");
    let info = support::dmabuf_info(std::os::fd::AsRawFd::as_raw_fd(buf.fd())).unwrap();
    assert_eq!(info.device, 1);
    drop(buf);

    let vmm = VmmAllocation::new(&gpu1, 4 << 20).unwrap();
    still("VmmAllocation::new");
    on_gpu1(vmm.device_ptr());
    drop(vmm);
    still("VmmAllocation's drop");

    let efa = efa();
    let pd = efa.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = register(&pd, mem, access).unwrap();
    still("register");
    assert_eq!(mr.path(), RegistrationPath::DmaBuf);
    assert_eq!(
        support::dmabuf_info(mr.dmabuf_fd().unwrap())
            .unwrap()
            .device,
        1
    );
    let split = SplitGpuMr::new(
        &pd,
        DeviceAlloc::new(&gpu1, 3 << 20).unwrap(),
        access,
        SplitOptions::new().max_piece_len(1 << 20),
    )
    .unwrap();
    still("SplitGpuMr::new");
    for p in split.pieces() {
        assert_eq!(
            support::dmabuf_info(p.dmabuf_fd().unwrap()).unwrap().device,
            1
        );
    }

    // The flush reaches GPU 1 only (the software GPU orders nothing by itself: every
    // flush is made and counted per device).
    let (gpu0_before, gpu1_before) = (support::flush_count(0), support::flush_count(1));
    assert_eq!(
        mr.flush_gpudirect_writes(FlushScope::ToOwner).unwrap(),
        Flushed::Flushed
    );
    still("flush_gpudirect_writes");
    assert_eq!(support::flush_count(0), gpu0_before, "GPU 0 is not flushed");
    assert_eq!(support::flush_count(1).0, gpu1_before.0 + 1);

    drop((mr, split));
    still("deregistration and free");
}

#[test]
fn every_gpu_path_for_gpu_1_runs_on_gpu_1_whatever_context_is_current() {
    let _serial = support::serial();
    let d = support::sim();
    assert!(d.device_count().unwrap() >= 2, "two software GPUs");
    std::thread::spawn(move || {
        let (gpu0, gpu1) = (d.device(0).unwrap(), d.device(1).unwrap());
        // No context at all.
        assert_eq!(d.current_context().unwrap(), None);
        every_path_on(gpu1, None);

        // GPU 0's context current.
        let _g0 = gpu0.make_current().unwrap();
        let ctx0 = d.current_context().unwrap();
        assert!(ctx0.is_some());
        every_path_on(gpu1, ctx0);

        // The strict form: a check that changes nothing, with typed errors.
        gpu0.check_current().unwrap();
        match gpu1.check_current() {
            Err(Error::WrongContext { device, current }) => assert_eq!((device, current), (1, 0)),
            other => panic!("GPU 0's context is current, got {other:?}"),
        }
        // The current-context flush flushes GPU 0, the current context's device.
        let (gpu0_before, gpu1_before) = (support::flush_count(0), support::flush_count(1));
        d.flush_current_context(FlushScope::ToOwner).unwrap();
        assert_eq!(support::flush_count(0).0, gpu0_before.0 + 1);
        assert_eq!(support::flush_count(1), gpu1_before);
    })
    .join()
    .unwrap();

    // A thread with no context: the check names the missing context.
    std::thread::spawn(move || {
        let gpu1 = d.device(1).unwrap();
        assert!(matches!(gpu1.check_current(), Err(Error::NoContext { .. })));
        assert!(matches!(
            d.flush_current_context(FlushScope::ToOwner),
            Err(Error::NoContext { .. })
        ));
    })
    .join()
    .unwrap();
}
