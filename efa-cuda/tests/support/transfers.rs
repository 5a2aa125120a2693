//! GPU transfers over efa-sim, shared by `tests/transfers.rs` (software GPU, CI) and
//! `tests/gpu.rs` (NVIDIA's driver on a GPU, efa-sim's emulated DMA): SEND/RECV, RDMA
//! write, write-with-immediate (then a flush), RDMA read, between two GPU buffers, GPU→host
//! and host→GPU, in one process ([`in_process`]) and between two ([`target`] /
//! [`initiator_from_env`]). Every byte is checked through the driver's copies; each
//! destination is zeroed first, so only bytes that arrived can match.

#![allow(dead_code)] // each test binary uses its own part of it

use std::process::Command;
use std::time::Duration;

use efa_cuda::*;
use efa_typestate::{
    AccessFlags, CompletionQueue, Context, CqOptions, EndpointInfo, MemoryRegion, Peer, Qp,
    QpConfig, RdmaChunks, RecvBatch, RemoteBuffer, Rts, SendBatch, WcOpcode,
};

pub const TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes per buffer: more than one 2 MiB VMM chunk (a VMM buffer spans two), more than one
/// datagram, odd.
pub const LEN: usize = (2 << 20) + 300_001;
/// Bytes of a SEND (below the device MTU).
const MSG: usize = 3000;
/// Bytes of the write-with-immediate at the end of a buffer.
const TAIL: usize = 64;
/// Where the two-process SEND lands in the target's `src`.
const SEND_AT: u64 = 1000;

/// Which device memory a buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mem {
    /// `cuMemAlloc` ([`DeviceAlloc`]).
    Alloc,
    /// VMM chunks mapped into one reservation ([`VmmAllocation`]).
    Vmm,
}

impl Mem {
    pub fn parse(s: &str) -> Mem {
        if s == "vmm" {
            Mem::Vmm
        } else {
            Mem::Alloc
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mem::Alloc => "alloc",
            Mem::Vmm => "vmm",
        }
    }
}

/// Owned device memory of either kind.
pub enum GpuBuf {
    Alloc(DeviceAlloc),
    Vmm(VmmAllocation),
}

impl GpuBuf {
    pub fn new(dev: &Device, mem: Mem, len: usize) -> GpuBuf {
        match mem {
            Mem::Alloc => GpuBuf::Alloc(DeviceAlloc::new(dev, len).unwrap()),
            Mem::Vmm => {
                let g = dev.vmm_granularity().unwrap();
                let v = VmmAllocation::with_chunk_size(dev, len, g).unwrap();
                assert!(v.chunk_count() >= 2, "the buffer spans VMM chunks");
                GpuBuf::Vmm(v)
            }
        }
    }
    fn inner(&self) -> &dyn DeviceMemoryDyn {
        match self {
            GpuBuf::Alloc(a) => a,
            GpuBuf::Vmm(v) => v,
        }
    }
}

/// The object-safe part of [`DeviceMemory`] (its constant makes it not object safe).
trait DeviceMemoryDyn {
    fn ptr(&self) -> u64;
    fn len(&self) -> usize;
    fn ordinal(&self) -> i32;
    fn drv(&self) -> Option<&'static Driver>;
}

impl<M: DeviceMemory> DeviceMemoryDyn for M {
    fn ptr(&self) -> u64 {
        self.device_ptr()
    }
    fn len(&self) -> usize {
        self.byte_len()
    }
    fn ordinal(&self) -> i32 {
        self.device_ordinal()
    }
    fn drv(&self) -> Option<&'static Driver> {
        self.driver()
    }
}

// SAFETY: delegates to an owned DeviceAlloc or VmmAllocation, which stay allocated while
// the GpuBuf lives (and for ever if it is leaked).
unsafe impl DeviceMemory for GpuBuf {
    const STAYS_ALLOCATED_IF_LEAKED: bool = true;
    fn device_ptr(&self) -> u64 {
        self.inner().ptr()
    }
    fn byte_len(&self) -> usize {
        self.inner().len()
    }
    fn device_ordinal(&self) -> i32 {
        self.inner().ordinal()
    }
    fn driver(&self) -> Option<&'static Driver> {
        self.inner().drv()
    }
}

/// What the registrations of a run must show.
pub struct Checks {
    /// The path every GPU registration takes.
    pub path: RegistrationPath,
    /// Mappings of the software GPU's memory file each registration adds (1: efa-sim
    /// mapped the dma-buf; 0: it moves the bytes with the driver's copies); `None` on a
    /// real GPU.
    pub maps_per_mr: Option<usize>,
    /// The software GPU's flush counter of a device, to assert the flush happened.
    pub flushes: Option<fn(i32) -> u64>,
}

/// The GPUs of a run: the driver and the ordinals of the source and destination.
pub struct Gpus {
    pub driver: &'static Driver,
    pub src: i32,
    pub dst: i32,
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 11) as u8)
        .collect()
}

/// FNV-1a folded to 32 bits (the write-with-immediate's value).
pub fn checksum(bytes: &[u8]) -> u32 {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (h ^ (h >> 32)) as u32
}

/// Asserts `got == want`, naming the first differing byte (not printing megabytes).
pub fn same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let n = got[i..]
            .iter()
            .zip(&want[i..])
            .filter(|(g, w)| g != w)
            .count();
        panic!(
            "{what}: byte {i} is {:#04x}, expected {:#04x} ({n} bytes differ from there on)",
            got[i], want[i]
        );
    }
}

/// Mappings of the software GPU's memory file in this process.
pub fn gpu_file_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("efa-sim-gpu-memory"))
        .count()
}

fn access(ctx: &Context) -> AccessFlags {
    let caps = ctx.caps();
    let mut a = AccessFlags::LOCAL_WRITE;
    if caps.contains(efa_typestate::DeviceCaps::RDMA_READ) {
        a |= AccessFlags::REMOTE_READ;
    }
    if caps.contains(efa_typestate::DeviceCaps::RDMA_WRITE) {
        a |= AccessFlags::REMOTE_WRITE;
    }
    a
}

fn efa() -> Context {
    let ctx = Context::open_first_efa().expect("efa-sim device");
    assert!(efa_sim_select::fw_matches_selection(
        ctx.query_device().unwrap().fw_ver()
    ));
    ctx
}

/// Registers a fresh zeroed GPU buffer and checks its path (and mapping) against `checks`.
fn register_gpu<'p, C: efa_typestate::Parent<Target = Context>>(
    pd: &'p efa_typestate::Pd<C>,
    dev: &Device,
    mem: Mem,
    access: AccessFlags,
    checks: &Checks,
) -> GpuMr<&'p efa_typestate::Pd<C>, GpuBuf> {
    let maps = gpu_file_mappings();
    let mut mr = register(pd, GpuBuf::new(dev, mem, LEN), access).unwrap();
    assert_eq!(mr.path(), checks.path, "{mem:?}");
    if let Some(n) = checks.maps_per_mr {
        assert_eq!(gpu_file_mappings(), maps + n, "mappings of {mem:?}");
    }
    mr.fill(0).unwrap();
    mr
}

/// RDMA of `local` (its first `remote.len()` bytes) to/from `remote` in chunks of the
/// device's `max_rdma_size`, a batch at a time, each completion checked.
fn rdma<P, X, Q: CompletionQueue>(
    qp: &Qp<P, Rts>,
    cq: &Q,
    peer: &Peer<X>,
    local: &dyn MemoryRegion,
    remote: RemoteBuffer,
    read: bool,
) {
    let max = qp.limits().max_rdma_size();
    let mut chunks = RdmaChunks::new(local, 0, remote, max).unwrap();
    while chunks.remaining() > 0 {
        let mut b = SendBatch::<8>::new(qp);
        let n = if read {
            b.fill_reads(0, peer, &mut chunks).unwrap()
        } else {
            b.fill_writes(0, peer, &mut chunks).unwrap()
        };
        // SAFETY: neither side's bytes are touched until every completion is polled below.
        unsafe { qp.post_send(&b).unwrap() };
        for _ in 0..n {
            cq.wait(TIMEOUT).unwrap().result().unwrap();
        }
    }
}

/// The whole matrix in one process: GPU `src` and GPU `dst` of memory `mem`, host buffers,
/// two QPs on one device.
pub fn in_process(gpus: &Gpus, mem: Mem, checks: &Checks) {
    let (dev_s, dev_d) = (
        gpus.driver.device(gpus.src).unwrap(),
        gpus.driver.device(gpus.dst).unwrap(),
    );
    let ctx = efa();
    let rw = access(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cqa = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let cqb = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let a = pd
        .create_qp(&cqa, &cqa, &QpConfig::srd())
        .unwrap()
        .prepare(0x11, None)
        .unwrap();
    let b = pd
        .create_qp(&cqb, &cqb, &QpConfig::srd())
        .unwrap()
        .prepare(0x22, None)
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let to_a = pd.connect(&a.endpoint()).unwrap();

    let data = pattern(LEN, 7);
    let mut src = register_gpu(&pd, &dev_s, mem, rw, checks);
    src.copy_from_host(0, &data).unwrap();
    let mut dst = register_gpu(&pd, &dev_d, mem, rw, checks);
    let mut host = pd.register_remote_write(vec![0u8; LEN], rw).unwrap();
    let host_data = pd.register_remote_write(pattern(LEN, 9), rw).unwrap();

    // SEND GPU → GPU, GPU → host, host → GPU (a sends, b receives).
    let cases: [(&dyn MemoryRegion, &dyn MemoryRegion, u64); 3] = [
        (src.region(), dst.region(), 100),
        (src.region(), &host, 200),
        (&host_data, dst.region(), 10_000),
    ];
    for (i, (from, to, at)) in cases.into_iter().enumerate() {
        let mut r = RecvBatch::<1>::new(&b);
        r.push(i as u64, to.sge(at, MSG as u64 + 10).unwrap())
            .unwrap();
        // SAFETY: `to` is not read until the receive completed.
        unsafe { b.post_recv(&r).unwrap() };
        let mut s = SendBatch::<1>::new(&a);
        s.send(i as u64, &to_b, from.sge(5, MSG as u64).unwrap())
            .unwrap();
        // SAFETY: `from` is not written until the send completed.
        unsafe { a.post_send(&s).unwrap() };
        cqa.wait(TIMEOUT).unwrap().result().unwrap();
        let c = cqb.wait(TIMEOUT).unwrap();
        c.result().unwrap();
        assert_eq!((c.opcode(), c.byte_len()), (WcOpcode::RECV, MSG as u32));
    }
    let mut got = vec![0u8; MSG];
    dst.copy_to_host(100, &mut got).unwrap();
    same("SEND GPU -> GPU", &got, &data[5..5 + MSG]);
    same(
        "SEND GPU -> host",
        &host.to_vec()[200..200 + MSG],
        &data[5..5 + MSG],
    );
    dst.copy_to_host(10_000, &mut got).unwrap();
    same("SEND host -> GPU", &got, &host_data.to_vec()[5..5 + MSG]);

    // RDMA write host → GPU, GPU → GPU, GPU → host; each destination zeroed first.
    dst.fill(0).unwrap();
    rdma(&a, &cqa, &to_b, &host_data, dst.remote(), false);
    same(
        "write host -> GPU",
        &dst.to_vec().unwrap(),
        &host_data.to_vec(),
    );
    dst.fill(0).unwrap();
    rdma(&a, &cqa, &to_b, src.region(), dst.remote(), false);
    same("write GPU -> GPU", &dst.to_vec().unwrap(), &data);
    rdma(&a, &cqa, &to_b, src.region(), host.remote(), false);
    same("write GPU -> host", &host.to_vec(), &data);

    // Write-with-immediate into GPU memory, then the flush before reading it.
    dst.fill(0).unwrap();
    let notice = pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE).unwrap();
    let mut r = RecvBatch::<1>::new(&b);
    r.push(50, notice.sge(0, 0).unwrap()).unwrap();
    // SAFETY: a zero-length receive names no bytes.
    unsafe { b.post_recv(&r).unwrap() };
    let tail = (LEN - TAIL) as u64;
    let mut s = SendBatch::<1>::new(&a);
    let imm = checksum(&data[LEN - TAIL..]);
    s.write_imm(
        50,
        &to_b,
        src.sge(tail, TAIL as u64).unwrap(),
        dst.remote().slice(tail, TAIL as u64).unwrap(),
        imm,
    )
    .unwrap();
    // SAFETY: `src` is not written until the completion is polled.
    unsafe { a.post_send(&s).unwrap() };
    cqa.wait(TIMEOUT).unwrap().result().unwrap();
    let c = cqb.wait(TIMEOUT).unwrap();
    c.result().unwrap();
    assert_eq!(
        (c.opcode(), c.imm()),
        (WcOpcode::RECV_RDMA_WITH_IMM, Some(imm))
    );
    flush_after_inbound(&dst, gpus.dst, checks);
    let mut t = vec![0u8; TAIL];
    dst.copy_to_host(LEN - TAIL, &mut t).unwrap();
    same("write-with-immediate GPU -> GPU", &t, &data[LEN - TAIL..]);

    // RDMA read GPU ← GPU, host ← GPU, GPU ← host (a reads b's memory into its own).
    dst.fill(0).unwrap();
    rdma(&a, &cqa, &to_b, dst.region(), src.remote(), true);
    same("read GPU <- GPU", &dst.to_vec().unwrap(), &data);
    host.copy_from_slice(0, &vec![0u8; LEN]).unwrap();
    rdma(&a, &cqa, &to_b, &host, src.remote(), true);
    same("read host <- GPU", &host.to_vec(), &data);
    dst.fill(0).unwrap();
    rdma(&a, &cqa, &to_b, dst.region(), host_data.remote(), true);
    same(
        "read GPU <- host",
        &dst.to_vec().unwrap(),
        &host_data.to_vec(),
    );
    drop(to_a);
}

/// The flush after inbound writes: it must succeed, and on the software GPU (which orders
/// nothing by default) be a real `cuFlushGPUDirectRDMAWrites` on the memory's device.
fn flush_after_inbound<P>(mr: &GpuMr<P, GpuBuf>, device: i32, checks: &Checks) {
    let before = checks.flushes.map(|f| f(device));
    let r = mr.flush_gpudirect_writes(FlushScope::ToOwner).unwrap();
    if let (Some(f), Some(before)) = (checks.flushes, before) {
        assert_eq!(r, Flushed::Flushed);
        assert_eq!(f(device), before + 1, "one flush on device {device}");
    }
}

const ENV_PEER: &str = "EFA_CUDA_TEST_PEER";
const ENV_DST: &str = "EFA_CUDA_TEST_DST";
const ENV_SRC: &str = "EFA_CUDA_TEST_SRC";
const ENV_MEM: &str = "EFA_CUDA_TEST_MEM";
const ENV_DEVICE: &str = "EFA_CUDA_TEST_DEVICE";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Two processes: this one (the target) registers GPU memory `dst` (written by the peer)
/// and `src` (read by it), starts the initiator with `initiator` (a command that runs
/// [`initiator_from_env`] in another process; the environment it needs is added here),
/// and checks what arrived: a SEND GPU → GPU, RDMA writes GPU → GPU and host → GPU, a
/// write-with-immediate (then the flush); the initiator checks its reads.
pub fn target(gpus: &Gpus, mem: Mem, checks: &Checks, mut initiator: Command) {
    let dev_d = gpus.driver.device(gpus.dst).unwrap();
    let ctx = efa();
    let rw = access(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x33, None)
        .unwrap();
    // RDMA from the initiator needs an AH for its GID here (one host: the same GID).
    let _ah = pd.create_ah(ctx.gid().unwrap()).unwrap();
    let dst = register_gpu(&pd, &dev_d, mem, rw, checks);
    let mut src = register_gpu(&pd, &dev_d, mem, rw, checks);
    let data = pattern(LEN, 3);
    src.copy_from_host(0, &data).unwrap();
    let notice = pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE).unwrap();
    // The SEND lands in `src` after the initiator has read it.
    let mut r = RecvBatch::<2>::new(&qp);
    r.push(1, src.sge(SEND_AT, MSG as u64).unwrap()).unwrap();
    r.push(2, notice.sge(0, 0).unwrap()).unwrap();
    // SAFETY: `src` is read only after the receives completed; the second names no bytes.
    unsafe { qp.post_recv(&r).unwrap() };

    let out = initiator
        .env(ENV_PEER, hex(&qp.endpoint().to_bytes()))
        .env(ENV_DST, hex(&dst.remote().to_bytes()))
        .env(ENV_SRC, hex(&src.remote().to_bytes()))
        .env(ENV_MEM, mem.name())
        .env(ENV_DEVICE, gpus.src.to_string())
        .output()
        .expect("start the initiator");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "initiator failed: {}\n{so}\n{se}",
        out.status
    );
    assert!(so.contains("1 passed"), "the initiator ran no test:\n{so}");

    let send = cq.wait(TIMEOUT).unwrap();
    send.result().unwrap();
    assert_eq!((send.wr_id(), send.byte_len()), (1, MSG as u32));
    let notify = cq.wait(TIMEOUT).unwrap();
    notify.result().unwrap();
    let whole = pattern(LEN, 5);
    assert_eq!(notify.imm(), Some(checksum(&whole)));
    flush_after_inbound(&dst, gpus.dst, checks);
    let mut sent = vec![0u8; MSG];
    src.copy_to_host(SEND_AT as usize, &mut sent).unwrap();
    same("SEND GPU -> GPU", &sent, &whole[..MSG]);
    let got = dst.to_vec().unwrap();
    // The initiator's writes: its GPU pattern over the whole buffer but the tail, its host
    // pattern over the first MSG bytes, then the tail with the immediate.
    same(
        "write GPU -> GPU and write-with-immediate",
        &got[MSG..],
        &whole[MSG..],
    );
    same("write host -> GPU", &got[..MSG], &pattern(MSG, 6));
}

/// The initiator of [`target`]: SEND GPU → GPU; RDMA reads of the target's GPU memory into
/// its own GPU memory and host memory (checked here); RDMA write GPU → GPU of the whole
/// buffer, host → GPU of the first bytes, and a write-with-immediate of the tail carrying
/// the checksum.
pub fn initiator_from_env(driver: &'static Driver, checks: &Checks) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is set by the target"));
    let peer = EndpointInfo::parse(&unhex(&var(ENV_PEER))).unwrap();
    let dst = RemoteBuffer::parse(&unhex(&var(ENV_DST))).unwrap();
    let src_remote = RemoteBuffer::parse(&unhex(&var(ENV_SRC))).unwrap();
    let mem = Mem::parse(&var(ENV_MEM));
    let dev = driver.device(var(ENV_DEVICE).parse().unwrap()).unwrap();
    let ctx = efa();
    let rw = access(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())
        .unwrap()
        .prepare(0x44, None)
        .unwrap();
    let to_target = pd.connect(&peer).unwrap();

    let mut mine = register_gpu(&pd, &dev, mem, rw, checks);
    // Reads first: the target's src into GPU memory and host memory here.
    rdma(&qp, &cq, &to_target, mine.region(), src_remote, true);
    let expected = pattern(LEN, 3);
    same("read GPU <- remote GPU", &mine.to_vec().unwrap(), &expected);
    let host = pd.register_remote_write(vec![0u8; LEN], rw).unwrap();
    rdma(&qp, &cq, &to_target, &host, src_remote, true);
    same("read host <- remote GPU", &host.to_vec(), &expected);

    let data = pattern(LEN, 5);
    mine.copy_from_host(0, &data).unwrap();
    let mut s = SendBatch::<1>::new(&qp);
    s.send(1, &to_target, mine.sge(0, MSG as u64).unwrap())
        .unwrap();
    // SAFETY: `mine` is not written until the completion is polled.
    unsafe { qp.post_send(&s).unwrap() };
    cq.wait(TIMEOUT).unwrap().result().unwrap();
    let head = (LEN - TAIL) as u64;
    rdma(
        &qp,
        &cq,
        &to_target,
        mine.region(),
        dst.slice(0, head).unwrap(),
        false,
    );
    let small = pd.register(pattern(MSG, 6), AccessFlags::empty()).unwrap();
    rdma(
        &qp,
        &cq,
        &to_target,
        &small,
        dst.slice(0, MSG as u64).unwrap(),
        false,
    );
    let mut s = SendBatch::<1>::new(&qp);
    s.write_imm(
        2,
        &to_target,
        mine.sge(head, TAIL as u64).unwrap(),
        dst.slice(head, TAIL as u64).unwrap(),
        checksum(&data),
    )
    .unwrap();
    // SAFETY: as above.
    unsafe { qp.post_send(&s).unwrap() };
    cq.wait(TIMEOUT).unwrap().result().unwrap();
}
