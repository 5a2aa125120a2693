//! GpuMr as a handle: the device context made current for registration (and only for
//! it), borrowed and `Arc`-held PDs, SGEs and remote views in the same batches as host
//! memory under the same PD check, copies, re-registration and flush through it. Nothing
//! here moves data through the NIC (that needs efa-sim's dma-buf data path).
mod support;

use std::sync::Arc;

use efa_cuda::*;
use efa_typestate::{
    AccessFlags, Context, CqOptions, ExtCq, InvalidInput, MemoryRegion, Pd, PdObject, Peer, Qp,
    QpConfig, RecvBatch, Rts, SendBatch,
};

fn efa() -> Context {
    let ctx = Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    ctx
}

const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

#[test]
fn registration_pushes_the_devices_context_and_pops_it_again() {
    let _serial = support::serial();
    let d = support::sim();
    std::thread::spawn(move || {
        let ctx = efa();
        let pd = ctx.alloc_pd().unwrap();
        let mem = DeviceAlloc::new(&d.device(1).unwrap(), 4096).unwrap();
        // The software GPU refuses exports without a current context (as UCX and GDRCopy
        // found the real driver does); this thread has none.
        assert_eq!(d.current_context().unwrap(), None);
        let mr = register(&pd, mem, AccessFlags::LOCAL_WRITE).unwrap();
        assert_eq!(mr.path(), RegistrationPath::DmaBuf);
        assert_eq!(
            d.current_context().unwrap(),
            None,
            "the pushed context is popped"
        );

        // Another device's context current: device 1's is pushed on top of it and popped.
        let dev0 = d.device(0).unwrap();
        let _dev0_ctx = dev0.make_current().unwrap();
        let mem = DeviceAlloc::new(&d.device(1).unwrap(), 4096).unwrap();
        let mr1 = register(&pd, mem, AccessFlags::LOCAL_WRITE).unwrap();
        assert_eq!(mr1.path(), RegistrationPath::DmaBuf);
        assert_eq!(
            support::dmabuf_info(mr1.dmabuf_fd().unwrap())
                .unwrap()
                .device,
            1
        );
        assert_eq!(d.current_device().unwrap(), Some(0));
        drop((mr, mr1));
    })
    .join()
    .unwrap();
}

#[test]
fn gpu_sges_go_in_the_same_batches_as_host_memory_under_the_same_pd_check() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let other_pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x77, None)
        .unwrap();
    let peer = pd.connect(&qp.endpoint()).unwrap();
    let host = pd
        .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let gpu = register(&pd, DeviceAlloc::new(&dev, 4096).unwrap(), REMOTE).unwrap();
    let va = gpu.device_ptr();

    let mut s = SendBatch::<8>::new(&qp);
    s.send(1, &peer, host.sge(0, 64).unwrap()).unwrap();
    s.send(2, &peer, gpu.sge(64, 64).unwrap()).unwrap();
    s.write(3, &peer, gpu.sge_all().unwrap(), gpu.remote())
        .unwrap();
    s.write_imm(
        4,
        &peer,
        host.sge(0, 8).unwrap(),
        gpu.remote().slice(8, 8).unwrap(),
        9,
    )
    .unwrap();
    s.read(
        5,
        &peer,
        gpu.sge(0, 16).unwrap(),
        gpu.remote().slice(100, 16).unwrap(),
    )
    .unwrap();
    assert_eq!(s.len(), 5);
    let addrs: Vec<u64> = s
        .iter()
        .map(|w| w.sge_addr().expect("a one-SGE payload"))
        .collect();
    assert_eq!(
        addrs[1..],
        [va + 64, va, host.sge(0, 1).unwrap().addr(), va]
    );
    let mut r = RecvBatch::<2>::new(&qp);
    r.push(6, gpu.sge(0, 4096).unwrap()).unwrap();

    // Device memory of another PD is refused like host memory of another PD.
    let foreign = register(&other_pd, DeviceAlloc::new(&dev, 64).unwrap(), REMOTE).unwrap();
    let wrong = Err(efa_typestate::Error::Invalid(InvalidInput::WrongPd(
        PdObject::Sge,
    )));
    assert_eq!(s.send(7, &peer, foreign.sge_all().unwrap()), wrong);
    assert_eq!(r.push(8, foreign.sge_all().unwrap()), wrong);
    assert_eq!((s.len(), r.len()), (5, 1));

    // SGEs stay inside the registration.
    assert_eq!(
        gpu.sge(4095, 2).unwrap_err(),
        Error::Verbs(efa_typestate::Error::Invalid(
            InvalidInput::SgeOutOfBounds {
                offset: 4095,
                len: 2
            }
        ))
    );
    assert!(gpu.remote().slice(4000, 97).is_err());
}

/// An engine that owns its EFA objects and its GPU registration, with no lifetime.
struct Engine {
    qp: Qp<Arc<Pd<Arc<Context>>>, Rts>,
    to_self: Peer<Arc<Pd<Arc<Context>>>>,
    gpu: GpuMr<Arc<Pd<Arc<Context>>>, DeviceAlloc>,
    _cq: Arc<ExtCq<Arc<Context>>>,
}

#[test]
fn an_arc_held_gpu_registration_lives_in_an_engine_on_another_thread() {
    let _serial = support::serial();
    let dev = support::sim().device(1).unwrap();
    let ctx = Arc::new(efa());
    let pd = Arc::new(Pd::new(Arc::clone(&ctx)).unwrap());
    let cq = Arc::new(ExtCq::new(Arc::clone(&ctx), CqOptions::new(512)).unwrap());
    let qp = Qp::new(
        Arc::clone(&pd),
        Arc::clone(&cq),
        Arc::clone(&cq),
        &QpConfig::srd(),
    )
    .unwrap()
    .prepare(0x42, None)
    .unwrap();
    let to_self = Peer::connect(Arc::clone(&pd), &qp.endpoint()).unwrap();
    let mem = DeviceAlloc::from_host(&dev, b"owned by the engine").unwrap();
    let gpu = GpuMr::new(Arc::clone(&pd), mem, REMOTE).unwrap();
    let engine = Engine {
        qp,
        to_self,
        gpu,
        _cq: cq,
    };
    drop((pd, ctx)); // the engine holds what it needs

    let back = std::thread::spawn(move || {
        let mut e = engine;
        {
            let mut s = SendBatch::<1>::new(&e.qp);
            s.write(1, &e.to_self, e.gpu.sge(0, 5).unwrap(), e.gpu.remote())
                .unwrap();
            assert_eq!(s.len(), 1);
        }
        e.gpu.copy_from_host(0, b"OWNED").unwrap();
        let Engine { gpu, .. } = e;
        gpu.close().map_err(|(_, e)| e).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(back.to_vec().unwrap(), b"OWNED by the engine");
}

#[test]
fn copies_reregistration_and_flush_through_a_gpu_mr() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(1).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let vmm = VmmAllocation::with_chunk_size(&dev, 3 << 21, 2 << 20).unwrap();
    let mut mr = register(&pd, vmm, REMOTE).unwrap();
    assert_eq!(mr.path(), RegistrationPath::DmaBuf);
    assert_eq!(mr.export().unwrap().export_len, 3 << 21, "all three chunks");
    assert_eq!(mr.access(), REMOTE);
    mr.fill(0xab).unwrap();
    mr.copy_from_host((2 << 20) - 3, b"chunks").unwrap();
    let mut out = [0u8; 8];
    mr.copy_to_host((2 << 20) - 4, &mut out).unwrap();
    assert_eq!(&out, b"\xabchunks\xab");
    assert_eq!(
        mr.copy_from_host((3 << 21) - 1, b"xy").unwrap_err(),
        Error::OutOfBounds {
            offset: (3 << 21) - 1,
            len: 2,
            buffer_len: 3 << 21
        }
    );

    let fd = mr.dmabuf_fd().unwrap();
    mr.reregister().unwrap();
    assert_eq!(
        mr.dmabuf_fd(),
        Some(fd),
        "the same export, kept for re-registration"
    );
    assert_eq!(mr.sge(0, 1).unwrap().lkey(), mr.lkey());
    assert_eq!(mr.remote().addr(), mr.device_ptr());

    let before = support::flush_count(1);
    assert_eq!(
        mr.flush_gpudirect_writes(FlushScope::ToOwner),
        Ok(Flushed::Flushed)
    );
    assert_eq!(support::flush_count(1), (before.0 + 1, before.1));
    assert_eq!(mr.device().unwrap().ordinal(), 1);
    let vmm = mr.close().map_err(|(_, e)| e).unwrap();
    assert_eq!(vmm.chunk_count(), 3);
}
