//! GPUDirect RDMA between two processes: GPU memory in one process is RDMA-written
//! straight into GPU memory of the other, the last part as a write-with-immediate that
//! notifies the target, which then flushes the GPUDirect writes and checks every byte.
//!
//! 1. The target (this process) allocates `--bytes` on GPU `--device`, registers them
//!    for remote write (dma-buf, or `ibv_reg_mr` through nvidia_peermem), posts one
//!    receive for the notification and starts the initiator (this program again, with
//!    `--initiator`), handing it its endpoint info and the buffer's remote descriptor
//!    (24 bytes each, hex in the environment).
//! 2. The initiator fills a GPU buffer of its own with a pattern, RDMA-writes all but the
//!    last 64 bytes in chunks of the device's `max_rdma_size` (`Qp::write_all`), then the
//!    last 64 bytes as a write-with-immediate carrying a checksum of the whole pattern.
//! 3. The target polls the notification, flushes (`cuFlushGPUDirectRDMAWrites`, or
//!    nothing where the GPU orders NIC writes itself), copies its GPU buffer to the host
//!    and verifies every byte and the checksum.
//!
//! Run with `cargo run -p efa --features cuda --example gpu_rdma -- --bytes 1000000`.
//! In this workspace it runs on efa-sim and the software GPU (CI runs it, and
//! `tests/gpu_rdma.rs` checks its report); elsewhere use `efa-sim run --gpus 2 -- ...`, or
//! a real GPU and EFA.
use efa::cuda::{self, register, Device, DeviceAlloc, FlushScope, Flushed};
use efa::*;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Any failure of the example, with a message that says what went wrong.
pub type DemoResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const TAIL: u64 = 64; // bytes carried by the notifying write-with-immediate
const QKEY_TARGET: u32 = 0x6770_0001;
const QKEY_INITIATOR: u32 = 0x6770_0002;
const TIMEOUT: Duration = Duration::from_secs(30);
const ENV_PEER: &str = "EFA_GPU_RDMA_PEER";
const ENV_TARGET: &str = "EFA_GPU_RDMA_TARGET";
const ENV_DEVICE: &str = "EFA_GPU_RDMA_DEVICE";

/// Command-line settings.
pub struct Args {
    /// Bytes written from GPU to GPU.
    pub bytes: u64,
    /// CUDA device ordinal used on both sides.
    pub device: i32,
}

/// What the target received and verified.
pub struct Report {
    /// Firmware string of the EFA device (efa-sim names itself here).
    pub fw_ver: String,
    /// Bytes that arrived in GPU memory and matched.
    pub bytes: u64,
    /// The immediate value of the notification (the pattern's checksum).
    pub imm: u32,
    /// What the flush did.
    pub flushed: Flushed,
    /// How the target's GPU memory was registered.
    pub path: cuda::RegistrationPath,
}

/// Parses `--bytes N --device N` (the initiator is started with `--initiator`).
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> std::result::Result<Args, String> {
    let mut args = Args {
        bytes: 4 << 20,
        device: 0,
    };
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> std::result::Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--bytes" => args.bytes = num("--bytes")?,
            "--device" => {
                args.device =
                    i32::try_from(num("--device")?).map_err(|_| "--device is too large")?
            }
            "-h" | "--help" => {
                println!("usage: gpu_rdma [--bytes N] [--device N]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.bytes == 0 || args.bytes > u32::MAX as u64 {
        return Err("--bytes must be between 1 and 4294967295".into());
    }
    Ok(args)
}

/// Byte `i` of the pattern the initiator writes.
pub fn pattern_byte(i: u64) -> u8 {
    (i as u8).wrapping_mul(31) ^ (i >> 8) as u8
}

/// The checksum the notification carries (FNV-1a over the pattern, folded to 32 bits).
pub fn checksum(bytes: &[u8]) -> u32 {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (h ^ (h >> 32)) as u32
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> DemoResult<Vec<u8>> {
    if s.len() % 2 != 0 {
        return Err(format!("odd-length hex {s:?}").into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.into()))
        .collect()
}

fn env(name: &str) -> DemoResult<String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (the target sets it)").into())
}

/// The target side: receives the GPU-to-GPU write of `args.bytes`, started by `spawn`
/// (which gets the environment the initiator needs and must start it).
pub fn run_target(
    args: &Args,
    spawn: impl FnOnce(&[(&str, String)]) -> std::io::Result<Child>,
) -> DemoResult<Report> {
    let gpu = Device::get(args.device)?;
    let ctx = Context::open_first_efa()?;
    let fw_ver = ctx.query_device()?.fw_ver().to_owned();
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_ext_cq(CqOptions::new(512).waitable())?;
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())?
        .prepare(QKEY_TARGET, None)?;
    // RDMA from the initiator needs an AH for its GID here (one host: the same GID).
    let _ah = pd.create_ah(ctx.gid()?)?;

    // The target: GPU memory peers may write (owned, so it stays allocated if leaked).
    let mut dst = register(
        &pd,
        DeviceAlloc::new(&gpu, args.bytes as usize)?,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    )?;
    dst.fill(0)?;
    // The write-with-immediate consumes a receive; it carries no payload.
    let notice = pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE)?;
    let mut r = RecvBatch::<1>::new(&qp);
    r.push(1, notice.sge(0, 0)?)?;
    // SAFETY: the zero-length receive names no bytes; `notice` outlives it.
    unsafe { qp.post_recv(&r)? };

    let mut child = spawn(&[
        (ENV_PEER, hex(&qp.endpoint().to_bytes())),
        (ENV_TARGET, hex(&dst.remote().to_bytes())),
        (ENV_DEVICE, args.device.to_string()),
    ])?;
    let got = cq.wait(TIMEOUT);
    let status = wait_child(&mut child)?;
    if !status.success() {
        return Err(format!("the initiator failed: {status}").into());
    }
    let c = got?;
    c.result()?;
    if c.opcode() != WcOpcode::RECV_RDMA_WITH_IMM {
        return Err(format!("expected the write-with-immediate, got {:?}", c.opcode()).into());
    }
    let imm = c.imm().ok_or("the notification carries no immediate")?;

    // The NIC's writes are complete; order them before CUDA work (here: a copy) reads them.
    let flushed = dst.flush_gpudirect_writes(FlushScope::ToOwner)?;
    let data = dst.to_vec()?;
    if let Some(i) = (0..args.bytes).find(|&i| data[i as usize] != pattern_byte(i)) {
        return Err(format!(
            "byte {i} is {:#x}, expected {:#x}",
            data[i as usize],
            pattern_byte(i)
        )
        .into());
    }
    if imm != checksum(&data) {
        return Err(format!(
            "immediate {imm:#x} is not the data's checksum {:#x}",
            checksum(&data)
        )
        .into());
    }
    Ok(Report {
        fw_ver,
        bytes: args.bytes,
        imm,
        flushed,
        path: dst.path(),
    })
}

fn wait_child(child: &mut Child) -> DemoResult<std::process::ExitStatus> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the initiator did not finish in time (killed)".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The initiator side, from the environment [`run_target`] gave it.
pub fn run_initiator_from_env() -> DemoResult<()> {
    let peer = EndpointInfo::parse(&unhex(&env(ENV_PEER)?)?)?;
    let target = RemoteBuffer::parse(&unhex(&env(ENV_TARGET)?)?)?;
    let gpu = Device::get(env(ENV_DEVICE)?.parse()?)?;
    let ctx = Context::open_first_efa()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_ext_cq(CqOptions::new(512).waitable())?;
    let qp = pd
        .create_qp(&cq, &cq, &QpConfig::srd())?
        .prepare(QKEY_INITIATOR, None)?;
    let to_target = pd.connect(&peer)?;

    let n = target.len();
    let data: Vec<u8> = (0..n).map(pattern_byte).collect();
    let src = register(
        &pd,
        DeviceAlloc::from_host(&gpu, &data)?,
        AccessFlags::empty(),
    )?;
    let bulk = n.saturating_sub(TAIL);
    if bulk > 0 {
        // Chunks of at most max_rdma_size, never more in flight than the queue holds.
        let opts = Transfer::new(TIMEOUT);
        qp.write_all(
            &cq,
            &to_target,
            src.region(),
            target.slice(0, bulk)?,
            opts,
            |c| eprintln!("unexpected completion {c:?}"),
        )?;
    }
    // Every chunk completed: now the notification, with the rest of the bytes.
    let mut s = SendBatch::<1>::new(&qp);
    s.write_imm(
        1,
        &to_target,
        src.sge(bulk, n - bulk)?,
        target.slice(bulk, n - bulk)?,
        checksum(&data),
    )?;
    // SAFETY: `src` is not written after the post; its completion is polled next.
    unsafe { qp.post_send(&s)? };
    cq.wait(TIMEOUT)?.result()?;
    Ok(())
}

fn main() -> DemoResult<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--initiator") {
        return run_initiator_from_env();
    }
    let args = parse_args(argv)?;
    let r = run_target(&args, |env| {
        Command::new(std::env::current_exe()?)
            .arg("--initiator")
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .spawn()
    })?;
    println!(
        "{} bytes GPU->GPU between two processes on {} ({:?} registration), every byte verified; \
         notification imm {:#x}; flush: {:?}",
        r.bytes, r.fw_ver, r.path, r.imm, r.flushed
    );
    Ok(())
}
