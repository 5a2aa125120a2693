//! The Rust side of every case: the safe API doing what csrc/vs_c.c does, as a user of
//! `efa` writes it (SGEs made from the registration per work request, batches built for
//! their QP, every check of the safe API included).
//!
//! Each function is `#[no_mangle]` and never inlined, so that callgrind can count its
//! instructions by name (`--toggle-collect=vs_ours_*`), next to the C function of the
//! same case (`vs_c_*`).

use std::hint::black_box;

use efa::*;

use crate::rig::{Rig, RigQp, SharedPd, BATCH, ROUND_TRIP, SLOTS};

/// Empty polls after which a drain gives up (as the C side's `SPIN_LIMIT`).
const SPIN_LIMIT: u32 = 1 << 28;
const SLOT_MASK: u32 = SLOTS - 1;

/// `count` SENDs of `len` bytes, one doorbell each, from slot `i % SLOTS` of `src`.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_send(rig: &Rig, len: u32, wr_id: u64, count: u32) -> Result<()> {
    for i in 0..count {
        let off = ((i & SLOT_MASK) * len) as u64;
        let mut b = SendBatch::<1>::new(&rig.a);
        b.send(wr_id + i as u64, &rig.to_b, rig.src.sge(off, len as u64)?)?;
        // SAFETY: `src` is never written while registered.
        unsafe { rig.a.post_send(&b)? };
    }
    Ok(())
}

/// `count` RDMA writes of `len` bytes, one doorbell each, slot `i % SLOTS` to the same
/// slot of the target.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_write(rig: &Rig, len: u32, wr_id: u64, count: u32) -> Result<()> {
    for i in 0..count {
        let off = ((i & SLOT_MASK) * len) as u64;
        let mut b = SendBatch::<1>::new(&rig.a);
        b.write(
            wr_id + i as u64,
            &rig.to_b,
            rig.src.sge(off, len as u64)?,
            rig.remote.slice(off, len as u64)?,
        )?;
        // SAFETY: as in `vs_ours_send`.
        unsafe { rig.a.post_send(&b)? };
    }
    Ok(())
}

/// `count` inline SENDs of the rig's 16-byte payload.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_send_inline(rig: &Rig, wr_id: u64, count: u32) -> Result<()> {
    for i in 0..count {
        let mut b = SendBatch::<1>::new(&rig.a);
        b.send_inline(wr_id + i as u64, &rig.to_b, &rig.inline)?;
        // SAFETY: inline payloads are copied during the call.
        unsafe { rig.a.post_send(&b)? };
    }
    Ok(())
}

/// `count` SENDs of two SGEs of `len` bytes each.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_send_2sge(rig: &Rig, len: u32, wr_id: u64, count: u32) -> Result<()> {
    for i in 0..count {
        let off = ((i & SLOT_MASK) * 2 * len) as u64;
        let list = SgeList::<2>::new(&[
            rig.src.sge(off, len as u64)?,
            rig.src.sge(off + len as u64, len as u64)?,
        ])?;
        let mut b = SendBatch::<1>::new(&rig.a);
        b.send(wr_id + i as u64, &rig.to_b, &list)?;
        // SAFETY: as in `vs_ours_send`.
        unsafe { rig.a.post_send(&b)? };
    }
    Ok(())
}

/// One doorbell of `n` (at most [`BATCH`]) RDMA writes of `len` bytes from `src` to
/// `remote`, each handed to the provider as it is checked ([`Qp::post_with`]).
#[no_mangle]
#[inline(never)]
pub fn vs_ours_write_batch(
    a: &mut RigQp,
    to: &Peer<SharedPd>,
    src: &Mr<SharedPd, Vec<u8>>,
    remote: RemoteBuffer,
    (len, n, wr_id): (u32, u32, u64),
) -> Result<()> {
    // SAFETY: as in `vs_ours_send`.
    unsafe {
        a.post_with(|s| {
            for i in 0..n {
                let off = (i * len) as u64;
                s.write(
                    wr_id + i as u64,
                    to,
                    src.sge(off, len as u64)?,
                    remote.slice(off, len as u64)?,
                )?;
            }
            Ok(())
        })
    }
}

/// Builds a batch of `n` RDMA writes without posting it; returns its length.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_build_writes(rig: &Rig, len: u32, n: u32, wr_id: u64) -> Result<usize> {
    let mut b = SendBatch::<{ BATCH as usize }>::new(&rig.a);
    for i in 0..n {
        let off = (i * len) as u64;
        b.write(
            wr_id + i as u64,
            &rig.to_b,
            rig.src.sge(off, len as u64)?,
            rig.remote.slice(off, len as u64)?,
        )?;
    }
    Ok(black_box(&b).len())
}

/// Polls `cq` into `out` until it holds `n` completions.
#[inline(always)]
fn collect<Q: CompletionQueue, const N: usize>(
    cq: &Q,
    out: &mut ArrayVec<Completion, N>,
    n: usize,
) -> Result<()> {
    let mut empty = 0;
    while out.len() < n {
        if cq.poll(out)? == 0 {
            empty += 1;
            if empty == SPIN_LIMIT {
                return Err(Error::Timeout);
            }
        }
    }
    Ok(())
}

/// `n` (at most [`ROUND_TRIP`]) receives on `e`, `n` SENDs to it in one doorbell, and a
/// drain of the `2n` completions of both from `cq_a` into `out`.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_round_trip(
    a: &mut RigQp,
    rig: RoundTripRig<'_>,
    (len, n, wr_id): (u32, u32, u64),
    out: &mut ArrayVec<Completion, { 2 * ROUND_TRIP as usize }>,
) -> Result<()> {
    let slot = rig.inbox.len() / BATCH as u64;
    let mut r = RecvBatch::<{ ROUND_TRIP as usize }>::new(rig.receiver);
    for i in 0..n {
        r.push(wr_id + i as u64, rig.inbox.sge(i as u64 * slot, slot)?)?;
    }
    // SAFETY: the inbox is never read.
    unsafe { rig.receiver.post_recv(&r)? };
    // SAFETY: as in `vs_ours_send`.
    unsafe {
        a.post_with(|s| {
            for i in 0..n {
                s.send(
                    wr_id + i as u64,
                    rig.to,
                    rig.src.sge((i * len) as u64, len as u64)?,
                )?;
            }
            Ok(())
        })?
    };
    collect(rig.cq, out, 2 * n as usize)
}

/// What the round trip uses besides the sender (borrowed beside `&mut` of it).
#[derive(Clone, Copy)]
pub struct RoundTripRig<'r> {
    /// The receiving QP.
    pub receiver: &'r RigQp,
    /// Its receive slots.
    pub inbox: &'r Mr<SharedPd, Vec<u8>>,
    /// The sender's peer for it.
    pub to: &'r Peer<SharedPd>,
    /// The send source.
    pub src: &'r Mr<SharedPd, Vec<u8>>,
    /// The CQ both sides complete on.
    pub cq: &'r ExtCq<std::sync::Arc<Context>>,
}

/// `count` polls of an empty extended CQ; returns how many found a completion (0).
#[no_mangle]
#[inline(never)]
pub fn vs_ours_poll_empty_ex(rig: &Rig, count: u32) -> Result<u32> {
    let mut found = 0;
    for _ in 0..count {
        let mut got = ArrayVec::<Completion, 16>::new();
        if rig.cq_idle.poll(&mut got)? != 0 {
            found += 1;
        }
    }
    Ok(found)
}

/// `count` polls of an empty classic CQ; returns how many found a completion (0).
#[no_mangle]
#[inline(never)]
pub fn vs_ours_poll_empty(rig: &Rig, count: u32) -> Result<u32> {
    let mut found = 0;
    for _ in 0..count {
        let mut got = ArrayVec::<Completion, 16>::new();
        if rig.cq_idle_classic.poll(&mut got)? != 0 {
            found += 1;
        }
    }
    Ok(found)
}

/// Reads [`BATCH`] completions of `cq_b` (extended) into `out`.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_drain_ex(
    rig: &Rig,
    out: &mut ArrayVec<Completion, { BATCH as usize }>,
) -> Result<()> {
    collect(&*rig.cq_b, out, BATCH as usize)
}

/// Reads [`BATCH`] entries of `cq_c` (classic) into `out`, as the provider writes them
/// ([`Cq::poll_wc`], as C keeps its `ibv_wc`s).
#[no_mangle]
#[inline(never)]
pub fn vs_ours_drain(
    rig: &Rig,
    out: &mut ArrayVec<WorkCompletion, { BATCH as usize }>,
) -> Result<()> {
    let mut empty = 0;
    while !out.is_full() {
        if rig.cq_c.poll_wc(out)? == 0 {
            empty += 1;
            if empty == SPIN_LIMIT {
                return Err(Error::Timeout);
            }
        }
    }
    Ok(())
}

/// The C side's `__asm__ volatile("" : : "r"(p) : "memory")`: the compiler must assume
/// that the bytes behind `p` are read here, so they are really written. `black_box(&x)`
/// does that too, but it also stores the pointer itself to the stack: two extra stores
/// per iteration in `endpoint_codec`, which the C loop does not make (and which made it
/// 0.6 ns slower with one instruction more).
#[inline(always)]
fn escape<T>(p: &T) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: the template is empty: it executes nothing, and touches no register, flag
    // or stack memory beyond its input.
    unsafe {
        std::arch::asm!("/* {0} */", in(reg) p as *const T, options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    black_box(p);
}

/// `count` endpoint encodes and decodes; returns a sum of the decoded fields.
#[no_mangle]
#[inline(never)]
pub fn vs_ours_endpoint(gid: &Gid, qpn: u32, qkey: u32, count: u32) -> Result<i64> {
    let mut sum = 0i64;
    for i in 0..count {
        let wire = EndpointInfo::new(*gid, qpn.wrapping_add(i) & MAX_QPN, qkey)?.to_bytes();
        // The bytes go to a peer: they must really be written.
        // As the C side: the bytes, and the decoded GID, must really be written.
        escape(&wire);
        let info = EndpointInfo::parse(&wire)?;
        escape(&info.gid());
        sum += info.qpn() as i64 + info.qkey() as i64;
    }
    Ok(sum)
}
