//! One-sided RDMA write announced by a write-with-immediate, and a receiver that learns
//! its peers from the sender GIDs an extended CQ reports.
//!
//! ```text
//! cargo run --example rdma_write_imm
//! ```
//!
//! B (the target) starts knowing nobody. A sends B a 24-byte hello (its endpoint info);
//! B's extended CQ, made with [`CqOptions::sender_gid`], reports the GID of a sender B
//! has no address handle for, and B makes a [`Peer`] of it (an EFA target must hold an
//! AH for every initiator of RDMA). B answers with its buffer's [`RemoteBuffer`] (24
//! bytes). A RDMA-writes 64 KiB into it and announces the write with a zero-length
//! write-with-immediate; B's completion carries the immediate, and only then does B read
//! the bytes (copies only: peers may write the buffer at any time). A and B are two
//! devices when there are two (efa-sim makes two), else two PDs of one.
use std::time::Duration;

use efa::*;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const QKEY: u32 = 0x1234;
const LEN: usize = 64 * 1024;
const IMM: u32 = 0x00c0_ffee;
const WAIT: Duration = Duration::from_secs(10);

fn byte(i: usize) -> u8 {
    (i * 31 % 251) as u8
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rdma_write_imm: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let names: Vec<String> = DeviceList::new()?
        .efa()
        .map(|d| d.name().to_string())
        .collect();
    let first = names.first().ok_or("no EFA device")?;
    let ctx_a = Context::open_by_name(first)?;
    let ctx_b = Context::open_by_name(names.get(1).unwrap_or(first))?;
    for (ctx, need) in [
        (&ctx_a, DeviceCaps::RDMA_WRITE),
        (&ctx_b, DeviceCaps::CQ_WITH_SGID),
    ] {
        if !ctx.caps().contains(need) {
            return Err(format!(
                "{} lacks {need:?}, which this example shows",
                ctx.device_name()
            )
            .into());
        }
    }
    let (pd_a, pd_b) = (ctx_a.alloc_pd()?, ctx_b.alloc_pd()?);
    let cq_a = ctx_a.create_ext_cq(CqOptions::new(512).waitable())?;
    // B's CQ reports the GID of senders it has no AH for.
    let cq_b = ctx_b.create_ext_cq(CqOptions::new(512).sender_gid().waitable())?;
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, &QpConfig::srd())?
        .prepare(QKEY, None)?;
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, &QpConfig::srd())?
        .prepare(QKEY, None)?;

    // B: receives for the hello and the write-with-immediate (which consumes one).
    let hello_in = pd_b.register(vec![0u8; EndpointInfo::WIRE_SIZE], AccessFlags::LOCAL_WRITE)?;
    let target = pd_b.register_remote_write(vec![0u8; LEN], AccessFlags::LOCAL_WRITE)?;
    let mut r = RecvBatch::<2>::new(&qp_b);
    r.push(1, hello_in.sge_all()?)?;
    r.push(2, hello_in.sge(0, 0)?)?;
    // SAFETY: `hello_in` is read only after its receive completed.
    unsafe { qp_b.post_recv(&r)? };
    let reply_in = pd_a.register(vec![0u8; RemoteBuffer::WIRE_SIZE], AccessFlags::LOCAL_WRITE)?;
    let mut r = RecvBatch::<1>::new(&qp_a);
    r.push(3, reply_in.sge_all()?)?;
    // SAFETY: `reply_in` is read only after its receive completed.
    unsafe { qp_a.post_recv(&r)? };

    // A knows B's endpoint (a name service would give it); B knows nobody.
    let to_b = pd_a.connect(&qp_b.endpoint())?;
    let mut s = SendBatch::<1>::new(&qp_a);
    let hello = qp_a.endpoint().to_bytes();
    s.send_inline(10, &to_b, &hello)?;
    // SAFETY: inline: copied during the call.
    unsafe { qp_a.post_send(&s)? };
    cq_a.wait(WAIT)?.result()?;

    // B: the hello's completion names the sender.
    let c = *cq_b.wait(WAIT)?.result()?;
    let gid = c.sender_gid().ok_or("no sender GID in the completion")?;
    let info = EndpointInfo::parse(hello_in.as_slice())?;
    println!(
        "B: hello from GID {gid}, QP {} (no address handle for it yet)",
        c.src_qp()
    );
    if info.gid() != gid || info.qpn() != c.src_qp() {
        return Err("the hello and the completion name different senders".into());
    }
    let to_a = pd_b.connect(&EndpointInfo::new(gid, c.src_qp(), QKEY)?)?;
    let mut s = SendBatch::<1>::new(&qp_b);
    let remote = target.remote().to_bytes();
    s.send(11, &to_a, Payload::Inline(&remote[..]))?;
    // SAFETY: inline.
    unsafe { qp_b.post_send(&s)? };
    cq_b.wait(WAIT)?.result()?;

    // A: B's buffer arrived; write into it, then announce.
    let c = *cq_a.wait(WAIT)?.result()?;
    if c.wr_id() != 3 {
        return Err(format!("A expected B's reply, got {c:?}").into());
    }
    let remote = RemoteBuffer::parse(reply_in.as_slice())?;
    let data = pd_a.register(
        (0..LEN).map(byte).collect::<Vec<u8>>(),
        AccessFlags::empty(),
    )?;
    let mut s = SendBatch::<2>::new(&qp_a);
    s.write(20, &to_b, data.sge_all()?, remote)?;
    // SRD does not order the two: the announcement goes once the data completed.
    // SAFETY: `data` is not written while registered.
    unsafe { qp_a.post_send(&s)? };
    cq_a.wait(WAIT)?.result()?;
    let mut s = SendBatch::<1>::new(&qp_a);
    s.write_imm(21, &to_b, data.sge(0, 0)?, remote.slice(0, 0)?, IMM)?;
    // SAFETY: zero-length: names no memory.
    unsafe { qp_a.post_send(&s)? };
    cq_a.wait(WAIT)?.result()?;

    // B: the immediate says the data is there.
    let c = *cq_b.wait(WAIT)?.result()?;
    if c.opcode() != WcOpcode::RECV_RDMA_WITH_IMM || c.imm() != Some(IMM) {
        return Err(format!("B expected the write-with-immediate, got {c:?}").into());
    }
    let mut got = vec![0u8; LEN];
    target.copy_to_slice(0, &mut got)?;
    if let Some(i) = (0..LEN).find(|&i| got[i] != byte(i)) {
        return Err(format!("byte {i} of the write differs").into());
    }
    println!(
        "B: write-with-immediate 0x{IMM:x} from AH {:?}: {LEN} bytes written by A verified",
        c.sender_ah()
    );
    Ok(())
}
