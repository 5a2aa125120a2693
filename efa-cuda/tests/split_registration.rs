//! Registrations split where one MR cannot cover the buffer (`SplitGpuMr`), on efa-sim and
//! the software GPU, each against a simulated limit:
//! * the EFA device's `max_mr_size`, lowered to 32 MiB by this binary's `EFA_SIM_PROFILE`
//!   item `max_mr_size` (the real device reports its own through `ibv_query_device`);
//! * a driver that exports one physical allocation per dma-buf: efa-sim-gpu's control
//!   `dmabuf_cross_chunk` = 0 refuses an export over several VMM chunks (cuda.h allows such
//!   exports for chunks with identical properties; NVIDIA's exporter assembles them).
//!
//! Writes cross the piece boundaries and every byte is read back with the driver's copies.
//! One binary, because the device reads its profile once per process.
mod support;

use std::sync::Once;
use std::time::Duration;

use efa_cuda::*;
use efa_typestate::{AccessFlags, Context, CqOptions, Pd, QpConfig, Transfer};

const MIB: u64 = 1 << 20;
const MAX_MR_SIZE: u64 = 32 * MIB;

fn efa() -> Context {
    static PROFILE: Once = Once::new();
    PROFILE.call_once(|| {
        // Keep the caller's items (scripts/test.sh runs strict mode) and add the limit.
        let item = format!("max_mr_size={MAX_MR_SIZE}");
        let profile = match std::env::var("EFA_SIM_PROFILE") {
            Ok(p) if p.contains('=') || p.trim() == "strict" => format!("{p},{item}"),
            _ => item,
        };
        std::env::set_var("EFA_SIM_PROFILE", profile);
    });
    let ctx = Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    assert_eq!(ctx.query_device().unwrap().max_mr_size(), MAX_MR_SIZE);
    ctx
}

const REMOTE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed ^ (i >> 16) as u8)
        .collect()
}

/// RDMA-writes `src` into `dst` at `at` through a QP pair of `pd`, one `write_all` per
/// piece the range touches (a work request addresses one MR); returns how many.
fn write_split<P, M: DeviceMemory>(
    ctx: &Context,
    pd: &Pd<&Context>,
    dst: &SplitGpuMr<P, M>,
    at: u64,
    src: &[u8],
) -> usize {
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let a = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x31, None)
        .unwrap();
    let b = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x32, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let src_mr = pd.register(src.to_vec(), AccessFlags::empty()).unwrap();
    let remote = dst.remote();
    let mut writes = 0;
    for (offset, piece) in remote.segments(at, src.len() as u64).unwrap() {
        a.write_all(
            &cq,
            &to_b,
            &src_mr,
            piece,
            Transfer::new(Duration::from_secs(20)).local_offset(offset - at),
            |c| panic!("unexpected {c:?}"),
        )
        .unwrap();
        writes += 1;
    }
    writes
}

/// Restores the software GPU's default (exports over several chunks) when dropped.
struct CrossChunk;
impl CrossChunk {
    fn refuse() -> CrossChunk {
        support::control("dmabuf_cross_chunk", 0);
        CrossChunk
    }
}
impl Drop for CrossChunk {
    fn drop(&mut self) {
        support::control("dmabuf_cross_chunk", 1);
    }
}

#[test]
fn vmm_chunks_a_driver_will_not_export_together_are_registered_one_by_one() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let chunk = dev.vmm_granularity().unwrap();
    let mut vmm = VmmAllocation::with_chunk_size(&dev, 4 * chunk, chunk).unwrap();
    assert_eq!(vmm.chunk_count(), 4);
    let zeros = vec![0u8; 4 * chunk];
    vmm.copy_from_host(0, &zeros).unwrap();

    let _refuse = CrossChunk::refuse();
    // The simulated limit is real: one export over the four chunks is refused, one chunk
    // exports.
    match export_dmabuf(&vmm) {
        Err(Error::Cuda(e)) => assert_eq!(e.code, sys::CUDA_ERROR_INVALID_VALUE),
        other => panic!("an export over 4 chunks must be refused, got {other:?}"),
    }
    let (base, size) = dev
        .driver()
        .allocation_range(vmm.device_ptr() + 10)
        .unwrap();
    assert_eq!((base, size), (vmm.device_ptr(), chunk as u64), "one chunk");

    let mr = SplitGpuMr::new(&pd, vmm, REMOTE, SplitOptions::new()).unwrap();
    assert_eq!(mr.piece_count(), 4, "one piece per chunk");
    for (i, p) in mr.pieces().iter().enumerate() {
        assert_eq!(p.path(), RegistrationPath::DmaBuf, "piece {i}");
        assert_eq!(p.device_ptr(), mr.device_ptr() + (i * chunk) as u64);
        assert_eq!(p.len(), chunk as u64);
        assert_eq!(p.export().unwrap().export_len, chunk as u64);
    }
    let at = mr.piece_at(chunk as u64 + 5).unwrap();
    assert_eq!((at.piece, at.piece_offset), (1, 5));
    assert_eq!(at.lkey, mr.pieces()[1].lkey());
    assert_eq!(at.rkey, mr.pieces()[1].rkey());
    assert_eq!(at.addr, mr.device_ptr() + chunk as u64 + 5);
    assert_eq!(at.len, chunk as u64 - 5);
    match mr.sge(chunk as u64 - 8, 16) {
        Err(Error::CrossesPieces { boundary, .. }) => assert_eq!(boundary, chunk as u64),
        other => panic!("an SGE over a boundary must be refused, got {other:?}"),
    }
    assert!(mr.sge(chunk as u64, 16).is_ok());

    // 2.5 chunks from the middle of chunk 0 to the end of chunk 2: three boundaries'
    // worth of pieces, each its own write.
    let start = chunk as u64 / 2;
    let src = pattern(5 * chunk / 2, 0x5a);
    assert_eq!(write_split(&ctx, &pd, &mr, start, &src), 3);
    let mut back = vec![0u8; 4 * chunk];
    mr.copy_to_host(0, &mut back).unwrap();
    let end = start as usize + src.len();
    assert!(back[start as usize..end] == src[..], "the written bytes");
    assert!(back[..start as usize].iter().all(|&b| b == 0), "before");
    assert!(back[end..].iter().all(|&b| b == 0), "after");
}

#[test]
fn vmm_chunks_export_together_where_the_driver_allows_it() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let chunk = dev.vmm_granularity().unwrap() as u64;
    let vmm = VmmAllocation::with_chunk_size(&dev, 4 * chunk as usize, chunk as usize).unwrap();
    let mr = SplitGpuMr::new(&pd, vmm, REMOTE, SplitOptions::new()).unwrap();
    // Cut only at multiples of max_mr_size in the address space (8 MiB of 2 MiB-aligned
    // chunks may straddle one).
    let (first, last) = (mr.device_ptr(), mr.device_ptr() + mr.len() - 1);
    let windows = (last / MAX_MR_SIZE - first / MAX_MR_SIZE + 1) as usize;
    assert_eq!(mr.piece_count(), windows);
    for p in mr.pieces() {
        assert_eq!(p.path(), RegistrationPath::DmaBuf);
    }
    let src = pattern(3 * chunk as usize, 0x17);
    write_split(&ctx, &pd, &mr, chunk / 2, &src);
    let mut back = vec![0u8; src.len()];
    mr.copy_to_host(chunk as usize / 2, &mut back).unwrap();
    assert!(back == src);
}

#[test]
fn a_buffer_over_max_mr_size_is_split_and_takes_writes_across_pieces() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let ctx = efa();
    let pd = ctx.alloc_pd().unwrap();
    let len = 80 * MIB;

    // One registration of it is refused by the device, on both paths.
    match register(&pd, DeviceAlloc::new(&dev, len as usize).unwrap(), REMOTE) {
        Err(Error::RegistrationFailed { dmabuf, fallback }) => {
            assert!(matches!(*dmabuf, Error::Verbs(_)), "{dmabuf}");
            assert!(matches!(*fallback, Error::Verbs(_)), "{fallback}");
        }
        other => panic!("80 MiB over a 32 MiB max_mr_size must fail, got {other:?}"),
    }

    let mut mem = DeviceAlloc::new(&dev, len as usize).unwrap();
    fill(&mut mem, 0).unwrap();
    let mr = SplitGpuMr::new(&pd, mem, REMOTE, SplitOptions::new()).unwrap();
    let ptr = mr.device_ptr();
    let expected = ((ptr + len - 1) / MAX_MR_SIZE - ptr / MAX_MR_SIZE + 1) as usize;
    assert_eq!(mr.piece_count(), expected);
    assert!(mr.piece_count() >= 3);
    let mut next = ptr;
    for p in mr.pieces() {
        assert_eq!(p.path(), RegistrationPath::DmaBuf);
        assert!(p.len() <= MAX_MR_SIZE);
        assert_eq!(p.device_ptr(), next, "back to back");
        // Within one max_mr_size-aligned window: no more pages than the limit.
        assert_eq!(
            p.device_ptr() / MAX_MR_SIZE,
            (p.device_ptr() + p.len() - 1) / MAX_MR_SIZE
        );
        next += p.len();
    }
    assert_eq!(next, ptr + len);
    let remote = mr.remote();
    assert_eq!(remote.len(), len);
    assert_eq!(
        SplitRemote::from_pieces(remote.pieces().to_vec()).unwrap(),
        remote
    );

    // 3 MiB across the first piece boundary.
    let boundary = mr.pieces()[0].len();
    let at = boundary - MIB - 123;
    let src = pattern(3 * MIB as usize, 0xc3);
    assert_eq!(write_split(&ctx, &pd, &mr, at, &src), 2);
    let mut back = vec![0u8; src.len() + 64];
    mr.copy_to_host(at as usize - 32, &mut back).unwrap();
    assert!(back[..32].iter().all(|&b| b == 0), "before");
    assert!(back[32..32 + src.len()] == src[..], "the written bytes");
    assert!(back[32 + src.len()..].iter().all(|&b| b == 0), "after");

    // A smaller cap of the caller's; a cap under one page is a typed error.
    let mr = SplitGpuMr::new(
        &pd,
        DeviceAlloc::new(&dev, 20 * MIB as usize).unwrap(),
        REMOTE,
        SplitOptions::new().max_piece_len(8 * MIB),
    )
    .unwrap();
    assert!(mr.piece_count() >= 3);
    assert!(mr.pieces().iter().all(|p| p.len() <= 8 * MIB));
    match SplitGpuMr::new(
        &pd,
        DeviceAlloc::new(&dev, 4096).unwrap(),
        REMOTE,
        SplitOptions::new().max_piece_len(100),
    ) {
        Err(Error::PieceLimitTooSmall { limit: 100, .. }) => {}
        other => panic!("a 100-byte cap must be refused, got {other:?}"),
    };
}
