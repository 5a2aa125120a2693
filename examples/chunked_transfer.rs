//! A transfer larger than the device's largest RDMA operation (`max_rdma_size`), split
//! into chunks: once with [`Qp::write_all`] / [`Qp::read_all`] (the crate keeps the send
//! queue full and waits), once by hand with [`RdmaChunks`] and
//! [`SendBatch::fill_writes`] (for callers that poll themselves).
//!
//! ```text
//! cargo run --example chunked_transfer -- [BYTES]
//! EFA_SIM_PROFILE=max_rdma_size=65536 cargo run --example chunked_transfer   # efa-sim
//! ```
//!
//! By default it moves four chunks and a bit (`4 * max_rdma_size + 4097`, at most
//! 64 MiB) and checks every byte at the target and after the read back.
use std::time::Duration;

use efa::*;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);

fn byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 16) as u8
}

fn main() {
    let bytes = std::env::args().nth(1).map(|a| a.parse::<u64>());
    let r = match bytes {
        Some(Err(_)) => Err("usage: chunked_transfer [BYTES]".into()),
        Some(Ok(n)) => run(Some(n)),
        None => run(None),
    };
    if let Err(e) = r {
        eprintln!("chunked_transfer: {e}");
        std::process::exit(1);
    }
}

fn run(bytes: Option<u64>) -> Res<()> {
    let ctx = Context::open_first_efa()?;
    let caps = ctx.caps();
    if !caps.contains(DeviceCaps::RDMA_WRITE | DeviceCaps::RDMA_READ) {
        return Err(format!("{} lacks RDMA write or read", ctx.device_name()).into());
    }
    let max = ctx.query_efa()?.max_rdma_size;
    let len = bytes.unwrap_or((4 * max as u64 + 4097).min(64 << 20));
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable())?;
    let a = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(1, None)?;
    let b = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(2, None)?;
    let to_b = pd.connect(&b.endpoint())?;
    let src = pd.register(
        (0..len).map(byte).collect::<Vec<u8>>(),
        AccessFlags::empty(),
    )?;
    let target = pd.register_remote_write(
        vec![0u8; len as usize],
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let remote = target.remote();
    let chunks = RdmaChunks::new(&src, 0, remote, max)?.total();
    println!("{len} bytes, max_rdma_size {max}: {chunks} chunks");

    // 1. The crate does it: write, then read back.
    let n = a.write_all(&cq, &to_b, &src, remote, Transfer::new(WAIT), |c| {
        eprintln!("unexpected completion {c:?}");
    })?;
    check(&target.to_vec(), "written")?;
    let mut back = pd.register(vec![0u8; len as usize], AccessFlags::LOCAL_WRITE)?;
    a.read_all(&cq, &to_b, &mut back, remote, Transfer::new(WAIT), |_| {})?;
    check(back.as_slice(), "read back")?;
    println!("write_all + read_all: {n} chunks each way, every byte verified");

    // 2. By hand: fill batches from the chunk iterator, post, poll, until all done.
    let zeros = vec![0u8; len as usize];
    let mut target = target;
    target.copy_from_slice(0, &zeros)?;
    let mut it = RdmaChunks::new(&src, 0, remote, max)?;
    let (mut posted, mut done) = (0u64, 0u64);
    let depth = a.limits().max_send_wr() as u64;
    while done < chunks {
        let mut batch = SendBatch::<16>::new(&a);
        // Never more in flight than the send queue holds.
        let n = if posted - done + 16 <= depth {
            batch.fill_writes(100, &to_b, &mut it)?
        } else {
            0
        };
        if n > 0 {
            // SAFETY: `src` is not written while registered.
            unsafe { a.post_send(&batch)? };
            posted += n as u64;
        }
        let mut got = ArrayVec::<Completion, 16>::new();
        cq.poll_until(&mut got, 1, WAIT)?;
        for c in &got {
            c.result()?;
            done += 1;
        }
    }
    check(&target.to_vec(), "written by hand")?;
    println!("fill_writes: {posted} chunks in batches of up to 16, every byte verified");
    Ok(())
}

fn check(got: &[u8], what: &str) -> Res<()> {
    match (0..got.len()).find(|&i| got[i] != byte(i as u64)) {
        None => Ok(()),
        Some(i) => Err(format!("byte {i} {what} differs").into()),
    }
}
