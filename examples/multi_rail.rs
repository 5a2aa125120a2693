//! A multi-rail GPU→GPU transfer between two processes: one GPU buffer written into
//! another over QPs on several EFA devices at once, every byte verified, the target told
//! once that all of it landed.
//!
//! 1. The target (this process) picks `--rails` devices nearest GPU `--device`
//!    (`efa_cuda::InstanceTopology`: on a p5 the 4 NICs behind the GPU's PCIe switch),
//!    allocates `--bytes` on the GPU, registers that one allocation on each device's PD
//!    (an `Arc<DeviceAlloc>` per registration), posts the receives notices consume
//!    (`RailNotices`) and starts the initiator (this program with `--initiator`), handing
//!    it the device names, and per rail its QP's endpoint and the buffer's remote
//!    descriptor (hex in the environment).
//! 2. The initiator fills its own GPU buffer with a pattern, registers it on the same
//!    devices and writes it with `Rails::write_all`: chunks of `--chunk` bytes over every
//!    rail within each rail's queue depth, the last chunk of each rail a write-with-
//!    immediate notice posted once that rail's other chunks completed.
//! 3. The target waits for the transfer's notices (one per rail, counted across rails),
//!    flushes the GPUDirect writes, and checks every byte, reading back 16 MiB at a time.
//!
//! On efa-sim with the software GPU and a p5 shape:
//! `EFA_SIM_SHAPE=p5.48xlarge target/debug/efa-sim run --gpus 8 -- target/debug/examples/multi_rail --bytes 1073741824`
//! (CI runs it; `tests/multi_rail.rs` checks its report); or
//! `cargo run -p efa --features cuda --example multi_rail`.
use efa::cuda::{register, Device, DeviceAlloc, FlushScope, Flushed, InstanceTopology};
use efa::*;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Any failure of the example, with a message that says what went wrong.
pub type DemoResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const QKEY_TARGET: u32 = 0x6d72_0001;
const QKEY_INITIATOR: u32 = 0x6d72_0002;
const TRANSFER_ID: u32 = 0x1234;
const TIMEOUT: Duration = Duration::from_secs(60);
const PIECE: usize = 16 << 20; // bytes read back and compared at a time
const ENV_RAILS: &str = "EFA_MULTI_RAIL_RAILS";
const ENV_TARGETS: &str = "EFA_MULTI_RAIL_TARGETS";
const ENV_DEVICE: &str = "EFA_MULTI_RAIL_DEVICE";
const ENV_CHUNK: &str = "EFA_MULTI_RAIL_CHUNK";
const ENV_IN_FLIGHT: &str = "EFA_MULTI_RAIL_IN_FLIGHT";

/// Command-line settings.
pub struct Args {
    /// Bytes written from GPU to GPU.
    pub bytes: u64,
    /// CUDA device ordinal used on both sides.
    pub device: i32,
    /// Rails (EFA devices) to use.
    pub rails: usize,
    /// Chunk size in bytes.
    pub chunk: u32,
    /// Chunks in flight per rail at most (0: the queue depth).
    pub in_flight: u32,
}

/// What the target received and verified.
pub struct Report {
    /// Firmware string of the EFA devices (efa-sim names itself here).
    pub fw_ver: String,
    /// Bytes that arrived in GPU memory and matched.
    pub bytes: u64,
    /// The devices used, rail by rail.
    pub rails: Vec<String>,
    /// The notices the target counted (one per rail).
    pub notices: u32,
    /// From starting the initiator to the last notice.
    pub seconds: f64,
    /// What the flush did.
    pub flushed: Flushed,
}

/// Parses `--bytes N --device N --rails N --chunk N --in-flight N`.
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> std::result::Result<Args, String> {
    let mut args = Args {
        bytes: 64 << 20,
        device: 0,
        rails: 4,
        chunk: 1 << 20,
        in_flight: 0,
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
                args.device = i32::try_from(num("--device")?).map_err(|e| e.to_string())?
            }
            "--rails" => args.rails = num("--rails")? as usize,
            "--chunk" => args.chunk = u32::try_from(num("--chunk")?).map_err(|e| e.to_string())?,
            "--in-flight" => {
                args.in_flight = u32::try_from(num("--in-flight")?).map_err(|e| e.to_string())?
            }
            "-h" | "--help" => {
                println!(
                    "usage: multi_rail [--bytes N] [--device N] [--rails N] [--chunk N] [--in-flight N]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.bytes == 0 {
        return Err("--bytes must be at least 1".into());
    }
    if !(1..=efa::rail::MAX_RAILS).contains(&args.rails) {
        return Err(format!("--rails must be 1 to {}", efa::rail::MAX_RAILS));
    }
    if args.chunk == 0 {
        return Err("--chunk must be at least 1".into());
    }
    Ok(args)
}

/// Fills `buf` with the pattern's bytes from byte `offset` of the buffer on: 16 MiB of
/// hashed words (made once), repeated, with every 4 KiB block's first 8 bytes replaced
/// by that block's offset, so that a chunk landing in the wrong place shows. Cheap to
/// make (copies) for buffers of gigabytes, in debug builds too.
pub fn fill_pattern(buf: &mut [u8], offset: u64) {
    static BASE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| {
        (0..PIECE as u64 / 8)
            .flat_map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes())
            .collect()
    });
    let mut done = 0;
    while done < buf.len() {
        let at = ((offset + done as u64) % PIECE as u64) as usize;
        let n = (PIECE - at).min(buf.len() - done);
        buf[done..done + n].copy_from_slice(&base[at..at + n]);
        done += n;
    }
    let first_block = offset.div_ceil(4096) * 4096;
    for block in (first_block..offset + buf.len() as u64).step_by(4096) {
        let i = (block - offset) as usize;
        let n = 8.min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&block.to_le_bytes()[..n]);
    }
}

/// The `want` devices nearest GPU `ordinal` (its nearest first, then the others in
/// name order), or the first `want` devices where the topology cannot be read.
pub fn pick_rails(ordinal: i32, want: usize) -> DemoResult<Vec<String>> {
    let all: Vec<String> = DeviceList::new()?
        .efa()
        .map(|d| d.name().to_string())
        .collect();
    let nearest: Vec<String> = InstanceTopology::discover()
        .map(|t| t.nearest_devices(ordinal).to_vec())
        .unwrap_or_default();
    let mut picked: Vec<String> = nearest.into_iter().filter(|n| all.contains(n)).collect();
    picked.extend(
        all.iter()
            .filter(|n| !picked.contains(n))
            .cloned()
            .collect::<Vec<_>>(),
    );
    picked.truncate(want);
    if picked.len() < want {
        return Err(format!("{want} rails wanted, {} EFA devices found", all.len()).into());
    }
    Ok(picked)
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

/// The target side: receives the multi-rail write of `args.bytes`, started by `spawn`
/// (which gets the environment the initiator needs and must start it).
pub fn run_target(
    args: &Args,
    spawn: impl FnOnce(&[(&str, String)]) -> std::io::Result<Child>,
) -> DemoResult<Report> {
    let gpu = Device::get(args.device)?;
    let names = pick_rails(args.device, args.rails)?;
    let ctxs = names
        .iter()
        .map(|n| Context::open_by_name(n))
        .collect::<Result<Vec<_>>>()?;
    let fw_ver = ctxs[0].query_device()?.fw_ver().to_owned();
    let pds = ctxs
        .iter()
        .map(|c| c.alloc_pd())
        .collect::<Result<Vec<_>>>()?;
    let cqs = ctxs
        .iter()
        .map(|c| c.create_ext_cq(CqOptions::new(1024)))
        .collect::<Result<Vec<_>>>()?;
    let qps = (0..names.len())
        .map(|i| {
            pds[i]
                .create_qp(&cqs[i], &cqs[i], &QpConfig::srd())?
                .prepare(QKEY_TARGET, None)
        })
        .collect::<Result<Vec<_>>>()?;
    // RDMA from the initiator needs an AH for its GID on each device (one host: ours).
    let _ahs = (0..names.len())
        .map(|i| pds[i].create_ah(ctxs[i].gid()?))
        .collect::<Result<Vec<_>>>()?;

    // One GPU allocation, registered on every rail's PD.
    let mem = Arc::new(DeviceAlloc::new(&gpu, args.bytes as usize)?);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut dsts = pds
        .iter()
        .map(|pd| register(pd, Arc::clone(&mem), access))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    dsts[0].fill(0)?;
    // The notices consume zero-length receives (4 per rail).
    let notice_mrs = pds
        .iter()
        .map(|pd| pd.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE))
        .collect::<Result<Vec<_>>>()?;
    let mut notices = RailNotices::new();
    for i in 0..names.len() {
        notices.push(&qps[i], &cqs[i], notice_mrs[i].sge(0, 0)?, 4)?;
    }

    let targets: Vec<String> = (0..names.len())
        .map(|i| {
            format!(
                "{}:{}",
                hex(&qps[i].endpoint().to_bytes()),
                hex(&dsts[i].remote().to_bytes())
            )
        })
        .collect();
    let started = Instant::now();
    let mut child = spawn(&[
        (ENV_RAILS, names.join(",")),
        (ENV_TARGETS, targets.join(",")),
        (ENV_DEVICE, args.device.to_string()),
        (ENV_CHUNK, args.chunk.to_string()),
        (ENV_IN_FLIGHT, args.in_flight.to_string()),
    ])?;
    let landed = notices.wait(TRANSFER_ID, TIMEOUT, |r, c| {
        eprintln!("rail {r}: unexpected completion {c:?}")
    });
    let seconds = started.elapsed().as_secs_f64();
    let status = wait_child(&mut child)?;
    if !status.success() {
        return Err(format!("the initiator failed: {status}").into());
    }
    let landed = landed?;

    // Every notice arrived: order the NIC's writes before CUDA work (a copy) reads them.
    let flushed = dsts[0].flush_gpudirect_writes(FlushScope::ToOwner)?;
    let (mut got, mut want) = (vec![0u8; PIECE], vec![0u8; PIECE]);
    let mut at = 0u64;
    while at < args.bytes {
        let n = PIECE.min((args.bytes - at) as usize);
        dsts[0].copy_to_host(at as usize, &mut got[..n])?;
        fill_pattern(&mut want[..n], at);
        if got[..n] != want[..n] {
            let i = (0..n).find(|&i| got[i] != want[i]).unwrap_or(0);
            return Err(format!(
                "byte {} is {:#x}, expected {:#x}",
                at + i as u64,
                got[i],
                want[i]
            )
            .into());
        }
        at += n as u64;
    }
    Ok(Report {
        fw_ver,
        bytes: args.bytes,
        rails: names,
        notices: landed.notices,
        seconds,
        flushed,
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
    let names: Vec<String> = env(ENV_RAILS)?.split(',').map(str::to_string).collect();
    let targets = env(ENV_TARGETS)?
        .split(',')
        .map(|t| {
            let (ep, rb) = t.split_once(':').ok_or("a target is endpoint:remote")?;
            Ok((
                EndpointInfo::parse(&unhex(ep)?)?,
                RemoteBuffer::parse(&unhex(rb)?)?,
            ))
        })
        .collect::<DemoResult<Vec<_>>>()?;
    let gpu = Device::get(env(ENV_DEVICE)?.parse()?)?;
    let chunk: u32 = env(ENV_CHUNK)?.parse()?;
    let in_flight: u32 = env(ENV_IN_FLIGHT)?.parse()?;
    let ctxs = names
        .iter()
        .map(|n| Context::open_by_name(n))
        .collect::<Result<Vec<_>>>()?;
    let pds = ctxs
        .iter()
        .map(|c| c.alloc_pd())
        .collect::<Result<Vec<_>>>()?;
    let cqs = ctxs
        .iter()
        .map(|c| c.create_ext_cq(CqOptions::new(1024)))
        .collect::<Result<Vec<_>>>()?;
    let qps = (0..names.len())
        .map(|i| {
            pds[i]
                .create_qp(&cqs[i], &cqs[i], &QpConfig::srd())?
                .prepare(QKEY_INITIATOR, None)
        })
        .collect::<Result<Vec<_>>>()?;
    let peers = (0..names.len())
        .map(|i| pds[i].connect(&targets[i].0))
        .collect::<Result<Vec<_>>>()?;

    // The pattern, copied to the GPU 16 MiB at a time.
    let len = targets[0].1.len() as usize;
    let mut src = DeviceAlloc::new(&gpu, len)?;
    let mut piece = vec![0u8; PIECE];
    for at in (0..len).step_by(PIECE) {
        let n = PIECE.min(len - at);
        fill_pattern(&mut piece[..n], at as u64);
        src.copy_from_host(at, &piece[..n])?;
    }
    let src = Arc::new(src);
    let regs = pds
        .iter()
        .map(|pd| register(pd, Arc::clone(&src), AccessFlags::empty()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let srcs: Vec<&dyn MemoryRegion> = regs.iter().map(|r| r.region()).collect();
    let remotes: Vec<RemoteBuffer> = targets.iter().map(|t| t.1).collect();
    let mut rails = Rails::new();
    for i in 0..names.len() {
        rails.push(&qps[i], &cqs[i], &peers[i])?;
    }
    let started = Instant::now();
    let mut opts = RailTransfer::new(TRANSFER_ID, TIMEOUT).chunk_size(chunk);
    if in_flight > 0 {
        opts = opts.in_flight(in_flight);
    }
    let report = rails.write_all(&srcs, &remotes, opts, |r, c| {
        eprintln!("rail {r}: unexpected completion {c:?}")
    })?;
    let secs = started.elapsed().as_secs_f64();
    for (name, t) in names.iter().zip(&report.rails) {
        println!("initiator: {name}: {} chunks, {} bytes", t.chunks, t.bytes);
    }
    println!(
        "initiator: {} bytes in {} chunks over {} rails in {secs:.3} s ({:.2} GB/s)",
        report.bytes,
        report.chunks,
        names.len(),
        report.bytes as f64 / secs / 1e9
    );
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
        "{} bytes GPU->GPU between two processes over {} rails ({}) on {}, every byte verified; \
         {} notices counted at the target, {:.3} s from start to the last notice; flush: {:?}",
        r.bytes,
        r.rails.len(),
        r.rails.join(" "),
        r.fw_ver,
        r.notices,
        r.seconds,
        r.flushed
    );
    Ok(())
}
