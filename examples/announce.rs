//! A user's program with (or without) the classic SRD ordering bug: A RDMA-writes a
//! 64 KiB body into B's buffer and announces it with a SEND; B reads the body as soon as
//! the announcement arrives. SRD does not order the two, so only announcing after the
//! write's own completion is correct.
//!
//! ```text
//! cargo run --example announce -- same      # bug: write and SEND in one doorbell
//! cargo run --example announce -- separate  # bug: SEND in a second doorbell, posted
//!                                           #      before the write completed
//! cargo run --example announce -- fixed     # SEND once the write completed
//! ```
//!
//! Exits 0 when B found the whole body, 3 when B read a stale body (the bug showed), 1 on
//! any other failure (including a body still missing after the write's own completion,
//! which SRD guarantees). Run under `EFA_SIM_PROFILE=strict`, the two buggy variants fail
//! in every run (tests/strict_announce.rs runs each once per seed).
use std::time::Duration;

use efa::*;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const QKEY: u32 = 0x1234;
const LEN: usize = 64 * 1024;
const WAIT: Duration = Duration::from_secs(10);

fn byte(i: usize) -> u8 {
    (i * 31 % 251) as u8 | 1
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Same,
    Separate,
    Fixed,
}

fn main() {
    let variant = match std::env::args().nth(1).as_deref() {
        Some("same") => Variant::Same,
        Some("separate") => Variant::Separate,
        Some("fixed") => Variant::Fixed,
        _ => {
            eprintln!("usage: announce same|separate|fixed");
            std::process::exit(1);
        }
    };
    match run(variant) {
        Ok(true) => println!("fresh: B read the whole body after the announcement"),
        Ok(false) => {
            println!("stale: B read the body before it landed");
            std::process::exit(3);
        }
        Err(e) => {
            eprintln!("announce: {e}");
            std::process::exit(1);
        }
    }
}

/// Whether B found the whole body when the announcement arrived.
fn run(variant: Variant) -> Res<bool> {
    let names: Vec<String> = DeviceList::new()?
        .efa()
        .map(|d| d.name().to_string())
        .collect();
    let first = names.first().ok_or("no EFA device")?;
    let ctx_a = Context::open_by_name(first)?;
    let ctx_b = Context::open_by_name(names.get(1).unwrap_or(first))?;
    if !ctx_a.caps().contains(DeviceCaps::RDMA_WRITE) {
        return Err(format!("{} lacks RDMA write", ctx_a.device_name()).into());
    }
    let (pd_a, pd_b) = (ctx_a.alloc_pd()?, ctx_b.alloc_pd()?);
    let cq_a = ctx_a.create_ext_cq(CqOptions::new(1024))?;
    let cq_b = ctx_b.create_ext_cq(CqOptions::new(1024))?;
    let qp_a = pd_a
        .create_qp(&cq_a, &cq_a, &QpConfig::srd())?
        .prepare(QKEY, None)?;
    let qp_b = pd_b
        .create_qp(&cq_b, &cq_b, &QpConfig::srd())?
        .prepare(QKEY, None)?;
    let to_b = pd_a.connect(&qp_b.endpoint())?;
    // An EFA target holds an AH for every initiator of RDMA.
    let _to_a = pd_b.connect(&qp_a.endpoint())?;

    let target = pd_b.register_remote_write(vec![0u8; LEN], AccessFlags::LOCAL_WRITE)?;
    let note_in = pd_b.register(vec![0u8; 8], AccessFlags::LOCAL_WRITE)?;
    let mut r = RecvBatch::<1>::new(&qp_b);
    r.push(1, note_in.sge_all()?)?;
    // SAFETY: `note_in` is read only after its receive completed.
    unsafe { qp_b.post_recv(&r)? };

    let data = pd_a.register(
        (0..LEN).map(byte).collect::<Vec<u8>>(),
        AccessFlags::empty(),
    )?;
    let remote = target.remote();
    let note = *b"body-up!";
    let mut a_done = 0;
    match variant {
        Variant::Same => {
            let mut s = SendBatch::<2>::new(&qp_a);
            s.write(20, &to_b, data.sge_all()?, remote)?;
            s.send_inline(21, &to_b, &note)?;
            // SAFETY: `data` is not written while registered; the note is inline.
            unsafe { qp_a.post_send(&s)? };
        }
        Variant::Separate | Variant::Fixed => {
            let mut s = SendBatch::<1>::new(&qp_a);
            s.write(20, &to_b, data.sge_all()?, remote)?;
            // SAFETY: `data` is not written while registered.
            unsafe { qp_a.post_send(&s)? };
            if variant == Variant::Fixed {
                // The fix: announce only once the write has completed.
                let c = cq_a.wait(WAIT)?;
                c.result()?;
                a_done += 1;
            }
            let mut s = SendBatch::<1>::new(&qp_a);
            s.send_inline(21, &to_b, &note)?;
            // SAFETY: inline: copied during the call.
            unsafe { qp_a.post_send(&s)? };
        }
    }

    // B: the announcement says the body is there; read it at once.
    let c = cq_b.wait(WAIT)?;
    c.result()?;
    let mut got = vec![0u8; LEN];
    target.copy_to_slice(0, &mut got)?;
    let fresh = (0..LEN).all(|i| got[i] == byte(i));

    // A: both completions; then the body must be there (SRD's own guarantee).
    while a_done < 2 {
        cq_a.wait(WAIT)?.result()?;
        a_done += 1;
    }
    target.copy_to_slice(0, &mut got)?;
    if let Some(i) = (0..LEN).find(|&i| got[i] != byte(i)) {
        return Err(format!("byte {i} of the body missing after the write completed").into());
    }
    Ok(fresh)
}
