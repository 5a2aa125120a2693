//! Real SRD traffic between two queue pairs, on two EFA devices when there are two
//! (efa-sim provides two by default), else on one.
//!
//! 1. Ping: `--messages` 64-byte SENDs from A to B, each carrying its sequence number
//!    and a checksum that B verifies (SRD does not keep order, so B counts, not expects).
//! 2. RDMA WRITE of `--bytes` from A into B's memory (`Qp::write_all`: split at the
//!    device's `max_rdma_size`, within the send queue's depth), announced by a
//!    write-with-immediate; B checks every byte.
//! 3. RDMA READ of the same range back into A (`Qp::read_all`); A checks every byte.
//!
//! Run with `cargo run --release --example srd_demo -- [--messages N] [--bytes N]` (the
//! README's main job is now `efa-perf local`, through `./scripts/demo.sh`).
use efa::*;
use std::time::{Duration, Instant};

/// Any failure of the demo, with a message that says what went wrong.
pub type DemoResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const MSG: usize = 64;
const RING: usize = 128; // receives kept posted at B (the default RQ holds 256)
const BATCH: usize = 16; // sends per doorbell

/// Command-line settings.
pub struct Args {
    /// Number of 64-byte SENDs.
    pub messages: u64,
    /// Bytes moved by RDMA write and read back.
    pub bytes: u64,
}

/// What the demo moved and verified, and on which device.
pub struct Report {
    /// Firmware string of device A (efa-sim names itself here).
    pub fw_ver: String,
    /// SENDs delivered and verified.
    pub messages: u64,
    /// Bytes written and read back, None when the device lacks RDMA.
    pub rdma_bytes: Option<u64>,
}

/// Parses `--messages N --bytes N`.
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> std::result::Result<Args, String> {
    let mut args = Args {
        messages: 100_000,
        bytes: 8 << 20,
    };
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> std::result::Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--messages" => args.messages = num("--messages")?,
            "--bytes" => args.bytes = num("--bytes")?,
            "-h" | "--help" => {
                println!("usage: srd_demo [--messages N] [--bytes N]");
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

/// A 64-byte message: sequence number, then bytes derived from it, then a checksum.
fn fill_message(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf[8..MSG - 8].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    let sum = checksum(&buf[..MSG - 8]);
    buf[MSG - 8..MSG].copy_from_slice(&sum.to_le_bytes());
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn check_message(buf: &[u8]) -> Option<u64> {
    let sum = u64::from_le_bytes(buf[MSG - 8..MSG].try_into().ok()?);
    (checksum(&buf[..MSG - 8]) == sum).then(|| u64::from_le_bytes(buf[..8].try_into().unwrap()))
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// How long any one step may take.
const STEP: Duration = Duration::from_secs(30);

/// Waits for one completion of `cq`, failing on error statuses.
fn wait_one<C: CompletionQueue>(cq: &C, what: &str) -> DemoResult<Completion> {
    match cq.wait(STEP) {
        Ok(c) => Ok(*c.result()?),
        Err(Error::Timeout) => Err(format!("timed out waiting for {what}").into()),
        Err(e) => Err(e.into()),
    }
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("srd_demo: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("srd_demo: {e}");
        std::process::exit(1);
    }
}

/// Runs the three phases; errors say what failed.
pub fn run(args: &Args) -> DemoResult<Report> {
    const NO_DEVICE: &str = "no EFA device found (on a machine without EFA, run it with cargo run --example srd_demo, which uses the software device)";
    let names: Vec<String> = match DeviceList::new() {
        Ok(list) => list.efa().map(|d| d.name().to_string()).collect(),
        Err(e) => return Err(format!("{NO_DEVICE}: {e}").into()),
    };
    if names.is_empty() {
        return Err(NO_DEVICE.into());
    }
    let (name_a, name_b) = (&names[0], names.get(1).unwrap_or(&names[0]));
    let ctx_a = Context::open_by_name(name_a)?;
    let ctx_b = Context::open_by_name(name_b)?;
    let attr = ctx_a.query_device()?;
    let efa = ctx_a.query_efa()?;
    println!(
        "devices: A={name_a} B={name_b}  fw={}  vendor=0x{:04x} part=0x{:04x}",
        attr.fw_ver(),
        attr.vendor_id(),
        attr.vendor_part_id()
    );
    println!(
        "caps: {:?}  max_rdma_size={}",
        ctx_a.caps(),
        efa.max_rdma_size
    );

    let pd_a = ctx_a.alloc_pd()?;
    let pd_b = ctx_b.alloc_pd()?;
    let cq_a = ctx_a.create_ext_cq(CqOptions::new(1024).waitable())?;
    let cq_b = ctx_b.create_ext_cq(CqOptions::new(1024).waitable())?;
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, &QpConfig::srd())?
        .prepare(0x1111, None)?;
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, &QpConfig::srd())?
        .prepare(0x2222, None)?;

    // Endpoint exchange: 24 bytes each way (here within one process).
    let wire_a = qp_a.endpoint().to_bytes();
    let wire_b = qp_b.endpoint().to_bytes();
    let to_b = pd_a.connect(&EndpointInfo::parse(&wire_b)?)?;
    // B must know A (an address handle) before A's RDMA may target B.
    let _to_a = pd_b.connect(&EndpointInfo::parse(&wire_a)?)?;
    println!(
        "A: qpn={} gid={:?}\nB: qpn={} gid={:?}",
        qp_a.endpoint().qpn(),
        qp_a.endpoint().gid(),
        qp_b.endpoint().qpn(),
        qp_b.endpoint().gid()
    );

    let link = Link {
        pd_a: &pd_a,
        pd_b: &pd_b,
        qp_a: &qp_a,
        qp_b: &qp_b,
        cq_a: &cq_a,
        cq_b: &cq_b,
        to_b: &to_b,
    };
    ping(args.messages, &link)?;
    let caps = ctx_a.caps();
    let rdma_bytes =
        if caps.contains(DeviceCaps::RDMA_WRITE) && caps.contains(DeviceCaps::RDMA_READ) {
            rdma(args.bytes, efa.max_rdma_size, &link)?;
            Some(args.bytes)
        } else {
            println!("rdma: skipped, the device lacks RDMA read/write");
            None
        };
    println!("ok");
    Ok(Report {
        fw_ver: attr.fw_ver().to_string(),
        messages: args.messages,
        rdma_bytes,
    })
}

/// A PD borrowing its context, and what hangs off it.
type BPd<'a> = Pd<&'a Context>;

/// Both ends of the demo: A sends and initiates RDMA, B receives and is the RDMA target.
struct Link<'a> {
    pd_a: &'a BPd<'a>,
    pd_b: &'a BPd<'a>,
    qp_a: &'a Qp<&'a BPd<'a>, Rts>,
    qp_b: &'a Qp<&'a BPd<'a>, Rts>,
    cq_a: &'a ExtCq<&'a Context>,
    cq_b: &'a ExtCq<&'a Context>,
    to_b: &'a Peer<&'a BPd<'a>>,
}

fn ping(messages: u64, link: &Link) -> DemoResult<()> {
    let Link {
        pd_a,
        pd_b,
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        to_b,
    } = *link;
    let mut src = pd_a.register(vec![0u8; MSG * BATCH], AccessFlags::empty())?;
    let ring = pd_b.register(vec![0u8; MSG * RING], AccessFlags::LOCAL_WRITE)?;
    // Keep every ring slot posted; wr_id = slot index.
    for chunk in (0..RING as u64).collect::<Vec<_>>().chunks(32) {
        let mut recvs = RecvBatch::<32>::new(qp_b);
        for &slot in chunk {
            recvs.push(slot, ring.sge(slot * MSG as u64, MSG as u64)?)?;
        }
        // SAFETY: ring slots are read only after their receive completion is polled.
        unsafe { qp_b.post_recv(&recvs)? };
    }
    let start = Instant::now();
    let (mut sent, mut acked, mut received) = (0u64, 0u64, 0u64);
    let mut seen = vec![false; messages as usize];
    while received < messages {
        // A: one doorbell per batch, only when all earlier sends completed (src is reused).
        if sent == acked && sent < messages {
            let n = BATCH.min((messages - sent) as usize);
            for i in 0..n {
                fill_message(
                    &mut src.as_mut_slice()[i * MSG..(i + 1) * MSG],
                    sent + i as u64,
                );
            }
            let mut batch = SendBatch::<BATCH>::new(qp_a);
            for i in 0..n {
                batch.send(
                    sent + i as u64,
                    to_b,
                    src.sge((i * MSG) as u64, MSG as u64)?,
                )?;
            }
            // SAFETY: src is rewritten only after all n send completions are polled.
            unsafe { qp_a.post_send(&batch)? };
            sent += n as u64;
        }
        let mut got = ArrayVec::<Completion, 32>::new();
        cq_a.poll(&mut got)?;
        for c in &got {
            c.result()?;
            acked += 1;
        }
        got.clear();
        cq_b.poll(&mut got)?;
        let mut repost = RecvBatch::<32>::new(qp_b);
        for c in &got {
            c.result()?;
            let slot = c.wr_id();
            let at = (slot as usize) * MSG;
            let msg = &ring.as_slice()[at..at + MSG];
            let Some(seq) = check_message(msg).filter(|&s| s < messages) else {
                return Err(format!("ping: corrupt message in slot {slot}").into());
            };
            if std::mem::replace(&mut seen[seq as usize], true) {
                return Err(format!("ping: message {seq} delivered twice").into());
            }
            received += 1;
            repost.push(slot, ring.sge(slot * MSG as u64, MSG as u64)?)?;
        }
        if !repost.is_empty() {
            // SAFETY: as above, slots are read only after their completion.
            unsafe { qp_b.post_recv(&repost)? };
        }
    }
    while acked < sent {
        wait_one(cq_a, "send completion")?;
        acked += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "ping: {messages} x {MSG}-byte SENDs verified in {:.3} s ({:.0} msg/s)",
        secs,
        messages as f64 / secs
    );
    Ok(())
}

fn rdma(bytes: u64, max_rdma: u32, link: &Link) -> DemoResult<()> {
    let Link {
        pd_a,
        pd_b,
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        to_b,
    } = *link;
    let data: Vec<u8> = (0..bytes).map(pattern).collect();
    let src = pd_a.register(data, AccessFlags::LOCAL_WRITE)?;
    // Peers may write the target: it is reached by copying only.
    let target = pd_b.register_remote_write(
        vec![0u8; bytes as usize],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let mut back = pd_a.register(vec![0u8; bytes as usize], AccessFlags::LOCAL_WRITE)?;
    let notice = pd_b.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE)?;
    let remote = target.remote(); // what B would send A: address, length, rkey

    // B expects one write-with-immediate announcing the transfer.
    let mut recv = RecvBatch::<1>::new(qp_b);
    recv.push(99, notice.sge_all()?)?;
    // SAFETY: `notice` is not accessed until the completion is polled.
    unsafe { qp_b.post_recv(&recv)? };

    let mut stray = 0;
    let start = Instant::now();
    let opts = Transfer::new(STEP);
    let chunks = qp_a.write_all(cq_a, to_b, &src, remote, opts, |_| stray += 1)?;
    // The write-with-immediate carries no payload beyond its last byte; it orders nothing
    // (SRD is unordered), which is why write_all waited for every chunk's completion.
    let mut fin = SendBatch::<1>::new(qp_a);
    fin.write_imm(2, to_b, src.sge(0, 1)?, remote.slice(0, 1)?, chunks as u32)?;
    // SAFETY: `src` is not written while registered; the completion is awaited next.
    unsafe { qp_a.post_send(&fin)? };
    wait_one(cq_a, "write-with-immediate completion")?;
    let c = wait_one(cq_b, "write-with-immediate at B")?;
    let secs = start.elapsed().as_secs_f64();
    if c.imm() != Some(chunks as u32) {
        return Err(format!("rdma write: immediate {:?}, expected {chunks}", c.imm()).into());
    }
    let landed = target.to_vec();
    if let Some(i) = (0..bytes).find(|&i| landed[i as usize] != pattern(i)) {
        return Err(format!("rdma write: byte {i} differs at B").into());
    }
    println!(
        "rdma write: {bytes} bytes in {chunks} chunk(s) of <= {max_rdma} verified at B ({:.2} GB/s)",
        bytes as f64 / secs / 1e9
    );

    let start = Instant::now();
    qp_a.read_all(cq_a, to_b, &mut back, remote, opts, |_| stray += 1)?;
    let secs = start.elapsed().as_secs_f64();
    if back.as_slice() != src.as_slice() {
        return Err("rdma read: data read back differs".into());
    }
    if stray != 0 {
        return Err(format!("rdma: {stray} completions of no transfer").into());
    }
    println!(
        "rdma read: {bytes} bytes read back and verified at A ({:.2} GB/s)",
        bytes as f64 / secs / 1e9
    );
    Ok(())
}
