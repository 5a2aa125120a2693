//! GPU memory beyond 4 GiB (issue 27, item 4, first part): one `cuMemAlloc` of 5 GiB on
//! the software GPU (its memory is a sparse memfd, so untouched pages cost nothing),
//! registered by dma-buf in one registration, and RDMA-written across the 4 GiB line and
//! past it: offsets and lengths beyond 32 bits reach the right bytes. Then the same size
//! as a `SplitGpuMr` of pieces of at most 4 GiB (a device whose `max_mr_size` were 4 GiB),
//! written across the piece boundary.
use efa::cuda::{register, Device, DeviceAlloc, RegistrationPath, SplitGpuMr, SplitOptions};
use efa::*;
use std::time::Duration;

const GIB: u64 = 1 << 30;

#[test]
fn a_gpu_buffer_over_4_gib_registers_and_takes_writes_past_4_gib() {
    let len = 5 * GIB;
    if efa_sim_select::SOFTWARE_GPU {
        // Its devices hold 4 GiB unless told more, read at cuInit (this binary's only test).
        std::env::set_var("EFA_SIM_GPU_MEMORY_MIB", "6144");
    }
    let gpu = Device::get(0).unwrap();
    let ctx = Context::open_first_efa().unwrap();
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let a = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(1, None)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(2, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let _to_a = pd.connect(&a.endpoint()).unwrap();

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let dst = register(&pd, DeviceAlloc::new(&gpu, len as usize).unwrap(), access).unwrap();
    assert_eq!(dst.path(), RegistrationPath::DmaBuf);
    assert_eq!(dst.len(), len);
    assert_eq!(dst.remote().len(), len, "one registration covers all of it");

    let piece: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8 ^ 0xa5).collect();
    let src = pd.register(piece.clone(), AccessFlags::empty()).unwrap();
    // Across the 4 GiB line, and 4.5 GiB in.
    for at in [4 * GIB - (1 << 19), 4 * GIB + GIB / 2] {
        let remote = dst.remote().slice(at, piece.len() as u64).unwrap();
        a.write_all(
            &cq,
            &to_b,
            &src,
            remote,
            Transfer::new(Duration::from_secs(20)),
            |c| panic!("unexpected {c:?}"),
        )
        .unwrap();
        let mut back = vec![0u8; piece.len()];
        dst.copy_to_host(at as usize, &mut back).unwrap();
        assert!(back == piece, "the bytes at {at:#x} are the source's");
    }
    // Nothing else was written: the bytes just before each piece are still zero.
    let mut before = [0xffu8; 16];
    dst.copy_to_host((4 * GIB - (1 << 19) - 16) as usize, &mut before)
        .unwrap();
    assert_eq!(before, [0u8; 16]);
    drop(dst);

    // Pieces of at most 4 GiB, cut at multiples of 4 GiB in the address space.
    let mem = DeviceAlloc::new(&gpu, len as usize).unwrap();
    let split =
        SplitGpuMr::new(&pd, mem, access, SplitOptions::new().max_piece_len(4 * GIB)).unwrap();
    let ptr = split.device_ptr();
    assert_eq!(
        split.piece_count() as u64,
        (ptr + len - 1) / (4 * GIB) - ptr / (4 * GIB) + 1
    );
    assert!(split.piece_count() >= 2);
    assert!(split.pieces().iter().all(|p| p.len() <= 4 * GIB));
    let boundary = split.pieces()[0].len();
    let at = boundary.saturating_sub(1 << 19);
    let remote = split.remote();
    let mut writes = 0;
    for (offset, piece) in remote.segments(at, piece.len() as u64).unwrap() {
        a.write_all(
            &cq,
            &to_b,
            &src,
            piece,
            Transfer::new(Duration::from_secs(20)).local_offset(offset - at),
            |c| panic!("unexpected {c:?}"),
        )
        .unwrap();
        writes += 1;
    }
    assert_eq!(writes, 2, "one write per piece");
    let mut back = vec![0u8; piece.len()];
    split.copy_to_host(at as usize, &mut back).unwrap();
    assert!(back == piece, "the bytes across the piece boundary");
}
